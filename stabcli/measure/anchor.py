"""Spectral stability measures between run pairs, from d×d blocks only (docs/metrics.md).

* **eigenspace instability score** (EIS; Leszczynski et al., MLSys 2020, anchor-stability's
  ``Embedding.eis``): with ``P = UUᵀ`` the projection onto a run's left singular vectors
  and an anchor ``E = V R Wᵀ`` (thin SVD),
  ``EIS = Σ_E ‖(P_r − P_s) V R^alpha‖_F² / Σ_E tr(R^{2 alpha})`` over the anchors of the pair;
* **weighted eigenspace overlap** (anchor-stability's ``eigen_overlap(weighted=True)``):
  ``‖U_rᵀ U_s S_s^e‖_F²``, divided by ``tr(S_s^{2e})`` when normalized;
* **debiased linear CKA** (Kornblith et al. 2019 with the unbiased HSIC estimator of Song
  et al. 2012): ``HSIC₁(K, L) / sqrt(HSIC₁(K, K) HSIC₁(L, L))`` for ``K = XXᵀ``, ``L = YYᵀ``.

None builds an n×n matrix: a run's left singular vectors are ``U = H W S⁻¹`` with
``HᵀH = W S² Wᵀ``, so every product of two of them is ``S⁻¹ Wᵀ (H_rᵀ H_s) W S⁻¹``, a d×d
matrix from the cross-Gram blocks of :func:`stabcli.measure.metrics.gram_blocks`. Singular
values below 1e-5 of the largest (eigenvalues below 1e-10) count as zero, as in
``eigenspace_overlap``: a rank-deficient run spans fewer directions, where numpy's full thin
SVD would add arbitrary ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations, permutations

import numpy as np

from stabcli.measure import metrics as m
from stabcli.measure.numerics import block_scale, row_chunks

DEFAULT_EIS_ALPHA = 3.0  # anchor-stability's default exponent
DEFAULT_OVERLAP_EXP = 1.0  # anchor-stability's default for the weighted overlap


@dataclass(frozen=True)
class Basis:
    """A matrix's left singular basis in Gram form: ``U = H W / s`` for the non-zero ``s``."""

    w: np.ndarray  # [d, k] right singular vectors
    s: np.ndarray  # [k] singular values (of the scaled matrix), ascending

    @classmethod
    def of(cls, gram: np.ndarray) -> Basis:
        return cls.from_left(m._left_basis(gram))

    @classmethod
    def from_left(cls, basis: tuple[np.ndarray, np.ndarray]) -> Basis:
        """From ``metrics._left_basis``'s (V, 1/Σ)."""
        w, inverse = basis
        return cls(w, 1.0 / inverse)


def _cross(a: Basis, cross: np.ndarray, b: Basis) -> np.ndarray:
    """``U_aᵀ U_b`` from ``cross = H_aᵀ H_b``."""
    return (a.w.T @ cross @ b.w) / a.s[:, None] / b.s[None, :]


# ---------------------------------------------------------------- EIS


@dataclass(frozen=True)
class Anchor:
    """An anchor embedding ``E`` seen through d×d blocks: ``EᵀE`` and ``H_rᵀE`` for every run,
    in the units of the runs divided by ``run_scale`` and ``E`` divided by its own scale."""

    gram: np.ndarray  # [a, a]  EᵀE
    cross: np.ndarray  # [R, d, a]  H_rᵀ E
    source: str  # "consensus" or the anchor file


def consensus_anchor(grams: m.Grams, rotations: Sequence[np.ndarray]) -> Anchor:
    """The consensus ``M = (1/R) Σ_s H_s Q_s`` of the runs after generalized Procrustes as
    the anchor, without forming it: ``H_rᵀM = (1/R) Σ_s G_rs Q_s`` and
    ``MᵀM = (1/R²) Σ_rs Q_rᵀ G_rs Q_s``."""
    R = grams.G.shape[0]
    cross = np.stack([sum(grams.G[r, s] @ rotations[s] for s in range(R)) / R for r in range(R)])
    gram = sum(rotations[r].T @ cross[r] for r in range(R)) / R
    return Anchor((gram + gram.T) / 2, cross, "consensus")


