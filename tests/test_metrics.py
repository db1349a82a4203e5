"""Every metric against a direct (slow, n×n where there is one) computation and known answers."""

from itertools import combinations

import numpy as np
import pytest
from scipy.linalg import orthogonal_procrustes
from scipy.stats import ortho_group

from stabcli.measure import metrics as m
from stabcli.measure.align import generalized_procrustes, rotation_from_cross
from stabcli.measure.neighbours import knn_overlap, knn_overlap_by_pair, nearest_neighbours

N, D, R = 60, 5, 4


def random_runs(seed=0, n=N, d=D, runs=R, noise=0.3):
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((n, d))
    return [base + noise * rng.standard_normal((n, d)) for _ in range(runs)]


def rotated_runs(seed=0, n=N, d=D, runs=R):
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((n, d))
    return [base @ ortho_group.rvs(d, random_state=seed + r) for r in range(runs)]


def direct_noise_share(runs):
    stack = np.stack(runs)
    var = stack.var(axis=0)
    energy = (stack**2).mean(axis=0)
    return var.sum() / energy.sum(), var.sum(axis=0) / energy.sum(axis=0), stack.var(axis=0, ddof=1).mean(axis=0)


def test_noise_share_matches_direct_computation(monkeypatch):
    monkeypatch.setattr(m, "CHUNK_ELEMENTS", 64)  # force many chunks
    runs = random_runs()
    got = m.noise_share(runs)
    overall, per_dim, var_per_dim = direct_noise_share(runs)
    assert got.overall == pytest.approx(overall, abs=1e-12)
    np.testing.assert_allclose(got.per_dim, per_dim, atol=1e-12)
    np.testing.assert_allclose(got.variance_per_dim, var_per_dim, atol=1e-12)
    np.testing.assert_allclose(got.per_key_variance, np.stack(runs).var(axis=0).mean(axis=1), atol=1e-12)


def test_gram_blocks_match_direct_products(monkeypatch):
    monkeypatch.setattr(m, "CHUNK_ELEMENTS", 50)
    runs = random_runs()
    grams = m.gram_blocks(runs)
    for r, s in [(0, 0), (0, 3), (2, 1)]:
        np.testing.assert_allclose(grams.G[r, s], runs[r].T @ runs[s], atol=1e-10)
    np.testing.assert_allclose(grams.means, np.stack([h.mean(axis=0) for h in runs]), atol=1e-12)


def test_pip_loss_equals_the_n_by_n_formula():
    a, b = random_runs()[:2]
    grams = m.gram_blocks([a, b])
    direct = np.linalg.norm(a @ a.T - b @ b.T)
    assert m.pip_loss(grams, 0, 1) == pytest.approx(direct, rel=1e-9)


def test_linear_cka_equals_the_n_by_n_formula():
    a, b = random_runs(noise=1.0)[:2]
    grams = m.gram_blocks([a, b])
    centre = np.eye(N) - 1.0 / N  # HSIC form with n×n centred Gram matrices
    ka, kb = centre @ a @ a.T @ centre, centre @ b @ b.T @ centre
    direct = np.sum(ka * kb) / (np.linalg.norm(ka) * np.linalg.norm(kb))
    assert m.linear_cka(grams, 0, 1) == pytest.approx(direct, rel=1e-9)


def test_eigenspace_overlap_equals_svd_formula():
    a, b = random_runs(noise=1.0)[:2]
    grams = m.gram_blocks([a, b])
    ua = np.linalg.svd(a, full_matrices=False)[0]
    ub = np.linalg.svd(b, full_matrices=False)[0]
    direct = np.linalg.norm(ua.T @ ub) ** 2 / D
    assert m.eigenspace_overlap(grams, 0, 1) == pytest.approx(direct, rel=1e-8)


