"""Threads: one BLAS thread for the small d×d work, a pool of workers for the large passes.

An audit runs hundreds of d×d decompositions and products (Procrustes and generalized
Procrustes, eigenspace bases, CKA and PIP blocks, the spectral metrics' bases). OpenBLAS
splits even a 64×64 SVD across its threads, and on a busy machine each call then waits
for every thread to be scheduled: 26–33 ms per 64-dim SVD on a loaded 2-core machine
against well under 1 ms on one thread. ``one_blas_thread`` runs a block of such work on
one thread (threadpoolctl, which scikit-learn installs) and restores the previous
setting.

The large n×d work (the audit's row passes and neighbour search) is split into
independent pieces, row chunks or runs, that ``ordered_map`` hands to ``workers()``
threads, each calling BLAS on one thread. Every core is busy with the products and with
the elementwise work between them, which OpenBLAS's own threads leave on one core, and no
thread waits for another: OpenBLAS's threads meet at a barrier inside every product, so on
a busy machine each product lasts as long as its most delayed thread. The results come
back in the pieces' order and the caller combines them in that order, so the numbers do
not depend on the number of workers. A piece that takes long (a run's neighbour search)
calls ``stop_point`` between its chunks: when the map stops (an error, Ctrl-C, SIGTERM),
its workers stop there instead of finishing their pieces while the command waits.
"""

from __future__ import annotations

import functools
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

_lock = threading.Lock()
_controller: Any = None
_depth = 0  # nested blocks: only the outermost changes and restores the setting
_configured: int | None = None  # the BLAS thread count outside our blocks, when last seen
IN_FLIGHT_BYTES = 1 << 30  # ordered_map: memory of the items in flight, at most (when they say theirs)
_worker = threading.local()  # in a worker of ``ordered_map``: ``stop``, the map's stop event

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")
R = TypeVar("R")


def _threadpools() -> Any:
    global _controller
    if _controller is None:
        from threadpoolctl import ThreadpoolController

        _controller = ThreadpoolController()  # inspects the loaded BLAS libraries once
    return _controller


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """Run the block with BLAS and LAPACK on a single thread (small d×d work)."""
    global _depth
    with _lock:
        outer = _depth == 0
        _depth += 1
    try:
        if outer:
            _configured_blas_threads()  # what ``workers()`` reads inside the block
            with _threadpools().limit(limits=1, user_api="blas"):
                yield
        else:
            yield
    finally:
        with _lock:
            _depth -= 1


def small_linalg(function: F) -> F:
    """Decorator: ``function`` only does d×d linear algebra; run it on one BLAS thread."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with one_blas_thread():
            return function(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def workers() -> int:
    """Worker threads for the large passes: the BLAS thread count as configured
    (``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS``, threadpoolctl; by default every core),
    at most the cores this process may run on, at least 1. Inside ``one_blas_thread`` the
    count from before the block."""
    with _lock:
        if _depth == 0:
            _configured_blas_threads()
        configured = _configured
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(configured or cores, cores))


def _configured_blas_threads() -> None:
    """Record the BLAS libraries' current thread count (called outside our own limits)."""
    global _configured
    counts = [int(info["num_threads"]) for info in _threadpools().info() if info.get("user_api") == "blas"]
    _configured = max(counts) if counts else None


def ordered_map(
    function: Callable[[T], R], items: Iterable[T], count: int | None = None, item_bytes: int = 0
) -> Iterator[R]:
    """``function(item)`` for every item, in the items' order, computed on ``count`` threads
    (default ``workers()``) with BLAS on one thread; at most two items per thread are in
    flight, so memory stays bounded however many items there are. ``item_bytes``, the
    memory one item's work and result take, caps the threads so that the items in flight
    stay within ``IN_FLIGHT_BYTES`` (one thread at least). An exception in one item stops
    the map and is raised here; items not started are dropped."""
    count = count or workers()
    if item_bytes > 0:
        count = max(1, min(count, IN_FLIGHT_BYTES // (2 * item_bytes)))
    with one_blas_thread():
        if count == 1:
            yield from map(function, items)
            return
        pending: deque[Future[R]] = deque()
        stop = threading.Event()

        def work(item: T) -> R:
            _worker.stop = stop  # this thread is the map's (the pool is)
            return function(item)

        with ThreadPoolExecutor(count, thread_name_prefix="stabcli-pass") as pool:
            try:
                for item in items:
                    pending.append(pool.submit(work, item))
                    if len(pending) >= 2 * count:
                        yield pending.popleft().result()
                while pending:
                    yield pending.popleft().result()
            finally:
                stop.set()  # the running pieces stop at their next stop_point
                for future in pending:
                    future.cancel()


class Stopped(Exception):
    """Raised by ``stop_point`` in a worker whose map has stopped (its result is dropped)."""


def stop_point() -> None:
    """Called between the chunks of a long piece of work: in a worker of an ``ordered_map``
    that has stopped (an error, Ctrl-C, SIGTERM in the thread that reads it), raise
    ``Stopped``. Elsewhere nothing: the main thread gets KeyboardInterrupt itself."""
    stop = getattr(_worker, "stop", None)
    if stop is not None and stop.is_set():
        raise Stopped
