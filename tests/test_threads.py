"""The worker pool of the large passes (stabcli/measure/threads.py) and what the audit's
speed rests on: results in order and independent of the worker count, BLAS on one thread
inside, the configured thread count respected, scikit-learn not imported without labels."""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import ortho_group
from threadpoolctl import threadpool_info, threadpool_limits

from stabcli.inputs.embeddings import Embedding
from stabcli.measure import align, neighbours, numerics, rowpass, threads
from stabcli.measure import anchor as a
from stabcli.measure import metrics as m
from stabcli.measure.align import generalized_procrustes


def blas_threads() -> int:
    return max(lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas")


def test_ordered_map_keeps_the_items_order_whatever_finishes_first():
    def slow_first(i):
        time.sleep(0.05 if i == 0 else 0.0)
        return i * i

    assert list(threads.ordered_map(slow_first, range(9), count=3)) == [i * i for i in range(9)]
    assert list(threads.ordered_map(slow_first, range(9), count=1)) == [i * i for i in range(9)]
    assert list(threads.ordered_map(slow_first, [], count=2)) == []


def test_ordered_map_runs_blas_on_one_thread_and_restores_it():
    before = blas_threads()
    inside = list(threads.ordered_map(lambda _: blas_threads(), range(4), count=2))
    assert inside == [1, 1, 1, 1]
    assert blas_threads() == before


def test_ordered_map_uses_several_threads():
    seen = set()
    barrier = threading.Barrier(2, timeout=30)

    def meet(i):
        seen.add(threading.get_ident())
        barrier.wait()  # would time out if the two items did not run at the same time
        return i

    assert list(threads.ordered_map(meet, range(2), count=2)) == [0, 1]
    assert len(seen) == 2


def test_ordered_map_raises_the_first_failing_item_and_stops():
    started = []

    def fail_at_three(i):
        started.append(i)
        if i == 3:
            raise ValueError(f"item {i}")
        return i

    got = []
    with pytest.raises(ValueError, match="item 3"):
        for value in threads.ordered_map(fail_at_three, range(1000), count=2):
            got.append(value)
    assert got == [0, 1, 2]
    assert len(started) < 20  # at most two items per thread in flight: the rest never started


def test_ordered_map_keeps_at_most_two_items_per_thread_in_flight():
    running, peak, lock = [0], [0], threading.Lock()
    produced = []

    def items():
        for i in range(40):
            produced.append(i)
            yield i

    def work(i):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.002)
        with lock:
            running[0] -= 1
        return i

    for i, value in enumerate(threads.ordered_map(work, items(), count=2)):
        assert value == i
        assert len(produced) - i <= 4  # taken from the iterator but not yet given back
    assert peak[0] <= 2


def test_ordered_map_takes_fewer_threads_when_the_items_are_large(monkeypatch):
    """Items of (R·d)² partial sums (R = 20 runs of 300 dims: 288 MB each) must not be
    computed two per thread on every core at once."""
    monkeypatch.setattr(threads, "IN_FLIGHT_BYTES", 1000)
    seen = set()

    def where(i):
        seen.add(threading.get_ident())
        return i

    assert list(threads.ordered_map(where, range(6), count=4, item_bytes=300)) == list(range(6))
    assert len(seen) == 1  # 2 · 300 · threads ≤ 1000: one thread
    seen.clear()
    assert list(threads.ordered_map(where, range(50), count=4, item_bytes=100)) == list(range(50))
    assert 1 <= len(seen) <= 4  # five threads' worth of room, capped at the four asked


@pytest.mark.parametrize(
    "env, want",
    [({"OPENBLAS_NUM_THREADS": "1"}, 1), ({"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": ""}, 1), ({}, None)],
)
def test_workers_follow_the_configured_blas_threads(env, want):
    code = (
        "import os, numpy; from stabcli.measure import threads; print(threads.workers(), len(os.sched_getaffinity(0)))"
    )
    environment = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    environment.update({k: v for k, v in env.items() if v})
    out = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True, check=True)
    workers, cores = map(int, out.stdout.split())
    assert workers == (want if want is not None else cores)


def test_workers_inside_a_one_thread_block_are_the_count_from_before():
    outside = threads.workers()
    with threads.one_blas_thread():
        assert threads.workers() == outside


def runs_of(seed=0, n=300, d=5, r=4, dtype=np.float32):
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((n, d)) + 0.3
    return [
        ((base + 0.4 * rng.standard_normal((n, d))) @ ortho_group.rvs(d, random_state=seed + i)).astype(dtype)
        for i in range(r)
    ]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_row_passes_give_the_same_bits_with_one_or_three_workers(monkeypatch, dtype):
    monkeypatch.setattr(numerics, "CACHE_ELEMENTS", 4 * 5 * 11)  # 11 rows per chunk: 28 chunks
    runs = runs_of(dtype=dtype)
    if dtype == np.float64:
        runs[2][:40] *= 1e300  # the common scale is active
    results = []
    for count in (1, 3):
        monkeypatch.setattr(threads, "workers", lambda count=count: count)
        first = rowpass.first_pass(runs)
        rotations, _ = generalized_procrustes(first.grams)
        second = rowpass.second_pass(runs, first.grams, rotations)
        results.append(
            [first.grams.G, first.grams.means, first.unit_joint, first.raw.per_key_variance, first.raw.per_dim]
            + [second.aligned.per_key_variance, second.aligned.per_dim, second.energy, second.norm_products]
        )
    for one, three in zip(*results, strict=True):
        assert np.array_equal(one, three)
    if dtype == np.float64:
        assert first.grams.scale > 1 and first.grams.peaks is not None


