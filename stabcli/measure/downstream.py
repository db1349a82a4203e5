"""Downstream fluctuation (docs/commands.md, audit --labels): does a model trained on the embedding change
when only the embedding's training seed changes, and which representation fluctuates least?

One seeded stratified train/test split is shared by every run and variant. A model that
optimizes to its global optimum (L2 logistic regression by default) is fit on each run's
training rows and scored on its test rows, so any spread between runs comes from the
representation. Per variant: metric mean and std (ddof=1) over runs, churn (how many test
predictions change between runs) and stale-model compatibility (the reference run's model
applied unchanged to the other runs, a refresh without retraining).
"""

from __future__ import annotations

import math
import os
import re
import signal
import threading
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from joblib import Parallel, delayed
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression, Ridge, RidgeClassifier
from sklearn.metrics import accuracy_score, f1_score, mean_squared_error, r2_score
from sklearn.model_selection import train_test_split
from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor

from stabcli.constraints import DOWNSTREAM_OPTIONS, Constraint, validate_params
from stabcli.errors import InputError, OptionError
from stabcli.fs.resources import available_memory, human_bytes
from stabcli.inputs.labels import read_labels
from stabcli.inputs.textfile import check_encoding
from stabcli.measure.fourier import draw_directions, fourier_features
from stabcli.measure.metrics import peak, power_of_two_scale, rescaled
from stabcli.training.processes import cpu_count

TASKS = ("auto", "classification", "regression")
MODELS = ("logreg", "knn", "ridge")
SOURCES = ("h", "avg", "aligned")
REGRESSION_MIN_DISTINCT = 21  # auto: numeric labels with more distinct values than this (or fractions) are regression
KNN_NEIGHBOURS = 5
STALE_TOLERANCE = 0.01  # a stale-model drop above this is called out in the recommendation
# --prefer: how many times the noise a less stable variant's gain must exceed to be recommended
PREFERENCES = {"stability": math.inf, "balanced": 2.0, "accuracy": 1.0}
DEFAULT_PREFER = "balanced"
# A class needs 1/test_size members to expect one of them in the test split: 5 for the default 0.2.
MIN_CLASS_SIZE = 5
DROPPED_SHOWN = 10  # dropped classes named in the warning line
MODEL_SAFE_EXPONENT = 100  # features beyond 2^±100 are divided by a common power of two before fitting
SEED_MAX = 2**32 - 1  # scikit-learn's random_state range
SIGMA_MAX = 1e300  # N(0, σ²) directions beyond this overflow float64 (and phi is pure noise long before)


@dataclass(frozen=True)
class DownstreamOptions:
    """Options of the downstream audit; every value is checked on construction
    (``OptionError`` naming the parameter), before any file is read or anything computed.

    List options are stored as tuples. The run count is only known after loading: see
    ``check_runs``.
    """

    labels: Path
    task: str = "auto"
    model: str | None = None  # default: logreg for classification, ridge for regression
    test_size: float = 0.2
    split_seed: int = 0
    variants: Sequence[str] | None = None  # default: h, avg, aligned, phi:d, phi:2d
    featurize_dims: Sequence[int] = ()
    sigmas: Sequence[float] = ()
    reference: int = 0
    seed: int = 0  # random Fourier directions, one draw for all runs
    jobs: int | None = None
    encoding: str | None = None  # None: utf-8, MovieLens u.item/movies.dat latin-1 (labels.read_labels)
    min_class_size: int = MIN_CLASS_SIZE  # smaller classes are dropped (with a warning)
    prefer: str = DEFAULT_PREFER  # the recommendation's trade-off (PREFERENCES)
    featurized: bool = False  # the input is already phi(h): named so, never featurized again

    parameter_constraints: ClassVar[dict[str, Constraint]] = DOWNSTREAM_OPTIONS

    def __post_init__(self) -> None:
        for name in ("variants", "featurize_dims", "sigmas"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, tuple(value))
        object.__setattr__(self, "labels", Path(self.labels))
        if self.task not in TASKS:
            raise OptionError("task", f"{self.task!r} is not one of {', '.join(TASKS)}")
        if self.model is not None:
            if self.model not in MODELS:
                raise OptionError("model", f"{self.model!r} is not one of {', '.join(MODELS)}")
            if self.model == "logreg" and self.task == "regression":
                raise OptionError("model", "logreg is for classification; use ridge or knn with --task regression")
        validate_params(self)
        if self.encoding is not None:
            check_encoding("encoding", self.encoding)
        parse_variants(self.variants, 2, self.featurize_dims, self.sigmas)  # syntax, M and sigma

    def check_runs(self, runs: int) -> None:
        """The checks that need the number of runs; call right after loading them."""
        if self.reference >= runs:
            raise OptionError(
                "reference", f"{self.reference} must be a run position from 0 to {runs - 1} ({runs} runs)"
            )


