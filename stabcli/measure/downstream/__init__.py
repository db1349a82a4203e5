"""Downstream fluctuation (docs/commands.md, ``audit --labels``, ``drift --labels``): does a model
trained on the embedding change when only the embedding's training seed changes, and which
representation fluctuates least?

``options`` (what to fit), ``models`` (the estimators and their seeds), ``targets`` (labels →
targets and the split), ``protocol`` (the one protocol: fits, metrics, churn, stale model),
``flips`` (per-key instability), ``recommend`` (the recommended variant), ``nextitem`` (the
next-item recommendation task).
"""

from stabcli.measure.downstream.models import BUILTIN_MODELS, MODEL_SEED, make_model, parse_model_params
from stabcli.measure.downstream.options import TASKS, DownstreamOptions, Variant, parse_variants
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
from stabcli.measure.downstream.recommend import recommend
from stabcli.measure.downstream.targets import Targets, split, targets_for

MODELS = BUILTIN_MODELS

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
