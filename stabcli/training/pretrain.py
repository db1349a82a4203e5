"""Orchestrate N independent runs of an embedding into a run set (``stabcli pretrain``).

Run ``i`` uses seed ``seed + i``. Inside a run gensim uses ``workers=1``, which makes it
bitwise reproducible on one machine; runs go in parallel across processes, so the result
does not depend on ``jobs`` (docs/reproducibility.md). Each run records its environment. This module plans the runs, hands them to an execution backend (a function
that takes the run tasks and yields their results as they finish: local processes here, a
cluster elsewhere) and records each result; the trainers themselves live in
:mod:`stabcli.training.trainers`, the run-set layout in :mod:`stabcli.runset.layout`.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from stabcli import __version__
from stabcli.errors import InputError, OptionError, UsageError
from stabcli.fs.atomic import file_sha256
from stabcli.fs.resources import require_disk, require_memory
from stabcli.inputs.corpus import Corpus, CorpusOptions, read_corpus
from stabcli.runset import (
    KEYS,
    PROGRESS,
    RunSetWriter,
    check_input_outside,
    check_keys,
    complete_runs,
    read_losses,
    run_name,
)
from stabcli.runset.manifest import identity as manifest_identity
from stabcli.training.config import MODELS, VARY, TrainConfig, parse_params
from stabcli.training.processes import cpu_count, kill_orphans_of, kill_pool_workers, live_groups, worker_init
from stabcli.training.trainers import PLACEHOLDERS, RunResult, RunTask, execute, script_argv

__all__ = [
    "MODELS",
    "PLACEHOLDERS",
    "VARY",
    "Backend",
    "PretrainResult",
    "Progress",
    "RunResult",
    "RunTask",
    "TrainConfig",
    "local_backend",
    "parse_params",
    "pretrain",
    "script_argv",
]


@dataclass
class Progress:
    runs_total: int
    runs_done: int
    epochs_total: int
    epochs_done: int


@dataclass
class PretrainResult:
    """What a pretrain did: its runs, the number of shared keys (None when each script run
    brings its own) and the corpus it read (``format``, ``sequences``, ``tokens``,
    ``distinct_keys``; None without a corpus)."""

    root: Path
    runs: list[RunResult]
    keys: int | None
    corpus: dict[str, Any] | None = None

    @property
    def failed(self) -> list[RunResult]:
        return [r for r in self.runs if r.status == "failed"]

    def to_dict(self) -> dict[str, Any]:
        """The summary ``stabcli pretrain --format json`` prints."""
        return {
            "stabcli_version": __version__,
            "run_set": str(self.root),
            "keys": self.keys,
            "corpus": self.corpus,
            "runs": [dict(r.__dict__) for r in self.runs],
            "failed": len(self.failed),
        }


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
        executor = ProcessPoolExecutor(
            max_workers=min(jobs, len(tasks)), mp_context=multiprocessing.get_context("spawn"), initializer=worker_init
        )
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
    _validate(config, runs, seed, timeout, corpus_path, jobs)
    if corpus_path is not None:
        check_input_outside(root, corpus_path, "corpus")
    jobs = jobs or cpu_count()
    data = _TrainingData.read(corpus_path, config, corpus_options) if corpus_path is not None else _TrainingData()
    corpus, vocabulary = data.corpus, data.vocabulary
    _check_resources(
        root, config, runs, min(jobs, runs), len(vocabulary), corpus.n_tokens if corpus else 0, data.words(config)
    )
    identity = manifest_identity({"config": config.identity(), "corpus": data.info, "seed": seed})
    info = {"stabcli_version": __version__, "gensim_version": _gensim_version(), "corpus": data.info}

    with RunSetWriter(root) as writer:
        kill_orphans_of(str(root.resolve()))  # scripts of a pretrain killed by kill -9 (we hold the lock)
        manifest = writer.open(identity, info, force=force)
        corpus_copy = data.write(writer)
        results = _kept_runs(root, manifest, seed)
        done = set(results)
        todo = [i for i in range(runs) if i not in done]
        _record_pending(writer, manifest, todo, done, runs, seed)

        corpus_arg = Path(corpus_path).resolve() if corpus_path else None
        keys_file = root / KEYS if vocabulary else None
        tasks = [
            RunTask(i, seed + i, config, writer.new_partial(i), keys_file, corpus_copy, corpus_arg, timeout)
            for i in todo
        ]
        poller = _ProgressPoller(
            [t.work for t in tasks], config.epochs if config.script is None else 0, len(done), runs, on_progress
        )
        try:
            _execute(writer, tasks, backend, jobs, results, poller, on_run)
        finally:
            writer.discard_partials()  # this attempt's unfinished runs (interrupted or crashed)
            writer.remove_corpus_copy()
    return PretrainResult(
        root, [results[i] for i in sorted(results)], len(vocabulary) if vocabulary else None, data.summary
    )


def corpus_entry(corpus_path: str | Path, corpus: Corpus, corpus_options: CorpusOptions) -> dict[str, Any]:
    """The ``corpus`` entry of a run set's manifest: the file, its sha256 and how it was read
    (what :func:`stabcli.runset.manifest.corpus_reading` compares on resume, and what a
    sweep directory and drift's noise check compare too)."""
    summary = corpus.summary()
    return {
        "path": str(Path(corpus_path).resolve()),
        "sha256": file_sha256(Path(corpus_path)),
        "format": corpus.format,
        "encoding": corpus.encoding,
        "options": asdict(corpus_options),
        "sequences": len(corpus.sequences),
        "tokens": corpus.n_tokens,
        "delimiter": summary["delimiter"],
        "header": summary["header"],
        "columns": summary["columns"],
    }


def require_trainable(corpus_path: str | Path, corpus: Corpus, config: TrainConfig) -> None:
    """What ``config`` trains can be trained on ``corpus``: doc2vec needs document tags
    (checked by pretrain and sweep before anything is written)."""
    if config.model == "doc2vec" and corpus.tags is None and config.script is None:
        raise InputError(
            f"{corpus_path}: read as {corpus.format}, which has no document tags; doc2vec learns one vector "
            "per tag: give a tagged corpus (tag<TAB>text per line, --corpus-format tagged, e.g. the line "
            "number as the tag), or use --model word2vec"
        )


@dataclass
class _TrainingData:
    """The corpus a pretrain reads (none in script mode without CORPUS): its vocabulary and
    key counts, the summary it returns and the ``corpus`` entry of the manifest."""

    corpus: Corpus | None = None
    vocabulary: list[str] = field(default_factory=list)
    counts: list[int] | None = None  # training counts in vocabulary order
    key_counts: Counter[str] = field(default_factory=Counter)
    summary: dict[str, Any] | None = None
    info: dict[str, Any] | None = None

    @classmethod
    def read(cls, corpus_path: str | Path, config: TrainConfig, corpus_options: CorpusOptions) -> _TrainingData:
        corpus = read_corpus(corpus_path, config.model, corpus_options)
        require_trainable(corpus_path, corpus, config)
        key_counts = _key_counts(corpus)
        summary = {**corpus.summary(), "distinct_keys": len(key_counts), "description": corpus.describe()}
        vocabulary: list[str] = []
        counts = None
        if config.script is None:
            vocabulary = corpus.vocabulary(config.min_count)
            if len(vocabulary) < 2:
                raise InputError(
                    f"{corpus_path}: only {len(vocabulary)} distinct token(s) occur at least --min-count "
                    f"{config.min_count} time(s); an embedding needs at least 2"
                )
            check_keys(vocabulary, f"{corpus_path}: {'tag' if corpus.tags is not None else 'token'}")
            counts = [key_counts[k] for k in vocabulary]
        return cls(corpus, vocabulary, counts, key_counts, summary, corpus_entry(corpus_path, corpus, corpus_options))

    def write(self, writer: RunSetWriter) -> Path | None:
        """The keys and their training counts into the run set; returns the corpus copy the
        runs read (None without a vocabulary: each script run brings its own keys)."""
        if self.vocabulary and self.corpus is not None:
            writer.write_keys(self.vocabulary, self.counts)
            return writer.write_corpus_copy(self.corpus.token_lines())
        if self.corpus is not None:  # a script's keys are its own: record every corpus key's count
            writer.write_corpus_counts(self.key_counts)
        return None

    def words(self, config: TrainConfig) -> int:
        """The words gensim trains vectors for: the vocabulary, or doc2vec's words beside its tags."""
        corpus = self.corpus
        if corpus is not None and corpus.tags is not None and config.script is None:  # doc2vec: the keys are tags
            return sum(1 for c in Counter(t for seq in corpus.sequences for t in seq).values() if c >= config.min_count)
        return len(self.vocabulary)


def _kept_runs(root: Path, manifest: dict[str, Any], seed: int) -> dict[int, RunResult]:
    """The complete runs of an earlier pretrain, recorded as complete in ``manifest`` (a run
    published but killed before it was recorded gets its entry here)."""
    results: dict[int, RunResult] = {}
    for index in sorted(set(complete_runs(root))):
        entry = manifest["runs"].get(run_name(index), {})
        if entry.get("status") != "complete":  # killed between publishing the run and recording it
            try:
                losses = read_losses(root / run_name(index) / "losses.json") or []
            except InputError:
                losses = []
            final = next((v for v in reversed(losses) if v is not None), None)
            entry = manifest["runs"][run_name(index)] = {
                "seed": seed + index,
                "status": "complete",
                "seconds": None,
                "final_loss": final,
            }
        results[index] = RunResult(index, seed + index, "kept", entry.get("seconds"), entry.get("final_loss"))
    return results


def _record_pending(
    writer: RunSetWriter, manifest: dict[str, Any], todo: list[int], done: set[int], runs: int, seed: int
) -> None:
    """Every run's seed, and the runs to train as pending, in the manifest; leftovers of those runs removed."""
    manifest["seeds"] = [seed + i for i in range(max(runs, max(done, default=-1) + 1))]
    writer.clear_leftovers(todo)
    for index in todo:
        manifest["runs"][run_name(index)] = {"seed": seed + index, "status": "pending"}
    writer.save()


def _execute(
    writer: RunSetWriter,
    tasks: list[RunTask],
    backend: Backend,
    jobs: int,
    results: dict[int, RunResult],
    poller: _ProgressPoller,
    on_run: Callable[[RunResult], None] | None,
) -> None:
    """Publish (or keep as failed) each run as the backend finishes it and record it in the
    manifest; stop the backend's processes and the poller however this ends."""
    poller.start()
    outcomes = backend(tasks, jobs)
    try:
        for result in outcomes:
            work = next(t.work for t in tasks if t.index == result.index)
            if result.status == "complete":
                writer.publish(result.index, work)
            else:
                failed = writer.fail(result.index, work)
                result.error = f"{result.error} (log: {failed / 'log.txt'})"
            results[result.index] = result
            writer.record(
                result.index,
                {
                    "seed": result.seed,
                    "status": result.status,
                    "seconds": result.seconds,
                    "final_loss": result.final_loss,
                    "error": result.error,
                    **({"environment": result.environment} if result.environment else {}),
                },
            )
            poller.run_finished()
            if on_run:
                on_run(result)
    finally:
        getattr(outcomes, "close", lambda: None)()  # stops every worker and script it started
        poller.stop()


MAX_RUNS = 100_000  # the manifest records every run and is rewritten after each one
_BYTES_PER_RUN = (
    4096  # bookkeeping in this process per run: task, result, manifest entry, future (measured ~2 KB + margin)
)


def _gensim_weights(config: TrainConfig, keys: int, words: int) -> int:
    """Bytes of gensim's float32 weights for one run: the input vectors (words, and doc2vec's
    tags) and an output matrix per word for negative sampling and for ``hs``, as wide as the
    hidden layer (doc2vec ``dm_concat``: ``(dm_tag_count + 2 window) × dim``)."""
    params = config.params or {}
    layer, inputs = config.dim, keys * config.dim
    if config.model == "doc2vec":
        inputs += words * config.dim
        if params.get("dm_concat") and not config.sg:
            layer = (params.get("dm_tag_count", 1) + 2 * config.window) * config.dim
    else:
        words = keys
    outputs = words * layer * (int(config.negative > 0) + int(bool(params.get("hs"))))
    return 4 * (inputs + outputs)


def _check_resources(
    root: Path, config: TrainConfig, runs: int, concurrent: int, keys: int, tokens: int, words: int = 0
) -> None:
    """Refuse (naming the option) a request whose memory or disk cannot fit, before any work."""
    if runs > MAX_RUNS:
        raise OptionError("runs", f"{runs:,} runs: at most {MAX_RUNS:,} (each run is recorded in the manifest)")
    bookkeeping = runs * _BYTES_PER_RUN
    per_run = 0
    snapshots = 1
    if config.script is None:
        # gensim's weights, the run copies the vectors out in key order and saves them (two
        # more), plus margin; and the corpus lines a run reads into memory
        per_run = _gensim_weights(config, keys, words) + keys * config.dim * 4 * 3 + tokens * 16
        snapshots += config.epochs if config.checkpoints else 0
    biggest = "runs" if bookkeeping >= per_run * concurrent else "dim"
    require_memory(
        biggest,
        bookkeeping + per_run * concurrent,
        f"{runs:,} run(s), {concurrent} at a time"
        + (f", {keys:,} keys × {config.dim:,} dims" if keys else "")
        + (f" ({words:,} words)" if config.model == "doc2vec" and words else ""),
    )
    on_disk = runs * (keys * config.dim * 4 * snapshots + _BYTES_PER_RUN)
    require_disk(
        "runs" if runs * _BYTES_PER_RUN >= keys * config.dim * 4 * snapshots else "dim",
        on_disk,
        root,
        f"{runs:,} run(s)" + (f" of {keys:,} keys × {config.dim:,} dims" if keys else ""),
    )


def _key_counts(corpus: Corpus) -> Counter[str]:
    """Training frequency of every key: occurrences of a token, or the tokens of a tag's documents."""
    if corpus.tags is not None:
        counts: Counter[str] = Counter()
        for tag, seq in zip(corpus.tags, corpus.sequences, strict=False):
            counts[tag] += len(seq)
        return counts
    return corpus.token_counts()


def _validate(
    config: TrainConfig, runs: int, seed: int, timeout: float | None, corpus_path: str | Path | None, jobs: int | None
) -> None:
    """Checks of pretrain's options outside the configuration (which checks itself)."""
    if type(runs) is not int or runs < 1:
        raise OptionError("runs", "must be at least 1")
    if jobs is not None and (type(jobs) is not int or jobs < 1):
        raise OptionError("jobs", f"{jobs} must be at least 1 (leave it out for every available core)")
    if type(seed) is not int or seed < 0 or seed + runs >= 2**32:
        raise OptionError("seed", "must be between 0 and 2**32 - runs")
    if timeout is not None and not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
        raise OptionError("timeout", "must be a positive number of seconds")
    if config.script is not None:
        if "{corpus}" in config.script and corpus_path is None:
            raise UsageError("--script uses {corpus} but no CORPUS was given")
    elif corpus_path is None:
        raise UsageError("CORPUS is required unless --script is given")


def _gensim_version() -> str:
    from importlib.metadata import version

    return version("gensim")


class _ProgressPoller:
    """Reports progress by reading the epoch counters runs write into their partial directories."""

    def __init__(
        self, works: list[Path], epochs: int, done: int, total: int, callback: Callable[[Progress], None] | None
    ):
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
            with contextlib.suppress(OSError, ValueError):
                in_flight += int((work / PROGRESS).read_text() or 0)
        epochs_done = min(self.finished * self.epochs + in_flight, len(self.works) * self.epochs)
        assert self.callback is not None
        self.callback(Progress(self.total, self.done + self.finished, len(self.works) * self.epochs, epochs_done))
