import json

import numpy as np
import pytest
from scipy.stats import ortho_group

from stabcli.audit import AuditOptions, build_report, evaluate_checks, load_runs, parse_check, resolve
from stabcli.embeddings import keys_path_for, keys_text, write_embedding
from stabcli.errors import InputError, UsageError
from stabcli.training import TrainConfig, pretrain

SMALL = AuditOptions(pairs=500, knn_k=3, knn_queries=20, top=4)


def files(tmp_path, matrices, keys=None, suffix=".npy"):
    paths = []
    for i, mat in enumerate(matrices):
        path = tmp_path / f"e{i}{suffix}"
        names = keys[i] if keys else [f"k{j}" for j in range(len(mat))]
        if suffix == ".npy":  # np.save, not write_embedding: it refuses the bad inputs these tests need
            np.save(path, np.asarray(mat, dtype=np.float32))
            keys_path_for(path).write_text(keys_text(names), encoding="utf-8")
        else:
            write_embedding(path, names, mat)
        paths.append(path)
    return paths


def test_rotated_files_known_answers(tmp_path):
    rng = np.random.default_rng(0)
    base = rng.standard_normal((50, 6))
    paths = files(tmp_path, [base @ ortho_group.rvs(6, random_state=s) for s in range(3)], suffix=".txt")
    report = build_report(load_runs(paths), SMALL)
    rep = report["representation"]
    assert report["input"] == {"source": None, "run_names": [str(p) for p in paths], "runs": 3, "keys": 50, "dim": 6,
                               "dropped_keys": 0, "normalized": False, "seed": 0}
    assert rep["noise_share"] > 0.5 and rep["aligned_noise_share"] < 1e-9 and rep["inner_product_noise_share"] < 1e-9
    assert rep["knn_overlap"] == 1 and rep["cka"] == pytest.approx(1)
    assert len(rep["noise_share_per_dim"]) == 6 and sum(rep["noise_share_histogram"]["counts"]) == 6
    assert len(rep["least_stable"]) == 4
    assert report["training"]["final_loss_mean"] is None and report["downstream"] is None
    json.dumps(report)  # plain JSON types only


def test_keys_are_intersected_in_one_order_and_dropped_counted(tmp_path):
    rng = np.random.default_rng(0)
    keys = [["a", "b", "c", "d"], ["d", "c", "b", "x"]]
    mats = [rng.standard_normal((4, 3)) for _ in range(2)]
    warnings = []
    runs = load_runs(files(tmp_path, mats, keys), on_warning=warnings.append)
    assert runs.keys == ["b", "c", "d"] and runs.dropped == 2
    np.testing.assert_array_equal(runs.arrays[1], mats[1][[2, 1, 0]].astype(np.float32))
    assert warnings == ["2 keys are not in every run and were left out; comparing 3 common keys"]


def test_bad_inputs_name_the_file(tmp_path):
    rng = np.random.default_rng(0)
    a, b = files(tmp_path, [rng.standard_normal((5, 3)), rng.standard_normal((5, 4))])
    with pytest.raises(InputError, match=r"e1\.npy: dimension 4, but .*e0\.npy has 3"):
        load_runs([a, b])
    bad = rng.standard_normal((5, 3))
    bad[2, 1] = np.nan
    a, b = files(tmp_path, [rng.standard_normal((5, 3)), bad])
    with pytest.raises(InputError, match=r"e1\.npy: key 'k2' has NaN or infinite values"):
        load_runs([a, b])
    with pytest.raises(InputError, match="found 1 run"):
        load_runs([a])
    c, d = files(tmp_path, [np.ones((2, 3)), np.ones((2, 3))], [["a", "b"], ["c", "d"]])
    with pytest.raises(InputError, match=r"e1\.npy: no keys in common with .*e0\.npy"):
        load_runs([c, d])
    with pytest.raises(InputError, match="not a run set"):
        load_runs([tmp_path])


def test_run_set_with_checkpoints_reports_training(tmp_path, sessions_file):
    root = tmp_path / "runs"
    pretrain(root, sessions_file, TrainConfig(dim=6, epochs=3, checkpoints=True), runs=3, jobs=1)
    report = build_report(load_runs([root]), SMALL)
    training = report["training"]
    assert report["input"]["run_names"] == ["run-000", "run-001", "run-002"]
    losses = [json.loads((root / f"run-00{i}" / "losses.json").read_text()) for i in range(3)]
    assert training["final_loss"] == [run[-1] for run in losses]
    assert training["final_loss_mean"] == pytest.approx(np.mean([run[-1] for run in losses]))
    assert training["final_loss_std"] == pytest.approx(np.std([run[-1] for run in losses], ddof=1))
    assert [row["epoch"] for row in training["by_epoch"]] == [1, 2, 3]
    assert training["by_epoch"][0]["loss_mean"] == pytest.approx(np.mean([run[0] for run in losses]))
    # the last checkpoint is the final vectors, so its noise share is the report's
    assert training["by_epoch"][-1]["noise_share"] == pytest.approx(report["representation"]["noise_share"])


def test_normalize_option_changes_inputs_to_unit_rows(tmp_path):
    rng = np.random.default_rng(0)
    base = rng.standard_normal((30, 4))
    paths = files(tmp_path, [base, base * 3.0])  # same directions, other lengths
    raw = build_report(load_runs(paths), SMALL)["representation"]["noise_share"]
    unit = build_report(load_runs(paths), AuditOptions(**{**SMALL.__dict__, "normalize": True}))["representation"]["noise_share"]
    assert raw == pytest.approx(0.2, abs=1e-6)  # Var = x², E[H²] = (1 + 9)/2 x²
    assert unit < 1e-12


def test_knn_k_must_fit_the_keys(tmp_path):
    paths = files(tmp_path, [np.eye(3), np.eye(3)])
    with pytest.raises(UsageError, match=r"--knn-k 3: needs 1 <= k < number of common keys \(3\)"):
        build_report(load_runs(paths), AuditOptions(knn_k=3))


def test_checks():
    report = {"representation": {"knn_overlap": 0.55, "cka": 0.99, "least_stable": [{"aligned_variance": 0.1}]},
              "downstream": None, "checks": [], "passed": True}
    checks = evaluate_checks(report, ["representation.knn_overlap>=0.6", "representation.cka > 0.9",
                                      "representation.least_stable.0.aligned_variance<=0.1"])
    assert [c["passed"] for c in checks] == [False, True, True]
    assert checks[0] == {"name": "representation.knn_overlap>=0.6", "path": "representation.knn_overlap", "op": ">=",
                         "value": 0.55, "threshold": 0.6, "passed": False}
    assert report["passed"] is False
    assert parse_check(" a.b == 1e-3 ") == ("a.b", "==", 0.001)
    for bad in ["knn_overlap", "a.b >= x", "a.b => 3", ""]:
        with pytest.raises(UsageError, match="--check"):
            parse_check(bad)
    with pytest.raises(UsageError, match=r"no 'knn' in representation \(has: cka, knn_overlap, least_stable\)"):
        resolve(report, "representation.knn")
    with pytest.raises(UsageError, match="downstream is not a number"):
        resolve(report, "downstream")
