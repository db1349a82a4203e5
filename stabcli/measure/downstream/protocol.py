"""The downstream protocol, the one every command uses (``audit --labels``, ``drift --labels``).

One seeded train/test split (stratified for classification) is shared by every run and
variant. The model is fit on each run's training rows and scored on its test rows, so any
spread between runs comes from the representation. Per variant: metric mean and std
(ddof=1) over runs, churn (how many test decisions change between runs), per-key flip
rates, and stale-model compatibility (the reference run's model applied unchanged to the
other runs, a refresh without retraining). Features beyond 2^±100 are divided by one
common power of two and regression labels beyond 2^±400 by another (exact): every number
is reported in the units of the input.
"""

from __future__ import annotations

import math
import os
import signal
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

import numpy as np
from joblib import Parallel, delayed
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import accuracy_score, f1_score, mean_squared_error, r2_score

from stabcli.errors import InputError, OptionError
from stabcli.fs.resources import available_memory, human_bytes
from stabcli.measure.downstream.flips import Bands, KeyFlips, PerKeyFlips, flips_summary, key_flips
from stabcli.measure.downstream.models import (
    KNN_NEIGHBOURS,
    is_costly,
    make_model,
    output_to_stderr,
    parse_model_params,
)
from stabcli.measure.downstream.options import DownstreamOptions, Variant, parse_variants
from stabcli.measure.downstream.recommend import FEATURIZED_INPUT, recommend
from stabcli.measure.downstream.targets import Targets, split, targets_for
from stabcli.measure.fourier import draw_directions, fourier_features
from stabcli.measure.metrics import mean_std, peak, rescaled
from stabcli.training.processes import cpu_count

MODEL_SAFE_EXPONENT = 100  # features beyond 2^±100 are divided by a common power of two before fitting
PRIMARY = {"classification": "accuracy", "regression": "r2", "multilabel": "f1_micro"}


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


@dataclass(frozen=True)
class _Job:
    """One fit: the variant, the run position, its features and their transform."""

    variant: Variant
    run: int
    x: np.ndarray
    transform: _Transform
    keep_model: bool


