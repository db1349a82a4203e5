"""Processes stabcli starts, and how they all stop when stabcli stops.

* Worker processes and user scripts get a parent-death signal on Linux
  (``prctl(PR_SET_PDEATHSIG, SIGKILL)``), so even a ``kill -9`` of stabcli ends them.
* A user script runs in its own session (process group); stabcli kills the whole group
  when the script ends, times out, or stabcli is interrupted, so the script's children go too.
* A descendant can leave that group (``setsid``, a double-forked daemon) and has no
  parent-death signal (a fork clears it), so each script also gets a token in its
  environment (``STABCLI_SCRIPT``), which every descendant inherits: when the script ends,
  every process carrying its token is killed too (Linux, through ``/proc``). They also
  carry ``STABCLI_RUN_SET``: the next pretrain of that run set kills what a ``kill -9`` of
  stabcli left running.
* ``live_groups`` remembers the groups of scripts running in this process, so the
  orchestrator can kill them from the main thread on Ctrl-C / SIGTERM.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import secrets
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

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
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


SCRIPT_TOKEN = "STABCLI_SCRIPT"  # environment variable naming the script a process descends from


def new_script_token() -> str:
    return secrets.token_hex(8)


RUN_SET_VAR = "STABCLI_RUN_SET"  # environment variable naming the run set a script process works for


def _marked(token: str, var: str = SCRIPT_TOKEN) -> list[int]:
    """Processes (other than this one) whose environment carries ``var=token``."""
    needle, found = f"{var}={token}".encode(), []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                environ = fh.read()
        except OSError:  # gone, or another user's
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry))
    return found


def kill_marked(token: str, rounds: int = 20, var: str = SCRIPT_TOKEN) -> None:
    """SIGKILL every process descended from the script started with ``token``, including
    those that left its process group; repeated while a scan still finds one (a daemon
    may fork between the scan and the kill)."""
    for _ in range(rounds):
        pids = _marked(token, var)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)


def kill_orphans_of(run_set: str) -> None:
    """SIGKILL what is left of the scripts of an earlier pretrain of ``run_set`` (a resolved
    path) that was killed too hard to stop them (``kill -9``): call it holding the run set's
    lock, when no live pretrain works for it."""
    kill_marked(run_set, var=RUN_SET_VAR)


def kill_script(pgid: int, token: str) -> None:
    """SIGKILL a script's process group and every process that carries its token."""
    kill_group(pgid)
    kill_marked(token)


def cpu_count() -> int:
    """CPUs this process may use: the affinity mask on Linux, ``os.cpu_count()`` elsewhere."""
    if hasattr(os, "sched_getaffinity"):
        return max(len(os.sched_getaffinity(0)), 1)
    return os.cpu_count() or 1


class _LiveGroups:
    """Process groups (and tokens) of scripts this process runs right now."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: dict[int, str | None] = {}

    def add(self, pgid: int, token: str | None = None) -> None:
        with self._lock:
            self._groups[pgid] = token

    def discard(self, pgid: int) -> None:
        with self._lock:
            self._groups.pop(pgid, None)

    def kill_all(self) -> None:
        with self._lock:
            groups = list(self._groups.items())
        for pgid, token in groups:
            kill_group(pgid)
            if token:
                kill_marked(token)


live_groups = _LiveGroups()


def kill_pool_workers(executor: Any) -> None:
    """SIGKILL every worker process of a ``ProcessPoolExecutor`` (it has no public way
    before Python 3.14's ``kill_workers``)."""
    kill = getattr(executor, "kill_workers", None)
    if kill is not None:
        kill()
        return
    for process in list((getattr(executor, "_processes", None) or {}).values()):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            process.kill()
