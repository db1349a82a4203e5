"""Orchestrate N independent runs of an embedding into a run set (``stabcli pretrain``).

Run ``i`` uses seed ``seed + i``. Inside a run gensim uses ``workers=1``, which makes it
bitwise reproducible; runs go in parallel across processes, so the result does not depend
on ``jobs``. This module plans the runs, hands them to an execution backend (a function
that takes the run tasks and yields their results as they finish: local processes here, a
cluster elsewhere) and records each result; the trainers themselves live in
:mod:`stabcli.trainers`, the run-set layout in :mod:`stabcli.runset`.
"""

from __future__ import annotations

import ast
import inspect
import multiprocessing
import threading
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from stabcli import __version__
from stabcli.corpus import Corpus, CorpusOptions, file_sha256, read_corpus
from stabcli.errors import InputError, UsageError
from stabcli.processes import cpu_count, kill_pool_workers, live_groups, worker_init
from stabcli.runset import KEYS, PROGRESS, RunSetWriter, complete_runs, read_losses, run_name
from stabcli.trainers import PLACEHOLDERS, RunResult, RunTask, execute, script_argv

__all__ = ["MODELS", "VARY", "PLACEHOLDERS", "TrainConfig", "RunResult", "RunTask", "Progress", "PretrainResult",
           "Backend", "local_backend", "parse_params", "script_argv", "pretrain"]

MODELS = ("word2vec", "doc2vec")
VARY = ("seed", "shuffle", "bootstrap")
# Arguments stabcli sets itself; --param may not override them.
_RESERVED = {"sentences", "corpus_iterable", "corpus_file", "documents", "workers", "seed", "callbacks",
             "vector_size", "window", "negative", "epochs", "sg", "dm", "min_count", "compute_loss"}


@dataclass(frozen=True)
class TrainConfig:
    """Everything that determines a run's result; stored in the manifest and compared on resume."""

    model: str = "word2vec"
    dim: int = 32
    window: int = 3
    negative: int = 3
    epochs: int = 10
    sg: bool = True
    min_count: int = 1
    vary: str = "seed"
    params: dict[str, Any] = field(default_factory=dict)
    script: str | None = None
    checkpoints: bool = False

    def identity(self) -> dict[str, Any]:
        if self.script is not None:
            return {"model": "script", "script": self.script}
        return asdict(self)


@dataclass
class Progress:
    runs_total: int
    runs_done: int
    epochs_total: int
    epochs_done: int


@dataclass
class PretrainResult:
    root: Path
    runs: list[RunResult]
    keys: int | None

    @property
    def failed(self) -> list[RunResult]:
        return [r for r in self.runs if r.status == "failed"]


def parse_params(model: str, pairs: Iterable[str]) -> dict[str, Any]:
    """``key=value`` strings → gensim keyword arguments, validated against the model's signature.

    Values are Python literals where they parse (``1e-3``, ``True``, ``[1, 2]``), else strings.
    """
    from gensim.models import Doc2Vec, Word2Vec

    cls = Doc2Vec if model == "doc2vec" else Word2Vec
    accepted = set(inspect.signature(cls.__init__).parameters) - {"self", "kwargs", "dm_mean", "dm_concat"}
    if cls is Doc2Vec:  # Doc2Vec forwards **kwargs to Word2Vec
        accepted |= set(inspect.signature(Word2Vec.__init__).parameters) | {"dm_mean", "dm_concat"}
    params: dict[str, Any] = {}
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        name = name.strip()
        if not sep or not name:
            raise UsageError(f"--param {pair!r}: expected key=value")
        if name in _RESERVED:
            raise UsageError(f"--param {name}: set by stabcli itself; use its own option instead")
        if name not in accepted or name in {"self", "kwargs"}:
            raise UsageError(f"--param {name}: not an argument of gensim {cls.__name__}")
        try:
            params[name] = ast.literal_eval(raw.strip())
        except (ValueError, SyntaxError):
            params[name] = raw.strip()
    return params


# ---------------------------------------------------------------- execution backends

Backend = Callable[[Sequence[RunTask], int], Iterator[RunResult]]
"""Runs tasks with up to ``jobs`` at a time and yields each result as it finishes. When the
caller stops iterating (an error, Ctrl-C, SIGTERM), the backend must stop every process it
started before the generator closes. It must not publish runs or touch the manifest."""


