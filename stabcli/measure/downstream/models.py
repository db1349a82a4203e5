"""The downstream models: built-in names and any scikit-learn-compatible estimator.

Every model is built unfitted from its name, the task and ``--model-param`` values, and is
seeded so that two fits on the same features give the same predictions: between runs only
the embedding varies.

======  =====================================================  ======================================
name    estimator (classification / regression)               randomness and its seed
======  =====================================================  ======================================
logreg  LogisticRegression(max_iter=5000, tol=1e-6) / —        none (convex, solved to tolerance)
knn     KNeighborsClassifier / KNeighborsRegressor (k=5)       none
ridge   RidgeClassifier / Ridge (alpha=1)                      none (closed form)
gbdt    HistGradientBoostingClassifier / …Regressor            random_state=0: the early-stopping
                                                               validation split and bin subsampling
mlp     MLPClassifier / MLPRegressor (early_stopping=True,     random_state=0: initial weights, batch
        max_iter=500)                                          order, the early-stopping split
M:C     the class C of module M, with --model-param values     random_state=0 when the estimator has
                                                               that parameter and it is not given
======  =====================================================  ======================================

``--model-param NAME=VALUE`` values are Python literals (``0.1``, ``(64, 32)``, ``None``,
``'log_loss'``); a bare word is a string. They are set and validated when the options are
built, before any file is read.
"""

from __future__ import annotations

import ast
import importlib
import os
import re
import sys
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, redirect_stdout
from typing import Any

from stabcli.errors import OptionError, quote, quoted

BUILTIN_MODELS = ("logreg", "knn", "ridge", "gbdt", "mlp")
COSTLY_MODELS = ("gbdt", "mlp")  # and every imported estimator: the default variants leave out phi:2d
KNN_NEIGHBOURS = 5
MODEL_SEED = 0  # random_state of every seeded model (--model-param random_state=N overrides)
_IMPORT_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_BARE_WORD = re.compile(r"^[A-Za-z_][\w.\-]*$")


def is_costly(name: str) -> bool:
    """Whether the default variant set leaves out phi:2d for this model (fit cost grows with M)."""
    return name in COSTLY_MODELS or ":" in name


def parse_model_params(items: Sequence[str] | Mapping[str, Any]) -> dict[str, Any]:
    """``NAME=VALUE`` strings → a dict; values are Python literals (``ast.literal_eval``), a
    bare word is a string. A mapping passes through (the Python API)."""
    if isinstance(items, Mapping):
        return dict(items)
    params: dict[str, Any] = {}
    for item in items:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not name.isidentifier():
            raise OptionError("model_params", f"{quote(item)} is not NAME=VALUE")
        text = text.strip()
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            if not _BARE_WORD.match(text):
                raise OptionError(
                    "model_params",
                    f"{quote(item)}: {quote(text)} is not a Python literal (number, string, tuple, None, …)",
                ) from None
            value = text
        if name in params:
            raise OptionError("model_params", f"{quote(name)} is given twice")
        params[name] = value
    return params


def check_model(name: str | None, task: str, params: Mapping[str, Any]) -> None:
    """Build the model once to check the name, the task and the parameters (OptionError)."""
    if name is None:
        raise OptionError("model_params", "needs --model (the default model depends on the task)")
    tasks = ("classification", "regression") if task == "auto" else (task,)
    errors = []
    for each in tasks:
        try:
            make_model(name, each, params)
            return
        except OptionError as exc:
            errors.append(exc)
    raise errors[0]


def make_model(name: str, task: str, params: Mapping[str, Any] | None = None) -> Any:
    """The unfitted estimator for ``task`` (classification, regression or multilabel, which
    wraps the classifier in one-vs-rest), seeded and with ``params`` set and validated."""
    from sklearn.base import is_classifier, is_regressor
    from sklearn.multiclass import OneVsRestClassifier

    params = dict(params or {})
    base_task = "classification" if task == "multilabel" else task
    if ":" in name:
        estimator = _imported(name, params)
        kind = "classifier" if base_task == "classification" else "regressor"
        fits = is_classifier(estimator) if base_task == "classification" else is_regressor(estimator)
        if not fits:
            raise OptionError("model", f"{name} is not a scikit-learn {kind} (the task is {task})")
    else:
        estimator = _builtin(name, base_task)
        _set_params(name, estimator, params)
    if task == "multilabel":
        return OneVsRestClassifier(estimator)
    return estimator


