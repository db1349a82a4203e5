"""stabcli drift: known answers of the measures, the noise band's calibration on real word2vec
noise, its power on a refresh that moves a known set of items, and the command end to end."""

from __future__ import annotations

import json
from itertools import combinations
from pathlib import Path

import numpy as np
import pytest
from scipy.linalg import orthogonal_procrustes
from scipy.stats import ortho_group

from conftest import make_runset, runner
from stabcli.cli.app import app
from stabcli.commands.drift import (
    DriftOptions,
    compute_drift,
    evaluate_checks,
    load_inputs,
    move_items,
    validate_checks,
)
from stabcli.errors import OptionError, UsageError
from stabcli.inputs.corpus import CorpusOptions
from stabcli.inputs.embeddings import write_embedding
from stabcli.measure import drift_stats as dm
from stabcli.measure.align import procrustes_rotation
from stabcli.reports.schema import to_json
from stabcli.runset import RunSet
from stabcli.training.pretrain import TrainConfig, pretrain

N_ITEMS, N_GROUPS = 300, 6
NOISE_RUNS = 10
CONFIG = TrainConfig(dim=16, epochs=20, window=3, negative=3)
MOVED = {f"t{i}" for i in range(2, 50, 3)}  # 16 items of group 0 …
INTO = "3"  # … now appear in sessions of group 3


def group_sessions(seed: int = 0, n_sequences: int = 1500) -> list[list[str]]:
    """Sessions of one group each, items Zipf-popular within the group (300 items, 6 groups)."""
    rng = np.random.default_rng(seed)
    per = N_ITEMS // N_GROUPS
    weights = 1.0 / np.arange(1, per + 1) ** 0.8
    weights /= weights.sum()
    sessions = []
    for _ in range(n_sequences):
        group = int(rng.integers(0, N_GROUPS))
        items = rng.choice(per, size=int(rng.integers(5, 20)), p=weights) + group * per
        sessions.append([f"t{i}" for i in items])
    return sessions


