"""Run sets: the on-disk contract between commands, and the one module that spells its names.

::

    runs/exp1/
      stabcli.json      manifest (schema version, versions, config, corpus sha256, runs)
      keys.txt          keys shared by every run without a keys.txt of its own
      key_counts.txt    how often each key of keys.txt occurs in the corpus (one integer per line)
      stabcli.lock      present while a pretrain writes here (holds its pid)
      .corpus.txt       the prepared corpus every run reads (while a pretrain runs)
      run-000/
        vectors.npy     float32 [n, d]
        keys.txt        only when this run's keys differ from the shared keys.txt
        losses.json     per-epoch training loss, null where the trainer reports none
        epochs/001.npy  per-epoch snapshots (--checkpoints)
        log.txt         trainer / script output

A run is built in a partial directory that belongs to one attempt alone
(``.run-000.partial-<attempt>``); only the process holding the lock renames it to
``run-000``, so a directory named ``run-NNN`` is always a finished run and an orphaned
worker of a killed pretrain can never publish into a rerun. A failed run is kept as
``run-000.failed`` for its log and is redone on the next pretrain.

Everything else in the directory belongs to the user: stabcli never removes it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import re
import secrets
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from stabcli.environment import read_recorded
from stabcli.errors import InputError, RunSetError, UsageError
from stabcli.fs.atomic import atomic_path, is_temp_name, write_json_atomic, write_text_atomic
from stabcli.inputs.embeddings import Embedding, keys_text, load_npy, read_keys, require_real_dtype
from stabcli.training.processes import kill_orphans_of

SCHEMA_VERSION = 1
MANIFEST = "stabcli.json"
KEYS = "keys.txt"
LOCK = "stabcli.lock"
KEY_COUNTS = "key_counts.txt"  # per-key token counts of the training corpus, one per line in keys.txt order
CORPUS_COPY = ".corpus.txt"
VECTORS = "vectors.npy"
LOSSES = "losses.json"
LOG = "log.txt"
EPOCHS = "epochs"
PROGRESS = "progress"  # epochs done so far, written by a training run into its partial directory

_RUN_RE = re.compile(r"^run-(\d{3,})$")
_PARTIAL_RE = re.compile(r"^\.run-(\d{3,})\.partial(-[0-9a-z]+)?$")
_FAILED_RE = re.compile(r"^run-(\d{3,})\.failed$")
_TOP_FILES = {MANIFEST, KEYS, KEY_COUNTS, CORPUS_COPY}


# ---------------------------------------------------------------- layout


def run_name(index: int) -> str:
    return f"run-{index:03d}"


def run_dir(root: Path, index: int) -> Path:
    return root / run_name(index)


def partial_dir(root: Path, index: int, attempt: str | None = None) -> Path:
    """Where run ``index`` is built; ``attempt`` names the pretrain that builds it."""
    return root / (f".{run_name(index)}.partial" + (f"-{attempt}" if attempt else ""))


def failed_dir(root: Path, index: int) -> Path:
    return root / f"{run_name(index)}.failed"


def checkpoint_path(run: Path, epoch: int) -> Path:
    return run / EPOCHS / f"{epoch:03d}.npy"


def corpus_copy_path(root: Path) -> Path:
    return root / CORPUS_COPY


def keys_path(root: Path) -> Path:
    return root / KEYS


def new_attempt_id() -> str:
    """A name no other pretrain (alive or dead) uses for its partial directories."""
    return f"{os.getpid()}x{secrets.token_hex(4)}"


def entry_kind(name: str) -> str | None:
    """What stabcli writes under ``name`` at a run set's top level: ``"dir"``, ``"file"``, or
    None when the name is not stabcli's (the user's file, which stabcli never touches)."""
    if _RUN_RE.match(name) or _PARTIAL_RE.match(name) or _FAILED_RE.match(name):
        return "dir"
    if name in _TOP_FILES or name == LOCK or is_temp_name(name):
        return "file"
    return None


def is_runset(path: Path) -> bool:
    return path.is_dir() and (path / MANIFEST).is_file()


def foreign_entries(root: Path) -> list[Path]:
    """Entries of ``root`` that stabcli did not write (sorted)."""
    return sorted(p for p in root.iterdir() if entry_kind(p.name) is None)


def check_entries(root: Path, *, writing: bool = True) -> None:
    """Refuse a run set whose stabcli names hold the wrong kind of entry (``run-002`` a file,
    the lock a directory), or, when ``writing``, a symlink, which stabcli never writes (a
    reader follows one to a run of the right kind)."""
    for path in sorted(root.iterdir()):
        kind = entry_kind(path.name)
        if kind is None:
            continue
        if writing and path.is_symlink():
            raise RunSetError(
                f"{path}: a symbolic link where stabcli writes a {'directory' if kind == 'dir' else 'file'}; "
                "move it away"
            )
        if kind == "dir" and not path.is_dir():
            raise RunSetError(f"{path}: expected a directory (stabcli's run layout), found a file; move it away")
        if kind == "file" and path.is_dir():
            raise RunSetError(f"{path}: expected a file, found a directory; move it away")


def remove_stabcli_entries(root: Path, *, keep: Iterable[str] = ()) -> None:
    """Remove what stabcli writes in ``root`` (runs, partial and failed runs, manifest, keys,
    counts, corpus copy, its temporary files), never following a symlink; every other
    entry stays where it is. Names in ``keep`` (the lock we hold) stay too."""
    kept = set(keep)
    for path in sorted(root.iterdir()):
        if path.name in kept or entry_kind(path.name) is None:
            continue
        _remove(path)


def check_input_outside(root: Path, path: str | Path, what: str) -> None:
    """UsageError (naming both) when the input ``path``, symlinks resolved, is or lies in an
    entry stabcli writes or removes in the run set ``root`` (``keys.txt``, ``run-000/``...):
    the run would overwrite or delete its own input. An input under a name of the user's
    inside the run set is fine: stabcli never touches it."""
    real_root = Path(root).resolve()
    try:
        relative = Path(path).resolve().relative_to(real_root)
    except ValueError:
        return
    if not relative.parts or entry_kind(relative.parts[0]) is not None:
        entry = Path(root, *relative.parts[:1])
        raise UsageError(
            f"{path}: the {what} lies at {entry}, which stabcli writes or removes in {root}; "
            "move it out or choose another --out"
        )


def check_removable_runset(root: Path) -> None:
    """RunSetError (naming one such file) unless ``root`` is absent or holds only what stabcli writes."""
    if not root.exists() and not root.is_symlink():
        return
    if root.is_symlink() or not root.is_dir():
        raise RunSetError(f"{root}: not a run set directory stabcli wrote; move it away")
    foreign = foreign_entries(root)
    if foreign:
        raise RunSetError(
            f"{root}: holds {foreign[0].name}, which stabcli did not write; move it away or choose another --out"
        )
    check_entries(root)


def remove_runset(root: Path) -> None:
    """Delete a run set stabcli wrote, refusing (RunSetError naming one) when it holds any
    file stabcli did not write. Used by ``demo`` to rebuild its own run sets."""
    check_removable_runset(root)
    if root.is_dir():
        remove_stabcli_entries(root)
        root.rmdir()


def _remove(path: Path) -> None:
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, onerror=_ignore_vanished)  # rmtree never follows symlinks inside


def _ignore_vanished(function: Any, path: str, exc_info: Any) -> None:
    if not isinstance(exc_info[1], FileNotFoundError):
        raise exc_info[1]


# ---------------------------------------------------------------- reading


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _load_json(path: Path) -> Any:
    """JSON from ``path``; ValueError (with a reason) for non-UTF-8, NaN, huge integers, syntax."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 (byte {exc.start})") from None
    return json.loads(text, parse_constant=_reject_constant)  # ValueError also for a 5,000-digit integer


