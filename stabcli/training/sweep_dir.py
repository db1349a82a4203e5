"""Training a sweep: the sweep directory (its lock, manifest and corpus samples), each cell
and swap-one run trained through :func:`stabcli.training.pretrain.pretrain` as an ordinary
run set. The layout is drawn in :mod:`stabcli.commands.sweep`."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from stabcli.errors import RunSetError, UsageError
from stabcli.fs.atomic import atomic_path, file_sha256, write_json_atomic
from stabcli.inputs.corpus import Corpus, CorpusOptions
from stabcli.runset.layout import check_removable_runset, is_runset, remove_stabcli_entries
from stabcli.runset.manifest import load_json
from stabcli.runset.writer import RunSetLock
from stabcli.training import sweep_plan as plan
from stabcli.training.pretrain import Backend, TrainConfig, pretrain

MANIFEST = "sweep.json"
CORPORA, CELLS, SWAP = "corpora", "cells", "swap"
_OWNED_TOP = re.compile(rf"^({CORPORA}|{CELLS}|{SWAP}|{re.escape(MANIFEST)}|stabcli\.lock)$")


@dataclass
class Trained:
    seconds: float | None


# one cell or swap-one run: (run set, corpus sample, config, runs, seed, what) → its training time
TrainOne = Callable[[Path, Path, TrainConfig, int, int, str], Trained]


def check_outputs(out: str | Path, inputs: Sequence[str | Path], outputs: Sequence[str | Path]) -> None:
    """UsageError when an input or a report output lies where the sweep writes (its samples,
    cells, swap-one runs, manifest): training would overwrite or delete it. Anything else
    inside ``out`` is fine (``--json OUT/report.json``)."""
    real = Path(os.path.realpath(out))
    for kind, paths in (("input", inputs), ("output", outputs)):
        for path in paths:
            try:
                relative = Path(os.path.realpath(path)).relative_to(real)
            except ValueError:
                continue
            if not relative.parts or _OWNED_TOP.match(relative.parts[0]):
                raise UsageError(
                    f"{path}: the {kind} lies where the sweep writes in --out {out}; move it or choose another --out"
                )


def train_one(
    root: Path,
    corpus: Path,
    config: TrainConfig,
    runs: int,
    seed: int,
    what: str,
    *,
    jobs: int | None,
    force: bool,
    tagged: bool,
    backend: Backend,
    timeout: float | None,
) -> Trained:
    """One cell (or swap-one run) through pretrain: resumed, or replaced with ``force``."""
    result = pretrain(
        root,
        corpus,
        config,
        runs=runs,
        seed=seed,
        jobs=jobs,
        force=force,
        corpus_options=CorpusOptions(format="tagged" if tagged else "lines"),
        timeout=timeout,
        backend=backend,
    )
    if result.failed:
        first = result.failed[0]
        raise RunSetError(f"{what}: {len(result.failed)} run(s) failed; {first.error}")
    seconds = [r.seconds for r in result.runs]
    return Trained(None if any(s is None for s in seconds) else float(sum(s for s in seconds if s is not None)))


def prepared_lines(corpus: Corpus) -> list[bytes]:
    return corpus.token_lines().splitlines(keepends=True)


def _sample(lines: list[bytes], indices: Sequence[int] | np.ndarray) -> bytes:
    return b"".join(lines[int(i)] for i in indices)


class SweepDir:
    """The sweep directory: created or resumed under its lock; refuses a directory that is
    not a sweep (unless empty) and, without ``force``, a sweep of another corpus or seed."""

    def __init__(self, root: Path, identity: dict[str, Any], force: bool):
        self.root, self.identity, self.force = root, identity, force
        self.lock = RunSetLock(root)

    def __enter__(self) -> SweepDir:
        root = self.root
        if root.exists() and not root.is_dir():
            raise UsageError(f"--out {root}: exists and is not a directory")
        if root.is_dir() and not (root / MANIFEST).is_file():
            foreign = sorted(p.name for p in root.iterdir() if not _OWNED_TOP.match(p.name))
            if foreign:
                raise RunSetError(f"--out {root}: not a sweep directory (it holds {foreign[0]}); choose another --out")
        root.mkdir(parents=True, exist_ok=True)
        self.lock.__enter__()
        try:
            self._open()
        except BaseException:
            self.lock.__exit__(None, None, None)
            raise
        return self

    def _open(self) -> None:
        path = self.root / MANIFEST
        if path.is_file():
            try:
                old = load_json(path)
            except (OSError, ValueError) as exc:
                raise RunSetError(f"{path}: unreadable sweep manifest ({exc})") from None
            if old != self.identity:
                if not self.force:
                    changed = [k for k in self.identity if not isinstance(old, dict) or old.get(k) != self.identity[k]]
                    raise RunSetError(
                        f"--out {self.root}: a sweep of another {' and '.join(changed) or 'kind'}; "
                        "use --force to replace it, or another --out"
                    )
                self._remove_old()
        write_json_atomic(path, self.identity)

    def _remove_old(self) -> None:
        """Everything an earlier sweep wrote here, refusing a run set holding a user's file."""
        for group in (CELLS, SWAP):
            for runset in sorted(p for p in (self.root / group).rglob("*") if is_runset(p)):
                check_removable_runset(runset)  # a user's file inside: refused, nothing removed
                remove_stabcli_entries(runset)
                runset.rmdir()
        for sample in sorted((self.root / SWAP).glob("size-*/pair-*.txt")):
            sample.unlink()
        if (self.root / CORPORA).is_dir():
            shutil.rmtree(self.root / CORPORA)  # only the samples this command writes live there

    def __exit__(self, *exc: object) -> None:
        self.lock.__exit__(*exc)

    def corpus(self, label: str) -> Path:
        return self.root / CORPORA / f"{label}.txt"

    def cell(self, name: str) -> Path:
        (self.root / CELLS).mkdir(exist_ok=True)
        return self.root / CELLS / name

    def swap(self, label: str) -> Path:
        path = self.root / SWAP / label
        path.mkdir(parents=True, exist_ok=True)
        return path

    def write_corpus(self, label: str, data: bytes) -> None:
        (self.root / CORPORA).mkdir(exist_ok=True)
        self.write_file(self.corpus(label), data)

    def write_file(self, path: Path, data: bytes) -> None:
        """Written atomically, and only when its bytes change (a resumed cell keeps its input)."""
        if path.is_file() and file_sha256(path) == hashlib.sha256(data).hexdigest():
            return
        with atomic_path(path) as tmp:
            tmp.write_bytes(data)


