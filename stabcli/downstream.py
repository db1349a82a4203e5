"""Downstream fluctuation (SPEC section 5): does a model trained on the embedding change
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
import warnings
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
from joblib import Parallel, delayed
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression, Ridge, RidgeClassifier
from sklearn.metrics import accuracy_score, f1_score, mean_squared_error, r2_score
from sklearn.model_selection import train_test_split
from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor

from stabcli.errors import InputError, UsageError
from stabcli.featurize import draw_directions, fourier_features
from stabcli.labels import read_labels
from stabcli.processes import cpu_count

TASKS = ("auto", "classification", "regression")
MODELS = ("logreg", "knn", "ridge")
SOURCES = ("h", "avg", "aligned")
REGRESSION_MIN_DISTINCT = 21  # auto: numeric labels with more distinct values than this (or fractions) are regression
KNN_NEIGHBOURS = 5
STALE_TOLERANCE = 0.01  # a stale-model drop above this is called out in the recommendation


@dataclass
class DownstreamOptions:
    labels: Path
    task: str = "auto"
    model: str | None = None          # default: logreg for classification, ridge for regression
    test_size: float = 0.2
    split_seed: int = 0
    variants: list[str] | None = None  # default: h, avg, aligned, phi:d, phi:2d
    featurize_dims: list[int] = field(default_factory=list)
    sigmas: list[float] = field(default_factory=list)
    reference: int = 0
    seed: int = 0                      # random Fourier directions, one draw for all runs
    jobs: int | None = None
    encoding: str = "utf-8"


@dataclass(frozen=True)
class Variant:
    """A representation to evaluate: ``source`` (h, avg, aligned) optionally through phi."""

    name: str
    source: str
    phi_dim: int | None = None
    sigma: float = 1.0


_VARIANT_RE = re.compile(r"^(?:(h|avg|aligned)\+)?phi:(\d+)(?:@([0-9.eE+-]+))?$")


def parse_variants(spec: Sequence[str] | None, input_dim: int, featurize_dims: Sequence[int] = (),
                   sigmas: Sequence[float] = ()) -> list[Variant]:
    """Variant names → variants, expanded over the M and σ sweeps, duplicates dropped.

    ``phi:M`` is short for ``h+phi:M``; ``phi:M@S`` sets σ = S. ``--featurize-dims``
    replaces M and ``--sigmas`` replaces σ in every variant that has phi.
    """
    if spec is None:
        even = input_dim + input_dim % 2
        spec = ["h", "avg", "aligned", f"phi:{even}", f"phi:{2 * even}"]
    for sigma in sigmas:
        if not (math.isfinite(sigma) and sigma > 0):
            raise UsageError(f"--sigmas: {sigma:g} is not a positive number")
    for m in featurize_dims:
        if m < 2 or m % 2:
            raise UsageError(f"--featurize-dims: {m} must be an even integer >= 2 (cos/sin pairs)")
    variants: list[Variant] = []
    has_phi = False
    for token in (t.strip() for t in spec):
        if token in SOURCES:
            variants.append(Variant(token, token))
            continue
        match = _VARIANT_RE.match(token)
        if not match:
            raise UsageError(f"--variants: unknown variant {token!r}; use h, avg, aligned, phi:M, phi:M@SIGMA "
                             f"or aligned+phi:M")
        has_phi = True
        source, dim, sigma_text = match.group(1) or "h", int(match.group(2)), match.group(3)
        try:
            sigma = float(sigma_text) if sigma_text else 1.0
        except ValueError:
            raise UsageError(f"--variants: {token!r}: {sigma_text!r} is not a number") from None
        for m in featurize_dims or [dim]:
            for s in sigmas or [sigma]:
                if m < 2 or m % 2 or not (math.isfinite(s) and s > 0):
                    raise UsageError(f"--variants: {token!r} needs an even M >= 2 and a positive sigma")
                prefix = "" if source == "h" else f"{source}+"
                suffix = f"@{s:g}" if sigmas or s != 1.0 else ""
                variants.append(Variant(f"{prefix}phi:{m}{suffix}", source, m, s))
    if (featurize_dims or sigmas) and not has_phi:
        raise UsageError("--featurize-dims and --sigmas sweep phi variants, but --variants has none (add phi:M)")
    return list({v.name: v for v in variants}.values())  # first occurrence order, duplicates dropped


# ------------------------------------------------------------------ labels → targets


@dataclass
class Targets:
    task: str
    rows: np.ndarray          # positions in the runs' common keys that have a label
    y: np.ndarray             # labels of those rows (str for classification, float for regression)
    skipped: int              # common keys without a label
    classes: list[str]


def targets_for(keys: Sequence[str], options: DownstreamOptions) -> Targets:
    """Match the label file to the embedding keys and decide the task."""
    if options.task not in TASKS:
        raise UsageError(f"--task {options.task!r}: choose one of {', '.join(TASKS)}")
    known = set(keys)
    labels = read_labels(options.labels, known, options.encoding)
    rows = np.array([i for i, k in enumerate(keys) if k in labels.by_key], dtype=np.int64)
    if len(rows) == 0:
        sample = next(iter(labels.by_key))
        raise InputError(f"{labels.source}: none of its {len(labels.by_key):,} keys is an embedding key "
                         f"(label key {sample!r}, embedding key {keys[0]!r})")
    raw = [labels.by_key[keys[i]] for i in rows]
    numbers = _as_numbers(raw)
    task = options.task
    if task == "auto":
        fractional = numbers is not None and bool(np.any(numbers != np.round(numbers)))
        many = numbers is not None and len(np.unique(numbers)) >= REGRESSION_MIN_DISTINCT
        task = "regression" if fractional or many else "classification"
    if task == "regression":
        if numbers is None:
            bad = next(v for v in raw if _as_numbers([v]) is None)
            raise InputError(f"{labels.source}: --task regression needs numeric labels, found {bad!r}")
        return Targets(task, rows, numbers, len(keys) - len(rows), [])
    y = np.array(raw, dtype=object)
    classes, counts = np.unique(y, return_counts=True)
    if len(classes) < 2:
        raise InputError(f"{labels.source}: only one class ({classes[0]!r}) among the {len(rows):,} labeled keys; "
                         "classification needs at least 2")
    if counts.min() < 2:
        rare = classes[int(np.argmin(counts))]
        raise InputError(f"{labels.source}: class {rare!r} has only 1 labeled key; a stratified split needs at least "
                         "2 per class (merge or drop it)")
    return Targets(task, rows, y, len(keys) - len(rows), [str(c) for c in classes])


def _as_numbers(values: Sequence[str]) -> np.ndarray | None:
    try:
        numbers = np.array([float(v) for v in values])
    except ValueError:
        return None
    return numbers if np.all(np.isfinite(numbers)) else None


def split(targets: Targets, test_size: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """One seeded (stratified for classification) split into train and test positions."""
    if not 0 < test_size < 1:
        raise UsageError(f"--test-size {test_size:g}: must be between 0 and 1")
    positions = np.arange(len(targets.rows))
    try:
        train, test = train_test_split(positions, test_size=test_size, random_state=seed,
                                       stratify=targets.y if targets.task == "classification" else None)
    except ValueError as exc:
        raise InputError(f"cannot split {len(positions):,} labeled keys with --test-size {test_size:g}: {exc}") from None
    if targets.task == "regression" and min(len(train), len(test)) < 2:
        raise InputError(f"{len(positions)} labeled keys are too few for a train/test split")
    return np.sort(train), np.sort(test)


# ------------------------------------------------------------------ models and fits


def make_model(name: str, task: str) -> Any:
    """The unfitted scikit-learn estimator; deterministic and solved to tight tolerance."""
    if name == "logreg":
        if task == "regression":
            raise UsageError("--model logreg is for classification; use ridge or knn for regression")
        return LogisticRegression(max_iter=5000, tol=1e-6)
    if name == "knn":
        return KNeighborsClassifier(KNN_NEIGHBOURS) if task == "classification" else KNeighborsRegressor(KNN_NEIGHBOURS)
    if name == "ridge":
        return RidgeClassifier(alpha=1.0) if task == "classification" else Ridge(alpha=1.0)
    raise UsageError(f"--model {name!r}: choose one of {', '.join(MODELS)}")


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
    model: Any          # kept for the reference run only
    converged: bool


def _fit_predict(model_name: str, task: str, x: np.ndarray, transform: _Transform, train: np.ndarray,
                 test: np.ndarray, y: np.ndarray, keep_model: bool, parent_pid: int) -> tuple[np.ndarray, Any, bool]:
    """Fit on the training rows of one run; (test predictions, the model if kept, converged)."""
    if os.getpid() != parent_pid:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a worker: Ctrl-C is the parent's to handle (exit 130)
    model = make_model(model_name, task)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        model.fit(transform(x[train]), y[train])
    converged = not any(issubclass(w.category, ConvergenceWarning) for w in caught)
    return model.predict(transform(x[test])), model if keep_model else None, converged


def _scores(task: str, y_true: np.ndarray, y_pred: np.ndarray, classes: list[str]) -> dict[str, float]:
    if task == "classification":
        return {"accuracy": float(accuracy_score(y_true, y_pred)),
                "f1_macro": float(f1_score(y_true, y_pred, labels=classes, average="macro", zero_division=0))}
    return {"r2": float(r2_score(y_true, y_pred)), "rmse": float(math.sqrt(mean_squared_error(y_true, y_pred)))}


def churn(task: str, predictions: Sequence[np.ndarray]) -> float:
    """Mean over run pairs of the share of test predictions that differ (classification),
    or of the root-mean-square difference between predictions (regression, label units)."""
    values = []
    for a, b in combinations(predictions, 2):
        values.append(float(np.mean(a != b)) if task == "classification" else float(np.sqrt(np.mean((a - b) ** 2))))
    return float(np.mean(values))


def _mean_std(values: list[float]) -> tuple[float, float | None]:
    """Mean and std (ddof=1); the std is taken around the first value (shift invariant), so
    identical runs give exactly 0 instead of rounding noise."""
    if len(values) < 2:
        return float(values[0]), None
    return float(np.mean(values)), float(np.std(np.subtract(values, values[0]), ddof=1))


# ------------------------------------------------------------------ the report


def downstream_report(arrays: Sequence[np.ndarray], keys: Sequence[str], rotations: Sequence[np.ndarray],
                      options: DownstreamOptions, run_names: Sequence[str],
                      on_step: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The ``downstream`` section of the audit report (schema in the README)."""
    step = on_step or (lambda _: None)
    R, dim = len(arrays), int(arrays[0].shape[1])
    if not 0 <= options.reference < R:
        raise UsageError(f"--reference {options.reference}: must be a run position from 0 to {R - 1}")
    variants = parse_variants(options.variants, dim, options.featurize_dims, options.sigmas)
    targets = targets_for(keys, options)
    model_name = options.model or ("logreg" if targets.task == "classification" else "ridge")
    make_model(model_name, targets.task)  # a bad model/task pair fails before any fitting
    train, test = split(targets, options.test_size, options.split_seed)
    y = targets.y
    xs = [np.asarray(a[targets.rows], dtype=np.float32) for a in arrays]

    # every (variant, run) fit is independent: one parallel pass over all of them
    jobs_list: list[tuple[Variant, int, np.ndarray, _Transform]] = []
    for v in variants:
        directions = draw_directions(dim, v.phi_dim, v.sigma, options.seed) if v.phi_dim else None
        if v.source == "avg":
            jobs_list.append((v, 0, np.mean(xs, axis=0, dtype=np.float64).astype(np.float32), _Transform(None, directions)))
            continue
        for r in range(R):
            rotation = rotations[r] if v.source == "aligned" else None
            jobs_list.append((v, r, xs[r], _Transform(rotation, directions)))
    n_jobs = options.jobs or cpu_count()
    step(f"downstream: {len(jobs_list)} {model_name} fits on {len(train):,} keys")
    parallel = Parallel(n_jobs=min(n_jobs, len(jobs_list)), return_as="generator")
    outputs = parallel(
        delayed(_fit_predict)(model_name, targets.task, x, transform, train, test, y,
                              v.source != "avg" and r == options.reference, os.getpid())
        for v, r, x, transform in jobs_list
    )
    fits: dict[str, list[_Fit]] = {v.name: [] for v in variants}
    for done, ((v, _, x, transform), (pred, model, converged)) in enumerate(zip(jobs_list, outputs), start=1):
        fits[v.name].append(_Fit(x, transform, pred, model, converged))
        step(f"downstream: fit {done}/{len(jobs_list)} ({v.name})")

    primary = "accuracy" if targets.task == "classification" else "r2"
    results: dict[str, dict[str, Any]] = {}
    for v in variants:
        predictions = [f.predictions for f in fits[v.name]]
        scores = [_scores(targets.task, y[test], pred, targets.classes) for pred in predictions]
        entry: dict[str, Any] = {"dim": v.phi_dim or dim, "source": v.source, "sigma": v.sigma if v.phi_dim else None}
        for metric in scores[0]:
            values = [s[metric] for s in scores]
            entry[f"{metric}_mean"], entry[f"{metric}_std"] = _mean_std(values)
            entry[f"{metric}_by_run"] = values
        entry["churn"] = churn(targets.task, predictions) if len(predictions) > 1 else None
        refit = entry[f"{primary}_by_run"]
        entry[f"stale_{primary}_mean"], entry["stale_drop"] = _stale(fits[v.name], refit, test, targets, primary)
        results[v.name] = entry
    report = {
        "labels": str(options.labels),
        "task": targets.task,
        "model": model_name,
        "classes": len(targets.classes) if targets.classes else None,
        "train": int(len(train)),
        "test": int(len(test)),
        "skipped_keys": targets.skipped,
        "test_size": options.test_size,
        "split_seed": options.split_seed,
        "reference": run_names[options.reference],
        "phi_seed": options.seed,
        "majority_accuracy": _majority(y[train], y[test]) if targets.task == "classification" else None,
        "not_converged": sum(not f.converged for group in fits.values() for f in group),
        "variants": results,
    }
    report["recommendation"] = recommend(results, primary, 1 / len(test) if targets.task == "classification" else 0.0)
    return report


