"""The audit report, typed: one frozen dataclass per section, documented field by field.

``stabcli.reports.schema`` turns these into JSON (``to_json``), resolves ``--check`` paths against
them before any computation (``check_path``) and generates the JSON reference in
``docs/json.md`` (``markdown_table(AuditReport)``). A key added here is a key added to the
JSON, the docs table and the checkable paths at once.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from stabcli.environment import EnvironmentDifference
from stabcli.measure.degenerate import DegenerateRuns
from stabcli.reports.schema import Check, JsonReport, doc


@dataclass(frozen=True)
class InputSection:
    source: str | None = doc("run-set directory (null for a list of files)")
    run_names: list[str] = doc("`run-NNN` names or file paths, in order")
    runs: int = doc("R, the number of runs compared")
    keys: int = doc("n, the keys common to every run")
    dim: int = doc("d, the embedding dimension")
    dropped_keys: int = doc("keys not present in every run, left out")
    normalized: bool = doc("`--normalize`: rows were L2-normalized first")
    seed: int = doc("`--seed` of the sampled pairs and queries")
    featurized: dict[str, Any] | None = doc(
        "for a run set written by `stabcli featurize`: its transform (the sidecar: `dim`, `sigma`, `seed`, "
        "`normalize`, `align_to`, `input`, …); null otherwise",
        default=None,
    )
    environment: list[EnvironmentDifference] = doc(
        "the environment fields (package versions, BLAS kernel, CPU) on which the runs' recorded training "
        "environments differ, e.g. after a resume on another machine; empty when they agree or are not recorded",
        default_factory=list,
    )
    degenerate: DegenerateRuns | None = doc(
        "runs that are identical or exact rotations of each other (a `--script` that ignores `{seed}`): "
        "their noise is zero by construction, so every stability number overstates; null when the runs differ",
        default=None,
    )


@dataclass(frozen=True)
class Histogram:
    edges: list[float] = doc("11 bin edges over [0, 1]")
    counts: list[int] = doc("10 counts, dimensions per bin")


@dataclass(frozen=True)
class PairSpread:
    mean: float | None = doc("mean over run pairs (null when no pair gives a finite value)")
    std: float | None = doc("standard deviation over run pairs (ddof=1; null for a single pair)")
    min: float | None = doc("smallest value over run pairs")
    median: float | None = doc("median over run pairs")
    max: float | None = doc("largest value over run pairs")
    pairs: int = doc("run pairs with a finite value")


@dataclass(frozen=True)
class ByPair:
    knn_overlap: PairSpread = doc("k-NN overlap@k of each run pair (mean over the queries)")
    cka: PairSpread = doc("linear CKA of each run pair")
    eigenspace_overlap: PairSpread = doc("eigenspace overlap of each run pair")
    pip_loss: PairSpread = doc("PIP loss of each run pair")
    pip_loss_relative: PairSpread = doc("PIP loss of each run pair divided by the mean ‖HHᵀ‖_F")
    semantic_displacement: PairSpread = doc("mean cosine distance after Procrustes, of each run pair")


@dataclass(frozen=True)
class FrequencyBand:
    band: str = doc("the band's label: `1`, `2–5`, `6–20`, `21–100`, `101–1,000`, `>1,000` (and `0`)")
    low: int = doc("smallest frequency in the band")
    high: int | None = doc("largest frequency in the band (null: no upper bound)")
    keys: int = doc("keys whose frequency lies in the band")
    relative_instability_median: float = doc("median over the band's keys of their relative instability")
    aligned_noise_share: float = doc(
        "the band's aligned noise share: Σ aligned variance × d / Σ mean squared norm over its keys"
    )
    knn_overlap_median: float | None = doc("median k-NN overlap@k of the band's keys that have one (null: none)")
    knn_keys: int = doc("keys of the band with a k-NN overlap (every key up to 10,000 keys, else a seeded sample)")


@dataclass(frozen=True)
class UnstableKey:
    key: str = doc("the key")
    name: str | None = doc("its display name from `--key-names` (null without)")
    frequency: int | None = doc("its training frequency (token count) from the run set, null where not recorded")
    band: str | None = doc("its frequency band (null without frequencies)")
    aligned_variance: float | None = doc(
        "mean over dimensions of its across-run variance after Procrustes (ddof=0); null beyond float64's range"
    )
    mean_squared_norm: float | None = doc("mean over runs of its squared L2 norm; null beyond float64's range")
    relative_instability: float = doc(
        "aligned_variance × d / mean_squared_norm: the key's own aligned noise share (0 = identical in every run, "
        "(R−1)/R = pure noise)"
    )
    knn_overlap: float = doc("its k-NN overlap@k between runs; the list is sorted by it, smallest first")
    peers_knn_overlap_median: float | None = doc(
        "median k-NN overlap of the keys in its frequency band (null without frequencies)", default=None
    )


@dataclass(frozen=True)
class RepresentationSection:
    noise_share: float = doc("overall coordinate noise share: Σ Var_r / Σ E_r[H²]")
    noise_share_independent: float = doc(
        "(R−1)/R, the noise share of runs that share nothing (pure noise), to read noise_share against"
    )
    noise_share_independent_std: float = doc(
        "standard deviation of the noise share when every run is turned by its own uniformly random rotation "
        "(mean exactly (R−1)/R); the pure-noise band is noise_share_independent ± 2 × this"
    )
    at_pure_noise_level: bool = doc(
        "noise_share ≥ noise_share_independent − 2 × noise_share_independent_std: the coordinates are as "
        "noisy as runs that share nothing"
    )
    noise_share_per_dim: list[float] = doc("one share per dimension")
    noise_share_histogram: Histogram = doc("histogram of the per-dimension shares over [0, 1]")
    variance_per_dim: list[float | None] = doc(
        "per dimension, mean over keys of Var_r (ddof=1) (paper Fig. 1a); null beyond float64's range"
    )
    aligned_noise_share: float = doc("noise share after generalized Procrustes to the consensus")
    aligned_noise_share_per_dim: list[float] = doc("aligned share per dimension")
    procrustes_iterations: int = doc("generalized Procrustes iterations used")
    inner_product_noise_share: float = doc("noise share of the cosine similarities of sampled key pairs (Fig. 1d)")
    inner_product_pairs: int = doc("number of key pairs sampled (`--pairs`)")
    inner_to_coordinate_ratio: float | None = doc("inner-product share / coordinate share (null if the latter is 0)")
    knn_overlap: float = doc("mean k-NN overlap@k over the sampled queries and run pairs")
    knn_k: int = doc("k (`--knn-k`)")
    knn_queries: int = doc("number of query keys sampled")
    knn_chance: float = doc("k/(n−1), the overlap of random neighbour lists")
    pip_loss: float | None = doc("mean PIP loss ‖H_r H_rᵀ − H_s H_sᵀ‖_F over run pairs; null beyond float64's range")
    pip_loss_relative: float | None = doc("pip_loss divided by the mean ‖HHᵀ‖_F")
    cka: float = doc("mean linear CKA over run pairs")
    eigenspace_overlap: float = doc("mean eigenspace overlap over run pairs")
    semantic_displacement: float = doc("mean cosine distance after pairwise Procrustes")
    by_pair: ByPair = doc("min / median / max over run pairs of every pairwise measure")
    least_stable: list[UnstableKey] = doc(
        "the `--top` keys of lowest k-NN overlap (ties: highest relative instability), least stable first"
    )
    least_stable_ranked: int = doc(
        "keys the list was chosen from: those with a k-NN overlap and a frequency ≥ min_frequency", default=0
    )
    min_frequency: int | None = doc(
        "`--min-frequency`: keys of lower frequency are not listed (null: all)", default=None
    )
    frequency_source: str | None = doc(
        "where the frequencies come from: `run set` (key_counts.txt or the corpus of a --script run set), "
        "the `--frequencies` file, or null (unknown)",
        default=None,
    )
    by_frequency: list[FrequencyBand] = doc(
        "stability per frequency band (empty without frequencies)", default_factory=list
    )
    eis: PairSpread | None = doc(
        "eigenspace instability score (Leszczynski et al. 2020) over run pairs: 0 = the runs span the same "
        "space weighted by the anchor's spectrum, 1 = orthogonal spans",
        default=None,
    )
    eis_alpha: float | None = doc("`--eis-alpha`, the exponent alpha of the anchor's spectrum", default=None)
    eis_anchor: str | None = doc(
        "`consensus` (the runs' generalized-Procrustes mean) or the `--eis-anchor` file", default=None
    )
    eis_keys: int | None = doc("keys EIS was computed on (the common keys the anchor has)", default=None)
    weighted_eigenspace_overlap: PairSpread | None = doc(
        "‖U_rᵀU_s S_s‖²/tr(S_s²) over ordered run pairs (anchor-stability's weighted eigen_overlap, exp 1, "
        "normalized); 1 = same span",
        default=None,
    )
    cka_debiased: PairSpread | None = doc(
        "debiased linear CKA (unbiased HSIC, Song et al. 2012) over run pairs: near 0 for unrelated runs at any n",
        default=None,
    )


@dataclass(frozen=True)
class Quantiles:
    min: float = doc("smallest")
    q25: float = doc("25th percentile")
    median: float = doc("median")
    q75: float = doc("75th percentile")
    max: float = doc("largest")


@dataclass(frozen=True)
class EpochRow:
    epoch: int = doc("epoch number, from 1")
    noise_share: float | None = doc("coordinate noise share of the epoch's `--checkpoints` snapshots (null without)")
    variance_mean: float | None = doc(
        "mean over keys and dimensions of the across-run variance (ddof=1) of the snapshots: the paper's Fig. 1c "
        "quantity, equal to the mean of representation.variance_per_dim for the final vectors (null without)"
    )
    variance_quantiles: Quantiles | None = doc("quantiles over dimensions of the per-dimension variance (null without)")
    loss_mean: float | None = doc("mean training loss over runs (null where no run reports one)")


@dataclass(frozen=True)
class TrainingSection:
    final_loss: list[float] | None = doc("last non-null loss per run (null if any run has none)")
    final_loss_mean: float | None = doc("mean of final_loss")
    final_loss_std: float | None = doc("std of final_loss (ddof=1)")
    final_loss_cv: float | None = doc("final_loss_std / |final_loss_mean|")
    loss_by_run: list[list[float | None]] | None = doc("per-run lists of per-epoch losses (null without losses)")
    reports_loss: bool = doc("whether the model reported any training loss (doc2vec does not)")
    by_epoch: list[EpochRow] = doc("one row per epoch with losses or checkpoints")


def _classification(v: VariantResult) -> bool:
    return v.task == "classification"


def _regression(v: VariantResult) -> bool:
    return v.task == "regression"


def _multilabel(v: VariantResult) -> bool:
    return v.task == "multilabel"


def _labeled(v: VariantResult) -> bool:
    return v.task != "regression"


@dataclass(frozen=True)
class FlipKey:
    key: str = doc("a test key")
    name: str | None = doc("its display name (`--key-names`), or null")
    frequency: int | None = doc("its training count (run sets that record it), or null")
    value: float = doc("its flip rate (classification, multi-label) or prediction range (regression)")


@dataclass(frozen=True)
class FlipBand:
    band: str = doc("the frequency band's label (the bands of `representation.by_frequency`)")
    low: int = doc("smallest frequency in the band")
    high: int | None = doc("largest frequency in the band (null: no upper bound)")
    keys: int = doc("test keys in the band")
    mean: float = doc("their mean flip rate (regression: mean prediction range)")
    unstable_share: float = doc("share of them with a nonzero flip rate (regression: range)")


@dataclass(frozen=True)
class FlipsSummary:
    keys: int = doc("test keys")
    unstable_keys: int = doc("test keys whose decision differs in at least one run pair (regression: range > 0)")
    flip_rate_mean: float | None = doc(
        "mean over test keys of the share of run pairs whose decisions differ (equals churn); null for regression"
    )
    prediction_range_mean: float | None = doc(
        "regression: mean over test keys of max − min of the key's prediction over runs (label units)"
    )
    prediction_range_median: float | None = doc("regression: its median")
    negative_to_positive: float | None = doc(
        "binary and multi-label: of the reference model's negative test decisions, the share another run's "
        "refit model makes positive (mean over runs); else null"
    )
    positive_to_negative: float | None = doc("the same from positive to negative")
    positive_class: str | None = doc("binary classification: the class counted as positive (the second sorted)")
    most_unstable: list[FlipKey] = doc("the test keys that flip most (`--top-flips`), most first, nonzero only")
    by_frequency: list[FlipBand] | None = doc("per frequency band (null when frequencies are unknown)")


@dataclass(frozen=True)
class VariantResult:
    task: str = doc("", json=False)
    dim: int = doc("feature dimension of the variant")
    source: str = doc("`h`, `avg` or `aligned`")
    sigma: float | None = doc("σ for phi variants (else null)")
    accuracy_mean: float | None = doc(
        "classification: mean test accuracy over runs", default=None, when=_classification
    )
    accuracy_std: float | None = doc(
        "classification: its std (ddof=1; null for `avg`)", default=None, when=_classification
    )
    accuracy_by_run: list[float] | None = doc("classification: one value per run", default=None, when=_classification)
    f1_micro_mean: float | None = doc(
        "multi-label: mean test micro-F1 (over every (key, label) decision)", default=None, when=_multilabel
    )
    f1_micro_std: float | None = doc("multi-label: its std (ddof=1; null for `avg`)", default=None, when=_multilabel)
    f1_micro_by_run: list[float] | None = doc("multi-label: per run", default=None, when=_multilabel)
    f1_macro_mean: float | None = doc(
        "classification, multi-label: mean macro-F1 (unweighted over classes or labels)", default=None, when=_labeled
    )
    f1_macro_std: float | None = doc("classification, multi-label: its std", default=None, when=_labeled)
    f1_macro_by_run: list[float] | None = doc("classification, multi-label: per run", default=None, when=_labeled)
    subset_accuracy_mean: float | None = doc(
        "multi-label: mean share of test keys whose whole label set is predicted exactly",
        default=None,
        when=_multilabel,
    )
    subset_accuracy_std: float | None = doc("multi-label: its std", default=None, when=_multilabel)
    subset_accuracy_by_run: list[float] | None = doc("multi-label: per run", default=None, when=_multilabel)
    r2_mean: float | None = doc("regression: mean test R²", default=None, when=_regression)
    r2_std: float | None = doc("regression: its std (ddof=1; null for `avg`)", default=None, when=_regression)
    r2_by_run: list[float] | None = doc("regression: per run", default=None, when=_regression)
    rmse_mean: float | None = doc("regression: mean test RMSE", default=None, when=_regression)
    rmse_std: float | None = doc("regression: its std", default=None, when=_regression)
    rmse_by_run: list[float] | None = doc("regression: per run", default=None, when=_regression)
    churn: float | None = doc(
        "mean over run pairs of the share of differing test decisions (multi-label: (key, label) decisions; "
        "regression: RMS difference, label units); null for `avg`",
        default=None,
    )
    label_churn: dict[str, float] | None = doc(
        "multi-label: per label, the share of test keys whose decision for it differs (mean over run pairs)",
        default=None,
        when=_multilabel,
    )
    stale_accuracy_mean: float | None = doc(
        "classification: the reference run's model applied to the other runs, mean accuracy",
        default=None,
        when=_classification,
    )
    stale_f1_micro_mean: float | None = doc("multi-label: the same in micro-F1", default=None, when=_multilabel)
    stale_r2_mean: float | None = doc("regression: the same in R²", default=None, when=_regression)
    stale_drop: float | None = doc("mean refit − stale metric", default=None)
    flips: FlipsSummary | None = doc("per-key prediction instability over the runs (null for `avg`)", default=None)

    def metric(self, name: str) -> Any:
        """A metric by its JSON name (``accuracy_mean``, ``stale_r2_mean``, …)."""
        return getattr(self, name)


@dataclass(frozen=True)
class Recommendation:
    variant: str | None = doc("the recommended variant (null when nothing can be compared)")
    reason: str = doc("the sentence explaining it, with the rule applied")
    prefer: str = doc(
        "`--prefer`: `stability` (never more churn or std than the input), `balanced` (default: only for a gain "
        "beyond 2× the noise) or `accuracy` (beyond 1× the noise, then the best metric)",
        default="balanced",
    )


@dataclass(frozen=True)
class DownstreamSection:
    labels: str = doc("label file")
    task: str = doc("`classification`, `regression` or `multilabel`")
    model: str = doc("`logreg`, `knn`, `ridge`, `gbdt`, `mlp` or an estimator's `module:Class`")
    classes: int | None = doc("number of classes, or of labels for multi-label (null for regression)")
    train: int = doc("keys in the training split")
    test: int = doc("keys in the test split")
    skipped_keys: int = doc("common keys without a label")
    min_class_size: int = doc("`--min-class-size`: smaller classes are dropped")
    feature_scale: float = doc("power of two the features were divided by before fitting (1.0 normally)")
    label_scale: float = doc(
        "power of two regression labels were divided by (1.0 normally; RMSE and churn are in label units)"
    )
    test_size: float = doc("`--test-size`")
    split_seed: int = doc("`--split-seed`")
    reference: str = doc("name of the `--reference` run")
    phi_seed: int = doc("seed of the random Fourier directions")
    majority_accuracy: float | None = doc(
        "accuracy of always predicting the most frequent training class (null for regression)"
    )
    not_converged: int = doc("fits whose solver stopped before converging (0 normally)")
    variants: dict[str, VariantResult] = doc(
        "one entry per variant, by name (`h`, `avg`, `aligned`, `phi:64`, `phi:64@0.5`, …)"
    )
    recommendation: Recommendation = doc(
        "the variant to use: the steadiest one within the noise of the best, where a variant with more churn or "
        "std than the input (`h`, or `phi(h)` for a featurized run set) must gain beyond the --prefer margin"
    )
    dropped_classes: dict[str, int] = doc(
        "classes with fewer labeled keys than `--min-class-size`, left out: class → "
        "labeled keys (empty for regression)",
        default_factory=dict,
    )
    model_params: dict[str, Any] = doc("the `--model-param` values (a non-literal's repr)", default_factory=dict)
    labels_per_key: float | None = doc("multi-label: mean labels per labeled key (else null)", default=None)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DownstreamSection:
        """The section from ``downstream.downstream_report``'s dict; a key this type does not
        declare is a programming error (add it here, with its meaning)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise AssertionError(f"downstream keys {unknown} are not declared in DownstreamSection")
        task = data["task"]
        variant_keys = {f.name for f in fields(VariantResult)}
        variants = {}
        for name, entry in data["variants"].items():
            extra = sorted(set(entry) - variant_keys)
            if extra:
                raise AssertionError(f"variant keys {extra} are not declared in VariantResult")
            flips = entry.get("flips")
            if flips is not None:
                entry = {
                    **entry,
                    "flips": FlipsSummary(
                        **{
                            **flips,
                            "most_unstable": [FlipKey(**k) for k in flips["most_unstable"]],
                            "by_frequency": None
                            if flips["by_frequency"] is None
                            else [FlipBand(**b) for b in flips["by_frequency"]],
                        }
                    ),
                }
            variants[name] = VariantResult(task=task, **entry)
        return cls(**{**data, "variants": variants, "recommendation": Recommendation(**data["recommendation"])})