def file_anchor(runs: Sequence[np.ndarray], anchor: np.ndarray, run_scale: float, source: str) -> Anchor:
    """A given anchor ``E`` (rows in the runs' key order, any dimension): one pass over the
    rows for ``EᵀE`` and every ``H_rᵀE`` (O(R·n·d·a))."""
    n = runs[0].shape[0]
    a = anchor.shape[1]
    own = m.power_of_two_scale(max(m.peak(np.asarray(anchor[i : i + 65536])) for i in range(0, n, 65536)))
    gram = np.zeros((a, a))
    cross = np.zeros((len(runs), runs[0].shape[1], a))
    for rows, stack in row_chunks(runs):
        e = np.asarray(anchor[rows], dtype=np.float64)
        e = e / own if own != 1.0 else e
        gram += e.T @ e
        if run_scale != 1.0:
            stack = stack / run_scale
        for r in range(len(runs)):  # 2-D products: BLAS reads the transposed view directly
            cross[r] += stack[r].T @ e
    return Anchor(gram, cross, source)


def eis_from_blocks(
    g_rr: np.ndarray,
    g_ss: np.ndarray,
    g_rs: np.ndarray,
    anchors: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]],
    alpha: float = DEFAULT_EIS_ALPHA,
) -> float:
    """EIS of runs r and s: ``Σ_E ‖(P_r − P_s) V R^alpha‖² / Σ_E tr(R^{2 alpha})`` (Leszczynski et al.
    2020) from ``H_rᵀH_r``, ``H_sᵀH_s``, ``H_rᵀH_s`` and, per anchor, ``(EᵀE, H_rᵀE, H_sᵀE)``.

    ``‖(P_r − P_s)VR^alpha‖² = ‖A_r‖² + ‖A_s‖² − 2 tr(A_rᵀ U_rᵀU_s A_s)`` with ``A = UᵀV R^alpha``
    and ``UᵀV = S⁻¹ Wᵀ (HᵀE) W_E R⁻¹``. 0 for runs spanning the same space, at most 1.
    """
    c = block_scale(g_rr, g_ss, g_rs)  # every ratio below is invariant to the runs' scale
    b_r, b_s = Basis.of(g_rr / c), Basis.of(g_ss / c)
    if not len(b_r.s) or not len(b_s.s):
        return math.nan
    overlap = _cross(b_r, g_rs / c, b_s)
    e_scale = max(block_scale(gram) for gram, _, _ in anchors)  # one scale for every anchor: tr R^{2 alpha} add up
    numerator = denominator = 0.0
    for gram, cross_r, cross_s in anchors:
        b_e = Basis.of(gram / e_scale)
        if not len(b_e.s):
            continue
        unit = math.sqrt(c * e_scale)
        weight = b_e.s ** (alpha - 1.0)  # Vᵀ-side: W_E R⁻¹ · R^alpha
        a_r = _cross_to_anchor(b_r, cross_r / unit, b_e) * weight[None, :]
        a_s = _cross_to_anchor(b_s, cross_s / unit, b_e) * weight[None, :]
        numerator += m.frobenius_sq(a_r) + m.frobenius_sq(a_s) - 2.0 * float(np.einsum("ij,ik,kj->", a_r, overlap, a_s))
        denominator += float(np.sum(b_e.s ** (2.0 * alpha)))
    if denominator <= 0:
        return math.nan
    return max(numerator, 0.0) / denominator


def _cross_to_anchor(b: Basis, cross: np.ndarray, e: Basis) -> np.ndarray:
    """``UᵀW_E`` (not yet divided by the anchor's singular values) from ``cross = HᵀE``."""
    return (b.w.T @ cross @ e.w) / b.s[:, None]


def eis_pairs(grams: m.Grams, anchor: Anchor, alpha: float = DEFAULT_EIS_ALPHA) -> np.ndarray:
    """EIS of every run pair r<s with one anchor for both runs (``E = Ẽ``), in pair order."""
    R = grams.G.shape[0]
    return np.array(
        [
            eis_from_blocks(
                grams.G[r, r],
                grams.G[s, s],
                grams.G[r, s],
                [(anchor.gram, anchor.cross[r], anchor.cross[s])],
                alpha,
            )
            for r, s in combinations(range(R), 2)
        ]
    )


# ---------------------------------------------------------------- weighted eigenspace overlap


