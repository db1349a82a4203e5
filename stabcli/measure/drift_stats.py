"""The numerics of ``stabcli drift``: per-key change between two embeddings, each key's own
noise band from a run set, and the pooled scale-family test that decides which keys moved.

Arrays in, arrays out; no IO. Memory is O(n·d) for the inputs plus O(P·n) float32 for the
P = R(R−1)/2 noise pair distances; nothing n×n.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np

from stabcli.measure import metrics as m
from stabcli.measure.align import rotation_from_cross
from stabcli.measure.numerics import WideBuffer, chunk_bytes, row_chunks, wide_slices
from stabcli.measure.threads import ordered_map


@dataclass(frozen=True)
class KeyChange:
    """Per-key feature-drift measures between BEFORE ``b`` and (aligned) AFTER ``a``."""

    distance: np.ndarray  # ‖b − a‖
    cosine_distance: np.ndarray  # 1 − cos(b, a); 0 for a zero row
    norm_before: np.ndarray  # ‖b‖
    norm_after: np.ndarray  # ‖a‖
    dot: np.ndarray  # ⟨b, a⟩: the new vector's product with the old one

    @property
    def norm_change(self) -> np.ndarray:
        """‖a‖ − ‖b‖."""
        return self.norm_after - self.norm_before


def key_change(before: np.ndarray, after: np.ndarray, rotation: np.ndarray | None = None) -> KeyChange:
    """The measures of :class:`KeyChange` for every row, AFTER first multiplied by ``rotation``.

    Computed in float64 row chunks; ``cosine_distance`` is 0 where either row is zero
    (no direction to compare), and then ``distance`` still tells how far it moved.
    """
    n = before.shape[0]
    out = {name: np.empty(n) for name in ("distance", "cosine_distance", "norm_before", "norm_after", "dot")}
    for rows, stack in row_chunks([before, after]):
        b, a = stack[0], stack[1] if rotation is None else stack[1] @ rotation
        nb, na = m.row_norms(b), m.row_norms(a)
        dot = np.einsum("cd,cd->c", b, a)
        denom = nb * na
        cos = np.divide(dot, denom, out=np.ones_like(dot), where=denom > 0)
        out["distance"][rows] = m.row_norms(b - a)
        out["cosine_distance"][rows] = np.clip(1.0 - cos, 0.0, 2.0)
        out["norm_before"][rows], out["norm_after"][rows], out["dot"][rows] = nb, na, dot
    return KeyChange(**out)


MEASURES = ("direction", "length", "distance")  # what a key's change is tested on (``--measure``)


def key_statistics(change: KeyChange) -> dict[str, np.ndarray]:
    """Each measure's statistic per key: ``direction`` the cosine distance 1 − cos(b, a),
    ``length`` |ln(‖a‖/‖b‖)| (≈ the relative norm change, symmetric in b and a),
    ``distance`` ‖b − a‖."""
    return {
        "direction": change.cosine_distance,
        "length": log_norm_ratio(change.norm_before, change.norm_after),
        "distance": change.distance,
    }


def log_norm_ratio(before: np.ndarray, after: np.ndarray) -> np.ndarray:
    """|ln(after/before)| per row: 0 when both are 0, inf when only one is."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.abs(np.log(np.asarray(after, dtype=np.float64)) - np.log(np.asarray(before, dtype=np.float64)))
    out[(before == 0) & (after == 0)] = 0.0
    return out


def pair_distances(runs: Sequence[np.ndarray]) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """``D[p, i] = ‖H_r[i] − H_s[i]·Q_rs‖`` for every run pair (``pair_measures``' distance)."""
    measures, pairs = pair_measures(runs)
    return measures["distance"], pairs


