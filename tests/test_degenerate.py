"""Runs that are identical or exact rotations of each other (``stabcli.measure.degenerate``):
a known answer and a direct Procrustes computation, then audit saying so on real runs."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import runner
from stabcli.cli.app import app
from stabcli.measure.align import procrustes_residual
from stabcli.measure.degenerate import describe_same, same_runs


def rotation(d: int, seed: int) -> np.ndarray:
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((d, d)))
    return q


def test_rotated_float32_copies_are_the_same_run_and_seeds_are_not():
    base = np.random.default_rng(1).standard_normal((500, 16)).astype(np.float32)
    rotated = (base.astype(np.float64) @ rotation(16, 2)).astype(np.float32)
    assert procrustes_residual(base, rotated) < 1e-6
    assert procrustes_residual(base, base) < 1e-6  # float64 cancellation in ‖A‖² + ‖B‖² − 2Σσ
    noisy = base + np.float32(0.01) * np.random.default_rng(3).standard_normal(base.shape).astype(np.float32)
    assert procrustes_residual(base, noisy) == pytest.approx(0.01, rel=0.1)  # small noise is still noise
    other = np.random.default_rng(4).standard_normal((500, 16)).astype(np.float32)
    assert same_runs([base, rotated, other, base.copy()]) == [(0, 1), (0, 3), (1, 3)]
    assert same_runs([base, noisy, other]) == []


def test_the_check_samples_rows_of_large_runs():
    base = np.random.default_rng(5).standard_normal((20_000, 4)).astype(np.float32)
    assert same_runs([base, base @ rotation(4, 6).astype(np.float32)]) == [(0, 1)]
    assert same_runs([base, np.random.default_rng(7).standard_normal((20_000, 4)).astype(np.float32)]) == []


def test_describe_same_names_the_runs():
    names = ["run-000", "run-001", "run-002"]
    assert (
        describe_same([(0, 1), (0, 2), (1, 2)], names, 3) == "all 3 runs are identical or exact rotations of each other"
    )
    assert describe_same([(0, 2)], names, 3) == "run-000 and run-002 are identical or exact rotations of each other"


def test_audit_reports_identical_runs_in_the_json_terminal_and_markdown(tmp_path):
    import json

    import stabcli
    from conftest import make_runset

    root = make_runset(tmp_path / "runs", runs=3, n=40, dim=6, epochs=1)
    first = np.load(root / "run-000" / "vectors.npy")
    np.save(root / "run-002" / "vectors.npy", (first.astype(np.float64) @ rotation(6, 9)).astype(np.float32))
    reason = "run-000 and run-002 are identical or exact rotations of each other"
    outputs = ["--markdown", str(tmp_path / "a.md"), "--html", str(tmp_path / "a.html")]
    result = runner.invoke(app, ["audit", str(root), "--format", "json", *outputs])
    assert result.exit_code == 0, result.output
    assert f"<p>Warning: {reason}" in (tmp_path / "a.html").read_text(encoding="utf-8")
    degenerate = json.loads(result.stdout)["input"]["degenerate"]
    assert degenerate["pairs"] == [["run-000", "run-002"]]
    assert degenerate["reason"].startswith(reason) and "zero by construction" in degenerate["reason"]
    assert f"**Warning: {reason}" in (tmp_path / "a.md").read_text(encoding="utf-8")
    terminal = runner.invoke(app, ["audit", str(root)])
    assert terminal.exit_code == 0 and f"warning: {reason}" in terminal.stdout, terminal.output
    assert stabcli.audit(root).input.degenerate.pairs == [["run-000", "run-002"]]  # the API, as the JSON
    independent = make_runset(tmp_path / "other", runs=3, n=40, dim=6, epochs=1)
    result = runner.invoke(app, ["audit", str(independent), "--format", "json"])
    assert result.exit_code == 0 and "identical or exact" not in result.output, result.output
    assert json.loads(result.stdout)["input"]["degenerate"] is None


def test_drift_refuses_degenerate_noise_with_audits_reason(tmp_path):
    from conftest import make_runset
    from stabcli.commands.drift_inputs import refuse_same_noise_runs
    from stabcli.errors import InputError
    from stabcli.measure.degenerate import degenerate_runs

    base = np.random.default_rng(0).standard_normal((40, 6)).astype(np.float32)
    runs = [base, (base.astype(np.float64) @ rotation(6, 2)).astype(np.float32), base.copy()]
    names = ["run-000", "run-001", "run-002"]
    found = degenerate_runs(names, runs)
    assert found is not None and found.pairs == [["run-000", "run-001"], ["run-000", "run-002"], ["run-001", "run-002"]]
    assert found.reason.startswith("all 3 runs are identical or exact rotations of each other")
    with pytest.raises(InputError) as caught:
        refuse_same_noise_runs(tmp_path / "noise", names, runs)
    assert str(caught.value).endswith(found.reason) and "zero width" in str(caught.value)
    assert degenerate_runs(names, [np.random.default_rng(s).standard_normal((40, 6)) for s in range(3)]) is None
    make_runset(tmp_path / "noise", vectors=runs)
    b = make_runset(tmp_path / "b", runs=1, n=40, dim=6, epochs=1)
    result = runner.invoke(app, ["drift", str(b), str(b), "--noise", str(tmp_path / "noise")])
    assert result.exit_code == 2 and found.reason in result.stderr, result.output
