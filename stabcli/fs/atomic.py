"""Atomic file writes, and the one place that spells stabcli's temporary names and hashes files.

A writer writes into a temporary name in the target's directory, fsyncs it and renames it
over the target, so a reader sees the old file or the new one, never half of one. A
failure (or Ctrl-C) removes the temporary file.

Temporary names are ``.NAME.tmp-PID`` (a file being written), ``.NAME.partial-PID`` (a
directory being built) and ``.NAME.old-PID`` (a directory moved aside while its
replacement is renamed in), optionally followed by a suffix such as ``.npz``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

TEMP_KINDS = ("tmp", "partial", "old")
_TEMP_RE = re.compile(r"^\..+\.(tmp|partial|old)-\d+(\..*)?$")


def temp_path(path: Path, suffix: str = "", *, kind: str = "tmp") -> Path:
    """The temporary name this process writes ``path`` under: ``.NAME.KIND-PID`` + ``suffix``,
    ``kind`` one of :data:`TEMP_KINDS`."""
    if kind not in TEMP_KINDS:
        raise ValueError(f"kind {kind!r}: expected one of {', '.join(TEMP_KINDS)}")
    return path.with_name(f".{path.name}.{kind}-{os.getpid()}{suffix}")


def is_temp_name(name: str) -> bool:
    """Whether ``name`` is a temporary name of some stabcli process (:func:`temp_path`)."""
    return bool(_TEMP_RE.match(name))


def file_sha256(path: str | Path) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@contextmanager
def atomic_path(path: str | Path, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success fsync it and rename it over ``path``.

    ``suffix`` keeps writers that append their own extension happy (``np.savez`` adds
    ``.npz`` unless the name ends with it). On any exception the temporary file is removed
    and the target is left as it was.

    Examples
    --------
    >>> with atomic_path(target) as tmp:  # doctest: +SKIP
    ...     np.save(tmp, vectors)
    """
    path = Path(path)
    tmp = temp_path(path, suffix)
    try:
        yield tmp
        _fsync(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_text_atomic(path: str | Path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: str | Path, data: Any) -> None:
    """Write JSON (indented, no NaN: a non-finite number is a bug in the caller) atomically."""
    write_text_atomic(path, json.dumps(data, indent=2, allow_nan=False) + "\n")


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
