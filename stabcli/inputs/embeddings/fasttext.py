"""Facebook fastText ``.bin`` models: their **word** vectors, as gensim's
``load_facebook_vectors`` computes them (each word's input row averaged with the rows of
its character n-gram buckets).

Read here, as a stream (so ``.bin.gz`` works, and the bucket rows are summed chunk by
chunk: memory is the word rows plus one chunk, never the whole n-gram matrix). Both
layouts gensim reads: files that start with fastText's magic number (format versions 11
and 12; the version is not checked, as in gensim), and the older files without it, which
start directly with the arguments (``dim``, ``ws``, …) and have no pruning index and no
quantization flags. Supervised (labels) and quantized (``.ftz``) models are refused, as
gensim refuses them. Every count a header announces is checked against the bytes that
follow before anything of that size is allocated.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from stabcli.errors import InputError
from stabcli.inputs.embeddings.bounds import check_ngram_work
from stabcli.inputs.embeddings.core import ByteReader, Embedding, Source, check_keys

MAGIC = 793712314
FASTTEXT_MAGIC = MAGIC.to_bytes(4, "little")
ARGS = struct.Struct("<12id")  # dim ws epoch minCount neg wordNgrams loss model bucket minn maxn lrUpdateRate, t
OLD_ARGS = ARGS  # the same fields; in the old layout they start the file (no magic, no version)
MAX_WORD_BYTES = 1 << 16
CHUNK_ROWS = 1 << 16


@dataclass(frozen=True)
class Args:
    dim: int
    bucket: int
    minn: int
    maxn: int
    new_format: bool
    version: int | None


def _plausible(fields: tuple[Any, ...]) -> bool:
    dim, ws, epoch, min_count, neg, word_ngrams, loss, model, bucket, minn, maxn, lr_update, t = fields
    return (
        0 < dim <= 1_000_000
        and 0 < ws <= 100_000
        and 0 < epoch <= 10_000_000
        and min_count >= 0
        and 0 <= neg <= 100_000
        and 0 < word_ngrams <= 1_000
        and 1 <= loss <= 4
        and 1 <= model <= 3
        and 0 <= bucket <= 1 << 31
        and 0 <= minn <= 1_000
        and 0 <= maxn <= 1_000
        and lr_update > 0
        and 0.0 <= t <= 1.0
    )


def sniff(head: bytes) -> bool:
    """fastText's magic number, or (the older layout) a plausible argument block."""
    if head.startswith(FASTTEXT_MAGIC):
        return True
    return len(head) >= OLD_ARGS.size and _plausible(OLD_ARGS.unpack_from(head))


def _need(path: Path, data: ByteReader, n: int, what: str) -> bytes:
    got = data.read(n)
    if len(got) < n:
        raise InputError(f"{path}: not a readable fastText .bin file (truncated in the {what})")
    return got


def _args(path: Path, data: ByteReader) -> Args:
    head = _need(path, data, 8, "header")
    first, second = struct.unpack("<2i", head)
    new_format = first == MAGIC
    rest = _need(path, data, ARGS.size if new_format else ARGS.size - 8, "header")
    fields = ARGS.unpack(rest) if new_format else ARGS.unpack(head + rest)
    if not _plausible(fields):
        raise InputError(f"{path}: not a readable fastText .bin file (malformed arguments in the header)")
    dim, *_, bucket, minn, maxn, _lr, _t = fields
    return Args(dim, bucket, minn, maxn, new_format, second if new_format else None)


