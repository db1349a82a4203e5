"""Running stabcli's independent tasks on a Dask cluster (``--scheduler``; extra ``stabcli[dask]``).

stabcli does not schedule anything itself: each pretrain run (and each downstream fit) is
one task for Dask's distributed scheduler. Workers read the corpus and write the run set
through paths every worker sees (a shared filesystem); only the client, which holds the run
set's lock, records results in the manifest.

``--scheduler ADDRESS`` connects to a running scheduler (``tcp://host:8786``);
``--scheduler local:N`` starts a ``LocalCluster`` of N single-threaded worker processes on
this machine, for trying it out. ``STABCLI_SCHEDULER`` is the default for both commands.
"""

from __future__ import annotations

import logging
import os
import re
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from stabcli.errors import OptionError, UsageError, quote

if TYPE_CHECKING:
    from stabcli.training.trainers import RunResult, RunTask

ENV_VAR = "STABCLI_SCHEDULER"
INSTALL_HINT = "pip install 'stabcli[dask]'"
CONNECT_TIMEOUT_S = 10
_LOCAL_RE = re.compile(r"^local:(\d+)$")

T = TypeVar("T")
R = TypeVar("R")


def scheduler_address(option: str | None) -> str | None:
    """The scheduler to use: the ``--scheduler`` option, else ``STABCLI_SCHEDULER``, else None (local)."""
    value = option if option is not None else os.environ.get(ENV_VAR) or None
    if value is None:
        return None
    value = value.strip()
    if not value:
        raise OptionError("scheduler", "empty address")
    local = _LOCAL_RE.match(value)
    if value.startswith("local") and (local is None or not 1 <= int(local.group(1)) <= 256):
        raise OptionError("scheduler", f"{quote(value)}: expected local:N with N from 1 to 256 worker processes")
    if local is not None:
        most, why = local_worker_limit()
        if int(local.group(1)) > most:
            raise OptionError("scheduler", f"{quote(value)}: this machine has {why}; use local:N with N at most {most}")
    else:
        check_transport(value)
    return value


# a LocalCluster worker process (Python, numpy, gensim imported) needs about this much memory
LOCAL_WORKER_BYTES = 300 * 2**20