def test_eigenspace_overlap_with_rank_deficient_input():
    a = random_runs()[0]
    b = a.copy()
    b[:, 4] = 0  # rank 4 of 5
    grams = m.gram_blocks([a, b])
    ub = np.linalg.svd(b[:, :4], full_matrices=False)[0]
    ua = np.linalg.svd(a, full_matrices=False)[0]
    assert m.eigenspace_overlap(grams, 0, 1) == pytest.approx(np.linalg.norm(ua.T @ ub) ** 2 / 5, rel=1e-8)


def test_semantic_displacement_matches_direct_pairwise_procrustes():
    runs = random_runs(noise=0.5)[:3]
    grams = m.gram_blocks(runs)
    values = []
    for r, s in combinations(range(3), 2):
        q, _ = orthogonal_procrustes(runs[s], runs[r])
        aligned = runs[s] @ q
        cos = (runs[r] * aligned).sum(1) / (np.linalg.norm(runs[r], axis=1) * np.linalg.norm(aligned, axis=1))
        values.append(np.mean(1 - cos))
    assert m.semantic_displacement(runs, grams) == pytest.approx(np.mean(values), abs=1e-10)


def test_inner_product_noise_share_matches_direct_computation():
    runs = random_runs(noise=0.5)
    first, second = m.sample_pairs(N, 500, np.random.default_rng(3))
    assert (first != second).all()
    cos = []
    for h in runs:
        unit = h / np.linalg.norm(h, axis=1, keepdims=True)
        cos.append((unit[first] * unit[second]).sum(axis=1))
    cos = np.stack(cos)
    direct = cos.var(axis=0).sum() / (cos**2).mean(axis=0).sum()
    assert m.inner_product_noise_share(runs, first, second) == pytest.approx(direct, abs=1e-12)


def direct_neighbours(h, queries, k):
    unit = h / np.linalg.norm(h, axis=1, keepdims=True)
    sims = unit[queries] @ unit.T  # the n×n-style computation research code does
    sims[np.arange(len(queries)), queries] = -np.inf
    return np.argsort(-sims, axis=1)[:, :k]


def test_nearest_neighbours_match_brute_force(monkeypatch):
    h = random_runs()[0]
    queries = np.array([0, 5, 17, 59])
    got = nearest_neighbours(h, queries, 7)
    want = direct_neighbours(h, queries, 7)
    assert [set(row) for row in got] == [set(row) for row in want]
    for q, row in zip(queries, got, strict=False):
        assert q not in row


def test_knn_overlap_matches_direct_computation():
    runs = random_runs(noise=0.6)
    queries = np.arange(0, N, 3)
    neighbours = [direct_neighbours(h, queries, 5) for h in runs]
    direct = np.mean(
        [
            [len(set(a) & set(b)) / 5 for a, b in zip(neighbours[r], neighbours[s], strict=False)]
            for r, s in combinations(range(R), 2)
        ],
        axis=0,
    )
    np.testing.assert_allclose(knn_overlap(runs, queries, 5), direct, atol=1e-12)


# ------------------------------------------------------------------ known answers


def all_metrics(runs):
    grams = m.gram_blocks(runs)
    rotations, _ = generalized_procrustes(grams)
    first, second = m.sample_pairs(len(runs[0]), 2000, np.random.default_rng(0))
    return {
        "share": m.noise_share(runs).overall,
        "aligned": m.noise_share(runs, rotations).overall,
        "inner": m.inner_product_noise_share(runs, first, second),
        "knn": float(knn_overlap(runs, np.arange(40), 5).mean()),
        "pip": m.pairwise_mean(grams, m.pip_loss),
        "pip_relative": m.pairwise_mean(grams, m.pip_loss) / np.sqrt(m.frobenius_sq(grams.G[0, 0])),
        "cka": m.pairwise_mean(grams, m.linear_cka),
        "eig": m.pairwise_mean(grams, m.eigenspace_overlap),
        "disp": m.semantic_displacement(runs, grams),
    }


