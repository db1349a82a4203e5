"""Dask's distributed scheduler as a backend: connection, preflight, task mapping, errors.

Each test that starts a LocalCluster spends about a second on it; they share one cluster
where they can (module fixture)."""

from __future__ import annotations

import math
import os
import sys

import pytest

from stabcli import cluster
from stabcli.cluster import Cluster, Preflight, joblib_on, scheduler_address
from stabcli.errors import OptionError, UsageError

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
    assert scheduler_address("local:3") == "local:3"  # the option wins
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
    from stabcli.corpus import file_sha256

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


def test_a_missing_extra_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import fails as if not installed
    with pytest.raises(UsageError, match=r"pip install 'stabcli\[dask\]'"):
        with Cluster("local:1"):
            pass


def test_joblib_runs_on_the_cluster_inside_the_block():
    from joblib import Parallel, delayed

    with joblib_on("local:2"):  # (with one worker thread in all, joblib runs in-process)
        pids = set(Parallel(n_jobs=2)(delayed(_pid)(i) for i in range(4)))
    assert os.getpid() not in pids
    with joblib_on(None) as nothing:
        assert nothing is None