@dataclass(frozen=True)
class Variant:
    """A representation to evaluate: ``source`` (h, avg, aligned) optionally through phi."""

    name: str
    source: str
    phi_dim: int | None = None
    sigma: float = 1.0


_VARIANT_RE = re.compile(r"^(?:(h|avg|aligned)\+)?phi:(\d+)(?:@([0-9.eE+-]+))?$")


def parse_variants(
    spec: Sequence[str] | None,
    input_dim: int,
    featurize_dims: Sequence[int] = (),
    sigmas: Sequence[float] = (),
    featurized: bool = False,
) -> list[Variant]:
    """Variant names → variants, expanded over the M and σ sweeps, duplicates dropped.

    ``phi:M`` is short for ``h+phi:M``; ``phi:M@S`` sets σ = S. ``--featurize-dims``
    replaces M and ``--sigmas`` replaces σ in every variant that has phi.
    """
    if spec is None:
        even = input_dim + input_dim % 2
        # an input that is already phi(h) is not featurized again by default
        spec = ["h", "avg", "aligned"] if featurized else ["h", "avg", "aligned", f"phi:{even}", f"phi:{2 * even}"]
    for sigma in sigmas:
        if not _good_sigma(sigma):
            raise OptionError("sigmas", f"{sigma:g} is not a positive finite number up to {SIGMA_MAX:g}")
    for m in featurize_dims:
        if m < 2 or m % 2:
            raise OptionError("featurize_dims", f"{m} must be an even integer >= 2 (cos/sin pairs)")
    variants: list[Variant] = []
    has_phi = False
    for token in (t.strip() for t in spec):
        if token in SOURCES:
            variants.append(Variant(token, token))
            continue
        match = _VARIANT_RE.match(token)
        if not match:
            raise OptionError(
                "variants", f"unknown variant {token!r}; use h, avg, aligned, phi:M, phi:M@SIGMA or aligned+phi:M"
            )
        has_phi = True
        source, dim, sigma_text = match.group(1) or "h", int(match.group(2)), match.group(3)
        try:
            sigma = float(sigma_text) if sigma_text else 1.0
        except ValueError:
            raise OptionError("variants", f"{token!r}: {sigma_text!r} is not a number") from None
        for m in featurize_dims or [dim]:
            for s in sigmas or [sigma]:
                if m < 2 or m % 2 or not _good_sigma(s):
                    raise OptionError(
                        "variants", f"{token!r} needs an even M >= 2 and a positive finite sigma up to {SIGMA_MAX:g}"
                    )
                prefix = "" if source == "h" else f"{source}+"
                suffix = f"@{s:g}" if sigmas or s != 1.0 else ""
                variants.append(Variant(f"{prefix}phi:{m}{suffix}", source, m, s))
    if (featurize_dims or sigmas) and not has_phi:
        raise OptionError(
            "featurize_dims" if featurize_dims else "sigmas",
            "sweeps the phi variants, but --variants has none (add phi:M)",
        )
    return list({v.name: v for v in variants}.values())  # first occurrence order, duplicates dropped


def _good_sigma(sigma: float) -> bool:
    return math.isfinite(sigma) and 0 < sigma <= SIGMA_MAX


# ------------------------------------------------------------------ labels → targets


@dataclass
class Targets:
    task: str
    rows: np.ndarray  # positions in the runs' common keys that have a (kept) label
    y: np.ndarray  # labels of those rows (str for classification, float for regression)
    skipped: int  # common keys without a label
    classes: list[str]
    dropped_classes: list[dict[str, Any]]  # {label, count} of classes below --min-class-size
    scale: float = 1.0  # regression: y is the labels divided by this power of two