def _builtin(name: str, task: str) -> Any:
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
    from sklearn.linear_model import LogisticRegression, Ridge, RidgeClassifier
    from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor
    from sklearn.neural_network import MLPClassifier, MLPRegressor

    classify = task == "classification"
    if name == "logreg":
        if not classify:
            raise OptionError(
                "model",
                "logreg is for classification, and these labels are numeric (regression); "
                "use ridge, knn, gbdt or mlp, or --task classification",
            )
        return LogisticRegression(max_iter=5000, tol=1e-6)
    if name == "knn":
        return KNeighborsClassifier(KNN_NEIGHBOURS) if classify else KNeighborsRegressor(KNN_NEIGHBOURS)
    if name == "ridge":
        return RidgeClassifier(alpha=1.0) if classify else Ridge(alpha=1.0)
    if name == "gbdt":
        cls = HistGradientBoostingClassifier if classify else HistGradientBoostingRegressor
        return cls(random_state=MODEL_SEED)
    if name == "mlp":
        cls = MLPClassifier if classify else MLPRegressor
        return cls(early_stopping=True, max_iter=500, random_state=MODEL_SEED)
    raise OptionError("model", f"{quote(name)} is not one of {', '.join(BUILTIN_MODELS)} or module:Class")


def _imported(path: str, params: dict[str, Any]) -> Any:
    if not _IMPORT_PATH.match(path):
        raise OptionError("model", f"{quote(path)} is not module:Class (e.g. sklearn.svm:SVC)")
    module_name, _, class_name = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise OptionError("model", f"{path}: cannot import {module_name} ({exc})") from None
    cls = getattr(module, class_name, None)
    if not isinstance(cls, type):
        raise OptionError("model", f"{path}: {module_name} has no class {class_name}")
    if not all(callable(getattr(cls, method, None)) for method in ("fit", "predict", "get_params", "set_params")):
        raise OptionError("model", f"{path} is not a scikit-learn estimator (needs fit, predict, get_params)")
    try:
        estimator = cls()
    except TypeError as exc:
        raise OptionError("model", f"{path}: cannot be built without arguments ({exc})") from None
    if "random_state" in estimator.get_params() and "random_state" not in params:
        params = {**params, "random_state": MODEL_SEED}
    _set_params(path, estimator, params)
    return estimator


def _set_params(name: str, estimator: Any, params: dict[str, Any]) -> None:
    if not params:
        return
    known = estimator.get_params(deep=False)
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise OptionError(
            "model_params",
            f"{name} has no parameter {', '.join(map(quoted, unknown))} (it has {', '.join(sorted(known))})",
        )
    estimator.set_params(**params)
    validate = getattr(estimator, "_validate_params", None)  # scikit-learn's own constraint check
    if callable(validate):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                validate()
        except (ValueError, TypeError) as exc:
            raise OptionError("model_params", f"{name}: {exc}") from None


@contextmanager
def output_to_stderr() -> Iterator[None]:
    """While estimators fit, what they print goes to stderr, at the Python level and at file
    descriptor 1 (libsvm's printf under ``verbose=True``, a ``--model module:Class`` that
    prints, the worker processes started meanwhile): stdout is the caller's, and
    ``stabcli ... --format json`` must stay parseable."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no descriptor 1 (closed): the Python-level redirect still holds
        saved = None
    if saved is not None:
        os.dup2(2, 1)
    try:
        with redirect_stdout(sys.stderr):
            yield
    finally:
        _flush_c_stdio()
        if saved is not None:
            os.dup2(saved, 1)
            os.close(saved)


def _flush_c_stdio() -> None:
    """``fflush(NULL)``: C code's buffered stdout reaches the descriptor it was written to."""
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError, TypeError):  # no C library to reach (not Linux or macOS)
        pass
