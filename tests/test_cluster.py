"""Dask's distributed scheduler as a backend: connection, preflight, task mapping, errors.

Each test that starts a LocalCluster spends about a second on it; they share one cluster
where they can (module fixture)."""

from __future__ import annotations

import math
import os
import sys

import pytest

from stabcli.errors import OptionError, UsageError
from stabcli.training import cluster
from stabcli.training.cluster import Cluster, Preflight, joblib_on, scheduler_address

pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def local2():
    with Cluster("local:2") as c:
        yield c


def test_scheduler_address_comes_from_the_option_then_the_environment(monkeypatch):
    monkeypatch.delenv(cluster.ENV_VAR, raising=False)
    assert scheduler_address(None) is None
    monkeypatch.setenv(cluster.ENV_VAR, "tcp://10.0.0.1:8786")
    assert scheduler_address(None) == "tcp://10.0.0.1:8786"
    assert scheduler_address("local:1") == "local:1"  # the option wins (N within this machine's CPUs)
    monkeypatch.setenv(cluster.ENV_VAR, "")
    assert scheduler_address(None) is None


@pytest.mark.parametrize("bad", ["local", "local:0", "local:x", "local:-1", "local:100000", "  "])
def test_bad_local_addresses_name_the_option(bad):
    with pytest.raises(OptionError) as info:
        scheduler_address(bad)
    assert info.value.param == "scheduler"


def test_local_cluster_has_single_threaded_workers_and_maps_tasks(local2):
    workers = local2.client.scheduler_info()["workers"]
    assert len(workers) == 2
    assert all(w["nthreads"] == 1 for w in workers.values())
    assert sorted(local2.map_unordered(math.sqrt, [1, 4, 9, 16, 25])) == [1, 2, 3, 4, 5]


def test_tasks_run_in_the_worker_processes(local2):
    pids = set(local2.map_unordered(_pid, range(6)))
    assert os.getpid() not in pids and 1 <= len(pids) <= 2


def _pid(_: int) -> int:
    return os.getpid()


def test_preflight_passes_and_names_the_worker_and_problem(local2, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a b c\n")
    from stabcli.fs.atomic import file_sha256

    local2.preflight(Preflight(read=[(corpus, file_sha256(corpus))], write=[tmp_path]))
    with pytest.raises(UsageError, match=r"Dask worker tcp://.*: cannot read .*missing\.txt"):
        local2.preflight(Preflight(read=[(tmp_path / "missing.txt", None)], write=[]))
    with pytest.raises(UsageError, match=r"differs from the client's copy"):
        local2.preflight(Preflight(read=[(corpus, "0" * 64)], write=[]))
    with pytest.raises(UsageError, match=r"cannot write into .*nodir"):
        local2.preflight(Preflight(read=[], write=[tmp_path / "nodir"]))


def test_preflight_reports_a_version_mismatch(local2, monkeypatch):
    monkeypatch.setattr(cluster, "versions", lambda: {"stabcli": "0.0-other", "numpy": "1", "gensim": "1"})
    with pytest.raises(UsageError, match=r"Dask worker .*: stabcli .* \(client has 0.0-other\)"):
        local2.preflight(Preflight(read=[], write=[]))


def test_an_unreachable_scheduler_is_one_option_error(monkeypatch):
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT_S", 1)
    with pytest.raises(OptionError, match=r"cannot reach the Dask scheduler at tcp://127.0.0.1:9"):
        with Cluster("tcp://127.0.0.1:9"):
            pass


MISSING_EXTRA = """
import sys
sys.modules["distributed"] = None  # import fails as if stabcli[dask] were not installed
from stabcli.cli.app import main
sys.argv = ["stabcli", *sys.argv[1:]]
main()
"""


def test_a_missing_extra_names_the_install_command(tmp_path, sessions_file):
    # in a child process: breaking the import in this one would break the shared cluster's client
    import subprocess

    before = files_state(tmp_path)
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            MISSING_EXTRA,
            "pretrain",
            str(sessions_file),
            "--out",
            str(tmp_path / "r"),
            "--scheduler",
            "local:1",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "error: --scheduler needs Dask's distributed scheduler: pip install 'stabcli[dask]'"
    ]
    assert files_state(tmp_path) == before


def test_joblib_runs_on_the_cluster_inside_the_block():
    from joblib import Parallel, delayed

    with joblib_on("local:2"):  # (with one worker thread in all, joblib runs in-process)
        pids = set(Parallel(n_jobs=2)(delayed(_pid)(i) for i in range(4)))
    assert os.getpid() not in pids
    with joblib_on(None) as nothing:
        assert nothing is None


# ---------------------------------------------------------------- pretrain and audit on a cluster

import json  # noqa: E402
import signal  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from conftest import EXAMPLE_SCRIPT, assert_bad_input, files_state, make_sessions, runner, start_process  # noqa: E402
from stabcli.cli.app import app  # noqa: E402
from stabcli.training.cluster import pretrain_backend  # noqa: E402
from stabcli.training.pretrain import TrainConfig, pretrain  # noqa: E402

