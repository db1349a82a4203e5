"""Renderers of the audit report (``stabcli.reports.audit_report.AuditReport``): rich terminal view,
Markdown, HTML, PNG plots, laying out the lines and tables of ``stabcli.reports.audit_tables``. JSON is ``stabcli.reports.schema.dumps``; every renderer reads the same report.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table
from rich.text import Text

from stabcli.environment import describe
from stabcli.reports import html
from stabcli.reports.audit_report import AuditReport, EpochRow
from stabcli.reports.audit_tables import (
    BY_FREQUENCY_TITLE,
    NO_LOSS,
    by_frequency_table,
    convergence_table,
    input_line,
    least_stable_table,
    least_stable_title,
    metric_rows,
    sparkline,
    verdict,
)
from stabcli.reports.checks import md_checks, print_checks
from stabcli.reports.downstream_render import (
    downstream_figure,
    downstream_notes,
    downstream_table,
    next_item_notes,
    next_item_table,
    render_downstream,
    render_next_item,
)
from stabcli.reports.figures import PLOTS_INSTALL, png, pyplot
from stabcli.reports.figures import require_plots as require_plots  # where the commands import it from
from stabcli.reports.figures import save as save_figures
from stabcli.reports.html import Cell, Figure
from stabcli.reports.layout import print_table
from stabcli.reports.summary import cut_note
from stabcli.reports.text import json_number, literal, md_code, md_text, num, pct


def _print_titled(console: Console, title: str, table: Table) -> None:
    """The title on its own line (whole, never wrapped to the table's width), then the table,
    stacked when it does not fit (``reports.layout``)."""
    print_table(console, table, literal(title, "italic"))


def _rich_table(
    headers: list[str],
    rows: list[list[str]],
    right_from: int = 1,
    style: Callable[[list[str]], str | None] | None = None,
) -> Table:
    table = Table()
    for i, header in enumerate(headers):
        table.add_column(header, justify="right" if i >= right_from else "left", no_wrap=True)
    for row in rows:
        table.add_row(*_plain(row), style=style(row) if style else None)
    return table


def _plain(cells: list[str]) -> list[Text]:
    """Cells as literal text: a key like ``[b]`` or ``sku:new:35`` is not rich markup or an emoji code."""
    return [literal(cell) for cell in cells]


def render_terminal(report: AuditReport, console: Console) -> None:
    rep, tr = report.representation, report.training
    console.print(literal(verdict(report), "bold"), soft_wrap=True)
    console.print(literal(input_line(report)), soft_wrap=True)
    environment = describe(report.input.environment)
    if environment:
        console.print(literal(environment, "yellow"), soft_wrap=True)
    if report.input.degenerate is not None:
        console.print(literal(f"warning: {report.input.degenerate.reason}", "bold yellow"), soft_wrap=True)

    table = Table()
    table.add_column("metric", no_wrap=True)
    table.add_column("value", justify="right", no_wrap=True)
    table.add_column("reading", style="dim")
    for row in metric_rows(report):
        table.add_row(*_plain(list(row[:3])))
    _print_titled(console, "Representation stability", table)
    hist = rep.noise_share_histogram
    console.print(
        Text.assemble(
            "per-dimension noise share, 0 → 1: ", (sparkline(hist.counts), "bold"), f"  counts {hist.counts}"
        ),
        soft_wrap=True,
    )

    if rep.by_frequency:
        headers, rows = by_frequency_table(report)
        _print_titled(console, BY_FREQUENCY_TITLE.format(source=rep.frequency_source), _rich_table(headers, rows))
    if rep.least_stable:
        headers, rows = least_stable_table(report)
        _print_titled(
            console,
            least_stable_title(report, len(rows)),
            _rich_table(headers, rows, right_from=2 if "name" in headers else 1),
        )

    if tr.by_epoch:
        headers, rows = convergence_table(report)
        _print_titled(console, "Training convergence", _rich_table(headers, rows, right_from=0))
    if tr.final_loss_mean is not None:
        console.print(
            literal(
                f"final loss: mean {num(tr.final_loss_mean)}, std {num(tr.final_loss_std)}, "
                f"CV {num(tr.final_loss_cv, 3)}"
            ),
            soft_wrap=True,
        )
    elif report.input.source is not None and not tr.reports_loss:
        console.print(literal(NO_LOSS, "dim"))
    if report.downstream:
        render_downstream(report.downstream, console)
    if report.next_item:
        render_next_item(report.next_item, console)
    print_checks(report.checks, console)  # last: a CI log ends with what failed


def _md_table(headers: list[str], rows: list[list[str]], code_first: bool = True) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "| --- " + "| ---: " * (len(headers) - 1) + "|"]
    for row in rows:
        cells = [md_text(cell) for cell in row]  # a title like "a|b" stays in its cell, "*x*" stays literal
        lines.append("| " + " | ".join([md_code(row[0]) if code_first else cells[0], *cells[1:]]) + " |")
    return lines


def render_markdown(report: AuditReport, key_rows: int | None = None) -> str:
    """The report in Markdown; ``key_rows`` cuts the least-stable list to that many rows, with
    a note (for GITHUB_STEP_SUMMARY's size limit, ``stabcli.reports.summary``)."""
    rep, tr = report.representation, report.training
    lines = [
        "## stabcli audit",
        "",
        f"**{verdict(report)}**",
        "",
        input_line(report, markdown=True),
        "",
        *([f"**{md_text(describe(report.input.environment) or '')}**", ""] if report.input.environment else []),
        *([f"**Warning: {md_text(report.input.degenerate.reason)}**", ""] if report.input.degenerate else []),
        "| metric | value | reading |",
        "| --- | ---: | --- |",
    ]
    lines += [f"| {a} | {b} | {c} |" for a, b, c, _ in metric_rows(report)]
    if rep.by_frequency:
        headers, rows = by_frequency_table(report)
        title = BY_FREQUENCY_TITLE.format(source=rep.frequency_source)
        lines += ["", title + ":", ""] + _md_table(headers, rows, code_first=False)
    if rep.least_stable:
        headers, rows = least_stable_table(report)
        lines += ["", least_stable_title(report, len(rows)) + ":", ""] + _md_table(headers, rows[:key_rows])
        if key_rows is not None and key_rows < len(rows):
            lines += ["", cut_note(key_rows, len(rows))]
    if tr.by_epoch:
        headers, rows = convergence_table(report)
        lines += ["", "Training convergence:", ""] + _md_table(headers, rows, code_first=False)
    if tr.final_loss_mean is not None:
        lines += [
            "",
            f"Final training loss: mean {num(tr.final_loss_mean)}, std {num(tr.final_loss_std)}, "
            f"CV {num(tr.final_loss_cv, 3)}.",
        ]
    elif report.input.source is not None and not tr.reports_loss:
        lines += ["", NO_LOSS.capitalize() + "."]
    if report.downstream:
        ds = report.downstream
        headers, rows = downstream_table(ds)
        lines += ["", "### Downstream fluctuation across runs", ""] + _md_table(headers, rows)
        lines += [""] + [f"- {md_text(note)}" for note in downstream_notes(ds)]
        lines += ["", f"**Recommendation:** {md_text(ds.recommendation.reason)}"]
    if report.next_item:
        headers, rows = next_item_table(report.next_item)
        lines += ["", "### Next-item recommendation across runs", ""] + _md_table(headers, rows)
        lines += [""] + [f"- {md_text(note)}" for note in next_item_notes(report.next_item)]
    lines += md_checks(report.checks)
    return "\n".join(lines) + "\n"


def render_html(
    report: AuditReport, key_frame: Any = None, figures: list[Figure] | None = None, report_json: str | None = None
) -> str:
    """The report as one self-contained HTML page: every table of the terminal view (each
    number of the metric table carrying its JSON path), the figures (``plot_figures``; None:
    matplotlib is missing and the page says so), the per-key table ``key_frame`` (the
    ``--per-key`` columns, least stable first, sortable and searchable) and the JSON text."""
    from stabcli.reports.schema import dumps, to_json

    body = [html.paragraph(input_line(report)), html.paragraph(_sources(report), "note")]
    if report.input.degenerate is not None:
        body.append(html.paragraph(f"Warning: {report.input.degenerate.reason}"))
    body += _html_representation(report, to_json(report))
    training = _html_training(report)
    if training:
        body.append(html.section("Training convergence", *training))
    body += _html_downstream(report)
    if report.checks:
        body.append(html.section("Checks", html.checks_table(report.checks, num)))
    body.append(html.section("Figures", html.figures(figures, PLOTS_INSTALL)))
    if key_frame is not None:
        order = np.argsort(-key_frame["relative_instability"].to_numpy(dtype=float), kind="stable")
        body.append(
            html.section(
                "Every key",
                html.key_table(
                    key_frame, table_id="keys", order=order, fmt=num, what="least stable (relative instability) first"
                ),
            )
        )
    return html.page("stabcli audit", verdict(report), body, report_json or dumps(report), report.stabcli_version)


def _html_representation(report: AuditReport, data: Any) -> list[str]:
    """The metric table (each number with its JSON path in ``data``), the noise-share
    histogram, and the frequency and least-stable-keys tables."""
    rep = report.representation
    metrics: list[list[str | Cell]] = [
        [name, Cell(value, json_number(data, path), path), reading]
        for name, value, reading, path in metric_rows(report)
    ]
    hist = rep.noise_share_histogram
    bins: list[str | Cell] = [
        Cell(f"{count:,}", count, f"representation.noise_share_histogram.counts.{i}")
        for i, count in enumerate(hist.counts)
    ]
    ranges = [f"{low:.1f}–{high:.1f}" for low, high in zip(hist.edges, hist.edges[1:], strict=False)]
    sections = [
        html.section(
            "Representation stability",
            html.table(["metric", "value", "reading"], metrics, reading_column=2),
            html.paragraph(f"Dimensions by their noise share, 0 → 1: {sparkline(hist.counts)}"),
            html.table(["noise share", *ranges], [["dimensions", *bins]]),
        )
    ]
    if rep.by_frequency:
        headers, rows = by_frequency_table(report)
        sections.append(html.section(BY_FREQUENCY_TITLE.format(source=rep.frequency_source), html.table(headers, rows)))
    if rep.least_stable:
        headers, rows = least_stable_table(report)
        sections.append(
            html.section(
                least_stable_title(report, len(rows)),
                html.table(headers, rows, right_from=2 if "name" in headers else 1),
            )
        )
    return sections


def _html_training(report: AuditReport) -> list[str]:
    """The per-epoch table and the final loss (or why there is none)."""
    tr = report.training
    training = []
    if tr.by_epoch:
        headers, rows = convergence_table(report)
        training.append(html.table(headers, rows, right_from=0))
    if tr.final_loss_mean is not None:
        training.append(
            html.paragraph(
                f"Final loss: mean {num(tr.final_loss_mean)}, std {num(tr.final_loss_std)}, "
                f"CV {num(tr.final_loss_cv, 3)}."
            )
        )
    elif report.input.source is not None and not tr.reports_loss:
        training.append(html.paragraph(NO_LOSS.capitalize() + ".", "note"))
    return training


def _html_downstream(report: AuditReport) -> list[str]:
    """The downstream and next-item sections, when the audit has them."""
    sections = []
    if report.downstream:
        ds = report.downstream
        headers, rows = downstream_table(ds)
        chosen = ds.recommendation.variant
        sections.append(
            html.section(
                "Downstream fluctuation across runs",
                html.table(headers, rows, row_class=lambda row: "chosen" if row[0] == chosen else None),
                html.bullets(downstream_notes(ds)),
                html.paragraph(f"Recommendation: {ds.recommendation.reason}"),
            )
        )
    if report.next_item:
        headers, rows = next_item_table(report.next_item)
        sections.append(
            html.section(
                "Next-item recommendation across runs",
                html.table(headers, rows),
                html.bullets(next_item_notes(report.next_item)),
            )
        )
    return sections


def _sources(report: AuditReport) -> str:
    inp = report.input
    where = f"run set {inp.source}: " if inp.source else ""
    return f"{where}{', '.join(inp.run_names)}; seed {inp.seed}"


def plot_figures(report: AuditReport) -> list[Figure]:
    """The figures in the paper's layout (Fig. 1a–1d; with labels the downstream spread),
    as PNG; UsageError without matplotlib."""
    plt = pyplot()
    from matplotlib.ticker import MaxNLocator

    rep, tr = report.representation, report.training
    drawn = []

    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.hist([v for v in rep.variance_per_dim if v is not None], bins=20, color="#4c72b0")  # null: beyond float64
    ax.set(xlabel="mean empirical variance across runs", ylabel="dimensions", title="Per-dimension variance (Fig. 1a)")
    drawn.append(png(fig, "fig1a_variance_per_dim.png"))

    if tr.loss_by_run and tr.reports_loss:
        fig, ax = plt.subplots(figsize=(5.5, 3.5))
        for i, losses in enumerate(tr.loss_by_run):
            points = [(e + 1, v) for e, v in enumerate(losses) if v is not None]
            if points:
                ax.plot(*zip(*points, strict=True), marker=".", alpha=0.7, label=report.input.run_names[i])
        ax.set(xlabel="epoch", ylabel="training loss", title="Loss per run (Fig. 1b)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(fontsize="small", ncol=2 if len(tr.loss_by_run) > 5 else 1)
        drawn.append(png(fig, "fig1b_loss_by_epoch.png"))

    rows = [row for row in tr.by_epoch if row.variance_quantiles is not None]
    if rows:
        drawn.append(png(_fig1c(plt, rows), "fig1c_noise_by_epoch.png"))

    fig, ax = plt.subplots(figsize=(5, 3.5))
    names = ["coordinates", "aligned", "inner products"]
    values = [rep.noise_share, rep.aligned_noise_share, rep.inner_product_noise_share]
    ax.bar(names, values, color=["#c44e52", "#dd8452", "#55a868"])
    ax.axhline(rep.noise_share_independent, color="grey", linestyle="--", linewidth=1)
    ax.text(2.4, rep.noise_share_independent, "pure noise", ha="right", va="bottom", color="grey", fontsize="small")
    ax.set(ylabel="noise share", ylim=(0, 1.05), title="Coordinate vs inner-product noise (Fig. 1d)")
    for x, v in enumerate(values):
        ax.text(x, v + 0.02, pct(v), ha="center")
    drawn.append(png(fig, "fig1d_coordinate_vs_inner_product.png"))

    if rep.by_frequency:
        drawn.append(png(_by_frequency_figure(plt, report), "by_frequency.png"))
    if report.downstream:
        drawn.append(png(downstream_figure(plt, report.downstream), "fig2_downstream_spread.png"))
    return drawn


def write_plots(report: AuditReport, directory: Path) -> list[Path]:
    """PNG figures (``plot_figures``) into ``directory``; returns the files written."""
    return save_figures(plot_figures(report), directory)


def _by_frequency_figure(plt: Any, report: AuditReport) -> Any:
    """Median k-NN overlap and median relative instability per frequency band."""
    rep = report.representation
    bands = rep.by_frequency
    x = np.arange(len(bands))
    fig, ax = plt.subplots(figsize=(max(5, 0.9 * len(bands) + 2), 3.8))
    knn = [np.nan if b.knn_overlap_median is None else b.knn_overlap_median for b in bands]
    ax.plot(x, knn, marker="o", color="#4c72b0", label=f"median k-NN overlap@{rep.knn_k}")
    ax.plot(
        x,
        [b.relative_instability_median for b in bands],
        marker="s",
        color="#c44e52",
        label="median relative instability",
    )
    ax.axhline(rep.knn_chance, color="grey", linestyle=":", linewidth=1, label="k-NN chance")
    ax.set_xticks(x, [f"{b.band}\n({b.keys:,} keys)" for b in bands])
    ax.set(xlabel="frequency band (occurrences in the training corpus)", ylim=(0, 1.05), title="Stability by frequency")
    ax.legend(fontsize="small")
    return fig


def _fig1c(plt: Any, rows: list[EpochRow]) -> Any:
    """The paper's Fig. 1c: the distribution over dimensions of the across-run variance,
    one box per epoch, with the noise share per epoch below."""
    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(max(5, 0.45 * len(rows) + 2), 5.5), sharex=True, gridspec_kw={"height_ratios": [2, 1]}
    )
    boxes = [(r, q) for r in rows if (q := r.variance_quantiles) is not None]
    stats = [
        {
            "label": str(r.epoch),
            "whislo": q.min,
            "q1": q.q25,
            "med": q.median,
            "q3": q.q75,
            "whishi": q.max,
            "mean": r.variance_mean,
        }
        for r, q in boxes
    ]
    positions = [r.epoch for r, _ in boxes]
    top.bxp(stats, positions=positions, showfliers=False, showmeans=True)
    top.set(ylabel="variance per dimension", title="Across-run variance by epoch (Fig. 1c)")
    bottom.plot([r.epoch for r in rows], [r.noise_share for r in rows], marker="o", color="#c44e52")
    bottom.set(xlabel="epoch", ylabel="noise share", ylim=(0, 1))
    return fig
