"""Downstream fluctuation (docs/commands.md, ``audit --labels``, ``drift --labels``): does a model
trained on the embedding change when only the embedding's training seed changes, and which
representation fluctuates least?

``options`` (what to fit), ``models`` (the estimators and their seeds), ``targets`` (labels →
targets and the split), ``protocol`` (the one protocol: fits, metrics, churn, stale model),
``flips`` (per-key instability), ``recommend`` (the recommended variant), ``nextitem`` (the
next-item recommendation task).

The names of ``protocol`` and ``targets`` are imported when first used: those modules
import scikit-learn (about a second), which an audit without ``--labels`` never needs, and
importing any submodule (``nextitem``, ``options``) runs this file first.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from stabcli.measure.downstream.models import BUILTIN_MODELS, MODEL_SEED, make_model, parse_model_params
from stabcli.measure.downstream.options import TASKS, DownstreamOptions, Variant, parse_variants
from stabcli.measure.downstream.recommend import recommend

if TYPE_CHECKING:
    from stabcli.measure.downstream.protocol import (
        Plan,
        churn,
        downstream_audit,
        downstream_report,
        label_churn,
        plan_downstream,
        prediction_scores,
        refresh_report,
    )
    from stabcli.measure.downstream.targets import Targets, split, targets_for

MODELS = BUILTIN_MODELS

_LAZY = {  # the modules that import scikit-learn, and their names
    "protocol": (
        "Plan",
        "churn",
        "downstream_audit",
        "downstream_report",
        "label_churn",
        "plan_downstream",
        "prediction_scores",
        "refresh_report",
    ),
    "targets": ("Targets", "split", "targets_for"),
}
_HOME_OF = {name: module for module, names in _LAZY.items() for name in names}

__all__ = [
    "BUILTIN_MODELS",
    "MODELS",
    "MODEL_SEED",
    "TASKS",
    "DownstreamOptions",
    "Plan",
    "Targets",
    "Variant",
    "churn",
    "downstream_audit",
    "downstream_report",
    "label_churn",
    "make_model",
    "parse_model_params",
    "parse_variants",
    "plan_downstream",
    "prediction_scores",
    "recommend",
    "refresh_report",
    "split",
    "targets_for",
]


def __getattr__(name: str) -> Any:
    if name not in _HOME_OF:
        raise AttributeError(f"module {__name__} has no attribute {name}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOME_OF[name]}"), name)
    globals()[name] = value  # later lookups skip this function
    return value
