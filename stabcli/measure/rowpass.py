"""The audit's two passes over the rows: everything its representation metrics need from the
n×d runs, so that each run is read twice (and the k-NN queries once more), not once per metric.

* ``first_pass``: the cross-Gram blocks ``G_rs = H_rᵀ H_s`` and column sums (``Grams``: PIP,
  CKA, eigenspace overlap, Procrustes and generalized Procrustes, EIS), the cross-Gram blocks
  of the unit rows (semantic displacement) and the raw coordinate noise;
* ``second_pass``, once the consensus rotations are known: the aligned coordinate noise per
  dimension and per key, every key's energy and the products of the centred row norms
  (debiased CKA).

Each result equals the function of ``metrics`` or ``anchor`` that computes it alone (the
tests compare them). The rows come in the chunks of ``numerics.wide_slices``; each chunk is
read into its worker's float64 buffer and reduced there by ``threads.ordered_map``'s
workers (float64 BLAS calls, numpy's symmetric product for ``wᵀw``), and the chunks' sums
are added in row order, so the numbers do not depend on the number of workers. Memory
O(workers · chunk + R²·d²).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from stabcli.measure import metrics as m
from stabcli.measure.numerics import WideBuffer, chunk_bytes, wide_slices
from stabcli.measure.threads import ordered_map


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
    peaks = m.run_peaks(runs) if m.may_need_scaling(runs) else None  # float32 squares cannot overflow
    scale = m.power_of_two_scale(float(peaks.max())) if peaks is not None and R else 1.0
    buffer = WideBuffer()

    def chunk(rows: slice) -> tuple[slice, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        wide = buffer.read(runs, rows)
        if scale != 1.0:
            wide /= scale  # a power of two: exact
        stack = wide.reshape(len(wide), R, d)
        variance = _run_variance(stack, axis=1)
        units = m.unit_rows(stack).reshape(len(wide), R * d)
        # wide.T @ wide: one symmetric product, numpy uses BLAS syrk
        return rows, wide.T @ wide, wide.sum(axis=0), variance.sum(axis=0), variance, units.T @ units

    sums, var_sum, per_key = np.zeros(R * d), np.zeros(d), np.empty(n)
    joint, unit_joint = np.zeros((R * d, R * d)), np.zeros((R * d, R * d))
    chunks = wide_slices(runs)
    item = 2 * (R * d) ** 2 * 8 + 6 * chunk_bytes(runs, chunks)  # two Gram partials, the chunk's copies
    for rows, gram, column_sums, variance_sum, variance, unit_gram in ordered_map(chunk, chunks, item_bytes=item):
        joint += gram
        sums += column_sums
        var_sum += variance_sum
        per_key[rows] = variance.mean(axis=1) if d else 0.0
        unit_joint += unit_gram
    G = joint.reshape(R, d, R, d).transpose(0, 2, 1, 3).copy()
    grams = m.Grams(G, sums.reshape(R, d) / n, n, scale, peaks)
    energy_sum = np.einsum("rjj->j", G[np.arange(R), np.arange(R)]) / R  # Σ_i E_r[H[i,j]²]
    return FirstPass(grams, m.share_from_sums(var_sum, energy_sum, per_key, R, scale), unit_joint)


def _run_variance(stack: np.ndarray, axis: int) -> np.ndarray:
    """``Var_r`` (ddof=0) over the run axis of a chunk, per key and dimension, two-pass."""
    deviation = stack - stack.mean(axis=axis, keepdims=True)
    return np.square(deviation, out=deviation).mean(axis=axis)


def second_pass(runs: Sequence[np.ndarray], grams: m.Grams, rotations: Sequence[np.ndarray]) -> SecondPass:
    """Aligned noise (runs multiplied by ``rotations``), per-key energy and centred norm
    products, in the units of ``grams.scale`` (O(R·n·d²) time)."""
    R, d, n = grams.G.shape[0], grams.G.shape[2], grams.n
    turn = np.asarray(rotations, dtype=np.float64)
    buffer = WideBuffer()

    def chunk(rows: slice) -> tuple[slice, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        wide = buffer.read(runs, rows)
        if grams.scale != 1.0:
            wide /= grams.scale
        stack = wide.reshape(len(wide), R, d)
        variance = _run_variance(np.matmul(stack.transpose(1, 0, 2), turn), axis=0)
        energy = np.einsum("ij,ij->i", wide, wide) / R
        centred = stack - grams.means[None, :, :]
        k = np.einsum("crd,crd->cr", centred, centred)
        return rows, variance.sum(axis=0), variance, energy, k.T @ k

    var_sum, per_key, energy = np.zeros(d), np.empty(n), np.empty(n)
    products = np.zeros((R, R))
    chunks = wide_slices(runs)
    item = 6 * chunk_bytes(runs, chunks)  # the chunk, its rotated and centred copies
    for rows, variance_sum, variance, key_energy, product in ordered_map(chunk, chunks, item_bytes=item):
        var_sum += variance_sum
        per_key[rows] = variance.mean(axis=1) if d else 0.0
        energy[rows] = key_energy
        products += product
    # the energy per dimension after rotation, Σ_i E_r[(H_r Q_r)[i,j]²], from the diagonal blocks
    energy_sum = sum(np.einsum("ij,ik,kj->j", turn[r], grams.G[r, r], turn[r]) for r in range(R)) / R
    return SecondPass(m.share_from_sums(var_sum, energy_sum, per_key, R, grams.scale), energy, products)
