"""stabcli.measure.align: key matching and orthogonal Procrustes, against direct computations."""

import numpy as np
import pytest
from scipy.linalg import orthogonal_procrustes
from scipy.stats import ortho_group

from stabcli.errors import InputError
from stabcli.inputs.embeddings import Embedding
from stabcli.measure import metrics as m
from stabcli.measure import numerics
from stabcli.measure.align import (
    alignment_residuals,
    generalized_procrustes,
    match_keys,
    matched_vectors,
    procrustes_residual,
    procrustes_rotation,
    rotation_from_cross,
    rows_of,
)


def random_runs(seed=0, n=60, d=5, runs=4, noise=0.3):
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((n, d))
    return [base + noise * rng.standard_normal((n, d)) for _ in range(runs)]


# ------------------------------------------------------------------ keys


def test_match_keys_keeps_the_first_order_and_finds_every_row():
    match = match_keys([["a", "b", "c", "d"], ["d", "x", "b", "a"], ["b", "a", "d", "y", "z"]])
    assert match.keys == ["a", "b", "d"]
    rows = [r.tolist() for r in match.rows]
    assert rows == [[0, 1, 3], [3, 2, 0], [1, 0, 2]]
    assert match.union == 7 and match.dropped == 4
    assert match.only_in(0) == ["c"] and match.only_in(1) == ["x"] and match.only_in(2) == ["y", "z"]


def test_equal_key_lists_need_no_rows():
    match = match_keys([["a", "b"], ["a", "b"], ["a", "b"]])
    assert match.keys == ["a", "b"] and match.rows == [None, None, None] and match.dropped == 0
    assert match.only_in(1) == []
    assert match_keys([["a", "b"], ["b", "a"]]).rows[1].tolist() == [1, 0]  # same keys, other order


def test_no_common_keys_is_an_empty_match():
    match = match_keys([["a"], ["b"]])
    assert match.keys == [] and [len(r) for r in match.rows] == [0, 0] and match.dropped == 2


def test_rows_of_names_the_missing_keys():
    rows, missing = rows_of(["b", "q", "a"], ["a", "b", "c"])
    assert rows.tolist() == [1, 0] and missing == ["q"]
    assert rows_of(["a", "b"], ["a", "b"]) == (None, [])


def test_matched_vectors_takes_rows_and_names_a_nan_key(tmp_path):
    vectors = np.arange(12, dtype=np.float64).reshape(4, 3)
    emb = Embedding(["w", "x", "y", "z"], vectors, tmp_path / "e.npy")
    taken = matched_vectors(emb, np.array([2, 0]), ["y", "w"])
    assert taken.dtype == np.float32 and taken.tolist() == [[6, 7, 8], [0, 1, 2]]
    assert matched_vectors(emb, np.array([1]), ["x"], dtype=None).dtype == np.float64
    assert matched_vectors(emb, None, emb.keys) is vectors
    assert matched_vectors(Embedding(["a"], np.array([[1, 2]]), tmp_path / "i.npy"), None, ["a"]).dtype.kind == "f"
    vectors[3, 1] = np.nan
    with pytest.raises(InputError, match=r"e\.npy.*'z'"):
        matched_vectors(emb, np.array([0, 3]), ["w", "z"])


# ------------------------------------------------------------------ Procrustes


def test_rotation_from_cross_product_equals_scipy_on_the_matrices():
    a, b = random_runs()[:2]
    direct, _ = orthogonal_procrustes(a, b)
    np.testing.assert_allclose(rotation_from_cross(a.T @ b), direct, atol=1e-12)
    np.testing.assert_allclose(rotation_from_cross(1e300 * (a.T @ b)), direct, atol=1e-12)  # scale invariant


def test_procrustes_rotation_over_row_chunks_equals_scipy(monkeypatch):
    monkeypatch.setattr(numerics, "CHUNK_ELEMENTS", 64)  # 6 rows per chunk of two 5-dim runs: many chunks
    rng = np.random.default_rng(1)
    reference = rng.standard_normal((203, 5))
    q = ortho_group.rvs(5, random_state=2)
    X = (reference @ q.T + 0.01 * rng.standard_normal((203, 5))).astype(np.float32)
    direct, _ = orthogonal_procrustes(X.astype(np.float64), reference)
    rotation = procrustes_rotation(X, reference)
    np.testing.assert_allclose(rotation, direct, atol=1e-12)
    np.testing.assert_allclose(rotation, q, atol=0.01)
    before, after = alignment_residuals(X, reference, rotation)
    scale = np.linalg.norm(reference)
    assert before == pytest.approx(np.linalg.norm(X - reference) / scale, rel=1e-12)
    assert after == pytest.approx(np.linalg.norm(X @ direct - reference) / scale, rel=1e-9)
    assert after < 0.02 < before


def test_residuals_of_a_zero_reference_are_not_divided_by_zero():
    X = np.ones((4, 2))
    assert alignment_residuals(X, np.zeros((4, 2)), np.eye(2)) == (pytest.approx(np.sqrt(8)), pytest.approx(np.sqrt(8)))


def test_procrustes_residual_matches_a_direct_procrustes_fit():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((300, 8)), rng.standard_normal((300, 8))
    q, _ = orthogonal_procrustes(b, a)
    direct = np.linalg.norm(a - b @ q) / max(np.linalg.norm(a), np.linalg.norm(b))
    assert procrustes_residual(a, b) == pytest.approx(direct, rel=1e-9)
    assert procrustes_residual(np.zeros((3, 2)), np.zeros((3, 2))) == 0.0


def test_generalized_procrustes_reaches_the_direct_iteration():
    runs = random_runs(noise=0.8)
    rotations, iterations = generalized_procrustes(m.gram_blocks(runs), tol=1e-14, max_iter=500)
    # direct GPA on the n×d matrices
    reference = runs[0]
    aligned = [h @ orthogonal_procrustes(h, reference)[0] for h in runs]
    for _ in range(500):
        consensus = np.mean(aligned, axis=0)
        aligned = [h @ orthogonal_procrustes(h, consensus)[0] for h in runs]
    got = [h @ q for h, q in zip(runs, rotations, strict=False)]
    np.testing.assert_allclose(np.mean(got, axis=0), np.mean(aligned, axis=0), atol=1e-6)
    assert 1 <= iterations < 500
