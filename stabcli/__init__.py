"""stabcli: audit the run-to-run stability of pretrained embeddings."""

from importlib.metadata import PackageNotFoundError, version
from typing import Any

try:
    __version__ = version("stabcli")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = ["FourierFeaturizer", "ProcrustesAligner", "__version__"]


def __getattr__(name: str) -> Any:
    # imported on first use: scikit-learn takes seconds to import, and pretrain's worker
    # processes (which import this package) never need it
    if name in ("FourierFeaturizer", "ProcrustesAligner"):
        from stabcli.measure import estimators

        return getattr(estimators, name)
    raise AttributeError(f"module 'stabcli' has no attribute {name!r}")
