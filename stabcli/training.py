"""Train N independent runs of an embedding into a run set (``stabcli pretrain``).

Run ``i`` uses seed ``seed + i``. Inside a run gensim uses ``workers=1``, which makes it
bitwise reproducible; runs go in parallel across processes through joblib, so the result
does not depend on ``jobs`` (and the same tasks can be sent to a Dask cluster with
joblib's dask backend). Each run is built in a partial directory and renamed when done,
which makes resuming an interrupted pretrain safe.
"""

from __future__ import annotations

import ast
import inspect
import json
import logging
import os
import shlex
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
from joblib import Parallel, delayed

from stabcli import __version__
from stabcli.corpus import Corpus, CorpusOptions, file_sha256, read_corpus
from stabcli.embeddings import Embedding, is_embedding_file, keys_text, read_embedding
from stabcli.errors import InputError, RunSetError, StabcliError, UsageError
from stabcli.runset import (
    KEYS, MANIFEST, SCHEMA_VERSION, RunSetLock, clear_leftovers, complete_runs, failed_dir, finish_run,
    partial_dir, read_manifest, run_name, write_json_atomic, write_text_atomic,
)

MODELS = ("word2vec", "doc2vec")
VARY = ("seed", "shuffle", "bootstrap")
PLACEHOLDERS = ("{seed}", "{out}", "{run}", "{corpus}")
PREPARED_CORPUS = ".corpus.txt"
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
class RunResult:
    """Outcome of one run: ``complete`` (trained now), ``kept`` (from an earlier pretrain) or ``failed``."""

    index: int
    seed: int
    status: str
    seconds: float | None = None
    final_loss: float | None = None
    error: str | None = None


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


def script_argv(template: str, *, seed: int, out: Path, run: int, corpus: Path | None) -> list[str]:
    """Split ``template`` like a shell would, then fill placeholders inside each argument.

    Filling after splitting keeps a path with spaces, quotes or ``;`` one argument; no
    shell ever sees it.
    """
    try:
        argv = shlex.split(template)
    except ValueError as exc:
        raise UsageError(f"--script: cannot split {template!r} ({exc})") from None
    if not argv:
        raise UsageError("--script: empty command")
    values = {"{seed}": str(seed), "{out}": str(out), "{run}": str(run), "{corpus}": str(corpus) if corpus else ""}
    filled = []
    for arg in argv:
        for placeholder, value in values.items():
            arg = arg.replace(placeholder, value)
        filled.append(arg)
    return filled


@dataclass(frozen=True)
class _Task:
    root: Path
    index: int
    seed: int
    config: TrainConfig
    corpus: Path | None
    timeout: float | None
    parent_pid: int = field(default_factory=os.getpid)


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
) -> PretrainResult:
    """Train ``runs`` runs of ``config`` on ``corpus_path`` into the run set ``out``.

    Complete runs of an earlier pretrain with the same configuration are kept; a different
    configuration raises ``RunSetError`` unless ``force`` (which deletes the old runs).

    Parameters
    ----------
    out : run set directory (created if missing).
    corpus_path : training corpus; optional in script mode (fills ``{corpus}``).
    config : the model configuration, or a script template in ``config.script``.
    runs, seed : run ``i`` uses seed ``seed + i``.
    jobs : parallel runs (default: available cores).
    on_progress, on_run : callbacks for progress polling and finished runs.
    """
    root = Path(out)
    _validate(config, runs, seed, timeout, corpus_path)
    jobs = jobs or len(os.sched_getaffinity(0))
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
    if root.exists() and not root.is_dir():
        raise UsageError(f"--out {root}: exists and is not a directory")
    if root.is_dir() and not (root / MANIFEST).exists() and any(root.iterdir()):
        raise RunSetError(f"{root}: directory exists, is not empty and is not a run set; choose another --out")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {root}: cannot create directory ({exc.strerror})") from None

    with RunSetLock(root):
        manifest = _open_manifest(root, config, corpus_info, seed, force)
        if vocabulary:  # empty when a script trains: each run brings its own keys
            write_text_atomic(root / KEYS, keys_text(vocabulary))
            _write_prepared_corpus(root / PREPARED_CORPUS, corpus)
        done = set(complete_runs(root))
        results: dict[int, RunResult] = {}
        for index in sorted(done):
            entry = manifest["runs"].get(run_name(index), {})
            if entry.get("status") != "complete":  # killed between publishing the run and recording it
                try:
                    losses = _read_losses(root / run_name(index) / "losses.json") or []
                except _RunFailed:
                    losses = []
                final = next((v for v in reversed(losses) if v is not None), None)
                entry = manifest["runs"][run_name(index)] = {"seed": seed + index, "status": "complete",
                                                             "seconds": None, "final_loss": final}
            results[index] = RunResult(index, seed + index, "kept", entry.get("seconds"), entry.get("final_loss"))
        todo = [i for i in range(runs) if i not in done]
        manifest["seeds"] = [seed + i for i in range(max(runs, max(done, default=-1) + 1))]
        clear_leftovers(root, todo)
        for index in todo:
            manifest["runs"][run_name(index)] = {"seed": seed + index, "status": "pending"}
        _save_manifest(root, manifest)

        tasks = [_Task(root, i, seed + i, config, Path(corpus_path).resolve() if corpus_path else None, timeout) for i in todo]
        poller = _ProgressPoller(root, todo, config.epochs if config.script is None else 0, len(done), runs, on_progress)
        poller.start()
        try:
            backend = "threading" if config.script is not None else "loky"
            parallel = Parallel(n_jobs=min(jobs, max(len(tasks), 1)), backend=backend, return_as="generator_unordered")
            for result in parallel(delayed(_execute)(task) for task in tasks):
                results[result.index] = result
                manifest["runs"][run_name(result.index)] = {
                    "seed": result.seed, "status": result.status, "seconds": result.seconds,
                    "final_loss": result.final_loss, "error": result.error,
                }
                _save_manifest(root, manifest)
                poller.run_finished()
                if on_run:
                    on_run(result)
        finally:
            poller.stop()
            (root / PREPARED_CORPUS).unlink(missing_ok=True)
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


