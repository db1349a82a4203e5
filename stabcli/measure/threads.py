"""BLAS threads: one for the small d×d work, all of them for the large products.

An audit runs hundreds of d×d decompositions and products (Procrustes and generalized
Procrustes, eigenspace bases, CKA and PIP blocks, the spectral metrics' bases). OpenBLAS
splits even a 64×64 SVD across its threads, and on a busy machine each call then waits
for every thread to be scheduled: 26–33 ms per 64-dim SVD on a loaded 2-core machine
against well under 1 ms on one thread. ``one_blas_thread`` runs a block of such work on
one thread (threadpoolctl, which scikit-learn installs) and restores the previous
setting; the n×d products (the cross-Gram blocks, neighbour search, chunked passes) run
outside it with every thread.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

_lock = threading.Lock()
_controller: Any = None
_depth = 0  # nested blocks: only the outermost changes and restores the setting

F = TypeVar("F", bound=Callable[..., Any])


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