def _vocabulary(path: Path, data: ByteReader, args: Args) -> list[str]:
    size, nwords, nlabels = struct.unpack("<3i", _need(path, data, 12, "dictionary"))
    _need(path, data, 8, "dictionary")  # ntokens
    if nlabels > 0:
        raise InputError(
            f"{path}: a supervised fastText model ({nlabels:,} labels); stabcli reads the word vectors of "
            "unsupervised models (cbow, skipgram), as gensim does"
        )
    if not 0 < nwords == size:
        raise InputError(f"{path}: not a readable fastText .bin file (dictionary of {size} entries, {nwords} words)")
    prune = 0
    if args.new_format:
        (prune,) = struct.unpack("<q", _need(path, data, 8, "dictionary"))
    words: list[str] = []
    for i in range(size):
        raw = data.read_until(b"\x00", MAX_WORD_BYTES)
        if raw is None:
            raise InputError(f"{path}: not a readable fastText .bin file (truncated or malformed at word {i + 1})")
        _need(path, data, 9, "dictionary")  # int64 count, int8 entry type
        words.append(raw.decode("utf-8", errors="backslashreplace"))  # as gensim decodes
    if prune > 0:
        raise InputError(f"{path}: a pruned (quantized) fastText model; stabcli reads unquantized .bin models")
    return words


def _matrix_shape(path: Path, data: ByteReader, args: Args, nwords: int) -> tuple[int, int]:
    if args.new_format and _need(path, data, 1, "input matrix") != b"\x00":
        raise InputError(f"{path}: a quantized fastText model (.ftz); stabcli reads unquantized .bin models")
    rows, cols = struct.unpack("<2q", _need(path, data, 16, "input matrix"))
    if cols != args.dim or rows != nwords + args.bucket:
        raise InputError(
            f"{path}: not a readable fastText .bin file (input matrix {rows} x {cols} for {nwords} words, "
            f"{args.bucket} buckets and dimension {args.dim})"
        )
    return rows, cols


def _ngram_index(words: list[str], args: Args) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bucket, word, n-grams per word) of every character n-gram of every word, sorted by bucket."""
    from gensim.models.fasttext import ft_ngram_hashes

    if args.bucket == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, np.zeros(len(words), dtype=np.int64)
    hashes = [ft_ngram_hashes(w, args.minn, args.maxn, args.bucket) for w in words]
    counts = np.fromiter((len(h) for h in hashes), dtype=np.int64, count=len(words))
    buckets = np.fromiter((b for h in hashes for b in h), dtype=np.int64, count=int(counts.sum()))
    owners = np.repeat(np.arange(len(words), dtype=np.int64), counts)
    order = np.argsort(buckets, kind="stable")
    return buckets[order], owners[order], counts


def read(source: Source) -> Embedding:
    path = source.path
    with source.open() as stream:
        data = ByteReader(stream)
        args = _args(path, data)
        words = _vocabulary(path, data, args)
        rows, dim = _matrix_shape(path, data, args, len(words))
        if source.compression is None and source.size - data.consumed < rows * dim * 4:
            raise InputError(
                f"{path}: not a readable fastText .bin file (truncated: its input matrix needs "
                f"{rows * dim * 4:,} bytes, {source.size - data.consumed:,} follow)"
            )
        word_rows = np.empty((len(words), dim), dtype=np.float32)
        if data.read_into(word_rows) < word_rows.nbytes:
            raise InputError(f"{path}: not a readable fastText .bin file (truncated in the input matrix)")
        if args.bucket:  # the n-gram work is bounded by the file before any n-gram is hashed
            check_ngram_work(path, words, args.minn, args.maxn, source.size)
        buckets, owners, counts = _ngram_index(words, args)
        sums = word_rows.astype(np.float64)
        chunk = np.empty((min(CHUNK_ROWS, max(args.bucket, 1)), dim), dtype=np.float32)
        for lo in range(0, args.bucket, CHUNK_ROWS):
            block = chunk[: min(CHUNK_ROWS, args.bucket - lo)]
            if data.read_into(block) < block.nbytes:
                raise InputError(f"{path}: not a readable fastText .bin file (truncated in the input matrix)")
            a, b = np.searchsorted(buckets, [lo, lo + block.shape[0]])
            np.add.at(sums, owners[a:b], block[buckets[a:b] - lo])
    vectors = (sums / (counts + 1)[:, None]).astype(np.float32)
    check_keys(path, words, unit="word #")
    layout = (
        "fastText .bin" if args.new_format else "fastText .bin (the layout before format versions, no magic number)"
    )
    return Embedding(
        words, vectors, path, read_as=source.described(layout) if source.compression or not args.new_format else ""
    )