def test_identical_runs():
    base = random_runs()[0]
    got = all_metrics([base.copy() for _ in range(3)])
    assert got["share"] < 1e-20 and got["aligned"] < 1e-20 and got["inner"] < 1e-20
    assert got["knn"] == 1 and got["pip_relative"] < 1e-7
    assert (
        got["cka"] == pytest.approx(1) and got["eig"] == pytest.approx(1) and got["disp"] == pytest.approx(0, abs=1e-12)
    )


def test_runs_that_are_random_rotations_of_one_matrix():
    got = all_metrics(rotated_runs(n=200, d=8))
    assert got["share"] > 0.5  # coordinates: mostly noise
    assert got["aligned"] < 1e-12  # ... but all of it is a rotation
    assert got["inner"] < 1e-12  # inner products do not move
    assert got["knn"] == 1
    # PIP through the d×d identity cancels large terms: exact zero is out of reach, but relative
    # to ‖HHᵀ‖_F it is at rounding level (sqrt of machine epsilon).
    assert got["pip_relative"] < 1e-7
    assert got["cka"] == pytest.approx(1) and got["eig"] == pytest.approx(1)
    assert got["disp"] < 1e-12


def test_independent_random_runs():
    """Pure noise: with Var over runs at ddof=0 (the noise share's definition) the expected share is (R-1)/R."""
    rng = np.random.default_rng(1)
    n, k, runs = 400, 5, 4
    got = all_metrics([rng.standard_normal((n, 8)) for _ in range(runs)])
    expected = (runs - 1) / runs
    assert got["share"] == pytest.approx(expected, abs=0.02)
    assert got["inner"] == pytest.approx(expected, abs=0.05)
    assert 0.4 < got["aligned"] < expected  # a rotation explains a little of pure noise, not much
    assert got["knn"] < 4 * k / (n - 1)  # near chance


def test_zero_rows_do_not_divide_by_zero():
    runs = random_runs()
    for h in runs:
        h[3] = 0
    first, second = np.array([3, 1]), np.array([1, 3])
    assert np.isfinite(m.inner_product_noise_share(runs, first, second))
    assert np.isfinite(knn_overlap(runs, np.array([3, 4]), 3)).all()


def test_unit_rows_of_float32_rows_whose_squares_under_or_overflow():
    """float32 squares of 1e-25 underflow and of 1e25 overflow: those rows must still come
    out as unit rows, not as zero rows; zero rows stay zero."""
    x = np.random.default_rng(5).standard_normal((5, 6)).astype(np.float32)
    x[1] *= np.float32(1e-25)
    x[2] *= np.float32(1e25)
    x[3] = 0
    expected = x.astype(np.float64) / np.maximum(np.linalg.norm(x.astype(np.float64), axis=1, keepdims=True), 1e-300)
    got = m.unit_rows(x)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-7)
    np.testing.assert_array_equal(got[3], 0)


def test_per_key_numbers_match_direct_formulas():
    rng = np.random.default_rng(7)
    runs = [rng.standard_normal((30, 5)) for _ in range(3)]
    grams = m.gram_blocks(runs)
    energy = m.per_key_energy(runs)
    np.testing.assert_allclose(energy, np.mean([np.sum(h**2, axis=1) for h in runs], axis=0), rtol=1e-12)
    displacement = m.per_key_displacement(runs, grams)
    assert displacement.mean() == pytest.approx(m.semantic_displacement(runs, grams), rel=1e-12)
    q = rotation_from_cross(grams.G[1, 0])  # run 1 onto run 0
    aligned = runs[1] @ q
    cos = np.sum(runs[0] * aligned, axis=1) / np.linalg.norm(runs[0], axis=1) / np.linalg.norm(aligned, axis=1)
    only_01 = m.per_key_displacement(runs[:2], m.gram_blocks(runs[:2]))
    np.testing.assert_allclose(only_01, 1 - cos, rtol=1e-9, atol=1e-12)
    share = m.noise_share(runs)
    relative = m.relative_instability(share.per_key_variance, energy, 5)
    direct = np.stack(runs).var(axis=0).sum(axis=1) / energy
    np.testing.assert_allclose(relative, direct, rtol=1e-12)
    assert m.relative_instability(np.array([0.0, 1.0]), np.array([0.0, 2.0]), 2).tolist() == [0.0, 1.0]