def pair_measures(runs: Sequence[np.ndarray]) -> tuple[dict[str, np.ndarray], list[tuple[int, int]]]:
    """Every measure of ``key_statistics`` for every run pair p = (r, s), r < s, run r as
    BEFORE and run s turned by ``Q_rs``, the orthogonal Procrustes rotation of s onto r
    over all rows: ``distance[p, i] = ‖H_r[i] − H_s[i]·Q_rs‖``, ``direction`` the cosine
    distance, ``length`` |ln(‖H_s[i]‖/‖H_r[i]‖)|.

    Two passes over the rows: the cross-Gram blocks ``H_sᵀH_r`` (one float64 product per
    chunk, O(R²·n·d²)), then per chunk one product of each run with the rotations of all its
    pairs side by side. The chunks are computed by ``threads.ordered_map``'s workers (the
    blocks' sums added in row order; each chunk writes its own columns), so the numbers do
    not depend on the number of workers. Everything is computed in float64, like the
    BEFORE→AFTER change (``key_change``): in float32 the cosine distance of a stable key
    (1 − cos near 0) lost up to 2·10⁻³ of its value to the BLAS kernel's summation order,
    and the tail p-values amplified that. Returns float32 arrays [P, n] by measure (memory
    O(P·n)).
    """
    R = len(runs)
    n, d = runs[0].shape
    pairs = list(combinations(range(R), 2))
    chunks = wide_slices(runs)
    buffer = WideBuffer()
    G = m.gram_blocks(runs).G  # the rotations are scale invariant: the common scale does not matter
    partners = {s: [r for r in range(s)] for s in range(1, R)}
    side_by_side = {s: np.concatenate([rotation_from_cross(G[s, r]) for r in rs], axis=1) for s, rs in partners.items()}
    index = {pair: p for p, pair in enumerate(pairs)}
    out = {name: np.empty((len(pairs), n), dtype=np.float32) for name in MEASURES}

    def measure(rows: slice) -> None:
        wide = buffer.read(runs, rows)
        norms = [m.row_norms(wide[:, r * d : (r + 1) * d]) for r in range(R)]
        for s, rs in partners.items():
            rotated = wide[:, s * d : (s + 1) * d] @ side_by_side[s]  # [c, len(rs)·d]
            for j, r in enumerate(rs):
                before, after = wide[:, r * d : (r + 1) * d], rotated[:, j * d : (j + 1) * d]
                diff = before - after
                p = index[r, s]
                out["distance"][p, rows] = np.sqrt(np.einsum("cd,cd->c", diff, diff))
                dot = np.einsum("cd,cd->c", before, after)
                denom = norms[r] * norms[s]
                cos = np.divide(dot, denom, out=np.ones_like(dot), where=denom > 0)
                out["direction"][p, rows] = np.clip(1.0 - cos, 0.0, 2.0)
                out["length"][p, rows] = log_norm_ratio(norms[r], norms[s])

    widest = max((len(rs) for rs in partners.values()), default=0)
    item = (widest + 4) * chunk_bytes(runs, chunks) // R  # a run's rotations side by side, differences
    for _ in ordered_map(measure, chunks, item_bytes=item):  # each chunk writes its own columns of ``out``
        pass
    return out, pairs


@dataclass(frozen=True)
class NoiseBand:
    """Every key's noise scale and the pooled null distribution of the drift ratio."""

    scale: np.ndarray  # RMS over run pairs of the key's aligned pair distance
    pair_median: np.ndarray  # median over run pairs of the key's pair distance
    null_ratios: np.ndarray  # sorted pooled null sample of the level-adjusted ratio (float32)
    typical_level: float  # median over null samples of their median ratio over keys
    level_range: tuple[float, float]  # smallest and largest level factor among the null samples
    runs: int
    pairs: int
    before_in_noise: bool

    def level_factor(self, ratios: np.ndarray) -> tuple[float, float]:
        """(global ratio, applied factor) of a BEFORE→AFTER comparison: its median ratio over
        keys relative to the typical noise pair, and that clipped to the range the noise
        pairs themselves show."""
        level = _level(ratios)
        global_ratio = level / self.typical_level if self.typical_level > 0 else 1.0
        return global_ratio, float(np.clip(global_ratio, *self.level_range))


def _level(ratios: np.ndarray) -> float:
    finite = ratios[np.isfinite(ratios)]
    return float(np.median(finite)) if finite.size else 0.0


