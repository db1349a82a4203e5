"""``stabcli drift``'s computation: AFTER aligned onto BEFORE, every key's change, the noise
tests of every measure (``stabcli.measure.drift_stats``), the k-NN overlap, the report's
sections and the per-key table."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from stabcli import __version__
from stabcli.commands.drift_inputs import DriftInputs, DriftOptions
from stabcli.environment import differences
from stabcli.errors import OptionError
from stabcli.measure import drift_stats as dm
from stabcli.measure import metrics as m
from stabcli.measure.align import procrustes_rotation
from stabcli.measure.neighbours import knn_overlap
from stabcli.reports.drift_report import (
    ADDED_REMOVED_LISTED,
    DownstreamSection,
    DriftReport,
    DriftSection,
    InputSection,
    MeasureSummary,
    NoiseSection,
    PerKey,
    TopKey,
)

if TYPE_CHECKING:
    from stabcli.measure.downstream import DownstreamOptions

KNN_ALL_MAX_KEYS = 10_000  # k-NN overlap for every key up to this many keys (n² ≤ 1e8), else a seeded sample
SCALE_WARNING = 1.5  # noise runs' median norm more than this factor from BEFORE's: a warning
LOW_DRIFT_WARNING = 0.5  # global ratio (typical key's change vs a noise pair's) below this: a warning


def compute_drift(
    inputs: DriftInputs,
    options: DriftOptions,
    downstream: DownstreamOptions | None = None,
    key_names: dict[str, str] | None = None,
    key_names_path: str | None = None,
    on_step: Callable[[str], None] | None = None,
    on_warning: Callable[[str], None] | None = None,
) -> tuple[DriftReport, PerKey]:
    """The drift report and the per-key table of one BEFORE→AFTER comparison. ``on_warning``
    hears what the downstream plan announces (labels read as multi-label, dropped classes),
    as in audit."""
    step = on_step or (lambda _: None)
    n = len(inputs.keys)
    if options.knn_k >= n:
        raise OptionError("knn_k", f"{options.knn_k} must be less than the number of compared keys ({n})")
    plan = None
    if downstream is not None:  # a bad label file fails before the long computations
        from stabcli.measure.downstream import plan_downstream

        plan = plan_downstream(downstream, inputs.keys, 2, inputs.dim, on_warning, variants=["h"])

    step("alignment")
    rotation = procrustes_rotation(inputs.a, inputs.b) if options.align else None
    change = dm.key_change(inputs.b, inputs.a, rotation)
    residual = None
    if rotation is not None:
        energy = float(np.sum(np.square(change.norm_before)))
        residual = math.sqrt(float(np.sum(np.square(change.distance))) / energy) if energy > 0 else 0.0
    columns = _change_columns(inputs, change, key_names)

    tests: dict[str, dm.MeasureTest] | None = None
    if inputs.noise_runs is not None:
        step(f"noise band: {len(inputs.noise_runs) * (len(inputs.noise_runs) - 1) // 2} run pairs")
        tests = noise_tests(inputs, change, options.alpha)
        columns.update(_test_columns(tests, options.measure))
    top_idx = _top_order(change, tests, options)

    step("nearest neighbours")
    knn, knn_mean, queries, sampled = _knn_overlap(inputs, options, top_idx)
    columns["knn_overlap"] = knn

    drift_section = DriftSection(
        **_change_summary(change),
        knn_overlap=knn_mean,
        knn_k=options.knn_k,
        knn_keys=queries,
        knn_sampled=sampled,
        knn_chance=options.knn_k / (n - 1),
        top_by="distance" if tests is None else "p_value",
        top=_top_keys(top_idx, inputs, change, columns, key_names),
        **(_moved_fields(tests, options, n) if tests is not None else {}),
    )
    noise_section = _noise_section(inputs, change, tests, options) if tests is not None else None

    downstream_section = None
    if plan is not None:
        assert downstream is not None  # the plan comes from the label options
        from stabcli.measure.downstream import refresh_report

        step("downstream")
        refresh = refresh_report(inputs.b, inputs.a, rotation, inputs.keys, downstream, step, plan)
        downstream_section = DownstreamSection(labels=str(downstream.labels), **refresh)

    input_section = _input_section(inputs, options, residual, key_names_path)
    report = DriftReport(__version__, input_section, drift_section, noise_section, downstream_section)
    return report, PerKey(columns)


def _input_section(
    inputs: DriftInputs, options: DriftOptions, residual: float | None, key_names_path: str | None
) -> InputSection:
    return InputSection(
        before=inputs.before,
        after=inputs.after,
        noise=inputs.noise,
        noise_runs=len(inputs.noise_runs) if inputs.noise_runs is not None else None,
        before_in_noise=inputs.before_in_noise,
        keys_compared=len(inputs.keys),
        keys_added=len(inputs.added),
        keys_removed=len(inputs.removed),
        added=inputs.added[:ADDED_REMOVED_LISTED],
        removed=inputs.removed[:ADDED_REMOVED_LISTED],
        dim=inputs.dim,
        aligned=options.align,
        alignment_residual=residual,
        keyless=inputs.keyless,
        key_names=key_names_path,
        environment=differences(inputs.environments),
    )


def _relative_norm_change(change: dm.KeyChange) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(change.norm_before > 0, change.norm_change / change.norm_before, np.nan)


def _change_columns(inputs: DriftInputs, change: dm.KeyChange, key_names: dict[str, str] | None) -> dict[str, Any]:
    """The per-key table's columns of the change itself (before any test)."""
    n = len(inputs.keys)
    columns: dict[str, Any] = {"key": inputs.keys}
    if key_names is not None:
        columns["name"] = [key_names.get(k, "") for k in inputs.keys]
    columns["frequency"] = inputs.frequency if inputs.frequency is not None else np.full(n, np.nan)
    columns.update(
        distance=change.distance,
        cosine_distance=change.cosine_distance,
        norm_before=change.norm_before,
        norm_after=change.norm_after,
        norm_change=change.norm_change,
        relative_norm_change=_relative_norm_change(change),
        dot=change.dot,
    )
    return columns


