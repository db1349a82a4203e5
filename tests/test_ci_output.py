"""Output for CI logs: GITHUB_STEP_SUMMARY stays under GitHub's 1 MiB per step (per-key lists
cut to the rows that fit, with a note; nothing appended when nothing fits); progress in a log
is one plain line per finished run or long stage; --quiet leaves warnings and errors only."""

from __future__ import annotations

import re

from typer.testing import CliRunner

from conftest import make_runset
from stabcli.cli.app import app
from stabcli.reports.summary import STEP_SUMMARY_LIMIT, bounded, cut_note

runner = CliRunner()
FAST = ["--knn-k", "3", "--knn-queries", "10", "--pairs", "200"]


def _render(rows: int):
    def render(key_rows):
        shown = rows if key_rows is None else key_rows
        note = [] if key_rows is None else [cut_note(shown, rows)]
        return "\n".join(["head", *[f"row {i:04d}" for i in range(shown)], *note]) + "\n"

    return render


def test_bounded_keeps_everything_that_fits_and_cuts_the_rest():
    render = _render(100)
    assert bounded(render, 100, limit=10_000) == render(None)
    text = bounded(render, 100, used=0, limit=len(render(40).encode()) + 5)
    assert text == render(40)  # the most rows that fit (row lines are all the same length)
    assert "_40 of 100 rows shown: a GitHub step summary holds at most 1 MiB" in text
    assert bounded(render, 100, used=10_000 - len(render(0).encode()), limit=10_000) == render(0)
    assert bounded(render, 100, used=10_000, limit=10_000) is None


def test_audit_summary_fits_what_the_step_has_left(tmp_path, monkeypatch):
    root = make_runset(tmp_path / "runs", runs=2, n=300, dim=4)
    summary = tmp_path / "summary.md"
    earlier = "x" * (STEP_SUMMARY_LIMIT - 3_000) + "\n"  # an earlier command of the step used most of it
    summary.write_text(earlier)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    args = ["audit", str(root), "--knn-k", "3", "--knn-queries", "300", "--pairs", "200", "--top", "300"]
    result = runner.invoke(app, [*args, "--markdown", str(tmp_path / "a.md")])
    assert result.exit_code == 0, result.output
    data = summary.read_bytes()
    assert len(data) <= STEP_SUMMARY_LIMIT and data.startswith(earlier.encode())
    appended = data[len(earlier) :].decode()
    assert "## stabcli audit" in appended and "rows shown: a GitHub step summary holds at most 1 MiB" in appended
    full = (tmp_path / "a.md").read_text()  # the --markdown file keeps every row
    assert full.count("| `k") == 300 and appended.count("| `k") < 300


def test_nothing_is_appended_when_the_step_is_full(tmp_path, monkeypatch):
    root = make_runset(tmp_path / "runs", runs=2, n=30, dim=4)
    summary = tmp_path / "summary.md"
    summary.write_text("x" * (STEP_SUMMARY_LIMIT - 10))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = runner.invoke(app, ["audit", str(root), *FAST])
    assert result.exit_code == 0, result.output
    assert summary.stat().st_size == STEP_SUMMARY_LIMIT - 10
    assert "warning: GITHUB_STEP_SUMMARY" in result.stderr and "not appended" in result.stderr


def test_pretrain_tells_each_finished_run_in_a_log_and_nothing_quiet(tmp_path, sessions_file):
    args = ["pretrain", str(sessions_file), "--runs", "2", "--dim", "4", "--epochs", "2", "--jobs", "1"]
    result = runner.invoke(app, [*args, "--out", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    assert [line.split(",")[0] for line in lines] == ["pretrain: run 1 of 2 finished", "pretrain: run 2 of 2 finished"]
    assert all(re.fullmatch(r"pretrain: run \d of 2 finished, \d+ s", line) for line in lines), lines
    quiet = runner.invoke(app, [*args, "--out", str(tmp_path / "q"), "--quiet"])
    assert quiet.exit_code == 0 and quiet.stderr == "" and "complete" in quiet.stdout
    kept = runner.invoke(app, [*args, "--out", str(tmp_path / "r")])  # resumed: nothing trained, nothing told
    assert kept.exit_code == 0 and kept.stderr == ""


def test_audit_stages_in_a_log(tmp_path, monkeypatch):
    from stabcli.cli import output

    root = make_runset(tmp_path / "runs", runs=2, n=30, dim=4)
    monkeypatch.setattr(output, "STAGE_LINE_SECONDS", 0.0)  # every stage, however quick
    result = runner.invoke(app, ["audit", str(root), *FAST, "--html", str(tmp_path / "a.html")])
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    stages = [line.split(" done in ")[0] for line in lines if " done in " in line]
    assert stages[:2] == ["audit: cross-Gram blocks", "audit: Procrustes alignment"]
    assert "audit: nearest neighbours" in stages
    assert f"wrote {tmp_path / 'a.html'}" in lines
    quiet = runner.invoke(app, ["audit", str(root), *FAST, "--html", str(tmp_path / "b.html"), "--quiet"])
    assert quiet.exit_code == 0 and quiet.stderr == "" and (tmp_path / "b.html").is_file()
    monkeypatch.setattr(output, "STAGE_LINE_SECONDS", 3600.0)  # quick stages get no line
    assert runner.invoke(app, ["audit", str(root), *FAST]).stderr == ""


def test_featurize_tells_each_run(tmp_path):
    root = make_runset(tmp_path / "runs", runs=2, n=30, dim=4)
    result = runner.invoke(app, ["featurize", str(root), "--out", str(tmp_path / "phi"), "--dim", "8"])
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == ["featurize: run-000 done", "featurize: run-001 done"]
    quiet = runner.invoke(app, ["featurize", str(root), "--out", str(tmp_path / "phi2"), "--dim", "8", "-q"])
    assert quiet.exit_code == 0 and quiet.stderr == ""
