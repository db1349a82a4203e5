"""Trainers: one function per way of training a run, run inside a worker.

A trainer gets a :class:`RunTask` (picklable: paths, seed and configuration) and writes
one run into the task's partial directory with :func:`stabcli.runset.writer.write_run`; it never
publishes, renames or touches the manifest (the orchestrator, which holds the lock, does).
A new trainer is one function registered in ``TRAINERS``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import shlex
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from stabcli.environment import capture
from stabcli.errors import StabcliError, UsageError, quote
from stabcli.inputs.embeddings import Embedding, is_embedding_file, read_embedding
from stabcli.runset import EPOCHS, LOG, PROGRESS, checkpoint_path, read_losses, run_name, write_run
from stabcli.training.processes import (
    RUN_SET_VAR,
    SCRIPT_TOKEN,
    kill_script,
    live_groups,
    new_script_token,
    script_preexec,
)

if TYPE_CHECKING:
    from stabcli.training.config import TrainConfig

PLACEHOLDERS = ("{seed}", "{out}", "{run}", "{corpus}")
LOG_LIMIT = 10 * 2**20  # bytes of a script's output kept in log.txt; the rest is counted and dropped


@dataclass(frozen=True)
class RunTask:
    """Everything a worker needs to train run ``index`` into ``work`` (picklable)."""

    index: int
    seed: int
    config: TrainConfig
    work: Path  # the partial directory of this attempt, created by the orchestrator
    keys_file: Path | None  # the run set's keys.txt (gensim)
    corpus_copy: Path | None  # the prepared corpus every gensim run reads
    corpus: Path | None  # the user's corpus (fills a script's {corpus})
    timeout: float | None = None

    @property
    def trainer(self) -> str:
        return "script" if self.config.script is not None else "gensim"


@dataclass
class RunResult:
    """Outcome of one run: ``complete`` (trained now), ``kept`` (from an earlier pretrain) or ``failed``."""

    index: int
    seed: int
    status: str
    seconds: float | None = None
    final_loss: float | None = None
    error: str | None = None
    environment: dict[str, str] | None = None  # stabcli.environment.capture() of the process that trained it


class RunFailed(Exception):
    """One run failed; the others go on."""


def execute(task: RunTask) -> RunResult:
    """Train one run into its partial directory; never raises for a failed run."""
    start = time.perf_counter()
    try:
        try:
            final_loss = TRAINERS[task.trainer](task)
        except OSError as exc:  # a full disk, a vanished directory: this run fails, finished runs stay
            raise RunFailed(f"cannot write {exc.filename or task.work} ({exc.strerror or exc})") from None
        except StabcliError as exc:  # write_run refusing keys or values its reader would reject
            raise RunFailed(str(exc)) from None
        except MemoryError as exc:  # what the resource guard's estimate missed: this run fails, the others go on
            raise RunFailed(f"out of memory ({str(exc)[:200] or 'MemoryError'})") from None
    except RunFailed as exc:
        return RunResult(
            task.index,
            task.seed,
            "failed",
            round(time.perf_counter() - start, 3),
            None,
            f"{run_name(task.index)}: {exc}",
        )
    seconds = round(time.perf_counter() - start, 3)
    return RunResult(task.index, task.seed, "complete", seconds, final_loss, environment=capture())


# ---------------------------------------------------------------- gensim


def train_gensim(task: RunTask) -> float | None:
    from gensim.models import Doc2Vec, Word2Vec
    from gensim.models.callbacks import CallbackAny2Vec
    from gensim.models.doc2vec import TaggedDocument

    config, work = task.config, task.work
    assert task.keys_file is not None and task.corpus_copy is not None
    keys = task.keys_file.read_text(encoding="utf-8").splitlines()
    lines = _varied_lines(task.corpus_copy, config.vary, task.seed)
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
                (work / EPOCHS).mkdir(exist_ok=True)
                vectors, _ = _vectors_in_key_order(model, keys, is_word2vec)
                np.save(checkpoint_path(work, self.epoch), vectors)
            (work / PROGRESS).write_text(str(self.epoch))

    common = dict(
        vector_size=config.dim,
        window=config.window,
        negative=config.negative,
        epochs=config.epochs,
        min_count=config.min_count,
        workers=1,
        seed=task.seed,
        callbacks=[EpochEnd()],
        **config.params,
    )
    own_corpus = work / "corpus.txt"
    try:
        with _gensim_log(work / LOG):
            if is_word2vec:
                corpus_file = task.corpus_copy
                if config.vary != "seed":
                    corpus_file = own_corpus
                    corpus_file.write_bytes(b"\n".join(lines) + b"\n")
                model = Word2Vec(corpus_file=str(corpus_file), sg=int(config.sg), compute_loss=True, **common)
            else:
                documents = []
                for line in lines:
                    tag, _, text = line.decode("utf-8").partition("\t")
                    documents.append(TaggedDocument(text.split(), [tag]))
                model = Doc2Vec(documents=documents, dm=0 if config.sg else 1, **common)
    except (TypeError, ValueError, RuntimeError) as exc:  # gensim rejecting a --param value
        raise RunFailed(f"gensim failed: {exc}") from None
    finally:
        own_corpus.unlink(missing_ok=True)

    vectors, run_keys = _vectors_in_key_order(model, keys, is_word2vec)
    losses = [v if v is None or np.isfinite(v) else None for v in losses]
    write_run(work, vectors, run_keys, shared_keys=keys, losses=losses, name="gensim")
    return losses[-1] if losses else None


def _varied_lines(corpus_copy: Path, vary: str, seed: int) -> list[bytes]:
    """The corpus lines a run trains on: as they are (``--vary seed``), shuffled, or a
    bootstrap sample of them, drawn from the run's seed."""
    with open(corpus_copy, "rb") as fh:
        lines = fh.read().splitlines()
    rng = np.random.default_rng(seed)
    if vary == "shuffle":
        lines = [lines[i] for i in rng.permutation(len(lines))]
    elif vary == "bootstrap":
        lines = [lines[i] for i in rng.integers(0, len(lines), size=len(lines))]
    return lines


