"""``stabcli audit``: load runs, compute the representation report, evaluate CI checks.

The report is an ``AuditReport`` (typed sections in ``stabcli.reports.audit_report``, JSON through
``stabcli.reports.schema.to_json``); renderers in ``stabcli.reports.audit_render`` turn it into a terminal view,
Markdown and plots.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from stabcli import __version__
from stabcli.errors import InputError, OptionError, UsageError
from stabcli.fs.resources import require_memory
from stabcli.inputs.embeddings import Embedding, ReadOptions, match_inputs, require_finite
from stabcli.measure import anchor as spectral
from stabcli.measure import metrics as m
from stabcli.measure.anchor import DEFAULT_EIS_ALPHA
from stabcli.reports import schema
from stabcli.reports.audit_report import (
    AuditReport,
    DownstreamSection,
    EpochRow,
    Histogram,
    InputSection,
    PairSpread,
    Quantiles,
    RepresentationSection,
    TrainingSection,
    UnstableKey,
)
from stabcli.reports.schema import Check, parse_check
from stabcli.runset.store import RunSet, is_runset

if TYPE_CHECKING:  # downstream imports scikit-learn (seconds); only an audit with labels needs it
    from stabcli.measure.downstream import DownstreamOptions

HISTOGRAM_BINS = 10


@dataclass(frozen=True)
class AuditOptions:
    """The audit's options, checked on construction (``OptionError`` naming the parameter).

    Checks that need the input (``knn_k`` below the number of keys, memory for ``pairs``)
    run in ``build_report`` before any computation.
    """

    normalize: bool = False
    pairs: int = 10_000
    knn_k: int = 10
    knn_queries: int = 1_000
    seed: int = 0
    top: int = 20
    eis_alpha: float = DEFAULT_EIS_ALPHA
    eis_anchor: Path | None = None  # None: the consensus of the runs

    def __post_init__(self) -> None:
        for name, least in (("pairs", 1), ("knn_k", 1), ("knn_queries", 1), ("top", 0), ("seed", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise OptionError(name, f"expected an integer, got {value!r}")
            if value < least:
                raise OptionError(name, f"{value} must be at least {least}")
        alpha = self.eis_alpha
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 <= alpha <= 100:
            raise OptionError("eis_alpha", f"{alpha!r} must be a number from 0 to 100")


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
    keys, rows, dropped = _common_keys(embeddings)
    if not keys:
        raise InputError(f"{embeddings[1].source}: no keys in common with {first.source}")
    if first.dim == 0:
        raise InputError(f"{first.source}: vectors have 0 dimensions; there is nothing to compare")
    arrays = [
        emb.vectors if idx is None else np.asarray(emb.vectors[idx], dtype=np.float32)
        for emb, idx in zip(embeddings, rows, strict=False)
    ]
    for emb, arr in zip(embeddings, arrays, strict=False):
        _check_finite(emb, arr, keys)
    if dropped and on_warning:  # after the checks: a bad input is one error line, not a warning and an error
        on_warning(f"{dropped} keys are not in every run and were left out; comparing {len(keys)} common keys")
    if on_warning:
        warn_same_runs(names, arrays, on_warning)
    return Runs(names, keys, arrays, rows, dropped, runset, list(indices))


def warn_same_runs(names: list[str], arrays: list[np.ndarray], on_warning: Callable[[str], None]) -> None:
    """Say so when runs are identical or exact rotations of each other: their noise is zero by
    construction (a --script that ignores {seed}), not a property of the training."""
    from stabcli.measure.degenerate import describe_same, same_runs

    pairs = same_runs(arrays)
    if pairs:
        on_warning(
            f"{describe_same(pairs, names, len(arrays))}: the noise measured between them is zero by "
            "construction; were they trained with the same seed? (a --script must use {seed})"
        )


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
    rows: list[np.ndarray | None] = []
    for e in embeddings:
        position = {k: i for i, k in enumerate(e.keys)}
        rows.append(np.fromiter((position[k] for k in keys), dtype=np.int64, count=len(keys)))
    return keys, rows, len(union) - len(keys)


def _check_finite(emb: Embedding, arr: np.ndarray, keys: list[str]) -> None:
    step = 1 << 16
    for start in range(0, arr.shape[0], step):
        require_finite(emb.source, keys, arr[start : start + step], start)


def _normalized(arrays: list[np.ndarray]) -> list[np.ndarray]:
    # normalize in the input's precision first: float64 rows near 1e300 would overflow float32
    return [m.unit_rows(np.asarray(a)).astype(np.float32, copy=False) for a in arrays]


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
    zero = [runs.names[r] for r in grams.zero_runs()]
    if zero:
        raise InputError(
            f"{zero[0]}: every value is 0; an all-zero run has no geometry to compare"
            + (f" ({len(zero)} such runs)" if len(zero) > 1 else "")
        )
    step("Procrustes alignment")
    rotations, iterations = m.generalized_procrustes(grams)
    return _Frame(arrays, grams, rotations, iterations)


def pairs_memory(pairs: int, runs: int, dim: int) -> int:
    """Bytes the inner-product noise share needs for ``pairs`` sampled pairs: the pair
    indices and their sort orders, one cosine per run and pair, and the float64 gathers."""
    return pairs * (32 + 8 * runs + 32 * dim)


def _check_sizes(options: AuditOptions, runs: Runs) -> None:
    """Options that only make sense against the input: k below n, memory for the pairs."""
    n = len(runs.keys)
    if options.knn_k >= n:
        raise OptionError("knn_k", f"{options.knn_k} must be below the number of common keys ({n})")
    require_memory("pairs", pairs_memory(options.pairs, len(runs.arrays), runs.dim), f"{options.pairs:,} pairs")


@dataclass(frozen=True)
class KeyStats:
    """Every key's stability numbers, in ``Runs.keys`` order (the ``--per-key`` export)."""

    keys: list[str]
    frequency: np.ndarray | None  # training count per key, None when not recorded
    norm: np.ndarray  # root mean square over runs of the key's L2 norm
    aligned_variance: np.ndarray  # mean over dims of Var_r after Procrustes (ddof=0)
    relative_instability: np.ndarray  # aligned_variance · d / mean squared norm
    knn_overlap: np.ndarray  # NaN where the key was not a k-NN query
    displacement: np.ndarray | None  # mean cosine distance after pairwise Procrustes


