"""``--mlflow`` (``stabcli.reports.tracking``): what a report becomes in MLflow, read back from a
real store with ``mlflow.search_runs``: params, metrics, per-epoch steps, artifacts; pretrain's
parent run with a nested run per seed; MLflow's file store; the missing extra."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import assert_bad_input, drift_argv, files_state, make_runset
from stabcli.cli.app import app
from stabcli.reports.tracking import metric_name, params_of, report_metrics, report_tags

runner = CliRunner()
FAST = ["--knn-k", "3", "--knn-queries", "10", "--pairs", "200", "--top", "4"]


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_every_number_of_a_report_becomes_a_metric_with_steps():
    data = {
        "passed": True,
        "input": {"runs": 3, "source": "runs/a"},
        "representation": {
            "noise_share": 0.25,
            "per_dim": [0.5, None, 0.75],
            "least_stable": [{"key": "k1", "relative_instability": 0.9}],
            "pip_loss": None,
        },
        "training": {
            "loss_by_run": [[2.0, 1.0], [2.5, None]],
            "by_epoch": [
                {"epoch": 1, "noise_share": 0.5, "variance_quantiles": {"median": 1.0}},
                {"epoch": 2, "noise_share": 0.25, "variance_quantiles": None},
            ],
        },
        "downstream": {"variants": {"phi:64@0.5": {"churn": 0.125}}},
    }
    assert list(report_metrics(data)) == [
        ("passed", 1.0, 0),
        ("input.runs", 3.0, 0),
        ("representation.noise_share", 0.25, 0),
        ("representation.per_dim", 0.5, 0),
        ("representation.per_dim", 0.75, 2),
        ("training.loss_by_run.0", 2.0, 0),
        ("training.loss_by_run.0", 1.0, 1),
        ("training.loss_by_run.1", 2.5, 0),
        ("training.by_epoch.noise_share", 0.5, 1),
        ("training.by_epoch.variance_quantiles.median", 1.0, 1),
        ("training.by_epoch.noise_share", 0.25, 2),
        ("downstream.variants.phi:64_0.5.churn", 0.125, 0),
    ]
    assert report_tags(data) == {"stabcli.input.source": "runs/a"}
    assert params_of({"knn_k": 3, "labels": None, "check": [], "variants": ["h", "avg"]}) == {
        "knn_k": "3",
        "variants": "h,avg",
    }
    assert metric_name("a<b>|c") == "a_b__c"


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A real MLflow store (MLflow's default kind, SQLite) that the commands log into."""
    pytest.importorskip("mlflow", reason="MLflow is not installed: pip install 'stabcli[mlflow]'")
    pytest.importorskip("sqlalchemy", reason="MLflow's SQLite store needs SQLAlchemy: pip install 'stabcli[mlflow]'")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)  # artifacts go to ./mlruns
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    return uri


def _runs(experiment):
    import mlflow

    return mlflow.search_runs(experiment_names=[experiment], order_by=["attributes.start_time ASC"])


def test_audit_logs_params_metrics_steps_and_artifacts(store, tmp_path):
    from mlflow.tracking import MlflowClient

    root = make_runset(tmp_path / "runs", runs=3, n=30, dim=5, epochs=3)
    result = invoke("audit", root, *FAST, "--json", tmp_path / "a.json", "--mlflow", "--mlflow-experiment", "stab")
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "a.json").read_text())
    runs = _runs("stab")
    assert len(runs) == 1
    run = runs.iloc[0]
    assert run["status"] == "FINISHED" and run["tags.mlflow.runName"] == "stabcli audit"
    assert run["params.knn_k"] == "3" and run["params.pairs"] == "200" and run["params.inputs"] == str(root)
    assert run["metrics.representation.knn_overlap"] == report["representation"]["knn_overlap"]
    assert run["metrics.representation.cka"] == report["representation"]["cka"]
    assert run["metrics.input.keys"] == 30
    client = MlflowClient()
    history = client.get_metric_history(run["run_id"], "training.by_epoch.noise_share")
    assert sorted((m.step, m.value) for m in history) == [
        (row["epoch"], row["noise_share"]) for row in report["training"]["by_epoch"]
    ]
    per_dim = client.get_metric_history(run["run_id"], "representation.noise_share_per_dim")
    assert sorted((m.step, m.value) for m in per_dim) == list(
        enumerate(report["representation"]["noise_share_per_dim"])
    )
    names = sorted(a.path for a in client.list_artifacts(run["run_id"]))
    expected = ["audit-per-key.csv", "audit.html", "audit.json", "audit.md"]
    if importlib.util.find_spec("matplotlib") is not None:
        expected.append("plots")
        figures = [a.path for a in client.list_artifacts(run["run_id"], "plots")]
        assert "plots/fig1c_noise_by_epoch.png" in figures
    assert names == sorted(expected)
    local = client.download_artifacts(run["run_id"], "audit.json", str(tmp_path))
    assert json.loads(Path(local).read_text()) == report
    assert f"logged to MLflow: run {run['run_id']} in experiment 'stab' at {store}" in result.stderr