# ------------------------------------------------------------------ magnitudes at float64's edges


def invariant_metrics(runs):
    """Every scale-invariant number the audit reports."""
    grams = m.gram_blocks(runs)
    rotations, _ = generalized_procrustes(grams)
    first, second = m.sample_pairs(len(runs[0]), 500, np.random.default_rng(0))
    raw, aligned = m.noise_share(runs), m.noise_share(runs, rotations)
    return {
        "share": raw.overall,
        "share_per_dim": raw.per_dim,
        "aligned": aligned.overall,
        "least_stable_order": np.argsort(-aligned.per_key_variance_scaled, kind="stable")[:10],
        "inner": m.inner_product_noise_share(runs, first, second),
        "knn": knn_overlap(runs, np.arange(30), 5),
        "pip_relative": m.relative_pip_loss(grams),
        "cka": m.pairwise_mean(grams, m.linear_cka),
        "eig": m.pairwise_mean(grams, m.eigenspace_overlap),
        "disp": m.semantic_displacement(runs, grams),
        "disp_per_key": m.per_key_displacement(runs, grams),  # audit --per-key
    }


def assert_same_metrics(got, expected):
    for name, value in expected.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-9, atol=1e-12, err_msg=name)


@pytest.mark.filterwarnings("error")  # no RuntimeWarning (overflow, underflow, invalid) may escape
@pytest.mark.parametrize("exponent", [1000, 997, 600, 450, -450, -997, -1000, -1040])
def test_scale_invariant_metrics_are_exact_at_any_magnitude(exponent):
    """Runs times 2^e (1e301 … 1e-313, the last ones subnormal): every scale-invariant metric
    equals the one of the same values brought back to ordinary magnitude (exactly, by 2^-e)."""
    runs = [np.ldexp(h, exponent) for h in random_runs(3)]
    ordinary = [np.ldexp(h, -exponent) for h in runs]  # exact: what is left after any subnormal rounding
    assert_same_metrics(invariant_metrics(runs), invariant_metrics(ordinary))


@pytest.mark.filterwarnings("error")
def test_scale_dependent_numbers_are_rescaled_back_when_finite():
    runs = random_runs(4)
    scale = 2.0**450  # values near 3e135: squares (1e271) fit, fourth powers of Gram entries do not
    big = [h * scale for h in runs]
    small_grams, big_grams = m.gram_blocks(runs), m.gram_blocks(big)
    assert big_grams.scale > 1 and small_grams.scale == 1
    assert m.pip_loss(big_grams, 0, 1) == pytest.approx(m.pip_loss(small_grams, 0, 1) * scale**2, rel=1e-9)
    np.testing.assert_allclose(
        m.noise_share(big).variance_per_dim, m.noise_share(runs).variance_per_dim * scale**2, rtol=1e-12
    )
    np.testing.assert_allclose(big_grams.peaks, [np.abs(h).max() for h in big], rtol=0)
    assert m.gram_blocks([h.astype(np.float32) for h in runs]).peaks is None  # float32: no per-chunk scan
    # beyond float64's range they are inf (too large) or NaN (too small, not a false 0); JSON shows null
    huge, tiny = m.gram_blocks([h * 1e300 for h in runs]), m.gram_blocks([h * 1e-300 for h in runs])
    assert m.pip_loss(huge, 0, 1) == np.inf and np.isnan(m.pip_loss(tiny, 0, 1))
    assert np.isinf(m.noise_share([h * 1e300 for h in runs]).variance_per_dim).all()
    assert np.isnan(m.noise_share([h * 1e-300 for h in runs]).per_key_variance).all()