def local_worker_limit() -> tuple[int, str]:
    """(most worker processes ``local:N`` may start here, why): one per CPU this process may
    use, and no more than the available memory holds at about 300 MB each."""
    from stabcli.fs.resources import available_memory, human_bytes

    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    memory = available_memory()
    by_memory = max(1, memory // LOCAL_WORKER_BYTES) if memory is not None else cpus
    if by_memory < cpus:
        return int(by_memory), f"{human_bytes(memory or 0)} of available memory (about 300 MB per worker)"
    return cpus, f"{cpus} CPU(s) for this process"


def check_transport(address: str) -> None:
    """OptionError unless ``address`` is a plain TCP address (``tcp://host:port`` or
    ``host:port``): TLS needs certificates stabcli does not take, UCX and the others extra
    libraries; Dask failed on them with tracebacks."""
    scheme = address.split("://", 1)[0].lower() if "://" in address else "tcp"
    if scheme != "tcp":
        raise OptionError(
            "scheduler",
            f"{quote(address)}: stabcli connects to Dask schedulers over tcp:// (tcp://host:8786) or starts local:N; "
            f"{scheme}:// is not supported",
        )


def _host_port(address: str) -> tuple[str, int]:
    """(host, port) of a tcp address; port 8786 (Dask's) when none is given."""
    location = address.split("://", 1)[1] if "://" in address else address
    if location.startswith("["):  # [::1]:8786
        host, _, rest = location[1:].partition("]")
        port = rest.lstrip(":")
    else:
        host, _, port = location.rpartition(":") if location.count(":") == 1 else (location, "", "")
    if not host:
        raise OptionError("scheduler", f"{quote(address)}: expected tcp://HOST:PORT")
    if not port:
        return host, 8786
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise OptionError("scheduler", f"{quote(address)}: the port must be a number from 1 to 65535")
    return host, int(port)


# the first 8 bytes a Dask scheduler sends on a new connection: the length of its handshake
# message (little-endian uint64; a few hundred bytes). Anything else is another service.
_HANDSHAKE_MAX = 1 << 24


def probe_scheduler(address: str, deadline: float) -> None:
    """OptionError unless something at ``address`` answers like a Dask scheduler before
    ``deadline`` (``time.monotonic()``): a scheduler sends its handshake as soon as a client
    connects; an HTTP server, a silent port or a garbage server do not. Never more than the
    time left, never reads more than 8 bytes."""
    import socket
    import struct
    import time

    host, port = _host_port(address)

    def failed(reason: str) -> OptionError:
        return OptionError("scheduler", f"cannot reach the Dask scheduler at {address} ({reason})")

    left = max(0.1, deadline - time.monotonic())
    try:
        sock = socket.create_connection((host, port), timeout=left)
    except socket.gaierror as exc:
        raise failed(f"unknown host: {exc.strerror}") from None
    except TimeoutError:
        raise failed(f"no connection within {CONNECT_TIMEOUT_S} s") from None
    except OSError as exc:
        raise failed(exc.strerror or type(exc).__name__) from None
    with sock:
        head = b""
        try:
            while len(head) < 8:
                sock.settimeout(max(0.05, deadline - time.monotonic()))
                chunk = sock.recv(8 - len(head))
                if not chunk:
                    break
                head += chunk
        except TimeoutError:
            raise failed(
                f"connected, but nothing answered within {CONNECT_TIMEOUT_S} s; not a Dask scheduler "
                "(an HTTP server or another service?)"
            ) from None
        except OSError as exc:
            raise failed(exc.strerror or type(exc).__name__) from None
    if len(head) < 8:
        raise failed("it closed the connection; not a Dask scheduler")
    if head.startswith((b"HTTP", b"SSH-", b"220 ", b"+OK", b"-ERR")):
        raise failed(f"it answers like another service ({_shown_bytes(head)}…); not a Dask scheduler")
    (length,) = struct.unpack("<Q", head)
    if not 0 < length <= _HANDSHAKE_MAX:
        raise failed(f"it answered {_shown_bytes(head)}, which is not Dask's protocol; not a Dask scheduler")


def _shown_bytes(data: bytes) -> str:
    text = data.decode("ascii", errors="replace")
    return repr(text) if text.isprintable() else data.hex(" ")


def _client_within(distributed: Any, address: str, deadline: float) -> Any:
    """``distributed.Client(address)``, or OptionError when it does not connect before
    ``deadline``: Dask's own timeout does not cover a peer that stops answering mid-handshake.
    Whatever the peer sends, the failure is one message (a server answering garbage made
    Dask try to allocate exabytes)."""
    import threading
    import time

    box: dict[str, Any] = {}

    def connect() -> None:
        try:
            box["client"] = distributed.Client(address, timeout=f"{max(1.0, deadline - time.monotonic()):.1f}s")
        except BaseException as exc:  # a foreign server: any failure is "not a Dask scheduler"
            box["error"] = exc

    thread = threading.Thread(target=connect, name="stabcli-dask-connect", daemon=True)
    thread.start()
    thread.join(max(0.1, deadline - time.monotonic()) + 2.0)
    if thread.is_alive():
        raise OptionError(
            "scheduler",
            f"cannot reach the Dask scheduler at {address} (no Dask handshake within {CONNECT_TIMEOUT_S} s)",
        )
    if "error" in box:
        exc = box["error"]
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise OptionError("scheduler", f"cannot reach the Dask scheduler at {address} ({reason[:200]})")
    return box["client"]


def _distributed() -> Any:
    try:
        import distributed
    except ImportError:
        raise UsageError(f"--scheduler needs Dask's distributed scheduler: {INSTALL_HINT}") from None
    return distributed


def _quiet_logs() -> None:
    # distributed logs connection chatter and worker restarts at WARNING on stderr; stabcli's
    # stderr is one line per problem, so only errors that end the command are shown (by us)
    for name in ("distributed", "tornado", "asyncio", "bokeh"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def versions() -> dict[str, str]:
    """The versions whose mismatch between client and workers could change a run's result."""
    from importlib.metadata import version

    import numpy

    from stabcli import __version__

    found = {"stabcli": __version__, "numpy": numpy.__version__}
    try:
        found["gensim"] = version("gensim")
    except Exception:
        found["gensim"] = "not installed"
    return found


@dataclass
class Preflight:
    """What every worker must be able to do before runs are sent to it."""

    read: list[tuple[Path, str | None]]  # (path, sha256 or None) every worker reads
    write: list[Path]  # directories every worker writes into


def _worker_preflight(read: list[tuple[str, str | None]], write: list[str], expected: dict[str, str]) -> list[str]:
    """Runs on a worker: the problems it has with ``read``, ``write`` and the versions."""
    from stabcli.fs.atomic import file_sha256

    problems = []
    mine = versions()
    for name, wanted in expected.items():
        if mine.get(name) != wanted:
            problems.append(f"{name} {mine.get(name)} (client has {wanted})")
    for path, digest in read:
        if not os.path.isfile(path):
            problems.append(f"cannot read {path}")
        elif digest is not None and file_sha256(Path(path)) != digest:
            problems.append(f"{path} differs from the client's copy (sha256)")
    for directory in write:
        probe = Path(directory) / f".stabcli-preflight-{uuid.uuid4().hex}"
        try:
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            problems.append(f"cannot write into {directory} ({exc.strerror or exc})")
    return problems


def _warm_up() -> None:
    """Runs on a worker: import what a run needs before the first run arrives."""
    import stabcli.training.trainers  # noqa: F401


class Cluster:
    """A connection to a Dask scheduler (or a LocalCluster it started), used as a context manager."""

    def __init__(self, address: str):
        self.address = address
        self._cluster: Any = None
        self.client: Any = None

    def __enter__(self) -> Cluster:
        distributed = _distributed()
        _quiet_logs()
        local = _LOCAL_RE.match(self.address)
        try:
            if local:
                self._cluster = distributed.LocalCluster(
                    n_workers=int(local.group(1)),
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=":0",
                    silence_logs=logging.CRITICAL,
                )
                self.client = distributed.Client(self._cluster, timeout=f"{CONNECT_TIMEOUT_S}s")
            else:
                import time

                deadline = time.monotonic() + CONNECT_TIMEOUT_S  # the documented bound, whatever answers
                probe_scheduler(self.address, deadline)
                self.client = _client_within(distributed, self.address, deadline)
        except OptionError:  # the probe's or the deadline's own message: already one line
            self.__exit__(None, None, None)
            raise
        except (OSError, TimeoutError, ValueError) as exc:
            self.__exit__(None, None, None)
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise OptionError("scheduler", f"cannot reach the Dask scheduler at {self.address} ({reason})") from None
        # every worker imports the trainers (gensim: seconds) while the client prepares the run set
        for worker in self.workers():
            self.client.submit(
                _warm_up,
                pure=False,
                workers=[worker],
                allow_other_workers=False,
                key=f"stabcli-warm-{uuid.uuid4().hex}",
            )
        return self

    def __exit__(self, *exc: object) -> None:
        for closable in (self.client, self._cluster):
            if closable is not None:
                with suppress(Exception):
                    closable.close()
        self.client = self._cluster = None

    @property
    def dashboard_link(self) -> str | None:
        """The scheduler's dashboard, when it serves one (it needs bokeh)."""
        if self._cluster is not None:
            try:
                import bokeh  # type: ignore[import-not-found]  # noqa: F401 - a LocalCluster serves a dashboard only with bokeh
            except ImportError:
                return None
        try:
            link = self.client.dashboard_link
        except Exception:
            return None
        return link or None

    def workers(self) -> list[str]:
        return sorted(self.client.scheduler_info().get("workers", {}))

    def threads(self) -> int:
        """Worker threads in the whole cluster: how many tasks run at once."""
        return max(1, sum(self.client.nthreads().values()))

    def preflight(self, check: Preflight) -> None:
        """Run the preflight on every worker; UsageError naming the first worker with a problem."""
        if not self.workers():
            raise OptionError("scheduler", f"the Dask scheduler at {self.address} has no workers")
        read = [(str(path), digest) for path, digest in check.read]
        write = [str(path) for path in check.write]
        results = self.client.run(_worker_preflight, read, write, versions(), on_error="return")
        for worker, problems in sorted(results.items()):
            if isinstance(problems, BaseException):
                raise UsageError(f"Dask worker {worker}: preflight failed ({type(problems).__name__}: {problems})")
            if problems:
                raise UsageError(f"Dask worker {worker}: {'; '.join(problems)}")

    def map_unordered(self, function: Callable[[T], R], tasks: Iterable[T]) -> Iterator[R]:
        """``function(task)`` for every task on the cluster, yielded as they finish.

        Tasks are not pure (each writes its own directory), so Dask never deduplicates them;
        a task whose worker dies is rescheduled on another worker by the scheduler. When the
        caller stops early (an error, Ctrl-C, SIGTERM), the outstanding tasks are cancelled.
        """
        distributed = _distributed()
        futures = [self.client.submit(function, task, pure=False, key=f"stabcli-{uuid.uuid4().hex}") for task in tasks]
        try:
            for future in distributed.as_completed(futures):
                yield future.result()
        finally:
            pending = [f for f in futures if not f.done()]
            if pending:
                self.client.cancel(pending, force=True)


def run_on_worker(task: RunTask) -> RunResult:
    """Train one run on a Dask worker. When the scheduler retries a task whose worker died,
    the dead attempt's files are still in the task's partial directory (the same seed wrote
    them, but possibly only half): start from an empty directory."""
    import shutil

    from stabcli.training.trainers import execute

    if task.work.is_dir():
        for entry in task.work.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    return execute(task)


def pretrain_backend(cluster: Cluster) -> Callable[[Sequence[RunTask], int], Iterator[RunResult]]:
    """A ``stabcli.training.pretrain`` execution backend: every run is one task on ``cluster``.

    Before submitting, every worker proves it can read the corpus copy (by hash) and the
    user's corpus, write into the run set, and that it runs the client's stabcli, gensim and
    numpy. ``jobs`` is ignored: the cluster's worker threads decide the parallelism.
    """

    def backend(tasks: Sequence[RunTask], jobs: int) -> Iterator[RunResult]:
        if not tasks:
            return
        from stabcli.fs.atomic import file_sha256

        read: list[tuple[Path, str | None]] = []
        for path in {t.corpus_copy for t in tasks} | {t.corpus for t in tasks} | {t.keys_file for t in tasks}:
            if path is not None:
                read.append((path, file_sha256(path)))
        cluster.preflight(Preflight(read=sorted(read), write=sorted({t.work.parent for t in tasks})))
        yield from cluster.map_unordered(run_on_worker, tasks)

    return backend


@contextmanager
def training_backend(
    address: str, on_connect: Callable[[Cluster], None] | None = None
) -> Iterator[Callable[[Sequence[RunTask], int], Iterator[RunResult]]]:
    """The pretrain execution backend on ``address`` for the block, however many batches of
    runs it trains (pretrain's one, or a sweep's cells): the one place a command's cluster
    starts.

    A scheduler address is connected to at once, so a wrong address fails before anything
    is written. ``local:N`` starts its workers only when the first runs are ready to go,
    after every input and option was checked, and keeps them for the later batches; a block
    with nothing to train starts none. A missing ``stabcli[dask]`` is reported at once.
    """
    _distributed()
    with ExitStack() as stack:
        clusters: list[Cluster] = []

        def connect() -> Cluster:
            if not clusters:
                clusters.append(stack.enter_context(Cluster(address)))
                if on_connect is not None:
                    on_connect(clusters[0])
            return clusters[0]

        if not address.startswith("local:"):
            connect()

        def backend(tasks: Sequence[RunTask], jobs: int) -> Iterator[RunResult]:
            if tasks:
                yield from pretrain_backend(connect())(tasks, jobs)

        yield backend


@contextmanager
def joblib_on(address: str | None) -> Iterator[Cluster | None]:
    """Within the block, joblib's ``Parallel`` (the downstream fits) runs on the cluster."""
    if address is None:
        yield None
        return
    with Cluster(address) as cluster:
        from joblib import parallel_config

        with parallel_config(backend="dask"):
            yield cluster
