"""``stabcli audit``'s inputs: the options, the runs aligned on their common keys, and the
checks that need both (``knn_k`` below the number of keys, memory for ``pairs``, frequencies,
the ``--eis-anchor`` file)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from stabcli.constraints import AUDIT_OPTIONS, Constraint, validate_params
from stabcli.environment import EnvironmentDifference, differences
from stabcli.errors import InputError, OptionError, UsageError
from stabcli.fs.resources import require_memory
from stabcli.inputs.embeddings import ReadOptions, match_inputs
from stabcli.measure import metrics as m
from stabcli.measure.align import match_keys, matched_vectors
from stabcli.measure.anchor import DEFAULT_EIS_ALPHA
from stabcli.measure.degenerate import DegenerateRuns, degenerate_runs
from stabcli.measure.threads import ordered_map
from stabcli.runset import RunSet, is_runset


@dataclass(frozen=True)
class AuditOptions:
    """The audit's options, checked on construction (``OptionError`` naming the parameter).

    Checks that need the input (``knn_k`` below the number of keys, memory for ``pairs``)
    run in ``build_report`` before any computation.
    """

    normalize: bool = False
    pairs: int = 10_000
    knn_k: int = 10
    knn_queries: int | None = None  # None: every key up to KNN_ALL_MAX_KEYS keys, else KNN_SAMPLE sampled
    seed: int = 0
    top: int = 20
    min_frequency: int | None = None
    eis_alpha: float = DEFAULT_EIS_ALPHA
    eis_anchor: Path | None = None  # None: the consensus of the runs

    parameter_constraints: ClassVar[dict[str, Constraint]] = AUDIT_OPTIONS

    def __post_init__(self) -> None:
        validate_params(self)


@dataclass
class Runs:
    """R embeddings restricted to their common keys, rows in one shared order."""

    names: list[str]
    keys: list[str]
    arrays: list[np.ndarray]  # [n, d] each; memory maps when no reordering was needed
    rows: list[np.ndarray | None]  # per run: row indices into its own file (None = identity)
    dropped: int
    runset: RunSet | None = None
    run_indices: list[int] = field(default_factory=list)
    degenerate: DegenerateRuns | None = None  # runs identical or exact rotations of each other

    @property
    def dim(self) -> int:
        return int(self.arrays[0].shape[1])


def load_runs(
    inputs: Sequence[str | Path], on_warning: Callable[[str], None] | None = None, read: ReadOptions | None = None
) -> Runs:
    """Read a run-set directory or several embedding files and align them on common keys.

    ``read`` carries ``--input-format``, ``--trust-pickle`` and ``--keys``; inputs then go
    through ``embeddings.match_inputs``, which refuses keyless files mixed with keyed ones
    and notes position matching through ``on_warning``.

    Raises ``InputError`` (naming the file) for fewer than 2 runs, mismatched dimensions,
    NaN/inf values, an empty key intersection, or keyless inputs that cannot be matched.
    """
    read = read or ReadOptions()
    paths = [Path(p) for p in inputs]
    runset = None
    if len(paths) == 1 and paths[0].is_dir():
        if not is_runset(paths[0]):
            raise InputError(f"{paths[0]}: a directory but not a run set (no stabcli.json)")
        if read.input_format is not None:
            raise OptionError("input_format", f"applies to embedding files, not to the run set {paths[0]}")
        runset = RunSet.open(paths[0])
        indices = runset.runs
        embeddings = [runset.load(i) for i in indices]
        names = [f"run-{i:03d}" for i in indices]
    else:
        for path in paths:
            if path.is_dir():
                raise UsageError(f"{path}: pass a run set alone, or embedding files only")
        indices = []
        embeddings = [read.read(p) for p in paths]
        names = [str(p) for p in paths]
    embeddings = match_inputs(embeddings, read.keys_file, on_warning)
    if len(embeddings) < 2:
        where = paths[0] if paths else "input"
        raise InputError(f"{where}: found {len(embeddings)} run(s); stability needs at least 2")
    first = embeddings[0]
    for emb in embeddings[1:]:
        if emb.dim != first.dim:
            raise InputError(f"{emb.source}: dimension {emb.dim}, but {first.source} has {first.dim}")
    match = match_keys([e.keys for e in embeddings])
    keys, rows, dropped = match.keys, match.rows, match.dropped
    if not keys:
        raise InputError(f"{embeddings[1].source}: no keys in common with {first.source}")
    if first.dim == 0:
        raise InputError(f"{first.source}: vectors have 0 dimensions; there is nothing to compare")
    # a run per worker: the finite check reads every value
    arrays = list(ordered_map(lambda run: matched_vectors(run[0], run[1], keys), zip(embeddings, rows, strict=True)))
    if dropped and on_warning:  # after the checks: a bad input is one error line, not a warning and an error
        on_warning(f"{dropped} keys are not in every run and were left out; comparing {len(keys)} common keys")
    degenerate = degenerate_runs(names, arrays)  # reported in input.degenerate, the terminal and Markdown
    return Runs(names, keys, arrays, rows, dropped, runset, list(indices), degenerate)


def pairs_memory(pairs: int, runs: int, dim: int) -> int:
    """Bytes the inner-product noise share needs for ``pairs`` sampled pairs: the pair
    indices and their sort orders, one cosine per run and pair, and the float64 gathers."""
    return pairs * (32 + 8 * runs + 32 * dim)


def check_sizes(options: AuditOptions, runs: Runs) -> None:
    """Options that only make sense against the input: k below n, memory for the pairs."""
    n = len(runs.keys)
    if options.knn_k >= n:
        raise OptionError("knn_k", f"{options.knn_k} must be below the number of common keys ({n})")
    require_memory("pairs", pairs_memory(options.pairs, len(runs.arrays), runs.dim), f"{options.pairs:,} pairs")


def key_frequencies(runs: Runs, given: Mapping[str, int] | None) -> tuple[np.ndarray | None, str | None]:
    """Every key's frequency (-1 where unknown) and where it comes from: ``given``
    (``--frequencies``) first, else the run set's recorded counts."""
    counts, source = given, "--frequencies" if given is not None else None
    if counts is None and runs.runset is not None:
        counts, source = runs.runset.key_counts(), "run set"
    if counts is None:
        return None, None
    return np.array([counts.get(k, -1) for k in runs.keys], dtype=np.int64), source


