"""EIS, weighted eigenspace overlap and debiased CKA against the papers' n×n formulas."""

from itertools import combinations

import numpy as np
import pytest
from scipy.stats import ortho_group

from stabcli.measure import anchor as a
from stabcli.measure import metrics as m
from stabcli.measure.align import generalized_procrustes


def runs_and_anchor(seed=0, n=40, d=5, runs=3, anchor_dim=7, noise=0.4):
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((n, d))
    arrays = [base + noise * rng.standard_normal((n, d)) for _ in range(runs)]
    anchor = np.hstack([base, rng.standard_normal((n, anchor_dim - d))])
    return arrays, anchor


def projection(x):
    u, _, _ = np.linalg.svd(x, full_matrices=False)
    return u @ u.T  # n×n: the reference may build it


def psd_power(sym, power):
    values, vectors = np.linalg.eigh(sym)
    values = np.clip(values, 0.0, None)
    keep = values > values.max() * 1e-12
    return (vectors[:, keep] * values[keep] ** power) @ vectors[:, keep].T


def eis_reference(x, y, e, e_other, alpha):
    """Leszczynski et al. 2020, Def. 1: ‖(UUᵀ − ŨŨᵀ) Σ^{1/2}‖_F² / tr(Σ), Σ = (EEᵀ)^alpha + (ẼẼᵀ)^alpha."""
    sigma = psd_power(e @ e.T, alpha) + psd_power(e_other @ e_other.T, alpha)
    diff = projection(x) - projection(y)
    return np.trace(diff @ diff @ sigma) / np.trace(sigma)


def hsic_reference(x, y):
    """Song et al. 2012, Theorem 2 (the unbiased estimator) with linear kernels, n×n."""
    n = x.shape[0]
    k, ell = x @ x.T, y @ y.T
    np.fill_diagonal(k, 0.0)
    np.fill_diagonal(ell, 0.0)
    one = np.ones(n)
    return (
        np.trace(k @ ell)
        + (one @ k @ one) * (one @ ell @ one) / ((n - 1) * (n - 2))
        - 2.0 / (n - 2) * (one @ k @ ell @ one)
    ) / (n * (n - 3))


def cka_debiased_reference(x, y):
    return hsic_reference(x, y) / np.sqrt(hsic_reference(x, x) * hsic_reference(y, y))


@pytest.mark.parametrize("alpha", [3.0, 1.0, 0.5, 0.0])
def test_eis_equals_the_paper_formula_with_two_anchors(alpha):
    (x, y), e = runs_and_anchor(runs=2)
    _, e_other = runs_and_anchor(seed=1, runs=1, anchor_dim=9)
    blocks = [(e.T @ e, x.T @ e, y.T @ e), (e_other.T @ e_other, x.T @ e_other, y.T @ e_other)]
    got = a.eis_from_blocks(x.T @ x, y.T @ y, x.T @ y, blocks, alpha)
    assert got == pytest.approx(eis_reference(x, y, e, e_other, alpha), rel=1e-10, abs=1e-13)


def test_eis_with_one_anchor_per_pair_and_a_file_anchor(monkeypatch):
    monkeypatch.setattr(m, "CHUNK_ELEMENTS", 64)  # many chunks
    runs, e = runs_and_anchor(runs=4)
    grams = m.gram_blocks(runs)
    got = a.eis_pairs(grams, a.file_anchor(runs, e, grams.scale, "anchor.npy"), alpha=3.0)
    want = [eis_reference(runs[r], runs[s], e, e, 3.0) for r, s in combinations(range(4), 2)]
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-13)


def test_eis_with_the_consensus_anchor_equals_the_formula_on_the_formed_consensus():
    runs, _ = runs_and_anchor(runs=3)
    grams = m.gram_blocks(runs)
    rotations, _ = generalized_procrustes(grams)
    consensus = sum(h @ q for h, q in zip(runs, rotations, strict=True)) / 3
    got = a.eis_pairs(grams, a.consensus_anchor(grams, rotations), alpha=3.0)
    want = [eis_reference(runs[r], runs[s], consensus, consensus, 3.0) for r, s in combinations(range(3), 2)]
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-13)