def _frequencies(runs: Runs) -> np.ndarray | None:
    counts = runs.runset.key_counts() if runs.runset else None
    if counts is None:
        return None
    return np.array([counts.get(k, -1) for k in runs.keys], dtype=np.int64)


def representation_report(
    runs: Runs,
    frame: _Frame,
    options: AuditOptions,
    step: Callable[[str], None],
    key_names: Mapping[str, str] | None = None,
    per_key: bool = False,
) -> tuple[RepresentationSection, KeyStats]:
    """Every representation metric over the common keys of ``runs``, and the per-key table."""
    n, R, d = len(runs.keys), len(runs.arrays), runs.dim
    arrays, grams, iterations = frame.arrays, frame.grams, frame.iterations
    rng = np.random.default_rng(options.seed)

    step("coordinate noise")
    raw = m.noise_share(arrays)
    aligned = m.noise_share(arrays, frame.rotations)
    energy = m.per_key_energy(arrays, aligned.scale)  # in the scaled units of per_key_variance_scaled
    assert aligned.per_key_variance_scaled is not None  # noise_share always sets it
    relative = m.relative_instability(aligned.per_key_variance_scaled, energy, d)
    step("inner products")
    first, second = m.sample_pairs(n, options.pairs, rng)
    inner = m.inner_product_noise_share(arrays, first, second)
    step("nearest neighbours")
    queries = np.sort(rng.choice(n, size=min(options.knn_queries, n), replace=False))
    least_idx = np.argsort(-relative, kind="stable")[: options.top]
    # one pass over every run serves both the sampled queries and the least stable keys
    overlaps = m.knn_overlap(arrays, np.concatenate([queries, least_idx]), options.knn_k)
    knn, least_knn = overlaps[: len(queries)], overlaps[len(queries) :]
    step("PIP, CKA, eigenspaces, displacement")
    pip = m.pairwise_mean(grams, m.pip_loss)
    counts, edges = np.histogram(raw.per_dim, bins=HISTOGRAM_BINS, range=(0.0, 1.0))
    frequency = _frequencies(runs)
    names = key_names or {}
    knn_by_key = np.full(n, np.nan)
    knn_by_key[queries] = knn
    knn_by_key[least_idx] = least_knn
    stats = KeyStats(
        keys=runs.keys,
        frequency=frequency,
        norm=np.sqrt(energy) * aligned.scale,
        aligned_variance=aligned.per_key_variance,
        relative_instability=relative,
        knn_overlap=knn_by_key,
        displacement=m.per_key_displacement(arrays, grams) if per_key else None,
    )
    section = RepresentationSection(
        noise_share=raw.overall,
        noise_share_independent=(R - 1) / R,
        noise_share_per_dim=[float(v) for v in raw.per_dim],  # shares are never beyond float64
        noise_share_histogram=Histogram(edges=[float(v) for v in edges], counts=[int(c) for c in counts]),
        variance_per_dim=_floats(raw.variance_per_dim),
        aligned_noise_share=aligned.overall,
        aligned_noise_share_per_dim=[float(v) for v in aligned.per_dim],
        procrustes_iterations=iterations,
        inner_product_noise_share=inner,
        inner_product_pairs=options.pairs,
        inner_to_coordinate_ratio=inner / raw.overall if raw.overall > 0 else None,
        knn_overlap=float(knn.mean()),
        knn_k=options.knn_k,
        knn_queries=len(queries),
        knn_chance=options.knn_k / (n - 1),
        pip_loss=_finite(pip),
        pip_loss_relative=m.relative_pip_loss(grams),
        cka=m.pairwise_mean(grams, m.linear_cka),
        eigenspace_overlap=m.pairwise_mean(grams, m.eigenspace_overlap),
        semantic_displacement=m.semantic_displacement(arrays, grams),
        least_stable=[
            UnstableKey(
                key=runs.keys[i],
                name=names.get(runs.keys[i]),
                frequency=None if frequency is None or frequency[i] < 0 else int(frequency[i]),
                aligned_variance=_finite(aligned.per_key_variance[i]),
                mean_squared_norm=_finite(m.rescaled(energy[i], aligned.scale, 2)),
                relative_instability=float(relative[i]),
                knn_overlap=float(o),
            )
            for i, o in zip(least_idx, least_knn, strict=False)
        ],
    )
    return section, stats


