import json
import os
import subprocess
import sys

import numpy as np
import pytest

from stabcli.errors import InputError, RunSetError
from stabcli.runset import (
    SCHEMA_VERSION, RunSet, RunSetLock, complete_runs, failed_dir, partial_dir, read_manifest, write_json_atomic,
)


def test_complete_runs_sees_only_finished_directories(tmp_path):
    for name in ("run-000", "run-002", "run-010"):
        (tmp_path / name).mkdir()
    partial_dir(tmp_path, 1).mkdir()
    failed_dir(tmp_path, 3).mkdir()
    (tmp_path / "run-004").write_text("a file, not a run")
    assert complete_runs(tmp_path) == [0, 2, 10]


def test_manifest_errors(tmp_path):
    with pytest.raises(InputError, match="not a run set"):
        read_manifest(tmp_path)
    (tmp_path / "stabcli.json").write_text("{ not json")
    with pytest.raises(RunSetError, match=r"stabcli\.json: corrupted manifest"):
        read_manifest(tmp_path)
    write_json_atomic(tmp_path / "stabcli.json", {"schema_version": SCHEMA_VERSION + 1})
    with pytest.raises(RunSetError, match=r"schema version 2 is newer than this stabcli understands"):
        read_manifest(tmp_path)


def test_lock_refuses_a_live_owner_and_takes_over_a_dead_one(tmp_path):
    with RunSetLock(tmp_path):
        assert (tmp_path / "stabcli.lock").read_text().strip() == str(os.getpid())
        with pytest.raises(RunSetError, match=rf"another stabcli \(pid {os.getpid()}\) is writing this run set"):
            RunSetLock(tmp_path).__enter__()
    assert not (tmp_path / "stabcli.lock").exists()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / "stabcli.lock").write_text(dead.stdout)
    with RunSetLock(tmp_path):
        assert (tmp_path / "stabcli.lock").read_text().strip() == str(os.getpid())


def test_runset_load_uses_run_keys_before_shared_keys(tmp_path):
    write_json_atomic(tmp_path / "stabcli.json", {"schema_version": 1})
    (tmp_path / "keys.txt").write_text("a\nb\n")
    for name, keys in (("run-000", None), ("run-001", "b\nc\nd\n")):
        (tmp_path / name).mkdir()
        rows = 2 if keys is None else 3
        np.save(tmp_path / name / "vectors.npy", np.arange(rows * 2, dtype=np.float32).reshape(rows, 2))
        if keys:
            (tmp_path / name / "keys.txt").write_text(keys)
    (tmp_path / "run-000" / "losses.json").write_text(json.dumps([3.0, None]))
    runset = RunSet.open(tmp_path)
    assert runset.runs == [0, 1]
    assert runset.load(0).keys == ["a", "b"]
    assert runset.load(1).keys == ["b", "c", "d"]
    assert runset.losses(0) == [3.0, None]
    assert runset.losses(1) is None


def test_runset_load_rejects_keys_that_do_not_match_rows(tmp_path):
    write_json_atomic(tmp_path / "stabcli.json", {"schema_version": 1})
    (tmp_path / "keys.txt").write_text("a\n")
    (tmp_path / "run-000").mkdir()
    np.save(tmp_path / "run-000" / "vectors.npy", np.zeros((2, 2), dtype=np.float32))
    with pytest.raises(InputError, match=r"vectors\.npy: shape \(2, 2\) does not match 1 keys"):
        RunSet.open(tmp_path).load(0)
