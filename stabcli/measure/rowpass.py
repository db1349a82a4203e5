"""The audit's two passes over the rows: everything its representation metrics need from the
n×d runs, so that each run is read twice (and the k-NN queries once more), not once per metric.

* ``first_pass``: the cross-Gram blocks ``G_rs = H_rᵀ H_s`` and column sums (``Grams``: PIP,
  CKA, eigenspace overlap, Procrustes and generalized Procrustes, EIS), the cross-Gram blocks
  of the unit rows (semantic displacement) and the raw coordinate noise;
* ``second_pass``, once the consensus rotations are known: the aligned coordinate noise per
  dimension and per key, every key's energy and the products of the centred row norms
  (debiased CKA).

Each result equals the function of ``metrics`` or ``anchor`` that computes it alone (the
tests compare them). The rows come through ``wide_chunks``: one reused float64 buffer, the
products are float64 BLAS calls on it (numpy's symmetric product for ``wᵀw``), memory
O(chunk + R²·d²).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from stabcli.measure import metrics as m
from stabcli.measure.numerics import wide_chunks


@dataclass
class FirstPass:
    grams: m.Grams
    raw: m.NoiseShare  # coordinate noise of the runs as they are
    unit_joint: np.ndarray  # [R·d, R·d] Σ_i u(i)u(i)ᵀ of the side-by-side unit rows

    def displacement_by_pair(self) -> np.ndarray:
        """``metrics.displacement_by_pair`` from the unit rows' blocks (no pass)."""
        return m.displacement_from_unit_grams(self.unit_joint, self.grams)


@dataclass
class SecondPass:
    aligned: m.NoiseShare  # coordinate noise after the rotations (in the units of grams.scale)
    energy: np.ndarray  # per key E_r[‖h_r(i)‖²] of the runs divided by grams.scale
    norm_products: np.ndarray  # [R, R] anchor.centered_norm_products


def first_pass(runs: Sequence[np.ndarray]) -> FirstPass:
    """Cross-Gram blocks, unit-row blocks and raw noise in one pass (O(R²·n·d²) time)."""
    R = len(runs)
    n, d = runs[0].shape
    sums, var_sum, per_key = np.zeros(R * d), np.zeros(d), np.empty(n)
    joint, unit_joint = np.zeros((R * d, R * d)), np.zeros((R * d, R * d))
    peaks = np.zeros(R)
    common = m._CommonScale(runs)
    for rows, wide in wide_chunks(runs):
        if common.active and d:  # float32 runs need no peaks: a zero run shows as a zero Gram diagonal
            stack = wide.reshape(len(wide), R, d)
            peaks = np.maximum(peaks, np.maximum(stack.max(axis=(0, 2)), -stack.min(axis=(0, 2))))
        wide, factor = common.update(wide)
        if factor != 1.0:  # the scale grew: earlier sums are in the old units
            sums *= factor
            joint *= factor**2
            var_sum *= factor**2
            per_key[: rows.start] *= factor**2
        joint += wide.T @ wide  # one symmetric product: numpy uses BLAS syrk
        sums += wide.sum(axis=0)
        stack = wide.reshape(len(wide), R, d)
        variance = _run_variance(stack, axis=1)
        var_sum += variance.sum(axis=0)
        per_key[rows] = variance.mean(axis=1) if d else 0.0
        units = m.unit_rows(stack).reshape(len(wide), R * d)
        unit_joint += units.T @ units
    G = joint.reshape(R, d, R, d).transpose(0, 2, 1, 3).copy()
    grams = m.Grams(G, sums.reshape(R, d) / n, n, common.scale, peaks if common.active else None)
    energy_sum = np.einsum("rjj->j", G[np.arange(R), np.arange(R)]) / R  # Σ_i E_r[H[i,j]²]
    return FirstPass(grams, m.share_from_sums(var_sum, energy_sum, per_key, R, common.scale), unit_joint)


def _run_variance(stack: np.ndarray, axis: int) -> np.ndarray:
    """``Var_r`` (ddof=0) over the run axis of a chunk, per key and dimension, two-pass."""
    deviation = stack - stack.mean(axis=axis, keepdims=True)
    return np.square(deviation, out=deviation).mean(axis=axis)


def second_pass(runs: Sequence[np.ndarray], grams: m.Grams, rotations: Sequence[np.ndarray]) -> SecondPass:
    """Aligned noise (runs multiplied by ``rotations``), per-key energy and centred norm
    products, in the units of ``grams.scale`` (O(R·n·d²) time)."""
    R, d, n = grams.G.shape[0], grams.G.shape[2], grams.n
    turn = np.asarray(rotations, dtype=np.float64)
    var_sum, per_key, energy = np.zeros(d), np.empty(n), np.empty(n)
    products = np.zeros((R, R))
    for rows, wide in wide_chunks(runs):
        if grams.scale != 1.0:
            wide = wide / grams.scale
        stack = wide.reshape(len(wide), R, d)
        variance = _run_variance(np.matmul(stack.transpose(1, 0, 2), turn), axis=0)
        var_sum += variance.sum(axis=0)
        per_key[rows] = variance.mean(axis=1) if d else 0.0
        energy[rows] = np.einsum("ij,ij->i", wide, wide) / R
        centred = stack - grams.means[None, :, :]
        k = np.einsum("crd,crd->cr", centred, centred)
        products += k.T @ k
    # the energy per dimension after rotation, Σ_i E_r[(H_r Q_r)[i,j]²], from the diagonal blocks
    energy_sum = sum(np.einsum("ij,ik,kj->j", turn[r], grams.G[r, r], turn[r]) for r in range(R)) / R
    return SecondPass(m.share_from_sums(var_sum, energy_sum, per_key, R, grams.scale), energy, products)
