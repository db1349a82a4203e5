import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import EXAMPLE_SCRIPT, REPO, runner
from stabcli.errors import OptionError, RunSetError, UsageError
from stabcli.runset import RunSet
from stabcli.training.pretrain import TrainConfig, parse_params, pretrain, script_argv

SMALL = TrainConfig(dim=8, window=2, negative=2, epochs=3)


def vectors(root: Path, index: int) -> np.ndarray:
    return np.load(root / f"run-{index:03d}" / "vectors.npy")


def test_parse_params_validates_names_and_parses_literals():
    assert parse_params("word2vec", ["sample=1e-3", "hs=1", "ns_exponent=0.5", "max_final_vocab=None"]) == {
        "sample": 1e-3,
        "hs": 1,
        "ns_exponent": 0.5,
        "max_final_vocab": None,
    }
    assert parse_params("doc2vec", ["dm_mean=1", "sample=0"]) == {"dm_mean": 1, "sample": 0}
    with pytest.raises(UsageError, match="--param bogus: not an argument of gensim Word2Vec"):
        parse_params("word2vec", ["bogus=1"])
    with pytest.raises(UsageError, match="--param workers: set by stabcli itself"):
        parse_params("word2vec", ["workers=4"])
    with pytest.raises(UsageError, match="expected key=value"):
        parse_params("word2vec", ["sample"])


def test_script_argv_fills_placeholders_inside_arguments_without_a_shell():
    argv = script_argv(
        "train --seed {seed} --out={out} 'my file;rm -rf x' --c {corpus}",
        seed=7,
        out=Path("/tmp/a b"),
        run=3,
        corpus=Path("/data/c $x.txt"),
    )
    assert argv == ["train", "--seed", "7", "--out=/tmp/a b", "my file;rm -rf x", "--c", "/data/c $x.txt"]


def test_pretrain_writes_the_run_set_layout(tmp_path, sessions_file):
    root = tmp_path / "runs"
    result = pretrain(root, sessions_file, SMALL, runs=2, jobs=1)
    assert [r.status for r in result.runs] == ["complete", "complete"]
    keys = (root / "keys.txt").read_text().splitlines()
    assert result.keys == len(keys) == 40
    for i in range(2):
        v = vectors(root, i)
        assert v.dtype == np.float32 and v.shape == (40, 8)
        losses = json.loads((root / f"run-{i:03d}" / "losses.json").read_text())
        assert len(losses) == 3 and all(loss > 0 for loss in losses)
        assert (root / f"run-{i:03d}" / "log.txt").read_text().count("EPOCH") >= 3
    manifest = json.loads((root / "stabcli.json").read_text())
    assert manifest["schema_version"] == 1
    assert manifest["config"]["dim"] == 8
    assert manifest["seeds"] == [0, 1]
    assert manifest["corpus"]["sequences"] == 120
    assert {name: run["status"] for name, run in manifest["runs"].items()} == {
        "run-000": "complete",
        "run-001": "complete",
    }
    assert manifest["runs"]["run-001"]["final_loss"] == pytest.approx(losses[-1])
    assert not (root / ".corpus.txt").exists() and not (root / "stabcli.lock").exists()
    assert not np.array_equal(vectors(root, 0), vectors(root, 1))  # different seeds, different runs


def test_vectors_rows_follow_keys_txt(tmp_path, sessions_file):
    from gensim.models import Word2Vec

    root = tmp_path / "runs"
    pretrain(root, sessions_file, SMALL, runs=1, jobs=1)
    model = Word2Vec(
        corpus_file=str(sessions_file),
        vector_size=8,
        window=2,
        negative=2,
        epochs=3,
        min_count=1,
        workers=1,
        seed=0,
        sg=1,
        compute_loss=True,
    )
    keys = (root / "keys.txt").read_text().splitlines()
    direct = np.stack([model.wv[k] for k in keys])
    np.testing.assert_array_equal(vectors(root, 0), direct)  # same seed as a direct gensim call, bit for bit


