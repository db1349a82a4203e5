"""The audit's two passes over the rows against the metrics that compute each result alone."""

import numpy as np
import pytest
from scipy.stats import ortho_group

from stabcli.measure import anchor as a
from stabcli.measure import metrics as m
from stabcli.measure import numerics, rowpass
from stabcli.measure.align import generalized_procrustes

N, D, R = 70, 6, 4


def runs_of(seed=0, dtype=np.float64, noise=0.3):
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((N, D)) + 0.5  # non-zero means: the centred norms differ from the plain ones
    return [
        ((base + noise * rng.standard_normal((N, D))) @ ortho_group.rvs(D, random_state=seed + r)).astype(dtype)
        for r in range(R)
    ]


def assert_share_equal(got, want, rtol=1e-12):
    assert got.overall == pytest.approx(want.overall, rel=rtol)
    np.testing.assert_allclose(got.per_dim, want.per_dim, rtol=rtol)
    np.testing.assert_allclose(got.variance_per_dim, want.variance_per_dim, rtol=rtol)
    np.testing.assert_allclose(got.per_key_variance, want.per_key_variance, rtol=rtol, atol=1e-300)
    assert got.scale == want.scale


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_passes_equal_each_metric_computed_alone(monkeypatch, dtype):
    monkeypatch.setattr(numerics, "CACHE_ELEMENTS", R * D * 9)  # 9 rows per chunk: 8 chunks
    runs = runs_of(dtype=dtype)
    first = rowpass.first_pass(runs)
    alone = m.gram_blocks(runs)
    np.testing.assert_allclose(first.grams.G, alone.G, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(first.grams.means, alone.means, rtol=1e-12, atol=1e-15)
    assert first.grams.n == N and first.grams.scale == 1.0
    assert_share_equal(first.raw, m.noise_share(runs))
    np.testing.assert_allclose(first.displacement_by_pair(), m.displacement_by_pair(runs, alone), rtol=1e-12)
    rotations, _ = generalized_procrustes(first.grams)
    second = rowpass.second_pass(runs, first.grams, rotations)
    assert_share_equal(second.aligned, m.noise_share(runs, rotations), rtol=1e-10)
    np.testing.assert_allclose(second.energy, m.per_key_energy(runs), rtol=1e-12)
    np.testing.assert_allclose(second.norm_products, a.centered_norm_products(runs, alone), rtol=1e-12)


def test_known_answers_for_rotated_copies():
    """Exact rotations of one matrix: no noise after alignment, no displacement, and the raw
    coordinates far from agreeing."""
    runs = runs_of(noise=0.0)
    first = rowpass.first_pass(runs)
    rotations, _ = generalized_procrustes(first.grams)
    second = rowpass.second_pass(runs, first.grams, rotations)
    assert first.raw.overall > 0.3
    assert second.aligned.overall < 1e-12 and second.aligned.per_key_variance.max() < 1e-12
    np.testing.assert_allclose(first.displacement_by_pair(), 0.0, atol=1e-12)
    np.testing.assert_allclose(second.energy, np.mean([np.sum(h * h, axis=1) for h in runs], axis=0), rtol=1e-12)


def test_identical_runs_have_zero_raw_noise():
    runs = [runs_of()[0]] * R
    first = rowpass.first_pass(runs)
    assert first.raw.overall == 0.0 and not first.raw.per_key_variance.any()


@pytest.mark.filterwarnings("error")
def test_the_passes_when_the_scale_grows_between_chunks(monkeypatch):
    """Rows of 1e-300, then 1, then 1e300: the first pass rescales its sums as the common
    scale grows, and both passes agree with the metrics computed alone."""
    monkeypatch.setattr(numerics, "CACHE_ELEMENTS", R * D * 7)  # 7 rows per chunk
    runs = runs_of(5)
    for h in runs:
        h[:20] *= 1e-300
        h[40:] *= 1e300
    first = rowpass.first_pass(runs)
    alone = m.gram_blocks(runs)
    assert first.grams.scale == alone.scale > 1
    np.testing.assert_allclose(first.grams.G, alone.G, rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(first.grams.peaks, alone.peaks, rtol=0)
    raw = m.noise_share(runs)
    assert first.raw.overall == pytest.approx(raw.overall, rel=1e-12)
    np.testing.assert_allclose(first.raw.per_dim, raw.per_dim, rtol=1e-12)
    rotations, _ = generalized_procrustes(first.grams)
    second = rowpass.second_pass(runs, first.grams, rotations)
    aligned = m.noise_share(runs, rotations)
    assert second.aligned.overall == pytest.approx(aligned.overall, rel=1e-10)
    assert np.isinf(second.aligned.variance_per_dim).all()  # the input's units: beyond float64
    big = slice(40, None)
    np.testing.assert_allclose(
        second.aligned.per_key_variance_scaled[big] * (second.aligned.scale / aligned.scale) ** 2,
        aligned.per_key_variance_scaled[big],
        rtol=1e-10,
    )
