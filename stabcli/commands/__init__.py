"""One library entry point per command: what the CLI and the Python API call."""