def check_frequencies(
    runs: Runs,
    options: AuditOptions,
    frequencies: Mapping[str, int] | None,
    on_warning: Callable[[str], None] | None,
) -> None:
    """``--min-frequency`` needs frequencies; a ``--frequencies`` file that misses keys is noted."""
    if frequencies is None:
        if options.min_frequency is not None and (runs.runset is None or runs.runset.key_counts() is None):
            raise OptionError(
                "min_frequency", "needs key frequencies: a run set made by stabcli pretrain, or --frequencies FILE"
            )
        return
    missing = sum(1 for k in runs.keys if k not in frequencies)
    if missing == len(runs.keys):
        raise InputError(f"--frequencies: none of the {len(runs.keys):,} compared keys has a count in the file")
    if missing and on_warning:
        on_warning(
            f"--frequencies: {missing:,} of the {len(runs.keys):,} compared keys have no count; they are in no band"
        )


def read_anchor(path: Path, runs: Runs, normalize: bool) -> tuple[np.ndarray, np.ndarray]:
    """The ``--eis-anchor`` embedding's rows for the common keys it has, and their positions
    in ``runs.keys``; InputError when it shares fewer than 2 keys or holds NaN."""
    from stabcli.inputs.embeddings import read_embedding

    emb = read_embedding(path)
    match = match_keys([runs.keys, emb.keys])
    common = match.keys
    if len(common) < 2:
        raise InputError(f"{path}: shares {len(common)} key(s) with the runs; EIS needs at least 2")
    where = np.arange(len(common)) if match.rows[0] is None else match.rows[0]
    vectors = matched_vectors(emb, match.rows[1], common, dtype=None)
    if vectors.shape[1] == 0:
        raise InputError(f"{path}: vectors have 0 dimensions")
    return (m.unit_rows(vectors) if normalize else vectors), where


def featurized(runs: Runs) -> dict[str, Any] | None:
    block = runs.runset.manifest.get("featurize") if runs.runset else None
    return block if isinstance(block, dict) else None


def environment_differences(runs: Runs) -> list[EnvironmentDifference]:
    """Where the runs' recorded training environments differ (none for plain files)."""
    if runs.runset is None:
        return []
    runset = runs.runset
    return differences({name: runset.environment(i) for name, i in zip(runs.names, runs.run_indices, strict=True)})
