"""``stabcli compare``: identical audits give zero deltas; an aligned copy of a run set
changes only the coordinate noise share (every other measure is rotation invariant); a
featurized copy's deltas are the differences of the two audits; spreads and --check."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from typer.testing import CliRunner

from conftest import assert_numbers_match, make_runset, parse
from stabcli.cli.app import app
from stabcli.commands.audit import AuditOptions, build_report, load_runs
from stabcli.commands.compare import (
    REPRESENTATION_MEASURES,
    CompareReport,
    compare_audits,
    evaluate_checks,
    load_side,
    validate_checks,
)
from stabcli.commands.featurize import FeaturizeOptions, featurize
from stabcli.errors import InputError, UsageError
from stabcli.reports import compare_render, schema
from stabcli.reports.text import plain_console

OPTIONS = AuditOptions(knn_k=3, knn_queries=20, pairs=300, top=5)
ROTATION_INVARIANT = [name for name, _ in REPRESENTATION_MEASURES if name != "noise_share"]


def audit(path):
    return schema.to_json(build_report(load_runs([path]), OPTIONS))


@pytest.fixture(scope="module")
def runsets(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("compare")
    raw = make_runset(tmp / "raw", runs=3, n=50, dim=6)
    featurize(raw, tmp / "aligned", FeaturizeOptions(dim=0, align_to=raw))
    featurize(raw, tmp / "phi", FeaturizeOptions(dim=16, sigma=0.5))
    (tmp / "raw.json").write_text(schema.dumps(build_report(load_runs([raw]), OPTIONS)))
    return tmp


def test_identical_inputs_give_zero_deltas(runsets):
    saved = runsets / "raw.json"
    for a, b in ((saved, saved), (runsets / "raw", saved), (runsets / "raw", runsets / "raw")):
        report = compare_audits(load_side(a, audit), load_side(b, audit))
        assert list(report.compare) == [name for name, _ in REPRESENTATION_MEASURES if name in report.compare]
        assert len(report.compare) >= 9
        for name, entry in report.compare.items():
            assert entry.a is not None and entry.delta == pytest.approx(0.0, abs=1e-12), name
            assert entry.a == pytest.approx(entry.b, abs=1e-12)
    assert load_side(saved, audit)[0].kind == "json" and load_side(runsets / "raw", audit)[0].kind == "run set"


def test_aligned_copy_differs_only_in_coordinate_noise(runsets):
    """Rotating every run onto run 0 (featurize --dim 0 --align-to) keeps every inner product,
    so every measure but the coordinate noise share is unchanged (float32 tolerance)."""
    report = compare_audits(load_side(runsets / "raw", audit), load_side(runsets / "aligned", audit))
    for name in ROTATION_INVARIANT:
        entry = report.compare[name]
        assert entry.delta == pytest.approx(0.0, abs=1e-5 * max(1.0, abs(entry.a))), name
    coordinate = report.compare["noise_share"]
    assert coordinate.delta < -0.05  # aligned runs share their coordinates far more
    assert report.b.featurized is not None and report.b.featurized["dim"] == 0


def test_featurized_copy_deltas_are_the_audits_differences(runsets):
    a, b = audit(runsets / "raw"), audit(runsets / "phi")
    report = compare_audits(load_side(runsets / "raw", audit), load_side(runsets / "phi", audit))
    for name, _ in REPRESENTATION_MEASURES:
        if name in a["representation"] and isinstance(a["representation"][name], (int, float)):
            entry = report.compare[name]
            assert entry.a == a["representation"][name] and entry.b == b["representation"][name]
            assert entry.delta == b["representation"][name] - a["representation"][name]
    assert report.b.dim == 16 and report.a.dim == 6


def _saved(tmp_path, name, knn, low, high):
    data = audit_json_skeleton(knn)
    data["representation"]["by_pair"] = {"pairs": 3, "knn_overlap": {"min": low, "median": knn, "max": high}}
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def audit_json_skeleton(knn):
    return {
        "stabcli_version": "0.3.0",
        "input": {"runs": 3, "keys": 100, "dim": 8},
        "representation": {"noise_share": 0.5, "knn_overlap": knn},
    }


def test_difference_against_each_sides_spread(tmp_path):
    a = _saved(tmp_path, "a.json", 0.5, 0.375, 0.625)  # spread 0.25
    b = _saved(tmp_path, "b.json", 0.75, 0.6875, 0.8125)  # spread 0.125
    report = compare_audits(load_side(a, audit), load_side(b, audit))
    entry = report.compare["knn_overlap"]
    assert entry.delta == 0.25 and entry.spread_over == "run pairs"
    assert entry.exceeds_a is False  # 0.25 is not larger than A's 0.25
    assert entry.exceeds_b is True
    assert report.compare["noise_share"].exceeds_a is None  # no spread for a share
    assert report.spreads is True
    text = compare_render.verdict(report)
    assert (
        text == "0 of 1 measures with spreads differ beyond both sides' spread, 1 beyond one side's; 1 without spreads"
    )
    rows = {name: cells for name, _, cells in compare_render.rows(report)}
    assert rows["knn_overlap"][3:] == ["+0.25", "0.375 – 0.625", "0.6875 – 0.8125", "B"]


def test_downstream_metrics_of_shared_variants_with_run_spread(tmp_path):
    def side(name, accuracy):
        data = audit_json_skeleton(0.5)
        variants = {"h": {"accuracy_mean": float(np.mean(accuracy)), "accuracy_by_run": accuracy, "churn": 0.25}}
        if name == "a.json":
            variants["only_here"] = {"accuracy_mean": 0.5}
        data["downstream"] = {"variants": variants}
        path = tmp_path / name
        path.write_text(json.dumps(data))
        return path

    report = compare_audits(
        load_side(side("a.json", [0.5, 0.75, 0.625]), audit), load_side(side("b.json", [0.875, 0.875, 0.875]), audit)
    )
    entry = report.compare["downstream.h.accuracy_mean"]
    assert entry.spread_over == "runs" and entry.spread_a.min == 0.5 and entry.spread_a.max == 0.75
    assert (entry.spread_b.min, entry.spread_b.max) == (0.875, 0.875)  # every run equal: a spread of 0
    assert entry.delta == 0.25 and entry.exceeds_a is False and entry.exceeds_b is True
    assert "downstream.only_here.accuracy_mean" not in report.compare
    assert report.compare["downstream.h.churn"].delta == 0.0


def test_checks_on_the_comparison(runsets):
    validate_checks(["compare.knn_overlap.delta>=0"])
    with pytest.raises(UsageError, match="no 'knn' in the report"):
        validate_checks(["knn.delta>0"])
    report = compare_audits(load_side(runsets / "raw", audit), load_side(runsets / "aligned", audit))
    checked = evaluate_checks(report, ["compare.noise_share.delta<0", "compare.cka.delta>0.1"])
    assert [c.passed for c in checked.checks] == [True, False] and checked.passed is False
    with pytest.raises(UsageError, match="no 'nonexistent'"):
        evaluate_checks(report, ["compare.nonexistent.delta>0"])
    data = schema.to_json(checked)
    assert data["compare"]["noise_share"]["delta"] == report.compare["noise_share"].delta
    assert schema.check_path(CompareReport, "compare.downstream.h.churn.delta") is None


@pytest.mark.parametrize(
    "content, problem",
    [
        ("not json", "not a JSON audit report"),
        ("[1, 2]", "not a stabcli audit report (the JSON is not an object)"),
        ('{"input": {"before": "a"}, "drift": {}}', "not a stabcli audit report (input.runs is not a number)"),
        ('{"input": {"runs": 2, "keys": 3, "dim": 2}}', "not a stabcli audit report (no 'representation' section)"),
    ],
)
def test_a_saved_report_that_is_not_an_audit(tmp_path, content, problem):
    path = tmp_path / "r.json"
    path.write_text(content)
    with pytest.raises(InputError, match=re.escape(problem)):
        load_side(path, audit)
    with pytest.raises(InputError, match="no such run set or JSON report"):
        load_side(tmp_path / "missing.json", audit)


def test_renderers_show_every_measure(runsets):
    report = compare_audits(load_side(runsets / "raw", audit), load_side(runsets / "phi", audit))
    markdown = compare_render.render_markdown(report)
    console = plain_console(width=200, record=True)
    compare_render.render_terminal(report, console)
    terminal = console.export_text()
    for _, entry, cells in compare_render.rows(report):
        assert entry.label in markdown and entry.label in terminal
        assert cells[3] in terminal


# ------------------------------------------------------------------ the command line

runner = CliRunner()
CLI_FAST = ["--knn-k", "3", "--knn-queries", "20", "--pairs", "300"]


def test_compare_command_outputs_and_checks(runsets, tmp_path):
    saved = runsets / "raw.json"
    result = runner.invoke(
        app,
        [
            "compare", str(runsets / "raw"), str(saved), *CLI_FAST,
            "--check", "compare.knn_overlap.delta>=0",
            "--json", str(tmp_path / "c.json"), "--markdown", str(tmp_path / "c.md"), "--html", str(tmp_path / "c.html"),
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "c.json").read_text())
    assert all(entry["delta"] == 0 for entry in data["compare"].values())  # the same audit, twice
    assert data["checks"][0]["passed"] is True and data["a"]["kind"] == "run set" and data["b"]["kind"] == "json"
    assert "PASS compare.knn_overlap.delta>=0 (value 0)" in result.stdout
    assert "| k-NN overlap |" in (tmp_path / "c.md").read_text()
    parser = parse((tmp_path / "c.html").read_text(encoding="utf-8"))
    assert json.loads(parser.scripts["stabcli-report"]) == data
    assert_numbers_match(parser, data, least=3 * len(data["compare"]))
    failed = runner.invoke(
        app,
        [
            "compare",
            str(runsets / "raw"),
            str(runsets / "aligned"),
            *CLI_FAST,
            "--check",
            "compare.noise_share.delta>=0",
        ],
    )
    assert failed.exit_code == 1 and "FAIL compare.noise_share.delta>=0" in failed.stdout
    as_json = runner.invoke(app, ["compare", str(saved), str(saved), "--format", "json"])
    assert as_json.exit_code == 0 and json.loads(as_json.stdout)["compare"]["cka"]["delta"] == 0