def _open_manifest(root: Path, config: TrainConfig, corpus_info: dict | None, seed: int, force: bool) -> dict[str, Any]:
    identity = {"config": config.identity(), "corpus_sha256": corpus_info["sha256"] if corpus_info else None, "seed": seed}
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    if (root / MANIFEST).exists():
        old = read_manifest(root)
        old_identity = {"config": old.get("config"), "corpus_sha256": (old.get("corpus") or {}).get("sha256"), "seed": old.get("seed")}
        if old_identity != identity:
            if not force:
                raise RunSetError(f"{root}: made with a different configuration ({_describe_diff(old_identity, identity)}); "
                                  f"use --force to replace its runs, or another --out")
            _wipe(root)
        else:
            old["updated"] = now
            old["stabcli_version"] = __version__
            old.setdefault("runs", {})
            if corpus_info:
                old["corpus"] = corpus_info
            return old
    return {
        "schema_version": SCHEMA_VERSION,
        "stabcli_version": __version__,
        "gensim_version": _gensim_version(),
        "created": now,
        "updated": now,
        "config": identity["config"],
        "corpus": corpus_info,
        "seed": seed,
        "seeds": [],
        "runs": {},
    }


def _describe_diff(old: dict, new: dict) -> str:
    flat_old = {**(old.get("config") or {}), "corpus sha256": old["corpus_sha256"], "seed": old["seed"]}
    flat_new = {**new["config"], "corpus sha256": new["corpus_sha256"], "seed": new["seed"]}
    diffs = [f"{k} {flat_old.get(k)!r} → {flat_new.get(k)!r}" for k in flat_new if flat_old.get(k) != flat_new.get(k)]
    diffs += [f"{k} {flat_old[k]!r} → unset" for k in flat_old if k not in flat_new]
    return ", ".join(diffs[:4]) or "unknown difference"


def _wipe(root: Path) -> None:
    for entry in root.iterdir():
        if entry.name == "stabcli.lock":
            continue
        if entry.is_dir():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def _gensim_version() -> str:
    from importlib.metadata import version

    return version("gensim")