def targets_for(
    keys: Sequence[str], options: DownstreamOptions, on_warning: Callable[[str], None] | None = None
) -> Targets:
    """Match the label file to the embedding keys and decide the task.

    Classes with fewer than ``options.min_class_size`` labeled keys are dropped, with one
    warning naming them. Regression labels beyond 2^±400 are divided by a power of two
    (exact), so squared errors stay in range; ``scale`` converts back to label units.
    """
    known = set(keys)
    labels = read_labels(options.labels, known, options.encoding)
    rows = np.array([i for i, k in enumerate(keys) if k in labels.by_key], dtype=np.int64)
    if len(rows) == 0:
        sample = next(iter(labels.by_key))
        raise InputError(
            f"{labels.source}: none of its {len(labels.by_key):,} keys is an embedding key "
            f"(label key {sample!r}, embedding key {keys[0]!r})"
        )
    raw = [labels.by_key[keys[i]] for i in rows]
    numbers = _as_numbers(raw)
    task = options.task
    if task == "auto":
        fractional = numbers is not None and bool(np.any(numbers != np.round(numbers)))
        many = numbers is not None and len(np.unique(numbers)) >= REGRESSION_MIN_DISTINCT
        task = "regression" if fractional or many else "classification"
    skipped = len(keys) - len(rows)
    if task == "regression":
        if numbers is None:
            bad = next(v for v in raw if _as_numbers([v]) is None)
            raise InputError(f"{labels.source}: --task regression needs finite numeric labels, found {bad!r}")
        scale = power_of_two_scale(peak(numbers))
        return Targets(task, rows, numbers / scale, skipped, [], [], scale)
    y = np.array(raw, dtype=object)
    classes, counts = np.unique(y, return_counts=True)
    rare = counts < options.min_class_size
    dropped = [
        {"label": str(c), "count": int(n)} for c, n in zip(classes, counts, strict=False) if n < options.min_class_size
    ]
    shown = sorted(dropped, key=lambda d: (d["count"], d["label"]))[:DROPPED_SHOWN]  # the rarest first
    listed = ", ".join(f"{d['label']!r} ({d['count']})" for d in shown)
    listed += f" and {len(dropped) - len(shown)} more (all in the JSON)" if len(dropped) > len(shown) else ""
    if dropped:
        kept = ~np.isin(y, classes[rare])
        rows, y = rows[kept], y[kept]
        classes, counts = classes[~rare], counts[~rare]
    if len(classes) < 2 and dropped:
        found = f"only one class ({classes[0]!r}) has" if len(classes) else "no class has"
        raise InputError(
            f"{labels.source}: {found} at least {options.min_class_size} labeled keys (--min-class-size "
            f"{options.min_class_size} dropped {listed}); classification needs at least 2 classes"
        )
    if len(classes) < 2:
        raise InputError(
            f"{labels.source}: only one class ({classes[0]!r}) among the {len(rows):,} labeled keys; "
            "classification needs at least 2"
        )
    if dropped and on_warning:  # one line, and only when the audit goes on
        on_warning(
            f"{labels.source}: dropped {len(dropped)} class(es) with fewer than {options.min_class_size} "
            f"labeled keys (--min-class-size): {listed}"
        )
    if counts.min() < 2:
        rare_class = classes[int(np.argmin(counts))]
        raise InputError(
            f"{labels.source}: class {rare_class!r} has only 1 labeled key; a stratified split needs at "
            "least 2 per class (--min-class-size 2 or more drops it)"
        )
    return Targets(task, rows, y, skipped, [str(c) for c in classes], dropped)


def _as_numbers(values: Sequence[str]) -> np.ndarray | None:
    try:
        numbers = np.array([float(v) for v in values])
    except ValueError:
        return None
    return numbers if np.all(np.isfinite(numbers)) else None