def noise_band(distances: np.ndarray, pairs: list[tuple[int, int]], runs: int, before_in_noise: bool) -> NoiseBand:
    """Per-key noise scale and the pooled, leave-out, level-adjusted null of the drift ratio.

    A key's scale is the RMS of its distances over all run pairs. The BEFORE→AFTER ratio of
    a key compares a new run (AFTER) with a scale AFTER did not enter; each null sample
    mirrors that: pair (r, s) divided by the scale of the runs without s (when BEFORE is
    itself one of the noise runs, r stays in, as BEFORE does) or without r and s (when it
    is not). Runs differ as a whole (measured: one word2vec run lies up to 1.5× farther from
    all others than a typical run), so every null sample is divided by its level (its
    median ratio over keys, relative to the typical sample's) and a comparison by its own
    level clipped to the range the noise pairs show. Pooling the adjusted ratios over keys
    gives a scale-family null: averaged over keys the test holds its level exactly,
    whatever each key's own noise shape.
    """
    sq = np.square(distances, dtype=np.float64)
    total = sq.sum(axis=0)
    per_run = np.zeros((runs, distances.shape[1]))
    for p, (r, s) in enumerate(pairs):
        per_run[r] += sq[p]
        per_run[s] += sq[p]
    samples = []
    if before_in_noise:
        count = (runs - 1) * (runs - 2) / 2
        for p, (r, s) in enumerate(pairs):
            for left_out in (s, r):  # (r as BEFORE, s as AFTER) and the other way round
                samples.append(ratio(distances[p], np.sqrt(np.maximum(total - per_run[left_out], 0) / count)))
    else:
        count = (runs - 2) * (runs - 3) / 2
        for p, (r, s) in enumerate(pairs):
            rest = np.maximum(total - per_run[r] - per_run[s] + sq[p], 0)
            samples.append(ratio(distances[p], np.sqrt(rest / count)))
    levels = np.array([_level(t) for t in samples])
    typical = float(np.median(levels))
    factors = levels / typical if typical > 0 else np.ones_like(levels)
    factors[factors <= 0] = 1.0
    null = np.sort(np.concatenate([t / f for t, f in zip(samples, factors, strict=False)]).astype(np.float32))
    return NoiseBand(
        np.sqrt(total / len(pairs)),
        np.median(distances, axis=0),
        null,
        typical,
        (float(factors.min()), float(factors.max())),
        runs,
        len(pairs),
        before_in_noise,
    )