SMALL = TrainConfig(dim=8, window=2, negative=2, epochs=3)


def run_bytes(root: Path) -> dict[str, bytes]:
    return {p.parent.name: p.read_bytes() for p in sorted(root.glob("run-*/vectors.npy"))}


def test_pretrain_on_the_cluster_equals_a_local_run_bit_for_bit(local2, tmp_path, sessions_file):
    pretrain(tmp_path / "local", sessions_file, SMALL, runs=3, jobs=2)
    result = pretrain(tmp_path / "dask", sessions_file, SMALL, runs=3, backend=pretrain_backend(local2))
    assert [r.status for r in result.runs] == ["complete"] * 3
    assert run_bytes(tmp_path / "dask") == run_bytes(tmp_path / "local") and len(run_bytes(tmp_path / "local")) == 3
    manifest = json.loads((tmp_path / "dask" / "stabcli.json").read_text())
    assert {r["status"] for r in manifest["runs"].values()} == {"complete"}
    assert not list((tmp_path / "dask").glob(".*partial*"))


def test_script_runs_go_to_the_cluster_too(local2, tmp_path, sessions_file):
    config = TrainConfig(
        script=f"{sys.executable} {EXAMPLE_SCRIPT} --corpus {{corpus}} --seed {{seed}} --out {{out}} --dim 4"
    )
    pretrain(tmp_path / "local", sessions_file, config, runs=2, jobs=2)
    pretrain(tmp_path / "dask", sessions_file, config, runs=2, backend=pretrain_backend(local2))
    assert run_bytes(tmp_path / "dask") == run_bytes(tmp_path / "local") and len(run_bytes(tmp_path / "local")) == 2


def test_the_cli_runs_pretrain_on_local_workers_and_names_the_scheduler(tmp_path, sessions_file):
    args = ["pretrain", str(sessions_file), "--runs", "2", "--dim", "8", "--epochs", "2", "--format", "json"]
    local = runner.invoke(app, [*args, "--out", str(tmp_path / "local"), "--jobs", "2"])
    dask = runner.invoke(app, [*args, "--out", str(tmp_path / "dask"), "--scheduler", "local:2"])
    assert local.exit_code == 0 and dask.exit_code == 0, dask.output
    assert "Dask scheduler local:2: 2 worker(s)" in dask.stderr
    assert json.loads(dask.stdout)["failed"] == 0
    assert run_bytes(tmp_path / "dask") == run_bytes(tmp_path / "local")


def test_sweep_on_local_workers_starts_one_cluster_for_every_cell(tmp_path, sessions_file, monkeypatch):
    import distributed

    started = []
    real = distributed.LocalCluster
    monkeypatch.setattr(distributed, "LocalCluster", lambda *a, **k: started.append(k) or real(*a, **k))
    args = ["sweep", str(sessions_file), "--sizes", "0.5,1", "--runs", "2", "--dim", "4", "--epochs", "1"]
    local = runner.invoke(app, [*args, "--out", str(tmp_path / "local"), "--format", "json"])
    dask = runner.invoke(app, [*args, "--out", str(tmp_path / "dask"), "--scheduler", "local:2", "--format", "json"])
    assert local.exit_code == 0 and dask.exit_code == 0, dask.output
    assert len(started) == 1  # two cells, one cluster, started once the inputs were checked
    for cell in ("size=0.5", "size=1"):
        assert run_bytes(tmp_path / "dask" / "cells" / cell) == run_bytes(tmp_path / "local" / "cells" / cell)


def test_a_worker_killed_mid_run_is_retried_and_the_run_set_equals_a_local_one(tmp_path):
    corpus = tmp_path / "big.txt"
    corpus.write_text(make_sessions(n_sequences=4000, n_items=200), encoding="utf-8")
    config = TrainConfig(dim=16, window=3, negative=3, epochs=12)
    pretrain(tmp_path / "local", corpus, config, runs=2, jobs=2)
    with Cluster("local:2") as c:
        pids = c.client.run(os.getpid)
        outcome: dict[str, object] = {}
        thread = threading.Thread(
            target=lambda: outcome.setdefault(
                "result", pretrain(tmp_path / "dask", corpus, config, runs=2, backend=pretrain_backend(c))
            )
        )
        thread.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not list((tmp_path / "dask").glob(".run-*/progress")):
            time.sleep(0.05)
        victim = sorted(pids.values())[0]
        os.kill(victim, signal.SIGKILL)  # one worker dies in the middle of its run
        thread.join(timeout=180)
    assert not thread.is_alive()
    result = outcome["result"]
    assert [r.status for r in result.runs] == ["complete", "complete"]
    assert run_bytes(tmp_path / "dask") == run_bytes(tmp_path / "local")


