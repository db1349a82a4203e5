import json
import os
import subprocess
import sys

import numpy as np
import pytest

from stabcli.errors import InputError, RunSetError
from stabcli.fs.atomic import write_json_atomic
from stabcli.runset import SCHEMA_VERSION, RunSet, RunSetLock, complete_runs, read_manifest
from stabcli.runset.layout import failed_dir, partial_dir


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


def test_runs_sharing_keys_txt_share_one_list_read_once(tmp_path, monkeypatch):
    """200,000 keys took 65 ms to read per run: a run set reads its shared keys once."""
    from stabcli.runset import reader

    write_json_atomic(tmp_path / "stabcli.json", {"schema_version": 1})
    (tmp_path / "keys.txt").write_text("a\nb\n")
    for name in ("run-000", "run-001", "run-002"):
        (tmp_path / name).mkdir()
        np.save(tmp_path / name / "vectors.npy", np.zeros((2, 3), dtype=np.float32))
    (tmp_path / "run-002" / "keys.txt").write_text("b\na\n")
    reads = []
    real = reader.read_keys
    monkeypatch.setattr(reader, "read_keys", lambda path: reads.append(path) or real(path))
    runset = RunSet.open(tmp_path)
    first, second, own = (runset.load(i) for i in (0, 1, 2))
    assert first.keys is second.keys == ["a", "b"] and own.keys == ["b", "a"]
    assert runset.shared_keys() is first.keys
    assert sorted(reads) == [tmp_path / "keys.txt", tmp_path / "run-002" / "keys.txt"]


def test_runset_load_rejects_keys_that_do_not_match_rows(tmp_path):
    write_json_atomic(tmp_path / "stabcli.json", {"schema_version": 1})
    (tmp_path / "keys.txt").write_text("a\n")
    (tmp_path / "run-000").mkdir()
    np.save(tmp_path / "run-000" / "vectors.npy", np.zeros((2, 2), dtype=np.float32))
    with pytest.raises(InputError, match=r"vectors\.npy: shape \(2, 2\) does not match 1 keys"):
        RunSet.open(tmp_path).load(0)


@pytest.mark.parametrize(
    "keys, message",
    [
        (["a", "a"], "key 'a' occurs twice"),
        (["a", "b c"], "key 'b c' contains whitespace"),
        (["a", "b\r"], "key 'b\\\\r' contains whitespace"),
        (["a", "b\nc"], "key 'b\\\\nc' contains whitespace"),
        (["a", ""], "empty key"),
        (["a", "\t"], "contains whitespace"),
    ],
)
def test_write_run_refuses_keys_its_reader_would_reject(tmp_path, keys, message):
    from stabcli.runset import write_run

    with pytest.raises(InputError, match=message):
        write_run(tmp_path, np.ones((2, 2)), keys, name="run-000")
    assert list(tmp_path.iterdir()) == []


def test_write_run_writes_what_runset_reads(tmp_path):
    from stabcli.runset import KEYS, MANIFEST, write_run

    (tmp_path / MANIFEST).write_text(json.dumps({"schema_version": 1, "runs": {}}))
    (tmp_path / KEYS).write_text("a\nb\n")
    (tmp_path / "run-000").mkdir()
    (tmp_path / "run-001").mkdir()
    write_run(tmp_path / "run-000", np.ones((2, 3)), ["a", "b"], shared_keys=["a", "b"], losses=[1.5, None], log="hi\n")
    write_run(tmp_path / "run-001", np.zeros((1, 3)), ["z"], shared_keys=["a", "b"])
    runset = RunSet.open(tmp_path)
    assert not (tmp_path / "run-000" / KEYS).exists() and runset.load(1).keys == ["z"]
    assert runset.load(0).vectors.dtype == np.float32 and runset.losses(0) == [1.5, None]
    assert (tmp_path / "run-000" / "log.txt").read_text() == "hi\n"
    with pytest.raises(InputError, match="non-finite"):
        write_run(tmp_path / "run-001", np.ones((1, 3)), ["z"], losses=[float("nan")])
    with pytest.raises(InputError, match="NaN or infinite"):
        write_run(tmp_path / "run-001", np.full((1, 3), np.inf), ["z"])


