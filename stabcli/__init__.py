"""stabcli: audit the run-to-run stability of pretrained embeddings.

The commands are library calls too (``docs/api.md``)::

    import stabcli

    runs = stabcli.pretrain("sessions.txt", "runs/exp1", runs=5)
    report = stabcli.audit("runs/exp1", top=10)
    report.to_dict()  # what `stabcli audit runs/exp1 --top 10 --format json` prints
"""

from importlib.metadata import PackageNotFoundError, version
from typing import Any

try:
    __version__ = version("stabcli")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

# name → module; imported on first use: scikit-learn and gensim take seconds to import, and
# pretrain's worker processes (which import this package) never need them
_LAZY = {
    "pretrain": "stabcli.commands.pretrain",
    "audit": "stabcli.commands.audit",
    "featurize": "stabcli.commands.featurize",
    "drift": "stabcli.commands.drift",
    "demo": "stabcli.commands.demo",
    "sweep": "stabcli.commands.sweep",
    "compare": "stabcli.commands.compare",
    "FourierFeaturizer": "stabcli.measure.estimators",
    "ProcrustesAligner": "stabcli.measure.estimators",
    "PretrainResult": "stabcli.training.pretrain",
    "AuditReport": "stabcli.reports.audit_report",
    "FeaturizeResult": "stabcli.commands.featurize",
    "DriftReport": "stabcli.commands.drift",
    "DemoResult": "stabcli.commands.demo",
    "SweepReport": "stabcli.reports.sweep_report",
    "CompareReport": "stabcli.commands.compare",
    "StabcliError": "stabcli.errors",
}

__all__ = [*_LAZY, "__version__"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'stabcli' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