@pytest.mark.filterwarnings("error")
def test_noise_share_when_the_scale_grows_between_chunks(monkeypatch):
    """Rows of 1e-300 first, then of 1e300: the accumulated sums shrink with the growing scale
    and agree with the direct formula on the values divided by the final scale."""
    monkeypatch.setattr(m, "CHUNK_ELEMENTS", 4 * D * 7)  # 7 rows per chunk
    runs = random_runs(5)
    for h in runs:
        h[:20] *= 1e-300
        h[20:40] *= 1.0
        h[40:] *= 1e300
    got = m.noise_share(runs)
    scale = m.power_of_two_scale(max(np.abs(h).max() for h in runs))
    share, per_dim, _ = direct_noise_share([h / scale for h in runs])
    assert got.scale == scale and got.overall == pytest.approx(share, rel=1e-12)
    np.testing.assert_allclose(got.per_dim, per_dim, rtol=1e-12)
    grams = m.gram_blocks(runs)
    direct = [[(a / scale).T @ (b / scale) for b in runs] for a in runs]
    np.testing.assert_allclose(grams.G, direct, rtol=1e-12, atol=1e-300)


@pytest.mark.filterwarnings("error")
def test_all_zero_and_identical_runs_give_finite_known_answers():
    zeros = [np.zeros((N, D)) for _ in range(3)]
    grams = m.gram_blocks(zeros)
    assert (grams.peaks == 0).all() and grams.scale == 1 and grams.zero_runs() == [0, 1, 2]
    live = random_runs(9)[:2]
    assert m.gram_blocks([live[0], np.zeros((N, D)), live[1]]).zero_runs() == [1]
    assert m.gram_blocks([h.astype(np.float32) for h in (live[0], np.zeros((N, D)), live[1])]).zero_runs() == [1]
    tiny_among_huge = m.gram_blocks([live[0] * 1e300, live[1] * 1e-300])  # the tiny run's Gram underflows to 0
    assert tiny_among_huge.zero_runs() == [] and not tiny_among_huge.G[1, 1].any()
    assert m.noise_share(zeros).overall == 0 and m.relative_pip_loss(grams) is None
    assert m.linear_cka(grams, 0, 1) == 0 and m.eigenspace_overlap(grams, 0, 1) == 0 and m.pip_loss(grams, 0, 1) == 0
    assert m.semantic_displacement(zeros, grams) == 1.0  # zero rows have cosine 0 by convention
    same = [random_runs(6)[0]] * 3
    got = invariant_metrics(same)
    assert got["share"] < 1e-20 and got["aligned"] < 1e-20 and got["inner"] < 1e-20 and (got["knn"] == 1).all()
    assert (
        got["cka"] == pytest.approx(1) and got["eig"] == pytest.approx(1) and got["disp"] == pytest.approx(0, abs=1e-12)
    )
    one_zero = random_runs(7)[:2] + [np.zeros((N, D))]  # one dead run among live ones: finite
    assert all(np.isfinite(v).all() for v in invariant_metrics(one_zero).values())


@pytest.mark.filterwarnings("error")
def test_unit_rows_of_float64_rows_beyond_float32_and_subnormal():
    x = np.random.default_rng(8).standard_normal((6, 5))
    factors = [1e300, 1e-300, 1e-310, 1.0, 0.0, 2.0**1020]
    scaled = x * np.array(factors)[:, None]
    got = m.unit_rows(scaled)
    assert got.dtype == np.float64
    for row, factor in enumerate(factors):
        if factor == 0:
            np.testing.assert_array_equal(got[row], 0)
            continue
        exact = scaled[row] / factor  # the row's own values at ordinary magnitude (exact up to subnormal rounding)
        np.testing.assert_allclose(got[row], exact / np.linalg.norm(exact), rtol=1e-12, atol=1e-15)
    bad = scaled.copy()
    bad[2, 1] = np.nan
    assert (m.unit_rows(bad)[2] == 0).all()  # NaN rows give zero rows, as in float32


