"""Processes stabcli starts, and how they all stop when stabcli stops.

* Worker processes and user scripts get a parent-death signal on Linux
  (``prctl(PR_SET_PDEATHSIG, SIGKILL)``), so even a ``kill -9`` of stabcli ends them.
* A user script runs in its own session (process group); stabcli kills the whole group
  when the script ends, times out, or stabcli is interrupted, so the script's children go too.
* ``live_groups`` remembers the groups of scripts running in this process, so the
  orchestrator can kill them from the main thread on Ctrl-C / SIGTERM.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time
from typing import Any, Callable

PR_SET_PDEATHSIG = 1


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _load_prctl()  # loaded once in the parent: a forked child only calls it


def set_parent_death_signal(sig: int = signal.SIGKILL) -> bool:
    """Ask Linux to send ``sig`` to this process when its parent dies (no-op elsewhere)."""
    if _PRCTL is None:
        return False
    return _PRCTL(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0


def watch_parent(interval: float = 1.0) -> None:
    """Portable fallback of the parent-death signal: a daemon thread that ends this process
    within ``interval`` seconds of its parent's death (the process is re-parented then)."""
    parent = os.getppid()

    def loop() -> None:
        while True:
            time.sleep(interval)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=loop, name="stabcli-watch-parent", daemon=True).start()


def worker_init() -> None:
    """Initializer of stabcli's worker processes: die with the parent; leave Ctrl-C to it
    (a terminal sends SIGINT to the whole group; the parent stops the pool)."""
    set_parent_death_signal()
    watch_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def script_preexec() -> None:
    """Runs in a user script's child between fork and exec (the child is already in its
    own session through ``start_new_session``)."""
    set_parent_death_signal()


def kill_group(pgid: int) -> None:
    """SIGKILL process group ``pgid``; quiet when it is already gone."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def cpu_count() -> int:
    """CPUs this process may use: the affinity mask on Linux, ``os.cpu_count()`` elsewhere."""
    if hasattr(os, "sched_getaffinity"):
        return max(len(os.sched_getaffinity(0)), 1)
    return os.cpu_count() or 1


class _LiveGroups:
    """Process groups of scripts this process runs right now."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: set[int] = set()

    def add(self, pgid: int) -> None:
        with self._lock:
            self._groups.add(pgid)

    def discard(self, pgid: int) -> None:
        with self._lock:
            self._groups.discard(pgid)

    def kill_all(self) -> None:
        with self._lock:
            groups = list(self._groups)
        for pgid in groups:
            kill_group(pgid)


live_groups = _LiveGroups()


def kill_pool_workers(executor: Any) -> None:
    """SIGKILL every worker process of a ``ProcessPoolExecutor`` (it has no public way
    before Python 3.14's ``kill_workers``)."""
    kill = getattr(executor, "kill_workers", None)
    if kill is not None:
        kill()
        return
    for process in list((getattr(executor, "_processes", None) or {}).values()):
        try:
            process.kill()
        except (OSError, ValueError, AttributeError):
            pass
