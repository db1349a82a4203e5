"""``stabcli drift``'s report: frozen dataclasses, one per section, with ``schema.doc``
fields, converted to JSON by ``schema.to_json``; and the per-key table (``--per-key``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from stabcli.environment import EnvironmentDifference
from stabcli.reports.schema import Check, JsonReport, doc

ADDED_REMOVED_LISTED = 20  # keys_added / keys_removed samples kept in the report
# --measure: direction by default, what cosine neighbours and similarities see; length and
# the Euclidean distance (which mixes both) on request
DEFAULT_MEASURE = "direction"


@dataclass(frozen=True)
class TopKey:
    key: str = doc("the key")
    name: str | None = doc("its display name (--key-names), or null")
    distance: float = doc("‖b − a‖ (AFTER aligned unless --no-align)")
    cosine_distance: float = doc("1 − cos(b, a)")
    norm_change: float = doc("‖a‖ − ‖b‖")
    knn_overlap: float | None = doc("share of its k nearest neighbours kept BEFORE → AFTER")
    frequency: float | None = doc("its count in the run set's corpus, or null")
    noise_scale: float | None = doc("its RMS distance between two noise runs (null without --noise)")
    noise_band: float | None = doc("the distance flagged at alpha for this key (null without --noise)")
    ratio: float | None = doc("distance / noise scale, level-adjusted (null without --noise)")
    p_value: float | None = doc("against the pooled noise null (null without --noise)")
    q_value: float | None = doc("Benjamini–Hochberg q (null without --noise)")
    relative_norm_change: float | None = doc("(‖a‖ − ‖b‖) / ‖b‖ (null for a zero BEFORE row)", default=None)
    direction_p: float | None = doc("p-value of the direction test (null without --noise)", default=None)
    length_p: float | None = doc("p-value of the length test (null without --noise)", default=None)
    beyond_global: bool | None = doc(
        "discovered by the test against the global change (null without --noise)", default=None
    )


@dataclass(frozen=True)
class InputSection:
    before: str = doc("BEFORE as given")
    after: str = doc("AFTER as given")
    noise: str | None = doc("the --noise run set, or null")
    noise_runs: int | None = doc("finished runs in the noise set, or null")
    before_in_noise: bool | None = doc("whether BEFORE is one of the noise runs, or null")
    keys_compared: int = doc("keys in both BEFORE and AFTER")
    keys_added: int = doc("keys only in AFTER")
    keys_removed: int = doc("keys only in BEFORE")
    added: list[str] = doc(f"the first {ADDED_REMOVED_LISTED} added keys")
    removed: list[str] = doc(f"the first {ADDED_REMOVED_LISTED} removed keys")
    dim: int = doc("dimensions")
    aligned: bool = doc("AFTER rotated onto BEFORE (orthogonal Procrustes); false with --no-align")
    alignment_residual: float | None = doc("‖AFTER·Q − BEFORE‖_F / ‖BEFORE‖_F, or null with --no-align")
    keyless: bool = doc("rows matched by position (keyless arrays)")
    key_names: str | None = doc("the --key-names file, or null")
    environment: list[EnvironmentDifference] = doc(
        "the environment fields (package versions, BLAS kernel, CPU) on which BEFORE, AFTER and the noise runs "
        "differ, as recorded by pretrain (per run) or featurize (sidecar); empty when they agree or are not recorded",
        default_factory=list,
    )


NEEDS_NOISE = (
    "noise",
    "drift.moved_count",
    "drift.moved_share",
    "drift.expected_false_positives",
    "drift.discoveries",
    "drift.moved_beyond_global",
    "drift.global_moved",
    "drift.by_measure",
)


@dataclass(frozen=True)
class MeasureSummary:
    moved_count: int = doc("keys with p < alpha on this measure")
    moved_share: float = doc("moved_count / keys compared")
    discoveries: int = doc("keys with Benjamini–Hochberg q ≤ alpha")
    beyond_global: int = doc("discoveries of the test against the global change")
    drift_to_noise: float = doc("median statistic BEFORE→AFTER / median noise scale")
    global_ratio: float = doc("typical ratio of this refresh relative to a noise pair's (1 = like a seed change)")
    level_range_low: float = doc("lowest level of a noise pair")
    level_range_high: float = doc("highest level of a noise pair")
    ratio_threshold: float = doc("the null's 1 − alpha quantile of the level-adjusted ratio")
    smallest_p: float = doc("smallest p-value over keys")


@dataclass(frozen=True)
class DriftSection:
    distance_median: float = doc("median over keys of ‖b − a‖")
    distance_mean: float = doc("mean of ‖b − a‖")
    distance_p90: float = doc("90th percentile of ‖b − a‖")
    distance_p99: float = doc("99th percentile of ‖b − a‖")
    cosine_distance_median: float = doc("median of 1 − cos(b, a)")
    cosine_distance_p90: float = doc("90th percentile of 1 − cos(b, a)")
    norm_change_median: float = doc("median of ‖a‖ − ‖b‖")
    relative_norm_change_median: float = doc("median of (‖a‖ − ‖b‖) / ‖b‖")
    dot_median: float = doc("median of ⟨b, a⟩")
    knn_overlap: float = doc("mean k-NN overlap BEFORE vs AFTER over knn_keys keys")
    knn_k: int = doc("k of the k-NN overlap (--knn-k)")
    knn_keys: int = doc("keys the overlap is averaged over")
    knn_sampled: bool = doc("a seeded sample of keys (above 10,000 keys), not every key")
    knn_chance: float = doc("the overlap expected by chance, k/(n−1)")
    moved_count: int | None = doc("keys with p < alpha (null without --noise)", default=None)
    moved_share: float | None = doc("moved_count / keys compared (null without --noise)", default=None)
    expected_false_positives: float | None = doc("alpha × keys compared (null without --noise)", default=None)
    discoveries: int | None = doc("keys with Benjamini–Hochberg q ≤ alpha (null without --noise)", default=None)
    moved_beyond_global: int | None = doc(
        "keys that moved beyond the global change (FDR alpha, the ratio divided by the global ratio when the "
        "whole embedding moved more than any noise pair; else equal to discoveries); null without --noise",
        default=None,
    )
    global_moved: bool | None = doc(
        "the typical key moved more than between any two noise runs (global_ratio above the noise pairs' range)",
        default=None,
    )
    global_scale: float | None = doc(
        "median over keys of ‖a‖ / ‖b‖: the refresh's global change of length", default=None
    )
    by_measure: dict[str, MeasureSummary] | None = doc(
        "each measure's test (`direction`, `length`, `distance`); null without --noise", default=None
    )
    top_by: str = doc("order of top: p_value (with --noise) or distance", default="distance")
    top: list[TopKey] = doc(
        "the moved keys listed (at most --top; without --noise the largest changes)", default_factory=list
    )


@dataclass(frozen=True)
class NoiseSection:
    alpha: float = doc("level of the per-key test and of the FDR (--alpha)")
    runs: int = doc("noise runs")
    pairs: int = doc("noise run pairs")
    null_samples: int = doc("samples of the pooled null distribution")
    statistic: str = doc("the statistic, in words")
    noise_median: float = doc("median over keys of the key's RMS noise pair distance")
    drift_to_noise: float = doc("median drift / median noise")
    global_ratio: float = doc("this refresh's typical ratio relative to a noise pair's (1 = moves like a seed change)")
    level_factor: float = doc("the level applied (global ratio clipped to the noise pairs' range)")
    level_range_low: float = doc("lowest level of a noise pair")
    level_range_high: float = doc("highest level of a noise pair")
    ratio_threshold: float = doc("the null's 1 − alpha quantile of the level-adjusted ratio")
    measure: str = doc(
        "`--measure` that decides moved: `direction` (cosine distance, default), `length` (|ln ‖a‖/‖b‖|) or "
        "`distance` (‖b − a‖); the fields above are its",
        default=DEFAULT_MEASURE,
    )
    smallest_empirical_p: float = doc(
        "1/(1 + null_samples): the smallest p-value the noise set gives; smaller ones come from the fitted "
        "exponential tail",
        default=1.0,
    )
    compatibility: str = doc(
        "`checked` (BEFORE and the noise run set share corpus and configuration), `overridden` "
        "(--allow-noise-mismatch) or `unchecked` (BEFORE is not a run set: scale checks only)",
        default="unchecked",
    )
    warnings: list[str] = doc(
        "noise that may not fit BEFORE: a configuration mismatch allowed with --allow-noise-mismatch, noise norms "
        "far from BEFORE's, or a median drift far below the noise",
        default_factory=list,
    )


@dataclass(frozen=True)
class DownstreamSection:
    labels: str = doc("the --labels file")
    task: str = doc("classification, regression or multilabel")
    model: str = doc("logreg, knn, ridge, gbdt, mlp or an estimator's module:Class")
    metric: str = doc("accuracy, r2 or f1_micro (multilabel)")
    train: int = doc("training keys")
    test: int = doc("test keys")
    skipped_keys: int = doc("labeled keys not compared (not in both embeddings)")
    feature_scale: float = doc("power of two the vectors were divided by before fitting (1.0 normally)")
    label_scale: float = doc("power of two regression labels were divided by (1.0 normally; churn is in label units)")
    before: float = doc("BEFORE's model on BEFORE")
    refit: float = doc("a model refit on AFTER")
    stale_raw: float = doc("BEFORE's model on raw AFTER")
    stale_aligned: float | None = doc("BEFORE's model on aligned AFTER (null with --no-align)")
    drop_raw: float = doc("refit − stale_raw")
    drop_aligned: float | None = doc("refit − stale_aligned (null with --no-align)")
    churn_refit: float = doc(
        "share of test decisions the refit model changes (multilabel: (key, label) decisions; regression: "
        "RMS difference of the predictions, label units)"
    )
    churn_stale_aligned: float | None = doc("the same for BEFORE's model on aligned AFTER (null with --no-align)")


@dataclass(frozen=True)
class DriftReport(JsonReport):
    stabcli_version: str = doc("version that wrote the report")
    input: InputSection = doc("what was compared")
    drift: DriftSection = doc("per-key change BEFORE → AFTER")
    noise: NoiseSection | None = doc("the noise band (null without --noise)")
    downstream: DownstreamSection | None = doc("BEFORE's model on AFTER (null without --labels)")
    checks: list[Check] = doc("the --check results, in the order given", default_factory=list)
    passed: bool = doc("true when every check passed (true without checks)", default=True)


@dataclass
class PerKey:
    """Every compared key's measures, noise band and verdict (the ``--per-key`` table)."""

    columns: dict[str, np.ndarray | list]

    def frame(self, compact: bool = False) -> Any:
        """The table as a DataFrame; ``compact`` stores float columns as float32 for CSV (their
        shortest repr is exact for the float32 vectors and ten times faster to write than a
        float_format: 200,000 keys in 2 s instead of 30 s)."""
        import pandas as pd

        frame = pd.DataFrame(self.columns)
        if compact:
            frame = frame.astype({c: np.float32 for c in frame.select_dtypes("float64").columns})
        return frame
