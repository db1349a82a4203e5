"""Writing a run set: the lock, the manifest, the runs (built in partial directories, then published).

Only the process holding the lock writes outside a partial directory: training workers
build a run inside the partial directory the writer hands them (:func:`write_run`), and
the writer verifies and publishes (renames) it. ``pretrain`` writes run sets this way, and
so does ``featurize`` for a featurized run set (into its output's temporary directory).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from stabcli.errors import InputError, RunSetError, UsageError, quote
from stabcli.fs.atomic import atomic_path, file_sha256, is_temp_name, write_json_atomic, write_text_atomic
from stabcli.inputs.embeddings import keys_text
from stabcli.runset.layout import (
    CORPUS_COUNTS,
    KEY_COUNTS,
    KEYS,
    LOCK,
    LOG,
    LOSSES,
    MANIFEST,
    PROGRESS,
    SCHEMA_VERSION,
    VECTORS,
    check_entries,
    corpus_copy_path,
    failed_dir,
    foreign_entries,
    is_partial_name,
    new_attempt_id,
    partial_dir,
    remove_entry,
    remove_stabcli_entries,
    run_dir,
    run_name,
)
from stabcli.runset.manifest import check_losses, describe_difference, identity, now, read_manifest, same_identity


def check_keys(keys: Sequence[str], where: str) -> None:
    """Refuse keys the run-set reader would reject: empty, with whitespace, or repeated."""
    seen: set[str] = set()
    for key in keys:
        if not isinstance(key, str) or not key:
            raise InputError(f"{where}: empty key")
        if any(ch.isspace() for ch in key):
            raise InputError(f"{where}: key {quote(key)} contains whitespace")
        if key in seen:
            raise InputError(f"{where}: key {quote(key)} occurs twice")
        seen.add(key)


def write_run(
    run: Path,
    vectors: np.ndarray | Callable[[BinaryIO], None],
    keys: Sequence[str],
    *,
    shared_keys: Sequence[str] | None = None,
    losses: list[float | None] | None = None,
    log: str | None = None,
    name: str | None = None,
) -> None:
    """Write one run's files into ``run`` (a partial directory): ``vectors.npy`` (float32),
    ``keys.txt`` unless the keys equal the run set's shared keys, ``losses.json`` and
    ``log.txt`` when given.

    ``vectors`` is an array, or a function that streams a float32 ``.npy`` of ``len(keys)``
    finite rows into the file it is given (``featurize``, a chunk at a time).

    Refuses (InputError) what the reader would reject: keys that are empty, hold
    whitespace or repeat, a row count that differs from the keys, non-finite values.
    """
    where = name or run.name
    if not callable(vectors):
        vectors = np.asarray(vectors)
        if vectors.ndim != 2 or vectors.shape[0] != len(keys) or vectors.shape[0] == 0:
            raise InputError(f"{where}: {vectors.shape} vectors for {len(keys)} keys")
        if not np.isfinite(vectors).all():
            raise InputError(f"{where}: vectors contain NaN or infinite values")
    if shared_keys is None or list(keys) != list(shared_keys):
        check_keys(keys, where)
        write_text_atomic(run / KEYS, keys_text(list(keys)))
    with atomic_path(run / VECTORS) as tmp, open(tmp, "wb") as fh:
        if callable(vectors):
            vectors(fh)
        else:
            np.save(fh, np.ascontiguousarray(vectors, dtype=np.float32))
    if losses is not None:
        write_text_atomic(run / LOSSES, json.dumps(check_losses(losses, f"{where} losses")) + "\n")
    if log is not None:
        write_text_atomic(run / LOG, log)


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
        return self

    def __exit__(self, *exc: object) -> None:
        self.lock.__exit__(*exc)

    def open(self, identity_: dict[str, Any], info: dict[str, Any], *, force: bool) -> dict[str, Any]:
        """Resume the manifest when its identity (config, corpus sha256, seed) matches;
        otherwise refuse, or with ``force`` remove stabcli's entries and start afresh.
        A directory with no manifest (new, or killed during setup) starts afresh."""
        if (self.root / MANIFEST).exists():
            old = read_manifest(self.root)
            old_identity = identity(old)
            if same_identity(old_identity, identity_):
                old.update(updated=now(), stabcli_version=info["stabcli_version"])
                if info.get("corpus"):
                    old["corpus"] = info["corpus"]
                old.setdefault("runs", {})
                self.manifest = old
                return old
            if not force:
                raise RunSetError(
                    f"{self.root}: made with a different configuration "
                    f"({describe_difference(old_identity, identity_)}); use --force to replace its runs, or another --out"
                )
        remove_stabcli_entries(self.root, keep=[LOCK])
        created = now()
        return self.create(
            {
                **info,
                "created": created,
                "updated": created,
                "config": identity_["config"],
                "seed": identity_["seed"],
                "seeds": [],
                "runs": {},
            }
        )

    def create(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Start a new run set with ``manifest`` (a derived run set's: ``featurize``)."""
        self.manifest = {"schema_version": SCHEMA_VERSION, **manifest}
        self.manifest.setdefault("created", now())
        self.save()
        return self.manifest

    def save(self) -> None:
        self.manifest["updated"] = now()
        write_json_atomic(self.root / MANIFEST, self.manifest)

    def clear_leftovers(self, redo: Iterable[int]) -> None:
        """Remove every interrupted attempt (partial directories of any attempt), temporary
        files of interrupted atomic writes, and the failed runs about to be redone."""
        for path in sorted(self.root.iterdir()):
            if is_partial_name(path.name) or is_temp_name(path.name):
                remove_entry(path)
        for index in redo:
            if failed_dir(self.root, index).exists():
                remove_entry(failed_dir(self.root, index))

    def write_keys(self, keys: Sequence[str], counts: Sequence[int] | None = None) -> None:
        write_text_atomic(self.root / KEYS, keys_text(list(keys)))
        if counts is not None:
            write_text_atomic(self.root / KEY_COUNTS, "".join(f"{c}\n" for c in counts))

    def write_corpus_counts(self, counts: Mapping[str, int]) -> None:
        """Every corpus key's count (``--script`` run sets, whose runs bring their own keys)."""
        write_text_atomic(self.root / CORPUS_COUNTS, "".join(f"{c}\t{k}\n" for k, c in counts.items()))

    def write_corpus_copy(self, data: bytes) -> Path:
        """The prepared corpus every run reads: written once atomically, never rewritten
        under a reader; an existing copy is kept when its bytes hash the same."""
        path = corpus_copy_path(self.root)
        digest = hashlib.sha256(data).hexdigest()
        if path.is_file() and not path.is_symlink() and file_sha256(path) == digest:
            return path
        with atomic_path(path) as tmp:
            tmp.write_bytes(data)  # a new inode: a reader of an older copy keeps its bytes
        return path

    def remove_corpus_copy(self) -> None:
        corpus_copy_path(self.root).unlink(missing_ok=True)

    def discard_partials(self) -> None:
        """Remove the partial directories of this attempt that were not published."""
        for path in sorted(self.root.iterdir()):
            if is_partial_name(path.name, self.attempt):
                remove_entry(path)

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
            remove_entry(failed)
        if partial.is_dir():
            os.rename(partial, failed)
        return failed

    def record(self, index: int, entry: dict[str, Any]) -> None:
        self.manifest["runs"][run_name(index)] = entry
        self.save()


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
            fd, created = self._open()
            if fd is None:
                continue  # removed meanwhile: try again
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

    def _open(self) -> tuple[int | None, bool]:
        """(descriptor, created): a new lock file, or the existing one (None when it vanished)."""
        try:
            return os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o644), True
        except FileExistsError:
            pass
        try:
            return os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK), False
        except FileNotFoundError:
            return None, False
        except OSError as exc:  # a symlink (ELOOP), a FIFO...
            raise RunSetError(f"{self.path}: not a lock file stabcli wrote ({exc.strerror}); move it away") from None

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