def _stale(fits: list[_Fit], refit: list[float], test: np.ndarray, targets: Targets,
           primary: str) -> tuple[float | None, float | None]:
    """The reference run's model on every other run's test rows: (mean metric, mean drop from
    that run's ``refit`` metric). None, None for a variant with a single fit (avg)."""
    reference = next((f.model for f in fits if f.model is not None), None)
    if reference is None or len(fits) < 2:
        return None, None
    truth = targets.y[test]
    stale, drops = [], []
    for f, refit_metric in zip(fits, refit):
        if f.model is not None:
            continue
        metric = _scores(targets.task, truth, reference.predict(f.transform(f.x[test])), targets.classes)[primary]
        stale.append(metric)
        drops.append(refit_metric - metric)
    return float(np.mean(stale)), float(np.mean(drops))


def _majority(y_train: np.ndarray, y_test: np.ndarray) -> float:
    classes, counts = np.unique(y_train, return_counts=True)
    return float(np.mean(y_test == classes[int(np.argmax(counts))]))


def recommend(results: dict[str, dict[str, Any]], primary: str, resolution: float = 0.0) -> dict[str, Any]:
    """The most stable variant (lowest churn, then std) whose mean is within one std of the best.

    ``resolution`` is the smallest difference the metric can show (one test prediction,
    1/n_test, for accuracy): "within one std" means within max(std, resolution), so a
    best variant whose std happens to be 0 does not exclude a variant one prediction behind.
    """
    eligible = {name: r for name, r in results.items() if r["churn"] is not None and r[f"{primary}_std"] is not None}
    if not eligible:
        return {"variant": None, "reason": "no variant has more than one run; nothing to compare"}
    label = "accuracy" if primary == "accuracy" else "R²"
    best = max(eligible, key=lambda n: eligible[n][f"{primary}_mean"])
    best_mean, best_std = eligible[best][f"{primary}_mean"], eligible[best][f"{primary}_std"]
    close = [n for n, r in eligible.items() if r[f"{primary}_mean"] >= best_mean - max(best_std, resolution) - 1e-12]
    choice = min(close, key=lambda n: (eligible[n]["churn"], eligible[n][f"{primary}_std"]))
    c = eligible[choice]
    churn_text = _churn_text(primary, c["churn"])
    if choice == "h":
        reason = (f"raw h is already the best choice: churn {churn_text}, {label} {c[f'{primary}_mean']:.3f} "
                  f"(std {c[f'{primary}_std']:.3f}); no variant within one std of the best {label} "
                  f"({best}: {best_mean:.3f} ± {best_std:.3f}) has lower churn.")
    else:
        versus = f" vs {_churn_text(primary, eligible['h']['churn'])} for raw h" if "h" in eligible else ""
        reason = (f"{choice}: lowest churn ({churn_text}{versus}) among the {len(close)} variant(s) whose {label} is "
                  f"within one std of the best ({best}: {best_mean:.3f} ± {best_std:.3f}); its {label} is "
                  f"{c[f'{primary}_mean']:.3f} (std {c[f'{primary}_std']:.3f}).")
    stale_key = f"stale_{primary}_mean"
    stale = {n: r[stale_key] for n, r in eligible.items() if r[stale_key] is not None}
    if stale and c["stale_drop"] is not None and c["stale_drop"] > STALE_TOLERANCE:
        keeper = max(stale, key=stale.get)
        reason += (f" A downstream model that is not refit scores {label} {c[stale_key]:.3f} with {choice} "
                   f"(drop {c['stale_drop']:.3f}); "
                   + (f"with {keeper} it keeps {stale[keeper]:.3f}, so refit on every refresh or use {keeper}."
                      if keeper != choice else "refit it on every refresh."))
    return {"variant": choice, "reason": reason}


def _churn_text(primary: str, value: float) -> str:
    return f"{value:.1%}" if primary == "accuracy" else f"{value:.3g} RMS"
