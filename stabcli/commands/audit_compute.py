"""``stabcli audit``'s measures: the representation section (noise shares, k-NN overlap,
PIP, CKA, eigenspaces, frequency bands, the least stable keys), its spectral fields and the
training section, computed over the runs ``audit_inputs.load_runs`` aligned."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from stabcli.commands.audit_inputs import AuditOptions, Runs, key_frequencies
from stabcli.errors import InputError
from stabcli.fs.resources import require_memory
from stabcli.inputs.embeddings import Embedding
from stabcli.measure import anchor as spectral
from stabcli.measure import metrics as m
from stabcli.measure import rowpass
from stabcli.measure.align import generalized_procrustes, matched_vectors
from stabcli.measure.neighbours import knn_overlap_by_pair
from stabcli.measure.threads import one_blas_thread
from stabcli.reports.audit_report import (
    ByPair,
    EpochRow,
    FrequencyBand,
    Histogram,
    PairSpread,
    Quantiles,
    RepresentationSection,
    TrainingSection,
    UnstableKey,
)

HISTOGRAM_BINS = 10
KNN_ALL_MAX_KEYS = 10_000  # k-NN overlap of every key up to this many keys (O(n²·d) per run), else a sample
KNN_SAMPLE = 1_000  # keys sampled above KNN_ALL_MAX_KEYS when --knn-queries is not given
BAND_KNN_MIN = 200  # with a sample, every frequency band gets at least this many k-NN queries (or all its keys)
# Frequency bands (occurrences in the training corpus), low and high inclusive; None: no upper bound.
FREQUENCY_BANDS: tuple[tuple[int, int | None], ...] = ((1, 1), (2, 5), (6, 20), (21, 100), (101, 1000), (1001, None))


def _normalized(arrays: list[np.ndarray]) -> list[np.ndarray]:
    # normalize in the input's precision first: float64 rows near 1e300 would overflow float32
    return [m.unit_rows(np.asarray(a)).astype(np.float32, copy=False) for a in arrays]


@dataclass
class Frame:
    """The arrays every section reads, their cross-Gram blocks and consensus rotations."""

    arrays: list[np.ndarray]
    grams: m.Grams
    rotations: list[np.ndarray]
    iterations: int
    first: rowpass.FirstPass
    second: rowpass.SecondPass


def frame_of(runs: Runs, options: AuditOptions, step: Callable[[str], None]) -> Frame:
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
    return Frame(arrays, grams, rotations, iterations, first, rowpass.second_pass(arrays, grams, rotations))


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
    frame: Frame,
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
    frequency, source = key_frequencies(runs, frequencies)

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
    by_pair = knn_overlap_by_pair(arrays, np.concatenate([queries, extra]), options.knn_k)
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


def spectral_fields(
    runs: Runs, frame: Frame, options: AuditOptions, given: tuple[np.ndarray, np.ndarray] | None = None
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


def _floats(values: np.ndarray) -> list[float | None]:
    return [_finite(v) for v in values]


def _finite(value: float) -> float | None:
    """A JSON-safe number: None for a scale-dependent value beyond float64's range (inf)."""
    return float(value) if math.isfinite(value) else None
