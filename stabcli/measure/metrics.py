"""Representation stability metrics (docs/metrics.md), without any n×n matrix.

Notation: R runs ``H_r`` of shape ``[n, d]`` over the same keys in the same row order.
Everything is computed from row chunks (memory O(chunk·R·d)) and from the R×R blocks of
cross-Gram matrices ``G_rs = H_rᵀ H_s`` (d×d each): Procrustes alignment, PIP loss, CKA
and eigenspace overlap only ever need those. Accumulations are float64.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import combinations

import numpy as np

from stabcli.measure.align import rotation_from_cross
from stabcli.measure.numerics import (
    CHUNK_ELEMENTS,
    WideBuffer,
    block_scale,
    chunk_bytes,
    peak,
    row_chunks,
    row_slices,
    stacked,
    wide_chunks,
    wide_slices,
)
from stabcli.measure.threads import ordered_map, small_linalg, stop_point

# Values whose magnitude lies in [2^-SAFE_EXPONENT, 2^SAFE_EXPONENT] are used as they are:
# their squares, and sums of up to 2^200 squares, stay normal float64 numbers. Every
# float32 value qualifies, so scaling only ever happens for float64 input outside that range.
SAFE_EXPONENT = 400


def power_of_two_scale(largest: float) -> float:
    """The power of two to divide values up to ``largest`` by so that their squares neither
    overflow nor underflow: 1 for ordinary magnitudes (and 0 or non-finite), else ``2^e``
    with ``largest / 2^e`` in [0.5, 1). Dividing by a power of two is exact."""
    if largest == 0 or not math.isfinite(largest):
        return 1.0
    exponent = math.frexp(largest)[1]
    if -SAFE_EXPONENT <= exponent <= SAFE_EXPONENT:
        return 1.0
    return math.ldexp(1.0, min(exponent, 1023))  # 2^1024 is not a float64: values near 1.8e308 scale into [1, 2)


def may_need_scaling(runs: Sequence[np.ndarray]) -> bool:
    """False when no value can leave the safe range: float32 and narrower floats and integers
    (squares of float32 values, from 1e-45 to 3e38, are ordinary float64 numbers)."""
    return any(np.asarray(h[:0]).dtype.kind == "f" and np.asarray(h[:0]).dtype.itemsize > 4 for h in runs)


class _CommonScale:
    """The running common scale of a chunked pass: grows with the largest value seen, and
    says by how much accumulators of degree-``k`` quantities must shrink when it does.
    Inactive (no per-chunk cost) for inputs that ``may_need_scaling`` clears."""

    def __init__(self, runs: Sequence[np.ndarray]) -> None:
        self.active = may_need_scaling(runs)
        self.largest = 0.0
        self.scale = 1.0

    def update(self, stack: np.ndarray) -> tuple[np.ndarray, float]:
        """(stack divided by the new scale, factor old/new scale for the accumulators)."""
        if not self.active:
            return stack, 1.0
        seen = self.largest > 0  # before the first non-zero value the accumulators hold only zeros
        self.largest = max(self.largest, peak(stack))
        scale = power_of_two_scale(self.largest)
        factor = self.scale / scale if seen else 1.0  # <= 1: the scale only grows once set
        self.scale = scale
        return (stack if scale == 1.0 else stack / scale), factor


def rescaled(value: float, scale: float, power: int = 1) -> float:
    """``value · scale^power`` without warnings: inf above float64's range, NaN for a
    non-zero value below it (a variance of 1e-300 values is not 0)."""
    return float(_rescaled_array(np.float64(value), scale, power))


def mean_std(values: list[float]) -> tuple[float, float | None]:
    """Mean and std (ddof=1); the std is taken around the first value (shift invariant), so
    identical runs give exactly 0 instead of rounding noise. Both are computed on the values
    divided by a power of two near their largest, so RMSEs near 1e300 do not overflow."""
    if len(values) < 2:
        return float(values[0]), None
    array = np.asarray(values, dtype=np.float64)
    with np.errstate(all="ignore"):  # an inf RMSE (labels beyond float64) gives inf/NaN, reported as null
        mean = rescaled(float(np.mean(array / block_scale(array))), block_scale(array))
        shifted = array - array[0]
        return mean, rescaled(float(np.std(shifted / block_scale(shifted), ddof=1)), block_scale(shifted))


@dataclass
class NoiseShare:
    """Coordinate noise: ``share_j = Σ_i Var_r(H[i,j]) / Σ_i E_r[H[i,j]²]`` (ddof=0).

    The shares are scale invariant and exact for any finite input; the variances are in the
    input's units: ``inf`` above float64's range (values beyond ~1e154), NaN below it.
    """

    overall: float
    per_dim: np.ndarray  # share_j for every dimension j
    variance_per_dim: np.ndarray  # mean over keys of Var_r(H[i,j]) with ddof=1 (the paper's Fig. 1a)
    per_key_variance: np.ndarray  # mean over dimensions of Var_r(H[i,j]) (ddof=0), one per key
    scale: float = 1.0  # power of two the values were divided by (the variances are rescaled back)
    per_key_variance_scaled: np.ndarray | None = None  # per_key_variance / scale², finite: for ranking keys


def noise_share(runs: Sequence[np.ndarray], rotations: Sequence[np.ndarray] | None = None) -> NoiseShare:
    """Share of each coordinate's energy that is run-to-run variance (paper Fig. 1a).

    ``share_j = Σ_i Var_r(H[i,j]) / Σ_i E_r[H[i,j]²]``; 0 for identical runs, near 1 when
    coordinates are pure noise. With ``rotations``, runs are first multiplied by them.
    Values are divided by a common power of two when their squares would leave float64's
    range, so 1e300 and 1e-300 give the same shares as 1.
    """
    n, d = runs[0].shape
    var_sum = np.zeros(d)
    energy_sum = np.zeros(d)
    per_key = np.empty(n)
    common = _CommonScale(runs)
    for rows, stack in row_chunks(runs, rotations):
        stack, factor = common.update(stack)
        if factor != 1.0:  # the scale grew: earlier sums are in the old units
            var_sum *= factor**2
            energy_sum *= factor**2
            per_key[: rows.start] *= factor**2
        var = stack.var(axis=0)
        var_sum += var.sum(axis=0)
        energy_sum += np.square(stack).mean(axis=0).sum(axis=0)
        per_key[rows] = var.mean(axis=1) if d else 0.0
    return share_from_sums(var_sum, energy_sum, per_key, len(runs), common.scale)


def share_from_sums(
    var_sum: np.ndarray, energy_sum: np.ndarray, per_key: np.ndarray, runs: int, scale: float
) -> NoiseShare:
    """The ``NoiseShare`` of ``Σ_i Var_r(H[i,j])`` and ``Σ_i E_r[H[i,j]²]`` per dimension and
    every key's mean variance over dimensions, all of the runs divided by ``scale``."""
    n, d = len(per_key), len(var_sum)
    total = energy_sum.sum()
    per_dim = np.divide(var_sum, energy_sum, out=np.zeros(d), where=energy_sum > 0)
    overall = float(var_sum.sum() / total) if total > 0 else 0.0
    variance_per_dim = var_sum / n * runs / (runs - 1)
    return NoiseShare(
        overall,
        per_dim,
        _rescaled_array(variance_per_dim, scale, 2),
        _rescaled_array(per_key, scale, 2),
        scale,
        per_key,
    )