def split(targets: Targets, test_size: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """One seeded (stratified for classification) split into train and test positions."""
    positions = np.arange(len(targets.rows))
    try:
        train, test = train_test_split(
            positions,
            test_size=test_size,
            random_state=seed,
            stratify=targets.y if targets.task == "classification" else None,
        )
    except ValueError as exc:
        raise InputError(
            f"cannot split {len(positions):,} labeled keys with --test-size {test_size:g}: {exc}"
        ) from None
    if targets.task == "regression" and min(len(train), len(test)) < 2:
        raise InputError(f"{len(positions)} labeled keys are too few for a train/test split")
    return np.sort(train), np.sort(test)


# ------------------------------------------------------------------ models and fits


def make_model(name: str, task: str) -> Any:
    """The unfitted scikit-learn estimator; deterministic and solved to tight tolerance."""
    if name == "logreg":
        if task == "regression":
            raise OptionError(
                "model",
                "logreg is for classification, and these labels are numeric (regression); "
                "use ridge or knn, or --task classification",
            )
        return LogisticRegression(max_iter=5000, tol=1e-6)
    if name == "knn":
        return KNeighborsClassifier(KNN_NEIGHBOURS) if task == "classification" else KNeighborsRegressor(KNN_NEIGHBOURS)
    if name == "ridge":
        return RidgeClassifier(alpha=1.0) if task == "classification" else Ridge(alpha=1.0)
    raise OptionError("model", f"{name!r} is not one of {', '.join(MODELS)}")


@dataclass
class _Transform:
    rotation: np.ndarray | None = None
    directions: np.ndarray | None = None

    def __call__(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        if self.rotation is not None:
            x = x @ self.rotation
        if self.directions is not None:
            x = fourier_features(x, self.directions, normalize=True)
        return x


@dataclass
class _Fit:
    x: np.ndarray
    transform: _Transform
    predictions: np.ndarray
    model: Any  # kept for the reference run only
    converged: bool


def _fit_predict(
    model_name: str,
    task: str,
    x: np.ndarray,
    transform: _Transform,
    train: np.ndarray,
    test: np.ndarray,
    y: np.ndarray,
    keep_model: bool,
    parent_pid: int,
) -> tuple[np.ndarray, Any, bool]:
    """Fit on the training rows of one run; (test predictions, the model if kept, converged)."""
    if os.getpid() != parent_pid and threading.current_thread() is threading.main_thread():
        # a worker process (loky): Ctrl-C is the parent's to handle (exit 130); a Dask worker runs
        # tasks in threads, where signals cannot be set (and its nanny handles them)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    model = make_model(model_name, task)
    with warnings.catch_warnings(record=True) as caught:  # recorded, never printed (workers share stderr)
        warnings.simplefilter("always")
        model.fit(transform(x[train]), y[train])
        predictions = model.predict(transform(x[test]))
    converged = not any(issubclass(w.category, ConvergenceWarning) for w in caught)
    return predictions, model if keep_model else None, converged


def prediction_scores(
    task: str, y_true: np.ndarray, y_pred: np.ndarray, classes: list[str], scale: float = 1.0
) -> dict[str, float]:
    """Test-split metrics of predictions (accuracy and macro F1, or R² and RMSE; audit and
    drift); regression labels divided by ``scale`` give the RMSE back in label units."""
    if task == "classification":
        return {
            "accuracy": float(accuracy_score(y_true, y_pred)),
            "f1_macro": float(f1_score(y_true, y_pred, labels=classes, average="macro", zero_division=0)),
        }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r2 = float(r2_score(y_true, y_pred))
    return {"r2": r2, "rmse": rescaled(math.sqrt(mean_squared_error(y_true, y_pred)), scale, 1)}


def churn(task: str, predictions: Sequence[np.ndarray], scale: float = 1.0) -> float:
    """Mean over run pairs of the share of test predictions that differ (classification),
    or of the root-mean-square difference between predictions (regression, label units;
    predictions of labels divided by ``scale``)."""
    values = []
    for a, b in combinations(predictions, 2):
        values.append(float(np.mean(a != b)) if task == "classification" else float(np.sqrt(np.mean((a - b) ** 2))))
    return rescaled(float(np.mean(values)), scale, 1)


def _mean_std(values: list[float]) -> tuple[float, float | None]:
    """Mean and std (ddof=1); the std is taken around the first value (shift invariant), so
    identical runs give exactly 0 instead of rounding noise. Both are computed on the values
    divided by a power of two near their largest, so RMSEs near 1e300 do not overflow."""
    if len(values) < 2:
        return float(values[0]), None
    array = np.asarray(values, dtype=np.float64)
    with np.errstate(all="ignore"):  # an inf RMSE (labels beyond float64) gives inf/NaN, reported as null
        mean = rescaled(float(np.mean(array / _scale_of(array))), _scale_of(array))
        shifted = array - array[0]
        return mean, rescaled(float(np.std(shifted / _scale_of(shifted), ddof=1)), _scale_of(shifted))


def _scale_of(values: np.ndarray) -> float:
    """The power of two nearest above the largest |value| (1 for zeros or non-finite values)."""
    largest = peak(values)
    return math.ldexp(1.0, math.frexp(largest)[1]) if 0 < largest < math.inf else 1.0


# ------------------------------------------------------------------ the report


@dataclass(frozen=True)
class Plan:
    """What the downstream audit will fit, decided from the options, the labels and the
    runs' shape before any computation: every bad option or label file fails here."""

    variants: list[Variant]
    targets: Targets
    model: str
    train: np.ndarray
    test: np.ndarray


def plan_downstream(
    options: DownstreamOptions,
    keys: Sequence[str],
    runs: int,
    dim: int,
    on_warning: Callable[[str], None] | None = None,
) -> Plan:
    """Check the options against the runs, read the labels, choose the task, model and split,
    and refuse variants whose features cannot fit in memory. Reads only the label file."""
    options.check_runs(runs)
    variants = parse_variants(options.variants, dim, options.featurize_dims, options.sigmas, options.featurized)
    targets = targets_for(keys, options, on_warning)
    model_name = options.model or ("logreg" if targets.task == "classification" else "ridge")
    make_model(model_name, targets.task)  # a bad model/task pair fails before any fitting
    train, test = split(targets, options.test_size, options.split_seed)
    if model_name == "knn" and len(train) < KNN_NEIGHBOURS:
        raise InputError(
            f"{options.labels}: {len(train)} training keys are fewer than the {KNN_NEIGHBOURS} "
            "neighbours --model knn uses"
        )
    _check_memory(variants, options, dim, len(targets.rows), runs)
    return Plan(variants, targets, model_name, train, test)


def _check_memory(variants: Sequence[Variant], options: DownstreamOptions, dim: int, labeled: int, runs: int) -> None:
    """Refuse (naming the option) a variant whose directions and features need more memory
    than is available: float64 directions d×M/2 for every phi variant at once, and per
    parallel fit about three float64 copies of its labeled rows' features (labeled×M)."""
    jobs = min(options.jobs or cpu_count(), max(1, runs * len(variants)))
    directions = sum(8 * dim * (v.phi_dim // 2) for v in variants if v.phi_dim)
    widest = max(variants, key=lambda v: v.phi_dim or dim)
    features = 3 * 8 * labeled * (widest.phi_dim or dim) * jobs
    need, have = directions + features, available_memory()
    if have is not None and need > have:
        param = "featurize_dims" if options.featurize_dims and widest.phi_dim else "variants"
        raise OptionError(
            param,
            f"{widest.name} needs about {human_bytes(need)} ({human_bytes(directions)} of random directions "
            f"{dim}×M/2 and {human_bytes(features)} of features for {labeled:,} labeled keys × "
            f"{jobs} parallel fit(s)), more than the {human_bytes(have)} of memory available",
        )


def downstream_report(
    arrays: Sequence[np.ndarray],
    keys: Sequence[str],
    rotations: Sequence[np.ndarray],
    options: DownstreamOptions,
    run_names: Sequence[str],
    on_step: Callable[[str], None] | None = None,
    plan: Plan | None = None,
    on_warning: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """The ``downstream`` section of the audit report (schema in docs/json.md).

    ``plan`` (from ``plan_downstream``, called before the Gram pass) is made here if not given.
    """
    step = on_step or (lambda _: None)
    R, dim = len(arrays), int(arrays[0].shape[1])
    plan = plan or plan_downstream(options, keys, R, dim, on_warning)
    variants, targets, model_name, train, test = plan.variants, plan.targets, plan.model, plan.train, plan.test
    y = targets.y
    # keep float32 input float32 (no copy cost); float64 stays float64, so 1e300 does not overflow
    xs = [np.asarray(a[targets.rows], dtype=np.float64 if a.dtype == np.float64 else np.float32) for a in arrays]
    largest = max(peak(x) for x in xs)
    exponent = math.frexp(largest)[1] if largest > 0 else 0
    feature_scale = math.ldexp(1.0, exponent) if abs(exponent) > MODEL_SAFE_EXPONENT else 1.0
    if feature_scale != 1.0:  # one common power of two for every run: exact, and comparable across runs
        xs = [x / feature_scale for x in xs]

    # every (variant, run) fit is independent: one parallel pass over all of them
    jobs_list: list[tuple[Variant, int, np.ndarray, _Transform]] = []
    for v in variants:
        directions = draw_directions(dim, v.phi_dim, v.sigma, options.seed) if v.phi_dim else None
        if v.source == "avg":
            mean = np.asarray(np.mean(xs, axis=0, dtype=np.float64))
            jobs_list.append(
                (v, 0, mean if xs[0].dtype == np.float64 else mean.astype(np.float32), _Transform(None, directions))
            )
            continue
        for r in range(R):
            rotation = rotations[r] if v.source == "aligned" else None
            jobs_list.append((v, r, xs[r], _Transform(rotation, directions)))
    n_jobs = options.jobs or cpu_count()
    step(f"downstream: {len(jobs_list)} {model_name} fits on {len(train):,} keys")
    parallel = Parallel(n_jobs=min(n_jobs, len(jobs_list)), return_as="generator")
    fits: dict[str, list[_Fit]] = {v.name: [] for v in variants}
    with warnings.catch_warnings():  # joblib's own warnings never reach the user's stderr
        warnings.simplefilter("ignore")
        outputs = parallel(
            delayed(_fit_predict)(
                model_name,
                targets.task,
                x,
                transform,
                train,
                test,
                y,
                v.source != "avg" and r == options.reference,
                os.getpid(),
            )
            for v, r, x, transform in jobs_list
        )
        for done, ((v, _, x, transform), (pred, model, converged)) in enumerate(
            zip(jobs_list, outputs, strict=False), start=1
        ):
            fits[v.name].append(_Fit(x, transform, pred, model, converged))
            step(f"downstream: fit {done}/{len(jobs_list)} ({v.name})")

    primary = "accuracy" if targets.task == "classification" else "r2"
    results: dict[str, dict[str, Any]] = {}
    for v in variants:
        predictions = [f.predictions for f in fits[v.name]]
        scores = [
            prediction_scores(targets.task, y[test], pred, targets.classes, targets.scale) for pred in predictions
        ]
        entry: dict[str, Any] = {"dim": v.phi_dim or dim, "source": v.source, "sigma": v.sigma if v.phi_dim else None}
        for metric in scores[0]:
            values = [s[metric] for s in scores]
            entry[f"{metric}_mean"], entry[f"{metric}_std"] = _mean_std(values)
            entry[f"{metric}_by_run"] = values
        entry["churn"] = churn(targets.task, predictions, targets.scale) if len(predictions) > 1 else None
        refit = entry[f"{primary}_by_run"]
        entry[f"stale_{primary}_mean"], entry["stale_drop"] = _stale(fits[v.name], refit, test, targets, primary)
        if options.featurized and v.name == "h":  # the input itself is phi(h): say so everywhere
            entry["source"] = FEATURIZED_INPUT
        results[FEATURIZED_INPUT if options.featurized and v.name == "h" else v.name] = _json_safe(entry)
    report = {
        "labels": str(options.labels),
        "task": targets.task,
        "model": model_name,
        "classes": len(targets.classes) if targets.classes else None,
        "train": len(train),
        "test": len(test),
        "skipped_keys": targets.skipped,
        "min_class_size": options.min_class_size,
        "dropped_classes": {c["label"]: c["count"] for c in targets.dropped_classes},
        "feature_scale": feature_scale,
        "label_scale": targets.scale,
        "test_size": options.test_size,
        "split_seed": options.split_seed,
        "reference": run_names[options.reference],
        "phi_seed": options.seed,
        "majority_accuracy": _majority(y[train], y[test]) if targets.task == "classification" else None,
        "not_converged": sum(not f.converged for group in fits.values() for f in group),
        "variants": results,
    }
    report["recommendation"] = recommend(
        results,
        primary,
        1 / len(test) if targets.task == "classification" else 0.0,
        prefer=options.prefer,
        baseline=FEATURIZED_INPUT if options.featurized else "h",
    )
    return report


def _json_safe(value: Any) -> Any:
    """Non-finite floats (an RMSE beyond float64's range) become None, recursively."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    return value


def _stale(
    fits: list[_Fit], refit: list[float], test: np.ndarray, targets: Targets, primary: str
) -> tuple[float | None, float | None]:
    """The reference run's model on every other run's test rows: (mean metric, mean drop from
    that run's ``refit`` metric). None, None for a variant with a single fit (avg)."""
    reference = next((f.model for f in fits if f.model is not None), None)
    if reference is None or len(fits) < 2:
        return None, None
    truth = targets.y[test]
    stale, drops = [], []
    for f, refit_metric in zip(fits, refit, strict=False):
        if f.model is not None:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            predicted = reference.predict(f.transform(f.x[test]))
        metric = prediction_scores(targets.task, truth, predicted, targets.classes, targets.scale)[primary]
        stale.append(metric)
        drops.append(refit_metric - metric)
    return float(np.mean(stale)), float(np.mean(drops))


def _majority(y_train: np.ndarray, y_test: np.ndarray) -> float:
    classes, counts = np.unique(y_train, return_counts=True)
    return float(np.mean(y_test == classes[int(np.argmax(counts))]))


FEATURIZED_INPUT = "phi(h)"  # the name of an already featurized input among the variants


def recommend(
    results: dict[str, dict[str, Any]],
    primary: str,
    resolution: float = 0.0,
    prefer: str = DEFAULT_PREFER,
    baseline: str = "h",
) -> dict[str, Any]:
    """The variant to use: stability first, accuracy when its gain is beyond the noise.

    Against the input itself (``baseline``: raw h, or ``phi(h)`` for a featurized input), a
    variant is *steadier* when neither its churn nor its run-to-run std is larger. The noise
    of a comparison is the larger of the two std and ``resolution`` (one test key for
    accuracy). Candidates: the baseline; steadier variants that lose at most the noise; and
    less steady variants whose gain exceeds ``PREFERENCES[prefer]`` × the noise (never with
    ``stability``, 2× with ``balanced``, 1× with ``accuracy``). Among the candidates within
    the noise of the best candidate's metric, ``accuracy`` takes the best, the others the
    lowest churn (then std). A featurized baseline's phi variants (phi of phi) never compete.
    """
    usable = {
        name: r
        for name, r in results.items()
        if r["churn"] is not None and r[f"{primary}_std"] is not None and r[f"{primary}_mean"] is not None
    }
    if not usable:
        return {"variant": None, "reason": "no variant has more than one run; nothing to compare", "prefer": prefer}
    label = "accuracy" if primary == "accuracy" else "R²"
    mean = {n: r[f"{primary}_mean"] for n, r in usable.items()}
    std = {n: r[f"{primary}_std"] for n, r in usable.items()}
    churn_of = {n: r["churn"] for n, r in usable.items()}
    if baseline not in usable:  # --variants without h: the most stable variant is the reference
        baseline = min(usable, key=lambda n: (churn_of[n], std[n]))
    base = "raw h" if baseline == "h" else baseline
    excluded = [n for n in usable if baseline == FEATURIZED_INPUT and "phi:" in n]
    margin = PREFERENCES[prefer]

    def noise(n: str) -> float:
        return max(std[baseline], std[n], resolution)

    def steadier(n: str) -> bool:
        return churn_of[n] <= churn_of[baseline] + 1e-12 and std[n] <= std[baseline] + 1e-12

    candidates, held_back = [baseline], []
    for n in usable:
        if n == baseline or n in excluded:
            continue
        gain = mean[n] - mean[baseline]
        if steadier(n):
            if gain >= -noise(n) - 1e-12:
                candidates.append(n)
        elif gain > margin * noise(n) + 1e-12:
            candidates.append(n)
        elif gain > 0:
            held_back.append(n)
    best = max(candidates, key=lambda n: mean[n])
    close = [n for n in candidates if mean[n] >= mean[best] - noise(best) - 1e-12]
    choice = best if prefer == "accuracy" else min(close, key=lambda n: (churn_of[n], std[n]))  # ties: the input
    rule = f"--prefer {prefer}: a variant with more churn or a larger run-to-run std than {base} is " + (
        "never recommended"
        if math.isinf(margin)
        else f"recommended only when its {label} gain exceeds {margin:g}× the noise (the larger run-to-run std of the two)"
    )
    reason = _reason(choice, baseline, usable, primary, held_back, margin, noise, steadier)
    reason += f" Rule: {rule}."
    if excluded:
        reason += f" The input is already featurized ({baseline}): {', '.join(excluded)} (phi of phi) not recommended."
    return {"variant": choice, "reason": reason + _stale_note(choice, usable, primary), "prefer": prefer}


def _reason(
    choice: str,
    baseline: str,
    usable: dict[str, dict[str, Any]],
    primary: str,
    held_back: list[str],
    margin: float,
    noise: Callable[[str], float],
    steadier: Callable[[str], bool],
) -> str:
    """The recommendation's sentence: the choice's numbers against the input's, or why a
    variant that gained was held back."""
    label = "accuracy" if primary == "accuracy" else "R²"
    base = "raw h" if baseline == "h" else baseline
    mean = {n: r[f"{primary}_mean"] for n, r in usable.items()}
    std = {n: r[f"{primary}_std"] for n, r in usable.items()}
    churn_of = {n: r["churn"] for n, r in usable.items()}
    c = usable[choice]
    stats = f"churn {_churn_text(primary, c['churn'])}, {label} {mean[choice]:.3f} (std {std[choice]:.3f})"
    if choice == baseline:
        reason = f"{base} is already the best choice: {stats}."
        if held_back:
            h = max(held_back, key=lambda n: mean[n])
            reason += (
                f" {h} gains {label} {mean[h] - mean[baseline]:+.3f} but with "
                f"{_ratio(churn_of[h], churn_of[baseline])} the churn and {_ratio(std[h], std[baseline])} the std: "
                f"within {margin:g}× the noise ({margin * noise(h):.3f})."
            )
    else:
        gain = mean[choice] - mean[baseline]
        reason = (
            f"{choice}: {stats}, against {base}'s churn {_churn_text(primary, churn_of[baseline])}, "
            f"{label} {mean[baseline]:.3f} (std {std[baseline]:.3f}); "
            + f"{'steadier' if steadier(choice) else 'less steady'}, {label} change {gain:+.3f}"
            + ("" if steadier(choice) else f", beyond {margin:g}× the noise ({margin * noise(choice):.3f})")
            + "."
        )
    return reason


def _stale_note(choice: str, usable: dict[str, dict[str, Any]], primary: str) -> str:
    """The sentence for a choice whose stale (not refit) model drops beyond the tolerance."""
    label = "accuracy" if primary == "accuracy" else "R²"
    c = usable[choice]
    stale_key = f"stale_{primary}_mean"
    stale = {n: r[stale_key] for n, r in usable.items() if r[stale_key] is not None}
    if not (stale and c["stale_drop"] is not None and c["stale_drop"] > STALE_TOLERANCE):
        return ""
    keeper = max(stale, key=lambda name: stale[name])
    return (
        f" A downstream model that is not refit scores {label} {c[stale_key]:.3f} with {choice} "
        f"(drop {c['stale_drop']:.3f}); "
        + (
            f"with {keeper} it keeps {stale[keeper]:.3f}, so refit on every refresh or use {keeper}."
            if keeper != choice
            else "refit it on every refresh."
        )
    )


def _ratio(value: float, reference: float) -> str:
    return f"{value / reference:.2g}×" if reference > 0 else "more than"


def _churn_text(primary: str, value: float) -> str:
    return f"{value:.1%}" if primary == "accuracy" else f"{value:.3g} RMS"