def _save_manifest(root: Path, manifest: dict[str, Any]) -> None:
    manifest["updated"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    write_json_atomic(root / MANIFEST, manifest)


def _write_prepared_corpus(path: Path, corpus: Corpus) -> None:
    """The corpus as plain token lines (``tag<TAB>tokens`` when tagged), read by every run."""
    with open(path, "w", encoding="utf-8") as fh:
        for i, seq in enumerate(corpus.sequences):
            prefix = corpus.tags[i] + "\t" if corpus.tags is not None else ""
            fh.write(prefix + " ".join(seq) + "\n")


class _ProgressPoller:
    """Reports progress by reading the epoch counters runs write into their partial directories."""

    def __init__(self, root: Path, todo: list[int], epochs: int, done: int, total: int, callback: Callable | None):
        self.root, self.todo, self.epochs, self.callback = root, todo, epochs, callback
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
        for index in self.todo:
            try:
                in_flight += int((partial_dir(self.root, index) / "progress").read_text() or 0)
            except (OSError, ValueError):
                pass
        epochs_done = min(self.finished * self.epochs + in_flight, len(self.todo) * self.epochs)
        self.callback(Progress(self.total, self.done + self.finished, len(self.todo) * self.epochs, epochs_done))


# ---------------------------------------------------------------- one run (in a worker)


def _execute(task: _Task) -> RunResult:
    """Train one run into its partial directory and publish it; never raises for a failed run."""
    if os.getpid() != task.parent_pid:
        # a worker process: Ctrl-C reaches the whole process group, and the parent alone
        # handles it (stops the pool, exits 130); the run's partial directory is discarded
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    work = partial_dir(task.root, task.index)
    work.mkdir()
    start = time.perf_counter()
    try:
        try:
            if task.config.script is not None:
                final_loss = _run_script(task, work)
            else:
                final_loss = _run_gensim(task, work)
        except OSError as exc:  # a full disk, a vanished directory: this run fails, finished runs stay
            raise _RunFailed(f"cannot write {exc.filename or work} ({exc.strerror or exc})") from None
    except _RunFailed as exc:
        (work / "progress").unlink(missing_ok=True)
        failed = failed_dir(task.root, task.index)
        os.replace(work, failed)
        return RunResult(task.index, task.seed, "failed", round(time.perf_counter() - start, 3), None,
                         f"{run_name(task.index)}: {exc} (log: {failed / 'log.txt'})")
    (work / "progress").unlink(missing_ok=True)
    finish_run(task.root, task.index)
    return RunResult(task.index, task.seed, "complete", round(time.perf_counter() - start, 3), final_loss)


class _RunFailed(Exception):
    """One run failed; the others go on."""


def _run_gensim(task: _Task, work: Path) -> float | None:
    from gensim.models import Doc2Vec, Word2Vec
    from gensim.models.callbacks import CallbackAny2Vec
    from gensim.models.doc2vec import TaggedDocument

    config = task.config
    keys = (task.root / KEYS).read_text(encoding="utf-8").splitlines()
    with open(task.root / PREPARED_CORPUS, "rb") as fh:
        lines = fh.read().splitlines()
    rng = np.random.default_rng(task.seed)
    if config.vary == "shuffle":
        lines = [lines[i] for i in rng.permutation(len(lines))]
    elif config.vary == "bootstrap":
        lines = [lines[i] for i in rng.integers(0, len(lines), size=len(lines))]

    losses: list[float | None] = []
    is_word2vec = config.model == "word2vec"

    class EpochEnd(CallbackAny2Vec):
        def __init__(self) -> None:
            self.cumulative = 0.0
            self.epoch = 0

        def on_epoch_end(self, model: Any) -> None:
            self.epoch += 1
            if is_word2vec:
                total = float(model.get_latest_training_loss())
                losses.append(total - self.cumulative)
                self.cumulative = total
            else:
                losses.append(None)  # gensim's Doc2Vec reports no training loss
            if config.checkpoints:
                (work / "epochs").mkdir(exist_ok=True)
                vectors, _ = _vectors_in_key_order(model, keys, is_word2vec)
                np.save(work / "epochs" / f"{self.epoch:03d}.npy", vectors)
            (work / "progress").write_text(str(self.epoch))

    common = dict(vector_size=config.dim, window=config.window, negative=config.negative, epochs=config.epochs,
                  min_count=config.min_count, workers=1, seed=task.seed, callbacks=[EpochEnd()], **config.params)
    handler = logging.FileHandler(work / "log.txt", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    gensim_logger = logging.getLogger("gensim")
    previous = gensim_logger.level, gensim_logger.propagate
    gensim_logger.addHandler(handler)
    gensim_logger.setLevel(logging.INFO)
    gensim_logger.propagate = False  # gensim's output belongs in the run's log.txt, not on the terminal
    try:
        if is_word2vec:
            corpus_file = task.root / PREPARED_CORPUS
            if config.vary != "seed":
                corpus_file = work / "corpus.txt"
                corpus_file.write_bytes(b"\n".join(lines) + b"\n")
            model = Word2Vec(corpus_file=str(corpus_file), sg=int(config.sg), compute_loss=True, **common)
        else:
            documents = []
            for line in lines:
                tag, _, text = line.decode("utf-8").partition("\t")
                documents.append(TaggedDocument(text.split(), [tag]))
            model = Doc2Vec(documents=documents, dm=0 if config.sg else 1, **common)
    except (TypeError, ValueError, RuntimeError) as exc:  # gensim rejecting a --param value
        raise _RunFailed(f"gensim failed: {exc}") from None
    finally:
        gensim_logger.removeHandler(handler)
        gensim_logger.level, gensim_logger.propagate = previous
        handler.close()
        (work / "corpus.txt").unlink(missing_ok=True)

    vectors, run_keys = _vectors_in_key_order(model, keys, is_word2vec)
    if run_keys != keys:
        write_text_atomic(work / KEYS, keys_text(run_keys))
    np.save(work / "vectors.npy", vectors)
    (work / "losses.json").write_text(json.dumps(losses) + "\n")
    return losses[-1] if losses else None


def _vectors_in_key_order(model: Any, keys: list[str], is_word2vec: bool) -> tuple[np.ndarray, list[str]]:
    """Vectors as float32 rows in canonical key order; keys the run lacks are dropped and
    keys it alone has (bootstrap) are appended in sorted order."""
    kv = model.wv if is_word2vec else model.dv
    index = kv.key_to_index
    run_keys = [k for k in keys if k in index]
    if len(run_keys) != len(index):
        known = set(keys)
        run_keys += sorted(str(k) for k in index if k not in known)
    rows = np.fromiter((index[k] for k in run_keys), dtype=np.int64, count=len(run_keys))
    return np.ascontiguousarray(kv.vectors[rows], dtype=np.float32), run_keys


LOG_LIMIT = 10 * 2**20  # bytes of a script's output kept in log.txt; the rest is counted and dropped


class _LogPump(threading.Thread):
    """Copies a script's output pipe into log.txt up to LOG_LIMIT bytes, keeps draining (so
    the script never blocks on a full pipe) and remembers the last bytes for error messages."""

    def __init__(self, pipe: Any, log: Any) -> None:
        super().__init__(daemon=True)
        self.pipe, self.log, self.kept, self.dropped, self.tail = pipe, log, 0, 0, b""

    def run(self) -> None:
        for chunk in iter(lambda: self.pipe.read1(1 << 16), b""):  # read1: whatever is there, so the log stays live
            room = max(LOG_LIMIT - self.kept, 0)
            if room:
                self.log.write(chunk[:room])
                self.log.flush()
            self.kept += min(len(chunk), room)
            self.dropped += max(len(chunk) - room, 0)
            self.tail = (self.tail + chunk)[-4096:]
        if self.dropped:
            self.log.write(f"\n[stabcli: output truncated at {LOG_LIMIT:,} bytes; {self.dropped:,} more bytes dropped]\n".encode())

    def last_line(self) -> str:
        lines = [line.strip() for line in self.tail.decode("utf-8", "replace").splitlines() if line.strip()]
        return lines[-1][:200] if lines else ""


def _run_script(task: _Task, work: Path) -> float | None:
    out_dir = work / "output"
    out_dir.mkdir()
    argv = script_argv(task.config.script or "", seed=task.seed, out=out_dir.resolve(), run=task.index, corpus=task.corpus)
    with open(work / "log.txt", "wb") as log:
        log.write(("$ " + shlex.join(argv) + "\n").encode())
        log.flush()
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        except FileNotFoundError:
            raise _RunFailed(f"command not found: {argv[0]}") from None
        except PermissionError:
            raise _RunFailed(f"not executable: {argv[0]}") from None
        pump = _LogPump(proc.stdout, log)
        pump.start()
        try:
            code = proc.wait(timeout=task.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise _RunFailed(f"script timed out after {task.timeout:g} s") from None
        finally:
            if proc.poll() is None:  # interrupted: take the script's whole process group down with us
                os.killpg(proc.pid, signal.SIGKILL)
            pump.join(timeout=10)
            proc.stdout.close()
    if code != 0:
        last = pump.last_line()
        raise _RunFailed(f"script exited with code {code}" + (f": {last}" if last else ""))
    found = sorted(p for p in out_dir.iterdir() if p.is_file() and is_embedding_file(p))
    if not found:
        raise _RunFailed("script wrote no embedding file into {out} (.npy, .txt, .vec, .bin, .kv, .parquet)")
    if len(found) > 1:
        raise _RunFailed(f"script wrote {len(found)} embedding files into {{out}}; expected one ({', '.join(p.name for p in found)})")
    try:
        embedding: Embedding = read_embedding(found[0])
        vectors = np.asarray(embedding.vectors, dtype=np.float32)
    except StabcliError as exc:
        raise _RunFailed(f"unreadable output: {exc}") from None
    if not np.isfinite(vectors).all():
        raise _RunFailed(f"output {found[0].name} contains NaN or infinite values")
    losses = _read_losses(out_dir / "losses.json")
    np.save(work / "vectors.npy", vectors)
    write_text_atomic(work / KEYS, keys_text(embedding.keys))
    (work / "losses.json").write_text(json.dumps(losses) + "\n")
    shutil.rmtree(out_dir)
    return losses[-1] if losses else None


def _read_losses(path: Path) -> list[float | None] | None:
    """A script may leave per-epoch losses as ``losses.json`` (a list) beside its embedding."""
    if not path.is_file():
        return None
    try:
        losses = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _RunFailed(f"losses.json is not valid JSON ({exc})") from None
    if not (isinstance(losses, list) and all(v is None or isinstance(v, (int, float)) for v in losses)):
        raise _RunFailed("losses.json must be a list of per-epoch losses (numbers or null)")
    return [None if v is None else float(v) for v in losses]
