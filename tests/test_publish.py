"""Publication of outputs (``stabcli.fs.atomic.rename_noreplace``, ``OutputPlan.commit``):
two commands writing the same new output cannot both succeed, ``--force`` with a failing
``GITHUB_STEP_SUMMARY`` keeps everything as it was, every write failure is one line and
exit 2, and a later run removes the temporaries a ``kill -9`` left. Real processes."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import SUBPROCESS_ENV, make_runset, start_slow_featurize, wait_for
from stabcli.fs import atomic
from stabcli.fs.atomic import remove_stale_temporaries, rename_noreplace

AUDIT_FAST = ("--knn-k", "2", "--knn-queries", "5", "--pairs", "20")


def stabcli(*args, cwd: Path, limit: int | None = None, stdout=None, env=None, timeout=180):
    """The real command in a child process; ``limit``: RLIMIT_FSIZE in bytes (``ulimit -f``)."""

    def preexec():
        import resource

        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run(
        [sys.executable, "-m", "stabcli", *map(str, args)],
        cwd=cwd,
        env={**SUBPROCESS_ENV, **(env or {})},
        stdout=stdout if stdout is not None else subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        timeout=timeout,
        preexec_fn=preexec if limit is not None else None,
    )


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


# -- rename without replacing ---------------------------------------------------------------


@pytest.mark.parametrize("native", [True, False], ids=["renameat2", "link-or-mkdir"])
def test_rename_noreplace_refuses_an_existing_target(tmp_path, monkeypatch, native):
    if not native:
        monkeypatch.setattr(atomic, "_renameat2", None)
    (tmp_path / "new").write_text("mine")
    rename_noreplace(tmp_path / "new", tmp_path / "out")
    assert (tmp_path / "out").read_text() == "mine" and not (tmp_path / "new").exists()
    (tmp_path / "second").write_text("theirs")
    with pytest.raises(FileExistsError):
        rename_noreplace(tmp_path / "second", tmp_path / "out")
    assert (tmp_path / "out").read_text() == "mine" and (tmp_path / "second").read_text() == "theirs"
    (tmp_path / "d1").mkdir()
    (tmp_path / "d1" / "a.png").write_text("x")
    rename_noreplace(tmp_path / "d1", tmp_path / "plots")
    (tmp_path / "d2").mkdir()
    with pytest.raises(FileExistsError):
        rename_noreplace(tmp_path / "d2", tmp_path / "plots")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileExistsError):  # os.rename would silently replace an empty directory
        rename_noreplace(tmp_path / "d2", tmp_path / "empty")
    assert (tmp_path / "plots" / "a.png").read_text() == "x" and (tmp_path / "d2").is_dir()


def test_two_commands_writing_the_same_new_output_cannot_both_succeed(tmp_path):
    """The slow featurize checks ``out.npy`` (absent), then a quick one publishes it: the slow
    one refuses at publication instead of silently replacing the other's output."""
    slow, _before = start_slow_featurize(tmp_path)
    try:
        assert wait_for(lambda: any(p.name.startswith(".out.npy.tmp-") for p in tmp_path.iterdir()), 120)
        quick = stabcli("featurize", "in.npy", "--out", "out.npy", "--dim", "8", "--seed", "7", cwd=tmp_path)
        assert quick.returncode == 0, quick.stderr
        published = {name: digest(tmp_path / name) for name in ("out.npy", "out.npy.featurize.json", "out.keys.txt")}
        _, stderr = slow.communicate(timeout=300)
    finally:
        if slow.poll() is None:
            slow.kill()
    assert slow.returncode == 2, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --out "), stderr
    assert "out.npy: was created by another command while this one ran" in lines[0]
    assert {name: digest(tmp_path / name) for name in published} == published  # the first one's output stands
    assert not [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name or ".old-" in p.name]


# -- --force and GITHUB_STEP_SUMMARY: all or nothing ------------------------------------------