def _fit_predict(
    model_name: str,
    params: dict[str, Any],
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
    model = make_model(model_name, task, params)
    with warnings.catch_warnings(record=True) as caught:  # recorded, never printed (workers share stderr)
        warnings.simplefilter("always")
        try:
            model.fit(transform(x[train]), y[train])
            predictions = np.asarray(model.predict(transform(x[test])))
        except (MemoryError, KeyboardInterrupt):
            raise
        except Exception as exc:  # any estimator, with the user's parameters: its failure is the user's to fix
            raise InputError(f"--model {model_name}: fitting failed ({type(exc).__name__}: {exc})") from None
    converged = not any(issubclass(w.category, ConvergenceWarning) for w in caught)
    return predictions, model if keep_model else None, converged


def prediction_scores(
    task: str, y_true: np.ndarray, y_pred: np.ndarray, classes: list[str], scale: float = 1.0
) -> dict[str, float]:
    """Test-split metrics of predictions: accuracy and macro F1 (classification); micro and
    macro F1 and subset accuracy over the 0/1 label matrix (multilabel); R² and RMSE
    (regression: labels divided by ``scale``, the RMSE back in label units)."""
    if task == "classification":
        return {
            "accuracy": float(accuracy_score(y_true, y_pred)),
            "f1_macro": float(f1_score(y_true, y_pred, labels=classes, average="macro", zero_division=0)),
        }
    if task == "multilabel":
        return {
            "f1_micro": float(f1_score(y_true, y_pred, average="micro", zero_division=0)),
            "f1_macro": float(f1_score(y_true, y_pred, average="macro", zero_division=0)),
            "subset_accuracy": float(accuracy_score(y_true, y_pred)),
        }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r2 = float(r2_score(y_true, y_pred))
    return {"r2": r2, "rmse": rescaled(math.sqrt(mean_squared_error(y_true, y_pred)), scale, 1)}


def churn(task: str, predictions: Sequence[np.ndarray], scale: float = 1.0) -> float:
    """Mean over run pairs of the share of test decisions that differ (classification: one
    per key; multilabel: one per (key, label)), or of the root-mean-square difference
    between predictions (regression, label units; predictions of labels divided by ``scale``)."""
    values = []
    for a, b in combinations(predictions, 2):
        values.append(float(np.mean(a != b)) if task != "regression" else float(np.sqrt(np.mean((a - b) ** 2))))
    return rescaled(float(np.mean(values)), scale, 1)


def label_churn(predictions: Sequence[np.ndarray], labels: Sequence[str]) -> dict[str, float]:
    """Multilabel: per label, the mean over run pairs of the share of test keys whose
    decision for that label differs."""
    shares = np.mean([np.mean(a != b, axis=0) for a, b in combinations(predictions, 2)], axis=0)
    return {label: float(v) for label, v in zip(labels, shares, strict=True)}


# ------------------------------------------------------------------ the plan


@dataclass(frozen=True)
class Plan:
    """What the downstream audit will fit, decided from the options, the labels and the
    runs' shape before any computation: every bad option or label file fails here."""

    variants: list[Variant]
    targets: Targets
    model: str
    params: dict[str, Any]
    train: np.ndarray
    test: np.ndarray

    @property
    def primary(self) -> str:
        """The metric the recommendation and the stale model are judged by."""
        return PRIMARY[self.targets.task]


def default_model(task: str) -> str:
    """logreg for classification and multilabel, ridge for regression."""
    return "ridge" if task == "regression" else "logreg"


def plan_downstream(
    options: DownstreamOptions,
    keys: Sequence[str],
    runs: int,
    dim: int,
    on_warning: Callable[[str], None] | None = None,
    variants: Sequence[str] | None = None,
) -> Plan:
    """Check the options against the runs, read the labels, choose the task, model and split,
    and refuse variants whose features cannot fit in memory. Reads only the label file.
    ``variants`` (names) replaces ``options.variants`` (drift fits raw vectors only)."""
    options.check_runs(runs)
    targets = targets_for(keys, options, on_warning)
    model_name = options.model or default_model(targets.task)
    params = parse_model_params(options.model_params)
    make_model(model_name, targets.task, params)  # a bad model/task pair fails before any fitting
    spec = variants if variants is not None else options.variants
    parsed = parse_variants(
        spec, dim, options.featurize_dims, options.sigmas, costly=is_costly(model_name), featurized=options.featurized
    )
    train, test = split(targets, options.test_size, options.split_seed)
    if model_name == "knn" and len(train) < KNN_NEIGHBOURS:
        raise InputError(
            f"{options.labels}: {len(train)} training keys are fewer than the {KNN_NEIGHBOURS} "
            "neighbours --model knn uses"
        )
    _check_memory(parsed, options, dim, len(targets.rows), runs)
    return Plan(parsed, targets, model_name, params, train, test)


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


# ------------------------------------------------------------------ fits


def model_features(arrays: Sequence[np.ndarray], rows: np.ndarray) -> tuple[list[np.ndarray], float]:
    """The labeled rows of every run, and the common power of two they were divided by (1.0
    unless some value is beyond 2^±100): exact, and comparable across runs."""
    # keep float32 input float32 (no copy cost); float64 stays float64, so 1e300 does not overflow
    xs = [np.asarray(a[rows], dtype=np.float64 if a.dtype == np.float64 else np.float32) for a in arrays]
    largest = max(peak(x) for x in xs)
    exponent = math.frexp(largest)[1] if largest > 0 else 0
    feature_scale = math.ldexp(1.0, exponent) if abs(exponent) > MODEL_SAFE_EXPONENT else 1.0
    if feature_scale != 1.0:
        xs = [x / feature_scale for x in xs]
    return xs, feature_scale


def run_fits(
    plan: Plan, jobs_list: Sequence[_Job], n_jobs: int | None, step: Callable[[str], None]
) -> dict[str, list[_Fit]]:
    """Every fit of ``jobs_list`` in one parallel pass (joblib: processes, or the Dask cluster
    of the active backend); the fits of each variant in run order. What the estimators
    print goes to stderr (``models.output_to_stderr``)."""
    targets, train, test = plan.targets, plan.train, plan.test
    step(f"downstream: {len(jobs_list)} {plan.model} fits on {len(train):,} keys")
    parallel = Parallel(n_jobs=min(n_jobs or cpu_count(), len(jobs_list)), return_as="generator")
    fits: dict[str, list[_Fit]] = {}
    # joblib's own warnings never reach the user's stderr; what an estimator prints goes there, not to stdout
    with warnings.catch_warnings(), output_to_stderr():
        warnings.simplefilter("ignore")
        outputs = parallel(
            delayed(_fit_predict)(
                plan.model,
                plan.params,
                targets.task,
                job.x,
                job.transform,
                train,
                test,
                targets.y,
                job.keep_model,
                os.getpid(),
            )
            for job in jobs_list
        )
        for done, (job, (pred, model, converged)) in enumerate(zip(jobs_list, outputs, strict=False), start=1):
            fits.setdefault(job.variant.name, []).append(_Fit(job.x, job.transform, pred, model, converged))
            step(f"downstream: fit {done}/{len(jobs_list)} ({job.variant.name})")
    return fits


def _jobs(
    plan: Plan, xs: Sequence[np.ndarray], rotations: Sequence[np.ndarray], options: DownstreamOptions, dim: int
) -> list[_Job]:
    """Every (variant, run) fit; avg is one fit on the mean of the runs."""
    jobs_list: list[_Job] = []
    for v in plan.variants:
        directions = draw_directions(dim, v.phi_dim, v.sigma, options.seed) if v.phi_dim else None
        if v.source == "avg":
            mean = np.asarray(np.mean(xs, axis=0, dtype=np.float64))
            x = mean if xs[0].dtype == np.float64 else mean.astype(np.float32)
            jobs_list.append(_Job(v, 0, x, _Transform(None, directions), False))
            continue
        for r in range(len(xs)):
            rotation = rotations[r] if v.source == "aligned" else None
            jobs_list.append(_Job(v, r, xs[r], _Transform(rotation, directions), r == options.reference))
    return jobs_list


# ------------------------------------------------------------------ the audit section


def downstream_report(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """The ``downstream`` section of the audit report (schema in docs/json.md): the section of
    ``downstream_audit`` (same arguments), without the per-key table."""
    return downstream_audit(*args, **kwargs)[0]


def downstream_audit(
    arrays: Sequence[np.ndarray],
    keys: Sequence[str],
    rotations: Sequence[np.ndarray],
    options: DownstreamOptions,
    run_names: Sequence[str],
    on_step: Callable[[str], None] | None = None,
    plan: Plan | None = None,
    on_warning: Callable[[str], None] | None = None,
    key_names: Mapping[str, str] | None = None,
    frequency: np.ndarray | None = None,
    bands: Bands | None = None,
) -> tuple[dict[str, Any], PerKeyFlips]:
    """The ``downstream`` section of the audit report and every variant's per-key flip rates.

    ``plan`` (from ``plan_downstream``, called before the Gram pass) is made here if not given.
    ``key_names`` and ``frequency`` (training counts in ``keys`` order, -1 unknown) describe
    the keys whose decisions flip most; ``bands`` groups the test keys by frequency.
    """
    step = on_step or (lambda _: None)
    R, dim = len(arrays), int(arrays[0].shape[1])
    plan = plan or plan_downstream(options, keys, R, dim, on_warning)
    targets, train, test = plan.targets, plan.train, plan.test
    xs, feature_scale = model_features(arrays, targets.rows)
    fits = run_fits(plan, _jobs(plan, xs, rotations, options, dim), options.jobs, step)
    primary, y = plan.primary, targets.y
    test_keys = [keys[i] for i in targets.rows[test]]
    test_frequency = None if frequency is None else np.asarray(frequency)[targets.rows[test]]
    results: dict[str, dict[str, Any]] = {}
    per_key: dict[str, KeyFlips] = {}
    for v in plan.variants:
        predictions = [f.predictions for f in fits[v.name]]
        scores = [
            prediction_scores(targets.task, y[test], pred, targets.classes, targets.scale) for pred in predictions
        ]
        entry: dict[str, Any] = {"dim": v.phi_dim or dim, "source": v.source, "sigma": v.sigma if v.phi_dim else None}
        for metric in scores[0]:
            values = [s[metric] for s in scores]
            entry[f"{metric}_mean"], entry[f"{metric}_std"] = mean_std(values)
            entry[f"{metric}_by_run"] = values
        entry["churn"] = churn(targets.task, predictions, targets.scale) if len(predictions) > 1 else None
        if targets.task == "multilabel":
            entry["label_churn"] = label_churn(predictions, targets.classes) if len(predictions) > 1 else None
        refit = entry[f"{primary}_by_run"]
        entry[f"stale_{primary}_mean"], entry["stale_drop"] = _stale(fits[v.name], refit, test, targets, primary)
        name = v.name
        if options.featurized and v.name == "h":  # the input itself is phi(h): say so everywhere
            name = entry["source"] = FEATURIZED_INPUT
        if len(predictions) > 1:
            flips = key_flips(targets.task, predictions, targets.scale, options.reference, targets.classes)
            per_key[name] = flips
            entry["flips"] = flips_summary(flips, test_keys, key_names, test_frequency, options.top, bands)
        results[name] = _json_safe(entry)
    report: dict[str, Any] = {
        "labels": str(options.labels),
        "task": targets.task,
        "model": plan.model,
        "model_params": {k: _param_json(v) for k, v in plan.params.items()},
        "classes": len(targets.classes) if targets.classes else None,
        "labels_per_key": float(np.mean(y.sum(axis=1))) if targets.task == "multilabel" else None,
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
    resolution = 1 / len(test) if targets.task == "classification" else 0.0
    baseline = FEATURIZED_INPUT if options.featurized else "h"
    report["recommendation"] = recommend(results, primary, resolution, prefer=options.prefer, baseline=baseline)
    return report, PerKeyFlips(test_keys, per_key)


def _param_json(value: Any) -> Any:
    """A model parameter as JSON: numbers, strings, booleans and null as they are, else its repr."""
    return value if value is None or isinstance(value, (bool, int, float, str)) else repr(value)


def _json_safe(value: Any) -> Any:
    """Non-finite floats (an RMSE beyond float64's range) become None, recursively."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    return value


def _stale_predictions(fits: list[_Fit], test: np.ndarray) -> list[np.ndarray | None]:
    """The reference run's model on every run's test rows (None for the reference itself)."""
    reference = next(f.model for f in fits if f.model is not None)
    out: list[np.ndarray | None] = []
    for f in fits:
        if f.model is not None:
            out.append(None)
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out.append(np.asarray(reference.predict(f.transform(f.x[test]))))
    return out


def _stale(
    fits: list[_Fit], refit: list[float], test: np.ndarray, targets: Targets, primary: str
) -> tuple[float | None, float | None]:
    """The reference run's model on every other run's test rows: (mean metric, mean drop from
    that run's ``refit`` metric). None, None for a variant with a single fit (avg)."""
    if len(fits) < 2 or all(f.model is None for f in fits):
        return None, None
    truth = targets.y[test]
    stale, drops = [], []
    for predicted, refit_metric in zip(_stale_predictions(fits, test), refit, strict=True):
        if predicted is None:
            continue
        metric = prediction_scores(targets.task, truth, predicted, targets.classes, targets.scale)[primary]
        stale.append(metric)
        drops.append(refit_metric - metric)
    return float(np.mean(stale)), float(np.mean(drops))


def _majority(y_train: np.ndarray, y_test: np.ndarray) -> float:
    classes, counts = np.unique(y_train, return_counts=True)
    return float(np.mean(y_test == classes[int(np.argmax(counts))]))


# ------------------------------------------------------------------ a refresh (drift --labels)


def refresh_report(
    before: np.ndarray,
    after: np.ndarray,
    rotation: np.ndarray | None,
    keys: Sequence[str],
    options: DownstreamOptions,
    on_step: Callable[[str], None] | None = None,
    plan: Plan | None = None,
) -> dict[str, Any]:
    """BEFORE's model applied unchanged to AFTER (raw, and through ``rotation``, AFTER aligned
    onto BEFORE) against a model refit on AFTER: the audit's protocol (split, model, feature
    and label scaling, metrics, churn) on the two runs [BEFORE, AFTER] with BEFORE as the
    reference. Every value is in label units; ``plan`` comes from ``plan_downstream(...,
    variants=["h"])`` when the caller checked the labels early."""
    step = on_step or (lambda _: None)
    plan = plan or plan_downstream(options, keys, 2, int(before.shape[1]), variants=["h"])
    targets, test, primary = plan.targets, plan.test, plan.primary
    (xb, xa), feature_scale = model_features([before, after], targets.rows)
    h = Variant("h", "h")
    jobs_list = [_Job(h, 0, xb, _Transform(), True), _Job(h, 1, xa, _Transform(), False)]
    old, new = run_fits(plan, jobs_list, options.jobs, step)["h"]
    fits = [old, new]
    if rotation is not None:
        fits.append(_Fit(xa, _Transform(rotation), old.predictions, None, True))
    stale = _stale_predictions(fits, test)

    def score(predicted: np.ndarray) -> float:
        return prediction_scores(targets.task, targets.y[test], predicted, targets.classes, targets.scale)[primary]

    def changed(predicted: np.ndarray) -> float:
        return churn(targets.task, [old.predictions, predicted], targets.scale)

    refit, stale_raw = score(new.predictions), score(stale[1])  # type: ignore[arg-type]
    aligned = stale[2] if rotation is not None else None
    stale_aligned = None if aligned is None else score(aligned)
    return {
        "task": targets.task,
        "model": plan.model,
        "metric": primary,
        "train": len(plan.train),
        "test": len(test),
        "skipped_keys": int(targets.skipped),
        "feature_scale": feature_scale,
        "label_scale": targets.scale,
        "before": score(old.predictions),
        "refit": refit,
        "stale_raw": stale_raw,
        "stale_aligned": stale_aligned,
        "drop_raw": refit - stale_raw,
        "drop_aligned": None if stale_aligned is None else refit - stale_aligned,
        "churn_refit": changed(new.predictions),
        "churn_stale_aligned": None if aligned is None else changed(aligned),
    }
