"""GITHUB_STEP_SUMMARY stays under GitHub's 1 MiB per step: the per-key lists are cut to the
rows that fit, with a note; nothing is appended when nothing fits."""

from __future__ import annotations

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
