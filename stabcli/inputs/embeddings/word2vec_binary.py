"""word2vec binary (``.bin``): a header line ``count dim``, then per row the key, a space
and ``dim`` little-endian float32 (a newline after each row is optional)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from stabcli.errors import InputError
from stabcli.inputs.embeddings.core import ByteReader, Embedding, RowBuffer, Source, check_keys
from stabcli.inputs.embeddings.word2vec_text import parse_header, row_limit

MAX_KEY_BYTES = 10_000


def read(source: Source) -> Embedding:
    path = source.path
    with source.open() as stream:
        data = ByteReader(stream)
        header = data.read_until(b"\n", 1 << 12)
        if header is None:
            raise InputError(f"{path}: no word2vec header line")
        count, dim = parse_header(path, header)
        row_bytes = 4 * dim
        # a row is at least a 1-byte key, a space and dim float32 values (gensim writes no newline)
        remaining = None if source.compression else source.size - len(header) - 1
        limit = row_limit(path, count, dim, remaining, row_bytes + 2)
        rows = RowBuffer(dim, limit)
        keys: list[str] = []
        for row in range(count):
            data.skip_while(b"\n ")
            if row >= limit:  # the rest of the file cannot hold another row
                raise InputError(f"{path}: vector {row + 1} of {count}: file ends early (truncated?)")
            key = data.read_until(b" ", MAX_KEY_BYTES)
            if key is None:
                if data.at_end():
                    raise InputError(f"{path}: vector {row + 1} of {count}: file ends early (truncated?)")
                raise InputError(f"{path}: vector {row + 1} of {count}: truncated or missing key")
            try:
                keys.append(key.decode("utf-8"))
            except UnicodeDecodeError:
                raise InputError(f"{path}: vector {row + 1}: key is not valid UTF-8") from None
            values = data.read(row_bytes)
            if len(values) < row_bytes:
                raise InputError(f"{path}: vector {row + 1} of {count}: file ends early (truncated?)")
            rows.append(np.frombuffer(values, dtype="<f4"))
        data.skip_while(b"\n \r\t")
        if not data.at_end():
            extra = len(data.read(1 << 20))
            raise InputError(
                f"{path}: {extra:,}{'+' if extra == 1 << 20 else ''} bytes after the {count} vectors the header announces"
            )
    check_keys(path, keys)
    read_as = source.described("word2vec binary") if source.compression else ""
    return Embedding(keys, rows.result(), path, read_as=read_as)


def sniff(head: bytes) -> bool:
    """A first line that is ``count dim`` in ASCII digits."""
    line = head.split(b"\n", 1)[0].split()
    return b"\n" in head and len(line) == 2 and all(p.isdigit() for p in line)


def write(path: Path, tmp: Path, keys: list[str], vectors: np.ndarray) -> list[tuple[Path, Path]]:
    with open(tmp, "wb") as fh:
        fh.write(f"{vectors.shape[0]} {vectors.shape[1]}\n".encode())
        little = vectors.astype("<f4")
        for key, row in zip(keys, little, strict=False):
            fh.write(key.encode("utf-8") + b" " + row.tobytes() + b"\n")
    return [(tmp, path)]
