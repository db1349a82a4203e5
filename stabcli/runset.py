"""Run sets: the on-disk contract between commands (SPEC section 3).

::

    runs/exp1/
      stabcli.json      manifest (schema version, versions, config, corpus sha256, runs)
      keys.txt          keys shared by every run without a keys.txt of its own
      key_counts.txt    how often each key of keys.txt occurs in the corpus (one integer per line)
      stabcli.lock      present while a pretrain writes here (holds its pid)
      run-000/
        vectors.npy     float32 [n, d]
        keys.txt        only when this run's keys differ from the shared keys.txt
        losses.json     per-epoch training loss, null where the trainer reports none
        epochs/001.npy  per-epoch snapshots (--checkpoints)
        log.txt         trainer / script output

A run directory is built under ``.run-000.partial`` and renamed to ``run-000`` only when
complete, so a directory named ``run-NNN`` is always a finished run. A failed run is kept
as ``run-000.failed`` for its log and is redone on the next pretrain.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from stabcli.embeddings import Embedding, load_npy, read_keys, require_real_dtype
from stabcli.errors import InputError, RunSetError

SCHEMA_VERSION = 1
MANIFEST = "stabcli.json"
KEYS = "keys.txt"
LOCK = "stabcli.lock"
KEY_COUNTS = "key_counts.txt"  # per-key token counts of the training corpus, one per line in keys.txt order
_RUN_RE = re.compile(r"^run-(\d{3,})$")


def run_name(index: int) -> str:
    return f"run-{index:03d}"


def partial_dir(root: Path, index: int) -> Path:
    return root / f".{run_name(index)}.partial"


def failed_dir(root: Path, index: int) -> Path:
    return root / f"{run_name(index)}.failed"


def is_runset(path: Path) -> bool:
    return path.is_dir() and (path / MANIFEST).is_file()


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON to a temporary file in the same directory, fsync, then rename over ``path``."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2, sort_keys=False)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def read_manifest(root: Path) -> dict[str, Any]:
    """The manifest of run set ``root``; a clear error when missing, corrupt or too new."""
    path = root / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{root}: not a run set (no {MANIFEST})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RunSetError(f"{path}: corrupted manifest ({exc})") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("schema_version"), int):
        raise RunSetError(f"{path}: corrupted manifest (no schema_version)")
    if manifest["schema_version"] > SCHEMA_VERSION:
        raise RunSetError(
            f"{path}: schema version {manifest['schema_version']} is newer than this stabcli understands "
            f"({SCHEMA_VERSION}); upgrade stabcli"
        )
    return manifest


def complete_runs(root: Path) -> list[int]:
    """Indices of finished runs (directories named exactly ``run-NNN``), ascending."""
    found = []
    for entry in root.iterdir() if root.is_dir() else []:
        match = _RUN_RE.match(entry.name)
        if match and entry.is_dir():
            found.append(int(match.group(1)))
    return sorted(found)


def clear_leftovers(root: Path, redo: list[int]) -> None:
    """Remove every interrupted attempt (``.run-NNN.partial``), temporary files of interrupted
    atomic writes (``.NAME.tmp-PID``) and the failed runs about to be redone.

    Only call while holding the run set's lock: nobody else is writing then.
    """
    for path in root.glob(".run-*.partial"):
        shutil.rmtree(path)
    for path in root.glob(".*.tmp-*"):
        path.unlink()
    for index in redo:
        if failed_dir(root, index).exists():
            shutil.rmtree(failed_dir(root, index))


def finish_run(root: Path, index: int) -> Path:
    """Atomically publish the partial directory of run ``index`` under its final name."""
    final = root / run_name(index)
    os.replace(partial_dir(root, index), final)
    return final


class RunSetLock:
    """An exclusive ``stabcli.lock`` holding the writer's pid; a stale lock is taken over."""

    def __init__(self, root: Path):
        self.path = root / LOCK

    def __enter__(self) -> "RunSetLock":
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                owner = _lock_owner(self.path)
                if owner is not None and _pid_alive(owner):
                    raise RunSetError(
                        f"{self.path.parent}: another stabcli (pid {owner}) is writing this run set; "
                        f"wait for it, or remove {self.path} if that process is gone"
                    ) from None
                self.path.unlink(missing_ok=True)  # stale: its owner died
                continue
            with os.fdopen(fd, "w") as fh:
                fh.write(f"{os.getpid()}\n")
            return self
        raise RunSetError(f"{self.path}: could not take the lock")

    def __exit__(self, *exc: object) -> None:
        self.path.unlink(missing_ok=True)


def _lock_owner(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class RunSet:
    """A finished or partial run set read from disk."""

    root: Path
    manifest: dict[str, Any]
    runs: list[int]

    @classmethod
    def open(cls, root: str | Path) -> "RunSet":
        root = Path(root)
        manifest = read_manifest(root)
        return cls(root, manifest, complete_runs(root))

    def run_dir(self, index: int) -> Path:
        return self.root / run_name(index)

    def load(self, index: int) -> Embedding:
        """Keys and memory-mapped float32 vectors of run ``index``."""
        run = self.run_dir(index)
        vectors_path = run / "vectors.npy"
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
        path = self.run_dir(index) / "losses.json"
        if not path.is_file():
            return None
        try:
            losses = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}: not valid JSON ({exc})") from None
        if losses is not None and not (isinstance(losses, list) and all(v is None or isinstance(v, (int, float)) for v in losses)):
            raise InputError(f"{path}: expected a list of per-epoch losses (numbers or null)")
        return losses

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
        return dict(zip(keys, counts))

    def checkpoints(self, index: int) -> list[Path]:
        """Per-epoch snapshot files of run ``index``, in epoch order."""
        return sorted((self.run_dir(index) / "epochs").glob("*.npy"))