def labelled_runs(tmp_path: Path, multilabel: bool = False) -> list[str]:
    """Three runs of 120 keys around 3 class centres and ``labels.tsv`` (one class per key;
    ``multilabel``: also the next class, so every key has two labels)."""
    from stabcli.inputs.embeddings import write_embedding

    rng = np.random.default_rng(0)
    keys = [f"k{i}" for i in range(120)]
    centers = rng.standard_normal((3, 6))
    labels = rng.integers(0, 3, size=len(keys))
    files = []
    for r in range(3):
        path = tmp_path / f"r{r}.npy"
        write_embedding(path, keys, (centers[labels] + 0.7 * rng.standard_normal((len(keys), 6))).astype(np.float32))
        files.append(str(path))
    rows = [(k, c) for k, c in zip(keys, labels, strict=True)]
    if multilabel:
        rows += [(k, (c + 1) % 3) for k, c in zip(keys, labels, strict=True) if int(k[1:]) % 2]
    (tmp_path / "labels.tsv").write_text("".join(f"{k}\tc{c}\n" for k, c in rows))
    return ["audit", *files, "--labels", str(tmp_path / "labels.tsv"), "--format", "json", "--knn-k", "3"]


@pytest.mark.parametrize(
    "extra, multilabel",
    [
        (["--variants", "h,aligned,phi:8"], False),
        (["--model", "gbdt", "--model-param", "max_iter=20", "--variants", "h,aligned"], False),
        (["--model", "sklearn.tree:DecisionTreeClassifier", "--model-param", "max_depth=3"], False),
        (["--task", "multilabel", "--variants", "h,avg"], True),
    ],
    ids=["logreg", "gbdt", "module:Class", "multilabel"],
)
def test_audit_labels_on_the_cluster_gives_the_local_numbers(tmp_path, extra, multilabel):
    args = [*labelled_runs(tmp_path, multilabel), "--pairs", "100", *extra]
    local = runner.invoke(app, [*args, "--jobs", "1"])
    dask = runner.invoke(app, [*args, "--scheduler", "local:2"])
    assert local.exit_code == 0 and dask.exit_code == 0, dask.output
    downstream = json.loads(local.stdout)["downstream"]
    assert json.loads(dask.stdout)["downstream"] == downstream
    assert downstream["task"] == ("multilabel" if multilabel else "classification")
    assert downstream["model"] == (extra[1] if extra[0] == "--model" else "logreg")
    h = downstream["variants"]["h"]
    assert h["churn"] is not None and (h.get("label_churn") is not None) == multilabel


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["--scheduler", "local:0"], "--scheduler: 'local:0': expected local:N"),
        (["--scheduler", "localhost"], "--scheduler: 'localhost': expected local:N"),
    ],
)
def test_bad_scheduler_values_are_one_line(tmp_path, sessions_file, argv, fragment):
    before = files_state(tmp_path)
    result = runner.invoke(app, ["pretrain", str(sessions_file), "--out", str(tmp_path / "r"), *argv])
    assert_bad_input(result, fragment, tmp_path, before)


def test_an_unreachable_scheduler_is_exit_2_and_touches_nothing(tmp_path, sessions_file, monkeypatch):
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT_S", 1)
    before = files_state(tmp_path)
    result = runner.invoke(
        app, ["pretrain", str(sessions_file), "--out", str(tmp_path / "r"), "--scheduler", "tcp://127.0.0.1:9"]
    )
    assert_bad_input(result, "--scheduler: cannot reach the Dask scheduler at tcp://127.0.0.1:9", tmp_path, before)


def test_scheduler_without_labels_is_refused_in_audit(tmp_path):
    before = files_state(tmp_path)
    result = runner.invoke(app, ["audit", str(tmp_path / "a.npy"), str(tmp_path / "b.npy"), "--scheduler", "local:1"])
    assert_bad_input(result, "--scheduler only apply with --labels", tmp_path, before)


def test_sigterm_to_the_client_cancels_the_tasks_and_the_same_command_resumes(tmp_path):
    import subprocess

    corpus = tmp_path / "big.txt"
    corpus.write_text(make_sessions(n_sequences=3000, n_items=200), encoding="utf-8")
    args = [
        sys.executable,
        "-m",
        "stabcli",
        "pretrain",
        str(corpus),
        "--out",
        str(tmp_path / "dask"),
        "--runs",
        "4",
        "--dim",
        "16",
        "--epochs",
        "10",
        "--scheduler",
        "local:2",
        "--format",
        "json",
    ]
    proc = start_process(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list((tmp_path / "dask").glob(".run-*/progress")):
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143, stderr
    assert stderr.strip().splitlines()[-1] == "interrupted; finished runs are kept"
    assert not (tmp_path / "dask" / "stabcli.lock").exists()
    rerun = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    pretrain(tmp_path / "local", corpus, TrainConfig(dim=16, window=3, negative=3, epochs=10), runs=4, jobs=2)
    assert run_bytes(tmp_path / "dask") == run_bytes(tmp_path / "local") and len(run_bytes(tmp_path / "local")) == 4