def _rescaled_array(values: np.ndarray, scale: float, power: int) -> np.ndarray:
    """``values · scale^power`` without warnings: inf above float64's range, NaN for a
    non-zero value below it (not 0, which would read as "no variance")."""
    if scale == 1.0:
        return values
    result = values
    with np.errstate(over="ignore", under="ignore"):
        for _ in range(power):
            result = result * scale
    return np.where((result == 0) & (values != 0), np.nan, result)


@dataclass
class Grams:
    """Cross-Gram blocks ``G[r, s] = H_rᵀ H_s`` and column means; enough for PIP, CKA,
    eigenspace overlap and Procrustes alignment.

    ``G`` and ``means`` are of the runs divided by ``scale`` (a power of two, 1 for every
    ordinary input): scale-invariant metrics use them as they are, and scale-dependent
    ones (PIP loss, Gram norms) multiply back by ``scale²``.
    """

    G: np.ndarray  # [R, R, d, d]
    means: np.ndarray  # [R, d]
    n: int
    scale: float = 1.0
    peaks: np.ndarray | None = None  # [R] largest |value| of every run (float64 input only)
    # left_basis results by (run, divisor): every pair metric of a run needs the same basis
    _bases: dict[tuple[int, float], tuple[np.ndarray, np.ndarray]] = field(
        default_factory=dict, repr=False, compare=False
    )

    def zero_runs(self) -> list[int]:
        """Positions of the runs whose values are all 0. Exact: float32 squares never
        underflow in float64, and float64 runs are judged by their largest value."""
        R = self.G.shape[0]
        if self.peaks is not None:
            return [r for r in range(R) if self.peaks[r] == 0]
        return [r for r in range(R) if not np.any(self.G[r, r].diagonal())]

    def left_basis(self, r: int, c: float) -> tuple[np.ndarray, np.ndarray]:
        """``_left_basis(G[r, r] / c)``, computed once per run and divisor (read-only arrays)."""
        if (r, c) not in self._bases:
            basis = _left_basis(self.G[r, r] / c)
            for array in basis:
                array.flags.writeable = False
            self._bases[(r, c)] = basis
        return self._bases[(r, c)]

    def centered(self, r: int, s: int) -> np.ndarray:
        """``X_rᵀ X_s`` for the column-centred matrices (divided by ``scale²``)."""
        return self.G[r, s] - self.n * np.outer(self.means[r], self.means[s])


