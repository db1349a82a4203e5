"""Bad inputs of the report outputs and of ``stabcli compare``: one ``error:`` line, exit 2,
nothing written (the bad-input catalogue, marker ``bad_input``)."""

from __future__ import annotations

import importlib.util
import json

import pytest
from typer.testing import CliRunner

from conftest import assert_bad_input, files_state, make_runset
from stabcli.cli.app import app

pytestmark = pytest.mark.bad_input
runner = CliRunner()
FAST = ["--knn-k", "3", "--knn-queries", "10", "--pairs", "200"]
OK = '"input": {"runs": 2, "keys": 5, "dim": 3}, "representation": {"noise_share": 0.5'


def run(tmp_path, *args):
    before = files_state(tmp_path)
    return runner.invoke(app, [str(a) for a in args]), before


@pytest.mark.parametrize(
    "content, fragment",
    [
        ("{not json", "r.json: not a JSON audit report"),
        ('{"input": {"before": "a", "after": "b"}, "drift": {}}', "r.json: not a stabcli audit report (input.runs"),
        ('{"input": {"runs": 2, "keys": 5, "dim": 3}}', "r.json: not a stabcli audit report (no 'representation'"),
        ("[]", "r.json: not a stabcli audit report (the JSON is not an object)"),
        ('{"input": {"runs": true, "keys": 5, "dim": 3}}', "not a stabcli audit report (input.runs is not a number)"),
        # a report edited or written by something else: each field compare reads, of the wrong type
        ('{"input": {"runs": -3, "keys": 5, "dim": 3}, "representation": {"noise_share": 0.5}}', "input.runs is -3"),
        ('{"input": {"runs": 2, "keys": 0.5, "dim": 3}, "representation": {"noise_share": 0.5}}', "input.keys is 0.5"),
        ("{" + OK + ', "knn_overlap": "[bold]x"}}', "(representation.knn_overlap is not a number)"),
        ("{" + OK + ', "knn_overlap": true}}', "(representation.knn_overlap is not a number)"),
        ("{" + OK + ', "eis": {"mean": [1], "min": 0, "max": 1}}}', "(representation.eis.mean is not a number)"),
        ("{" + OK + ', "by_pair": [1]}}', "(representation.by_pair is not an object)"),
        ("{" + OK + ', "by_pair": {"cka": {"min": "a"}}}}', "(representation.by_pair.cka.min is not a number)"),
        ("{" + OK + '}, "downstream": {"variants": ["h"]}}', "(downstream.variants is not an object)"),
        ("{" + OK + '}, "downstream": {"variants": {"h": "x"}}}', "(downstream.variants.'h' is not an object)"),
        ("{" + OK + '}, "downstream": {"variants": {"h": {"churn": "x"}}}}', "downstream.variants.'h'.churn is not a"),
        ("{" + OK + '}, "downstream": {"variants": {"h": {"accuracy_by_run": 1}}}}', "accuracy_by_run is not a list"),
    ],
)
def test_compare_a_json_that_is_not_an_audit(tmp_path, content, fragment):
    (tmp_path / "r.json").write_text(content)
    (tmp_path / "ok.json").write_text(
        json.dumps({"input": {"runs": 2, "keys": 5, "dim": 3}, "representation": {"noise_share": 0.5}})
    )
    result, before = run(tmp_path, "compare", tmp_path / "ok.json", tmp_path / "r.json", "--json", tmp_path / "c.json")
    assert_bad_input(result, fragment, tmp_path, before)


def test_compare_a_missing_side(tmp_path):
    make_runset(tmp_path / "runs", runs=2, n=30, dim=3)
    result, before = run(tmp_path, "compare", tmp_path / "runs", tmp_path / "gone.json")
    assert_bad_input(result, "gone.json: no such run set or JSON report", tmp_path, before)


def test_compare_a_directory_that_is_not_a_run_set(tmp_path):
    (tmp_path / "plain").mkdir()
    (tmp_path / "ok.json").write_text(
        json.dumps({"input": {"runs": 2, "keys": 5, "dim": 3}, "representation": {"noise_share": 0.5}})
    )
    result, before = run(tmp_path, "compare", tmp_path / "plain", tmp_path / "ok.json")
    assert_bad_input(result, "plain: a directory but not a run set", tmp_path, before)