def test_eis_known_answers():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((50, 4))
    rotated = x @ ortho_group.rvs(4, random_state=1) * 7.5  # same span: EIS 0
    e = rng.standard_normal((50, 6))
    blocks = [(e.T @ e, x.T @ e, rotated.T @ e)]
    assert a.eis_from_blocks(x.T @ x, rotated.T @ rotated, x.T @ rotated, blocks) == pytest.approx(0.0, abs=1e-12)
    # orthogonal spans, anchor spanning both: every anchor direction in one span is missed by the other
    q, _ = np.linalg.qr(rng.standard_normal((50, 8)))
    left, right = q[:, :4], q[:, 4:]
    anchor = q  # singular values all 1: Σ = P_q, the projection onto both spans (trace 8)
    blocks = [(anchor.T @ anchor, left.T @ anchor, right.T @ anchor)]
    # ‖(P_l − P_r) Σ^{1/2}‖² = tr((P_l + P_r) P_q) = 8 since P_l P_r = 0: EIS = 8 / 8
    assert a.eis_from_blocks(left.T @ left, right.T @ right, left.T @ right, blocks) == pytest.approx(1.0)


def test_eis_is_scale_invariant_at_the_edges_of_float64():
    runs, e = runs_and_anchor(runs=2)
    grams = m.gram_blocks(runs)
    base = a.eis_pairs(grams, a.file_anchor(runs, e, grams.scale, "e"))
    for factor in (1e300, 1e-300):
        scaled = [h * factor for h in runs]
        grams_s = m.gram_blocks(scaled)
        got = a.eis_pairs(grams_s, a.file_anchor(scaled, e * factor, grams_s.scale, "e"))
        np.testing.assert_allclose(got, base, rtol=1e-9)


@pytest.mark.parametrize(("exp", "normalize"), [(1.0, True), (2.0, True), (0.5, False), (1.0, False)])
def test_weighted_overlap_equals_the_svd_formula(exp, normalize):
    runs, _ = runs_and_anchor(runs=2)
    grams = m.gram_blocks(runs)
    u1, _, _ = np.linalg.svd(runs[0], full_matrices=False)
    u2, s2, _ = np.linalg.svd(runs[1], full_matrices=False)
    want = np.linalg.norm(u1.T @ u2 @ np.diag(s2**exp), "fro") ** 2
    if normalize:
        want /= np.sum(s2 ** (2 * exp))
    got = a.weighted_eigenspace_overlap(grams, 0, 1, exp, normalize)
    assert got == pytest.approx(want, rel=1e-10)


def test_weighted_overlap_known_answers_and_scale():
    runs, _ = runs_and_anchor(runs=2)
    same = [runs[0], runs[0] @ ortho_group.rvs(5, random_state=2)]
    assert a.weighted_eigenspace_overlap(m.gram_blocks(same), 0, 1) == pytest.approx(1.0, abs=1e-12)
    # unnormalized: in the input's units (S^{2e} grows as factor^{2e})
    grams = m.gram_blocks(runs)
    small = m.gram_blocks([h * 2.0**-600 for h in runs])
    raw = a.weighted_eigenspace_overlap(grams, 0, 1, 1.0, normalize=False)
    assert a.weighted_eigenspace_overlap(small, 0, 1, 1.0, normalize=False) == pytest.approx(raw * 2.0**-1200, rel=1e-9)
    assert len(a.weighted_overlap_pairs(m.gram_blocks(runs * 2))) == 12  # ordered pairs: both weightings


def test_debiased_cka_equals_the_unbiased_hsic_formula(monkeypatch):
    monkeypatch.setattr(m, "CHUNK_ELEMENTS", 64)
    runs, _ = runs_and_anchor(runs=3, n=30)
    shifted = [h + 5.0 for h in runs]  # not centred: the estimator is translation invariant
    grams = m.gram_blocks(shifted)
    got = a.debiased_cka_pairs(shifted, grams)
    want = [cka_debiased_reference(shifted[r], shifted[s]) for r, s in combinations(range(3), 2)]
    np.testing.assert_allclose(got, want, rtol=1e-10)