def ratio(distance: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """distance / scale; 0 when both are 0, inf when only the scale is 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.asarray(distance, dtype=np.float64) / scale
    out[(scale == 0) & (distance == 0)] = 0.0
    return out


TAIL_MIN_SAMPLES = 50  # the exponential tail is fitted to at least this many of the largest null samples
TAIL_SHARE = 0.001  # … or to the largest 0.1% of them, whichever is more


def p_values(ratios: np.ndarray, null_sorted: np.ndarray) -> np.ndarray:
    """Right-tail p-value of each ratio against the sorted null sample.

    Up to the largest K null samples (K = max(50, 0.1% of N)) it is the empirical
    ``(1 + #{null ≥ t}) / (1 + N)``; beyond, an exponential tail fitted to those K samples,
    ``K/(1 + N) · exp(−(t − u)/m)`` with u the (K+1)-th largest and m their mean excess over
    u. The empirical value alone cannot go below 1/(1 + N), so with n keys a single moved key
    could never reach a Benjamini–Hochberg q below n/(1 + N) ≈ 1/(R(R−1)); the exponential
    tail is conservative for distance ratios, whose tails are lighter.
    """
    N = len(null_sorted)
    t = np.asarray(ratios, dtype=np.float64)
    greater_equal = N - np.searchsorted(null_sorted, t.astype(np.float32), side="left")
    p = (1.0 + greater_equal) / (1.0 + N)
    k = max(TAIL_MIN_SAMPLES, int(N * TAIL_SHARE))
    if k < N:
        u = float(null_sorted[N - k - 1])
        mean_excess = float(np.mean(null_sorted[N - k :].astype(np.float64) - u))
        beyond = t > u
        if mean_excess > 0 and beyond.any():
            with np.errstate(over="ignore"):
                tail = k / (1.0 + N) * np.exp(-(t[beyond] - u) / mean_excess)
            p[beyond] = np.minimum(p[beyond], tail)
    return p


def null_quantile(null_sorted: np.ndarray, alpha: float) -> float:
    """The ratio above which a key is flagged at level ``alpha`` (the null's 1 − alpha quantile)."""
    return float(np.quantile(null_sorted, 1.0 - alpha))


def benjamini_hochberg(p: np.ndarray) -> np.ndarray:
    """BH adjusted p-values (q-values): ``q_(i) = min_{j ≥ i} p_(j)·n/j`` (Benjamini & Hochberg 1995)."""
    n = len(p)
    if n == 0:
        return p.copy()
    order = np.argsort(p, kind="stable")
    adjusted = p[order] * n / np.arange(1, n + 1)
    adjusted = np.minimum.accumulate(adjusted[::-1])[::-1]
    q = np.empty(n)
    q[order] = np.minimum(adjusted, 1.0)
    return q


@dataclass(frozen=True)
class MeasureTest:
    """One measure's test of every key against its noise band (``measure_test``)."""

    measure: str
    statistic: np.ndarray  # the key's BEFORE→AFTER statistic
    scale: np.ndarray  # RMS over noise pairs of the key's statistic
    pair_median: np.ndarray  # median over noise pairs
    ratio: np.ndarray  # statistic / scale, level-adjusted (divided by factor)
    p: np.ndarray
    q: np.ndarray  # Benjamini–Hochberg
    beyond_global_q: np.ndarray  # q of the ratio divided by the (unclipped) global ratio
    global_ratio: float  # this comparison's typical ratio relative to a noise pair's
    factor: float  # global_ratio clipped to the noise pairs' range
    level_range: tuple[float, float]
    threshold: float  # the null's 1 − alpha quantile of the adjusted ratio
    null_samples: int
    alpha: float

    @property
    def moved(self) -> np.ndarray:
        return self.p < self.alpha

    @property
    def discovered(self) -> np.ndarray:
        return self.q <= self.alpha

    @property
    def beyond_global(self) -> np.ndarray:
        """Discoveries of the test against the global change: with a whole-embedding move
        (global ratio above every noise pair's) the keys that moved more than the rest."""
        return self.beyond_global_q <= self.alpha

    @property
    def global_moved(self) -> bool:
        """The typical key moved more than between any two noise runs."""
        return self.global_ratio > self.level_range[1]

    @property
    def smallest_empirical_p(self) -> float:
        """1/(1 + N): the smallest p-value the N null samples give without the fitted tail."""
        return 1.0 / (1.0 + self.null_samples)


def measure_test(
    measure: str,
    statistic: np.ndarray,
    pair_statistic: np.ndarray,
    pairs: list[tuple[int, int]],
    runs: int,
    before_in_noise: bool,
    alpha: float,
) -> MeasureTest:
    """Test every key's ``statistic`` against the noise band of ``pair_statistic`` (the same
    measure over the noise run pairs, [P, n]): ``noise_band``'s pooled, leave-out,
    level-adjusted null, Benjamini–Hochberg over keys, and the same test against the
    global change (the ratio divided by the unclipped global ratio when it is larger)."""
    band = noise_band(pair_statistic, pairs, runs, before_in_noise)
    raw = ratio(statistic, band.scale)
    global_ratio, factor = band.level_factor(raw)
    adjusted = raw / factor
    p = p_values(adjusted, band.null_ratios)
    beyond = p_values(raw / max(factor, global_ratio), band.null_ratios) if global_ratio > factor else p
    return MeasureTest(
        measure=measure,
        statistic=np.asarray(statistic, dtype=np.float64),
        scale=band.scale,
        pair_median=band.pair_median,
        ratio=adjusted,
        p=p,
        q=benjamini_hochberg(p),
        beyond_global_q=benjamini_hochberg(beyond),
        global_ratio=global_ratio,
        factor=factor,
        level_range=band.level_range,
        threshold=null_quantile(band.null_ratios, alpha),
        null_samples=len(band.null_ratios),
        alpha=alpha,
    )