def gram_blocks(runs: Sequence[np.ndarray]) -> Grams:
    """All ``H_rᵀ H_s`` in one pass over the rows (O(R²·n·d²) time, O(R²·d²) memory). The row
    chunks run on ``threads.ordered_map``'s workers and their sums are added in row order;
    float64 runs are first read once for their peaks, which fix the common scale."""
    R = len(runs)
    n, d = runs[0].shape
    peaks = run_peaks(runs) if may_need_scaling(runs) else None  # float32 squares cannot overflow
    scale = power_of_two_scale(float(peaks.max())) if peaks is not None else 1.0
    buffer = WideBuffer()

    def chunk(rows: slice) -> tuple[np.ndarray, np.ndarray]:
        wide = buffer.read(runs, rows)
        if scale != 1.0:
            wide /= scale  # a power of two: exact
        return wide.sum(axis=0), wide.T @ wide  # one symmetric product: numpy uses BLAS syrk

    sums, joint = np.zeros(R * d), np.zeros((R * d, R * d))
    chunks = wide_slices(runs)
    item = (R * d) ** 2 * 8 + 2 * chunk_bytes(runs, chunks)  # the Gram partial, the chunk
    for column_sums, gram in ordered_map(chunk, chunks, item_bytes=item):
        sums += column_sums
        joint += gram
    G = joint.reshape(R, d, R, d).transpose(0, 2, 1, 3).copy()
    return Grams(G, sums.reshape(R, d) / n, n, scale, peaks)


def run_peaks(runs: Sequence[np.ndarray]) -> np.ndarray:
    """The largest absolute value of every run, read in row chunks (no float64 copy), a run
    per worker."""
    return np.array(list(ordered_map(_peak_of, runs)), dtype=np.float64)


def _peak_of(h: np.ndarray) -> float:
    return max((_chunk_peak(h[rows]) for rows in row_slices([h])), default=0.0)


def _chunk_peak(rows: np.ndarray) -> float:
    stop_point()  # a run per worker: Ctrl-C does not wait for the whole run
    return peak(np.asarray(rows))


def frobenius_sq(a: np.ndarray) -> float:
    return float(np.einsum("ij,ij->", a, a))


