"""Runs that are not independent: identical, or exact rotations of each other (a ``--script``
that ignores ``{seed}``). Their noise is zero by construction, so a noise band built from
them has zero width and every real change would look significant."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np

from stabcli.measure.align import procrustes_residual
from stabcli.reports.schema import doc

# relative Procrustes residual below which two runs are the same up to a rotation: float32
# storage of a rotated copy leaves about 1e-7; two word2vec seeds leave 0.3 to 1.4
SAME_UP_TO_ROTATION = 1e-4
SAMPLE_ROWS = 4096


def _sample(n: int, dim: int) -> np.ndarray:
    """Evenly spaced row indices: all rows, or enough to pin a rotation (many more than dim)."""
    size = max(SAMPLE_ROWS, 8 * dim)
    return np.arange(n) if n <= size else np.linspace(0, n - 1, size).astype(np.int64)


def same_runs(runs: Sequence[np.ndarray], tolerance: float = SAME_UP_TO_ROTATION) -> list[tuple[int, int]]:
    """Pairs ``(r, s)`` of runs (rows matched by key) that are identical or exact rotations of
    each other, judged on an evenly spaced sample of rows (identical runs are identical on
    every subset). O(R·rows·d), plus rows·d² for each pair of equal norm, with at most
    ``max(4096, 8d)`` rows."""
    if len(runs) < 2:
        return []
    n, dim = runs[0].shape
    rows = _sample(n, dim)
    sampled = [np.asarray(run[rows], dtype=np.float64) for run in runs]
    peak = max(float(np.max(np.abs(x), initial=0.0)) for x in sampled)
    if peak > 0.0:  # one scale for all runs (the test is scale-free): rows of 1e300 or 1e-300 stay in range
        sampled = [x / peak for x in sampled]
    norms = [float(np.linalg.norm(x)) for x in sampled]  # a rotation keeps the norm: most pairs end here
    return [
        (r, s)
        for r, s in combinations(range(len(runs)), 2)
        if min(norms[r], norms[s]) > 0.0  # an all-zero run is refused elsewhere, not "the same"
        and abs(norms[r] - norms[s]) <= tolerance * max(norms[r], norms[s])
        and procrustes_residual(sampled[r], sampled[s]) < tolerance
    ]


@dataclass(frozen=True)
class DegenerateRuns:
    """Runs whose noise is zero by construction: what audit reports and drift refuses."""

    pairs: list[list[str]] = doc("the pairs of runs (names) that are identical or exact rotations of each other")
    reason: str = doc("why the measured noise is zero, and what to do about it")


def degenerate_runs(names: Sequence[str], runs: Sequence[np.ndarray]) -> DegenerateRuns | None:
    """The runs (rows matched by key) that are identical or exact rotations of each other, with
    the sentence every report and refusal gives, or None when the runs are independent."""
    pairs = same_runs(runs)
    if not pairs:
        return None
    reason = (
        f"{describe_same(pairs, names, len(runs))}: the noise measured between them is zero by construction; "
        "train them with different seeds (a --script must use {seed})"
    )
    return DegenerateRuns([[names[r], names[s]] for r, s in pairs], reason)


def describe_same(pairs: list[tuple[int, int]], names: Sequence[str], count: int) -> str:
    """``run-000 and run-001 are identical or exact rotations of each other`` (or: all N runs)."""
    linked = {r for pair in pairs for r in pair}
    if len(pairs) == count * (count - 1) // 2:
        return f"all {count} runs are identical or exact rotations of each other"
    r, s = pairs[0]
    more = f" (and {len(pairs) - 1} more pair(s) of {len(linked)} runs)" if len(pairs) > 1 else ""
    return f"{names[r]} and {names[s]} are identical or exact rotations of each other{more}"