def test_compare_check_on_an_unknown_path(tmp_path):
    (tmp_path / "ok.json").write_text(
        json.dumps({"input": {"runs": 2, "keys": 5, "dim": 3}, "representation": {"noise_share": 0.5}})
    )
    result, before = run(tmp_path, "compare", tmp_path / "ok.json", tmp_path / "ok.json", "--check", "knn>0")
    assert_bad_input(result, "--check: no 'knn' in the report", tmp_path, before)


def test_compare_output_that_is_an_input(tmp_path):
    (tmp_path / "ok.json").write_text(
        json.dumps({"input": {"runs": 2, "keys": 5, "dim": 3}, "representation": {"noise_share": 0.5}})
    )
    result, before = run(
        tmp_path, "compare", tmp_path / "ok.json", tmp_path / "ok.json", "--html", tmp_path / "ok.json"
    )
    assert_bad_input(result, "is the input", tmp_path, before)


def test_html_output_that_is_a_directory(tmp_path):
    make_runset(tmp_path / "runs", runs=2, n=10, dim=3)
    (tmp_path / "page").mkdir()
    result, before = run(tmp_path, "audit", tmp_path / "runs", *FAST, "--html", tmp_path / "page")
    assert_bad_input(result, "--html", tmp_path, before)


def test_html_output_in_a_missing_directory(tmp_path):
    make_runset(tmp_path / "runs", runs=2, n=10, dim=3)
    result, before = run(tmp_path, "audit", tmp_path / "runs", *FAST, "--html", tmp_path / "no" / "a.html")
    assert_bad_input(result, "does not exist", tmp_path, before)


def test_mlflow_experiment_without_mlflow(tmp_path):
    make_runset(tmp_path / "runs", runs=2, n=10, dim=3)
    result, before = run(tmp_path, "audit", tmp_path / "runs", *FAST, "--mlflow-experiment", "x")
    assert_bad_input(result, "--mlflow-experiment only applies with --mlflow", tmp_path, before)


def test_mlflow_without_the_extra(tmp_path, monkeypatch):
    make_runset(tmp_path / "runs", runs=2, n=10, dim=3)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a))
    result, before = run(tmp_path, "drift", tmp_path / "runs", tmp_path / "runs", "--mlflow")
    assert_bad_input(result, "--mlflow needs MLflow: pip install 'stabcli[mlflow]'", tmp_path, before)


def test_an_empty_mlflow_experiment_name(tmp_path):
    make_runset(tmp_path / "runs", runs=2, n=12)
    result, before = run(tmp_path, "audit", tmp_path / "runs", *FAST, "--mlflow", "--mlflow-experiment", " ")
    assert_bad_input(result, "--mlflow-experiment: empty name", tmp_path, before)


def test_an_mlflow_store_that_is_not_a_database(tmp_path, monkeypatch):
    """``MLFLOW_TRACKING_URI=sqlite:///notes.txt``: SQLAlchemy's error was a 300-line traceback, exit 1."""
    pytest.importorskip("mlflow")
    make_runset(tmp_path / "runs", runs=2, n=12)
    (tmp_path / "notes.txt").write_text("mine, not a database\n")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'notes.txt'}")
    result, before = run(tmp_path, "audit", tmp_path / "runs", *FAST, "--mlflow")
    assert_bad_input(result, "notes.txt: file is not a database", tmp_path, before)


@pytest.mark.parametrize("uri", ["sqlite:///{runs}/mlflow.db", "file://{runs}", "{runs}/store"])
def test_an_mlflow_store_inside_an_input(tmp_path, monkeypatch, uri):
    """A tracking store inside the audited run set: MLflow wrote its experiment directory or
    database into the input (and a file store scanned the runs as experiments)."""
    pytest.importorskip("mlflow")
    runs = make_runset(tmp_path / "runs", runs=2, n=12)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri.format(runs=runs))
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    result, before = run(tmp_path, "audit", runs, *FAST, "--mlflow")
    assert_bad_input(result, f"the tracking store lies inside {runs}, which this command reads", tmp_path, before)


def test_an_mlflow_store_inside_the_run_set_pretrain_writes(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    (tmp_path / "c.txt").write_text("a b c d\nb c d e\n" * 10)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}")
    result, before = run(
        tmp_path, "pretrain", tmp_path / "c.txt", "--out", tmp_path / "runs", "--runs", "2", "--mlflow"
    )
    assert_bad_input(result, f"the tracking store lies inside {tmp_path / 'runs'}, which", tmp_path, before)
