"""stabcli.fs.outputs: the one place that decides whether and how a command writes its outputs."""

import errno
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import make_runset, runner
from stabcli.errors import UsageError, WriteError
from stabcli.fs.outputs import OutputPlan, foreign_entry, plots_owned
from stabcli.runset import owned as runset_owned


def test_an_output_that_is_an_input_is_refused_naming_both(tmp_path, monkeypatch):
    (tmp_path / "a.npy").write_bytes(b"data")
    monkeypatch.chdir(tmp_path)
    for given in ("a.npy", "./a.npy", str(tmp_path / "a.npy"), "sub/../a.npy"):
        (tmp_path / "sub").mkdir(exist_ok=True)
        plan = OutputPlan(["a.npy"], force=True)
        plan.add(given, "--out")
        with pytest.raises(UsageError, match=rf"--out {re.escape(str(Path(given)))}: is the input a.npy"):
            plan.check()
    assert (tmp_path / "a.npy").read_bytes() == b"data"


def test_a_symlink_to_an_input_is_the_input(tmp_path):
    (tmp_path / "a.npy").write_bytes(b"data")
    (tmp_path / "link.npy").symlink_to(tmp_path / "a.npy")
    plan = OutputPlan([tmp_path / "a.npy"], force=True)
    plan.add(tmp_path / "link.npy", "--out")
    with pytest.raises(UsageError, match=r"link\.npy: is the input .*a\.npy"):
        plan.check()


def test_outputs_inside_an_input_run_set_or_holding_an_input_are_refused(tmp_path):
    runs = make_runset(tmp_path / "runs")
    for path, kind, message in [
        (runs / "run-003", "dir", "lies inside the input"),
        (runs / "report.json", "file", "lies inside the input"),
        (runs / "run-000" / "vectors.npy", "file", "lies inside the input"),
        (tmp_path, "dir", "contains the input"),
    ]:
        plan = OutputPlan([runs], force=True)
        plan.add(path, "--out", kind=kind)
        with pytest.raises(UsageError, match=message):
            plan.check()


def test_two_outputs_on_one_path_are_refused(tmp_path):
    plan = OutputPlan()
    plan.add(tmp_path / "r.json", "--json")
    plan.add(tmp_path / "./r.json", "--markdown")
    with pytest.raises(UsageError, match=r"--markdown .*r\.json: is also --json"):
        plan.check()
    plan = OutputPlan()
    plan.add(tmp_path / "plots", "--plots", kind="dir")
    plan.add(tmp_path / "plots" / "r.md", "--markdown")
    with pytest.raises(UsageError, match="overlaps --plots"):
        plan.check()


def test_existing_outputs_need_force_and_force_replaces_a_file_atomically(tmp_path):
    target = tmp_path / "o.json"
    target.write_text("old")
    plan = OutputPlan()
    plan.add(target, "--json")
    with pytest.raises(UsageError, match=r"o\.json: already exists; pass --force to replace it"):
        plan.check()
    with OutputPlan(force=True) as plan:
        pass
    plan = OutputPlan(force=True)
    plan.add(target, "--json")
    with plan:
        plan.write_text(target, "new")
        assert target.read_text() == "old"  # nothing visible before commit
    assert target.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.json"]


def test_a_file_output_that_is_a_directory_is_refused_even_with_force(tmp_path):
    (tmp_path / "d").mkdir()
    plan = OutputPlan(force=True)
    plan.add(tmp_path / "d", "--json")
    with pytest.raises(UsageError, match="is a directory"):
        plan.check()


def test_force_replaces_a_directory_only_when_stabcli_wrote_everything_in_it(tmp_path):
    runs = make_runset(tmp_path / "old")
    assert (runs / "run-000" / "epochs" / "001.npy").is_file()
    assert foreign_entry(runs, runset_owned) is None
    plan = OutputPlan(force=True)
    plan.add(runs, "--out", kind="dir", owned=runset_owned)
    with plan:
        (plan.staging(runs) / "stabcli.json").write_text('{"new": 1}')
    assert sorted(p.name for p in runs.iterdir()) == ["stabcli.json"]
    for i, foreign in enumerate(("notes.txt", "run-000/notes.txt", "analysis/x")):
        runs = make_runset(tmp_path / f"runs{i}")
        (runs / foreign).parent.mkdir(parents=True, exist_ok=True)
        (runs / foreign).write_text("mine")
        plan = OutputPlan(force=True)
        plan.add(runs, "--out", kind="dir", owned=runset_owned)
        with pytest.raises(UsageError, match=f"holds .*{foreign.split('/')[0]}.*, which stabcli did not write"):
            plan.check()
        assert (runs / foreign).read_text() == "mine"
    runs = make_runset(tmp_path / "linked")
    (runs / "keys-link.txt").symlink_to(tmp_path / "elsewhere")
    assert foreign_entry(runs, runset_owned) == runs / "keys-link.txt"


def test_plots_directory_layout(tmp_path):
    plots = tmp_path / "plots"
    plots.mkdir()
    (plots / "fig1a.png").write_bytes(b"p")
    assert foreign_entry(plots, plots_owned) is None
    (plots / "thesis.tex").write_text("x")
    assert foreign_entry(plots, plots_owned) == plots / "thesis.tex"