_MANIFEST_TYPES: dict[str, tuple[type, ...]] = {
    "config": (dict, type(None)),
    "corpus": (dict, type(None)),
    "runs": (dict,),
    "seeds": (list,),
    "seed": (int,),
    "stabcli_version": (str,),
    "created": (str,),
    "updated": (str,),
}


def read_manifest(root: Path) -> dict[str, Any]:
    """The manifest of run set ``root``; a clear error when missing, corrupt or too new."""
    path = root / MANIFEST
    if path.is_dir():
        raise RunSetError(f"{path}: expected a file, found a directory")
    try:
        manifest = _load_json(path)
    except FileNotFoundError:
        raise InputError(f"{root}: not a run set (no {MANIFEST})") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None
    except ValueError as exc:
        raise RunSetError(f"{path}: corrupted manifest ({exc})") from None
    if not isinstance(manifest, dict) or type(manifest.get("schema_version")) is not int:
        raise RunSetError(f"{path}: corrupted manifest (no schema_version)")
    if manifest["schema_version"] > SCHEMA_VERSION:
        raise RunSetError(
            f"{path}: schema version {manifest['schema_version']} is newer than this stabcli understands "
            f"({SCHEMA_VERSION}); upgrade stabcli"
        )
    for name, types in _MANIFEST_TYPES.items():
        if name in manifest and (not isinstance(manifest[name], types) or isinstance(manifest[name], bool)):
            raise RunSetError(f"{path}: corrupted manifest ({name!r} is a {type(manifest[name]).__name__})")
    for name, entry in (manifest.get("runs") or {}).items():
        if not isinstance(entry, dict):
            raise RunSetError(f"{path}: corrupted manifest (runs[{name!r}] is a {type(entry).__name__})")
    return manifest


