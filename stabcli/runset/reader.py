"""Reading a run set: its finished runs, their keys and vectors, losses, key counts, checkpoints."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stabcli.environment import read_recorded
from stabcli.errors import InputError
from stabcli.inputs.embeddings import Embedding, load_npy, read_keys, require_real_dtype
from stabcli.runset.layout import (
    CORPUS_COUNTS,
    EPOCHS,
    KEY_COUNTS,
    KEYS,
    LOG,
    LOSSES,
    MANIFEST,
    VECTORS,
    check_entries,
    checkpoint_path,
    is_runset,
    run_dir,
    run_index,
    run_name,
)
from stabcli.runset.manifest import read_losses, read_manifest


def complete_runs(root: Path) -> list[int]:
    """Indices of finished runs (directories named exactly ``run-NNN``), ascending."""
    found = []
    for entry in root.iterdir() if root.is_dir() else []:
        index = run_index(entry.name)
        if index is not None and entry.is_dir():
            found.append(index)
    return sorted(found)


@dataclass
class RunSet:
    """A finished or partial run set read from disk."""

    root: Path
    manifest: dict[str, Any]
    runs: list[int]
    # keys files read so far: runs sharing ``keys.txt`` share one list (read once, matched by identity)
    _keys_read: dict[Path, list[str]] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def open(cls, root: str | Path) -> RunSet:
        root = Path(root)
        manifest = read_manifest(root)
        check_entries(root, writing=False)
        return cls(root, manifest, complete_runs(root))

    @classmethod
    def open_finished(cls, path: Path) -> RunSet:
        """The run set at ``path`` with at least one finished run, or InputError naming it."""
        if not is_runset(path):
            raise InputError(f"{path}: a directory but not a run set (no {MANIFEST})")
        runset = cls.open(path)
        if not runset.runs:
            raise InputError(f"{path}: the run set has no finished run")
        return runset

    def run_dir(self, index: int) -> Path:
        return run_dir(self.root, index)

    def shared_keys(self) -> list[str] | None:
        """The keys of ``keys.txt`` shared by runs without their own, or None without one."""
        path = self.root / KEYS
        return self.keys_in(path) if path.is_file() else None

    def keys_in(self, path: Path) -> list[str]:
        """The keys of the keys file ``path``, read once per run set (the same list after)."""
        if path not in self._keys_read:
            self._keys_read[path] = read_keys(path)
        return self._keys_read[path]

    def load(self, index: int) -> Embedding:
        """Keys and memory-mapped float32 vectors of run ``index``."""
        run = self.run_dir(index)
        vectors_path = run / VECTORS
        vectors = load_npy(vectors_path)
        require_real_dtype(vectors_path, vectors)
        own_keys = run / KEYS
        keys_file = own_keys if own_keys.is_file() else self.root / KEYS
        keys = self.keys_in(keys_file)
        if vectors.ndim != 2 or len(keys) != vectors.shape[0]:
            raise InputError(f"{vectors_path}: shape {vectors.shape} does not match {len(keys)} keys in {keys_file}")
        return Embedding(keys, vectors, vectors_path)

    def losses(self, index: int) -> list[float | None] | None:
        """Per-epoch losses of run ``index`` (None when the file says null or is absent)."""
        return read_losses(self.run_dir(index) / LOSSES)

    def log(self, index: int) -> str | None:
        """The trainer's output of run ``index`` (None when absent)."""
        path = self.run_dir(index) / LOG
        return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else None

    def key_counts(self) -> dict[str, int] | None:
        """Training frequency of every key (``key_counts.txt`` beside ``keys.txt``), or None
        when the run set does not record it (older run sets). A ``--script`` run set records
        the counts of every key of its corpus (``corpus_counts.tsv``) instead."""
        path = self.root / KEY_COUNTS
        if not path.is_file():
            return self._corpus_counts()
        keys = self.keys_in(self.root / KEYS)
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

    def _corpus_counts(self) -> dict[str, int] | None:
        path = self.root / CORPUS_COUNTS
        if not path.is_file():
            return None
        counts = {}
        try:
            for line in path.read_text(encoding="utf-8").splitlines():
                count, key = line.split("\t", 1)
                counts[key] = int(count)
        except (UnicodeDecodeError, ValueError):
            raise InputError(f"{path}: expected 'count<TAB>key' lines") from None
        return counts

    def checkpoints(self, index: int) -> list[Path]:
        """Per-epoch snapshot files of run ``index``, in epoch order."""
        return sorted((self.run_dir(index) / EPOCHS).glob("*.npy"))

    def checkpoint(self, index: int, epoch: int) -> Path:
        """The snapshot file of run ``index`` after ``epoch`` (1-based)."""
        return checkpoint_path(self.run_dir(index), epoch)