@dataclass(frozen=True)
class NextItemAtK:
    recall_mean: float = doc("Recall@K: share of users whose held-out item is in the top K, mean over runs")
    recall_std: float | None = doc("its std over runs (ddof=1; null for one run)")
    recall_by_run: list[float] = doc("per run")
    ndcg_mean: float = doc("NDCG@K: mean of 1/log2(1 + rank) of the held-out item (0 outside the top K)")
    ndcg_std: float | None = doc("its std over runs (ddof=1; null for one run)")
    ndcg_by_run: list[float] = doc("per run")
    jaccard: float | None = doc(
        "list churn: Jaccard overlap of a user's two top-K lists, mean over users and run pairs"
    )
    rbo: float | None = doc("rank-biased overlap (p = rbo_p) of the same lists, truncated at K and normalized")
    jaccard_chance: float = doc("the Jaccard overlap of two unrelated top-K lists (hypergeometric)")
    rbo_chance: float = doc("the rank-biased overlap of two unrelated rankings")
    stale_recall_raw: float | None = doc(
        "h only: the reference run's user profiles against the other runs' raw item vectors, mean Recall@K"
    )
    stale_recall_aligned: float | None = doc("the same against item vectors rotated into the reference frame")
    stale_ndcg_raw: float | None = doc("h only: the same in NDCG@K, raw")
    stale_ndcg_aligned: float | None = doc("the same in NDCG@K, aligned")