def complete_runs(root: Path) -> list[int]:
    """Indices of finished runs (directories named exactly ``run-NNN``), ascending."""
    found = []
    for entry in root.iterdir() if root.is_dir() else []:
        match = _RUN_RE.match(entry.name)
        if match and entry.is_dir():
            found.append(int(match.group(1)))
    return sorted(found)


def check_keys(keys: Sequence[str], where: str) -> None:
    """Refuse keys the run-set reader would reject: empty, with whitespace, or repeated."""
    seen: set[str] = set()
    for key in keys:
        if not isinstance(key, str) or not key:
            raise InputError(f"{where}: empty key")
        if any(ch.isspace() for ch in key):
            raise InputError(f"{where}: key {key!r} contains whitespace")
        if key in seen:
            raise InputError(f"{where}: key {key!r} occurs twice")
        seen.add(key)


def check_losses(losses: Any, where: str) -> list[float | None]:
    """A per-epoch loss list (numbers or null, all finite), or ValueError saying why not."""
    if not (
        isinstance(losses, list)
        and all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in losses)
    ):
        raise InputError(f"{where}: expected a list of per-epoch losses (numbers or null)")
    if any(v is not None and not math.isfinite(v) for v in losses):
        raise InputError(f"{where}: contains a non-finite loss")
    return [None if v is None else float(v) for v in losses]


def read_losses(path: Path) -> list[float | None] | None:
    """``losses.json`` of a run (None when absent or null)."""
    if not path.is_file():
        return None
    try:
        losses = _load_json(path)
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None
    except ValueError as exc:
        raise InputError(f"{path}: not valid JSON ({exc})") from None
    return None if losses is None else check_losses(losses, str(path))


