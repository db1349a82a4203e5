"""Hostile inputs found by attacking pretrain, run sets, processes and the pickle reader
(issue 12): each case failed before its fix."""

from __future__ import annotations

import contextlib
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import assert_bad_input, files_state, runner
from stabcli.cli.app import app
from stabcli.inputs.embeddings import write_embedding

# --- crafted gensim pickles, written opcode by opcode ---------------------------------


def _global(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def _text(s: str) -> bytes:
    data = s.encode()
    return b"X" + struct.pack("<I", len(data)) + data


def _set_class_attribute(attribute: str, value: bytes) -> bytes:
    """BUILD on the KeyedVectors class itself: state (None, {attribute: value}) sets a class attribute."""
    return _global("gensim.models.keyedvectors", "KeyedVectors") + b"N}" + _text(attribute) + value + b"s\x86b0"


def _keyed_vectors(keys: bytes) -> bytes:
    """A KeyedVectors made by NEWOBJ and BUILD, its vectors in the companion .npy."""
    return (
        _global("gensim.models.keyedvectors", "KeyedVectors")
        + b")\x81}("
        + _text("index_to_key")
        + keys
        + _text("__numpys")
        + b"]"
        + _text("vectors")
        + b"aub"
    )


def _crafted_kv(path: Path, body: bytes, rows: int = 1) -> Path:
    path.write_bytes(b"\x80\x04" + body + b".")
    np.save(f"{path}.vectors.npy", np.ones((rows, 4), np.float32))
    return path


def _one_key() -> bytes:
    return b"]" + _text("a") + b"a"


def _huge_int_key() -> bytes:
    return b"](\x8b" + struct.pack("<i", 3000) + b"\x01" * 3000 + b"e"  # LONG4: an int of 7000+ digits


PICKLE_CASES = {
    "class-del": (
        lambda t: _crafted_kv(
            t / "e.kv",
            _set_class_attribute("__del__", _global("gensim.utils", "call_on_class_only")) + _keyed_vectors(_one_key()),
        ),
        "e.kv: refusing to load gensim.models.keyedvectors.KeyedVectors: has its class modified",
    ),
    "class-getattribute": (
        lambda t: _crafted_kv(
            t / "e.kv",
            _set_class_attribute("__getattribute__", _global("builtins", "int")) + _keyed_vectors(_one_key()),
        ),
        "e.kv: refusing to load gensim.models.keyedvectors.KeyedVectors: has its class modified",
    ),
    "class-method": (
        lambda t: _crafted_kv(
            t / "e.kv", _set_class_attribute("adjust_vectors", _global("builtins", "hash")) + _keyed_vectors(_one_key())
        ),
        "e.kv: refusing to load gensim.models.keyedvectors.KeyedVectors: has its class modified",
    ),
    "function-dict": (
        lambda t: _crafted_kv(
            t / "e.kv",
            _global("gensim.utils", "call_on_class_only")
            + b"}"
            + _text("x")
            + b"Ns"
            + b"b0"
            + _keyed_vectors(_one_key()),
        ),
        "e.kv: not a readable gensim save() file",
    ),
    "huge-int-key": (
        lambda t: _crafted_kv(t / "e.kv", _keyed_vectors(_huge_int_key())),
        "e.kv: vectors: key #1 is an integer of",
    ),
}


@pytest.fixture
def good(tmp_path: Path) -> Path:
    path = tmp_path / "good.npy"
    write_embedding(path, ["a", "b", "c"], np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32))
    return path


@pytest.mark.parametrize("case", sorted(PICKLE_CASES))
def test_crafted_pickle_is_refused_with_one_line(tmp_path, good, case):
    build, fragment = PICKLE_CASES[case]
    bad = build(tmp_path)
    before = files_state(tmp_path)
    result = runner.invoke(app, ["audit", str(good), str(bad)])
    assert_bad_input(result, fragment, tmp_path, before)