def test_pretrain_logs_a_parent_and_a_nested_run_per_seed(store, tmp_path, sessions_file):
    from mlflow.tracking import MlflowClient

    result = invoke(
        "pretrain",
        sessions_file,
        "--out",
        tmp_path / "r",
        "--runs",
        "2",
        "--dim",
        "4",
        "--epochs",
        "3",
        "--seed",
        "7",
        "--jobs",
        "1",
        "--format",
        "json",
        "--mlflow",
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    runs = _runs("stabcli")
    parent = runs[runs["tags.mlflow.runName"] == "stabcli pretrain r"].iloc[0]
    assert parent["params.runs"] == "2" and parent["params.epochs"] == "3"
    assert parent["metrics.runs_complete"] == 2 and parent["metrics.keys"] == summary["keys"]
    children = runs[runs["tags.mlflow.parentRunId"] == parent["run_id"]].sort_values("tags.mlflow.runName")
    assert list(children["tags.mlflow.runName"]) == ["run-000", "run-001"]
    assert list(children["params.seed"]) == ["7", "8"]
    by_index = {r["index"]: r for r in summary["runs"]}
    client = MlflowClient()
    for i, (_, child) in enumerate(children.iterrows()):
        assert child["metrics.final_loss"] == pytest.approx(by_index[i]["final_loss"])
        assert child["metrics.seconds"] == pytest.approx(by_index[i]["seconds"])
        losses = json.loads((tmp_path / "r" / f"run-{i:03d}" / "losses.json").read_text())
        history = client.get_metric_history(child["run_id"], "loss")
        assert sorted((m.step, m.value) for m in history) == [(e + 1, pytest.approx(v)) for e, v in enumerate(losses)]
    assert [a.path for a in client.list_artifacts(parent["run_id"])] == ["stabcli.json"]


def test_drift_logs_its_report(store, tmp_path):
    noise = make_runset(tmp_path / "noise", runs=4, n=30, dim=5)
    result = invoke(
        *drift_argv(noise),
        "--json",
        tmp_path / "d.json",
        "--mlflow",
    )
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "d.json").read_text())
    run = _runs("stabcli").iloc[0]
    assert run["metrics.drift.moved_count"] == report["drift"]["moved_count"]
    assert run["metrics.noise.noise_median"] == report["noise"]["noise_median"]
    assert run["params.alpha"] == "0.01"


def test_file_store_is_used_when_mlflow_allows_it(tmp_path, monkeypatch):
    mlflow = pytest.importorskip("mlflow", reason="MLflow is not installed: pip install 'stabcli[mlflow]'")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", str(tmp_path / "mlruns"))
    root = make_runset(tmp_path / "runs", runs=2, n=20, dim=4)
    version = tuple(int(p) for p in mlflow.__version__.split(".")[:2])
    if version >= (3, 13):  # MLflow 3.13 put the file store in maintenance mode: opt in or get one line
        monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
        before = files_state(tmp_path)
        result = invoke("audit", root, *FAST, "--json", tmp_path / "a.json", "--mlflow")
        assert_bad_input(result, "The filesystem tracking backend")
        assert f"MLflow at {tmp_path / 'mlruns'}" in result.stderr
        assert files_state(tmp_path) == before  # refused before any work: no --json either
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    result = invoke("audit", root, *FAST, "--mlflow")
    assert result.exit_code == 0, result.output
    runs = mlflow.search_runs(experiment_names=["stabcli"])
    assert len(runs) == 1 and runs.iloc[0]["metrics.input.runs"] == 2
    assert (tmp_path / "mlruns").is_dir()


def test_missing_extra_is_one_line_before_any_work(tmp_path, monkeypatch):
    root = make_runset(tmp_path / "runs", runs=2, n=20, dim=4)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a))
    before = files_state(tmp_path)
    result = invoke("audit", root, *FAST, "--json", tmp_path / "a.json", "--mlflow")
    assert_bad_input(result, "error: --mlflow needs MLflow: pip install 'stabcli[mlflow]'", tmp_path, before)
    result = invoke("audit", root, *FAST, "--mlflow-experiment", "x")
    assert_bad_input(result, "--mlflow-experiment only applies with --mlflow", tmp_path, before)
