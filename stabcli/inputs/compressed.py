"""Compressed input files, read as streams: gzip, bzip2 and xz are decompressed block by
block while they are read (never to disk, memory bounded by the reader's block), for every
corpus, label, key-name and embedding format.

The compression is recognised by the file's first bytes, not its name, so ``c.txt.gz``
and a gzip file without the suffix read alike; the suffix underneath (``.vec`` of
``e.vec.gz``) names the format. zstd and zip are refused in one line naming the command
that unpacks them (zstd needs a decoder the Python standard library gains only in 3.14).
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from stabcli.errors import InputError

# magic bytes -> (name, description)
STREAMED = (
    (b"\x1f\x8b", "gzip", "gzip-compressed"),
    (b"BZh", "bzip2", "bzip2-compressed"),
    (b"\xfd7zXZ\x00", "xz", "xz-compressed"),
)
REFUSED = (
    (b"\x28\xb5\x2f\xfd", "zstd-compressed", "unzstd"),
    (b"PK\x03\x04", "a zip archive", "unzip"),
)
SUFFIXES = {".gz": "gzip", ".gzip": "gzip", ".bz2": "bzip2", ".xz": "xz", ".lzma": "xz", ".zst": "zstd"}


def compression_of(path: Path) -> str | None:
    """``gzip``, ``bzip2`` or ``xz`` when the file starts with that format's magic bytes,
    None for an uncompressed file; InputError for zstd and zip (with the unpacking command)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None
    return compression_of_head(path, head)


def compression_of_head(path: Path, head: bytes) -> str | None:
    """``compression_of`` for the file's first bytes ``head`` (at least 6)."""
    for magic, name, _ in STREAMED:
        if head.startswith(magic):
            return name
    for magic, kind, tool in REFUSED:
        if head.startswith(magic):
            raise InputError(
                f"{path}: is {kind}, which stabcli does not read (gzip, bzip2 and xz are read directly); "
                f"unpack it first ({tool} {path.name}) or recompress it with gzip or xz"
            )
    return None


def inner_name(path: Path) -> Path:
    """``path`` without a compression suffix: ``e.vec.gz`` → ``e.vec`` (the format's suffix)."""
    return path.with_suffix("") if path.suffix.lower() in SUFFIXES else path


def _open(path: Path, compression: str | None) -> BinaryIO:
    if compression == "gzip":
        return gzip.open(path, "rb")  # type: ignore[return-value]
    if compression == "bzip2":
        return bz2.open(path, "rb")  # type: ignore[return-value]
    if compression == "xz":
        return lzma.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")


@contextmanager
def open_stream(path: Path, compression: str | None = None) -> Iterator[BinaryIO]:
    """The decompressed bytes of ``path`` as a binary stream (``compression`` as
    ``compression_of`` says; None reads the file as it is). Corrupt or truncated compressed
    data, raised anywhere while the stream is read, becomes an InputError naming the file."""
    try:
        with _open(path, compression) as stream:
            yield stream
    except (EOFError, zlib.error, lzma.LZMAError, gzip.BadGzipFile) as exc:
        if compression is None:  # a reader's own end of input (pickle's "Ran out of input"): its to say
            raise
        raise InputError(f"{path}: {compression} data is truncated or corrupt ({_reason(exc)})") from None
    except OSError as exc:
        if compression is not None and exc.errno is None:  # bz2's "Invalid data stream" and kin
            raise InputError(f"{path}: {compression} data is truncated or corrupt ({_reason(exc)})") from None
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None


def read_all(path: Path) -> bytes:
    """The whole decompressed content of a small input (a keys or frequencies file), gzip,
    bzip2, xz or plain; errors name the file."""
    with open_stream(path, compression_of(path)) as stream:
        return stream.read()


def _reason(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:80]
