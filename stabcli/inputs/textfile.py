"""Reading text files as users have them: gzip/bzip2/xz-compressed (streamed), byte-order
marks, UTF-16, CRLF, and refusing what is not a regular text file (directories, FIFOs,
devices, zstd or zip archives, binary files).

Shared by the corpus and the label readers. Decoding is strict: an undecodable byte is an
error naming the file, the line and the column, never silently replaced.
"""

from __future__ import annotations

import codecs
import csv
import os
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from stabcli.errors import InputError, OptionError, quote
from stabcli.inputs.compressed import compression_of, open_stream

BLOCK = 1 << 20

# longest first: the UTF-32 LE mark starts with the UTF-16 LE one
BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)


def check_encoding(param: str, encoding: object) -> str:
    """The canonical codec name of ``encoding``; an unknown or non-text codec is an
    ``OptionError`` naming ``param`` (checked before any file is opened)."""
    if not isinstance(encoding, str) or not encoding.strip():
        raise OptionError(param, f"expected an encoding name such as utf-8, latin-1 or utf-16, got {quote(encoding)}")
    try:
        info = codecs.lookup(encoding)
    except (LookupError, ValueError):  # ValueError: a name with a NUL character
        raise OptionError(
            param, f"unknown encoding {quote(encoding)}; use a name such as utf-8, latin-1, cp1252 or utf-16"
        ) from None
    if not getattr(info, "_is_text_encoding", True):
        raise OptionError(
            param, f"{quote(encoding)} is not a text encoding; use a name such as utf-8, latin-1 or utf-16"
        )
    return info.name


def check_regular_file(path: Path, what: str = "file") -> None:
    """Refuse a missing path, a directory, and anything that is not a regular file (a FIFO
    or a device such as /dev/zero would hang or never end) before opening it."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None
    if stat.S_ISDIR(mode):
        raise InputError(f"{path}: is a directory, not a {what}")
    if not stat.S_ISREG(mode):
        kind = (
            "a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket"
        )
        raise InputError(f"{path}: is {kind}, not a regular file; write it to a regular file first")


def sniff_encoding(path: Path, encoding: str, what: str = "file") -> tuple[str, int]:
    """(codec, bytes to skip): a byte-order mark decides the encoding and is skipped. A
    gzip, bzip2 or xz file is looked into (its decompressed start); zstd and zip files are
    refused naming the tool that unpacks them."""
    check_regular_file(path, what)
    with open_stream(path, compression_of(path)) as fh:
        head = fh.read(8)
    for bom, codec in BOMS:
        if head.startswith(bom):
            return codec, len(bom)
    codec = codecs.lookup(encoding).name
    return (codec + "-le" if codec in ("utf-16", "utf-32") else codec), 0  # no mark: little-endian, as Windows writes


def _ascii_compatible(codec: str) -> bool:
    return not codec.startswith(("utf-16", "utf-32"))


def text_lines(path: str | Path, encoding: str = "utf-8") -> Iterator[tuple[int, str]]:
    """Yield (line number, decoded line without its ``\\n`` or ``\\r\\n``), every line
    including empty ones. gzip, bzip2 and xz files are decompressed as they are read. A
    byte-order mark is skipped (and selects UTF-8/16/32); NUL bytes and undecodable bytes
    are errors naming the line."""
    path = Path(path)
    for first, text in text_blocks(path, encoding):
        yield from block_lines(path, first, text)


def block_lines(path: Path, first: int, text: str) -> Iterator[tuple[int, str]]:
    """The numbered lines of one ``text_blocks`` block starting at line ``first`` (one
    trailing ``\\r`` stripped per line); a NUL character is an error naming its line."""
    parts = text.split("\n")
    if parts[-1] == "":
        parts.pop()
    for lineno, line in enumerate(parts, first):
        if "\x00" in line:
            raise InputError(f"{path}:{lineno}: contains NUL characters; this looks like a binary file, not text")
        yield lineno, line[:-1] if line.endswith("\r") else line


def text_blocks(path: Path, encoding: str = "utf-8") -> Iterator[tuple[int, str]]:
    """Yield (number of its first line, text) of whole lines, each ending in ``\\n`` (the
    file's last line may lack it), one block per 1 MiB read: ``text_lines`` without splitting
    the lines, with the same errors at the same point of the file (NUL bytes, undecodable
    bytes; NUL characters are left to ``block_lines``)."""
    codec, skip = sniff_encoding(path, encoding)
    decoder = codecs.getincrementaldecoder(codec)(errors="strict")
    lineno = 1
    pending: list[str] = []  # the current line's text so far (no newline in it)
    with open_stream(path, compression_of(path)) as fh:
        fh.read(skip)
        while True:
            block = fh.read(BLOCK)
            final = not block
            if _ascii_compatible(codec) and b"\x00" in block:
                nul_line = lineno + block[: block.index(b"\x00")].count(b"\n")
                raise InputError(
                    f"{path}:{nul_line}: contains NUL bytes; this looks like a binary file, not text "
                    f"(a UTF-16 file without a byte-order mark needs --encoding utf-16)"
                )
            try:
                text = decoder.decode(block, final)
            except UnicodeDecodeError as exc:
                raise _decode_error(path, codec, "".join(pending), lineno, exc) from None
            cut = text.rfind("\n") + 1
            if cut:
                whole = "".join(pending) + text[:cut]
                pending = [text[cut:]] if cut < len(text) else []
                yield lineno, whole
                lineno += whole.count("\n")
            elif text:
                pending.append(text)
            if final:
                break
    if pending:
        yield lineno, "".join(pending)


def _decode_error(path: Path, codec: str, pending: str, lineno: int, exc: UnicodeDecodeError) -> InputError:
    data = exc.object
    try:
        before = pending + data[: exc.start].decode(codec)
    except UnicodeDecodeError:
        before = pending
    line = lineno + before.count("\n")
    column = len(before) - (before.rfind("\n") + 1) + 1
    return InputError(
        f"{path}:{line}: not valid {codec} (byte 0x{data[exc.start]:02x} at column {column}); "
        f"re-encode the file or pass --encoding"
    )


@contextmanager
def csv_field_limit_lifted() -> Iterator[None]:
    """The csv module refuses fields over 131,072 characters; our files may hold longer ones.
    Lifts the process-wide limit for the duration and restores it."""
    old = csv.field_size_limit()
    csv.field_size_limit(sys.maxsize)
    try:
        yield
    finally:
        csv.field_size_limit(old)