def test_same_seed_is_bitwise_identical_for_any_jobs(tmp_path, sessions_file):
    pretrain(tmp_path / "j1", sessions_file, SMALL, runs=3, jobs=1)
    pretrain(tmp_path / "j2", sessions_file, SMALL, runs=3, jobs=2)
    for i in range(3):
        assert (tmp_path / "j1" / f"run-{i:03d}" / "vectors.npy").read_bytes() == (
            tmp_path / "j2" / f"run-{i:03d}" / "vectors.npy"
        ).read_bytes()


def test_checkpoints_save_every_epoch_and_the_last_is_the_result(tmp_path, sessions_file):
    root = tmp_path / "runs"
    pretrain(root, sessions_file, TrainConfig(dim=8, epochs=3, checkpoints=True), runs=1, jobs=1)
    snaps = sorted((root / "run-000" / "epochs").iterdir())
    assert [p.name for p in snaps] == ["001.npy", "002.npy", "003.npy"]
    np.testing.assert_array_equal(np.load(snaps[-1]), vectors(root, 0))
    assert not np.array_equal(np.load(snaps[0]), np.load(snaps[-1]))


def test_vary_shuffle_changes_runs_and_bootstrap_may_change_keys(tmp_path, sessions_file):
    pretrain(tmp_path / "seed", sessions_file, SMALL, runs=1, jobs=1)
    pretrain(
        tmp_path / "shuf",
        sessions_file,
        TrainConfig(dim=8, window=2, negative=2, epochs=3, vary="shuffle"),
        runs=1,
        jobs=1,
    )
    assert not np.array_equal(vectors(tmp_path / "seed", 0), vectors(tmp_path / "shuf", 0))
    corpus = tmp_path / "rare.txt"
    corpus.write_text("".join(f"common x{i}\n" for i in range(50)))  # 50 singleton keys: bootstrap drops some
    root = tmp_path / "boot"
    pretrain(root, corpus, TrainConfig(dim=4, epochs=1, vary="bootstrap"), runs=2, jobs=1)
    runset = RunSet.open(root)
    for i in range(2):
        emb = runset.load(i)
        assert (root / f"run-{i:03d}" / "keys.txt").is_file()
        assert emb.keys[0] == "common" and 10 < len(emb.keys) < 51
    assert runset.load(0).keys != runset.load(1).keys


def test_doc2vec_learns_one_vector_per_tag(tmp_path, tagged_file):
    root = tmp_path / "runs"
    pretrain(root, tagged_file, TrainConfig(model="doc2vec", dim=6, epochs=2), runs=1, jobs=1)
    emb = RunSet.open(root).load(0)
    assert emb.keys == [f"doc{i}" for i in range(30)]
    assert emb.vectors.shape == (30, 6)
    assert json.loads((root / "run-000" / "losses.json").read_text()) == [None, None]


def test_resume_keeps_finished_runs_and_redoes_missing_ones(tmp_path, sessions_file):
    root = tmp_path / "runs"
    pretrain(root, sessions_file, SMALL, runs=3, jobs=1)
    before = {i: vectors(root, i) for i in range(3)}
    stamp = (root / "run-000" / "vectors.npy").stat().st_mtime_ns
    import shutil

    shutil.rmtree(root / "run-001")
    (root / ".run-002.partial").mkdir()  # junk from a killed attempt at a run that is not finished
    result = pretrain(root, sessions_file, SMALL, runs=4, jobs=1)
    assert [r.status for r in result.runs] == ["kept", "complete", "kept", "complete"]
    assert (root / "run-000" / "vectors.npy").stat().st_mtime_ns == stamp
    for i in range(3):
        np.testing.assert_array_equal(vectors(root, i), before[i])
    assert not (root / ".run-002.partial").exists()


def test_a_run_set_from_before_0_3_resumes(tmp_path, sessions_file):
    """A manifest written before 0.3 records neither the codec used nor the columns (only
    ``--encoding`` as typed): the run set resumes (they are unknown, not different)."""
    root = tmp_path / "runs"
    pretrain(root, sessions_file, SMALL, runs=1, jobs=1)
    manifest = json.loads((root / "stabcli.json").read_text())
    manifest["corpus"].pop("encoding", None)
    manifest["corpus"].pop("columns", None)
    manifest["corpus"].setdefault("options", {})["encoding"] = "LATIN1"  # --encoding as typed, not a codec name
    (root / "stabcli.json").write_text(json.dumps(manifest))
    result = pretrain(root, sessions_file, SMALL, runs=2, jobs=1)
    assert [r.status for r in result.runs] == ["kept", "complete"]