def test_missing_parent_and_unwritable_parent(tmp_path):
    plan = OutputPlan()
    plan.add(tmp_path / "nodir" / "t.npz", "--save-transform")
    with pytest.raises(UsageError, match=r"--save-transform .*t.npz: directory .*nodir does not exist"):
        plan.check()
    (tmp_path / "f").write_text("x")
    plan = OutputPlan()
    plan.add(tmp_path / "f" / "t.npz", "--save-transform")
    with pytest.raises(UsageError, match="is not a directory"):
        plan.check()


def test_a_failure_rolls_back_every_output_and_names_the_real_file(tmp_path):
    plan = OutputPlan()
    a, b = plan.add(tmp_path / "a.npy", "--out"), plan.add(tmp_path / "b.json", "--json")
    with pytest.raises(WriteError, match=r"b.json: cannot write \(No space left on device\)"):
        with plan:
            plan.write_text(a, "a")
            staged = plan.staging(b)
            raise OSError(errno.ENOSPC, "No space left on device", str(staged))
    assert list(tmp_path.iterdir()) == []


def test_append_outputs_are_appended_on_commit_and_checked_against_inputs(tmp_path):
    summary = tmp_path / "summary.md"
    summary.write_text("before\n")
    plan = OutputPlan()
    plan.add(summary, "GITHUB_STEP_SUMMARY", kind="append")
    with plan:
        plan.write_text(summary, "after\n")
    assert summary.read_text() == "before\nafter\n"
    runs = make_runset(tmp_path / "runs")
    plan = OutputPlan([runs])
    plan.add(runs / "keys.txt", "GITHUB_STEP_SUMMARY", kind="append")
    with pytest.raises(UsageError, match=r"GITHUB_STEP_SUMMARY .*keys\.txt: lies inside the input"):
        plan.check()


def test_exists_ok_leaves_existence_to_the_caller_but_still_checks_inputs(tmp_path):
    runs = make_runset(tmp_path / "runs")
    plan = OutputPlan(force=False)
    plan.add(runs, "--out", kind="dir", exists_ok=True)
    plan.check()
    plan = OutputPlan([runs / "keys.txt"])
    plan.add(runs, "--out", kind="dir", exists_ok=True)
    with pytest.raises(UsageError, match="contains the input"):
        plan.check()


def test_a_file_size_limit_names_the_real_file_and_leaves_no_temporary(tmp_path):
    script = (
        "import resource, signal, sys\n"
        "from stabcli.fs.outputs import OutputPlan\n"
        "from stabcli.errors import WriteError\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))\n"
        "plan = OutputPlan()\n"
        f"path = plan.add({str(tmp_path / 'big.bin')!r}, '--out')\n"
        "try:\n"
        "    with plan:\n"
        "        plan.write_bytes(path, b'x' * 5000)\n"
        "except WriteError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == f"{tmp_path / 'big.bin'}: cannot write (File too large)", done
    assert list(tmp_path.iterdir()) == []


# ---- audit's outputs go through one plan


def audit_workspace(t: Path) -> Path:
    return make_runset(t / "runs", runs=3, epochs=0)


AUDIT = ["--knn-k", "3", "--pairs", "50", "--knn-queries", "10"]


def test_audit_force_replaces_outputs_and_appends_to_the_step_summary(tmp_path, monkeypatch):
    from stabcli.cli.app import app

    runs = audit_workspace(tmp_path)
    (tmp_path / "r.json").write_text("old")
    (tmp_path / "summary.md").write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "summary.md"))
    args = ["audit", str(runs), *AUDIT, "--json", str(tmp_path / "r.json"), "--plots", str(tmp_path / "plots")]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "r.json: already exists; pass --force" in result.stderr
    assert (tmp_path / "r.json").read_text() == "old" and (tmp_path / "summary.md").read_text() == "earlier step\n"
    result = runner.invoke(app, args + ["--force"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "r.json").read_text().startswith("{")
    assert (tmp_path / "summary.md").read_text().startswith("earlier step\n#")
    figures = sorted(p.name for p in (tmp_path / "plots").iterdir())
    assert figures and all(name.endswith(".png") for name in figures)
    assert f"wrote {tmp_path / 'plots' / figures[0]}" in result.stderr
    result = runner.invoke(app, args + ["--force"])  # a plots directory of stabcli's figures is replaced
    assert result.exit_code == 0, result.output
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_audit_plots_over_a_file_size_limit_leave_no_output_at_all(tmp_path):
    runs = audit_workspace(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    script = (
        "import resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (12000, 12000))\n"
        "from stabcli.cli.app import main\n"
        "sys.argv = ['stabcli'] + sys.argv[1:]\n"
        "main()\n"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            script,
            "audit",
            str(runs),
            *AUDIT,
            "--json",
            str(tmp_path / "r.json"),
            "--markdown",
            str(tmp_path / "r.md"),
            "--plots",
            str(tmp_path / "plots"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert (
        len(lines) == 1
        and lines[0].startswith(f"error: {tmp_path / 'plots'}")
        and lines[0].endswith("cannot write (File too large)")
    ), done.stderr
    assert "None" not in lines[0] and ".partial" not in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no r.json, r.md, plots or temporary


def test_an_exists_ok_directory_is_never_replaced_through_the_plan(tmp_path):
    runs = make_runset(tmp_path / "runs")
    before = (runs / "run-000" / "vectors.npy").read_bytes()
    plan = OutputPlan()
    plan.add(runs, "--out", kind="dir", exists_ok=True)
    with pytest.raises(ValueError, match="written by its caller"):
        plan.staging(runs)
    assert (runs / "run-000" / "vectors.npy").read_bytes() == before