def weighted_eigenspace_overlap(
    grams: m.Grams, r: int, s: int, exp: float = DEFAULT_OVERLAP_EXP, normalize: bool = True
) -> float:
    """``‖U_rᵀ U_s S_s^e‖_F²``, divided by ``tr(S_s^{2e})`` when ``normalize`` (anchor-stability's
    ``eigen_overlap(weighted=True)``; weighted by run s's spectrum, so not symmetric).
    Normalized it lies in [0, 1] and is scale invariant; unnormalized it is in the input's
    units (``inf`` beyond float64's range)."""
    c = block_scale(grams.G[r, r], grams.G[s, s], grams.G[r, s])
    b_r, b_s = Basis.from_left(grams.left_basis(r, c)), Basis.from_left(grams.left_basis(s, c))
    if not len(b_r.s) or not len(b_s.s):
        return 0.0
    top = float(b_s.s.max())  # divide the weights by the largest: S^{2e} never overflows
    weight = (b_s.s / top) ** exp
    value = m.frobenius_sq(_cross(b_r, grams.G[r, s] / c, b_s) * weight[None, :])
    if normalize:
        return value / float(np.sum(weight**2))
    with np.errstate(over="ignore"):
        units = (top * math.sqrt(c) * grams.scale) ** (2.0 * exp)  # back to the input's units
    return value * units if math.isfinite(units) else math.inf


def weighted_overlap_pairs(grams: m.Grams, exp: float = DEFAULT_OVERLAP_EXP, normalize: bool = True) -> np.ndarray:
    """The weighted overlap of every ordered run pair (r, s), r ≠ s: both weightings count."""
    R = grams.G.shape[0]
    return np.array([weighted_eigenspace_overlap(grams, r, s, exp, normalize) for r, s in permutations(range(R), 2)])


# ---------------------------------------------------------------- debiased CKA


def centered_norm_products(runs: Sequence[np.ndarray], grams: m.Grams) -> np.ndarray:
    """``[R, R]``: ``Σ_i k_r(i) k_s(i)`` with ``k_r(i) = ‖h_r(i) − μ_r‖²`` the squared norm of
    key i's centred row (runs divided by ``grams.scale``, means from ``grams``), in one pass."""
    R = len(runs)
    total = np.zeros((R, R))
    for _, stack in row_chunks(runs):
        if grams.scale != 1.0:
            stack = stack / grams.scale
        centred = stack - grams.means[:, None, :]
        k = np.einsum("rcd,rcd->rc", centred, centred)
        total += k @ k.T
    return total


def hsic_unbiased(xy: float, kk: float, t_x: float, t_y: float, n: int) -> float:
    """Song et al. 2012's unbiased HSIC for linear kernels of column-centred X, Y (n ≥ 4),
    ``[tr(K̃L̃) + 1ᵀK̃1·1ᵀL̃1/((n−1)(n−2)) − 2·1ᵀK̃L̃1/(n−2)] / (n(n−3))`` with K̃ = XXᵀ without
    its diagonal, where centring gives ``tr(K̃L̃) = ‖XᵀY‖² − kᵀl``, ``1ᵀK̃1 = −tr(XᵀX)`` and
    ``1ᵀK̃L̃1 = kᵀl`` (k, l the rows' squared norms)."""
    return (xy - kk + t_x * t_y / ((n - 1) * (n - 2)) - 2.0 * kk / (n - 2)) / (n * (n - 3))


def debiased_cka(grams: m.Grams, norm_products: np.ndarray, r: int, s: int) -> float:
    """Debiased linear CKA ``HSIC₁(K, L) / sqrt(HSIC₁(K, K) HSIC₁(L, L))`` (Kornblith et al.
    2019, §3 with Song et al. 2012's estimator); NaN below 4 keys or for a run whose own
    estimate is not positive. Unlike the plain estimate it is near 0, not near d/n, for
    unrelated runs at small n."""
    n = grams.n
    if n < 4:
        return math.nan
    blocks = grams.centered(r, r), grams.centered(s, s), grams.centered(r, s)
    c = block_scale(*blocks)
    rr, ss, rs = (b / c for b in blocks)
    kk = norm_products / c**2
    t_r, t_s = float(np.trace(rr)), float(np.trace(ss))
    h_rs = hsic_unbiased(m.frobenius_sq(rs), kk[r, s], t_r, t_s, n)
    h_rr = hsic_unbiased(m.frobenius_sq(rr), kk[r, r], t_r, t_r, n)
    h_ss = hsic_unbiased(m.frobenius_sq(ss), kk[s, s], t_s, t_s, n)
    if h_rr <= 0 or h_ss <= 0:
        return math.nan
    return h_rs / math.sqrt(h_rr * h_ss)


def debiased_cka_pairs(runs: Sequence[np.ndarray], grams: m.Grams, products: np.ndarray | None = None) -> np.ndarray:
    """Debiased linear CKA of every run pair r<s (one extra O(R·n·d) pass for the row norms,
    unless ``products``, ``centered_norm_products``, comes from a pass already made)."""
    products = centered_norm_products(runs, grams) if products is None else products
    R = grams.G.shape[0]
    return np.array([debiased_cka(grams, products, r, s) for r, s in combinations(range(R), 2)])