def test_other_config_is_refused_unless_forced(tmp_path, sessions_file):
    root = tmp_path / "runs"
    pretrain(root, sessions_file, SMALL, runs=1, jobs=1)
    other = TrainConfig(dim=4, window=2, negative=2, epochs=3)
    with pytest.raises(RunSetError, match=r"made with a different configuration \(dim 8 → 4\); use --force"):
        pretrain(root, sessions_file, other, runs=1, jobs=1)
    pretrain(root, sessions_file, other, runs=1, jobs=1, force=True)
    assert vectors(root, 0).shape == (40, 4)


def test_out_that_is_not_a_run_set_is_refused(tmp_path, sessions_file):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "precious.txt").write_text("keep me")
    with pytest.raises(RunSetError, match="not empty and is not a run set"):
        pretrain(tmp_path / "mine", sessions_file, SMALL, runs=1)
    assert (tmp_path / "mine" / "precious.txt").read_text() == "keep me"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"runs": 0}, "runs: must be at least 1"),
        ({"seed": -1}, "seed: must be between"),
    ],
)
def test_bad_options(tmp_path, sessions_file, kwargs, message):
    with pytest.raises(UsageError, match=message):
        pretrain(tmp_path / "r", sessions_file, SMALL, **{"runs": 1, **kwargs})


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"dim": 0}, "dim: must be at least 1"),
        ({"model": "glove"}, "model: 'glove'"),
        ({"vary": "jitter"}, "vary: 'jitter'"),
    ],
)
def test_train_config_validates_itself_on_construction(fields, message):
    with pytest.raises(OptionError, match=message) as info:
        TrainConfig(**fields)
    assert info.value.param == next(iter(fields))


def script_config(tmp_path: Path, body: str) -> TrainConfig:
    script = tmp_path / "train.py"
    script.write_text(body)
    return TrainConfig(script=f"{sys.executable} {script} --seed {{seed}} --out {{out}} --run {{run}}")


def test_script_mode_with_the_example_trainer(tmp_path, sessions_file):
    config = TrainConfig(
        script=f"{sys.executable} {EXAMPLE_SCRIPT} --corpus {{corpus}} --seed {{seed}} --out {{out}} --dim 4"
    )
    root = tmp_path / "runs"
    result = pretrain(root, sessions_file, config, runs=2, jobs=2)
    assert [r.status for r in result.runs] == ["complete", "complete"]
    runset = RunSet.open(root)
    emb = runset.load(1)
    assert emb.vectors.shape == (40, 4) and emb.vectors.dtype == np.float32
    assert len(runset.losses(1)) == 3
    assert "--seed 1" in (root / "run-001" / "log.txt").read_text()
    assert not (root / "run-001" / "output").exists()
    assert not np.allclose(runset.load(0).vectors, emb.vectors)
    tokens = sessions_file.read_text().split()  # the corpus stabcli parsed gives the script's keys their counts
    assert runset.key_counts() == {key: tokens.count(key) for key in set(tokens)}


FAILING = """
import argparse, pathlib, sys, time
p = argparse.ArgumentParser(); p.add_argument('--seed'); p.add_argument('--out'); p.add_argument('--run', type=int)
a = p.parse_args(); out = pathlib.Path(a.out)
print('training run', a.run)
if a.run == 1: sys.exit(3)
if a.run == 2: time.sleep(60)
if a.run == 3: sys.exit(0)
if a.run == 4: (out / 'v.txt').write_text('2 2\\nx 1 2\\n')
if a.run == 5: (out / 'v.txt').write_text('1 2\\nx nan 2\\n')
if a.run == 0: (out / 'v.txt').write_text('1 2\\nx 1 2\\n')
"""