def pair_spread(values: np.ndarray) -> PairSpread:
    """Mean, std (ddof=1), min and max over run pairs of the finite ``values``."""
    finite = np.asarray(values, dtype=np.float64)
    finite = finite[np.isfinite(finite)]
    if not finite.size:
        return PairSpread(mean=None, std=None, min=None, max=None, pairs=0)
    return PairSpread(
        mean=float(finite.mean()),
        std=float(finite.std(ddof=1)) if finite.size > 1 else None,
        min=float(finite.min()),
        max=float(finite.max()),
        pairs=int(finite.size),
    )


def read_anchor(path: Path, runs: Runs, normalize: bool) -> tuple[np.ndarray, np.ndarray]:
    """The ``--eis-anchor`` embedding's rows for the common keys it has, and their positions
    in ``runs.keys``; InputError when it shares fewer than 2 keys or holds NaN."""
    from stabcli.inputs.embeddings import read_embedding

    emb = read_embedding(path)
    position = {k: i for i, k in enumerate(emb.keys)}
    where = np.fromiter((i for i, k in enumerate(runs.keys) if k in position), dtype=np.int64)
    if len(where) < 2:
        raise InputError(f"{path}: shares {len(where)} key(s) with the runs; EIS needs at least 2")
    rows = np.fromiter((position[runs.keys[i]] for i in where), dtype=np.int64, count=len(where))
    vectors = np.asarray(emb.vectors[rows])
    _check_finite(Embedding([runs.keys[i] for i in where], vectors, Path(path)), vectors, [runs.keys[i] for i in where])
    if vectors.shape[1] == 0:
        raise InputError(f"{path}: vectors have 0 dimensions")
    return (m.unit_rows(vectors) if normalize else vectors), where