def test_neighbours_are_the_same_with_one_or_three_workers(monkeypatch):
    runs = runs_of(3, n=500, r=5)
    queries = np.arange(0, 500, 7)
    got = []
    for count in (1, 3):
        monkeypatch.setattr(threads, "workers", lambda count=count: count)
        got.append(neighbours.knn_overlap_by_pair(runs, queries, 6))
    assert np.array_equal(*got)


def test_the_left_basis_is_computed_once_per_run_and_equals_the_direct_one(monkeypatch):
    runs = runs_of(4, dtype=np.float64)
    grams = m.gram_blocks(runs)
    calls = []
    direct = m._left_basis
    monkeypatch.setattr(m, "_left_basis", lambda gram: calls.append(1) or direct(gram))
    values = m.pairwise_values(grams, m.eigenspace_overlap)
    weighted = a.weighted_overlap_pairs(grams)
    assert len(calls) <= 2 * len(runs)  # one basis per run (and divisor), not one per pair
    for r in range(len(runs)):
        for c in {key[1] for key in grams._bases if key[0] == r}:
            v, inv = grams.left_basis(r, c)
            want_v, want_inv = direct(grams.G[r, r] / c)
            assert np.array_equal(v, want_v) and np.array_equal(inv, want_inv)
    fresh = m.gram_blocks(runs)  # an uncached Grams gives the same numbers
    monkeypatch.setattr(m, "_left_basis", direct)
    assert np.array_equal(values, m.pairwise_values(fresh, m.eigenspace_overlap))
    assert np.array_equal(weighted, a.weighted_overlap_pairs(m.gram_blocks(runs)))


