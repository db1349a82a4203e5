"""The chunked, overflow-safe passes every measure shares: row chunks of several runs side by
side, and the power-of-two scale that keeps squares inside float64's range."""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator, Sequence

import numpy as np

CHUNK_ELEMENTS = 1 << 22  # float64 elements per run-stacked chunk (32 MiB)


def row_chunks(
    runs: Sequence[np.ndarray], rotations: Sequence[np.ndarray] | None = None
) -> Iterator[tuple[slice, np.ndarray]]:
    """Yield (row slice, float64 stack [R, c, d]) over the rows, optionally rotated."""
    for rows in row_slices(runs):
        stack = stacked(runs, rows)
        if rotations is not None:
            stack = stack @ np.asarray(rotations)
        yield rows, stack


def stacked(runs: Sequence[np.ndarray], rows: slice) -> np.ndarray:
    """Rows ``rows`` of every run, float64 ``[R, c, d]``."""
    return np.stack([np.asarray(h[rows], dtype=np.float64) for h in runs])


def row_slices(runs: Sequence[np.ndarray]) -> list[slice]:
    """The row slices of ``row_chunks``: ``CHUNK_ELEMENTS`` float64 values of the stacked runs each."""
    return wide_slices(runs, CHUNK_ELEMENTS)


CACHE_ELEMENTS = 1 << 20  # float64 elements per chunk of a pass that also works elementwise (8 MiB)


def wide_chunks(runs: Sequence[np.ndarray], elements: int | None = None) -> Iterator[tuple[slice, np.ndarray]]:
    """Yield (row slice, float64 ``[c, R·d]``) with run r's rows in columns ``r·d … (r+1)·d``,
    converted straight into one reused buffer of about ``elements`` values (default
    ``CACHE_ELEMENTS``): one copy per chunk, no page faults after the first, and elementwise
    work on it stays in cache. The buffer is overwritten by the next chunk."""
    buffer = WideBuffer()
    for rows in wide_slices(runs, elements):
        yield rows, buffer.read(runs, rows)


def wide_slices(runs: Sequence[np.ndarray], elements: int | None = None) -> list[slice]:
    """The row slices of ``wide_chunks``: about ``elements`` (default ``CACHE_ELEMENTS``)
    float64 values of the side-by-side runs each."""
    n, d = runs[0].shape
    step = max(1, (elements or CACHE_ELEMENTS) // (len(runs) * max(d, 1)))
    return [slice(start, min(n, start + step)) for start in range(0, n, step)]


def chunk_bytes(runs: Sequence[np.ndarray], chunks: Sequence[slice]) -> int:
    """Bytes of the largest of ``chunks`` side by side in float64 (one ``WideBuffer`` read)."""
    rows = max((c.stop - c.start for c in chunks), default=0)
    return rows * len(runs) * runs[0].shape[1] * 8


class WideBuffer:
    """A reused float64 buffer per thread for ``[c, R·d]`` chunks of side-by-side runs: a
    worker of ``threads.ordered_map`` reads its chunk into its own buffer, so chunks are
    read in parallel and no page is faulted twice."""

    def __init__(self) -> None:
        self._local = threading.local()

    def read(self, runs: Sequence[np.ndarray], rows: slice) -> np.ndarray:
        """Rows ``rows`` of every run side by side (valid until this thread's next read)."""
        d = runs[0].shape[1]
        shape = (rows.stop - rows.start, len(runs) * d)
        buffer = getattr(self._local, "buffer", None)
        if buffer is None or buffer.shape[0] < shape[0] or buffer.shape[1] != shape[1]:
            buffer = self._local.buffer = np.empty(shape)
        wide = buffer[: shape[0]]
        for r, h in enumerate(runs):
            wide[:, r * d : (r + 1) * d] = h[rows]
        return wide


def peak(x: np.ndarray) -> float:
    """Largest absolute value of ``x`` (0 for an empty array), without an ``abs`` copy."""
    return float(max(x.max(), -x.min())) if x.size else 0.0


def block_scale(*blocks: np.ndarray) -> float:
    """Power of two near the largest entry of ``blocks`` (1 for all-zero blocks), so that
    squares of the divided entries, and their sums, stay in float64's range."""
    largest = max(peak(b) for b in blocks)
    return math.ldexp(1.0, math.frexp(largest)[1]) if largest > 0 and math.isfinite(largest) else 1.0
