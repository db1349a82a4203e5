"""stabcli: audit the run-to-run stability of pretrained embeddings."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("stabcli")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

from stabcli.featurize import FourierFeaturizer, ProcrustesAligner  # noqa: E402  (needs __version__)

__all__ = ["__version__", "FourierFeaturizer", "ProcrustesAligner"]
