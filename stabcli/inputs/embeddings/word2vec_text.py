"""word2vec text (``.txt``, ``.vec``): a header ``count dim``, then ``key v1 … vd`` per line;
and GloVe text, the same lines without the header (recognised and said so)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from stabcli.errors import InputError
from stabcli.inputs.embeddings.core import Embedding, RowBuffer, Source, check_keys, shown

BOM = b"\xef\xbb\xbf"
GLOVE = "GloVe text (no header line)"


def parse_header(path: Path, line: bytes) -> tuple[int, int]:
    parts = line.split()
    try:
        count, dim = (int(p) for p in parts)
    except ValueError:
        raise InputError(f"{path}:1: expected a word2vec header 'count dim', found {shown(line)}") from None
    if count < 1 or dim < 1:
        raise InputError(f"{path}:1: word2vec header says {count} vectors of dimension {dim}")
    return count, dim


def row_limit(path: Path, count: int, dim: int, remaining: int | None, min_row_bytes: int) -> int:
    """The rows to make room for: the header's ``count``, but never more than the
    ``remaining`` bytes (None: unknown, a compressed file) can hold at ``min_row_bytes``
    each: a header alone never decides an allocation."""
    if remaining is None:
        return count
    fit = (remaining + 1) // min_row_bytes  # the last row's newline is optional
    if fit == 0:
        raise InputError(
            f"{path}:1: word2vec header says {count} vectors of dimension {dim}, but the "
            f"{remaining:,} bytes after it cannot hold even one"
        )
    return min(count, fit)


def glove_line(line: bytes) -> bool:
    """Whether ``line`` reads as ``key v1 … vd`` (a key, then d ≥ 1 numbers): GloVe's first
    line. (``count dim`` reads so too: ``read`` tells them apart.)"""
    fields = line.strip().split(b" ")
    return len(fields) >= 2 and _is_number(fields[-1].decode("latin-1"))


def _is_number(field: str) -> bool:
    try:
        float(field)
    except ValueError:
        return False
    return True


def _row(path: Path, lineno: int, raw: bytes, dim: int | None) -> tuple[str, np.ndarray]:
    """``key v1 … vd``. A key may hold spaces (GloVe 840B has ``. . .`` and ``at name@domain``
    keys): with ``dim`` known, the last ``dim`` fields are the vector and the rest the key, as
    long as the extra fields are not all numbers (a row with one value too many stays an error).
    ``dim`` None (GloVe's first line): the trailing numbers are the vector."""
    try:
        fields = raw.decode("utf-8").rstrip("\r\n").rstrip(" ").split(" ")
    except UnicodeDecodeError:
        raise InputError(f"{path}:{lineno}: not valid UTF-8") from None
    if dim is None:  # the trailing numbers, after a key of at least one field
        dim = 0
        while dim < len(fields) - 1 and _is_number(fields[-dim - 1]):
            dim += 1
    if len(fields) > dim + 1 and dim > 0 and not all(_is_number(f) for f in fields[1:-dim]):
        fields = [" ".join(fields[:-dim]), *fields[-dim:]]
    if len(fields) != dim + 1:
        raise InputError(f"{path}:{lineno}: expected {dim + 1} fields (key + {dim} values), found {len(fields)}")
    try:
        row = np.asarray(fields[1:], dtype=np.float64)
    except ValueError:
        raise InputError(f"{path}:{lineno}: vector values are not all numbers") from None
    return fields[0], row


def read(source: Source, glove: bool | None = None) -> Embedding:
    """word2vec text, or GloVe (``glove`` True, or None: when the first line is a vector).
    A first line ``A B`` of two integers is a header, as gensim reads it, unless the next
    line is ``key value`` and B is not 1: then it is a GloVe file of dimension 1."""
    path = source.path
    with source.open() as stream:
        header = stream.readline(1 << 22)
        first = header.removeprefix(BOM)
        second = b""
        if glove is None:
            glove = glove_line(first)
            if glove and _is_count_dim(first):
                second = stream.readline(1 << 22)
                glove = first.split()[1] != b"1" and len(second.split()) == 2
        lines = itertools.chain([second] if second else [], stream)
        if glove:
            return _read_glove(source, lines, first)
        count, dim = parse_header(path, first)
        # a row is at least a 1-character key and dim 1-digit values, space-separated, plus a newline
        remaining = None if source.compression else source.size - len(header)
        rows = RowBuffer(dim, row_limit(path, count, dim, remaining, 2 * dim + 2))
        keys: list[str] = []
        for lineno, raw in enumerate(lines, start=2):
            if not raw.strip():
                continue
            if len(keys) == count:
                raise InputError(f"{path}:{lineno}: more vectors than the header's {count}")
            if len(keys) == rows.limit:  # cannot happen: the matrix holds every row the file can
                raise InputError(f"{path}: header says {count} vectors, more than the file can hold")
            key, row = _row(path, lineno, raw, dim)
            rows.append(row)
            keys.append(key)
    if len(keys) != count:
        raise InputError(f"{path}: header says {count} vectors, found {len(keys)}")
    check_keys(path, keys)
    read_as = source.described("word2vec text") if source.compression else ""
    return Embedding(keys, rows.result(), path, read_as=read_as)


def _is_count_dim(line: bytes) -> bool:
    parts = line.split()
    return len(parts) == 2 and all(p.isdigit() for p in parts)


def _read_glove(source: Source, stream: Iterable[bytes], first: bytes) -> Embedding:
    path = source.path
    key, row = _row(path, 1, first, None)
    dim = row.shape[0]
    if dim == 0:
        raise InputError(f"{path}:1: expected a word2vec header 'count dim' or a GloVe line 'key v1 … vd'")
    rows = RowBuffer(dim)
    rows.append(row)
    keys = [key]
    for lineno, raw in enumerate(stream, start=2):
        if not raw.strip():
            continue
        key, row = _row(path, lineno, raw, dim)
        rows.append(row)
        keys.append(key)
    check_keys(path, keys)
    return Embedding(keys, rows.result(), path, read_as=source.described(GLOVE))


def read_glove(source: Source) -> Embedding:
    """``--input-format glove``: every line is a vector."""
    return read(source, glove=True)


def write(path: Path, tmp: Path, keys: list[str], vectors: np.ndarray) -> list[tuple[Path, Path]]:
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(f"{vectors.shape[0]} {vectors.shape[1]}\n")
        for key, row in zip(keys, vectors, strict=False):
            fh.write(key + " " + " ".join(repr(float(v)) for v in row) + "\n")
    return [(tmp, path)]