def test_script_failures_are_per_run_and_leave_the_other_runs_alone(tmp_path):
    root = tmp_path / "runs"
    result = pretrain(root, None, script_config(tmp_path, FAILING), runs=6, jobs=2, timeout=3)
    status = {r.index: r.status for r in result.runs}
    assert status == {0: "complete", 1: "failed", 2: "failed", 3: "failed", 4: "failed", 5: "failed"}
    errors = {r.index: r.error for r in result.runs}
    assert "run-001: script exited with code 3: training run 1 (log: " in errors[1]  # the output's last line
    assert "run-002: script timed out after 3 s" in errors[2]
    assert "run-003: script wrote no embedding file" in errors[3]
    assert "run-004: unreadable output: " in errors[4] and "header says 2 vectors, found 1" in errors[4]
    assert "run-005: output v.txt contains NaN" in errors[5]
    assert "training run 1" in (root / "run-001.failed" / "log.txt").read_text()
    assert RunSet.open(root).load(0).keys == ["x"]
    manifest = json.loads((root / "stabcli.json").read_text())
    assert manifest["runs"]["run-001"]["status"] == "failed"


def test_script_that_does_not_exist(tmp_path):
    config = TrainConfig(script="/no/such/trainer --out {out}")
    result = pretrain(tmp_path / "runs", None, config, runs=1)
    assert result.runs[0].status == "failed"
    assert "command not found: /no/such/trainer" in result.runs[0].error


def test_script_template_checks(tmp_path, sessions_file):
    with pytest.raises(UsageError, match=r"script: must contain \{out\}"):
        pretrain(tmp_path / "r", None, TrainConfig(script="train --seed {seed}"), runs=1)
    with pytest.raises(UsageError, match=r"uses \{corpus\} but no CORPUS"):
        pretrain(tmp_path / "r", None, TrainConfig(script="train {corpus} {out}"), runs=1)
    with pytest.raises(UsageError, match="cannot split"):
        pretrain(tmp_path / "r", None, TrainConfig(script="train 'unclosed {out}"), runs=1)


def test_sigkill_mid_pretrain_then_resume_equals_an_uninterrupted_run(tmp_path, sessions_file):
    """A real SIGKILL of the whole process group while runs are being written."""
    big = tmp_path / "big.txt"
    big.write_text(sessions_file.read_text() * 100)
    args = [
        sys.executable,
        "-m",
        "stabcli",
        "pretrain",
        str(big),
        "--runs",
        "4",
        "--dim",
        "8",
        "--epochs",
        "6",
        "--jobs",
        "1",
        "--checkpoints",
    ]
    killed = tmp_path / "killed"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        args + ["--out", str(killed)],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 120
    while time.time() < deadline and not (killed / "run-001").exists():
        time.sleep(0.05)
    assert (killed / "run-001").exists(), "pretrain did not get far enough to be interrupted"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (killed / "run-003").exists()  # interrupted before the end
    subprocess.run(args + ["--out", str(killed)], env=env, check=True, capture_output=True)
    full = tmp_path / "full"
    subprocess.run(args + ["--out", str(full)], env=env, check=True, capture_output=True)
    for i in range(4):
        for rel in ("vectors.npy", "losses.json", "epochs/006.npy"):
            assert (killed / f"run-{i:03d}" / rel).read_bytes() == (full / f"run-{i:03d}" / rel).read_bytes()
    assert sorted(p.name for p in killed.iterdir()) == sorted(p.name for p in full.iterdir())


def test_key_counts_and_the_corpus_summary_are_recorded(tmp_path, sessions_file):
    from collections import Counter

    result = pretrain(tmp_path / "r", sessions_file, SMALL, runs=1, jobs=1)
    tokens = sessions_file.read_text().split()
    assert {k: result.corpus[k] for k in ("format", "sequences", "tokens", "distinct_keys", "columns")} == {
        "format": "lines",
        "sequences": 120,
        "tokens": len(tokens),
        "distinct_keys": 40,
        "columns": None,
    }
    assert result.corpus["description"] == f"lines: 120 sequences, {len(tokens):,} tokens, 40 distinct keys"
    assert RunSet.open(tmp_path / "r").key_counts() == dict(Counter(tokens))


def test_doc2vec_key_counts_are_the_tokens_of_each_tag(tmp_path, tagged_file):
    pretrain(tmp_path / "r", tagged_file, TrainConfig(model="doc2vec", dim=4, epochs=1), runs=1, jobs=1)
    counts = RunSet.open(tmp_path / "r").key_counts()
    assert counts["doc0"] == 8 and len(counts) == 30