@dataclass
class RunSet:
    """A finished or partial run set read from disk."""

    root: Path
    manifest: dict[str, Any]
    runs: list[int]

    @classmethod
    def open(cls, root: str | Path) -> RunSet:
        root = Path(root)
        manifest = read_manifest(root)
        check_entries(root, writing=False)
        return cls(root, manifest, complete_runs(root))

    def run_dir(self, index: int) -> Path:
        return run_dir(self.root, index)

    def load(self, index: int) -> Embedding:
        """Keys and memory-mapped float32 vectors of run ``index``."""
        run = self.run_dir(index)
        vectors_path = run / VECTORS
        vectors = load_npy(vectors_path)
        require_real_dtype(vectors_path, vectors)
        own_keys = run / KEYS
        keys_file = own_keys if own_keys.is_file() else self.root / KEYS
        keys = read_keys(keys_file)
        if vectors.ndim != 2 or len(keys) != vectors.shape[0]:
            raise InputError(f"{vectors_path}: shape {vectors.shape} does not match {len(keys)} keys in {keys_file}")
        return Embedding(keys, vectors, vectors_path)

    def losses(self, index: int) -> list[float | None] | None:
        """Per-epoch losses of run ``index`` (None when the file says null or is absent)."""
        return read_losses(self.run_dir(index) / LOSSES)

    def key_counts(self) -> dict[str, int] | None:
        """Training frequency of every key (``key_counts.txt`` beside ``keys.txt``), or None
        when the run set does not record it (script runs, older run sets)."""
        path = self.root / KEY_COUNTS
        if not path.is_file():
            return None
        keys = read_keys(self.root / KEYS)
        try:
            counts = [int(line) for line in path.read_text(encoding="utf-8").split()]
        except (UnicodeDecodeError, ValueError):
            raise InputError(f"{path}: expected one non-negative integer per line") from None
        if len(counts) != len(keys) or any(c < 0 for c in counts):
            raise InputError(f"{path}: {len(counts)} counts for {len(keys)} keys in {self.root / KEYS}")
        return dict(zip(keys, counts, strict=False))

    def environment(self, index: int) -> dict[str, str] | None:
        """The environment run ``index`` was trained in (``stabcli.environment.capture`` in the
        training process), or None when the manifest does not record one (older run sets)."""
        entry = (self.manifest.get("runs") or {}).get(run_name(index))
        return read_recorded(entry.get("environment")) if isinstance(entry, dict) else None

    def checkpoints(self, index: int) -> list[Path]:
        """Per-epoch snapshot files of run ``index``, in epoch order."""
        return sorted((self.run_dir(index) / EPOCHS).glob("*.npy"))

    def checkpoint(self, index: int, epoch: int) -> Path:
        """The snapshot file of run ``index`` after ``epoch`` (1-based)."""
        return checkpoint_path(self.run_dir(index), epoch)


# ---------------------------------------------------------------- writing


def write_run(
    run: Path,
    vectors: np.ndarray,
    keys: Sequence[str],
    *,
    shared_keys: Sequence[str] | None = None,
    losses: list[float | None] | None = None,
    log: str | None = None,
    name: str | None = None,
) -> None:
    """Write one run's files into ``run`` (a partial directory of a trainer, or a run of a
    featurized run set): ``vectors.npy`` (float32), ``keys.txt`` unless the keys equal the
    run set's shared keys, ``losses.json`` and ``log.txt`` when given.

    Refuses (InputError) what the reader would reject: keys that are empty, hold
    whitespace or repeat, a row count that differs from the keys, non-finite values.
    """
    where = name or run.name
    vectors = np.asarray(vectors)
    if vectors.ndim != 2 or vectors.shape[0] != len(keys) or vectors.shape[0] == 0:
        raise InputError(f"{where}: {vectors.shape} vectors for {len(keys)} keys")
    if not np.isfinite(vectors).all():
        raise InputError(f"{where}: vectors contain NaN or infinite values")
    if shared_keys is None or list(keys) != list(shared_keys):
        check_keys(keys, where)
        write_text_atomic(run / KEYS, keys_text(list(keys)))
    with atomic_path(run / VECTORS) as tmp, open(tmp, "wb") as fh:
        np.save(fh, np.ascontiguousarray(vectors, dtype=np.float32))
    if losses is not None:
        write_text_atomic(run / LOSSES, json.dumps(check_losses(losses, f"{where} losses")) + "\n")
    if log is not None:
        write_text_atomic(run / LOG, log)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def prepare_out_dir(root: Path) -> None:
    """Create ``root`` for a pretrain, or accept it when it is a run set or holds only
    what stabcli writes (a setup killed before the manifest existed). A directory with
    any other file and no manifest is refused, naming one such file."""
    if (root.is_symlink() and not root.is_dir()) or (root.exists() and not root.is_dir()):
        raise UsageError(f"--out {root}: exists and is not a directory")
    if root.is_dir():
        if not (root / MANIFEST).exists():
            foreign = foreign_entries(root)
            if foreign:
                raise RunSetError(
                    f"{root}: directory exists, is not empty and is not a run set (it holds "
                    f"{foreign[0].name}); choose another --out"
                )
        check_entries(root)
        return
    try:
        root.mkdir(parents=True)
    except OSError as exc:
        raise UsageError(f"--out {root}: cannot create directory ({exc.strerror})") from None


