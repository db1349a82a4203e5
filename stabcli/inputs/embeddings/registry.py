"""The embedding formats: one entry per format (suffixes, how its first bytes are
recognised, its reader and writer), and the functions that choose one for a file.

A file's compression (gzip, bzip2, xz) is recognised by its first bytes and read as a
stream; the format comes from ``--input-format`` or the suffix under the compression
suffix (``e.vec.gz`` → ``.vec``). A ``.bin`` is fastText when its first bytes say so
(the magic number, or the older layout's argument block) and word2vec binary otherwise;
a ``.txt``/``.vec`` whose first line is a vector rather than ``count dim`` is GloVe.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from stabcli.errors import InputError, OptionError, UsageError, quote
from stabcli.fs.atomic import temp_path
from stabcli.inputs.compressed import compression_of, inner_name, open_stream
from stabcli.inputs.embeddings import fasttext, gensim_kv, npy, parquet, word2vec_binary, word2vec_text
from stabcli.inputs.embeddings.core import Embedding, Source

Reader = Callable[[Source], Embedding]
Writer = Callable[[Path, Path, list[str], np.ndarray], list[tuple[Path, Path]]]
HEAD_BYTES = 1 << 16


@dataclass(frozen=True)
class EmbeddingFormat:
    """One format: its ``--input-format`` name, the suffixes that name it, its reader and
    (for the formats ``featurize`` writes) its writer."""

    name: str
    suffixes: tuple[str, ...]
    read: Reader
    write: Writer | None = None


FORMATS: dict[str, EmbeddingFormat] = {
    f.name: f
    for f in (
        EmbeddingFormat("npy", (".npy",), npy.read, npy.write),
        EmbeddingFormat("word2vec", (".txt", ".vec"), word2vec_text.read, word2vec_text.write),
        EmbeddingFormat("glove", (), word2vec_text.read_glove),
        EmbeddingFormat("word2vec-bin", (".bin",), word2vec_binary.read, word2vec_binary.write),
        EmbeddingFormat("fasttext", (), fasttext.read),
        EmbeddingFormat("kv", (".kv", ".wv", ".model"), gensim_kv.read, gensim_kv.write),
        EmbeddingFormat("parquet", (".parquet",), parquet.read, parquet.write),
    )
}
READ_FORMATS = tuple(FORMATS)
WRITE_FORMATS = tuple(name for name, f in FORMATS.items() if f.write is not None)
_WRITE_SUFFIX = {
    ".npy": "npy",
    ".txt": "word2vec",
    ".vec": "word2vec",
    ".bin": "word2vec-bin",
    ".kv": "kv",
    ".parquet": "parquet",
}
_READ_SUFFIX = {suffix: f.name for f in FORMATS.values() for suffix in f.suffixes}


def format_for(path: Path) -> str | None:
    """The format ``featurize`` writes for a suffix (``.vec`` → ``word2vec``), or None."""
    return _WRITE_SUFFIX.get(path.suffix.lower())


def embedding_suffix(path: Path) -> str | None:
    """The suffix by which a name says "an embedding file" to the readers (``.npy``, ``.vec``,
    ``.wv``, ``.model``…, also under a compression suffix: ``.npy.gz``), or None."""
    inner = inner_name(path)
    if inner.suffix.lower() in _READ_SUFFIX:
        return "".join(path.suffixes[-2:]) if inner != path else path.suffix
    return None


def is_embedding_file(path: Path) -> bool:
    """Whether a ``--script`` output file is an embedding by its suffix (keys files are not)."""
    return inner_name(path).suffix.lower() in _READ_SUFFIX and not path.name.endswith(".keys.txt")


def check_format(fmt: str | None) -> None:
    if fmt is not None and fmt not in READ_FORMATS:
        raise OptionError("input_format", f"unknown format {quote(fmt)} (choose one of {', '.join(READ_FORMATS)})")


@dataclass(frozen=True)
class ReadOptions:
    """How commands read embedding files (the CLI's ``--input-format``, ``--trust-pickle``,
    ``--keys``); checks ``input_format`` on construction."""

    input_format: str | None = None  # one of READ_FORMATS; None: from each file's suffix
    trust_pickle: bool = False  # gensim files may run code: only for files you trust
    keys_file: Path | None = None  # keys for inputs without them (match_inputs)

    def __post_init__(self) -> None:
        check_format(self.input_format)

    def read(self, path: str | Path) -> Embedding:
        """``read_embedding`` with these options."""
        return read_embedding(path, self.input_format, self.trust_pickle)


def source_for(path: Path, trust_pickle: bool = False) -> Source:
    """The ``Source`` a reader is given: compression by magic bytes, the first bytes of the
    decompressed content."""
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    compression = compression_of(path)
    with open_stream(path, compression) as stream:
        head = stream.read(HEAD_BYTES)
    return Source(path, compression, head, path.stat().st_size, trust_pickle)


def detect_format(path: Path, source: Source | None = None) -> str:
    """The reading format of ``path`` from the suffix under any compression suffix; ``.bin``
    by its first bytes (fastText or word2vec binary)."""
    fmt = _READ_SUFFIX.get(inner_name(path).suffix.lower())
    if fmt is None:
        raise InputError(
            f"{path}: unknown embedding format (expected one of {', '.join(sorted(_READ_SUFFIX))}, "
            "optionally compressed as .gz, .bz2 or .xz, or give --input-format)"
        )
    if fmt == "word2vec-bin":
        source = source or source_for(path)
        if fasttext.sniff(source.head) and not word2vec_binary.sniff(source.head):
            return "fasttext"
    return fmt


def read_embedding(path: str | Path, fmt: str | None = None, trust_pickle: bool = False) -> Embedding:
    """Read one embedding file; the format comes from ``fmt`` (one of ``READ_FORMATS``) or,
    when None, from the suffix (a ``.bin`` by its first bytes: fastText or word2vec).
    gzip, bzip2 and xz files are read as streams.

    ``trust_pickle`` loads gensim files with the ordinary unpickler, which runs any code the
    file holds; by default only gensim's own classes are admitted (``stabcli.inputs.safe_pickle``).

    Raises
    ------
    InputError
        Missing file, unknown suffix, malformed content, vectors that are not real numbers,
        or keys that do not match rows.
    """
    path = Path(path)
    check_format(fmt)
    source = source_for(path, trust_pickle)
    fmt = fmt or detect_format(path, source)
    if fmt == "fasttext" and not fasttext.sniff(source.head):
        raise InputError(f"{path}: not a fastText .bin file (it does not start with fastText's magic number)")
    return FORMATS[fmt].read(source)


def check_keys_writable(path: Path, fmt: str, keys: Sequence[str]) -> None:
    """InputError naming ``path`` unless the reader of ``fmt`` reads back exactly ``keys``:
    at least one, non-empty, unique, UTF-8, without whitespace (word2vec text and binary)
    or line breaks (the ``.npy`` keys file). Call it before computing what to write."""
    if not keys:
        raise InputError(f"{path}: nothing to write (0 rows)")
    seen: set[str] = set()
    for key in keys:
        if not isinstance(key, str) or key == "":
            raise InputError(f"{path}: cannot write an empty or non-string key ({quote(key)})")
        if key in seen:
            raise InputError(f"{path}: cannot write key {quote(key)} twice")
        seen.add(key)
        if fmt in ("word2vec", "word2vec-bin") and any(c.isspace() for c in key):
            raise InputError(
                f"{path}: key {quote(key)} contains whitespace, which {fmt} cannot store (choose npy, kv or parquet)"
            )
        if fmt == "npy" and ("\n" in key or "\r" in key):
            raise InputError(
                f"{path}: key {quote(key)} contains a line break, which a keys file cannot store (choose kv or parquet)"
            )
        try:
            key.encode("utf-8")
        except UnicodeEncodeError:
            raise InputError(f"{path}: key {quote(key)} is not valid Unicode (cannot be written as UTF-8)") from None


def check_writable(path: Path, fmt: str, keys: Sequence[str], vectors: np.ndarray) -> None:
    """``check_keys_writable``, and float32 ``vectors`` with at least one column and only
    finite values (a float64 beyond float32's range becomes inf, which no reader accepts)."""
    if vectors.shape[0] == 0 or vectors.shape[1] == 0:
        raise InputError(f"{path}: nothing to write ({vectors.shape[0]} rows, {vectors.shape[1]} columns)")
    check_keys_writable(path, fmt, keys)
    ok = np.isfinite(vectors).all(axis=1)
    if not ok.all():
        raise InputError(
            f"{path}: cannot write key {quote(keys[int(np.argmin(ok))])}: its values are NaN, infinite "
            "or beyond float32's range"
        )


def write_embedding(path: str | Path, keys: list[str], vectors: np.ndarray, fmt: str | None = None) -> None:
    """Write keys and float32 vectors to ``path`` atomically (temporary name, then rename).

    ``fmt`` is one of ``WRITE_FORMATS``; ``None`` chooses it from the suffix.
    """
    path = Path(path)
    fmt = fmt or format_for(path)
    if fmt not in WRITE_FORMATS:
        raise UsageError(f"{path}: unknown output format (choose one of {', '.join(WRITE_FORMATS)})")
    with np.errstate(over="ignore", invalid="ignore"):
        vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim != 2 or len(keys) != vectors.shape[0]:
        raise ValueError(f"{len(keys)} keys for a matrix of shape {vectors.shape}")
    check_writable(path, fmt, keys, vectors)
    writer = FORMATS[fmt].write
    assert writer is not None
    tmp = temp_path(path)
    for src, dst in writer(path, tmp, list(keys), vectors):
        os.replace(src, dst)
