"""Renderers of the sweep report: terminal (rich), Markdown and PNG plots (docs/commands.md, stabcli sweep)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from stabcli.reports import html
from stabcli.reports.audit_render import require_plots
from stabcli.reports.html import Figure
from stabcli.reports.layout import print_table
from stabcli.reports.sweep_report import PowerLaw, SweepCell, SweepReport
from stabcli.reports.text import literal, md_code, md_text

COLUMNS = ("cell", "noise", "aligned", "k-NN", "CKA", "CKA deb.", "EIS", "downstream", "churn", "train s")


def _num(value: Any, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}g}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def cell_cells(name: str, cell: SweepCell) -> list[str]:
    """One table row: the measures of a cell, the downstream metric as mean (std)."""
    downstream = "n/a"
    if cell.downstream_mean is not None:
        downstream = f"{cell.downstream_mean:.3f}" + (
            f" ({cell.downstream_std:.3f})" if cell.downstream_std is not None else ""
        )
    eis = _num(cell.eis) + (f" ± {cell.eis_std:.2g}" if cell.eis_std is not None else "")
    return [
        name + (" *" if cell.pareto else ""),
        _pct(cell.noise_share),
        _pct(cell.aligned_noise_share),
        _num(cell.knn_overlap),
        _num(cell.cka, 4),
        _num(cell.cka_debiased, 4),
        eis,
        downstream,
        _num(cell.churn),
        _num(cell.training_seconds, 3),
    ]


def fit_rows(report: SweepReport) -> list[list[str]]:
    """measure, a, b, R², fit to the maxima, monotone: one row per data-size curve."""
    rows = []
    curves: list[tuple[str, PowerLaw]] = list(report.data_size.items())
    if report.swap_one is not None:
        curves.append(("swap-one distance", report.swap_one.curve))
    for name, law in curves:
        rows.append(
            [
                name,
                _num(law.a, 4),
                _num(law.b, 3),
                _num(law.r2, 3),
                f"{_num(law.max_a, 4)}·m^{_num(law.max_b, 3)}",
                "yes" if law.monotone else "no",
                " ".join(f"{_num(p.median)}" for p in law.points),
            ]
        )
    return rows


FIT_HEADERS = ["measure (instability)", "a", "b", "R²", "fit to maxima", "monotone", "median per size"]


def summary_lines(report: SweepReport) -> list[str]:
    lines = [
        f"{len(report.cells)} cells: grid "
        + (" ".join(f"{k}={','.join(map(str, v))}" for k, v in report.grid.items()) or "(none)")
        + f" × sizes {','.join(f'{s:g}' for s in report.sizes)} of {report.corpus_sequences:,} sequences; "
        f"{report.runs} runs each",
        f"corpus read as {report.corpus_read}",
    ]
    if report.pareto is not None:
        lines.append(
            f"Pareto front of {report.pareto.stability} against {report.pareto.quality} (marked *): "
            + ", ".join(report.pareto.front)
        )
    if report.target is not None:
        lines.append("target: " + report.target.note)
    return lines


def render_terminal(report: SweepReport, console: Console) -> None:
    table = Table(title="Sweep: cells × stability and quality", title_justify="left")
    for i, column in enumerate(COLUMNS):
        table.add_column(column, justify="left" if i == 0 else "right", no_wrap=True)
    for name, cell in report.cells.items():
        table.add_row(*[literal(text) for text in cell_cells(name, cell)])
    print_table(console, table)
    if report.data_size or report.swap_one is not None:
        fits = Table(title="Data size: instability g(m) = a·m^b, m in sequences", title_justify="left")
        for i, column in enumerate(FIT_HEADERS):
            fits.add_column(column, justify="left" if i in (0, 6) else "right", no_wrap=i != 6)
        for row in fit_rows(report):
            fits.add_row(*[literal(text) for text in row])
        print_table(console, fits)
    for line in summary_lines(report):
        console.print(literal(line), soft_wrap=True)
    for warning in report.warnings:
        console.print(literal("warning: " + warning, "yellow"), soft_wrap=True)
    for check in sorted(report.checks, key=lambda c: c.passed, reverse=True):
        mark = "PASS" if check.passed else "FAIL"
        console.print(
            literal(f"{mark} {check.name} (value {_num(check.value, 4)})", "green" if check.passed else "bold red")
        )


def _md_row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def render_markdown(report: SweepReport) -> str:
    lines = ["# stabcli sweep", "", *[md_text(line) for line in summary_lines(report)], ""]
    lines += [_md_row(list(COLUMNS)), "| --- " + "| ---: " * (len(COLUMNS) - 1) + "|"]
    for name, cell in report.cells.items():
        row = cell_cells(name, cell)
        lines.append(_md_row([md_code(row[0]), *[md_text(c) for c in row[1:]]]))
    if report.data_size or report.swap_one is not None:
        lines += ["", "## Data size: g(m) = a·m^b", "", _md_row(FIT_HEADERS), "| --- " + "| ---: " * 5 + "| --- |"]
        lines += [_md_row([md_text(c) for c in row]) for row in fit_rows(report)]
    if report.warnings:
        lines += ["", *[f"- warning: {md_text(w)}" for w in report.warnings]]
    if report.checks:
        lines += ["", *[f"- {'PASS' if c.passed else 'FAIL'} {md_code(c.name, cell=False)}" for c in report.checks]]
    return "\n".join(lines) + "\n"


def render_html(report: SweepReport, figures: list[Figure] | None, report_json: str) -> str:
    """The sweep as one self-contained page: the cells table (sortable), the data-size fits,
    the Pareto front and target lines, warnings, checks, the figures and the JSON."""
    from stabcli.reports.figures import PLOTS_INSTALL

    lines = summary_lines(report)
    body = [html.bullets(lines[1:]) if len(lines) > 1 else ""]
    rows = [cell_cells(name, cell) for name, cell in report.cells.items()]
    body.append(
        html.section(
            "Cells × stability and quality (* on the Pareto front; click a header to sort)",
            html.table(list(COLUMNS), rows, sortable=True, table_id="cells"),
        )
    )
    if report.data_size or report.swap_one is not None:
        body.append(
            html.section(
                "Data size: instability g(m) = a·m^b, m in sequences", html.table(FIT_HEADERS, fit_rows(report))
            )
        )
    if report.warnings:
        body.append(html.section("Warnings", html.bullets(report.warnings)))
    if report.checks:
        body.append(html.section("Checks", html.checks_table(report.checks, lambda v: _num(v, 4))))
    body.append(html.section("Figures", html.figures(figures, PLOTS_INSTALL)))
    from stabcli import __version__

    return html.page("stabcli sweep", lines[0], body, report_json, __version__)


def plot_figures(report: SweepReport) -> list[Figure]:
    """The figures of ``write_plots`` as PNG bytes (drawn once for ``--plots`` and the page)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="stabcli-sweep-") as tmp:
        return [
            Figure(path.name, path.stem.replace("_", " "), path.read_bytes()) for path in write_plots(report, Path(tmp))
        ]


