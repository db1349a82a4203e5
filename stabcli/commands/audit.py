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
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from stabcli import __version__
from stabcli.constraints import AUDIT_OPTIONS, DOWNSTREAM_OPTIONS, Constraint, validate_params
from stabcli.environment import EnvironmentDifference, differences
from stabcli.errors import InputError, OptionError, UsageError
from stabcli.fs.resources import require_memory
from stabcli.inputs.embeddings import Embedding, ReadOptions, match_inputs
from stabcli.measure import anchor as spectral
from stabcli.measure import metrics as m
from stabcli.measure import rowpass
from stabcli.measure.align import generalized_procrustes, match_keys, matched_vectors
from stabcli.measure.anchor import DEFAULT_EIS_ALPHA
from stabcli.measure.threads import one_blas_thread
from stabcli.reports import schema
from stabcli.reports.audit_report import (
    AuditReport,
    ByPair,
    DownstreamSection,
    EpochRow,
    FrequencyBand,
    Histogram,
    InputSection,
    NextItemSection,
    PairSpread,
    Quantiles,
    RepresentationSection,
    TrainingSection,
    UnstableKey,
)
from stabcli.reports.schema import Check, parse_check
from stabcli.runset import RunSet, is_runset

if TYPE_CHECKING:  # downstream imports scikit-learn (seconds); only an audit with labels needs it
    from stabcli.measure.downstream import DownstreamOptions
    from stabcli.measure.downstream.nextitem import NextItemOptions

HISTOGRAM_BINS = 10
KNN_ALL_MAX_KEYS = 10_000  # k-NN overlap of every key up to this many keys (O(n²·d) per run), else a sample
KNN_SAMPLE = 1_000  # keys sampled above KNN_ALL_MAX_KEYS when --knn-queries is not given
BAND_KNN_MIN = 200  # with a sample, every frequency band gets at least this many k-NN queries (or all its keys)
# Frequency bands (occurrences in the training corpus), low and high inclusive; None: no upper bound.
FREQUENCY_BANDS: tuple[tuple[int, int | None], ...] = ((1, 1), (2, 5), (6, 20), (21, 100), (101, 1000), (1001, None))


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
    arrays = [matched_vectors(emb, idx, keys) for emb, idx in zip(embeddings, rows, strict=True)]
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
    first: rowpass.FirstPass
    second: rowpass.SecondPass


def _frame(runs: Runs, options: AuditOptions, step: Callable[[str], None]) -> _Frame:
    arrays = _normalized(runs.arrays) if options.normalize else runs.arrays
    step("cross-Gram blocks")
    first = rowpass.first_pass(arrays)
    grams = first.grams
    zero = [runs.names[r] for r in grams.zero_runs()]
    if zero:
        raise InputError(
            f"{zero[0]}: every value is 0; an all-zero run has no geometry to compare"
            + (f" ({len(zero)} such runs)" if len(zero) > 1 else "")
        )
    step("Procrustes alignment")
    rotations, iterations = generalized_procrustes(grams)
    step("aligned rows")
    return _Frame(arrays, grams, rotations, iterations, first, rowpass.second_pass(arrays, grams, rotations))


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


def _frequencies(runs: Runs, given: Mapping[str, int] | None) -> tuple[np.ndarray | None, str | None]:
    """Every key's frequency (-1 where unknown) and where it comes from: ``given``
    (``--frequencies``) first, else the run set's recorded counts."""
    counts, source = given, "--frequencies" if given is not None else None
    if counts is None and runs.runset is not None:
        counts, source = runs.runset.key_counts(), "run set"
    if counts is None:
        return None, None
    return np.array([counts.get(k, -1) for k in runs.keys], dtype=np.int64), source


def band_label(low: int, high: int | None) -> str:
    """``1``, ``2–5``, ``>1,000``: how a frequency band is written everywhere."""
    if high is None:
        return f">{low - 1:,}"
    return f"{low:,}" if low == high else f"{low:,}–{high:,}"


