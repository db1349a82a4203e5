"""Real processes and real signals: nothing stabcli starts outlives it, and no orphan of a
killed pretrain can corrupt a rerun."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import SUBPROCESS_ENV as ENV
from conftest import start_process, start_slow_featurize, wait_for

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def alive(pid: int) -> bool:
    """Running (not gone, not a zombie)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def big_corpus(tmp_path: Path, sessions_file: Path, times: int = 150) -> Path:
    big = tmp_path / "big.txt"
    big.write_text(sessions_file.read_text() * times)
    return big


def pretrain_args(corpus: Path, out: Path, jobs: str = "2") -> list[str]:
    return [
        sys.executable,
        "-m",
        "stabcli",
        "pretrain",
        str(corpus),
        "--runs",
        "4",
        "--dim",
        "8",
        "--epochs",
        "8",
        "--jobs",
        jobs,
        "--out",
        str(out),
    ]


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_of_pretrain_exits_143_with_one_line_and_leaves_no_process(tmp_path, sessions_file, signum, code):
    out = tmp_path / "runs"
    proc = start_process(
        pretrain_args(big_corpus(tmp_path, sessions_file), out),
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert wait_for(
        lambda: any(p.name.startswith(".run-") and (p / "progress").exists() for p in out.glob(".run-*"))
    ), "no run started"
    workers = descendants(proc.pid)
    assert workers, "no worker processes seen"
    proc.send_signal(signum)  # the parent alone, as `kill PID` does
    _stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == code, stderr
    assert stderr.strip().splitlines() == ["interrupted; finished runs are kept"], stderr
    assert wait_for(lambda: not any(alive(pid) for pid in workers), 10), [p for p in workers if alive(p)]
    assert not (out / "stabcli.lock").exists() and not (out / ".corpus.txt").exists()
    assert not list(out.glob(".run-*"))  # the interrupted runs' partial directories are gone


def test_sigkill_of_the_parent_then_an_immediate_rerun_equals_an_uninterrupted_run(tmp_path, sessions_file):
    corpus = big_corpus(tmp_path, sessions_file)
    killed, full = tmp_path / "killed", tmp_path / "full"
    proc = start_process(
        pretrain_args(corpus, killed),
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    assert wait_for(lambda: any((p / "progress").exists() for p in killed.glob(".run-*"))), "no run started"
    proc.kill()  # SIGKILL of the parent only: its workers are not signalled by us
    proc.wait()
    subprocess.run(pretrain_args(corpus, killed), env=ENV, check=True, capture_output=True)  # while orphans may run
    subprocess.run(pretrain_args(corpus, full), env=ENV, check=True, capture_output=True)
    for i in range(4):
        assert (killed / f"run-{i:03d}" / "vectors.npy").read_bytes() == (
            full / f"run-{i:03d}" / "vectors.npy"
        ).read_bytes()
    time.sleep(1)
    assert sorted(p.name for p in killed.iterdir()) == sorted(p.name for p in full.iterdir())


SLEEPY_SCRIPT = """
import os, sys, time, pathlib
pathlib.Path(sys.argv[2], f"{os.getpid()}").write_text("")
time.sleep(120)
"""


def test_ctrl_c_of_script_runs_kills_the_scripts_and_a_rerun_is_clean(tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    script = tmp_path / "train.py"
    script.write_text(SLEEPY_SCRIPT)
    out = tmp_path / "runs"
    args = [
        sys.executable,
        "-m",
        "stabcli",
        "pretrain",
        "--script",
        f"{sys.executable} {script} {{out}} {pids}",
        "--runs",
        "2",
        "--jobs",
        "2",
        "--out",
        str(out),
    ]
    proc = start_process(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert wait_for(lambda: len(list(pids.iterdir())) == 2), "scripts did not start"
    scripts = [int(p.name) for p in pids.iterdir()]
    os.kill(proc.pid, signal.SIGINT)
    _stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert wait_for(lambda: not any(alive(pid) for pid in scripts), 10)
    fast = tmp_path / "fast.py"
    fast.write_text("import sys, numpy as np\nnp.save(sys.argv[1] + '/vectors.npy', np.ones((2, 2)))\n")
    rerun = subprocess.run(
        [
            sys.executable,
            "-m",
            "stabcli",
            "pretrain",
            "--script",
            f"{sys.executable} {fast} {{out}}",
            "--runs",
            "2",
            "--jobs",
            "2",
            "--out",
            str(out),
            "--force",
        ],
        env=ENV,
        capture_output=True,
        text=True,
    )
    assert rerun.returncode == 0, rerun.stderr
    assert sorted(p.name for p in out.iterdir()) == ["run-000", "run-001", "stabcli.json"]


HOLDING_SCRIPT = """
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(15)"], start_new_session={escape})  # holds stdout
time.sleep({sleep})
"""


@pytest.mark.parametrize(
    "escape, sleep",
    [(False, 60), (True, 60), (True, 0)],
    ids=["child in the group", "child in its own session", "script exits, child stays"],
)
def test_a_child_holding_stdout_open_never_blocks_pretrain(tmp_path, escape, sleep):
    script = tmp_path / "train.py"
    script.write_text(HOLDING_SCRIPT.format(escape=escape, sleep=sleep))
    start = time.monotonic()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "stabcli",
            "pretrain",
            "--script",
            f"{sys.executable} {script} {{out}}",
            "--runs",
            "1",
            "--jobs",
            "1",
            "--timeout",
            "3",
            "--out",
            str(tmp_path / "r"),
        ],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=60,
    )
    elapsed = time.monotonic() - start
    assert result.returncode == 2 and "run-000" in result.stderr, result.stderr
    assert elapsed < 15, elapsed
    assert "Traceback" not in result.stderr


def test_sigterm_of_audit_and_featurize_exits_143_without_temporary_files(tmp_path):
    proc, before = start_slow_featurize(tmp_path)
    assert wait_for(lambda: any(p.name.startswith(".out.npy.tmp-") for p in tmp_path.iterdir())), "never wrote"
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143, stderr
    assert stderr.strip().splitlines() == ["interrupted; nothing was written"], stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before


NO_PDEATHSIG = """
import sys
import stabcli.training.processes as processes
processes.set_parent_death_signal = lambda sig=9: False  # as on a platform without prctl,
processes.watch_parent = lambda interval=1.0: None  # and without the portable watchdog
if __name__ == "__main__":
    from stabcli.cli.app import main
    sys.argv[0] = "stabcli"
    main()
"""


def test_orphans_that_outlive_a_killed_parent_cannot_corrupt_the_rerun(tmp_path, sessions_file):
    """Without a parent-death signal the workers of a SIGKILLed pretrain keep training; the
    immediate rerun must still equal an uninterrupted run bit for bit."""
    wrapper = tmp_path / "no_pdeathsig.py"
    wrapper.write_text(NO_PDEATHSIG)
    corpus = big_corpus(tmp_path, sessions_file, times=300)
    killed, full = tmp_path / "killed", tmp_path / "full"
    args = pretrain_args(corpus, killed)
    proc = start_process(
        [sys.executable, str(wrapper)] + args[3:],
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    assert wait_for(lambda: any((p / "progress").exists() for p in killed.glob(".run-*"))), "no run started"
    workers = descendants(proc.pid)
    proc.kill()
    proc.wait()
    assert any(alive(pid) for pid in workers), "the orphans died with the parent; nothing was tested"
    subprocess.run(args, env=ENV, check=True, capture_output=True)  # while the orphans still train
    subprocess.run(pretrain_args(corpus, full), env=ENV, check=True, capture_output=True)
    for i in range(4):
        assert (killed / f"run-{i:03d}" / "vectors.npy").read_bytes() == (
            full / f"run-{i:03d}" / "vectors.npy"
        ).read_bytes()
    for pid in workers:  # without both safeguards nothing ends an idle orphan: the test does
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
    assert sorted(p.name for p in killed.iterdir()) == sorted(p.name for p in full.iterdir())


def test_the_watchdog_ends_a_worker_whose_parent_died(tmp_path):
    """The portable fallback of the parent-death signal, alone."""
    code = (
        "import os, sys, time\n"
        "if os.fork() == 0:\n"
        "    from stabcli.training.processes import watch_parent\n"
        "    watch_parent(0.1)\n"
        "    print(os.getpid(), flush=True)\n"
        "    time.sleep(60)\n"
        "    sys.exit(0)\n"
        "time.sleep(0.5)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True, timeout=60)
    child = int(proc.stdout.split()[0])
    assert wait_for(lambda: not alive(child), 10)