def noise_tests(inputs: DriftInputs, change: dm.KeyChange, alpha: float) -> dict[str, dm.MeasureTest]:
    """Every measure's test (``drift_stats.measure_test``) of BEFORE→AFTER against the
    noise run pairs; the pair statistics are dropped measure by measure."""
    assert inputs.noise_runs is not None
    runs = len(inputs.noise_runs)
    pair_stats, pairs = dm.pair_measures(inputs.noise_runs)
    statistics = dm.key_statistics(change)
    tests = {}
    for measure in dm.MEASURES:
        tests[measure] = dm.measure_test(
            measure, statistics[measure], pair_stats.pop(measure), pairs, runs, bool(inputs.before_in_noise), alpha
        )
    return tests


def _test_columns(tests: dict[str, dm.MeasureTest], measure: str) -> dict[str, Any]:
    """The deciding measure's band and verdict, and every measure's ratio, p and q."""
    chosen = tests[measure]
    columns: dict[str, Any] = dict(
        statistic=chosen.statistic,
        noise_scale=chosen.scale,
        noise_median=chosen.pair_median,
        noise_band=chosen.scale * chosen.factor * chosen.threshold,
        ratio=chosen.ratio,
        p_value=chosen.p,
        q_value=chosen.q,
        moved=chosen.moved,
        discovered=chosen.discovered,
        beyond_global=chosen.beyond_global,
    )
    for name, test in tests.items():
        columns.update({f"{name}_ratio": test.ratio, f"{name}_p": test.p, f"{name}_q": test.q})
    return columns