def test_atomic_path_leaves_the_target_on_failure(tmp_path):
    from stabcli.fs.atomic import atomic_path, is_temp_name

    target = tmp_path / "t.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            assert is_temp_name(tmp.name)
            raise RuntimeError
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["t.txt"]
    with atomic_path(target, suffix=".npz") as tmp:
        assert tmp.name.endswith(".npz")
        np.savez(tmp, a=np.ones(2))
    assert np.load(target)["a"].tolist() == [1.0, 1.0]


def test_a_run_set_with_foreign_files_is_not_removable_and_removal_keeps_them(tmp_path):
    from stabcli.runset import check_removable_runset, remove_stabcli_entries

    root = tmp_path / "phi"
    (root / "run-000").mkdir(parents=True)
    (root / "stabcli.json").write_text("{}")
    (root / "mywork.txt").write_text("mine")
    with pytest.raises(RunSetError, match=r"holds mywork\.txt"):
        check_removable_runset(root)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("k")
    (root / "run-000" / "link").symlink_to(outside)
    remove_stabcli_entries(root)
    assert [p.name for p in root.iterdir()] == ["mywork.txt"] and (outside / "keep").read_text() == "k"


def test_file_sha256_matches_hashlib(tmp_path):
    import hashlib

    from stabcli.fs.atomic import file_sha256

    data = b"x" * (3 << 20)
    (tmp_path / "big.txt").write_bytes(data)
    assert file_sha256(tmp_path / "big.txt") == hashlib.sha256(data).hexdigest()


def test_a_reader_follows_a_symlinked_run_but_a_writer_refuses_it(tmp_path):
    from stabcli.runset import check_entries

    root = tmp_path / "r"
    root.mkdir()
    (root / "stabcli.json").write_text(json.dumps({"schema_version": 1, "runs": {}}))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    np.save(elsewhere / "vectors.npy", np.ones((1, 2), np.float32))
    (elsewhere / "keys.txt").write_text("a\n")
    (root / "run-000").symlink_to(elsewhere)
    assert RunSet.open(root).load(0).keys == ["a"]
    with pytest.raises(RunSetError, match="symbolic link"):
        check_entries(root)


@pytest.mark.parametrize(
    "rel, kind",
    [
        ("stabcli.json", "file"),
        ("stabcli.lock", "file"),
        ("key_counts.txt", "file"),
        (".corpus.txt", "file"),
        ("run-000", "dir"),
        ("run-1234", "dir"),
        (".run-000.partial-123xab", "dir"),
        ("run-000.failed", "dir"),
        ("run-000/vectors.npy", "file"),
        ("run-000/epochs", "dir"),
        ("run-000/epochs/003.npy", "file"),
        ("run-000/.vectors.npy.tmp-77", "temp"),
        (".keys.txt.tmp-12", "temp"),
        (".out.partial-12", "temp"),
        (".run-000.partial-1x2/output/anything.bin", "any"),
        ("run-000.failed/corpus.txt", "any"),
        ("run-00", None),
        ("notes.txt", None),
        ("run-000/notes.txt", None),
        ("run-000/epochs/x.npy", None),
        ("mine/run-000", None),
    ],
)
def test_entry_kind_is_the_one_answer_to_what_stabcli_wrote(rel, kind):
    from pathlib import PurePosixPath

    from stabcli.runset import entry_kind, owned

    assert entry_kind(rel) == kind
    path = PurePosixPath(rel)
    assert owned(path, True) == (kind in ("dir", "temp", "any"))
    assert owned(path, False) == (kind in ("file", "temp", "any"))