def frobenius_norm(a: np.ndarray) -> float:
    """``‖a‖_F`` without overflow or underflow in the squares (inf only beyond float64's range)."""
    c = block_scale(a)
    return rescaled(math.sqrt(frobenius_sq(a / c)), c)


def _pip_loss_scaled(grams: Grams, r: int, s: int) -> float:
    """PIP loss of the runs divided by ``grams.scale``."""
    c = block_scale(grams.G[r, r], grams.G[s, s], grams.G[r, s])
    rr, ss, rs = grams.G[r, r] / c, grams.G[s, s] / c, grams.G[r, s] / c
    value = frobenius_sq(rr) + frobenius_sq(ss) - 2 * frobenius_sq(rs)
    return rescaled(math.sqrt(max(value, 0.0)), c)


@small_linalg
def pip_loss(grams: Grams, r: int, s: int) -> float:
    """PIP loss ``‖H_r H_rᵀ − H_s H_sᵀ‖_F`` (Yin & Shen 2018) via
    ``sqrt(‖H_rᵀH_r‖² + ‖H_sᵀH_s‖² − 2‖H_rᵀH_s‖²)``; inf when beyond float64's range."""
    return rescaled(_pip_loss_scaled(grams, r, s), grams.scale, 2)


@small_linalg
def relative_pip_loss(grams: Grams) -> float | None:
    """Mean PIP loss over run pairs divided by the mean ``‖H_r H_rᵀ‖_F`` over runs: scale
    invariant, so finite for any finite input; None when every run is zero."""
    R = grams.G.shape[0]
    pip = float(np.mean([_pip_loss_scaled(grams, r, s) for r, s in combinations(range(R), 2)]))
    norm = float(np.mean([frobenius_norm(grams.G[r, r]) for r in range(R)]))
    return pip / norm if norm > 0 else None


@small_linalg
def relative_pip_loss_by_pair(grams: Grams) -> np.ndarray | None:
    """PIP loss of every run pair r<s divided by the mean ``‖H_r H_rᵀ‖_F`` over runs (their
    mean is ``relative_pip_loss``); None when every run is zero."""
    R = grams.G.shape[0]
    norm = float(np.mean([frobenius_norm(grams.G[r, r]) for r in range(R)]))
    if norm <= 0:
        return None
    return np.array([_pip_loss_scaled(grams, r, s) for r, s in combinations(range(R), 2)]) / norm


@small_linalg
def linear_cka(grams: Grams, r: int, s: int) -> float:
    """Linear CKA on column-centred matrices: ``‖XᵀY‖_F² / (‖XᵀX‖_F ‖YᵀY‖_F)`` (Kornblith et al. 2019)."""
    blocks = grams.centered(r, r), grams.centered(s, s), grams.centered(r, s)
    c = block_scale(*blocks)
    rr, ss, rs = (b / c for b in blocks)
    denom = math.sqrt(frobenius_sq(rr)) * math.sqrt(frobenius_sq(ss))
    return float(frobenius_sq(rs) / denom) if denom > 0 else 0.0