def test_the_largest_float64_values_scale_without_overflow():
    """Values whose binary exponent is 1024 (above 2^1023, up to float64's maximum) once asked
    for the unrepresentable scale 2^1024 (OverflowError)."""
    big = np.finfo(np.float64).max
    scale = m.power_of_two_scale(big)
    assert scale == 2.0**1023 and np.isfinite((big / scale) ** 2)
    rng = np.random.default_rng(3)
    runs = [rng.standard_normal((20, 3)) for _ in range(2)]
    runs[0][0, 0] = big / 2
    share = m.noise_share(runs)
    assert np.isfinite(share.overall) and 0 <= share.overall <= 1


def _structured_runs(R=5, n=400, d=8, noise=0.4, seed=1):
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((n, d)) * np.linspace(3, 0.2, d)
    return [(base + noise * rng.standard_normal((n, d))).astype(np.float32) for _ in range(R)]


def test_rotated_noise_share_from_grams_equals_the_direct_share():
    runs = _structured_runs()
    grams = m.gram_blocks(runs)
    rng = np.random.default_rng(7)
    rotations = [m.random_rotation(8, rng) for _ in runs]
    assert all(np.allclose(q @ q.T, np.eye(8), atol=1e-12) for q in rotations)
    assert m.rotated_noise_share(grams, rotations) == pytest.approx(m.noise_share(runs, rotations).overall, abs=1e-10)


def test_pure_noise_spread_matches_seeded_random_rotations():
    """Mean (R−1)/R and the closed-form std against 400 seeded Haar rotations of every run."""
    runs = _structured_runs()
    grams = m.gram_blocks(runs)
    rng = np.random.default_rng(0)
    shares = [m.rotated_noise_share(grams, [m.random_rotation(8, rng) for _ in runs]) for _ in range(400)]
    std = m.pure_noise_share_std(grams)
    assert np.mean(shares) == pytest.approx(4 / 5, abs=3 * std / np.sqrt(400))
    assert np.std(shares) == pytest.approx(std, rel=0.15)
    assert m.noise_share(runs).overall < 4 / 5 - 2 * std  # shared structure: far below pure noise


def test_per_pair_values_average_to_the_reported_means():
    runs = _structured_runs(R=4, n=120)
    grams = m.gram_blocks(runs)
    pairs = list(combinations(range(4), 2))
    by_pair = knn_overlap_by_pair(runs, np.arange(30), 5)
    assert by_pair.shape == (6, 30)
    np.testing.assert_allclose(by_pair.mean(axis=0), knn_overlap(runs, np.arange(30), 5), atol=1e-12)
    for p, (r, s) in enumerate(pairs):  # one pair alone gives the same value as its row
        np.testing.assert_allclose(by_pair[p], knn_overlap([runs[r], runs[s]], np.arange(30), 5), atol=1e-12)
        assert m.displacement_by_pair(runs, grams)[p] == pytest.approx(
            m.semantic_displacement([runs[r], runs[s]], m.gram_blocks([runs[r], runs[s]])), rel=1e-9
        )
    assert np.mean(m.displacement_by_pair(runs, grams)) == pytest.approx(m.semantic_displacement(runs, grams))
    relative = m.relative_pip_loss_by_pair(grams)
    assert relative is not None and np.mean(relative) == pytest.approx(m.relative_pip_loss(grams))
    direct_cka = []
    for r, s in pairs:
        x, y = (runs[i].astype(np.float64) - runs[i].mean(axis=0) for i in (r, s))
        direct_cka.append(np.linalg.norm(x.T @ y) ** 2 / (np.linalg.norm(x.T @ x) * np.linalg.norm(y.T @ y)))
    np.testing.assert_allclose(m.pairwise_values(grams, m.linear_cka), direct_cka, rtol=1e-9)