@dataclass(frozen=True)
class NextItemSection:
    interactions: str = doc("the `--interactions` file")
    corpus: dict[str, Any] = doc("how it was read (pretrain's corpus summary: format, delimiter, columns, …)")
    users: int = doc("users in the file")
    evaluable_users: int = doc("users with a held-out item and a history that have vectors")
    evaluated_users: int = doc("users scored (a seeded sample of `--users` when more are evaluable)")
    sampled: bool = doc("whether the evaluated users are a sample")
    user_seed: int = doc("seed of the user sample")
    skipped_users: dict[str, int] = doc(
        "users left out: `one_interaction`, `no_vector` (held-out or every history item), `repeat` (held-out "
        "item already in the history)"
    )
    items: int = doc("items ranked (the runs' common keys)")
    history_mean: float = doc("mean history length of the evaluated users")
    k_list: list[int] = doc("`--k-list`")
    rbo_p: float = doc("persistence p of the rank-biased overlap")
    reference: str = doc("the run whose user profiles are used stale")
    variants: dict[str, dict[str, dict[str, NextItemAtK]]] = doc(
        "variant → profile (`mean`, `last`) → K → metrics, e.g. `next_item.variants.h.mean.10.recall_mean`"
    )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NextItemSection:
        """The section from ``nextitem.next_item_report``'s dict."""
        variants = {
            name: {kind: {k: NextItemAtK(**m) for k, m in per_k.items()} for kind, per_k in by_kind.items()}
            for name, by_kind in data["variants"].items()
        }
        return cls(**{**data, "variants": variants})


@dataclass(frozen=True)
class AuditReport(JsonReport):
    stabcli_version: str = doc("version that wrote the report")
    input: InputSection = doc("what was compared")
    representation: RepresentationSection = doc("stability of the vectors themselves")
    training: TrainingSection = doc("training losses and per-epoch stability (run sets only)")
    downstream: DownstreamSection | None = doc("downstream fluctuation across runs; null without `--labels`")
    next_item: NextItemSection | None = doc(
        "next-item recommendation across runs; null without `--interactions`", default=None
    )
    checks: list[Check] = doc("the `--check` results, in the order given", default_factory=list)
    passed: bool = doc("true when every check passed (true without checks)", default=True)
    downstream_keys: Any = doc(
        "every test key's flip rate per variant for --per-key (stabcli.measure.downstream.flips.PerKeyFlips); "
        "not in the JSON",
        default=None,
        json=False,
    )
    key_stats: Any = doc(
        "every key's numbers for --per-key (stabcli.commands.audit_compute.KeyStats); not in the JSON",
        default=None,
        json=False,
    )
