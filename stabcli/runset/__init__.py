"""Run sets: the on-disk contract between commands (layout, manifest, writer, reader)."""
