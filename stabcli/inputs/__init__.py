"""Reading what users have: text files, corpora, label and key-name tables, embedding files."""