class RunSetWriter:
    """Creates or resumes a run set: holds its lock, owns its manifest, publishes runs.

    Only the process holding the lock writes outside a partial directory: workers build a
    run inside the partial directory the writer hands them, and the writer verifies and
    publishes (renames) it.
    """

    def __init__(self, root: Path):
        self.root = root
        self.lock = RunSetLock(root)
        self.manifest: dict[str, Any] = {}
        self.attempt = new_attempt_id()

    def __enter__(self) -> RunSetWriter:
        prepare_out_dir(self.root)
        self.lock.__enter__()
        kill_orphans_of(str(self.root.resolve()))  # scripts of a pretrain killed by kill -9
        return self

    def __exit__(self, *exc: object) -> None:
        self.lock.__exit__(*exc)

    def open(self, identity: dict[str, Any], info: dict[str, Any], *, force: bool) -> dict[str, Any]:
        """Resume the manifest when its identity (config, corpus sha256, seed) matches;
        otherwise refuse, or with ``force`` remove stabcli's entries and start afresh.
        A directory with no manifest (new, or killed during setup) starts afresh."""
        now = _now()
        if (self.root / MANIFEST).exists():
            old = read_manifest(self.root)
            old_identity = {
                "config": old.get("config"),
                "corpus_sha256": (old.get("corpus") or {}).get("sha256"),
                "seed": old.get("seed"),
            }
            if old_identity == identity:
                old.update(updated=now, stabcli_version=info["stabcli_version"])
                if info.get("corpus"):
                    old["corpus"] = info["corpus"]
                old.setdefault("runs", {})
                self.manifest = old
                return old
            if not force:
                raise RunSetError(
                    f"{self.root}: made with a different configuration ({_describe_diff(old_identity, identity)}); "
                    "use --force to replace its runs, or another --out"
                )
        remove_stabcli_entries(self.root, keep=[LOCK])
        self.manifest = {
            "schema_version": SCHEMA_VERSION,
            **info,
            "created": now,
            "updated": now,
            "config": identity["config"],
            "seed": identity["seed"],
            "seeds": [],
            "runs": {},
        }
        self.save()
        return self.manifest

    def save(self) -> None:
        self.manifest["updated"] = _now()
        write_json_atomic(self.root / MANIFEST, self.manifest)

    def clear_leftovers(self, redo: Iterable[int]) -> None:
        """Remove every interrupted attempt (partial directories of any attempt), temporary
        files of interrupted atomic writes, and the failed runs about to be redone."""
        for path in sorted(self.root.iterdir()):
            if _PARTIAL_RE.match(path.name) or is_temp_name(path.name):
                _remove(path)
        for index in redo:
            if failed_dir(self.root, index).exists():
                _remove(failed_dir(self.root, index))

    def write_keys(self, keys: Sequence[str], counts: Sequence[int] | None = None) -> None:
        write_text_atomic(self.root / KEYS, keys_text(list(keys)))
        if counts is not None:
            write_text_atomic(self.root / KEY_COUNTS, "".join(f"{c}\n" for c in counts))

    def write_corpus_copy(self, data: bytes) -> Path:
        """The prepared corpus every run reads: written once atomically, never rewritten
        under a reader; an existing copy is kept when its bytes hash the same."""
        path = corpus_copy_path(self.root)
        digest = hashlib.sha256(data).hexdigest()
        if path.is_file() and not path.is_symlink() and _sha256(path) == digest:
            return path
        with atomic_path(path) as tmp:
            tmp.write_bytes(data)  # a new inode: a reader of an older copy keeps its bytes
        return path

    def remove_corpus_copy(self) -> None:
        corpus_copy_path(self.root).unlink(missing_ok=True)

    def discard_partials(self) -> None:
        """Remove the partial directories of this attempt that were not published."""
        for path in self.root.glob(f".run-*.partial-{self.attempt}"):
            _remove(path)

    def new_partial(self, index: int) -> Path:
        """An empty partial directory for run ``index`` belonging to this attempt alone."""
        path = partial_dir(self.root, index, self.attempt)
        path.mkdir()
        return path

    def publish(self, index: int, partial: Path) -> Path:
        """Verify that ``partial`` holds a readable run and rename it to ``run-NNN``."""
        (partial / PROGRESS).unlink(missing_ok=True)
        try:
            np.load(partial / VECTORS, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            raise RunSetError(f"{partial}: the run's vectors are unreadable ({exc})") from None
        final = run_dir(self.root, index)
        os.rename(partial, final)
        return final

    def fail(self, index: int, partial: Path) -> Path:
        """Keep a failed run's partial directory as ``run-NNN.failed`` for its log."""
        (partial / PROGRESS).unlink(missing_ok=True)
        failed = failed_dir(self.root, index)
        if failed.exists():
            _remove(failed)
        if partial.is_dir():
            os.rename(partial, failed)
        return failed

    def record(self, index: int, entry: dict[str, Any]) -> None:
        self.manifest["runs"][run_name(index)] = entry
        self.save()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _describe_diff(old: dict, new: dict) -> str:
    flat_old = {**(old.get("config") or {}), "corpus sha256": old["corpus_sha256"], "seed": old["seed"]}
    flat_new = {**(new["config"] or {}), "corpus sha256": new["corpus_sha256"], "seed": new["seed"]}
    diffs = [f"{k} {flat_old.get(k)!r} → {flat_new.get(k)!r}" for k in flat_new if flat_old.get(k) != flat_new.get(k)]
    diffs += [f"{k} {flat_old[k]!r} → unset" for k in flat_old if k not in flat_new]
    return ", ".join(diffs[:4]) or "unknown difference"


class RunSetLock:
    """An exclusive ``stabcli.lock``: a file holding the writer's pid, ``flock``-ed by it.

    Whether the owner lives is the ``flock`` (the kernel drops it when the owner dies, even
    by ``kill -9``), never its pid, which a dead owner's successor may reuse. A stale lock
    is removed only by a process that holds its ``flock``, and a lock counts only while it
    is still the file at ``stabcli.lock``, so two pretrains racing for a stale lock never
    both win. The file is never written through a link: a new one is created each time.
    """

    def __init__(self, root: Path):
        self.path = root / LOCK
        self._fd: int | None = None

    def __enter__(self) -> RunSetLock:
        if self.path.is_dir() and not self.path.is_symlink():
            raise RunSetError(f"{self.path}: expected a lock file, found a directory; move it away")
        for _ in range(50):
            created = True
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o644)
            except FileExistsError:
                created = False
                try:
                    fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
                except FileNotFoundError:
                    continue  # removed meanwhile: try again
                except OSError as exc:  # a symlink (ELOOP), a FIFO...
                    raise RunSetError(
                        f"{self.path}: not a lock file stabcli wrote ({exc.strerror}); move it away"
                    ) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                if created:
                    continue  # another pretrain is removing this file as stale: try again
                owner = _lock_owner(self.path)
                raise RunSetError(
                    f"{self.path.parent}: another stabcli{f' (pid {owner})' if owner else ''} is writing this run set; "
                    "wait for it to finish"
                ) from None
            if not _same_file(fd, self.path):  # removed (as stale) between our open and our flock
                os.close(fd)
                continue
            if not created:  # stale: its owner died; we hold its flock, so no one else takes it meanwhile
                self.path.unlink()
                os.close(fd)
                continue
            os.write(fd, f"{os.getpid()}\n".encode())
            self._fd = fd
            return self
        raise RunSetError(f"{self.path}: could not take the lock")

    def __exit__(self, *exc: object) -> None:
        if self._fd is None:
            return
        if _same_file(self._fd, self.path):
            self.path.unlink(missing_ok=True)
        os.close(self._fd)  # releases the flock
        self._fd = None


def _same_file(fd: int, path: Path) -> bool:
    try:
        here, there = os.fstat(fd), os.lstat(path)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def _lock_owner(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None
