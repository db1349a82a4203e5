"""Interrupted and failing work: Ctrl-C, a full disk, two writers, a script that floods its log."""

import errno
import json
import os
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO, runner, start_process, start_slow_featurize, wait_for
from conftest import SUBPROCESS_ENV as ENV
from stabcli.cli.app import app
from stabcli.runset import RunSet
from stabcli.training import trainers
from stabcli.training.pretrain import TrainConfig, pretrain


def slow_pretrain(tmp_path, sessions_file, out, jobs="2"):
    big = tmp_path / "big.txt"
    if not big.exists():
        big.write_text(sessions_file.read_text() * 150)
    args = [
        sys.executable,
        "-m",
        "stabcli",
        "pretrain",
        str(big),
        "--runs",
        "6",
        "--dim",
        "8",
        "--epochs",
        "8",
        "--jobs",
        jobs,
        "--out",
        str(out),
    ]
    return args, start_process(args, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_ctrl_c_exits_130_keeps_finished_runs_and_resumes(tmp_path, sessions_file):
    out = tmp_path / "runs"
    args, proc = slow_pretrain(tmp_path, sessions_file, out)
    assert wait_for(lambda: (out / "run-000").exists()), "no run finished in time"
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal does: the whole foreground process group
    _stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert stderr.strip().splitlines()[-1] == "interrupted; finished runs are kept" and "Traceback" not in stderr
    kept = RunSet.open(out).runs
    assert 0 in kept and len(kept) < 6
    assert not (out / "stabcli.lock").exists()
    json.loads((out / "stabcli.json").read_text())  # the manifest is intact
    vectors = {i: (out / f"run-{i:03d}" / "vectors.npy").read_bytes() for i in kept}
    subprocess.run(args, env=ENV, check=True, capture_output=True)
    assert RunSet.open(out).runs == list(range(6))
    assert all((out / f"run-{i:03d}" / "vectors.npy").read_bytes() == v for i, v in vectors.items())


def test_ctrl_c_in_featurize_and_audit_exits_130_without_partial_output(tmp_path, monkeypatch):
    from stabcli.commands import audit as audit_module
    from stabcli.commands import featurize_stream as featurize_module
    from stabcli.inputs.embeddings import write_embedding

    for seed, name in enumerate(("a.npy", "b.npy")):  # two different runs: identical ones get a warning
        write_embedding(tmp_path / name, [f"k{i}" for i in range(20)], np.random.default_rng(seed).random((20, 4)))

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(featurize_module, "feature_chunks", interrupted)
    monkeypatch.setattr(audit_module, "representation_report", interrupted)
    before = sorted(p.name for p in tmp_path.iterdir())
    for argv in (
        ["featurize", tmp_path / "a.npy", "--out", tmp_path / "out.npy"],
        ["audit", tmp_path / "a.npy", tmp_path / "b.npy", "--json", tmp_path / "r.json", "--knn-k", "3"],
    ):
        result = runner.invoke(app, [str(a) for a in argv])
        assert result.exit_code == 130 and result.stderr.strip() == "interrupted; nothing was written", result.output
        assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_real_ctrl_c_while_featurize_writes_leaves_nothing(tmp_path):
    """SIGINT to the process group while the writer thread is saving chunks: exit 130, one
    line, and neither the output nor its temporary file left."""
    proc, before = start_slow_featurize(tmp_path, new_session=True)

    def partial():
        return [p for p in tmp_path.iterdir() if p.name.startswith(".out.npy.tmp-") and p.stat().st_size > 1000]

    assert wait_for(partial), "featurize never started writing"
    os.killpg(proc.pid, signal.SIGINT)
    _stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert stderr.strip().startswith("interrupted") and len(stderr.strip().splitlines()) == 1, stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_second_pretrain_on_the_same_run_set_is_refused(tmp_path, sessions_file):
    out = tmp_path / "runs"
    args, proc = slow_pretrain(tmp_path, sessions_file, out, jobs="1")
    try:
        assert wait_for(lambda: (out / "stabcli.lock").exists())
        second = subprocess.run(args, env=ENV, capture_output=True, text=True)
        assert second.returncode == 2
        assert f"another stabcli (pid {proc.pid}) is writing" in second.stderr and "Traceback" not in second.stderr
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_disk_full_while_saving_a_run(tmp_path, sessions_file, monkeypatch):
    root = tmp_path / "runs"
    pretrain(root, sessions_file, TrainConfig(dim=4, epochs=1), runs=1, jobs=1)
    before = (root / "run-000" / "vectors.npy").read_bytes()
    real_save = np.save

    def full_disk(path, *args, **kwargs):
        if "run-001" in str(path):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real_save(path, *args, **kwargs)

    monkeypatch.setattr(trainers.np, "save", full_disk)
    result = runner.invoke(
        app,
        [
            "pretrain",
            str(sessions_file),
            "--out",
            str(root),
            "--runs",
            "2",
            "--dim",
            "4",
            "--epochs",
            "1",
            "--jobs",
            "1",
        ],
    )
    assert result.exit_code == 2, result.output
    assert "run-001" in result.output and "No space left on device" in result.output
    assert "Traceback" not in result.output
    assert (root / "run-000" / "vectors.npy").read_bytes() == before  # finished work untouched
    assert RunSet.open(root).runs == [0]
    assert json.loads((root / "stabcli.json").read_text())["runs"]["run-001"]["status"] == "failed"


def test_disk_full_while_featurizing_leaves_no_output(tmp_path, monkeypatch):
    from stabcli.commands import featurize_stream as featurize_module
    from stabcli.inputs.embeddings import write_embedding

    write_embedding(tmp_path / "in.npy", [f"k{i}" for i in range(20)], np.ones((20, 4), np.float32))

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(featurize_module, "feature_chunks", full_disk)
    result = runner.invoke(
        app, ["featurize", str(tmp_path / "in.npy"), "--out", str(tmp_path / "out.npy"), "--dim", "8"]
    )
    assert result.exit_code == 2 and "No space left on device" in result.output, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.keys.txt", "in.npy"]


def test_a_script_that_floods_its_output_gets_a_capped_log(tmp_path, monkeypatch):
    monkeypatch.setattr(trainers, "LOG_LIMIT", 100_000)
    trainer = tmp_path / "train.py"
    trainer.write_text(
        "import sys, numpy as np\n"
        "for _ in range(2000): sys.stdout.write('x' * 999 + '\\n')\n"
        "np.save(sys.argv[1] + '/vectors.npy', np.ones((3, 2)))\n"
    )
    result = pretrain(
        tmp_path / "runs", None, TrainConfig(script=f"{sys.executable} {trainer} {{out}}"), runs=1, jobs=1
    )
    assert result.runs[0].status == "complete", result.runs[0].error
    log = (tmp_path / "runs" / "run-000" / "log.txt").read_text()
    assert len(log) < 101_000 and "output truncated at 100,000 bytes; 1,900,000 more bytes dropped" in log


@pytest.mark.parametrize("name", ["a b.txt", "it's.txt", "x;rm -rf y.txt", "$(touch pwned).txt"])
def test_script_placeholders_are_never_interpreted_by_a_shell(tmp_path, name):
    corpus = tmp_path / name
    corpus.write_text("a b\n")
    trainer = tmp_path / "train.py"
    trainer.write_text(
        "import sys, json, numpy as np\n"
        "json.dump(sys.argv[1:], open(sys.argv[2] + '/../argv.json', 'w'))\n"
        "np.save(sys.argv[2] + '/vectors.npy', np.ones((2, 2)))\n"
    )
    result = pretrain(
        tmp_path / "runs", corpus, TrainConfig(script=f"{sys.executable} {trainer} {{corpus}} {{out}}"), runs=1, jobs=1
    )
    assert result.runs[0].status == "complete", result.runs[0].error
    argv = json.loads((tmp_path / "runs" / "run-000" / "argv.json").read_text())
    assert argv[0] == str(corpus.resolve())  # one argument, exactly the file name
    assert not (tmp_path / "pwned").exists() and not list(REPO.glob("pwned"))


def crash_state(root, point):
    """The on-disk state a SIGKILL leaves at ``point``, given atomic renames and temp files."""
    if point == "during training":
        shutil.rmtree(root / "run-002")
        (root / ".run-002.partial" / "epochs").mkdir(parents=True)
        (root / ".run-002.partial" / "progress").write_text("1")
    elif point == "while writing a run":
        os.replace(root / "run-002", root / ".run-002.partial")
        data = (root / ".run-002.partial" / "vectors.npy").read_bytes()
        (root / ".run-002.partial" / "vectors.npy").write_bytes(data[: len(data) // 2])  # truncated
    elif point == "between the run's rename and the manifest update":
        manifest = json.loads((root / "stabcli.json").read_text())
        manifest["runs"]["run-002"] = {"seed": 2, "status": "pending"}
        (root / "stabcli.json").write_text(json.dumps(manifest))
    elif point == "while writing the manifest":
        (root / f".stabcli.json.tmp-{os.getpid() + 1}").write_text('{"schema_version": 1, "ru')  # half a temp file
    (root / "stabcli.lock").write_text("999999999\n")  # the dead process's lock


@pytest.mark.parametrize(
    "point",
    [
        "during training",
        "while writing a run",
        "between the run's rename and the manifest update",
        "while writing the manifest",
    ],
)
def test_rerun_after_a_kill_at_any_point_equals_an_uninterrupted_run(tmp_path, sessions_file, point):
    config = TrainConfig(dim=6, epochs=2)
    full, crashed = tmp_path / "full", tmp_path / "crashed"
    pretrain(full, sessions_file, config, runs=3, jobs=1)
    pretrain(crashed, sessions_file, config, runs=3, jobs=1)
    crash_state(crashed, point)
    result = pretrain(crashed, sessions_file, config, runs=3, jobs=1)
    assert [r.status for r in result.runs] == [
        "kept",
        "kept",
        "kept" if "rename" in point or "manifest" in point else "complete",
    ]
    for i in range(3):
        assert (crashed / f"run-{i:03d}" / "vectors.npy").read_bytes() == (
            full / f"run-{i:03d}" / "vectors.npy"
        ).read_bytes()
    assert sorted(p.name for p in crashed.iterdir()) == sorted(p.name for p in full.iterdir())
    manifest = json.loads((crashed / "stabcli.json").read_text())
    assert [manifest["runs"][f"run-{i:03d}"]["status"] for i in range(3)] == ["complete"] * 3
