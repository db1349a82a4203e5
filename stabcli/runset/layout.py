"""The run-set layout: the one module that spells a run set's names and decides what stabcli wrote.

::

    runs/exp1/
      stabcli.json      manifest (schema version, versions, config, corpus sha256, runs)
      keys.txt          keys shared by every run without a keys.txt of its own
      key_counts.txt    how often each key of keys.txt occurs in the corpus (one integer per line)
      corpus_counts.tsv --script run sets: "count<TAB>key" for every key of the corpus stabcli parsed
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
``run-000.failed`` for its log and is redone on the next pretrain. Temporary names of
atomic writes (``stabcli.fs.atomic.temp_path``) may appear anywhere.

Everything else in the directory belongs to the user: stabcli never removes it.
:func:`entry_kind` is the one predicate that says which is which; :func:`owned` is its
form for ``OutputPlan``.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import Any

from stabcli.errors import RunSetError, UsageError
from stabcli.fs.atomic import is_temp_name

SCHEMA_VERSION = 1
MANIFEST = "stabcli.json"
KEYS = "keys.txt"
LOCK = "stabcli.lock"
KEY_COUNTS = "key_counts.txt"  # per-key token counts of the training corpus, one per line in keys.txt order
CORPUS_COUNTS = "corpus_counts.tsv"  # --script run sets: "count<TAB>key" for every key of the corpus stabcli parsed
CORPUS_COPY = ".corpus.txt"
VECTORS = "vectors.npy"
LOSSES = "losses.json"
LOG = "log.txt"
EPOCHS = "epochs"
PROGRESS = "progress"  # epochs done so far, written by a training run into its partial directory

_RUN_RE = re.compile(r"^run-(\d{3,})$")
_PARTIAL_RE = re.compile(r"^\.run-(\d{3,})\.partial(-[0-9a-z]+)?$")
_FAILED_RE = re.compile(r"^run-(\d{3,})\.failed$")
_CHECKPOINT_RE = re.compile(r"^\d+\.npy$")
_TOP_FILES = {MANIFEST, KEYS, KEY_COUNTS, CORPUS_COUNTS, CORPUS_COPY, LOCK}
_RUN_FILES = {VECTORS, KEYS, LOSSES, LOG, PROGRESS}


# ---------------------------------------------------------------- names


def run_name(index: int) -> str:
    return f"run-{index:03d}"


def run_index(name: str) -> int | None:
    """The index of a finished run's directory name (``run-007`` → 7), else None."""
    match = _RUN_RE.match(name)
    return int(match.group(1)) if match else None


def run_dir(root: Path, index: int) -> Path:
    return root / run_name(index)


def partial_dir(root: Path, index: int, attempt: str | None = None) -> Path:
    """Where run ``index`` is built; ``attempt`` names the pretrain that builds it."""
    return root / (f".{run_name(index)}.partial" + (f"-{attempt}" if attempt else ""))


def is_partial_name(name: str, attempt: str | None = None) -> bool:
    """Whether ``name`` is a partial run directory (of ``attempt`` when given)."""
    match = _PARTIAL_RE.match(name)
    return match is not None and (attempt is None or match.group(2) == f"-{attempt}")


def failed_dir(root: Path, index: int) -> Path:
    return root / f"{run_name(index)}.failed"


def checkpoint_path(run: Path, epoch: int) -> Path:
    return run / EPOCHS / f"{epoch:03d}.npy"


def corpus_copy_path(root: Path) -> Path:
    return root / CORPUS_COPY


def new_attempt_id() -> str:
    """A name no other pretrain (alive or dead) uses for its partial directories."""
    return f"{os.getpid()}x{secrets.token_hex(4)}"


# ---------------------------------------------------------------- what stabcli wrote


def entry_kind(rel: str | PurePosixPath) -> str | None:
    """What stabcli writes at ``rel`` (a path relative to a run set's root): ``"dir"``,
    ``"file"``, ``"temp"`` (a temporary name, either kind), or None when the entry is not
    stabcli's (the user's, which stabcli never touches).

    Inside a finished run only the run's files are stabcli's; a partial or failed run is a
    training attempt's work area and belongs to stabcli whole.
    """
    parts = PurePosixPath(rel).parts
    if not parts:
        return None
    if is_temp_name(parts[-1]):
        return "temp"
    top = parts[0]
    if len(parts) == 1:
        if _RUN_RE.match(top) or _PARTIAL_RE.match(top) or _FAILED_RE.match(top):
            return "dir"
        return "file" if top in _TOP_FILES else None
    if _PARTIAL_RE.match(top) or _FAILED_RE.match(top):
        return "any"
    if not _RUN_RE.match(top):
        return None
    if len(parts) == 2:
        return "dir" if parts[1] == EPOCHS else ("file" if parts[1] in _RUN_FILES else None)
    return "file" if len(parts) == 3 and parts[1] == EPOCHS and _CHECKPOINT_RE.match(parts[2]) else None


def owned(rel: PurePosixPath, is_dir: bool) -> bool:
    """Whether stabcli writes the entry ``rel`` of a run set as a directory (``is_dir``) or
    file: :func:`entry_kind` for ``stabcli.fs.outputs.OutputPlan`` (``--force``)."""
    kind = entry_kind(rel)
    return kind in ("temp", "any") or kind == ("dir" if is_dir else "file")


def is_runset(path: Path) -> bool:
    return path.is_dir() and (path / MANIFEST).is_file()


def enclosing_runset(path: str | Path) -> Path | None:
    """The run set holding ``path`` (a run's vectors, checkpoint, keys or losses), resolved,
    or None: the directory above a ``run-NNN/`` (or partial, failed) folder that holds a
    manifest. Reading one run's file makes its whole run set an input."""
    real = Path(os.path.realpath(path))
    for folder in real.parents:
        if entry_kind(folder.name) == "dir" and (folder.parent / MANIFEST).is_file():
            return folder.parent
    return None


def foreign_entries(root: Path) -> list[Path]:
    """Top-level entries of ``root`` that stabcli did not write (sorted)."""
    return sorted(p for p in root.iterdir() if entry_kind(p.name) is None)


def check_entries(root: Path, *, writing: bool = True) -> None:
    """Refuse a run set whose stabcli names hold the wrong kind of entry (``run-002`` a file,
    the lock a directory), or, when ``writing``, a symlink, which stabcli never writes (a
    reader follows one to a run of the right kind)."""
    for path in sorted(root.iterdir()):
        kind = entry_kind(path.name)
        if kind is None or kind == "temp":
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


# ---------------------------------------------------------------- removing


def remove_stabcli_entries(root: Path, *, keep: Iterable[str] = ()) -> None:
    """Remove what stabcli writes in ``root`` (runs, partial and failed runs, manifest, keys,
    counts, corpus copy, its temporary files), never following a symlink; every other
    entry stays where it is. Names in ``keep`` (the lock we hold) stay too."""
    kept = set(keep)
    for path in sorted(root.iterdir()):
        if path.name in kept or entry_kind(path.name) is None:
            continue
        remove_entry(path)


def remove_entry(path: Path) -> None:
    """Remove a file, symlink or directory tree (never following symlinks); gone already is fine."""
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, onerror=_ignore_vanished)  # rmtree never follows symlinks inside


def _ignore_vanished(function: Any, path: str, exc_info: Any) -> None:
    if not isinstance(exc_info[1], FileNotFoundError):
        raise exc_info[1]
