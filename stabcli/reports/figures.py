"""Figures as PNG bytes: drawn once, then written into a ``--plots`` directory or embedded
in an HTML page. matplotlib is the optional extra ``stabcli[plots]``."""

from __future__ import annotations

import importlib.util
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from stabcli.errors import UsageError
from stabcli.reports.html import Figure

PLOTS_INSTALL = "pip install 'stabcli[plots]'"


def available() -> bool:
    """Whether matplotlib can be imported."""
    return importlib.util.find_spec("matplotlib") is not None


def require_plots() -> None:
    """UsageError naming the extra to install when matplotlib is missing."""
    if not available():
        raise UsageError(f"--plots needs matplotlib: {PLOTS_INSTALL}")


def pyplot() -> Any:
    """matplotlib.pyplot on the non-interactive Agg backend (UsageError without matplotlib)."""
    require_plots()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def png(fig: Any, name: str) -> Figure:
    """``fig`` laid out and rendered as PNG (110 dpi), then closed; titled by its first axes."""
    plt = pyplot()
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    title = next((t for ax in fig.axes if (t := ax.get_title())), name)
    plt.close(fig)
    return Figure(name, title, buffer.getvalue())


def save(drawn: Sequence[Figure], directory: Path) -> list[Path]:
    """Write each figure into ``directory`` (created) under its name; returns the files."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for figure in drawn:
        path = directory / figure.name
        path.write_bytes(figure.png)
        written.append(path)
    return written
