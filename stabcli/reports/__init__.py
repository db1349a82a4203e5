"""Typed reports, their JSON schema and checks, and their renderers (terminal, Markdown, plots)."""