@contextlib.contextmanager
def _gensim_log(path: Path) -> Iterator[None]:
    """gensim's log into the run's log.txt, not on the terminal, while the model trains."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    gensim_logger = logging.getLogger("gensim")
    previous = gensim_logger.level, gensim_logger.propagate
    gensim_logger.addHandler(handler)
    gensim_logger.setLevel(logging.INFO)
    gensim_logger.propagate = False
    try:
        yield
    finally:
        gensim_logger.removeHandler(handler)
        gensim_logger.level, gensim_logger.propagate = previous
        handler.close()


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


# ---------------------------------------------------------------- user script


def script_argv(template: str, *, seed: int, out: Path, run: int, corpus: Path | None) -> list[str]:
    """Split ``template`` like a shell would, then fill placeholders inside each argument.

    Filling after splitting keeps a path with spaces, quotes or ``;`` one argument; no
    shell ever sees it.
    """
    try:
        argv = shlex.split(template)
    except ValueError as exc:
        raise UsageError(f"--script: cannot split {quote(template)} ({exc})") from None
    if not argv:
        raise UsageError("--script: empty command")
    values = {"{seed}": str(seed), "{out}": str(out), "{run}": str(run), "{corpus}": str(corpus) if corpus else ""}
    filled = []
    for arg in argv:
        for placeholder, value in values.items():
            arg = arg.replace(placeholder, value)
        filled.append(arg)
    return filled


class LogPump(threading.Thread):
    """Copies a script's output pipe into log.txt up to LOG_LIMIT bytes, keeps draining (so
    the script never blocks on a full pipe) and remembers the last bytes for error messages.

    It polls the pipe, so :meth:`stop` ends it even while a grandchild that escaped the
    script's process group still holds the pipe open.
    """

    def __init__(self, fd: int, log: Any) -> None:
        super().__init__(daemon=True)
        self.fd, self.log, self.kept, self.dropped, self.tail = fd, log, 0, 0, b""
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            ready, _, _ = select.select([self.fd], [], [], 0.1)
            if not ready:
                continue
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                break
            self._take(chunk)
        if self.dropped:
            self.log.write(
                f"\n[stabcli: output truncated at {LOG_LIMIT:,} bytes; {self.dropped:,} more bytes dropped]\n".encode()
            )
            self.log.flush()

    def _take(self, chunk: bytes) -> None:
        room = max(LOG_LIMIT - self.kept, 0)
        if room:
            self.log.write(chunk[:room])
            self.log.flush()
        self.kept += min(len(chunk), room)
        self.dropped += max(len(chunk) - room, 0)
        self.tail = (self.tail + chunk)[-4096:]

    def finish(self, grace: float = 2.0) -> None:
        """Wait up to ``grace`` seconds for the end of the output, then stop reading."""
        self.join(timeout=grace)
        self._stop_event.set()
        self.join()

    def last_line(self) -> str:
        lines = [line.strip() for line in self.tail.decode("utf-8", "replace").splitlines() if line.strip()]
        return lines[-1][:200] if lines else ""


def train_script(task: RunTask) -> float | None:
    work = task.work
    out_dir = work / "output"
    out_dir.mkdir()
    argv = script_argv(
        task.config.script or "", seed=task.seed, out=out_dir.resolve(), run=task.index, corpus=task.corpus
    )
    with open(work / LOG, "wb") as log:
        log.write(("$ " + shlex.join(argv) + "\n").encode())
        log.flush()
        read_end, write_end = os.pipe()
        token = new_script_token()
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=write_end,
                stderr=write_end,
                start_new_session=True,
                preexec_fn=script_preexec,
                env={**os.environ, SCRIPT_TOKEN: token, RUN_SET_VAR: str(work.parent.resolve())},
            )
        except OSError as exc:
            os.close(read_end)
            problem = "command not found" if isinstance(exc, FileNotFoundError) else "cannot run"
            raise RunFailed(
                f"{problem}: {argv[0]}" + ("" if isinstance(exc, FileNotFoundError) else f" ({exc.strerror})")
            ) from None
        finally:
            os.close(write_end)
        live_groups.add(proc.pid, token)
        pump = LogPump(read_end, log)
        pump.start()
        try:
            code = proc.wait(timeout=task.timeout)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            kill_script(proc.pid, token)  # the script's descendants go with it, however it ended
            live_groups.discard(proc.pid)
            proc.wait()
            pump.finish()
            os.close(read_end)
    if code is None:
        raise RunFailed(f"script timed out after {task.timeout:g} s")
    if code != 0:
        last = pump.last_line()
        raise RunFailed(f"script exited with code {code}" + (f": {last}" if last else ""))
    found = sorted(p for p in out_dir.iterdir() if p.is_file() and is_embedding_file(p))
    if not found:
        raise RunFailed("script wrote no embedding file into {out} (.npy, .txt, .vec, .bin, .kv, .parquet)")
    if len(found) > 1:
        raise RunFailed(
            f"script wrote {len(found)} embedding files into {{out}}; expected one ({', '.join(p.name for p in found)})"
        )
    try:
        embedding: Embedding = read_embedding(found[0])
        vectors = np.asarray(embedding.vectors, dtype=np.float32)
    except StabcliError as exc:
        raise RunFailed(f"unreadable output: {exc}") from None
    if not np.isfinite(vectors).all():
        raise RunFailed(f"output {found[0].name} contains NaN or infinite values")
    try:
        losses = read_losses(out_dir / "losses.json")
    except StabcliError as exc:
        raise RunFailed(f"losses.json: {str(exc).split(': ', 1)[-1]}") from None
    write_run(work, vectors, embedding.keys, losses=losses, name="script output")
    shutil.rmtree(out_dir)
    return losses[-1] if losses else None


TRAINERS: dict[str, Callable[[RunTask], float | None]] = {"gensim": train_gensim, "script": train_script}