def test_debiased_cka_known_answers():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((12, 6))
    grams = m.gram_blocks([x, 3.0 * x @ ortho_group.rvs(6, random_state=4)])
    assert a.debiased_cka_pairs([x, x], m.gram_blocks([x, x]))[0] == pytest.approx(1.0)
    assert a.debiased_cka(
        grams, a.centered_norm_products([x, 3.0 * x @ ortho_group.rvs(6, random_state=4)], grams), 0, 1
    ) == pytest.approx(1.0)
    # unrelated runs at small n: plain CKA is biased upwards (≈ d/n), the debiased one is near 0
    unrelated = [rng.standard_normal((20, 10)) for _ in range(2)]
    many = [
        a.debiased_cka_pairs(pair, m.gram_blocks(pair))[0]
        for pair in ([rng.standard_normal((20, 10)) for _ in range(2)] for _ in range(40))
    ]
    plain = m.linear_cka(m.gram_blocks(unrelated), 0, 1)
    assert abs(np.mean(many)) < 0.05 < plain
    assert np.isnan(a.debiased_cka_pairs([x[:3], x[:3]], m.gram_blocks([x[:3], x[:3]]))[0])  # n < 4


def test_audit_reports_the_three_measures_with_their_pair_spread(tmp_path):
    from conftest import make_runset
    from stabcli.commands.audit import AuditOptions, build_report, load_runs

    root = make_runset(tmp_path / "rs", runs=3, n=40, dim=4)
    runs = load_runs([root])
    arrays = [np.asarray(h, dtype=np.float64) for h in runs.arrays]
    options = AuditOptions(pairs=100, knn_k=3, knn_queries=10, top=2)
    rep = build_report(runs, options).representation
    rotations, _ = generalized_procrustes(m.gram_blocks(arrays))
    consensus = sum(h @ q for h, q in zip(arrays, rotations, strict=True)) / 3
    want = [eis_reference(arrays[r], arrays[s], consensus, consensus, 3.0) for r, s in combinations(range(3), 2)]
    assert rep.eis_anchor == "consensus" and rep.eis_alpha == 3.0 and rep.eis_keys == 40
    assert rep.eis.mean == pytest.approx(np.mean(want), rel=1e-6)
    assert rep.eis.std == pytest.approx(np.std(want, ddof=1), rel=1e-5) and rep.eis.pairs == 3
    assert rep.eis.min == pytest.approx(min(want), rel=1e-6) and rep.eis.max == pytest.approx(max(want), rel=1e-6)
    want_cka = [cka_debiased_reference(arrays[r], arrays[s]) for r, s in combinations(range(3), 2)]
    assert rep.cka_debiased.mean == pytest.approx(np.mean(want_cka), rel=1e-6)
    assert rep.weighted_eigenspace_overlap.pairs == 6

    # a named anchor with 30 of the 40 keys (other order, other dimension): EIS on those keys
    rng = np.random.default_rng(9)
    anchor = rng.standard_normal((30, 6))
    keys = [f"k{i}" for i in range(39, 9, -1)]
    path = tmp_path / "anchor.vec"
    path.write_text(
        "30 6\n"
        + "".join(k + " " + " ".join(repr(float(x)) for x in v) + "\n" for k, v in zip(keys, anchor, strict=True))
    )
    rep = build_report(runs, AuditOptions(pairs=100, knn_k=3, knn_queries=10, top=2, eis_anchor=path, eis_alpha=2.0))
    rows = np.array([int(k[1:]) for k in keys])
    order = np.argsort(rows)
    sub = [h[rows[order]] for h in arrays]
    want = [eis_reference(sub[r], sub[s], anchor[order], anchor[order], 2.0) for r, s in combinations(range(3), 2)]
    got = rep.representation
    assert got.eis_keys == 30 and got.eis_anchor == str(path)
    assert got.eis.mean == pytest.approx(np.mean(want), rel=1e-5)


def test_audit_eis_options_are_checked():
    from stabcli.commands.audit import AuditOptions
    from stabcli.errors import OptionError

    for bad in (-1.0, float("nan"), 101.0, True, "3"):
        with pytest.raises(OptionError, match="eis_alpha"):
            AuditOptions(eis_alpha=bad)