def test_an_audit_without_labels_does_not_import_scikit_learn(tmp_path):
    """scikit-learn takes about a second to import; an audit of the representation alone
    never needs it."""
    from stabcli.inputs.embeddings import write_embedding

    paths = []
    for i, h in enumerate(runs_of(5, n=60)):
        path = tmp_path / f"r{i}.txt"
        write_embedding(path, [f"k{j}" for j in range(60)], h)
        paths.append(str(path))
    code = (
        "import sys, stabcli; stabcli.audit(sys.argv[1:]); "
        "print(sorted(m for m in sys.modules if m == 'sklearn' or m.startswith('sklearn.')))"
    )
    out = subprocess.run([sys.executable, "-c", code, *paths], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def counting_with_ctrl_c(function, at):
    """``function`` counting its calls, from any thread; the ``at``-th call sends SIGINT to
    the main thread (what Ctrl-C does: the main thread raises KeyboardInterrupt). Each call
    sleeps 2 ms without the GIL, as a chunk of a large run computes in numpy."""
    calls, lock, main = [0], threading.Lock(), threading.main_thread().ident

    def counted(*args):
        with lock:
            calls[0] += 1
            if calls[0] == at:
                signal.pthread_kill(main, signal.SIGINT)
        time.sleep(0.002)
        return function(*args)

    return counted, calls


def neighbour_search(monkeypatch, runs):
    monkeypatch.setattr(neighbours, "SCORE_ELEMENTS", 20 * 10)  # 20 queries: 10 keys per chunk
    counted, calls = counting_with_ctrl_c(neighbours.unit_rows, at=10)  # once per chunk (and for the queries)
    monkeypatch.setattr(neighbours, "unit_rows", counted)
    return lambda: neighbours.knn_overlap_by_pair(runs, np.arange(0, 2000, 100), 3), calls


def finite_check(monkeypatch, runs):
    monkeypatch.setattr(align, "FINITE_CHECK_ROWS", 10)
    counted, calls = counting_with_ctrl_c(align.require_finite, at=10)
    monkeypatch.setattr(align, "require_finite", counted)
    keys = [f"k{i}" for i in range(2000)]
    embeddings = [Embedding(keys, h, Path(f"run-{r}.npy")) for r, h in enumerate(runs)]
    return lambda: list(threads.ordered_map(lambda e: align.matched_vectors(e, None, keys), embeddings)), calls


def run_peaks(monkeypatch, runs):
    monkeypatch.setattr(numerics, "CHUNK_ELEMENTS", 5 * 10)  # 10 rows per chunk
    counted, calls = counting_with_ctrl_c(m.peak, at=10)
    monkeypatch.setattr(m, "peak", counted)
    return lambda: m.run_peaks(runs), calls


@pytest.mark.parametrize("work", [neighbour_search, finite_check, run_peaks])
def test_ctrl_c_stops_the_workers_at_their_next_chunk(monkeypatch, work):
    """A run per worker takes long on a large run set (a neighbour search of a million keys:
    seconds): on Ctrl-C or SIGTERM the workers stop at their next chunk of rows, they do not
    finish their runs while the interrupted command waits for them."""
    monkeypatch.setattr(threads, "workers", lambda: 2)
    call, calls = work(monkeypatch, runs_of(7, n=2000, r=4))  # 200 chunks per run, 2 runs running
    # Python's own handler, also when the suite was started with SIGINT ignored (as CI does)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            call()
            time.sleep(5)  # not reached: the signal arrives during the call
    finally:
        signal.signal(signal.SIGINT, previous)
    assert calls[0] < 10 + 20  # each worker stopped within a chunk or so, not 2 × 200 chunks


def test_audits_in_two_threads_and_under_a_users_limit_give_the_bits_of_one_audit(tmp_path):
    """The Python API from several threads at once: the BLAS setting is process-wide, so the
    audits share it; each report is the one an audit alone gives, and the setting is the
    user's again afterwards."""
    import stabcli
    from stabcli.inputs.embeddings import write_embedding

    paths = []
    for i, h in enumerate(runs_of(8, n=400, r=4)):
        paths.append(tmp_path / f"r{i}.txt")
        write_embedding(paths[-1], [f"k{j}" for j in range(400)], h)

    def report():
        return stabcli.audit(paths).to_dict()

    alone, before = report(), blas_threads()
    got = []
    workers = [threading.Thread(target=lambda: got.append(report())) for _ in range(2)]
    for thread in workers:
        thread.start()
    got.append(report())  # and one in the main thread meanwhile
    for thread in workers:
        thread.join()
    assert got == [alone] * 3
    assert blas_threads() == before
    for limit in (1, 2):
        with threadpool_limits(limit, user_api="blas"):
            assert report() == alone
            assert blas_threads() == limit


def test_every_decomposition_of_an_audit_runs_on_one_blas_thread(monkeypatch, tmp_path):
    """#26: a 64-dim SVD split over OpenBLAS's threads took 26–33 ms on a loaded 2-core
    machine against well under 1 ms on one thread. Every SVD, eigendecomposition and
    Procrustes solve of an audit (here of runs with equal norms, so the identical-runs check
    solves a Procrustes problem for every pair) must run with BLAS on one thread."""
    import stabcli
    from stabcli.inputs.embeddings import write_embedding
    from stabcli.measure import align

    paths = []
    for i, h in enumerate(runs_of(6, n=400, d=8, r=4, dtype=np.float64)):
        unit = h / np.linalg.norm(h, axis=1, keepdims=True)  # equal Frobenius norms
        path = tmp_path / f"r{i}.txt"
        write_embedding(path, [f"k{j}" for j in range(len(unit))], unit)
        paths.append(path)
    seen = []

    def recording(function):
        def wrapper(*args, **kwargs):
            seen.append((function.__name__, blas_threads()))
            return function(*args, **kwargs)

        return wrapper

    for name in ("svd", "eigh", "eigvalsh", "qr"):
        monkeypatch.setattr(np.linalg, name, recording(getattr(np.linalg, name)))
    monkeypatch.setattr(align, "orthogonal_procrustes", recording(align.orthogonal_procrustes))
    stabcli.audit(paths)
    assert {name for name, _ in seen} >= {"svd", "eigh", "orthogonal_procrustes"}
    assert [entry for entry in seen if entry[1] != 1] == []


def test_drift_pair_measures_are_the_same_with_one_or_three_workers(monkeypatch):
    from stabcli.measure import drift_stats

    monkeypatch.setattr(numerics, "CACHE_ELEMENTS", 4 * 5 * 13)  # 13 rows per chunk
    runs = runs_of(8, n=200, r=4)
    got = []
    for count in (1, 3):
        monkeypatch.setattr(threads, "workers", lambda count=count: count)
        got.append(drift_stats.pair_measures(runs)[0])
    for name in drift_stats.MEASURES:
        assert np.array_equal(got[0][name], got[1][name])


def test_per_key_displacement_runs_on_the_pool_with_the_same_bits(monkeypatch):
    """``--per-key``: 45 run pairs × n × d² products (about 10 s of CPU at 200,000 keys × 10
    runs × 64 dims), row chunks each writing their own keys, on the workers."""
    monkeypatch.setattr(numerics, "CHUNK_ELEMENTS", 4 * 5 * 11)  # 11 rows per chunk: 28 chunks
    pools = []

    class Recorded(threads.ThreadPoolExecutor):
        def __init__(self, *args, **kwargs):
            pools.append(args)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(threads, "ThreadPoolExecutor", Recorded)
    runs = runs_of(9)
    grams = m.gram_blocks(runs)
    got = []
    for count in (1, 3):
        monkeypatch.setattr(threads, "workers", lambda count=count: count)
        got.append(m.per_key_displacement(runs, grams))
    assert np.array_equal(*got)
    assert pools  # three workers: a pool