def write_plots(report: SweepReport, directory: Path) -> list[Path]:
    """``data_size.png`` (every instability against m on log-log axes with its fit) and, with
    --labels, ``pareto.png`` (stability against quality, the front joined)."""
    require_plots()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    written = []
    curves = list(report.data_size.items()) + (
        [("swap-one distance", report.swap_one.curve)] if report.swap_one is not None else []
    )
    if curves:
        cols = min(3, len(curves))
        rows = (len(curves) + cols - 1) // cols
        fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
        for ax, (name, law) in zip(axes.flat, curves, strict=False):
            ms = [p.sequences for p in law.points]
            medians = [_nan(p.median) for p in law.points]
            maxima = [_nan(p.max) for p in law.points]
            ax.scatter(ms, medians, label="median", color="#4c72b0", zorder=3)
            ax.scatter(ms, maxima, label="max", color="#c44e52", marker="^", zorder=3)
            if law.a is not None and law.b is not None:
                ax.plot(ms, [law.a * m**law.b for m in ms], color="#4c72b0", label=f"{law.a:.3g}·m^{law.b:.2g}")
            if law.max_a is not None and law.max_b is not None:
                ax.plot(ms, [law.max_a * m**law.max_b for m in ms], color="#c44e52", linestyle="--")
            ax.set(xscale="log", yscale="log", xlabel="m (sequences)", title=name)
            ax.legend(fontsize="x-small")
        for ax in list(axes.flat)[len(curves) :]:
            ax.axis("off")
        fig.tight_layout()
        path = directory / "data_size.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    if report.pareto is not None:
        fig, ax = plt.subplots(figsize=(5.5, 4))
        key = report.pareto.stability.split(" ")[0]
        points = [(_nan(getattr(c, key)), _nan(c.downstream_mean)) for c in report.cells.values()]
        ax.scatter([p[0] for p in points], [p[1] for p in points], color="#8c8c8c", label="cells")
        front = [
            (_nan(getattr(report.cells[n], key)), _nan(report.cells[n].downstream_mean)) for n in report.pareto.front
        ]
        front.sort()
        ax.plot([p[0] for p in front], [p[1] for p in front], color="#c44e52", marker="o", label="Pareto front")
        ax.set(xlabel=report.pareto.stability, ylabel=report.pareto.quality, title="Stability against quality")
        ax.legend(fontsize="small")
        fig.tight_layout()
        path = directory / "pareto.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def _nan(value: float | None) -> float:
    return float("nan") if value is None else float(value)