def spectral_fields(
    runs: Runs, frame: _Frame, options: AuditOptions, given: tuple[np.ndarray, np.ndarray] | None = None
) -> dict[str, Any]:
    """EIS against the anchor (``given``: ``read_anchor``'s rows and positions; None: the
    consensus), the weighted eigenspace overlap and debiased CKA over run pairs
    (``stabcli.measure.anchor``), as ``RepresentationSection`` fields."""
    grams, arrays = frame.grams, frame.arrays
    keys = len(runs.keys)
    if given is None:
        anchor = spectral.consensus_anchor(grams, frame.rotations)
        eis_grams = grams
    else:
        vectors, where = given
        if len(where) < keys:  # the anchor lacks keys: EIS on the keys it has
            require_memory("eis_anchor", len(arrays) * len(where) * runs.dim * 4, f"{len(where):,} anchor keys")
            arrays = [np.asarray(h[where]) for h in arrays]
            eis_grams = m.gram_blocks(arrays)
        else:
            eis_grams = grams
        anchor = spectral.file_anchor(arrays, vectors, eis_grams.scale, str(options.eis_anchor))
        keys = len(where)
    return {
        "eis": pair_spread(spectral.eis_pairs(eis_grams, anchor, options.eis_alpha)),
        "eis_alpha": float(options.eis_alpha),
        "eis_anchor": anchor.source,
        "eis_keys": keys,
        "weighted_eigenspace_overlap": pair_spread(spectral.weighted_overlap_pairs(grams)),
        "cka_debiased": pair_spread(spectral.debiased_cka_pairs(frame.arrays, grams)),
    }


def training_report(runs: Runs, options: AuditOptions) -> TrainingSection:
    """Final-loss spread over runs and, per epoch, mean loss, noise share and the spread of
    the across-run variance (paper Fig. 1b, 1c)."""
    if runs.runset is None:
        return TrainingSection(
            final_loss=None,
            final_loss_mean=None,
            final_loss_std=None,
            final_loss_cv=None,
            loss_by_run=None,
            reports_loss=False,
            by_epoch=[],
        )
    losses = [runs.runset.losses(i) or [] for i in runs.run_indices]
    finals = [next((v for v in reversed(run) if v is not None), None) for run in losses]
    final_loss: list[float] | None = None
    final_mean = final_std = final_cv = None
    if all(v is not None for v in finals):
        final_loss = [float(v) for v in finals if v is not None]
        final_mean = float(np.mean(final_loss))
        final_std = float(np.std(final_loss, ddof=1))
        final_cv = final_std / abs(final_mean) if final_mean else None
    n_epochs = max([len(run) for run in losses] + [len(runs.runset.checkpoints(i)) for i in runs.run_indices])
    by_epoch = []
    for epoch in range(1, n_epochs + 1):
        values = [v for run in losses if len(run) >= epoch and (v := run[epoch - 1]) is not None]
        share = _epoch_noise(runs, epoch, options.normalize)
        variance = None if share is None else share.variance_per_dim
        by_epoch.append(
            EpochRow(
                epoch=epoch,
                noise_share=None if share is None else share.overall,
                variance_mean=None if variance is None else float(np.mean(variance)),
                variance_quantiles=None if variance is None else _quantiles(variance),
                loss_mean=float(np.mean(values)) if values else None,
            )
        )
    reports_loss = any(v is not None for run in losses for v in run)
    return TrainingSection(
        final_loss=final_loss,
        final_loss_mean=final_mean,
        final_loss_std=final_std,
        final_loss_cv=final_cv,
        loss_by_run=losses if any(losses) else None,
        reports_loss=reports_loss,
        by_epoch=by_epoch,
    )


def _quantiles(values: np.ndarray) -> Quantiles:
    low, q25, median, q75, high = np.quantile(values, [0.0, 0.25, 0.5, 0.75, 1.0])
    return Quantiles(min=float(low), q25=float(q25), median=float(median), q75=float(q75), max=float(high))