def test_force_with_a_failing_summary_keeps_every_old_output(tmp_path):
    """Replaced outputs are kept aside until the summary append succeeds: a full summary
    file (``ulimit -f``) leaves the old --json, --markdown and --plots byte for byte."""
    make_runset(tmp_path / "runs")
    first = stabcli("audit", "runs", *AUDIT_FAST, "--json", "r.json", "--markdown", "r.md", "--seed", "1", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    old = {name: digest(tmp_path / name) for name in ("r.json", "r.md")}
    summary = tmp_path / "summary.md"
    summary.write_text("x" * 20_000)  # at the limit: the append fails, the reports fit
    result = stabcli(
        "audit", "runs", *AUDIT_FAST, "--json", "r.json", "--markdown", "r.md", "--seed", "2", "--force",
        cwd=tmp_path, limit=20_000, env={"GITHUB_STEP_SUMMARY": "summary.md"},
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == ["error: summary.md: cannot write (File too large)"]
    assert {name: digest(tmp_path / name) for name in old} == old
    assert summary.read_text() == "x" * 20_000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "r.md", "runs", "summary.md"]


def test_force_replaces_outputs_and_drops_the_old_copies(tmp_path):
    make_runset(tmp_path / "runs")
    for seed in ("1", "2"):
        result = stabcli("audit", "runs", *AUDIT_FAST, "--json", "r.json", "--seed", seed, "--force", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
    assert '"seed": 2' in (tmp_path / "r.json").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "runs"]


# -- write failures: one line, exit 2 (a failed check is 1) ----------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["audit", "runs", *AUDIT_FAST],
        ["audit", "runs", *AUDIT_FAST, "--format", "json"],
        ["audit", "runs", *AUDIT_FAST, "--check", "representation.cka>2"],  # a failed check too: 2, not 1
        ["drift", "runs/run-000/vectors.npy", "runs/run-001/vectors.npy", "--knn-k", "2"],
        ["drift", "runs/run-000/vectors.npy", "runs/run-001/vectors.npy", "--knn-k", "2", "--format", "json"],
        ["featurize", "runs/run-000/vectors.npy", "--out", "o.npy", "--dim", "4"],
    ],
    ids=["audit", "audit-json", "audit-failed-check", "drift", "drift-json", "featurize"],
)
def test_stdout_on_a_full_device_is_one_line_and_exit_2(tmp_path, argv):
    make_runset(tmp_path / "runs")
    with open("/dev/full", "w") as full:
        result = stabcli(*argv, cwd=tmp_path, stdout=full)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == ["error: stdout: cannot write (No space left on device)"]


@pytest.mark.parametrize(
    ("limit", "name"),
    [(400, "stabcli.json"), (1_300, "keys.txt"), (4_000, ".corpus.txt")],  # keys.txt: 1,350 bytes
    ids=["manifest", "keys", "corpus-copy"],
)
def test_pretrain_under_a_file_size_limit_is_one_line_and_resumes(tmp_path, limit, name):
    rng = np.random.default_rng(0)
    words = [f"item{i:04d}" for i in range(150)]
    (tmp_path / "c.txt").write_text("".join(" ".join(rng.choice(words, 8)) + "\n" for _ in range(600)))
    argv = ("pretrain", "c.txt", "--out", "r", "--runs", "2", "--epochs", "1", "--dim", "4", "--min-count", "1")
    result = stabcli(*argv, cwd=tmp_path, limit=limit)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [f"error: r/{name}: cannot write (File too large)"], result.stderr
    assert not [p.name for p in (tmp_path / "r").iterdir() if ".tmp-" in p.name]
    again = stabcli(*argv, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "r" / "run-001" / "vectors.npy").is_file()


# -- kill -9: the next run removes its own stale temporaries ----------------------------------


def test_the_next_featurize_removes_what_a_kill_9_left(tmp_path):
    slow, _before = start_slow_featurize(tmp_path)
    try:
        assert wait_for(lambda: any(p.name.startswith(".out.npy.tmp-") for p in tmp_path.iterdir()), 120)
        os.kill(slow.pid, signal.SIGKILL)
        slow.wait(timeout=60)
    finally:
        if slow.poll() is None:
            slow.kill()
    left = [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name]
    assert left, "kill -9 leaves the temporary behind"
    result = stabcli("featurize", "in.npy", "--out", "out.npy", "--dim", "8", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert not [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name]


def test_audit_removes_stale_temporaries_of_its_own_outputs_only(tmp_path):
    make_runset(tmp_path / "runs")
    dead = dead_pid()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        stale = [f".r.json.tmp-{dead}", f".plots.partial-{dead}", f".r.md.tmp-{dead}"]
        kept = [f".r.json.tmp-{alive.pid}", f".other.json.tmp-{dead}", f"r.json.tmp-{dead}"]
        for name in stale + kept:
            (tmp_path / name).mkdir() if "partial" in name else (tmp_path / name).write_text("left")
        (tmp_path / f".plots.partial-{dead}" / "fig.png").write_text("half")
        result = stabcli(
            "audit", "runs", *AUDIT_FAST, "--json", "r.json", "--markdown", "r.md", "--plots", "plots", cwd=tmp_path
        )
        assert result.returncode == 0, result.stderr
        names = {p.name for p in tmp_path.iterdir()}
        assert not names & set(stale) and set(kept) <= names
    finally:
        alive.kill()
        alive.wait()


def test_a_stale_old_copy_is_put_back_when_its_output_is_gone(tmp_path):
    """A kill between moving the replaced output aside and publishing the new one."""
    dead = dead_pid()
    (tmp_path / f".r.json.old-{dead}").write_text("the old report")
    assert remove_stale_temporaries(tmp_path / "r.json") == []
    assert (tmp_path / "r.json").read_text() == "the old report"
    (tmp_path / f".r.json.old-{dead}").write_text("older")
    assert remove_stale_temporaries(tmp_path / "r.json") == [tmp_path / f".r.json.old-{dead}"]
    assert (tmp_path / "r.json").read_text() == "the old report"