def test_pickle_that_sets_del_on_a_class_prints_nothing_at_exit(tmp_path, good):
    """A class ``__del__`` from the file ran at garbage collection: "Exception ignored" and a
    traceback on stderr after the error line."""
    bad = PICKLE_CASES["class-del"][0](tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "stabcli", "audit", str(good), str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


# --- the corpus where pretrain writes or removes ---------------------------------------

SMALL = ["--runs", "2", "--dim", "4", "--epochs", "1", "--jobs", "1", "--min-count", "1"]


def _pretrain(*args) -> object:
    return runner.invoke(app, ["pretrain", *[str(a) for a in args]])


@pytest.mark.parametrize(
    "name", ["keys.txt", ".corpus.txt", "key_counts.txt", "stabcli.lock", "stabcli.json", ".keys.txt.tmp-123"]
)
def test_corpus_under_a_name_stabcli_writes_is_refused(tmp_path, sessions_file, name):
    """``pretrain R/keys.txt --out R``: exit 0, the user's corpus replaced by the key list
    (or, as ``R/.corpus.txt``, deleted)."""
    out = tmp_path / "R"
    out.mkdir()
    corpus = out / name
    corpus.write_bytes(sessions_file.read_bytes())
    before = files_state(tmp_path)
    result = _pretrain(corpus, "--out", out, *SMALL)
    assert_bad_input(
        result, f"{corpus}: the corpus lies at {out / name}, which stabcli writes or removes in {out}", tmp_path, before
    )


@pytest.mark.parametrize("where", ["run-000/corpus.txt", "run-001.failed/corpus.txt", ".run-000.partial-1x2/c.txt"])
def test_corpus_inside_a_run_directory_survives_force(tmp_path, sessions_file, where):
    """``pretrain R/run-000/mycorpus.txt --out R --force`` (other config): exit 0 and the
    corpus deleted with run-000."""
    out = tmp_path / "R"
    assert _pretrain(sessions_file, "--out", out, *SMALL).exit_code == 0
    corpus = out / where
    corpus.parent.mkdir(exist_ok=True)
    corpus.write_bytes(sessions_file.read_bytes())
    before = files_state(tmp_path)
    result = _pretrain(corpus, "--out", out, *SMALL, "--dim", "5", "--force")
    assert_bad_input(
        result,
        f"{corpus}: the corpus lies at {out / where.split('/')[0]}, which stabcli writes or removes in {out}",
        tmp_path,
        before,
    )


def test_corpus_linked_to_a_stabcli_name_is_refused(tmp_path, sessions_file):
    """A symlink outside the run set pointing at ``R/keys.txt`` is the same file."""
    out = tmp_path / "R"
    out.mkdir()
    (out / "keys.txt").write_bytes(sessions_file.read_bytes())
    link = tmp_path / "corpus-link.txt"
    link.symlink_to(out / "keys.txt")
    before = files_state(tmp_path)
    result = _pretrain(link, "--out", out, *SMALL)
    assert_bad_input(result, f"{link}: the corpus lies at {out / 'keys.txt'}", tmp_path, before)


def test_user_corpus_inside_the_run_set_is_kept(tmp_path, sessions_file):
    """A corpus under a name of the user's own inside the run set is fine, and survives --force."""
    out = tmp_path / "R"
    assert _pretrain(sessions_file, "--out", out, *SMALL).exit_code == 0
    corpus = out / "my-corpus.txt"
    corpus.write_bytes(sessions_file.read_bytes())
    assert _pretrain(corpus, "--out", out, *SMALL).exit_code == 0  # same corpus bytes: resumed
    assert _pretrain(corpus, "--out", out, *SMALL, "--dim", "5", "--force").exit_code == 0
    assert corpus.read_bytes() == sessions_file.read_bytes()


# --- script descendants that leave the script's process group --------------------------

ESCAPING_SCRIPT = """
import os, subprocess, sys, time
import numpy as np
mode, pids = sys.argv[2], sys.argv[3]
if mode == "setsid":
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    open(os.path.join(pids, str(child.pid)), "w").close()
else:  # daemonize: fork, setsid, fork, the parent of the daemon exits at once
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            open(os.path.join(pids, str(os.getpid())), "w").close()
            time.sleep(60)
        os._exit(0)
    os.wait()
while len(os.listdir(pids)) < 1:
    time.sleep(0.05)
if mode != "hang":
    np.save(os.path.join(sys.argv[1], "vectors.npy"), np.ones((2, 2)))
else:
    time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _gone_within(pids: list[int], seconds: float) -> bool:
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)
    return not any(_alive(p) for p in pids)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize(
    "mode, jobs, code", [("setsid", "1", 0), ("daemon", "1", 0), ("daemon", "2", 0), ("hang", "1", 2)]
)
def test_script_descendants_that_left_its_group_stop_with_it(tmp_path, mode, jobs, code):
    """A script's child in its own session (or a double-forked daemon) outlived pretrain:
    killing the script's process group does not reach it, and it has no parent-death signal."""
    from conftest import REPO

    script = tmp_path / "train.py"
    script.write_text(ESCAPING_SCRIPT)
    pids = tmp_path / "pids"
    pids.mkdir()
    runs = "2" if jobs == "2" else "1"
    args = [
        sys.executable,
        "-m",
        "stabcli",
        "pretrain",
        "--script",
        f"{sys.executable} {script} {{out}} {mode} {pids}",
        "--runs",
        runs,
        "--jobs",
        jobs,
        "--out",
        str(tmp_path / "r"),
    ]
    if mode == "hang":
        args += ["--timeout", "3"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    try:
        result = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode == code, result.stderr
        assert "Traceback" not in result.stderr
        escaped = [int(p.name) for p in pids.iterdir()]
        assert len(escaped) == int(runs)
        assert _gone_within(escaped, 3), "a script's descendant outlived pretrain"
    finally:
        for p in pids.iterdir():
            with contextlib.suppress(OSError):
                os.kill(int(p.name), 9)


# --- memory gensim allocates beyond the key matrix ---------------------------------------


def _wide_tagged(path: Path, tags: int = 2, words: int = 25_000) -> Path:
    """Few tags (the keys) but many distinct words: gensim's word matrices dwarf the tag matrix."""
    path.write_text(
        "".join(f"doc{d}\t" + " ".join(f"w{d}_{i}" for i in range(words)) + "\n" for d in range(tags)), encoding="utf-8"
    )
    return path


@pytest.mark.parametrize(
    "params",
    [
        ["--param", "dm_concat=1", "--param", "dm_tag_count=1000", "--cbow", "--dim", "1000"],
        ["--dim", "200000", "--sg"],
    ],
    ids=["dm_concat", "words-not-tags"],
)
def test_doc2vec_memory_counts_words_and_the_concatenated_layer(tmp_path, params):
    """doc2vec with 2 tags, 50,000 words and dm_concat (hidden layer (dm_tag_count + 2
    window) × dim wide): the guard counted 2 tags × dim, gensim asked for 187 GiB and
    pretrain ended in a MemoryError traceback (exit 1)."""
    corpus = _wide_tagged(tmp_path / "wide.tsv")
    before = files_state(tmp_path)
    result = _pretrain(
        corpus, "--model", "doc2vec", "--out", tmp_path / "W", "--runs", "1", "--jobs", "1", "--epochs", "1", *params
    )
    assert_bad_input(result, "--dim: ", tmp_path, before)
    assert "needs about" in result.stderr and "50,000 words" in result.stderr


def test_memory_error_in_a_run_is_a_failed_run_not_a_traceback(tmp_path, sessions_file, monkeypatch):
    """Whatever the estimate misses: a MemoryError while training fails that run with one line."""
    import stabcli.training.trainers as trainers

    def exhausted(task):
        raise MemoryError("Unable to allocate 187. GiB for an array with shape (50001, 1006000) and data type float32")

    monkeypatch.setitem(trainers.TRAINERS, "gensim", exhausted)
    result = _pretrain(sessions_file, "--out", tmp_path / "R", *SMALL)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "run-000: out of memory" in result.stderr, result.stderr


# --- the run-set lock ---------------------------------------------------------------------


def test_a_stale_lock_whose_pid_was_reused_is_taken_over(tmp_path, sessions_file):
    """``kill -9`` of a pretrain, then its pid reused by an unrelated process: every rerun
    said "another stabcli (pid N) is writing this run set" until the lock was removed by hand."""
    out = tmp_path / "R"
    assert _pretrain(sessions_file, "--out", out, *SMALL, "--runs", "1").exit_code == 0
    unrelated = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (out / "stabcli.lock").write_text(f"{unrelated.pid}\n")
        result = _pretrain(sessions_file, "--out", out, *SMALL)
        assert result.exit_code == 0, result.stderr
        assert sorted(p.name for p in out.iterdir() if p.name.startswith("run-")) == ["run-000", "run-001"]
        assert not (out / "stabcli.lock").exists()
    finally:
        unrelated.kill()
        unrelated.wait()


HOLDER = """
import sys, time
from pathlib import Path
from stabcli.runset import RunSetLock
with RunSetLock(Path(sys.argv[1])):
    Path(sys.argv[1], "stabcli.lock").write_text("")  # as between creating the lock and writing its pid
    print("held", flush=True)
    time.sleep(60)
"""


def test_a_lock_being_created_by_a_live_pretrain_is_not_stale(tmp_path, sessions_file):
    """A lock without a pid yet was taken as stale and removed: two writers in one run set."""
    from conftest import REPO

    out = tmp_path / "R"
    assert _pretrain(sessions_file, "--out", out, *SMALL, "--runs", "1").exit_code == 0
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(out)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        before = files_state(tmp_path)
        result = _pretrain(sessions_file, "--out", out, *SMALL)
        assert_bad_input(result, f"{out}: another stabcli is writing this run set", tmp_path, before)
    finally:
        holder.kill()
        holder.wait()


# --- demo ---------------------------------------------------------------------------------


@pytest.mark.parametrize("user_file", ["notes.txt", "thesis/chapter1.tex"])
def test_demo_refuses_a_directory_with_files_it_did_not_write(tmp_path, user_file):
    """``demo --out ~/work`` replaced ~/work/audit.md, audit.json, drift.md, drift.json and
    sessions-refreshed.txt (written with force), whoever had written them."""
    out = tmp_path / "work"
    (out / user_file).parent.mkdir(parents=True, exist_ok=True)
    (out / user_file).write_text("mine")
    (out / "audit.md").write_text("my own audit notes")
    before = files_state(tmp_path)
    result = runner.invoke(app, ["demo", "--out", str(out), "--jobs", "1"])
    assert_bad_input(
        result, f"--out {out}: holds {user_file.split('/')[0]}, which the demo did not write", tmp_path, before
    )


def test_demo_out_that_is_a_file_is_refused(tmp_path):
    out = tmp_path / "file"
    out.write_text("mine")
    before = files_state(tmp_path)
    result = runner.invoke(app, ["demo", "--out", str(out), "--jobs", "1"])
    assert_bad_input(result, f"--out {out}: exists and is not a directory", tmp_path, before)


DAEMON_THEN_WAIT = """
import os, subprocess, sys, time
pids = sys.argv[2]
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
open(os.path.join(pids, str(child.pid)), "w").close()
time.sleep(60)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_rerun_after_kill_9_stops_what_the_dead_pretrains_scripts_left(tmp_path):
    """``kill -9`` of pretrain: the script dies by its parent-death signal, but a child it
    put in its own session has none and ran on; the rerun left it running too."""
    import signal
    import time

    from conftest import REPO

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    script, pids, out = tmp_path / "train.py", tmp_path / "pids", tmp_path / "r"
    script.write_text(DAEMON_THEN_WAIT)
    pids.mkdir()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "stabcli",
            "pretrain",
            "--script",
            f"{sys.executable} {script} {{out}} {pids}",
            "--runs",
            "1",
            "--jobs",
            "1",
            "--out",
            str(out),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not list(pids.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.05)
        daemon = int(next(pids.iterdir()).name)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert _alive(daemon)
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
                "1",
                "--jobs",
                "1",
                "--out",
                str(out),
                "--force",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert rerun.returncode == 0, rerun.stderr
        assert _gone_within([daemon], 3), "the dead pretrain's script child outlived the rerun"
    finally:
        proc.kill()
        for p in pids.iterdir():
            with contextlib.suppress(OSError):
                os.kill(int(p.name), 9)


def test_key_that_is_a_deeply_nested_list_is_named_by_type(tmp_path, good):
    """A key [[[[...]]]] 200,000 deep: its repr in the message raised RecursionError (traceback, exit 1)."""
    depth = 200_000
    bad = _crafted_kv(tmp_path / "deep.kv", _keyed_vectors(b"]" + b"]" * depth + b"a" * depth))
    before = files_state(tmp_path)
    result = runner.invoke(app, ["audit", str(good), str(bad)])
    assert_bad_input(result, "deep.kv: vectors: key #1 is a list, not a string", tmp_path, before)
