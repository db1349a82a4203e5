"""Bundled synthetic sample data (installed as ``stabcli.sample_data``); see README.md here."""
