"""``stabcli audit``: load runs, compute the representation report, evaluate CI checks.

The report is a plain dict with stable keys (documented in the README); renderers in
``stabcli.report`` turn it into a terminal view, JSON, Markdown and plots.
"""

from __future__ import annotations

import math
import operator
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from stabcli import __version__
from stabcli import metrics as m
from stabcli.embeddings import Embedding, read_embedding, require_finite
from stabcli.errors import InputError, UsageError
from stabcli.runset import RunSet, is_runset

if TYPE_CHECKING:  # downstream imports scikit-learn (seconds); only an audit with labels needs it
    from stabcli.downstream import DownstreamOptions

HISTOGRAM_BINS = 10


@dataclass
class AuditOptions:
    normalize: bool = False
    pairs: int = 10_000
    knn_k: int = 10
    knn_queries: int = 1_000
    seed: int = 0
    top: int = 20


@dataclass
class Runs:
    """R embeddings restricted to their common keys, rows in one shared order."""

    names: list[str]
    keys: list[str]
    arrays: list[np.ndarray]          # [n, d] each; memory maps when no reordering was needed
    rows: list[np.ndarray | None]     # per run: row indices into its own file (None = identity)
    dropped: int
    runset: RunSet | None = None
    run_indices: list[int] = field(default_factory=list)

    @property
    def dim(self) -> int:
        return int(self.arrays[0].shape[1])


def load_runs(inputs: Sequence[str | Path], on_warning: Callable[[str], None] | None = None) -> Runs:
    """Read a run-set directory or several embedding files and align them on common keys.

    Raises ``InputError`` (naming the file) for fewer than 2 runs, mismatched dimensions,
    NaN/inf values or an empty key intersection.
    """
    paths = [Path(p) for p in inputs]
    runset = None
    if len(paths) == 1 and paths[0].is_dir():
        if not is_runset(paths[0]):
            raise InputError(f"{paths[0]}: a directory but not a run set (no stabcli.json)")
        runset = RunSet.open(paths[0])
        indices = runset.runs
        embeddings = [runset.load(i) for i in indices]
        names = [f"run-{i:03d}" for i in indices]
    else:
        for path in paths:
            if path.is_dir():
                raise UsageError(f"{path}: pass a run set alone, or embedding files only")
        indices = []
        embeddings = [read_embedding(p) for p in paths]
        names = [str(p) for p in paths]
    if len(embeddings) < 2:
        where = paths[0] if paths else "input"
        raise InputError(f"{where}: found {len(embeddings)} run(s); stability needs at least 2")
    first = embeddings[0]
    for emb in embeddings[1:]:
        if emb.dim != first.dim:
            raise InputError(f"{emb.source}: dimension {emb.dim}, but {first.source} has {first.dim}")
    keys, rows, dropped = _common_keys(embeddings)
    if not keys:
        raise InputError(f"{embeddings[1].source}: no keys in common with {first.source}")
    if dropped and on_warning:
        on_warning(f"{dropped} keys are not in every run and were left out; comparing {len(keys)} common keys")
    arrays = [emb.vectors if idx is None else np.asarray(emb.vectors[idx], dtype=np.float32)
              for emb, idx in zip(embeddings, rows)]
    for emb, arr in zip(embeddings, arrays):
        _check_finite(emb, arr, keys)
    return Runs(names, keys, arrays, rows, dropped, runset, list(indices))


def _common_keys(embeddings: list[Embedding]) -> tuple[list[str], list[np.ndarray | None], int]:
    first = embeddings[0].keys
    if all(e.keys == first for e in embeddings[1:]):
        return first, [None] * len(embeddings), 0
    common = set(first)
    union = set(first)
    for e in embeddings[1:]:
        common &= set(e.keys)
        union |= set(e.keys)
    keys = [k for k in first if k in common]
    rows = []
    for e in embeddings:
        position = {k: i for i, k in enumerate(e.keys)}
        rows.append(np.fromiter((position[k] for k in keys), dtype=np.int64, count=len(keys)))
    return keys, rows, len(union) - len(keys)


def _check_finite(emb: Embedding, arr: np.ndarray, keys: list[str]) -> None:
    step = 1 << 16
    for start in range(0, arr.shape[0], step):
        require_finite(emb.source, keys, arr[start:start + step], start)


def _normalized(arrays: list[np.ndarray]) -> list[np.ndarray]:
    return [m.unit_rows(np.asarray(a, dtype=np.float32)) for a in arrays]


@dataclass
class _Frame:
    """The arrays every section reads, their cross-Gram blocks and consensus rotations."""

    arrays: list[np.ndarray]
    grams: m.Grams
    rotations: list[np.ndarray]
    iterations: int


