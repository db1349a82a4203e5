"""Streaming an embedding through alignment and random Fourier features, a cache-sized chunk
at a time, into an ``.npy`` file or an array: the compute loop of ``stabcli featurize``.

Every chunk is computed in float32 into reused buffers (in float64 for a block float32
cannot normalize or hold), and a block that is not finite is refused, never written.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np

from stabcli.errors import InputError, OptionError, quote
from stabcli.inputs.embeddings import Embedding, fits_float32, require_finite
from stabcli.measure.fourier import aligned_chunk_rows, blocked_matmul, fourier_features
from stabcli.measure.metrics import SMALLEST_RELIABLE_NORM32, inverse_norms, row_norms, unit_rows

if TYPE_CHECKING:
    from stabcli.commands.featurize import FeaturizeOptions


# Output bytes per chunk by default: the chunk's buffers stay in a core's L2 cache. On the
# benchmark machine about 1 MB was fastest or within noise of it at M = 128, 512 and 2,048
# (benchmarks/bench_featurize.py --chunk-sweep).
CHUNK_BYTES = 1 << 20


def chunk_rows_for(chunk_rows: int | None, width: int) -> int:
    """Rows per chunk: ``--chunk-rows`` or about CHUNK_BYTES of output, rounded up to whole
    GEMM blocks so every chunk starts where the unchunked product starts a block (a row's
    bits then never depend on the chunk size)."""
    return aligned_chunk_rows(chunk_rows or CHUNK_BYTES // (4 * width))


def _float32_carries(block: np.ndarray, norms: np.ndarray) -> bool:
    """Whether normalizing and projecting ``block`` in float32 is exact to float32 precision:
    no NaN, inf or overflowing squares, and no nonzero row so small its squares underflow."""
    low, high = norms.min(), norms.max()  # NaN propagates
    if not (math.isfinite(low) and math.isfinite(high)):
        return False
    return low >= SMALLEST_RELIABLE_NORM32 or not block[norms < SMALLEST_RELIABLE_NORM32].any()


def feature_chunks(
    emb: Embedding,
    rotation: np.ndarray | None,
    directions: np.ndarray | None,
    options: FeaturizeOptions,
    buffers: int = 1,
) -> Iterator[tuple[int, np.ndarray]]:
    """The output, chunk by chunk: (first row, float32 rows) after alignment and features.

    Computed in float32 (in float64 for a block float32 cannot normalize or hold) into
    ``buffers`` reused arrays that stay in cache: a yielded block is overwritten ``buffers``
    chunks later. A block that is not finite is refused, never yielded.
    """
    n = emb.vectors.shape[0]
    chunk_rows = chunk_rows_for(options.chunk_rows, output_width(emb, directions))
    rotation32 = None if rotation is None else rotation.astype(np.float32)
    if directions is not None:
        # |x·u| <= ‖x‖‖u‖ (Cauchy–Schwarz): below this bound a float32 projection cannot overflow
        # and the features are finite without a pass over them
        with np.errstate(over="ignore"):
            longest_direction = float(np.linalg.norm(directions, axis=0).max())
        rows, k = min(chunk_rows, n), directions.shape[1]
        work = np.empty((rows, k), np.float32)
        outs = [np.empty((rows, 2 * k), np.float32) for _ in range(buffers)]
    for chunk, start in enumerate(range(0, n, chunk_rows)):
        raw = emb.vectors[start : start + chunk_rows]
        with np.errstate(over="ignore"):  # float64 beyond float32's range: redone in float64 below
            block = np.asarray(raw, dtype=np.float32)
        inverse, finite = None, False
        if directions is not None and options.normalize:
            norms = row_norms(block)  # NaN/inf rows show up here: no separate pass over the block
            carries = _float32_carries(block, norms)
            if carries:
                inverse = inverse_norms(block, norms)
                finite = rotation is None and max(float(norms.max()), 1.0) * longest_direction < _SAFE_FLOAT32
        else:
            with np.errstate(over="ignore", invalid="ignore"):
                carries = bool(np.isfinite(block.sum()))  # a sum that overflows only costs the float64 path
        if carries and raw.dtype != np.float32 and not fits_float32(raw):
            carries = False  # float32 would flush 1e-300 rows to zero (or 1e300 to inf): float64 path
        if not carries:
            require_finite(emb.source, emb.keys, raw, start)  # raises, unless float32 is the problem
            block, inverse, finite = np.asarray(raw, dtype=np.float64), None, False
            if directions is not None and options.normalize:
                block = unit_rows(block)  # any magnitude (1e300 rows): ‖x‖² would overflow float64
        if rotation is not None and rotation32 is not None:
            block = blocked_matmul(block, rotation32 if block.dtype == np.float32 else rotation)
        if directions is not None:
            block = fourier_features(
                block,
                directions,
                options.normalize,
                out=outs[chunk % buffers][: block.shape[0]],
                inverse=inverse,
                work=work if block.dtype == np.float32 else None,
            )
        yield start, block if finite else _finite_float32(block, emb, start, options, directions is not None)


_SAFE_FLOAT32 = 1e37  # an order of magnitude below float32's largest value


def _finite_float32(
    block: np.ndarray, emb: Embedding, start: int, options: FeaturizeOptions, featurized: bool
) -> np.ndarray:
    """``block`` as float32, or an error naming the first key whose output is not finite."""
    with np.errstate(over="ignore", invalid="ignore"):
        block = np.asarray(block, dtype=np.float32)
        if np.isfinite(block.sum()):  # one fast pass; a sum that overflows only costs the row check
            return block
    finite = np.isfinite(block).all(axis=1)
    if finite.all():
        return block
    key = emb.keys[start + int(np.argmin(finite))]
    if featurized:
        raise OptionError(
            "sigma",
            f"{options.sigma:g} makes the features of key {quote(key)} in {emb.source} NaN "
            f"(the projection h·U overflows); choose a smaller --sigma",
        )
    raise InputError(f"{emb.source}: key {quote(key)}: aligned values exceed the float32 range of the output")


def output_width(emb: Embedding, directions: np.ndarray | None) -> int:
    return emb.dim if directions is None else 2 * directions.shape[1]


def write_npy(
    emb: Embedding,
    file: BinaryIO,
    rotation: np.ndarray | None,
    directions: np.ndarray | None,
    options: FeaturizeOptions,
) -> None:
    """Stream ``emb`` as a float32 ``.npy`` into ``file``, a chunk in memory at a time; a
    writer thread saves one chunk while the next is computed."""
    header = {
        "descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)),
        "fortran_order": False,
        "shape": (emb.vectors.shape[0], output_width(emb, directions)),
    }

    def save(data: Any) -> None:
        file.write(data)

    with ThreadPoolExecutor(1) as writer:
        np.lib.format.write_array_header_1_0(file, header)
        pending = None
        for _, block in feature_chunks(emb, rotation, directions, options, buffers=2):
            if pending is not None:
                pending.result()  # its buffer is the one the next chunk overwrites
            pending = writer.submit(save, np.ascontiguousarray(block))
        if pending is not None:
            pending.result()


def features_in_memory(
    emb: Embedding, rotation: np.ndarray | None, directions: np.ndarray | None, options: FeaturizeOptions
) -> np.ndarray:
    out = np.empty((emb.vectors.shape[0], output_width(emb, directions)), dtype=np.float32)
    for start, block in feature_chunks(emb, rotation, directions, options):
        out[start : start + block.shape[0]] = block
    return out


def memory_needed(rows: int, input_dim: int, dim: int, chunk_rows: int | None, fmt: str) -> int:
    """Bytes featurize allocates: the directions (float64 and a float32 copy), one chunk's
    buffers (input block, projection, two output buffers) and, for formats written from
    memory (all but npy), the whole output."""
    width = dim or input_dim
    rows_per_chunk = min(chunk_rows_for(chunk_rows, width), rows)
    directions = input_dim * (dim // 2) * 12
    chunk = rows_per_chunk * (input_dim * 8 + (dim // 2) * 4 + 2 * width * 4)
    whole = 0 if fmt == "npy" else rows * width * 4
    return directions + chunk + whole