def _epoch_noise(runs: Runs, epoch: int, normalize: bool) -> m.NoiseShare | None:
    """The noise share (and per-dimension variance) of every run's snapshot at ``epoch``;
    None when a run has no snapshot of that epoch."""
    assert runs.runset is not None
    arrays = []
    for index, rows in zip(runs.run_indices, runs.rows, strict=False):
        path = runs.runset.checkpoint(index, epoch)
        if not path.is_file():
            return None
        try:
            snapshot = np.load(path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            raise InputError(f"{path}: unreadable checkpoint ({exc})") from None
        if snapshot.ndim != 2 or snapshot.shape[1] != runs.dim or not np.issubdtype(snapshot.dtype, np.floating):
            raise InputError(
                f"{path}: checkpoint of shape {snapshot.shape} and type {snapshot.dtype} does not "
                f"match the run's float vectors of dimension {runs.dim}"
            )
        array = snapshot if rows is None else np.asarray(snapshot[rows], dtype=np.float32)
        if array.shape[0] != len(runs.keys):
            raise InputError(f"{path}: {array.shape[0]} rows, but the run has {len(runs.keys)} keys")
        _check_finite(Embedding(runs.keys, array, path), array, runs.keys)
        arrays.append(array)
    return m.noise_share(_normalized(arrays) if normalize else arrays)


def _featurized(runs: Runs) -> dict[str, Any] | None:
    block = runs.runset.manifest.get("featurize") if runs.runset else None
    return block if isinstance(block, dict) else None


def build_report(
    runs: Runs,
    options: AuditOptions,
    on_step: Callable[[str], None] | None = None,
    downstream: DownstreamOptions | None = None,
    checks: Sequence[str] = (),
    key_names: Mapping[str, str] | None = None,
    per_key: bool = False,
    on_warning: Callable[[str], None] | None = None,
) -> AuditReport:
    """The whole audit report; ``downstream`` (label options) adds the downstream section,
    ``checks`` (expressions) its check results, ``per_key`` the per-key displacement."""
    step = on_step or (lambda _: None)
    for expression in checks:
        parse_check(expression)  # a malformed expression fails before any work
    _check_sizes(options, runs)
    plan = None
    if downstream:  # options against the runs, labels, split, memory: all before the Gram pass
        from stabcli.measure.downstream import plan_downstream

        plan = plan_downstream(downstream, runs.keys, len(runs.arrays), runs.dim, on_warning)
    given_anchor = read_anchor(options.eis_anchor, runs, options.normalize) if options.eis_anchor else None
    frame = _frame(runs, options, step)
    labelled = None
    if downstream:  # first: a bad label file fails before the long representation metrics
        from stabcli.measure.downstream import downstream_report

        raw = downstream_report(frame.arrays, runs.keys, frame.rotations, downstream, runs.names, step, plan)
        labelled = DownstreamSection.from_dict(raw)
    representation, stats = representation_report(runs, frame, options, step, key_names, per_key)
    step("EIS, weighted eigenspace overlap, debiased CKA")
    representation = replace(representation, **spectral_fields(runs, frame, options, given_anchor))
    report = AuditReport(
        stabcli_version=__version__,
        input=InputSection(
            source=str(runs.runset.root) if runs.runset else None,
            run_names=runs.names,
            runs=len(runs.arrays),
            keys=len(runs.keys),
            dim=runs.dim,
            dropped_keys=runs.dropped,
            normalized=options.normalize,
            seed=options.seed,
            featurized=_featurized(runs),
        ),
        representation=representation,
        training=training_report(runs, options),
        downstream=labelled,
        key_stats=stats,
    )
    results = evaluate_checks(report, checks)
    return replace(report, checks=results, passed=all(c.passed for c in results))


def _floats(values: np.ndarray) -> list[float | None]:
    return [_finite(v) for v in values]


def _finite(value: float) -> float | None:
    """A JSON-safe number: None for a scale-dependent value beyond float64's range (inf)."""
    return float(value) if math.isfinite(value) else None


# ---------------------------------------------------------------- CI checks


def validate_checks(expressions: Sequence[str], labels: bool) -> list[tuple[str, str, float]]:
    """Parse every expression and resolve its path against the report's types, before any
    input is read: a typo or a ``downstream`` path without ``--labels`` fails at once."""
    return schema.validate_checks(
        AuditReport,
        expressions,
        lambda path: (
            "the downstream section needs --labels FILE" if path.split(".")[0] == "downstream" and not labels else None
        ),
    )


def resolve(report: Any, path: str) -> float | None:
    """``schema.resolve`` on an audit report (or its JSON)."""
    return schema.resolve(report, path, AuditReport)


def evaluate_checks(report: Any, expressions: Sequence[str]) -> list[Check]:
    """``schema.evaluate_checks`` on an audit report (or its JSON)."""
    return schema.evaluate_checks(report, expressions, AuditReport)