def group_of(key: str) -> str:
    return str(int(key[1:]) // (N_ITEMS // N_GROUPS))


def write_corpus(path: Path, sessions: list[list[str]]) -> Path:
    path.write_text("".join(" ".join(s) + "\n" for s in sessions), encoding="utf-8")
    return path


def train(root: Path, corpus: Path, runs: int, seed: int) -> RunSet:
    result = pretrain(root, corpus, CONFIG, runs=runs, seed=seed, jobs=2, corpus_options=CorpusOptions(format="lines"))
    assert not result.failed
    return RunSet.open(root)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict[str, Path]:
    """10 noise runs (seeds 0-9), 3 held-out runs of the same corpus (seeds 10-12) and one run
    on a refreshed corpus where MOVED changed context (seed 100): a few seconds on 2 cores."""
    root = tmp_path_factory.mktemp("drift")
    sessions = group_sessions()
    corpus = write_corpus(root / "sessions.txt", sessions)
    noise = train(root / "noise", corpus, NOISE_RUNS, 0)
    held = train(root / "held", corpus, 3, 10)
    paths = {"root": root, "noise": root / "noise", "held": root / "held"}
    for i, index in enumerate(held.runs):
        emb = held.load(index)
        paths[f"after{i}"] = root / f"after{i}.npy"
        write_embedding(paths[f"after{i}"], emb.keys, np.asarray(emb.vectors))
    refreshed = move_items(sessions, {k: group_of(k) for s in sessions for k in s}, MOVED, INTO, seed=1)
    moved_run = train(root / "moved", write_corpus(root / "refreshed.txt", refreshed), 1, 100)
    emb = moved_run.load(moved_run.runs[0])
    paths["moved"] = root / "moved.npy"
    write_embedding(paths["moved"], emb.keys, np.asarray(emb.vectors))
    first = noise.load(0)
    paths["before"] = root / "before.npy"
    write_embedding(paths["before"], first.keys, np.asarray(first.vectors))
    return paths


def rng_matrix(n=50, d=6, seed=0):
    return np.random.default_rng(seed).standard_normal((n, d))


# ------------------------------------------------------------------ known answers


def test_rotated_after_has_zero_drift_after_alignment():
    b = rng_matrix()
    q = ortho_group.rvs(6, random_state=1)
    change = dm.key_change(b, b @ q, procrustes_rotation(b @ q, b))
    np.testing.assert_allclose(change.distance, 0, atol=1e-10)
    np.testing.assert_allclose(change.cosine_distance, 0, atol=1e-12)
    np.testing.assert_allclose(change.norm_change, 0, atol=1e-12)
    raw = dm.key_change(b, b @ q)  # --no-align: the rotation is seen as drift
    assert raw.distance.min() > 1e-3


def test_key_moved_by_known_vector_has_exactly_that_distance():
    b = rng_matrix()
    v = np.array([0.3, -1.2, 0.0, 2.0, 0.5, -0.1])
    a = b.copy()
    a[7] += v
    change = dm.key_change(b, a)
    assert change.distance[7] == pytest.approx(np.linalg.norm(v), rel=1e-12)
    assert np.all(np.delete(change.distance, 7) == 0)


def test_measures_match_direct_formulas():
    b, a = rng_matrix(seed=2), rng_matrix(seed=3)
    a[4] = 0  # a zero row: cosine distance 0 by convention, the distance is its norm
    q = procrustes_rotation(a, b)
    change = dm.key_change(b, a, q)
    aq = a @ q
    for i in range(len(b)):
        nb, na = np.linalg.norm(b[i]), np.linalg.norm(aq[i])
        assert change.distance[i] == pytest.approx(np.linalg.norm(b[i] - aq[i]))
        assert change.dot[i] == pytest.approx(b[i] @ aq[i])
        assert change.norm_change[i] == pytest.approx(na - nb)
        expected_cos = 0.0 if na == 0 else 1 - b[i] @ aq[i] / (nb * na)
        assert change.cosine_distance[i] == pytest.approx(expected_cos, abs=1e-12)
    expected_q, _ = orthogonal_procrustes(a, b)
    np.testing.assert_allclose(q, expected_q, atol=1e-10)


def test_pair_distances_match_pairwise_procrustes():
    runs = [rng_matrix(seed=s).astype(np.float32) for s in range(4)]
    distances, pairs = dm.pair_distances(runs)
    assert pairs == list(combinations(range(4), 2))
    for p, (r, s) in enumerate(pairs):
        q, _ = orthogonal_procrustes(runs[s].astype(float), runs[r].astype(float))
        expected = np.linalg.norm(runs[r] - runs[s] @ q, axis=1)
        np.testing.assert_allclose(distances[p], expected, rtol=1e-5)


def test_noise_band_leave_out_scales_match_a_direct_computation():
    rng = np.random.default_rng(4)
    runs, n = 5, 7
    pairs = list(combinations(range(runs), 2))
    distances = rng.random((len(pairs), n)).astype(np.float32) + 0.1
    for member in (True, False):
        band = dm.noise_band(distances, pairs, runs, member)
        np.testing.assert_allclose(band.scale, np.sqrt(np.mean(distances.astype(float) ** 2, axis=0)), rtol=1e-6)
        samples = []
        for p, (r, s) in enumerate(pairs):
            for left_out in (s, r) if member else ((r, s),):
                out = set(left_out) if isinstance(left_out, tuple) else {left_out}
                keep = [q for q, pair in enumerate(pairs) if not out & set(pair)]
                scale = np.sqrt(np.mean(distances[keep].astype(float) ** 2, axis=0))
                samples.append(distances[p] / scale)
        levels = np.array([np.median(t) for t in samples])
        factors = levels / np.median(levels)
        expected = np.sort(np.concatenate([t / f for t, f in zip(samples, factors, strict=False)]))
        np.testing.assert_allclose(band.null_ratios, expected, rtol=1e-5)
        assert band.level_range == pytest.approx((factors.min(), factors.max()))


def test_p_values_and_benjamini_hochberg_against_brute_force():
    null = np.sort(np.random.default_rng(5).random(1000).astype(np.float32))
    u = float(null[-51])  # K = 50 largest samples form the fitted tail
    mean_excess = float(np.mean(null[-50:].astype(float) - u))
    t = np.array([0.0, 0.5, 0.9, u + 0.01, 2.0, 1e6])
    p = dm.p_values(t, null)
    empirical = np.array([(1 + np.sum(null >= np.float32(x))) / 1001 for x in t])
    np.testing.assert_allclose(p[:3], empirical[:3])  # inside the null: the empirical p-value
    tail = 50 / 1001 * np.exp(-(t[3:] - u) / mean_excess)
    np.testing.assert_allclose(p[3:], np.minimum(empirical[3:], tail))
    assert p[-2] < 1 / 1001 and p[-1] == 0.0  # beyond the largest sample it keeps falling
    assert np.all(np.diff(p) <= 0)
    pv = np.array([0.01, 0.04, 0.03, 0.5, 0.002])
    q = dm.benjamini_hochberg(pv)
    n = len(pv)
    brute = [min(min(pv[j] * n / (np.sum(pv <= pv[j])) for j in range(n) if pv[j] >= pv[i]), 1) for i in range(n)]
    np.testing.assert_allclose(q, brute)


def test_ratio_zero_scale_conventions():
    np.testing.assert_array_equal(dm.ratio(np.array([0.0, 1.0, 2.0]), np.array([0.0, 0.0, 4.0])), [0.0, np.inf, 0.5])


# ------------------------------------------------------------------ options and checks


@pytest.mark.parametrize(
    "kwargs, param",
    [
        ({"alpha": 0}, "alpha"),
        ({"alpha": 1}, "alpha"),
        ({"alpha": float("nan")}, "alpha"),
        ({"knn_k": 0}, "knn_k"),
        ({"top": -1}, "top"),
        ({"seed": -1}, "seed"),
    ],
)
def test_options_name_the_bad_parameter(kwargs, param):
    with pytest.raises(OptionError) as info:
        DriftOptions(**kwargs)
    assert info.value.param == param


def test_check_paths_are_validated_against_the_report_types():
    assert validate_checks(["drift.moved_share<0.05"], has_noise=True, has_labels=False)[0][1] == "drift.moved_share"
    for expression, has_noise, has_labels, fragment in [
        ("drift.moved_share<0.05", False, False, "needs --noise"),
        ("noise.global_ratio<2", False, False, "needs --noise"),
        ("downstream.drop_aligned<0.1", True, False, "needs --labels"),
        ("drift.nope<1", True, True, "no 'nope' in drift"),
        ("nope.x<1", True, True, "no 'nope' in the report"),
        ("drift.top<1", True, True, "not a number"),
        ("input.before<1", True, True, "not a number"),
        ("drift<1", True, True, "drift is not a number"),
    ]:
        with pytest.raises(UsageError, match=fragment.replace("(", r"\(")):
            validate_checks([expression], has_noise, has_labels)


# ------------------------------------------------------------------ calibration and power


def moved_share(before, after, noise, alpha=0.01):
    report, table = compute_drift(load_inputs(before, after, noise), DriftOptions(alpha=alpha))
    return report, table


def test_calibration_on_a_seed_only_refresh(trained):
    """BEFORE = noise run 0, AFTER = a held-out seed of the same corpus and configuration:
    the moved share stays within alpha plus the stated tolerance (README: measured numbers)."""
    shares = {0.01: [], 0.05: []}
    for i in range(3):
        for alpha in shares:
            report, _ = moved_share(trained["noise"], trained[f"after{i}"], trained["noise"], alpha)
            assert report.input.before_in_noise
            assert report.drift.expected_false_positives == pytest.approx(alpha * N_ITEMS)
            shares[alpha].append(report.drift.moved_share)
    print("calibration (BEFORE in noise):", shares)
    for alpha, values in shares.items():
        assert max(values) <= alpha + 0.02, (alpha, values)
        assert abs(np.mean(values) - alpha) <= 0.01 + alpha / 2, (alpha, values)
    # BEFORE not one of the noise runs: two held-out seeds against the 10 noise runs
    report, _ = moved_share(trained["after0"], trained["after1"], trained["noise"])
    assert report.input.before_in_noise is False
    print("calibration (BEFORE not in noise):", report.drift.moved_share)
    assert report.drift.moved_share <= 0.01 + 0.02


SEED_ONLY = [("noise", "after0"), ("noise", "after1"), ("noise", "after2"), ("after0", "after1"), ("after0", "after2")]


def test_every_measure_is_calibrated_on_seed_only_refreshes(trained):
    """Five seed-only refreshes (AFTER = another seed on BEFORE's corpus), each measure: the
    moved share averages alpha ± 0.5 points at alpha 0.01 (1,500 key tests; one comparison
    of 300 keys moves in steps of 0.33 points), nothing survives the FDR, nothing moved
    beyond a global change, and the per-key p-values are uniform (Kolmogorov–Smirnov)."""
    from scipy.stats import kstest

    shares: dict[str, list[float]] = {name: [] for name in dm.MEASURES}
    for before, after in SEED_ONLY:
        report, table = moved_share(trained[before], trained[after], trained["noise"])
        assert report.drift.global_moved is False and report.noise.warnings == []
        for name, test in report.drift.by_measure.items():
            shares[name].append(test.moved_share)
            assert test.discoveries == 0 and test.beyond_global == 0, (before, after, name)
        if (before, after) == ("after0", "after1"):  # BEFORE not a noise run: the null is exact
            for name in dm.MEASURES:
                assert kstest(np.asarray(table.columns[f"{name}_p"]), "uniform").pvalue > 0.05, name
    print("calibration by measure:", shares)
    for name, values in shares.items():
        assert abs(np.mean(values) - 0.01) <= 0.005, (name, values)
    assert report.noise.smallest_empirical_p == pytest.approx(1 / (1 + report.noise.null_samples))


def test_power_on_a_refresh_that_moves_known_items(trained):
    report, table = moved_share(trained["noise"], trained["moved"], trained["noise"])
    keys = np.array(table.columns["key"])
    flagged = np.asarray(table.columns["moved"])
    is_moved = np.isin(keys, sorted(MOVED))
    groups = np.array([group_of(k) for k in keys])
    untouched = ~is_moved & ~np.isin(groups, ["0", INTO])  # groups whose sessions the refresh did not touch
    recall = flagged[is_moved].mean()
    untouched_share = flagged[untouched].mean()
    listed = {t.key for t in report.drift.top}
    print(
        f"power: recall {recall:.3f}, moved share among untouched groups {untouched_share:.4f}, "
        f"discoveries {report.drift.discoveries}"
    )
    assert recall >= 0.8
    assert untouched_share <= 0.01 + 0.02
    assert listed and listed <= set(keys[is_moved | ~untouched])  # no key of an untouched group is listed


# ------------------------------------------------------------------ the command


def test_cli_table_json_per_key_plots_and_checks(trained, tmp_path, monkeypatch):
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    args = [
        "drift",
        str(trained["noise"]),
        str(trained["moved"]),
        "--noise",
        str(trained["noise"]),
        "--per-key",
        str(tmp_path / "keys.csv"),
        "--json",
        str(tmp_path / "d.json"),
        "--markdown",
        str(tmp_path / "d.md"),
        "--plots",
        str(tmp_path / "plots"),
        "--check",
        "drift.moved_share<0.5",
        "--check",
        "noise.global_ratio<100",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "moved:" in result.stdout and "Moved keys" in result.stdout
    data = json.loads((tmp_path / "d.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    assert set(data) == {"stabcli_version", "input", "drift", "noise", "downstream", "checks", "passed"}
    assert data["passed"] and len(data["checks"]) == 2
    assert data["drift"]["moved_count"] == round(data["drift"]["moved_share"] * data["input"]["keys_compared"])
    import pandas as pd

    table = pd.read_csv(tmp_path / "keys.csv")
    assert len(table) == data["input"]["keys_compared"]
    assert int(table["moved"].sum()) == data["drift"]["moved_count"]
    assert {"distance", "noise_scale", "noise_band", "ratio", "p_value", "q_value", "knn_overlap"} <= set(table.columns)
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == ["drift_distribution.png", "drift_vs_noise.png"]
    assert summary.read_text().startswith("earlier step\n## stabcli drift")
    assert "| moved |" in (tmp_path / "d.md").read_text()

    failing = runner.invoke(
        app,
        [
            "drift",
            str(trained["noise"]),
            str(trained["moved"]),
            "--noise",
            str(trained["noise"]),
            "--check",
            "drift.moved_share<0.001",
            "--format",
            "json",
        ],
    )
    assert failing.exit_code == 1
    payload = json.loads(failing.stdout)
    assert payload["passed"] is False and payload["checks"][0]["passed"] is False


def test_cli_without_noise_says_it_cannot_separate_change_from_noise(trained):
    result = runner.invoke(app, ["drift", str(trained["before"]), str(trained["after0"]), "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["noise"] is None and data["drift"]["moved_share"] is None
    assert data["drift"]["top_by"] == "distance" and len(data["drift"]["top"]) == 20
    table = runner.invoke(app, ["drift", str(trained["before"]), str(trained["after0"])])
    assert "cannot be separated from training noise" in table.stdout


def test_cli_no_align_compares_raw_coordinates(tmp_path):
    b = rng_matrix(n=40)
    q = ortho_group.rvs(6, random_state=3)
    keys = [f"k{i}" for i in range(40)]
    write_embedding(tmp_path / "b.npy", keys, b)
    write_embedding(tmp_path / "a.npy", keys, b @ q)
    aligned = json.loads(
        runner.invoke(app, ["drift", str(tmp_path / "b.npy"), str(tmp_path / "a.npy"), "--format", "json"]).stdout
    )
    raw = json.loads(
        runner.invoke(
            app, ["drift", str(tmp_path / "b.npy"), str(tmp_path / "a.npy"), "--no-align", "--format", "json"]
        ).stdout
    )
    assert aligned["drift"]["distance_p99"] < 1e-5 and aligned["drift"]["knn_overlap"] == 1.0
    assert raw["drift"]["distance_median"] > 0.1 and raw["input"]["aligned"] is False
    assert raw["drift"]["knn_overlap"] == 1.0  # neighbours are rotation invariant


def test_keys_added_and_removed_are_counted_and_listed(tmp_path):
    b = rng_matrix(n=30)
    write_embedding(tmp_path / "b.vec", [f"k{i}" for i in range(30)], b)
    write_embedding(tmp_path / "a.vec", [f"k{i}" for i in range(5, 33)], np.vstack([b[5:], rng_matrix(n=3)]))
    data = json.loads(
        runner.invoke(
            app, ["drift", str(tmp_path / "b.vec"), str(tmp_path / "a.vec"), "--knn-k", "3", "--format", "json"]
        ).stdout
    )
    assert data["input"]["keys_compared"] == 25
    assert data["input"]["removed"] == [f"k{i}" for i in range(5)]
    assert data["input"]["added"] == ["k30", "k31", "k32"]
    assert data["drift"]["distance_p99"] < 1e-5


def test_keyless_arrays_on_both_sides_are_matched_by_position(tmp_path):
    b = rng_matrix(n=30).astype(np.float32)
    np.save(tmp_path / "b.npy", b)
    np.save(tmp_path / "a.npy", b)
    result = runner.invoke(app, ["drift", str(tmp_path / "b.npy"), str(tmp_path / "a.npy"), "--knn-k", "3"])
    assert result.exit_code == 0, result.output
    assert "matched by position" in result.stdout


def test_key_names_and_frequency_in_the_top_table(trained, tmp_path):
    names = tmp_path / "names.tsv"
    names.write_text("item\ttitle\n" + "".join(f"t{i}\tItem number {i}\n" for i in range(N_ITEMS)))
    result = runner.invoke(
        app,
        [
            "drift",
            str(trained["noise"]),
            str(trained["moved"]),
            "--noise",
            str(trained["noise"]),
            "--key-names",
            str(names),
            "--format",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    top = json.loads(result.stdout)["drift"]["top"]
    assert top and all(t["name"] == f"Item number {t['key'][1:]}" for t in top)


def test_downstream_stale_model_aligned_beats_raw(trained, tmp_path):
    labels = tmp_path / "groups.tsv"
    labels.write_text("item\tgroup\n" + "".join(f"t{i}\tg{group_of(f't{i}')}\n" for i in range(N_ITEMS)))
    result = runner.invoke(
        app,
        [
            "drift",
            str(trained["noise"]),
            str(trained["after0"]),
            "--labels",
            str(labels),
            "--format",
            "json",
            "--check",
            "downstream.drop_aligned<0.2",
        ],
    )
    assert result.exit_code == 0, result.output
    ds = json.loads(result.stdout)["downstream"]
    assert ds["task"] == "classification" and ds["metric"] == "accuracy" and ds["test"] == 60
    assert ds["before"] > 0.8 and ds["refit"] > 0.8
    assert ds["stale_aligned"] > ds["stale_raw"] + 0.2  # raw coordinates of a new run mean little to the old model
    assert ds["drop_aligned"] == pytest.approx(ds["refit"] - ds["stale_aligned"])


def test_report_json_has_no_nan(tmp_path):
    b = rng_matrix(n=20)
    b[3] = 0  # zero rows: relative norm change undefined
    inputs = load_inputs(*(write_and_path(tmp_path, name, b) for name in ("b.npy", "a.npy")))
    report, _ = compute_drift(inputs, DriftOptions(knn_k=3))
    report = evaluate_checks(report, validate_checks(["drift.distance_median<=1e-9"], False, False))
    text = json.dumps(to_json(report), allow_nan=False)
    assert json.loads(text)["passed"] is True


def write_and_path(tmp_path, name, b):
    write_embedding(tmp_path / name, [f"k{i}" for i in range(len(b))], b)
    return tmp_path / name


def synthetic_noise_set(root: Path, base: np.ndarray, runs: int = 6, counts: bool = False) -> Path:
    """A run set of rotated noisy copies of ``base`` (keys k0…), optionally with key counts."""
    rng = np.random.default_rng(7)
    arrays = [
        ((base + 0.05 * rng.standard_normal(base.shape)) @ ortho_group.rvs(base.shape[1], random_state=r)).astype(
            np.float32
        )
        for r in range(runs)
    ]
    key_counts = [10 * (i + 1) for i in range(len(base))] if counts else None
    return make_runset(root, vectors=arrays, counts=key_counts, epochs=0)


def test_rotation_of_before_moves_nothing_against_a_noise_band(tmp_path):
    base = rng_matrix(n=200, d=8, seed=11)
    noise = synthetic_noise_set(tmp_path / "noise", base)
    before = RunSet.open(noise).load(0)
    write_embedding(
        tmp_path / "after.npy", before.keys, np.asarray(before.vectors) @ ortho_group.rvs(8, random_state=99)
    )
    report, _ = compute_drift(load_inputs(noise, tmp_path / "after.npy", noise), DriftOptions())
    assert report.input.before_in_noise
    assert report.drift.moved_count == 0 and report.drift.discoveries == 0
    assert report.drift.distance_p99 < 1e-5


def test_frequency_from_the_run_set_and_parquet_per_key(tmp_path):
    base = rng_matrix(n=200, d=8, seed=12)
    noise = synthetic_noise_set(tmp_path / "noise", base, counts=True)
    before = RunSet.open(noise).load(0)
    after = np.asarray(before.vectors).copy()
    after[5] += 3.0  # one key moved far beyond its noise
    write_embedding(tmp_path / "after.npy", before.keys, after)
    result = runner.invoke(
        app,
        [
            "drift",
            str(noise),
            str(tmp_path / "after.npy"),
            "--noise",
            str(noise),
            "--format",
            "json",
            "--per-key",
            str(tmp_path / "keys.parquet"),
        ],
    )
    assert result.exit_code == 0, result.output
    top = json.loads(result.stdout)["drift"]["top"]
    assert top[0]["key"] == "k5" and top[0]["frequency"] == 60
    import pandas as pd

    table = pd.read_parquet(tmp_path / "keys.parquet")
    assert table.loc[table["key"] == "k5", "moved"].item()
    assert table.loc[table["key"] == "k5", "frequency"].item() == 60
    assert table.loc[table["key"] == "k5", "distance"].item() == pytest.approx(3.0 * np.sqrt(8), rel=0.05)


def test_force_replaces_an_existing_report(tmp_path):
    b = rng_matrix(n=30)
    write_embedding(tmp_path / "b.npy", [f"k{i}" for i in range(30)], b)
    (tmp_path / "r.json").write_text("old")
    args = [
        "drift",
        str(tmp_path / "b.npy"),
        str(tmp_path / "b.npy"),
        "--knn-k",
        "3",
        "--json",
        str(tmp_path / "r.json"),
    ]
    assert runner.invoke(app, args).exit_code == 2
    assert (tmp_path / "r.json").read_text() == "old"
    assert runner.invoke(app, [*args, "--force"]).exit_code == 0
    assert json.loads((tmp_path / "r.json").read_text())["input"]["keys_compared"] == 30
    assert not list(tmp_path.glob(".*tmp*"))


def test_keys_file_gives_a_keyless_after_its_keys(tmp_path):
    """--keys (embeddings.match_inputs): a keyless AFTER whose rows are BEFORE's keys reversed
    is matched key by key, so it has zero drift; without --keys the mix is refused."""
    keys = [f"k{i}" for i in range(30)]
    b = rng_matrix(n=30).astype(np.float32)
    write_embedding(tmp_path / "b.vec", keys, b)
    np.save(tmp_path / "a.npy", b[::-1])
    (tmp_path / "a-keys.txt").write_text("".join(k + "\n" for k in keys[::-1]))
    args = ["drift", str(tmp_path / "b.vec"), str(tmp_path / "a.npy"), "--knn-k", "3", "--format", "json"]
    assert runner.invoke(app, args).exit_code == 2
    result = runner.invoke(app, [*args, "--keys", str(tmp_path / "a-keys.txt")])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["input"]["keys_compared"] == 30 and not data["input"]["keyless"]
    assert data["drift"]["distance_p99"] < 1e-5


def test_input_format_reads_a_file_whatever_its_suffix(tmp_path):
    keys = [f"k{i}" for i in range(30)]
    b = rng_matrix(n=30)
    write_embedding(tmp_path / "b.vec", keys, b)
    (tmp_path / "b.vec").rename(tmp_path / "b.data")
    write_embedding(tmp_path / "a.vec", keys, b)
    (tmp_path / "a.vec").rename(tmp_path / "a.data")
    args = ["drift", str(tmp_path / "b.data"), str(tmp_path / "a.data"), "--knn-k", "3", "--format", "json"]
    assert runner.invoke(app, args).exit_code == 2
    result = runner.invoke(app, [*args, "--input-format", "word2vec"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["drift"]["distance_p99"] < 1e-5


def test_output_paths_with_rich_markup_are_printed_verbatim(tmp_path):
    keys = [f"k{i}" for i in range(30)]
    write_embedding(tmp_path / "b.vec", keys, rng_matrix(n=30))
    figs = tmp_path / "[bold]figs"
    result = runner.invoke(
        app, ["drift", str(tmp_path / "b.vec"), str(tmp_path / "b.vec"), "--knn-k", "3", "--plots", str(figs)]
    )
    assert result.exit_code == 0, result.stderr
    assert f"wrote {figs / 'drift_vs_noise.png'}" in result.stderr
    existing = runner.invoke(app, ["drift", str(tmp_path / "b.vec"), str(tmp_path / "b.vec"), "--plots", str(figs)])
    assert existing.exit_code == 2 and "[bold]figs" in existing.stderr and existing.stderr.count("\n") == 1


def test_step_summary_is_appended_with_the_markdown(tmp_path, monkeypatch):
    keys = [f"k{i}" for i in range(30)]
    write_embedding(tmp_path / "b.vec", keys, rng_matrix(n=30))
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = runner.invoke(app, ["drift", str(tmp_path / "b.vec"), str(tmp_path / "b.vec"), "--knn-k", "3"])
    assert result.exit_code == 0, result.stderr
    text = summary.read_text()
    assert text.startswith("earlier step\n") and "## stabcli drift" in text


def test_keys_and_paths_with_rich_markup_are_shown_verbatim(tmp_path):
    """Keys, display names and paths are data: '[bold]' in them is printed, not interpreted."""
    keys = [f"[k{i}]" for i in range(30)]
    b = rng_matrix(n=30)
    a = b.copy()
    a[0] += 5.0
    folder = tmp_path / "[red]x"
    folder.mkdir()
    write_embedding(folder / "b.vec", keys, b)
    write_embedding(folder / "a.vec", keys, a)
    result = runner.invoke(
        app,
        ["drift", str(folder / "b.vec"), str(folder / "a.vec"), "--knn-k", "3", "--no-align", "--top", "1"],
        env={"COLUMNS": "300"},
    )
    assert result.exit_code == 0, result.stderr
    assert str(folder / "b.vec") in result.stdout and "[k0]" in result.stdout


# ------------------------------------------------------------------ noise compatibility, direction vs length, global


def runset_like(root: Path, base: np.ndarray, manifest: dict, runs: int = 6) -> Path:
    """``synthetic_noise_set`` with a pretrain-like manifest (corpus hash, configuration)."""
    synthetic_noise_set(root, base, runs)
    (root / "stabcli.json").write_text(json.dumps({"schema_version": 1, "runs": {}, **manifest}))
    return root


CONFIG_8 = {"model": "word2vec", "dim": 8, "window": 3, "negative": 3, "epochs": 10, "sg": True, "min_count": 1}


@pytest.mark.parametrize(
    "changed, field",
    [
        ({"corpus": {"sha256": "f" * 64, "options": {"format": "lines"}}}, "corpus sha256"),
        ({"config": {**CONFIG_8, "epochs": 20}}, "epochs"),
        ({"config": {**CONFIG_8, "window": 5, "negative": 10}}, "negative"),
        ({"corpus": {"sha256": "a" * 64, "options": {"format": "lines", "tokenize": "simple"}}}, "corpus tokenize"),
        (
            {
                "corpus": {
                    "sha256": "a" * 64,
                    "options": {"format": "lines"},
                    "encoding": "utf-8",
                    "columns": {"user": "s"},
                }
            },
            "corpus columns",
        ),
        ({"corpus": {"sha256": "a" * 64, "options": {"format": "lines"}, "encoding": "iso8859-1"}}, "corpus encoding"),
    ],
)
def test_noise_from_other_data_or_configuration_is_refused_unless_allowed(tmp_path, changed, field):
    base = rng_matrix(n=120, d=8, seed=21)
    corpus = {"sha256": "a" * 64, "options": {"format": "lines"}, "encoding": "utf-8"}
    if field == "corpus columns":
        corpus["columns"] = {"user": "u"}
    manifest = {"corpus": corpus, "config": CONFIG_8}
    before = runset_like(tmp_path / "before", base, manifest)
    noise = runset_like(tmp_path / "noise", base, {**manifest, **changed})
    after = write_and_path(tmp_path, "after.npy", RunSet.open(before).load(1).vectors)
    result = runner.invoke(app, ["drift", str(before), str(after), "--noise", str(noise)])
    assert result.exit_code == 2, result.output
    assert f"--noise {noise}: its {field} is " in result.stderr and "--allow-noise-mismatch" in result.stderr
    args = ["drift", str(before), str(after), "--noise", str(noise), "--allow-noise-mismatch", "--format", "json"]
    allowed = runner.invoke(app, args)
    assert allowed.exit_code == 0, allowed.output
    data = json.loads(allowed.stdout)["noise"]
    assert data["compatibility"] == "overridden"
    assert any(field in w and "--allow-noise-mismatch" in w for w in data["warnings"])
    same = runner.invoke(app, ["drift", str(before), str(after), "--noise", str(before), "--format", "json"])
    assert json.loads(same.stdout)["noise"]["compatibility"] == "checked"


def test_a_noise_set_from_before_0_3_without_encoding_or_columns_is_compatible(tmp_path):
    """Manifests written before 0.3 record neither the encoding nor the columns: unknown, not
    different (but a field they do record, like --tokenize's default, is still compared)."""
    base = rng_matrix(n=120, d=8, seed=23)
    corpus = {"sha256": "a" * 64, "options": {"format": "lines"}, "encoding": "iso8859-1", "columns": {"user": "u"}}
    before = runset_like(tmp_path / "before", base, {"corpus": corpus, "config": CONFIG_8})
    old = {"sha256": "a" * 64, "options": {"format": "lines", "encoding": "latin-1"}}  # as typed, no codec
    noise = runset_like(tmp_path / "noise", base, {"corpus": old, "config": CONFIG_8})
    after = write_and_path(tmp_path, "after.npy", RunSet.open(before).load(1).vectors)
    result = runner.invoke(app, ["drift", str(before), str(after), "--noise", str(noise), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["noise"]["compatibility"] == "checked"


def test_plain_files_with_noise_of_another_scale_get_a_warning(tmp_path):
    base = rng_matrix(n=200, d=8, seed=22)
    noise = synthetic_noise_set(tmp_path / "noise", base)
    run = RunSet.open(noise).load(1).vectors
    before = write_and_path(tmp_path, "before.npy", 50 * np.asarray(run))
    after = write_and_path(tmp_path, "after.npy", 50 * np.asarray(RunSet.open(noise).load(2).vectors))
    report, _ = compute_drift(load_inputs(before, after, noise), DriftOptions())
    assert report.noise.compatibility == "unchecked"
    assert any("median norm (2.68) is 0.0201× BEFORE" in w for w in report.noise.warnings), report.noise.warnings
    result = runner.invoke(app, ["drift", str(before), str(after), "--noise", str(noise)])
    assert result.exit_code == 0 and "warning: the noise runs' median norm" in result.stdout
    small = write_and_path(tmp_path, "small.npy", np.asarray(run) + 1e-4 * rng_matrix(n=200, d=8, seed=3))
    report, _ = compute_drift(load_inputs(noise, small, noise), DriftOptions())  # AFTER ≈ run 1, not run 0
    assert not any("changed" in w for w in report.noise.warnings)


def test_direction_and_length_are_tested_separately(tmp_path):
    """Keys 0-9 only get longer (×3), keys 10-19 only turn (another key's direction, same
    norm): each measure lists its own keys and --measure chooses which decides moved."""
    base = rng_matrix(n=300, d=8, seed=23)
    noise = synthetic_noise_set(tmp_path / "noise", base, runs=8)
    before = np.asarray(RunSet.open(noise).load(0).vectors, dtype=np.float64)
    after = before.copy()
    after[:10] *= 3.0
    norms = np.linalg.norm(before[10:20], axis=1, keepdims=True)
    after[10:20] = before[200:210] / np.linalg.norm(before[200:210], axis=1, keepdims=True) * norms
    path = write_and_path(tmp_path, "after.npy", after)
    listed = {}
    for measure in dm.MEASURES:
        report, table = compute_drift(load_inputs(noise, path, noise), DriftOptions(measure=measure, top=50))
        assert report.noise.measure == measure
        listed[measure] = {int(t.key[1:]) for t in report.drift.top}
        assert set(report.drift.by_measure) == set(dm.MEASURES)
        assert report.drift.discoveries == report.drift.by_measure[measure].discoveries
    assert set(range(10)) <= listed["length"] and not listed["length"] & set(range(10, 20))
    assert set(range(10, 20)) <= listed["direction"] and not listed["direction"] & set(range(10))
    assert set(range(20)) <= listed["distance"]
    np.testing.assert_allclose(table.columns["relative_norm_change"][:10], 2.0, rtol=1e-5)
    top = {t.key: t for t in report.drift.top}
    assert top["k3"].length_p < 1e-6 and top["k13"].direction_p < 1e-6 and top["k3"].direction_p > 1e-3


def test_a_global_move_is_said_and_keys_beyond_it_are_listed(tmp_path):
    """Every key moved 4× its noise (a large refresh) and five keys were replaced: the
    verdict says the whole embedding moved, and the list is the keys beyond that."""
    base = rng_matrix(n=300, d=8, seed=24)
    noise = synthetic_noise_set(tmp_path / "noise", base, runs=8)
    before = np.asarray(RunSet.open(noise).load(0).vectors, dtype=np.float64)
    rng = np.random.default_rng(5)
    after = before + 4 * 0.05 * rng.standard_normal(before.shape)
    after[:5] = rng.standard_normal((5, 8)) * np.linalg.norm(before[:5], axis=1, keepdims=True) / np.sqrt(8)
    path = write_and_path(tmp_path, "after.npy", after)
    report, _ = compute_drift(load_inputs(noise, path, noise), DriftOptions(measure="distance"))
    d = report.drift
    assert d.global_moved and report.noise.global_ratio > report.noise.level_range_high
    assert d.moved_share > 0.5  # against the seed noise nearly everything moved
    assert {t.key for t in d.top} == {f"k{i}" for i in range(5)} and d.moved_beyond_global == 5
    assert all(t.beyond_global for t in d.top)
    result = runner.invoke(
        app,
        [
            "drift",
            str(noise),
            str(path),
            "--noise",
            str(noise),
            "--measure",
            "distance",
            "--check",
            "drift.moved_beyond_global<=5",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "The whole embedding moved: the typical key's distance changed" in result.stdout
    assert "5 key(s) moved beyond the global change" in result.stdout
    assert "Moved beyond the global change (top 5 of 5" in result.stdout


def test_drift_announces_multilabel_labels_like_audit(tmp_path):
    import stabcli

    rng = np.random.default_rng(3)
    keys = [f"k{i}" for i in range(60)]
    paths = []
    for name in ("before", "after"):
        path = tmp_path / f"{name}.npy"
        np.save(path, rng.standard_normal((60, 6)).astype(np.float32))
        (tmp_path / f"{name}.keys.txt").write_text("\n".join(keys) + "\n")
        paths.append(path)
    labels = tmp_path / "genres.csv"  # a key,label file with repeated keys: several labels per key
    labels.write_text("".join(f"{k},A\n" + (f"{k},B\n" if i % 2 else "") for i, k in enumerate(keys)))
    said = "labeled keys have several labels: audited as multi-label"
    result = runner.invoke(app, ["drift", *map(str, paths), "--labels", str(labels), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert f"warning: {labels}: 30 of the 60 {said}" in result.stderr
    assert json.loads(result.stdout)["downstream"]["task"] == "multilabel"
    heard = []
    stabcli.drift(*paths, labels=labels, on_warning=heard.append)
    assert any(said in message for message in heard), heard
    audit = runner.invoke(app, ["audit", *map(str, paths), "--labels", str(labels), "--format", "json"])
    assert audit.exit_code == 0 and f"warning: {labels}: 30 of the 60 {said}" in audit.stderr