def local_backend(tasks: Sequence[RunTask], jobs: int) -> Iterator[RunResult]:
    """Runs on this machine: in this process for one job, else gensim runs in worker
    processes (killed if we stop early, and by the kernel if we die) and scripts in
    threads of this process (each script in its own process group, killed if we stop)."""
    if not tasks:
        return
    if jobs <= 1 or len(tasks) == 1:
        try:
            for task in tasks:
                yield execute(task)
        finally:
            live_groups.kill_all()
        return
    executor: Executor
    if tasks[0].trainer == "script":
        executor = ThreadPoolExecutor(max_workers=min(jobs, len(tasks)))
    else:
        executor = ProcessPoolExecutor(max_workers=min(jobs, len(tasks)), mp_context=multiprocessing.get_context("spawn"),
                                       initializer=worker_init)
    finished = False
    try:
        pending: set[Future] = {executor.submit(execute, task) for task in tasks}
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                yield future.result()
        finished = True
    finally:
        if not finished:
            live_groups.kill_all()
            if isinstance(executor, ProcessPoolExecutor):
                kill_pool_workers(executor)
        executor.shutdown(wait=True, cancel_futures=True)


# ---------------------------------------------------------------- orchestration


def pretrain(
    out: str | Path,
    corpus_path: str | Path | None,
    config: TrainConfig,
    *,
    runs: int = 10,
    seed: int = 0,
    jobs: int | None = None,
    force: bool = False,
    corpus_options: CorpusOptions = CorpusOptions(),
    timeout: float | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    on_run: Callable[[RunResult], None] | None = None,
    backend: Backend = local_backend,
) -> PretrainResult:
    """Train ``runs`` runs of ``config`` on ``corpus_path`` into the run set ``out``.

    Complete runs of an earlier pretrain with the same configuration are kept; a different
    configuration raises ``RunSetError`` unless ``force`` (which removes the old runs and
    every other file stabcli wrote there, and nothing else).

    Parameters
    ----------
    out : run set directory (created if missing).
    corpus_path : training corpus; optional in script mode (fills ``{corpus}``).
    config : the model configuration, or a script template in ``config.script``.
    runs, seed : run ``i`` uses seed ``seed + i``.
    jobs : parallel runs (default: available cores).
    on_progress, on_run : callbacks for progress polling and finished runs.
    backend : where the runs execute (default: this machine, see :func:`local_backend`).
    """
    root = Path(out)
    _validate(config, runs, seed, timeout, corpus_path)
    jobs = jobs or cpu_count()
    corpus: Corpus | None = None
    vocabulary: list[str] = []
    corpus_info = None
    if corpus_path is not None:
        corpus = read_corpus(corpus_path, config.model, corpus_options)
        if config.script is None:
            vocabulary = corpus.vocabulary(config.min_count)
            if len(vocabulary) < 2:
                raise InputError(f"{corpus_path}: only {len(vocabulary)} distinct token(s) occur at least --min-count "
                                 f"{config.min_count} time(s); an embedding needs at least 2")
        corpus_info = {
            "path": str(Path(corpus_path).resolve()),
            "sha256": file_sha256(Path(corpus_path)),
            "format": corpus.format,
            "options": asdict(corpus_options),
            "sequences": len(corpus.sequences),
            "tokens": corpus.n_tokens,
        }
    identity = {"config": config.identity(), "corpus_sha256": corpus_info["sha256"] if corpus_info else None, "seed": seed}
    info = {"stabcli_version": __version__, "gensim_version": _gensim_version(), "corpus": corpus_info}

    with RunSetWriter(root) as writer:
        manifest = writer.open(identity, info, force=force)
        corpus_copy = None
        if vocabulary:  # empty when a script trains: each run brings its own keys
            writer.write_keys(vocabulary)
            corpus_copy = writer.write_corpus_copy(_prepared_corpus(corpus))
        done = set(complete_runs(root))
        results: dict[int, RunResult] = {}
        for index in sorted(done):
            entry = manifest["runs"].get(run_name(index), {})
            if entry.get("status") != "complete":  # killed between publishing the run and recording it
                try:
                    losses = read_losses(root / run_name(index) / "losses.json") or []
                except InputError:
                    losses = []
                final = next((v for v in reversed(losses) if v is not None), None)
                entry = manifest["runs"][run_name(index)] = {"seed": seed + index, "status": "complete",
                                                             "seconds": None, "final_loss": final}
            results[index] = RunResult(index, seed + index, "kept", entry.get("seconds"), entry.get("final_loss"))
        todo = [i for i in range(runs) if i not in done]
        manifest["seeds"] = [seed + i for i in range(max(runs, max(done, default=-1) + 1))]
        writer.clear_leftovers(todo)
        for index in todo:
            manifest["runs"][run_name(index)] = {"seed": seed + index, "status": "pending"}
        writer.save()

        corpus_arg = Path(corpus_path).resolve() if corpus_path else None
        tasks = [RunTask(i, seed + i, config, writer.new_partial(i), root / KEYS if vocabulary else None, corpus_copy,
                         corpus_arg, timeout) for i in todo]
        poller = _ProgressPoller([t.work for t in tasks], config.epochs if config.script is None else 0, len(done),
                                 runs, on_progress)
        poller.start()
        try:
            for result in backend(tasks, jobs):
                work = next(t.work for t in tasks if t.index == result.index)
                if result.status == "complete":
                    writer.publish(result.index, work)
                else:
                    failed = writer.fail(result.index, work)
                    result.error = f"{result.error} (log: {failed / 'log.txt'})"
                results[result.index] = result
                writer.record(result.index, {"seed": result.seed, "status": result.status, "seconds": result.seconds,
                                             "final_loss": result.final_loss, "error": result.error})
                poller.run_finished()
                if on_run:
                    on_run(result)
        finally:
            poller.stop()
            writer.remove_corpus_copy()
    return PretrainResult(root, [results[i] for i in sorted(results)], len(vocabulary) if vocabulary else None)


