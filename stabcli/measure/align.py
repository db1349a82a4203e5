"""Comparing embeddings key by key: the one home of key matching and orthogonal Procrustes.

Every command that compares embeddings (``audit``, ``drift``, ``featurize --align-to``, the
``ProcrustesAligner`` estimator) matches keys with :func:`match_keys` / :func:`rows_of` and
rotates with the functions below. All of them work from d×d products accumulated over row
chunks in float64: memory O(chunk·d), never an n×n matrix.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from scipy.linalg import orthogonal_procrustes

from stabcli.inputs.embeddings import Embedding, fits_float32, require_finite
from stabcli.measure.numerics import block_scale, row_chunks
from stabcli.measure.threads import small_linalg, stop_point

if TYPE_CHECKING:
    from stabcli.measure.metrics import Grams

FINITE_CHECK_ROWS = 1 << 16  # rows checked for NaN/inf at a time


# ------------------------------------------------------------------ keys


@dataclass(frozen=True)
class KeyMatch:
    """The keys every list has, in the first list's order, and where each list holds them."""

    keys: list[str]
    rows: list[np.ndarray | None]  # per list: its row of each common key (None: the list is ``keys`` itself)
    lists: Sequence[Sequence[str]]

    @property
    def union(self) -> int:
        """Distinct keys over all lists."""
        return len(set().union(*map(set, self.lists)))

    @property
    def dropped(self) -> int:
        """Keys some list has and another lacks."""
        return 0 if all(r is None for r in self.rows) else self.union - len(self.keys)

    def only_in(self, index: int) -> list[str]:
        """Keys of list ``index`` that are not common, in its order."""
        common = set(self.keys)
        return [k for k in self.lists[index] if k not in common]


def match_keys(key_lists: Sequence[Sequence[str]]) -> KeyMatch:
    """Match several key lists: the common keys in the first list's order and, per list, the
    row of each (None for every list when all lists are equal)."""
    first = list(key_lists[0])
    if all(keys is key_lists[0] or list(keys) == first for keys in key_lists[1:]):
        return KeyMatch(first, [None] * len(key_lists), key_lists)
    common = set(first).intersection(*map(set, key_lists[1:]))
    keys = [k for k in first if k in common]
    rows: list[np.ndarray | None] = [rows_of(keys, within)[0] for within in key_lists]
    return KeyMatch(keys, rows, key_lists)


def rows_of(keys: Sequence[str], within: Sequence[str]) -> tuple[np.ndarray | None, list[str]]:
    """The row of each of ``keys`` in ``within`` (None when the lists are equal), and the keys
    ``within`` lacks (the rows then cover only the others)."""
    if list(keys) == list(within):
        return None, []
    position = {k: i for i, k in enumerate(within)}
    missing = [k for k in keys if k not in position]
    found = (position[k] for k in keys if k in position)
    return np.fromiter(found, dtype=np.int64, count=len(keys) - len(missing)), missing


def matched_vectors(
    emb: Embedding, rows: np.ndarray | None, keys: Sequence[str], dtype: type | None = np.float32
) -> np.ndarray:
    """The rows ``rows`` of ``emb`` (all of them, as stored, when None; else a copy in
    ``dtype`` when the values fit it, None keeping the stored type), whose keys are ``keys``, as floats. InputError
    naming the first key whose row holds NaN or inf."""
    arr = emb.vectors if rows is None else np.asarray(emb.vectors[rows])
    if rows is not None and dtype is not None and (arr.dtype == dtype or fits_float32(arr)):
        arr = np.asarray(arr, dtype=dtype)  # else (1e300 in float64) as stored: no overflow to inf, no warning
    if arr.dtype.kind != "f":
        arr = np.asarray(arr, dtype=np.float64)
    names = list(keys)
    for start in range(0, arr.shape[0], FINITE_CHECK_ROWS):
        stop_point()  # a run per worker (audit): Ctrl-C does not wait for the whole run
        require_finite(emb.source, names, arr[start : start + FINITE_CHECK_ROWS], start)
    return arr


# ------------------------------------------------------------------ Procrustes


