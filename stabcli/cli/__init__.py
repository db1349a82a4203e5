"""The command line: parse options, call one library entry point, render, pick the exit code."""

from stabcli.cli.app import main

__all__ = ["main"]