def _top_order(change: dm.KeyChange, tests: dict[str, dm.MeasureTest] | None, options: DriftOptions) -> list[int]:
    """The listed keys: without noise the largest distances; with noise the discoveries of
    the deciding measure (beyond the global change when the whole embedding moved), by
    p-value then ratio."""
    if tests is None:
        return [int(i) for i in np.argsort(-change.distance, kind="stable")[: options.top]]
    test = tests[options.measure]
    listed = test.beyond_global if test.global_moved else test.discovered
    p = test.p if not test.global_moved else test.beyond_global_q
    order = np.lexsort((-test.ratio, p))  # smallest p first, then largest ratio
    return [int(i) for i in order if listed[i]][: options.top]


def _knn_overlap(inputs: DriftInputs, options: DriftOptions, top_idx: list[int]) -> tuple[np.ndarray, float, int, bool]:
    """(k-NN overlap per key, NaN where not computed; its mean over the queries; number of
    queries; sampled): every key up to ``KNN_ALL_MAX_KEYS``, else a seeded sample plus the listed keys."""
    n = len(inputs.keys)
    if n <= KNN_ALL_MAX_KEYS:
        queries, sampled = np.arange(n), False
    else:
        rng = np.random.default_rng(options.seed)
        queries, sampled = np.sort(rng.choice(n, size=min(options.knn_queries, n), replace=False)), True
    extra = np.setdiff1d(np.asarray(top_idx, dtype=np.int64), queries) if sampled else np.empty(0, dtype=np.int64)
    overlaps = knn_overlap([inputs.b, inputs.a], np.concatenate([queries, extra]), options.knn_k)
    knn = np.full(n, np.nan)
    knn[queries] = overlaps[: len(queries)]
    knn[extra] = overlaps[len(queries) :]
    return knn, float(np.mean(overlaps[: len(queries)])), len(queries), sampled


def _change_summary(change: dm.KeyChange) -> dict[str, Any]:
    relative = _relative_norm_change(change)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(change.norm_before > 0, change.norm_after / change.norm_before, np.nan)
    return dict(
        distance_median=float(np.median(change.distance)),
        distance_mean=float(np.mean(change.distance)),
        distance_p90=float(np.quantile(change.distance, 0.9)),
        distance_p99=float(np.quantile(change.distance, 0.99)),
        cosine_distance_median=float(np.median(change.cosine_distance)),
        cosine_distance_p90=float(np.quantile(change.cosine_distance, 0.9)),
        norm_change_median=float(np.median(change.norm_change)),
        relative_norm_change_median=float(np.nanmedian(relative)) if np.isfinite(relative).any() else math.nan,
        dot_median=float(np.median(change.dot)),
        global_scale=float(np.nanmedian(scale)) if np.isfinite(scale).any() else None,
    )


def _top_keys(
    top_idx: list[int],
    inputs: DriftInputs,
    change: dm.KeyChange,
    columns: dict[str, Any],
    key_names: dict[str, str] | None,
) -> list[TopKey]:
    def opt(column: str, i: int) -> float | None:
        return float(columns[column][i]) if column in columns and not np.isnan(columns[column][i]) else None

    return [
        TopKey(
            key=inputs.keys[i],
            name=key_names.get(inputs.keys[i]) if key_names else None,
            distance=float(change.distance[i]),
            cosine_distance=float(change.cosine_distance[i]),
            norm_change=float(change.norm_change[i]),
            knn_overlap=opt("knn_overlap", i),
            frequency=opt("frequency", i),
            noise_scale=opt("noise_scale", i),
            noise_band=opt("noise_band", i),
            ratio=opt("ratio", i),
            p_value=opt("p_value", i),
            q_value=opt("q_value", i),
            relative_norm_change=opt("relative_norm_change", i),
            direction_p=opt("direction_p", i),
            length_p=opt("length_p", i),
            beyond_global=bool(columns["beyond_global"][i]) if "beyond_global" in columns else None,
        )
        for i in top_idx
    ]