@pytest.mark.parametrize(
    "leftovers",
    [
        ["keys.txt", "stabcli.lock"],
        ["keys.txt", ".corpus.txt", "stabcli.lock"],
        [".stabcli.json.tmp-99999"],
        ["key_counts.txt", ".run-000.partial-123xabc"],
    ],
)
def test_a_kill_during_setup_before_the_manifest_exists_restarts_cleanly(tmp_path, sessions_file, leftovers):
    root = tmp_path / "r"
    root.mkdir()
    for name in leftovers:
        if "partial" in name:
            (root / name).mkdir()
        else:
            (root / name).write_text("999999999\n" if name == "stabcli.lock" else "junk\n")
    result = pretrain(root, sessions_file, SMALL, runs=2, jobs=1)
    assert [r.status for r in result.runs] == ["complete", "complete"]
    full = tmp_path / "full"
    pretrain(full, sessions_file, SMALL, runs=2, jobs=1)
    assert sorted(p.name for p in root.iterdir()) == sorted(p.name for p in full.iterdir())
    assert vectors(root, 1).tobytes() == vectors(full, 1).tobytes()


def test_parallel_runs_equal_sequential_runs_with_the_process_backend(tmp_path, sessions_file):
    from stabcli.training.pretrain import local_backend

    seen = []

    def recording(tasks, jobs):
        seen.append((len(tasks), jobs))
        yield from local_backend(tasks, jobs)

    pretrain(tmp_path / "a", sessions_file, SMALL, runs=3, jobs=2, backend=recording)
    pretrain(tmp_path / "b", sessions_file, SMALL, runs=3, jobs=1)
    assert seen == [(3, 2)]
    for i in range(3):
        assert vectors(tmp_path / "a", i).tobytes() == vectors(tmp_path / "b", i).tobytes()


def test_the_json_summary_names_the_corpus_reading(tmp_path, sessions_file):
    from stabcli.cli.app import app

    result = runner.invoke(
        app,
        [
            "pretrain",
            str(sessions_file),
            "--out",
            str(tmp_path / "r"),
            "--runs",
            "1",
            "--dim",
            "4",
            "--epochs",
            "1",
            "--jobs",
            "1",
            "--format",
            "json",
            "--quiet",
        ],
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert {k: payload["corpus"][k] for k in ("format", "sequences", "distinct_keys", "delimiter", "header")} == {
        "format": "lines",
        "sequences": 120,
        "distinct_keys": 40,
        "delimiter": None,
        "header": None,
    }
    assert payload["keys"] == 40 and result.stderr == ""
    table = runner.invoke(
        app,
        [
            "pretrain",
            str(sessions_file),
            "--out",
            str(tmp_path / "r"),
            "--runs",
            "1",
            "--dim",
            "4",
            "--epochs",
            "1",
            "--jobs",
            "1",
        ],
    )
    assert "corpus read as lines: 120 sequences" in table.stdout and "40 distinct keys" in table.stdout


def test_a_worker_never_publishes_only_the_lock_holder_does(tmp_path, sessions_file):
    """An orphaned worker of a killed pretrain runs `execute` to the end: its run stays in its
    own partial directory, which the next pretrain (the lock holder) discards."""
    from stabcli.runset.layout import partial_dir
    from stabcli.training.trainers import RunTask, execute

    root = tmp_path / "r"
    pretrain(root, sessions_file, SMALL, runs=1, jobs=1)
    (root / ".corpus.txt").write_text(sessions_file.read_text())  # what the killed pretrain left
    orphan_work = partial_dir(root, 1, "999x0rphan")
    orphan_work.mkdir()
    result = execute(RunTask(1, 1, SMALL, orphan_work, root / "keys.txt", root / ".corpus.txt", None))
    assert result.status == "complete" and (orphan_work / "vectors.npy").is_file()
    assert not (root / "run-001").exists()
    pretrain(root, sessions_file, SMALL, runs=2, jobs=1)
    assert not orphan_work.exists() and sorted(p.name for p in root.iterdir()) == [
        "key_counts.txt",
        "keys.txt",
        "run-000",
        "run-001",
        "stabcli.json",
    ]