def frequency_bands(frequency: np.ndarray) -> list[tuple[int, int | None, np.ndarray]]:
    """(low, high, key indices) of every non-empty band of ``FREQUENCY_BANDS`` (a band ``0``
    first when some key has frequency 0); keys of unknown frequency (-1) are in none."""
    bands: list[tuple[int, int | None]] = [(0, 0), *FREQUENCY_BANDS]
    out = []
    for low, high in bands:
        inside = (frequency >= low) & (frequency <= (high if high is not None else np.iinfo(np.int64).max))
        if inside.any():
            out.append((low, high, np.flatnonzero(inside)))
    return out


def _knn_queries(
    n: int, options: AuditOptions, frequency: np.ndarray | None, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """(headline queries, extra queries): every key up to ``KNN_ALL_MAX_KEYS`` keys (unless
    ``--knn-queries`` is given), else a seeded sample; with frequencies, extra queries so
    that every band has at least ``BAND_KNN_MIN`` keys with a k-NN overlap."""
    if options.knn_queries is None and n <= KNN_ALL_MAX_KEYS:
        return np.arange(n), np.empty(0, dtype=np.int64)
    size = min(options.knn_queries or KNN_SAMPLE, n)
    queries = np.sort(rng.choice(n, size=size, replace=False))
    extra: list[np.ndarray] = []
    if frequency is not None:
        chosen = np.zeros(n, dtype=bool)
        chosen[queries] = True
        for _, _, members in frequency_bands(frequency):
            missing = BAND_KNN_MIN - int(chosen[members].sum())
            left = members[~chosen[members]]
            if missing > 0 and left.size:
                extra.append(np.sort(rng.choice(left, size=min(missing, left.size), replace=False)))
    return queries, np.concatenate(extra) if extra else np.empty(0, dtype=np.int64)


def by_frequency(
    frequency: np.ndarray,
    relative: np.ndarray,
    variance_scaled: np.ndarray,
    energy: np.ndarray,
    knn: np.ndarray,
    d: int,
) -> list[FrequencyBand]:
    """Per band: keys, median relative instability, the band's aligned noise share and the
    median k-NN overlap of its keys that have one (``knn`` NaN elsewhere)."""
    rows = []
    for low, high, members in frequency_bands(frequency):
        band_knn = knn[members]
        band_knn = band_knn[~np.isnan(band_knn)]
        total = float(energy[members].sum())
        rows.append(
            FrequencyBand(
                band=band_label(low, high),
                low=low,
                high=high,
                keys=len(members),
                relative_instability_median=float(np.median(relative[members])),
                aligned_noise_share=float(variance_scaled[members].sum()) * d / total if total > 0 else 0.0,
                knn_overlap_median=float(np.median(band_knn)) if band_knn.size else None,
                knn_keys=int(band_knn.size),
            )
        )
    return rows


def least_stable_keys(
    knn: np.ndarray, relative: np.ndarray, frequency: np.ndarray | None, options: AuditOptions
) -> tuple[np.ndarray, int]:
    """(indices of the ``--top`` listed keys, keys ranked): lowest k-NN overlap first, ties
    by highest relative instability, among keys with a k-NN overlap and (with
    ``--min-frequency``) a frequency at least that."""
    eligible = ~np.isnan(knn)
    if options.min_frequency is not None and frequency is not None:
        eligible &= frequency >= options.min_frequency
    candidates = np.flatnonzero(eligible)
    order = np.lexsort((-relative[candidates], knn[candidates]))
    return candidates[order[: options.top]], len(candidates)


def pair_spreads(grams: m.Grams, knn_by_pair: np.ndarray, displacement: np.ndarray) -> ByPair:
    """The spread over run pairs of k-NN overlap, CKA, eigenspace overlap, PIP loss
    (absolute and relative) and semantic displacement (``displacement``, by pair)."""
    relative = m.relative_pip_loss_by_pair(grams)
    return ByPair(
        knn_overlap=pair_spread(knn_by_pair.mean(axis=1)),
        cka=pair_spread(m.pairwise_values(grams, m.linear_cka)),
        eigenspace_overlap=pair_spread(m.pairwise_values(grams, m.eigenspace_overlap)),
        pip_loss=pair_spread(m.pairwise_values(grams, m.pip_loss)),
        pip_loss_relative=pair_spread(relative if relative is not None else np.empty(0)),
        semantic_displacement=pair_spread(displacement),
    )


def representation_report(
    runs: Runs,
    frame: _Frame,
    options: AuditOptions,
    step: Callable[[str], None],
    key_names: Mapping[str, str] | None = None,
    per_key: bool = False,
    frequencies: Mapping[str, int] | None = None,
) -> tuple[RepresentationSection, KeyStats]:
    """Every representation metric over the common keys of ``runs``, and the per-key table;
    ``frequencies`` (``--frequencies``) replaces the run set's recorded key counts."""
    n, R, d = len(runs.keys), len(runs.arrays), runs.dim
    arrays, grams = frame.arrays, frame.grams
    rng = np.random.default_rng(options.seed)
    frequency, source = _frequencies(runs, frequencies)

    step("coordinate noise")
    raw, aligned = frame.first.raw, frame.second.aligned
    energy = frame.second.energy  # in the scaled units of per_key_variance_scaled
    assert aligned.per_key_variance_scaled is not None  # noise_share always sets it
    relative = m.relative_instability(aligned.per_key_variance_scaled, energy, d)
    step("inner products")
    first, second = m.sample_pairs(n, options.pairs, rng)
    inner = m.inner_product_noise_share(arrays, first, second)
    step("nearest neighbours")
    queries, extra = _knn_queries(n, options, frequency, rng)
    by_pair = m.knn_overlap_by_pair(arrays, np.concatenate([queries, extra]), options.knn_k)
    knn = np.full(n, np.nan)
    knn[np.concatenate([queries, extra])] = by_pair.mean(axis=0)
    least_idx, ranked = least_stable_keys(knn, relative, frequency, options)
    step("PIP, CKA, eigenspaces, displacement")
    stats = KeyStats(
        keys=runs.keys,
        frequency=frequency,
        norm=np.sqrt(energy) * aligned.scale,
        aligned_variance=aligned.per_key_variance,
        relative_instability=relative,
        knn_overlap=knn,
        displacement=m.per_key_displacement(arrays, grams) if per_key else None,
    )
    bands = (
        by_frequency(frequency, relative, aligned.per_key_variance_scaled, energy, knn, d)
        if frequency is not None
        else []
    )
    displacement = frame.first.displacement_by_pair()
    counts, edges = np.histogram(raw.per_dim, bins=HISTOGRAM_BINS, range=(0.0, 1.0))
    pure_std = m.pure_noise_share_std(grams)
    section = RepresentationSection(
        noise_share=raw.overall,
        noise_share_independent=(R - 1) / R,
        noise_share_independent_std=pure_std,
        at_pure_noise_level=bool(raw.overall >= (R - 1) / R - 2 * pure_std),
        noise_share_per_dim=[float(v) for v in raw.per_dim],  # shares are never beyond float64
        noise_share_histogram=Histogram(edges=[float(v) for v in edges], counts=[int(c) for c in counts]),
        variance_per_dim=_floats(raw.variance_per_dim),
        aligned_noise_share=aligned.overall,
        aligned_noise_share_per_dim=[float(v) for v in aligned.per_dim],
        procrustes_iterations=frame.iterations,
        inner_product_noise_share=inner,
        inner_product_pairs=options.pairs,
        inner_to_coordinate_ratio=inner / raw.overall if raw.overall > 0 else None,
        knn_overlap=float(by_pair[:, : len(queries)].mean()),
        knn_k=options.knn_k,
        knn_queries=len(queries),
        knn_chance=options.knn_k / (n - 1),
        pip_loss=_finite(m.pairwise_mean(grams, m.pip_loss)),
        pip_loss_relative=m.relative_pip_loss(grams),
        cka=m.pairwise_mean(grams, m.linear_cka),
        eigenspace_overlap=m.pairwise_mean(grams, m.eigenspace_overlap),
        semantic_displacement=float(np.mean(displacement)),
        by_pair=pair_spreads(grams, by_pair[:, : len(queries)], displacement),
        least_stable=_unstable_keys(least_idx, stats, energy, aligned.scale, bands, key_names or {}),
        least_stable_ranked=ranked,
        min_frequency=options.min_frequency,
        frequency_source=source,
        by_frequency=bands,
    )
    return section, stats


def _unstable_keys(
    indices: np.ndarray,
    stats: KeyStats,
    energy: np.ndarray,
    scale: float,
    bands: list[FrequencyBand],
    names: Mapping[str, str],
) -> list[UnstableKey]:
    frequency = stats.frequency

    def band_of(i: int) -> FrequencyBand | None:
        if frequency is None or frequency[i] < 0:
            return None
        f = int(frequency[i])
        return next((b for b in bands if b.low <= f and (b.high is None or f <= b.high)), None)

    out = []
    for i in indices:
        band = band_of(int(i))
        key = stats.keys[i]
        out.append(
            UnstableKey(
                key=key,
                name=names.get(key),
                frequency=None if frequency is None or frequency[i] < 0 else int(frequency[i]),
                band=band.band if band else None,
                aligned_variance=_finite(stats.aligned_variance[i]),
                mean_squared_norm=_finite(m.rescaled(energy[i], scale, 2)),
                relative_instability=float(stats.relative_instability[i]),
                knn_overlap=float(stats.knn_overlap[i]),
                peers_knn_overlap_median=band.knn_overlap_median if band else None,
            )
        )
    return out


def pair_spread(values: np.ndarray) -> PairSpread:
    """Mean, std (ddof=1), min, median and max over run pairs of the finite ``values``."""
    finite = np.asarray(values, dtype=np.float64)
    finite = finite[np.isfinite(finite)]
    if not finite.size:
        return PairSpread(mean=None, std=None, min=None, median=None, max=None, pairs=0)
    return PairSpread(
        mean=float(finite.mean()),
        std=float(finite.std(ddof=1)) if finite.size > 1 else None,
        min=float(finite.min()),
        median=float(np.median(finite)),
        max=float(finite.max()),
        pairs=int(finite.size),
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


def spectral_fields(
    runs: Runs, frame: _Frame, options: AuditOptions, given: tuple[np.ndarray, np.ndarray] | None = None
) -> dict[str, Any]:
    """EIS against the anchor (``given``: ``read_anchor``'s rows and positions; None: the
    consensus), the weighted eigenspace overlap and debiased CKA over run pairs
    (``stabcli.measure.anchor``), as ``RepresentationSection`` fields."""
    grams, arrays = frame.grams, frame.arrays
    keys = len(runs.keys)
    if given is None:
        with one_blas_thread():  # d×d work
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
    with one_blas_thread():  # d×d blocks and bases: one BLAS thread (stabcli.measure.threads)
        eis = spectral.eis_pairs(eis_grams, anchor, options.eis_alpha)
        overlap = spectral.weighted_overlap_pairs(grams)
    return {
        "eis": pair_spread(eis),
        "eis_alpha": float(options.eis_alpha),
        "eis_anchor": anchor.source,
        "eis_keys": keys,
        "weighted_eigenspace_overlap": pair_spread(overlap),
        "cka_debiased": pair_spread(spectral.debiased_cka_pairs(frame.arrays, grams, frame.second.norm_products)),
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
        if (snapshot.shape[0] if rows is None else len(rows)) != len(runs.keys):
            raise InputError(f"{path}: {snapshot.shape[0]} rows, but the run has {len(runs.keys)} keys")
        array = matched_vectors(Embedding(runs.keys, snapshot, path), rows, runs.keys)
        arrays.append(array)
    return m.noise_share(_normalized(arrays) if normalize else arrays)


def _featurized(runs: Runs) -> dict[str, Any] | None:
    block = runs.runset.manifest.get("featurize") if runs.runset else None
    return block if isinstance(block, dict) else None


def _environment(runs: Runs) -> list[EnvironmentDifference]:
    """Where the runs' recorded training environments differ (none for plain files)."""
    if runs.runset is None:
        return []
    runset = runs.runset
    return differences({name: runset.environment(i) for name, i in zip(runs.names, runs.run_indices, strict=True)})


def _check_frequencies(
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


def build_report(
    runs: Runs,
    options: AuditOptions,
    on_step: Callable[[str], None] | None = None,
    downstream: DownstreamOptions | None = None,
    checks: Sequence[str] = (),
    key_names: Mapping[str, str] | None = None,
    per_key: bool = False,
    on_warning: Callable[[str], None] | None = None,
    next_item: NextItemOptions | None = None,
    frequencies: Mapping[str, int] | None = None,
) -> AuditReport:
    """The whole audit report; ``downstream`` (label options) adds the downstream section,
    ``next_item`` (interaction options) the next-item section, ``checks`` (expressions) its
    check results, ``per_key`` the per-key displacement."""
    step = on_step or (lambda _: None)
    for expression in checks:
        parse_check(expression)  # a malformed expression fails before any work
    _check_sizes(options, runs)
    _check_frequencies(runs, options, frequencies, on_warning)
    plan = None
    if downstream:  # options against the runs, labels, split, memory: all before the Gram pass
        from stabcli.measure.downstream import plan_downstream

        featurized = _featurized(runs)
        if featurized and featurized.get("dim"):  # phi(h) already: named so, not featurized again
            downstream = replace(downstream, featurized=True)
        plan = plan_downstream(downstream, runs.keys, len(runs.arrays), runs.dim, on_warning)
    planned = None
    if next_item:  # the interactions are read and split before the Gram pass too
        from stabcli.measure.downstream.nextitem import plan_next_item

        planned = plan_next_item(next_item, runs.keys, len(runs.arrays), runs.dim)
    given_anchor = read_anchor(options.eis_anchor, runs, options.normalize) if options.eis_anchor else None
    frame = _frame(runs, options, step)
    labelled = flips = None
    if downstream:  # first: a bad label file fails before the long representation metrics
        from stabcli.measure.downstream import downstream_audit

        raw, flips = downstream_audit(
            frame.arrays,
            runs.keys,
            frame.rotations,
            downstream,
            runs.names,
            step,
            plan,
            key_names=key_names,
            frequency=_frequencies(runs, frequencies)[0],
            bands=lambda f: [(band_label(lo, hi), lo, hi, m) for lo, hi, m in frequency_bands(f)],
        )
        labelled = DownstreamSection.from_dict(raw)
    recommended = None
    if next_item:
        from stabcli.measure.downstream.nextitem import next_item_report

        section = next_item_report(frame.arrays, runs.keys, frame.rotations, next_item, runs.names, step, planned)
        recommended = NextItemSection.from_dict(section)
    representation, stats = representation_report(runs, frame, options, step, key_names, per_key, frequencies)
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
            environment=_environment(runs),
        ),
        representation=representation,
        training=training_report(runs, options),
        downstream=labelled,
        next_item=recommended,
        key_stats=stats,
        downstream_keys=flips,
    )
    results = evaluate_checks(report, checks)
    return replace(report, checks=results, passed=all(c.passed for c in results))


def _floats(values: np.ndarray) -> list[float | None]:
    return [_finite(v) for v in values]


def _finite(value: float) -> float | None:
    """A JSON-safe number: None for a scale-dependent value beyond float64's range (inf)."""
    return float(value) if math.isfinite(value) else None


# ---------------------------------------------------------------- CI checks


def validate_checks(
    expressions: Sequence[str], labels: bool, interactions: bool = False
) -> list[tuple[str, str, float]]:
    """Parse every expression and resolve its path against the report's types, before any
    input is read: a typo, a ``downstream`` path without ``--labels`` or a ``next_item`` path
    without ``--interactions`` fails at once."""

    def needs(path: str) -> str | None:
        section = path.split(".")[0]
        if section == "downstream" and not labels:
            return "the downstream section needs --labels FILE"
        if section == "next_item" and not interactions:
            return "the next_item section needs --interactions FILE"
        return None

    return schema.validate_checks(AuditReport, expressions, needs)


def resolve(report: Any, path: str) -> float | None:
    """``schema.resolve`` on an audit report (or its JSON)."""
    return schema.resolve(report, path, AuditReport)


def evaluate_checks(report: Any, expressions: Sequence[str]) -> list[Check]:
    """``schema.evaluate_checks`` on an audit report (or its JSON)."""
    return schema.evaluate_checks(report, expressions, AuditReport)


# ---------------------------------------------------------------- the entry point

# DownstreamOptions' fields (measure/downstream.py imports scikit-learn: seconds); a test keeps them equal
DOWNSTREAM_KEYWORDS = (
    "labels",
    "task",
    "model",
    "test_size",
    "split_seed",
    "variants",
    "featurize_dims",
    "sigmas",
    "reference",
    "seed",
    "jobs",
    "encoding",
    "min_class_size",
    "prefer",
    "model_params",
    "top",
)


def audit(inputs: str | Path | Sequence[str | Path], **options: Any) -> AuditReport:
    """Measure how much of an embedding is run-to-run noise (``stabcli audit``).

    Parameters
    ----------
    inputs : path or list of paths
        A run set directory, or two or more embedding files.
    **options
        The command's options by their library names (``knn_k=10``, ``top=20``,
        ``labels="genres.tsv"``, ``checks=["representation.knn_overlap>=0.6"]``...); files
        to write: ``json``, ``markdown``, ``plots``, ``per_key`` (with ``force``); callbacks
        ``on_step(text)``, ``on_warning(text)`` (default: a ``StabcliWarning``) and
        ``on_figure(path)``. ``docs/api.md`` lists them; each is validated as its flag is.

    Returns
    -------
    AuditReport
        ``report.to_dict()`` is what ``stabcli audit --format json`` prints;
        ``report.passed`` is false when a check failed.

    Raises
    ------
    StabcliError
        Bad input or options (``OptionError`` names the parameter), before any file is written.

    Examples
    --------
    >>> report = stabcli.audit("runs/exp1", knn_k=5, top=3)  # doctest: +SKIP
    >>> report.representation.knn_overlap  # doctest: +SKIP
    """
    from stabcli.commands.common import (
        Renderings,
        ReportFiles,
        log_run,
        params_given,
        refuse_unknown,
        refuse_unused_table_options,
        take,
        warn,
    )
    from stabcli.inputs.textfile import check_encoding, check_regular_file
    from stabcli.measure.downstream.nextitem import next_item_options
    from stabcli.reports import audit_render
    from stabcli.training.cluster import joblib_on, scheduler_address

    paths = [Path(inputs)] if isinstance(inputs, (str, Path)) else [Path(p) for p in inputs]
    options = dict(options)
    params = {"inputs": [str(p) for p in paths], **params_given(options)}
    on_warning = options.pop("on_warning", None) or warn
    on_step, on_figure = options.pop("on_step", None), options.pop("on_figure", None)
    on_logged = options.pop("on_logged", None)
    checks, key_names = list(options.pop("checks", ())), options.pop("key_names", None)
    scheduler, frequencies = options.pop("scheduler", None), options.pop("frequencies", None)
    if options.get("encoding") is not None:
        check_encoding("encoding", options["encoding"])
    files = ReportFiles.take(options)
    read = ReadOptions(**take(ReadOptions, options, {"keys": "keys_file"}))
    settings = AuditOptions(**take(AuditOptions, options, keep=("seed", "top")))
    next_item = next_item_options(options, settings.seed, options.get("reference", 0), options.get("encoding"))
    if next_item is not None and options.get("task") == "next-item":
        options.pop("task")
    labelled = {name: options.pop(name) for name in DOWNSTREAM_KEYWORDS if name in options}
    refuse_unknown("audit", options)
    tables = [("--labels", labelled.get("labels")), ("--key-names", key_names), ("--frequencies", frequencies)]
    refuse_unused_table_options(labelled, tables)
    downstream = _downstream_options(labelled, scheduler)
    address = scheduler_address(scheduler) if downstream is not None else None
    # a typo fails before any input is read
    validate_checks(checks, labels=downstream is not None, interactions=next_item is not None)
    files.check_formats()
    more_inputs = [labelled.get("labels"), key_names, read.keys_file, settings.eis_anchor, frequencies]
    more_inputs += [next_item.interactions] if next_item is not None else []
    plan = files.plan(paths, more_inputs)
    tracker = files.open_tracker()
    names, counts = _key_tables(key_names, frequencies, labelled.get("encoding"))
    runs = load_runs(paths, on_warning=on_warning, read=read)
    if downstream is not None:  # before any worker starts
        if not Path(downstream.labels).exists():
            raise InputError(f"{downstream.labels}: label file not found")
        check_regular_file(Path(downstream.labels), "label file")
    with joblib_on(address) as cluster:  # connects (local:N: starts workers) once the inputs are checked
        if cluster is not None and downstream is not None and downstream.jobs is None:
            downstream = replace(downstream, jobs=cluster.threads())  # as many fits at once as the cluster runs
        per_key = files.per_key is not None or files.html is not None or tracker is not None  # the displacement column
        report = build_report(
            runs,
            settings,
            on_step,
            downstream,
            checks,
            names,
            per_key,
            on_warning,
            next_item=next_item,
            frequencies=counts,
        )
        text = schema.dumps(report)
        renderings = Renderings(
            text,
            lambda rows: audit_render.render_markdown(report, rows),
            lambda: audit_render.plot_figures(report),
            lambda: _frame_of(report, names),
            lambda figures, frame: audit_render.render_html(report, frame, figures, text),
            len(report.representation.least_stable),
        )
        figures = files.write(plan, text, renderings=renderings, on_warning=on_warning)
        log_run(tracker, "audit", params, renderings, on_logged)
    for figure in figures:
        if on_figure is not None:
            on_figure(figure)
    return report


def _key_tables(
    key_names: str | Path | None, frequencies: str | Path | None, encoding: str | None
) -> tuple[dict[str, str] | None, dict[str, int] | None]:
    """The ``key_names`` and ``frequencies`` files, read (None when not given)."""
    from stabcli.inputs.keytable import read_frequencies, read_key_names

    names = read_key_names(Path(key_names), encoding) if key_names is not None else None
    counts = read_frequencies(Path(frequencies), encoding or "utf-8") if frequencies is not None else None
    return names, counts


def _downstream_options(labelled: dict[str, Any], scheduler: str | None) -> DownstreamOptions | None:
    """The ``DownstreamOptions`` of ``labels=...``; without labels, a UsageError naming the
    options that only apply with them."""
    from stabcli.commands.common import only_with

    if labelled.get("task") == "next-item":
        raise UsageError("--task next-item needs --interactions FILE")
    if labelled.get("labels") is None:
        for name, value in labelled.items():  # a bad value is refused even where it would not apply
            constraint = DOWNSTREAM_OPTIONS.get(name)
            if constraint is not None and name != "seed" and (problem := constraint.problem(value)) is not None:
                raise OptionError(name, problem)
        names = ("variants", "featurize_dims", "sigmas", "model")
        given = [(name, labelled.get(name) is not None) for name in names]
        given += [("model_param", bool(labelled.get("model_params")))]
        given += [("min_class_size", labelled.get("min_class_size", 5) != 5), ("scheduler", scheduler is not None)]
        given += [("prefer", labelled.get("prefer", "balanced") != "balanced")]
        only_with("--labels FILE", [("--" + name.replace("_", "-"), present) for name, present in given])
        return None
    from stabcli.measure.downstream import DownstreamOptions

    return DownstreamOptions(**{name: value for name, value in labelled.items() if value not in (None, [], ())})


def _frame_of(report: AuditReport, names: Mapping[str, str] | None) -> Any:
    from stabcli.inputs.keytable import per_key_frame

    stats = report.key_stats
    return per_key_frame(
        stats.keys,
        dict(names) if names else None,
        stats.frequency,
        stats.norm,
        stats.aligned_variance,
        stats.relative_instability,
        stats.displacement,
        stats.knn_overlap,
        report.downstream_keys.columns(stats.keys) if report.downstream_keys is not None else None,
    )