def _summary(test: dm.MeasureTest) -> MeasureSummary:
    noise_median = float(np.median(test.scale))
    return MeasureSummary(
        moved_count=int(test.moved.sum()),
        moved_share=float(test.moved.mean()),
        discoveries=int(test.discovered.sum()),
        beyond_global=int(test.beyond_global.sum()),
        drift_to_noise=float(np.median(test.statistic)) / noise_median if noise_median > 0 else math.inf,
        global_ratio=test.global_ratio,
        level_range_low=test.level_range[0],
        level_range_high=test.level_range[1],
        ratio_threshold=test.threshold,
        smallest_p=float(test.p.min()),
    )


def _moved_fields(tests: dict[str, dm.MeasureTest], options: DriftOptions, n: int) -> dict[str, Any]:
    chosen = tests[options.measure]
    return dict(
        moved_count=int(chosen.moved.sum()),
        moved_share=float(chosen.moved.mean()),
        expected_false_positives=options.alpha * n,
        discoveries=int(chosen.discovered.sum()),
        moved_beyond_global=int(chosen.beyond_global.sum()),
        global_moved=chosen.global_moved,
        by_measure={name: _summary(test) for name, test in tests.items()},
    )


STATISTICS = {
    "direction": "cosine distance after alignment",
    "length": "|ln(‖a‖/‖b‖)|",
    "distance": "‖b − a‖ after alignment",
}


def _noise_section(
    inputs: DriftInputs, change: dm.KeyChange, tests: dict[str, dm.MeasureTest], options: DriftOptions
) -> NoiseSection:
    chosen = tests[options.measure]
    summary = _summary(chosen)
    assert inputs.noise_runs is not None
    runs = len(inputs.noise_runs)
    return NoiseSection(
        alpha=options.alpha,
        runs=runs,
        pairs=runs * (runs - 1) // 2,
        null_samples=chosen.null_samples,
        statistic=f"{STATISTICS[options.measure]} / the key's RMS over noise run pairs, level-adjusted; "
        "empirical p-value against the pooled leave-out null (exponential tail beyond it)",
        noise_median=float(np.median(chosen.scale)),
        drift_to_noise=summary.drift_to_noise,
        global_ratio=chosen.global_ratio,
        level_factor=chosen.factor,
        level_range_low=chosen.level_range[0],
        level_range_high=chosen.level_range[1],
        ratio_threshold=chosen.threshold,
        measure=options.measure,
        smallest_empirical_p=chosen.smallest_empirical_p,
        compatibility=inputs.noise_check,
        warnings=inputs.noise_warnings + scale_warnings(inputs, change, chosen.global_ratio),
    )


def scale_warnings(inputs: DriftInputs, change: dm.KeyChange, global_ratio: float) -> list[str]:
    """Noise that may not be BEFORE's: noise runs whose median row norm is more than
    ``SCALE_WARNING`` times off BEFORE's, or a refresh whose typical key changed less than
    ``LOW_DRIFT_WARNING`` of what it changes between two noise runs (global ratio)."""
    assert inputs.noise_runs is not None
    before = float(np.median(change.norm_before))
    noise = float(np.median([np.median(m.row_norms(np.asarray(h, dtype=np.float64))) for h in inputs.noise_runs]))
    out = []
    if before > 0 and noise > 0 and not 1 / SCALE_WARNING <= noise / before <= SCALE_WARNING:
        out.append(
            f"the noise runs' median norm ({noise:.3g}) is {noise / before:.3g}× BEFORE's ({before:.3g}): "
            "the noise set may be trained on other data or another configuration"
        )
    if global_ratio < LOW_DRIFT_WARNING:
        out.append(
            f"the typical key changed {global_ratio:.2g}× as much as between two noise runs: far less than two "
            "seeds of BEFORE's training differ; the noise set may not be BEFORE's"
        )
    return out