def train_cells(
    directory: SweepDir,
    prepared: list[bytes],
    order: np.ndarray,
    cells: Sequence[plan.Cell],
    sizes: Sequence[float],
    runs: int,
    seed: int,
    train: TrainOne,
    step: Callable[[str], None],
) -> dict[str, Trained]:
    """Write each size's nested sample, then train every cell (grid × sizes) on its sample."""
    for size in sizes:
        directory.write_corpus(plan.size_label(size), _sample(prepared, plan.sample_indices(order, size)))
    trained: dict[str, Trained] = {}
    for i, cell in enumerate(cells, 1):
        step(f"training cell {i}/{len(cells)}: {cell.name}")
        corpus_file = directory.corpus(plan.size_label(cell.size))
        trained[cell.name] = train(directory.cell(cell.name), corpus_file, cell.config, runs, seed, cell.name)
    return trained


def train_swap_one(
    directory: SweepDir,
    prepared: list[bytes],
    order: np.ndarray,
    sizes: Sequence[float],
    pairs: int,
    seed: int,
    config: TrainConfig,
    train: TrainOne,
    step: Callable[[str], None],
) -> dict[float, tuple[Path, list[Path]]]:
    """--swap-one: per size, one run on the sample and one on each sample with a sequence swapped."""
    swap_config = plan.cells({}, [1.0], config)[0].config
    swap_sets: dict[float, tuple[Path, list[Path]]] = {}
    for size in sizes:
        label = plan.size_label(size)
        inside = plan.sample_indices(order, size)
        base = directory.swap(label) / "base"
        step(f"swap-one {label}: base run")
        train(base, directory.corpus(label), swap_config, 1, seed, f"swap {label} base")
        runs = []
        for j, swap in enumerate(plan.swaps(order, size, pairs, seed)):
            text = directory.swap(label) / f"pair-{j:03d}.txt"
            directory.write_file(text, _sample(prepared, plan.swapped(inside, swap)))
            step(f"swap-one {label}: pair {j + 1}/{pairs}")
            pair = directory.swap(label) / f"pair-{j:03d}"
            train(pair, text, swap_config, 1, seed, f"swap {label} pair {j}")
            runs.append(pair)
        swap_sets[size] = (base, runs)
    return swap_sets