def _frame(runs: Runs, options: AuditOptions, step: Callable[[str], None]) -> _Frame:
    arrays = _normalized(runs.arrays) if options.normalize else runs.arrays
    step("cross-Gram blocks")
    grams = m.gram_blocks(arrays)
    step("Procrustes alignment")
    rotations, iterations = m.generalized_procrustes(grams)
    return _Frame(arrays, grams, rotations, iterations)


def _check_options(options: AuditOptions, n: int) -> None:
    if options.knn_k < 1 or options.knn_k >= n:
        raise UsageError(f"--knn-k {options.knn_k}: needs 1 <= k < number of common keys ({n})")
    if options.pairs < 1 or options.knn_queries < 1 or options.top < 0:
        raise UsageError("--pairs and --knn-queries must be at least 1, --top at least 0")


def representation_report(runs: Runs, frame: _Frame, options: AuditOptions, step: Callable[[str], None]) -> dict[str, Any]:
    """Every SPEC section 4 metric over the common keys of ``runs``."""
    n = len(runs.keys)
    arrays, grams, iterations = frame.arrays, frame.grams, frame.iterations
    rng = np.random.default_rng(options.seed)

    step("coordinate noise")
    raw = m.noise_share(arrays)
    aligned = m.noise_share(arrays, frame.rotations)
    step("inner products")
    first, second = m.sample_pairs(n, options.pairs, rng)
    inner = m.inner_product_noise_share(arrays, first, second)
    step("nearest neighbours")
    queries = np.sort(rng.choice(n, size=min(options.knn_queries, n), replace=False))
    least_idx = np.argsort(-aligned.per_key_variance, kind="stable")[: options.top]
    # one pass over every run serves both the sampled queries and the least stable keys
    overlaps = m.knn_overlap(arrays, np.concatenate([queries, least_idx]), options.knn_k)
    knn, least_knn = overlaps[: len(queries)], overlaps[len(queries):]
    step("PIP, CKA, eigenspaces, displacement")
    pip = m.pairwise_mean(grams, m.pip_loss)
    gram_norm = float(np.mean([np.sqrt(m.frobenius_sq(grams.G[r, r])) for r in range(len(arrays))]))
    counts, edges = np.histogram(raw.per_dim, bins=HISTOGRAM_BINS, range=(0.0, 1.0))
    return {
        "noise_share": raw.overall,
        "noise_share_per_dim": _floats(raw.per_dim),
        "noise_share_histogram": {"edges": _floats(edges), "counts": [int(c) for c in counts]},
        "variance_per_dim": _floats(raw.variance_per_dim),
        "aligned_noise_share": aligned.overall,
        "aligned_noise_share_per_dim": _floats(aligned.per_dim),
        "procrustes_iterations": iterations,
        "inner_product_noise_share": inner,
        "inner_product_pairs": options.pairs,
        "inner_to_coordinate_ratio": inner / raw.overall if raw.overall > 0 else None,
        "knn_overlap": float(knn.mean()),
        "knn_k": options.knn_k,
        "knn_queries": int(len(queries)),
        "knn_chance": options.knn_k / (n - 1),
        "pip_loss": pip,
        "pip_loss_relative": pip / gram_norm if gram_norm > 0 else None,
        "cka": m.pairwise_mean(grams, m.linear_cka),
        "eigenspace_overlap": m.pairwise_mean(grams, m.eigenspace_overlap),
        "semantic_displacement": m.semantic_displacement(arrays, grams),
        "least_stable": [
            {"key": runs.keys[i], "aligned_variance": float(aligned.per_key_variance[i]), "knn_overlap": float(o)}
            for i, o in zip(least_idx, least_knn)
        ],
    }


def training_report(runs: Runs, options: AuditOptions) -> dict[str, Any]:
    """Final-loss spread over runs and, per epoch, mean loss and noise share (paper Fig. 1b, 1c)."""
    empty = {"final_loss": None, "final_loss_mean": None, "final_loss_std": None, "final_loss_cv": None,
             "loss_by_run": None, "by_epoch": []}
    if runs.runset is None:
        return empty
    losses = [runs.runset.losses(i) or [] for i in runs.run_indices]
    finals = [next((v for v in reversed(run) if v is not None), None) for run in losses]
    report = dict(empty)
    if all(v is not None for v in finals):
        mean = float(np.mean(finals))
        std = float(np.std(finals, ddof=1))
        report.update(final_loss=[float(v) for v in finals], final_loss_mean=mean, final_loss_std=std,
                      final_loss_cv=std / abs(mean) if mean else None)
    if any(losses):
        report["loss_by_run"] = losses
    n_epochs = max([len(run) for run in losses] + [len(runs.runset.checkpoints(i)) for i in runs.run_indices])
    for epoch in range(1, n_epochs + 1):
        values = [run[epoch - 1] for run in losses if len(run) >= epoch and run[epoch - 1] is not None]
        report["by_epoch"].append({
            "epoch": epoch,
            "noise_share": _epoch_noise_share(runs, epoch, options.normalize),
            "loss_mean": float(np.mean(values)) if values else None,
        })
    return report


