"""``stabcli drift``: did a refresh really move these keys, or is it training noise?

BEFORE and AFTER (embedding files, or run sets' ``--reference`` run) are compared on their
common keys after orthogonal Procrustes of AFTER onto BEFORE. With a noise run set (seeded
runs on BEFORE's data and configuration) every key gets its own noise band, and a key has
moved when its change exceeds that band at level ``alpha`` (the statistic is in
``stabcli.measure.drift_stats.noise_band``). The report is frozen dataclasses, one per section,
with ``schema.doc`` fields, converted to JSON by ``schema.to_json``; ``--check`` paths are
validated against the types before anything is loaded (``schema.validate_checks``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from stabcli import __version__
from stabcli.commands.featurize import SIDECAR_SUFFIX
from stabcli.constraints import DRIFT_OPTIONS, Constraint, validate_params
from stabcli.environment import EnvironmentDifference, differences, read_recorded
from stabcli.errors import InputError, OptionError, quote
from stabcli.inputs.embeddings import Embedding, ReadOptions, match_inputs
from stabcli.inputs.embeddings.core import require_float32_range
from stabcli.measure import drift_stats as dm
from stabcli.measure import metrics as m
from stabcli.measure.align import match_keys, matched_vectors, procrustes_rotation, rows_of
from stabcli.reports import schema
from stabcli.reports.schema import Check, JsonReport, doc
from stabcli.runset import RunSet, is_runset
from stabcli.runset.layout import run_name

if TYPE_CHECKING:
    from stabcli.measure.downstream import DownstreamOptions

KNN_ALL_MAX_KEYS = 10_000  # k-NN overlap for every key up to this many keys (n² ≤ 1e8), else a seeded sample
ADDED_REMOVED_LISTED = 20  # keys_added / keys_removed samples kept in the report
# --measure: direction by default, what cosine neighbours and similarities see; length and
# the Euclidean distance (which mixes both) on request
DEFAULT_MEASURE = "direction"
SCALE_WARNING = 1.5  # noise runs' median norm more than this factor from BEFORE's: a warning
LOW_DRIFT_WARNING = 0.5  # global ratio (typical key's change vs a noise pair's) below this: a warning
# the training configuration fields a noise run set must share with BEFORE's (checkpoints do not change vectors)
NOISE_CONFIG_IGNORED = ("checkpoints",)


# ------------------------------------------------------------------ options


@dataclass(frozen=True)
class DriftOptions:
    """Options of a drift comparison; validated on construction (``OptionError`` names the parameter)."""

    alpha: float = 0.01
    align: bool = True
    knn_k: int = 10
    knn_queries: int = 1_000
    top: int = 20
    seed: int = 0
    reference: int = 0
    measure: str = DEFAULT_MEASURE

    parameter_constraints: ClassVar[dict[str, Constraint]] = DRIFT_OPTIONS

    def __post_init__(self) -> None:
        validate_params(self)


# ------------------------------------------------------------------ loading


@dataclass
class DriftInputs:
    """BEFORE and AFTER restricted to their common keys (BEFORE's order), and the noise runs."""

    before: str
    after: str
    keys: list[str]
    b: np.ndarray
    a: np.ndarray
    added: list[str]
    removed: list[str]
    keyless: bool
    noise: str | None = None
    noise_runs: list[np.ndarray] | None = None
    before_in_noise: bool | None = None
    frequency: np.ndarray | None = None
    input_paths: list[Path] = field(default_factory=list)
    environments: dict[str, dict[str, str] | None] = field(default_factory=dict)  # recorded, by source
    noise_check: str = "unchecked"  # checked | overridden | unchecked (NoiseSection.compatibility)
    noise_warnings: list[str] = field(default_factory=list)

    @property
    def dim(self) -> int:
        return int(self.b.shape[1])


def _load_side(path: Path, reference: int, read: ReadOptions) -> tuple[Embedding, RunSet | None, int | None]:
    """An embedding file, or the ``reference`` run of a run set."""
    if path.is_dir():
        runset = RunSet.open_finished(path)
        if reference >= len(runset.runs):
            raise OptionError(
                "reference", f"{reference}: {path} has {len(runset.runs)} finished run(s) (0 to {len(runset.runs) - 1})"
            )
        index = runset.runs[reference]
        return runset.load(index), runset, index
    return read.read(path), None, None


def load_inputs(
    before: str | Path,
    after: str | Path,
    noise: str | Path | None = None,
    reference: int = 0,
    read: ReadOptions | None = None,
    allow_noise_mismatch: bool = False,
) -> DriftInputs:
    """Read BEFORE, AFTER (with ``read``: ``--input-format``, ``--trust-pickle``, ``--keys``)
    and the noise run set and match them on keys (``embeddings.match_inputs`` for keyless arrays).

    Raises ``InputError`` naming the file for mismatched dimensions, no common keys, NaN or
    inf rows, keyless inputs mixed with keyed ones, a noise run set with too few runs or
    without some of the compared keys.
    """
    before, after = Path(before), Path(after)
    read = read or ReadOptions()
    b_emb, b_set, b_index = _load_side(before, reference, read)
    a_emb, _a_set, _a_index = _load_side(after, reference, read)
    if a_emb.dim != b_emb.dim:
        raise InputError(f"{a_emb.source}: dimension {a_emb.dim}, but {b_emb.source} has {b_emb.dim}")
    b_emb, a_emb = match_inputs([b_emb, a_emb], read.keys_file)
    b_keyless = b_emb.keyless
    match = match_keys([b_emb.keys, a_emb.keys])
    keys, removed, added = match.keys, match.only_in(0), match.only_in(1)
    if not keys:
        raise InputError(f"{a_emb.source}: no keys in common with {b_emb.source}")
    if len(keys) < 2:
        raise InputError(f"{a_emb.source}: only 1 key in common with {b_emb.source}; drift needs at least 2")
    b, a = (matched_vectors(emb, rows, keys) for emb, rows in zip((b_emb, a_emb), match.rows, strict=True))
    for emb, arr in ((b_emb, b), (a_emb, a)):
        require_float32_range(emb.source, keys, arr, DRIFT_RANGE)
    inputs = DriftInputs(str(before), str(after), keys, b, a, added, removed, b_keyless)
    inputs.environments = {
        "before": recorded_environment(before, b_set, b_index),
        "after": recorded_environment(after, _a_set, _a_index),
    }
    frequency_set = b_set
    if noise is not None:
        noise = Path(noise)
        if b_keyless:
            raise InputError(f"{b_emb.source}: keyless arrays cannot be matched to the keyed runs of --noise {noise}")
        runset = _noise_runset(noise)
        if b_set is not None:
            inputs.noise_check, inputs.noise_warnings = check_noise_matches(b_set, runset, allow_noise_mismatch)
        runs = [runset.load(i) for i in runset.runs]
        member_by_path = b_set is not None and b_set.root.resolve() == runset.root.resolve() and b_index in runset.runs
        arrays = []
        for emb in runs:
            if emb.dim != b_emb.dim:
                raise InputError(f"{emb.source}: dimension {emb.dim}, but {b_emb.source} has {b_emb.dim}")
            arrays.append(matched_vectors(emb, _cover(emb, keys, noise), keys))
            require_float32_range(emb.source, keys, arrays[-1], DRIFT_RANGE)
        member = member_by_path or any(np.array_equal(arr, b) for arr in arrays)
        minimum = 3 if member else 4
        if len(arrays) < minimum:
            raise InputError(
                f"{noise}: {len(arrays)} finished run(s); a noise band needs at least {minimum} "
                f"({'BEFORE is one of them' if member else '4 when BEFORE is not one of them, 3 when it is'})"
            )
        refuse_same_noise_runs(noise, [f"run-{i:03d}" for i in runset.runs], arrays)
        inputs.noise, inputs.noise_runs, inputs.before_in_noise = str(noise), arrays, member
        inputs.environments.update({f"noise/{run_name(i)}": runset.environment(i) for i in runset.runs})
        frequency_set = runset
    if frequency_set is not None:
        counts = frequency_set.key_counts()
        if counts is not None:
            inputs.frequency = np.array([counts.get(k, -1) for k in keys], dtype=np.float64)
            inputs.frequency[inputs.frequency < 0] = np.nan
    return inputs


DRIFT_RANGE = "drift compares distances and noise bands in float32 magnitudes"


def recorded_environment(path: Path, runset: RunSet | None, index: int | None) -> dict[str, str] | None:
    """The environment a side was computed in: its run's training environment for a run set,
    the featurize sidecar's for a file ``stabcli featurize`` wrote, else None (not recorded)."""
    if runset is not None and index is not None:
        return runset.environment(index)
    sidecar = path.with_name(path.name + SIDECAR_SUFFIX)
    try:
        return read_recorded(json.loads(sidecar.read_text(encoding="utf-8")).get("environment"))
    except (OSError, ValueError, AttributeError, RecursionError):  # no sidecar, or not one stabcli wrote
        return None


def refuse_same_noise_runs(noise: Path, names: list[str], arrays: list[np.ndarray]) -> None:
    """InputError when two noise runs are identical or exact rotations of each other: their
    noise band has zero width, and every key would look moved."""
    from stabcli.measure.degenerate import describe_same, same_runs

    pairs = same_runs(arrays)
    if pairs:
        raise InputError(
            f"{noise}: {describe_same(pairs, names, len(arrays))}, so the noise band has zero width and "
            "every key would look moved; train the noise runs with different seeds (a --script must use {seed})"
        )


def noise_mismatches(before: dict[str, Any], noise: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(field, BEFORE's value, the noise's value) for every corpus or training setting on
    which two run-set manifests differ: the corpus hash and reading options, and every
    configuration field but ``NOISE_CONFIG_IGNORED``."""
    out = []
    b_corpus, n_corpus = before.get("corpus") or {}, noise.get("corpus") or {}
    for name in ("sha256", "options"):
        if b_corpus.get(name) != n_corpus.get(name):
            out.append((f"corpus {name}", b_corpus.get(name), n_corpus.get(name)))
    b_config, n_config = before.get("config") or {}, noise.get("config") or {}
    for name in sorted(set(b_config) | set(n_config)):
        if name not in NOISE_CONFIG_IGNORED and b_config.get(name) != n_config.get(name):
            out.append((name, b_config.get(name), n_config.get(name)))
    return out


def check_noise_matches(before: RunSet, noise: RunSet, allow: bool) -> tuple[str, list[str]]:
    """("checked" | "overridden", warnings): InputError naming the first differing field
    unless ``allow`` (``--allow-noise-mismatch``), which turns every difference into a warning."""
    if before.root.resolve() == noise.root.resolve():
        return "checked", []
    found = noise_mismatches(before.manifest, noise.manifest)
    if not found:
        return "checked", []

    def short(value: Any) -> str:
        text = json.dumps(value, sort_keys=True) if not isinstance(value, str) else value
        return text if len(text) <= 24 else text[:12] + "…"

    words = [f"{name} {short(b)} (noise: {short(n)})" for name, b, n in found]
    if not allow:
        name, b, n = found[0]
        raise InputError(
            f"--noise {noise.root}: its {name} is {short(n)}, BEFORE's ({before.root}) is {short(b)}"
            + (f" (and {len(found) - 1} more field(s) differ)" if len(found) > 1 else "")
            + "; a noise band must come from BEFORE's corpus and configuration (--allow-noise-mismatch to use it anyway)"
        )
    return "overridden", [f"the noise run set differs from BEFORE's: {'; '.join(words)} (--allow-noise-mismatch)"]


def _noise_runset(noise: Path) -> RunSet:
    if not noise.exists():
        raise InputError(f"{noise}: no such run set (--noise)")
    if not noise.is_dir() or not is_runset(noise):
        raise InputError(f"{noise}: --noise needs a run set directory made by stabcli pretrain (no stabcli.json)")
    return RunSet.open(noise)


def _cover(emb: Embedding, keys: list[str], noise: Path) -> np.ndarray | None:
    """Row indices of ``keys`` in a noise run; InputError when some are missing."""
    rows, missing = rows_of(keys, emb.keys)
    if missing:
        raise InputError(
            f"{noise}: {len(missing):,} of the {len(keys):,} compared keys are not in its run "
            f"{emb.source.parent.name} (e.g. {quote(missing[0])}); the noise run set must be trained on "
            "BEFORE's data"
        )
    return rows


def read_key_names(path: str | Path, known: set[str], encoding: str | None = None) -> dict[str, str]:
    """Display names (``keytable.read_key_names``, the reader audit uses: ``key,name`` or
    ``key<TAB>name``, MovieLens ``u.item`` / ``movies.dat`` / ``movies.csv``); InputError when
    none of its keys is a compared key."""
    from stabcli.inputs.keytable import read_key_names as read_names

    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: key names file not found" if not path.exists() else f"{path}: not a file")
    names = {key: name for key, name in read_names(path, encoding).items() if key and name}
    if not names:
        raise InputError(f"{path}: no key names found")
    if not known & names.keys():
        raise InputError(f"{path}: none of its {len(names):,} keys is a compared key (e.g. {quote(next(iter(names)))})")
    return names


# ------------------------------------------------------------------ the report (typed)


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


# ------------------------------------------------------------------ checks (schema's, one implementation)


def _needs(path: str, has_noise: bool, has_labels: bool) -> str | None:
    if not has_noise and any(path == p or path.startswith(p + ".") for p in NEEDS_NOISE):
        return f"{path} needs --noise RUNSET"
    if not has_labels and (path == "downstream" or path.startswith("downstream.")):
        return f"{path} needs --labels FILE"
    return None


def validate_checks(expressions: Sequence[str], has_noise: bool, has_labels: bool) -> list[tuple[str, str, str, float]]:
    """Parse every ``--check`` and resolve its path against ``DriftReport`` before any input
    is read (``schema.validate_checks``): unknown paths, non-numeric fields and fields that
    need ``--noise`` or ``--labels`` are ``UsageError``. Returns (expression, path, op, threshold)."""
    parsed = schema.validate_checks(DriftReport, expressions, lambda path: _needs(path, has_noise, has_labels))
    return [(expression.strip(), *triple) for expression, triple in zip(expressions, parsed, strict=False)]


def evaluate_checks(report: DriftReport, parsed: Sequence[tuple[str, str, str, float]]) -> DriftReport:
    """The report with its ``checks`` and ``passed`` filled in (``schema.evaluate_checks``);
    a null value fails its check."""
    results = schema.evaluate_checks(report, [expression for expression, *_ in parsed], DriftReport)
    return replace(report, checks=results, passed=all(c.passed for c in results))


# ------------------------------------------------------------------ computing


def compute_drift(
    inputs: DriftInputs,
    options: DriftOptions,
    downstream: DownstreamOptions | None = None,
    key_names: dict[str, str] | None = None,
    key_names_path: str | None = None,
    on_step: Callable[[str], None] | None = None,
) -> tuple[DriftReport, PerKey]:
    """The drift report and the per-key table of one BEFORE→AFTER comparison."""
    step = on_step or (lambda _: None)
    n = len(inputs.keys)
    if options.knn_k >= n:
        raise OptionError("knn_k", f"{options.knn_k} must be less than the number of compared keys ({n})")
    plan = None
    if downstream is not None:  # a bad label file fails before the long computations
        from stabcli.measure.downstream import plan_downstream

        plan = plan_downstream(downstream, inputs.keys, 2, inputs.dim, variants=["h"])

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
    overlaps = m.knn_overlap([inputs.b, inputs.a], np.concatenate([queries, extra]), options.knn_k)
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


def move_items(
    sessions: Sequence[Sequence[str]], group_of: dict[str, str], items: set[str], into: str, seed: int = 0
) -> list[list[str]]:
    """A simulated refresh: ``items`` leave every session and reappear (1 or 2 of them, drawn
    uniformly) in the sessions whose most frequent group is ``into``; all else is unchanged.

    Used by the demo and the power test: exactly ``items`` change their context, and the
    items of ``into`` and of the items' own group see their co-occurrences change too.
    """
    rng = np.random.default_rng(seed)
    pool = sorted(items)
    refreshed = []
    for session in sessions:
        groups = [group_of.get(t) for t in session]
        counts: dict[str, int] = {}
        for g in groups:
            if g is not None:
                counts[g] = counts.get(g, 0) + 1
        dominant = max(counts, key=lambda g: counts[g]) if counts else None
        kept = [t for t in session if t not in items]
        if dominant == into and pool:
            for item in rng.choice(pool, size=int(rng.integers(1, 3))):
                kept.insert(int(rng.integers(0, len(kept) + 1)), str(item))
        if kept:
            refreshed.append(kept)
    return refreshed


# ------------------------------------------------------------------ the entry point


def drift(before: str | Path, after: str | Path, noise: str | Path | None = None, **options: Any) -> DriftReport:
    """Which keys did a refresh really move, and which only changed by training noise (``stabcli drift``)?

    Parameters
    ----------
    before, after : path
        Embedding files, or run sets (their ``reference`` run).
    noise : path, optional
        Run set of seeded runs on BEFORE's data and configuration: each key's noise band.
    **options
        The command's options by their library names (``alpha``, ``measure``, ``align``,
        ``knn_k``, ``knn_queries``, ``top``, ``seed``, ``reference``, ``allow_noise_mismatch``, ``labels``, ``task``, ``model``,
        ``test_size``, ``split_seed``, ``encoding``, ``key_names``, ``checks``,
        ``input_format``, ``trust_pickle``, ``keys``); files to write: ``json``,
        ``markdown``, ``plots``, ``per_key`` (with ``force``); callbacks ``on_step(text)``
        and ``on_figure(path)``. Each is validated as its flag is, with the same message.

    Returns
    -------
    DriftReport
        ``report.to_dict()`` is what ``stabcli drift --format json`` prints;
        ``report.passed`` is false when a check failed.

    Raises
    ------
    StabcliError
        Bad input or options (``OptionError`` names the parameter), before any file is written.

    Examples
    --------
    >>> report = stabcli.drift("runs/v1", "v2.npy", noise="runs/v1")  # doctest: +SKIP
    >>> report.drift.moved_share  # doctest: +SKIP
    """
    from stabcli.commands.common import (
        Renderings,
        ReportFiles,
        log_run,
        only_with,
        params_given,
        refuse_unknown,
        refuse_unused_table_options,
        take,
    )
    from stabcli.inputs.textfile import check_encoding
    from stabcli.reports import drift_render

    before, after = Path(before), Path(after)
    noise = Path(noise) if noise is not None else None
    options = dict(options)
    params = {"before": str(before), "after": str(after), "noise": noise, **params_given(options)}
    on_step, on_figure = options.pop("on_step", None), options.pop("on_figure", None)
    on_warning, on_logged = options.pop("on_warning", None), options.pop("on_logged", None)
    checks, key_names = list(options.pop("checks", ())), options.pop("key_names", None)
    allow_mismatch = bool(options.pop("allow_noise_mismatch", False))
    labelled = {name: options.pop(name) for name in DOWNSTREAM_KEYWORDS if name in options}
    encoding = labelled.get("encoding")
    files = ReportFiles.take(options)
    settings = DriftOptions(**take(DriftOptions, options))
    read = ReadOptions(**take(ReadOptions, options, {"keys": "keys_file"}))
    refuse_unknown("drift", options)
    downstream = None
    refuse_unused_table_options(labelled, [("--labels", labelled.get("labels")), ("--key-names", key_names)])
    if labelled.get("labels") is None:
        only_with("--labels FILE", [("--model-param", bool(labelled.get("model_params")))])
    if encoding is not None:
        check_encoding("encoding", encoding)
    if labelled.get("labels") is not None:
        from stabcli.measure.downstream import DownstreamOptions

        if labelled.get("task") == "next-item":
            raise OptionError("task", "next-item is an audit task (audit RUNS --task next-item --interactions FILE)")
        downstream = DownstreamOptions(**{k: v for k, v in labelled.items() if v not in (None, [], ())})
    parsed = validate_checks(checks, has_noise=noise is not None, has_labels=downstream is not None)
    per_key_csv = files.check_formats() == "csv"
    more_inputs = [downstream.labels if downstream else None, Path(key_names) if key_names else None, read.keys_file]
    plan = files.plan([before, after, *([noise] if noise else [])], more_inputs)
    tracker = files.open_tracker()
    if allow_mismatch and noise is None:
        only_with("--noise RUNSET", [("--allow-noise-mismatch", True)])
    inputs = load_inputs(before, after, noise, settings.reference, read, allow_mismatch)
    names = read_key_names(key_names, set(inputs.keys), encoding) if key_names else None
    report, table = compute_drift(
        inputs, settings, downstream, names, str(key_names) if key_names else None, on_step=on_step
    )
    report = evaluate_checks(report, parsed)
    text = schema.dumps(report)
    renderings = Renderings(
        text,
        lambda rows: drift_render.render_markdown(report, rows),
        lambda: drift_render.plot_figures(report, table),
        lambda: table.frame(compact=per_key_csv or files.per_key is None),
        lambda figures, _: drift_render.render_html(report, table, figures, text),
        len(report.drift.top),
    )
    figures = files.write(plan, text, renderings=renderings, on_warning=on_warning)
    log_run(tracker, "drift", params, renderings, on_logged)
    for figure in figures:
        if on_figure is not None:
            on_figure(figure)
    return report


DOWNSTREAM_KEYWORDS = ("labels", "task", "model", "model_params", "test_size", "split_seed", "encoding")

# DownstreamOptions' fields drift has (measure/downstream.py imports scikit-learn: seconds)
DOWNSTREAM_KEYWORDS = ("labels", "task", "model", "model_params", "test_size", "split_seed", "encoding")