@small_linalg
def rotation_from_cross(cross: np.ndarray) -> np.ndarray:
    """Orthogonal Q minimizing ``‖H Q − M‖_F`` given only ``cross = Hᵀ M`` (d×d).

    ``scipy.linalg.orthogonal_procrustes(A, B)`` (Schönemann 1966) depends on A and B only
    through ``AᵀB``, so passing (I, HᵀM) gives the same Q without the n×d matrices.
    """
    rotation, _ = orthogonal_procrustes(np.eye(cross.shape[0]), cross / block_scale(cross))  # Q is scale invariant
    return rotation


def cross_product(X: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """``Xᵀ·reference`` (d×d), accumulated over row chunks in float64."""
    cross = np.zeros((X.shape[1], reference.shape[1]))
    for _, stack in row_chunks([X, reference]):
        cross += stack[0].T @ stack[1]
    return cross


def procrustes_rotation(X: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Orthogonal Q minimizing ``‖X·Q − reference‖_F`` over matched rows (O(n·d²))."""
    return rotation_from_cross(cross_product(X, reference))


def alignment_residuals(X: np.ndarray, reference: np.ndarray, rotation: np.ndarray) -> tuple[float, float]:
    """Relative residuals ``‖X − R‖_F/‖R‖_F`` before and ``‖X·Q − R‖_F/‖R‖_F`` after the rotation
    (1 as the denominator when R is zero), over row chunks in float64."""
    before = after = energy = 0.0
    for _, stack in row_chunks([X, reference]):
        x, r = stack[0], stack[1]
        before += float(np.sum((x - r) ** 2))
        after += float(np.sum((x @ rotation - r) ** 2))
        energy += float(np.sum(r * r))
    scale = np.sqrt(energy) or 1.0
    return float(np.sqrt(before) / scale), float(np.sqrt(after) / scale)


@small_linalg
def procrustes_residual(a: np.ndarray, b: np.ndarray) -> float:
    """``min_Q ‖A − B·Q‖_F / max(‖A‖_F, ‖B‖_F)`` over orthogonal Q, without computing Q:
    ``‖A‖² + ‖B‖² − 2·Σσ(BᵀA)`` from d×d products in float64 (resolution about 1e-8)."""
    a64, b64 = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    na, nb = float(np.sum(a64 * a64)), float(np.sum(b64 * b64))
    scale = max(na, nb)
    if scale == 0.0:
        return 0.0
    singular = np.linalg.svd(b64.T @ a64, compute_uv=False)
    return float(np.sqrt(max(na + nb - 2.0 * float(singular.sum()), 0.0) / scale))


@small_linalg
def generalized_procrustes(grams: Grams, max_iter: int = 100, tol: float = 1e-7) -> tuple[list[np.ndarray], int]:
    """Rotations aligning every run to their consensus (generalized orthogonal Procrustes).

    Start from run 0 as the reference; then repeat: align each run to the mean of the
    aligned runs, recompute the mean, until it stops changing. The consensus
    ``M = (1/R) Σ_s H_s Q_s`` never materializes: ``H_rᵀ M = (1/R) Σ_s G_rs Q_s``. Since
    ``Σ_r ‖H_r Q_r − M‖² = Σ_r tr G_rr − R‖M‖²``, each step can only grow ``‖M‖²``; stop
    when it grows by less than ``tol`` relative. Returns (rotations, iterations used).
    """
    R = grams.G.shape[0]
    rotations = [rotation_from_cross(grams.G[r, 0]) for r in range(R)]

    def to_consensus(weights: list[np.ndarray]) -> tuple[list[np.ndarray], float]:
        """Every ``H_rᵀ M`` for the rotations ``weights``, and ``‖M‖² = (1/R) Σ_r tr(Q_rᵀ H_rᵀ M)``."""
        cross = [sum(grams.G[r, s] @ weights[s] for s in range(R)) / R for r in range(R)]
        return cross, sum(float(np.einsum("ij,ij->", weights[r], cross[r])) for r in range(R)) / R

    cross, previous = to_consensus(rotations)
    for iteration in range(1, max_iter + 1):
        rotations = [rotation_from_cross(c) for c in cross]
        cross, current = to_consensus(rotations)
        if current - previous <= tol * max(current, np.finfo(float).tiny):
            return rotations, iteration
        previous = current
    return rotations, max_iter