def _epoch_noise_share(runs: Runs, epoch: int, normalize: bool) -> float | None:
    arrays = []
    for index, rows in zip(runs.run_indices, runs.rows):
        path = runs.runset.checkpoint(index, epoch)
        if not path.is_file():
            return None
        try:
            snapshot = np.load(path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise InputError(f"{path}: unreadable checkpoint ({exc})") from None
        if snapshot.ndim != 2 or snapshot.shape[1] != runs.dim:
            raise InputError(f"{path}: checkpoint shape {snapshot.shape} does not match the run's vectors")
        arrays.append(snapshot if rows is None else np.asarray(snapshot[rows], dtype=np.float32))
    if any(a.shape[0] != len(runs.keys) for a in arrays):
        raise InputError(f"{runs.runset.root}: epoch {epoch} checkpoints do not match the runs' keys")
    return m.noise_share(_normalized(arrays) if normalize else arrays).overall


def build_report(runs: Runs, options: AuditOptions, on_step: Callable[[str], None] | None = None,
                 downstream: DownstreamOptions | None = None) -> dict[str, Any]:
    """The whole audit report; ``downstream`` (label options) adds SPEC section 5."""
    step = on_step or (lambda _: None)
    _check_options(options, len(runs.keys))
    frame = _frame(runs, options, step)
    labelled = None
    if downstream:  # first: a bad label file fails before the long representation metrics
        from stabcli.downstream import downstream_report

        labelled = downstream_report(frame.arrays, runs.keys, frame.rotations, downstream, runs.names, step)
    return {
        "stabcli_version": __version__,
        "input": {
            "source": str(runs.runset.root) if runs.runset else None,
            "run_names": runs.names,
            "runs": len(runs.arrays),
            "keys": len(runs.keys),
            "dim": runs.dim,
            "dropped_keys": runs.dropped,
            "normalized": options.normalize,
            "seed": options.seed,
        },
        "representation": representation_report(runs, frame, options, step),
        "training": training_report(runs, options),
        "downstream": labelled,
        "checks": [],
        "passed": True,
    }


def _floats(values: np.ndarray) -> list[float]:
    return [float(v) for v in values]


# ---------------------------------------------------------------- CI checks

_OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le, ">=": operator.ge, "==": operator.eq, "<": operator.lt, ">": operator.gt,
}
_CHECK_RE = re.compile(r"^\s*([^\s<>=]+)\s*(<=|>=|==|<|>)\s*([^\s<>=]+)\s*$")


def parse_check(expression: str) -> tuple[str, str, float]:
    """``'representation.knn_overlap>=0.6'`` → (path, op, threshold); UsageError if malformed."""
    match = _CHECK_RE.match(expression)
    if not match:
        raise UsageError(f"--check {expression!r}: expected PATH OP VALUE with OP one of < <= > >= ==")
    path, op, raw = match.groups()
    try:
        threshold = float(raw)
    except ValueError:
        raise UsageError(f"--check {expression!r}: {raw!r} is not a number") from None
    return path, op, threshold


def resolve(report: dict[str, Any], path: str) -> float:
    """The number at dotted ``path`` in the report; UsageError naming the first bad part.

    A key may itself contain dots (variant ``phi:64@0.5``): at each level the longest run
    of parts that is a key wins.
    """
    node: Any = report
    parts = path.split(".")
    walked: list[str] = []
    while parts:
        for size in range(len(parts), 0, -1):
            name = ".".join(parts[:size])
            if isinstance(node, dict) and name in node:
                node = node[name]
                break
            if size == 1 and isinstance(node, list) and name.isdigit() and int(name) < len(node):
                node = node[int(name)]
                break
        else:
            where = ".".join(walked) or "the report"
            options = ", ".join(sorted(node)) if isinstance(node, dict) else "no named fields"
            raise UsageError(f"--check: no {parts[0]!r} in {where} (has: {options})")
        walked.append(name)
        parts = parts[size:]
    if isinstance(node, bool) or not isinstance(node, (int, float)):
        raise UsageError(f"--check: {path} is not a number (it is {type(node).__name__})")
    return float(node)


def evaluate_checks(report: dict[str, Any], expressions: Sequence[str]) -> list[dict[str, Any]]:
    """Evaluate every check expression; sets ``report['checks']`` and ``report['passed']``."""
    parsed = [(expr, *parse_check(expr)) for expr in expressions]
    checks = []
    for expr, path, op, threshold in parsed:
        value = resolve(report, path)
        passed = (not math.isnan(value)) and _OPS[op](value, threshold)
        checks.append({"name": expr.strip(), "path": path, "op": op, "value": value, "threshold": threshold, "passed": passed})
    report["checks"] = checks
    report["passed"] = all(c["passed"] for c in checks)
    return checks