@small_linalg
def _left_basis(gram: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """From ``HᵀH = V Σ² Vᵀ``: (V, 1/Σ) restricted to numerically non-zero singular values,
    so that ``U = H V Σ⁻¹`` are the left singular vectors."""
    eigval, eigvec = np.linalg.eigh(gram)
    keep = eigval > max(eigval.max(), 0.0) * 1e-10
    return eigvec[:, keep], 1.0 / np.sqrt(eigval[keep])


@small_linalg
def eigenspace_overlap(grams: Grams, r: int, s: int) -> float:
    """Eigenspace overlap ``‖UᵀŨ‖_F² / max(d, d̃)`` with U, Ũ the left singular vectors
    (May et al. 2019, anchor-stability); computed as ``Σ_r⁻¹ V_rᵀ G_rs V_s Σ_s⁻¹``."""
    c = block_scale(grams.G[r, r], grams.G[s, s], grams.G[r, s])  # the overlap is scale invariant
    v_r, inv_r = grams.left_basis(r, c)
    v_s, inv_s = grams.left_basis(s, c)
    if not len(inv_r) or not len(inv_s):  # a zero run spans nothing
        return 0.0
    cross = (inv_r[:, None] * (v_r.T @ (grams.G[r, s] / c) @ v_s)) * inv_s[None, :]
    return frobenius_sq(cross) / max(len(inv_r), len(inv_s))


def semantic_displacement(runs: Sequence[np.ndarray], grams: Grams) -> float:
    """Mean cosine distance ``1 − cos(h_r(i), h_s(i) Q_sr)`` over keys and run pairs r<s,
    after orthogonal Procrustes of run s onto run r (Hamilton et al. 2016, HistWords)."""
    return float(np.mean(displacement_by_pair(runs, grams)))


def displacement_by_pair(runs: Sequence[np.ndarray], grams: Grams) -> np.ndarray:
    """Per run pair r<s (``itertools.combinations`` order), the mean over keys of
    ``1 − cos(h_r(i), h_s(i) Q_sr)`` after orthogonal Procrustes of run s onto run r."""
    # Σ_i u_r(i)·(u_s(i) Q) = tr(U_rᵀ U_s Q) for the unit rows U: the cross-Gram blocks of the
    # unit rows (one symmetric product per chunk) replace a row-by-row product per run pair
    R, d = len(runs), runs[0].shape[1]
    joint = np.zeros((R * d, R * d))
    for _, wide in wide_chunks(runs):
        units = unit_rows(wide.reshape(len(wide), R, d)).reshape(len(wide), R * d)
        joint += units.T @ units
    return displacement_from_unit_grams(joint, grams)


@small_linalg
def displacement_from_unit_grams(unit_joint: np.ndarray, grams: Grams) -> np.ndarray:
    """``displacement_by_pair`` from ``Σ_i u(i)u(i)ᵀ`` of the side-by-side unit rows
    ``u(i) = [u_0(i), …, u_{R−1}(i)]`` (``[R·d, R·d]``; cosines are per-row scale invariant,
    so unit rows are safe for any finite magnitude) and the cross-Gram blocks."""
    R, d = grams.G.shape[0], grams.G.shape[2]
    unit_grams = unit_joint.reshape(R, d, R, d)
    pairs = list(combinations(range(R), 2))
    cosines = [np.einsum("ab,ba->", unit_grams[r, :, s, :], rotation_from_cross(grams.G[s, r])) for r, s in pairs]
    return 1.0 - np.array(cosines) / grams.n


def sample_pairs(n: int, count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``count`` key pairs (i, k) with i ≠ k, drawn uniformly with replacement."""
    first = rng.integers(0, n, size=count)
    second = (first + rng.integers(1, n, size=count)) % n
    return first, second


def row_norms(x: np.ndarray) -> np.ndarray:
    """L2 norm of every row (last axis), in x's precision; NaN or inf rows give NaN or inf."""
    return np.sqrt(np.einsum("...i,...i->...", x, x))


# Below this a float32 row norm may have lost terms to underflow (squares under 1.2e-38).
SMALLEST_RELIABLE_NORM32 = 1e-12


def inverse_norms(x: np.ndarray, norms: np.ndarray | None = None) -> np.ndarray:
    """1/‖row‖ in x's precision, and 0 for zero rows (so normalizing leaves them zero).

    float32 rows whose squares underflow (tiny values) or overflow (huge ones) are measured
    again in float64, so they are not taken for zero or infinite rows; NaN and inf rows give 0.
    """
    norms = row_norms(x) if norms is None else norms
    if x.dtype == np.float32:
        redo = ~((norms >= SMALLEST_RELIABLE_NORM32) & (norms < np.inf))  # also zero and NaN rows
        if redo.any():
            norms = norms.copy()
            with np.errstate(over="ignore"):  # beyond float32's range (3.4e38) the norm stays inf
                norms[redo] = row_norms(np.asarray(x[redo], dtype=np.float64))
    if norms.size and norms.min() > 0 and norms.max() < np.inf:  # the common case: no masked divide
        return np.reciprocal(norms)
    return np.divide(1, norms, out=np.zeros_like(norms), where=norms > 0)


# float64 rows whose norm lies in this range are normalized directly (their squares are safe)
RELIABLE_NORM64 = (2.0**-500, 2.0**500)


def unit_rows(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm; zero (and NaN or inf) rows become zero.

    float32 rows keep float32 (see ``inverse_norms``); other inputs are float64, and rows
    whose norm would under- or overflow (values below ~1e-150 or above ~1e150) are first
    divided by a power of two of their own, so 1e300 and 1e-300 rows normalize exactly.
    """
    x = np.asarray(x)
    if x.dtype == np.float32:
        return x * inverse_norms(x)[..., None]
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        norms = row_norms(x)
    low, high = RELIABLE_NORM64
    ok = (norms >= low) & (norms <= high)
    if ok.all():  # the common case
        return x * np.reciprocal(norms)[..., None]
    out = x * np.divide(1.0, norms, out=np.zeros_like(norms), where=ok)[..., None]
    bad = ~ok
    rows = x[bad]
    with np.errstate(invalid="ignore"):
        largest = np.maximum(rows.max(axis=-1, initial=0.0), -rows.min(axis=-1, initial=0.0))
        _, exponent = np.frexp(np.where(np.isfinite(largest), largest, 0.0))
        scaled = np.ldexp(rows, -exponent[:, None])
        scaled_norms = row_norms(scaled)
        out[bad] = np.divide(
            scaled,
            scaled_norms[:, None],
            out=np.zeros_like(scaled),
            where=np.isfinite(scaled_norms)[:, None] & (scaled_norms > 0)[:, None],
        )
    return out


def inner_product_noise_share(runs: Sequence[np.ndarray], first: np.ndarray, second: np.ndarray) -> float:
    """The coordinate noise share computed on cosine similarities of sampled key pairs
    (paper Fig. 1d): ``Σ_p Var_r(c_r(p)) / Σ_p E_r[c_r(p)²]``."""
    order = np.argsort(first, kind="stable"), np.argsort(second, kind="stable")
    cos = np.empty((len(runs), len(first)))
    for r, h in enumerate(runs):
        a = np.empty((len(first), h.shape[1]))
        b = np.empty_like(a)
        a[order[0]] = h[first[order[0]]]  # sorted gathers read a memory map sequentially
        b[order[1]] = h[second[order[1]]]
        cos[r] = np.einsum("pd,pd->p", unit_rows(a), unit_rows(b))
    energy = np.square(cos).mean(axis=0).sum()
    return float(cos.var(axis=0).sum() / energy) if energy > 0 else 0.0


def pairwise_values(grams: Grams, metric: Callable[[Grams, int, int], float]) -> np.ndarray:
    """``metric(grams, r, s)`` for every run pair r<s, in ``combinations`` order."""
    return np.array([metric(grams, r, s) for r, s in combinations(range(grams.G.shape[0]), 2)], dtype=np.float64)


def pairwise_mean(grams: Grams, metric: Callable[[Grams, int, int], float]) -> float:
    """Mean of ``metric(grams, r, s)`` over run pairs r<s."""
    return float(np.mean(pairwise_values(grams, metric)))


@small_linalg
def rotated_noise_share(grams: Grams, rotations: Sequence[np.ndarray]) -> float:
    """The overall noise share of the runs multiplied by ``rotations``, from the Gram blocks:
    ``1 − (1/R²)Σ_rs tr(Q_rᵀ G_rs Q_s) / ((1/R)Σ_r tr G_rr)`` (the energy is rotation invariant)."""
    R = grams.G.shape[0]
    energy = sum(float(np.trace(grams.G[r, r])) for r in range(R)) / R
    if energy <= 0:
        return 0.0
    mean_sq = sum(
        float(np.einsum("ij,ij->", rotations[r].T @ grams.G[r, s], rotations[s].T)) for r in range(R) for s in range(R)
    )
    return 1.0 - mean_sq / R**2 / energy


@small_linalg
def pure_noise_share_std(grams: Grams) -> float:
    """Standard deviation of the overall noise share when every run is turned by its own
    uniformly random (Haar) rotation; the mean is exactly (R−1)/R.

    With ``E[U_ij U_kl] = δ_ik δ_jl / d`` for a Haar U, each cross term ``tr(G_rs U)`` has
    mean 0 and variance ``‖G_rs‖_F² / d``, and the R(R−1)/2 terms are uncorrelated:
    ``std = (2/R²) · sqrt(Σ_{r<s} ‖G_rs‖_F² / d) / ((1/R) Σ_r tr G_rr)``.
    """
    R, d = grams.G.shape[0], grams.G.shape[2]
    c = block_scale(*[grams.G[r, s] for r in range(R) for s in range(R)])
    energy = sum(float(np.trace(grams.G[r, r] / c)) for r in range(R)) / R
    if energy <= 0 or d == 0:
        return 0.0
    cross = sum(frobenius_sq(grams.G[r, s] / c) for r, s in combinations(range(R), 2))
    return 2.0 / R**2 * math.sqrt(cross / d) / energy


def random_rotation(d: int, rng: np.random.Generator) -> np.ndarray:
    """A uniformly random (Haar) orthogonal d×d matrix: QR of a Gaussian matrix, signs fixed."""
    q, r = np.linalg.qr(rng.standard_normal((d, d)))
    return q * np.sign(np.diag(r))


def per_key_energy(runs: Sequence[np.ndarray], scale: float = 1.0) -> np.ndarray:
    """Mean over runs of each key's squared L2 norm, ``E_r[‖h_r(i)‖²]`` (float64, one per key),
    of the runs divided by ``scale`` (a power of two; see ``NoiseShare.scale``)."""
    n, d = runs[0].shape
    energy = np.zeros(n)
    step = max(1, CHUNK_ELEMENTS // max(d, 1))
    for h in runs:  # run by run: no [R, c, d] stack, one float64 row block at a time
        for start in range(0, n, step):
            block = np.asarray(h[start : start + step], dtype=np.float64)
            if scale != 1.0:
                block = block / scale
            energy[start : start + step] += np.einsum("ij,ij->i", block, block)
    return energy / len(runs)


def relative_instability(per_key_variance: np.ndarray, energy: np.ndarray, dim: int) -> np.ndarray:
    """A key's own noise share ``Σ_j Var_r(H[i,j]) / E_r[‖h_r(i)‖²]`` from its mean variance
    over dimensions (ddof=0) and its energy; 0 for keys whose vectors are all zero."""
    total = np.asarray(per_key_variance, dtype=np.float64) * dim
    return np.divide(total, energy, out=np.zeros_like(total), where=energy > 0)


def per_key_displacement(runs: Sequence[np.ndarray], grams: Grams) -> np.ndarray:
    """Per key, the mean over run pairs r<s of ``1 − cos(h_r(i), h_s(i) Q_sr)`` after
    orthogonal Procrustes of run s onto run r (Hamilton et al. 2016); its mean over keys is
    ``semantic_displacement``."""
    pairs = list(combinations(range(len(runs)), 2))
    rotations = {(r, s): rotation_from_cross(grams.G[s, r]) for r, s in pairs}
    result = np.zeros(runs[0].shape[0])

    def chunk(rows: slice) -> None:  # each chunk writes its own keys: the workers' order does not matter
        stack = stacked(runs, rows)
        if grams.scale != 1.0:  # a power of two (exact): norms of 1e300 rows stay finite
            stack /= grams.scale
        norms = np.linalg.norm(stack, axis=2)
        for r, s in pairs:
            dots = np.einsum("cd,cd->c", stack[r], stack[s] @ rotations[r, s])
            denom = norms[r] * norms[s]
            result[rows] += 1.0 - np.divide(dots, denom, out=np.zeros_like(dots), where=denom > 0)

    slices = row_slices(runs)
    for _ in ordered_map(chunk, slices, item_bytes=chunk_bytes(runs, slices)):
        pass
    return result / len(pairs)