def _validate(config: TrainConfig, runs: int, seed: int, timeout: float | None, corpus_path: str | Path | None) -> None:
    if runs < 1:
        raise UsageError("--runs must be at least 1")
    if seed < 0 or seed + runs >= 2**32:
        raise UsageError("--seed must be between 0 and 2**32 - runs")
    if timeout is not None and timeout <= 0:
        raise UsageError("--timeout must be positive")
    if config.script is not None:
        if "{out}" not in config.script:
            raise UsageError("--script must contain {out}: the directory the script writes its embedding into")
        if "{corpus}" in config.script and corpus_path is None:
            raise UsageError("--script uses {corpus} but no CORPUS was given")
        script_argv(config.script, seed=0, out=Path("out"), run=0, corpus=None)  # fails early on bad quoting
        return
    if corpus_path is None:
        raise UsageError("CORPUS is required unless --script is given")
    if config.model not in MODELS:
        raise UsageError(f"--model {config.model!r}: choose one of {', '.join(MODELS)}")
    if config.vary not in VARY:
        raise UsageError(f"--vary {config.vary!r}: choose one of {', '.join(VARY)}")
    for name in ("dim", "window", "epochs", "min_count"):
        if getattr(config, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
    if config.negative < 0:
        raise UsageError("--negative must be 0 or more")


def _gensim_version() -> str:
    from importlib.metadata import version

    return version("gensim")


def _prepared_corpus(corpus: Corpus) -> bytes:
    """The corpus as plain token lines (``tag<TAB>tokens`` when tagged), read by every run."""
    lines = []
    for i, seq in enumerate(corpus.sequences):
        prefix = corpus.tags[i] + "\t" if corpus.tags is not None else ""
        lines.append(prefix + " ".join(seq) + "\n")
    return "".join(lines).encode("utf-8")


class _ProgressPoller:
    """Reports progress by reading the epoch counters runs write into their partial directories."""

    def __init__(self, works: list[Path], epochs: int, done: int, total: int, callback: Callable | None):
        self.works, self.epochs, self.callback = works, epochs, callback
        self.done, self.total = done, total
        self.finished: int = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> None:
        if self.callback:
            self._report()
            self._thread.start()

    def run_finished(self) -> None:
        self.finished += 1
        if self.callback:
            self._report()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(0.25):
            self._report()

    def _report(self) -> None:
        in_flight = 0
        for work in self.works:
            try:
                in_flight += int((work / PROGRESS).read_text() or 0)
            except (OSError, ValueError):
                pass
        epochs_done = min(self.finished * self.epochs + in_flight, len(self.works) * self.epochs)
        self.callback(Progress(self.total, self.done + self.finished, len(self.works) * self.epochs, epochs_done))
