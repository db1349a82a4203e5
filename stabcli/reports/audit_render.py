"""Renderers of the audit report (``stabcli.reports.audit_report.AuditReport``): rich terminal view,
Markdown, PNG plots. JSON is ``stabcli.reports.schema.dumps``; every renderer reads the same report.
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
from stabcli.reports.audit_report import AuditReport, EpochRow, PairSpread
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
from stabcli.reports.text import literal, md_code, md_text

_BARS = " ▁▂▃▄▅▆▇█"
NO_LOSS = "the model reports no training loss"


def verdict(report: AuditReport) -> str:
    """One line: e.g. ``coordinates: 91% noise (pure noise: 90%) · … · neighbours: 62% stable``."""
    rep = report.representation
    line = (
        f"coordinates: {_pct(rep.noise_share)} noise ({pure_noise_text(report)}) · "
        f"aligned: {_pct(rep.aligned_noise_share)} noise · "
        f"inner products: {_pct(rep.inner_product_noise_share)} noise · "
        f"neighbours: {_pct(rep.knn_overlap)} stable (chance: {_pct(rep.knn_chance)})"
    )
    transform = featurized_text(report)
    return line + (f" · {transform}" if transform else "")


def pure_noise_text(report: AuditReport) -> str:
    """``pure noise: 90% ± 1.3%; at the pure-noise level`` (± two standard deviations of the
    noise share of randomly rotated runs)."""
    rep = report.representation
    text = f"pure noise: {_pct(rep.noise_share_independent)} ± {_pct(2 * rep.noise_share_independent_std)}"
    return text + ("; at the pure-noise level" if rep.at_pure_noise_level else "")


def range_text(spread: PairSpread, digits: int = 3) -> str:
    """``0.990–0.994``: min–max over run pairs (one number when they agree to the digits shown)."""
    low, high = _num(spread.min, digits), _num(spread.max, digits)
    return f"{low}–{high}" if low != high else low


def featurized_text(report: AuditReport) -> str | None:
    """``featurized: phi M=64, σ=1`` for a run set written by ``stabcli featurize``."""
    block = report.input.featurized
    if not block:
        return None
    dim = block.get("dim")
    what = "aligned only" if dim == 0 else f"phi M={dim}, σ={block.get('sigma')}"
    return f"featurized run set ({what})"


def _pct(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.0%}" if value >= 0.1 or value == 0 else f"{value:.1%}" if value >= 0.001 else f"{value:.2%}"


def _num(value: Any, digits: int = 4) -> str:
    if value is None:
        return "—"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:.{digits}g}"


def metric_rows(report: AuditReport) -> list[tuple[str, str, str, str]]:
    """(metric, value, how to read it, JSON path of the value) rows shared by the terminal,
    Markdown and HTML views; every pairwise measure with its range over run pairs."""
    rep = report.representation
    ratio = rep.inner_to_coordinate_ratio
    spreads = rep.by_pair
    pairs = spreads.cka.pairs
    over = f"run pairs: {{}} ({pairs} pair{'s' if pairs != 1 else ''})"
    return [
        (
            "noise share (coordinates)",
            _pct(rep.noise_share),
            "run-to-run share of coordinate energy; 0 = identical runs; runs turned by random rotations give "
            f"{_pct(rep.noise_share_independent)} ± {_pct(2 * rep.noise_share_independent_std)} (2 std)"
            + ("; at the pure-noise level" if rep.at_pure_noise_level else ""),
            "representation.noise_share",
        ),
        (
            "aligned noise share",
            _pct(rep.aligned_noise_share),
            f"after Procrustes to the consensus ({rep.procrustes_iterations} iterations): noise no rotation explains",
            "representation.aligned_noise_share",
        ),
        (
            "inner-product noise share",
            _pct(rep.inner_product_noise_share),
            f"same share on cosine similarities of {rep.inner_product_pairs:,} key pairs"
            + (f"; {ratio:.3g}× the coordinate share" if ratio is not None else ""),
            "representation.inner_product_noise_share",
        ),
        (
            f"k-NN overlap@{rep.knn_k}",
            _num(rep.knn_overlap, 3),
            f"shared neighbours between runs, {rep.knn_queries:,} queries (chance {rep.knn_chance:.2g}); "
            + over.format(range_text(spreads.knn_overlap)),
            "representation.knn_overlap",
        ),
        (
            "PIP loss",
            _num(rep.pip_loss),
            f"‖H_r H_rᵀ − H_s H_sᵀ‖_F; relative to ‖HHᵀ‖_F: {_num(rep.pip_loss_relative, 3)}; "
            + over.format(range_text(spreads.pip_loss_relative)),
            "representation.pip_loss",
        ),
        (
            "linear CKA",
            _num(rep.cka, 4),
            "1 = same representation up to rotation and scale; " + over.format(range_text(spreads.cka, 4)),
            "representation.cka",
        ),
        (
            "eigenspace overlap",
            _num(rep.eigenspace_overlap, 4),
            "overlap of left singular spaces; 1 = same span; " + over.format(range_text(spreads.eigenspace_overlap, 4)),
            "representation.eigenspace_overlap",
        ),
        (
            "semantic displacement",
            _num(rep.semantic_displacement, 3),
            "mean cosine distance after pairwise Procrustes; " + over.format(range_text(spreads.semantic_displacement)),
            "representation.semantic_displacement",
        ),
        *spectral_rows(report),
    ]


def spread_text(spread: PairSpread | None, digits: int = 4) -> str:
    """``mean ± std`` over run pairs (the mean alone for one pair)."""
    if spread is None or spread.mean is None:
        return "n/a"
    return _num(spread.mean, digits) + ("" if spread.std is None else f" ± {_num(spread.std, 2)}")


def spectral_rows(report: AuditReport) -> list[tuple[str, str, str, str]]:
    """EIS, weighted eigenspace overlap and debiased CKA rows (absent from older reports);
    the JSON path is the mean's."""
    rep = report.representation
    if rep.eis is None:
        return []
    anchor = "the runs' consensus" if rep.eis_anchor == "consensus" else "the --eis-anchor embedding"
    rows = [
        (
            "EIS",
            spread_text(rep.eis),
            f"eigenspace instability vs {anchor} (alpha = {_num(rep.eis_alpha, 3)}); 0 = same span, mean ± std over pairs",
            "representation.eis.mean",
        ),
    ]
    if rep.weighted_eigenspace_overlap is not None:
        rows.append(
            (
                "weighted eigenspace overlap",
                spread_text(rep.weighted_eigenspace_overlap),
                "overlap of singular spaces weighted by the spectrum; 1 = same span",
                "representation.weighted_eigenspace_overlap.mean",
            )
        )
    if rep.cka_debiased is not None:
        rows.append(
            (
                "debiased CKA",
                spread_text(rep.cka_debiased),
                "unbiased HSIC: ≈ 0 for unrelated runs at any n",
                "representation.cka_debiased.mean",
            )
        )
    return rows


def sparkline(counts: list[int]) -> str:
    top = max(counts) or 1
    return "".join(_BARS[round(c / top * (len(_BARS) - 1))] for c in counts)


def input_line(report: AuditReport, markdown: bool = False) -> str:
    inp = report.input
    if markdown:
        return f"{inp.runs} runs × {inp.keys:,} keys × {inp.dim} dims" + (
            f"; {inp.dropped_keys:,} keys not in every run left out" if inp.dropped_keys else ""
        )
    return (
        f"{inp.runs} runs × {inp.keys:,} keys × {inp.dim} dims"
        + (f" ({inp.dropped_keys:,} keys not in every run left out)" if inp.dropped_keys else "")
        + (" · rows L2-normalized" if inp.normalized else "")
    )


LEAST_STABLE_TITLE = "Least stable keys (top {n} of {ranked:,} by k-NN overlap, lowest first{where})"
BY_FREQUENCY_TITLE = "Stability by frequency ({source})"


def least_stable_title(report: AuditReport, n: int) -> str:
    rep = report.representation
    where = f"; frequency ≥ {rep.min_frequency:,}" if rep.min_frequency is not None else ""
    return LEAST_STABLE_TITLE.format(n=n, ranked=rep.least_stable_ranked, where=where)


def least_stable_table(report: AuditReport) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of the least-stable-keys table; name and frequency columns only
    when some key has them (with frequencies, the band and its median k-NN overlap too)."""
    rep = report.representation
    items = rep.least_stable
    named = any(i.name is not None for i in items)
    counted = any(i.frequency is not None for i in items)
    headers = [
        "key",
        *(["name"] if named else []),
        *(["frequency", "band"] if counted else []),
        f"k-NN overlap@{rep.knn_k}",
        *(["band's median k-NN"] if counted else []),
        "relative instability",
        "aligned variance",
    ]
    rows = [
        [
            i.key,
            *([i.name or ""] if named else []),
            *([_num(i.frequency), i.band or "—"] if counted else []),
            _num(i.knn_overlap, 3),
            *([_num(i.peers_knn_overlap_median, 3)] if counted else []),
            _pct(i.relative_instability),
            _num(i.aligned_variance),
        ]
        for i in items
    ]
    return headers, rows


def by_frequency_table(report: AuditReport) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of the stability-by-frequency table, one row per non-empty band."""
    rep = report.representation
    headers = [
        "frequency",
        "keys",
        "median relative instability",
        "aligned noise share",
        f"median k-NN overlap@{rep.knn_k}",
    ]
    rows = [
        [
            b.band,
            f"{b.keys:,}",
            _pct(b.relative_instability_median),
            _pct(b.aligned_noise_share),
            _num(b.knn_overlap_median, 3) + ("" if b.knn_keys == b.keys else f" ({b.knn_keys:,} keys)"),
        ]
        for b in rep.by_frequency
    ]
    return headers, rows


def convergence_table(report: AuditReport) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of the per-epoch table; the loss column only when the model reports
    a loss, the variance columns only with checkpoints."""
    tr = report.training
    with_loss = tr.reports_loss
    with_variance = any(row.variance_mean is not None for row in tr.by_epoch)
    headers = [
        "epoch",
        *(["mean loss"] if with_loss else []),
        "noise share",
        *(["variance mean", "variance per dim (min · median · max)"] if with_variance else []),
    ]
    rows = []
    for row in tr.by_epoch:
        q = row.variance_quantiles
        spread = "—" if q is None else f"{_num(q.min, 3)} · {_num(q.median, 3)} · {_num(q.max, 3)}"
        rows.append(
            [
                str(row.epoch),
                *([_num(row.loss_mean)] if with_loss else []),
                _pct(row.noise_share),
                *([_num(row.variance_mean), spread] if with_variance else []),
            ]
        )
    return headers, rows


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
                f"final loss: mean {_num(tr.final_loss_mean)}, std {_num(tr.final_loss_std)}, "
                f"CV {_num(tr.final_loss_cv, 3)}"
            ),
            soft_wrap=True,
        )
    elif report.input.source is not None and not tr.reports_loss:
        console.print(literal(NO_LOSS, "dim"))
    if report.downstream:
        render_downstream(report.downstream, console)
    if report.next_item:
        render_next_item(report.next_item, console)
    render_checks(report, console)


def render_checks(report: AuditReport, console: Console) -> None:
    """Checks last, failed ones in red, so CI logs end with what failed."""
    for check in sorted(report.checks, key=lambda c: c.passed, reverse=True):
        mark = literal("PASS", "green") if check.passed else literal("FAIL", "bold red")
        console.print(mark + literal(f" {check.name} (value {_num(check.value)})"), soft_wrap=True)


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
            f"Final training loss: mean {_num(tr.final_loss_mean)}, std {_num(tr.final_loss_std)}, "
            f"CV {_num(tr.final_loss_cv, 3)}.",
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
    if report.checks:
        lines += ["", "| check | value | result |", "| --- | ---: | --- |"]
        lines += [
            f"| {md_code(c.name)} | {_num(c.value)} | {'pass' if c.passed else '**FAIL**'} |" for c in report.checks
        ]
    return "\n".join(lines) + "\n"


def render_html(
    report: AuditReport, key_frame: Any = None, figures: list[Figure] | None = None, report_json: str | None = None
) -> str:
    """The report as one self-contained HTML page: every table of the terminal view (each
    number of the metric table carrying its JSON path), the figures (``plot_figures``; None:
    matplotlib is missing and the page says so), the per-key table ``key_frame`` (the
    ``--per-key`` columns, least stable first, sortable and searchable) and the JSON text."""
    from stabcli.reports.schema import dumps, to_json

    rep, tr = report.representation, report.training
    data = to_json(report)
    body = [html.paragraph(input_line(report)), html.paragraph(_sources(report), "note")]
    metrics: list[list[str | Cell]] = [
        [name, Cell(value, _json_number(data, path), path), reading]
        for name, value, reading, path in metric_rows(report)
    ]
    hist = rep.noise_share_histogram
    bins: list[str | Cell] = [
        Cell(f"{count:,}", count, f"representation.noise_share_histogram.counts.{i}")
        for i, count in enumerate(hist.counts)
    ]
    ranges = [f"{low:.1f}–{high:.1f}" for low, high in zip(hist.edges, hist.edges[1:], strict=False)]
    body.append(
        html.section(
            "Representation stability",
            html.table(["metric", "value", "reading"], metrics, reading_column=2),
            html.paragraph(f"Dimensions by their noise share, 0 → 1: {sparkline(hist.counts)}"),
            html.table(["noise share", *ranges], [["dimensions", *bins]]),
        )
    )
    if rep.by_frequency:
        headers, rows = by_frequency_table(report)
        body.append(html.section(BY_FREQUENCY_TITLE.format(source=rep.frequency_source), html.table(headers, rows)))
    if rep.least_stable:
        headers, rows = least_stable_table(report)
        body.append(
            html.section(
                least_stable_title(report, len(rows)),
                html.table(headers, rows, right_from=2 if "name" in headers else 1),
            )
        )
    training = []
    if tr.by_epoch:
        headers, rows = convergence_table(report)
        training.append(html.table(headers, rows, right_from=0))
    if tr.final_loss_mean is not None:
        training.append(
            html.paragraph(
                f"Final loss: mean {_num(tr.final_loss_mean)}, std {_num(tr.final_loss_std)}, "
                f"CV {_num(tr.final_loss_cv, 3)}."
            )
        )
    elif report.input.source is not None and not tr.reports_loss:
        training.append(html.paragraph(NO_LOSS.capitalize() + ".", "note"))
    if training:
        body.append(html.section("Training convergence", *training))
    if report.downstream:
        ds = report.downstream
        headers, rows = downstream_table(ds)
        chosen = ds.recommendation.variant
        body.append(
            html.section(
                "Downstream fluctuation across runs",
                html.table(headers, rows, row_class=lambda row: "chosen" if row[0] == chosen else None),
                html.bullets(downstream_notes(ds)),
                html.paragraph(f"Recommendation: {ds.recommendation.reason}"),
            )
        )
    if report.next_item:
        headers, rows = next_item_table(report.next_item)
        body.append(
            html.section(
                "Next-item recommendation across runs",
                html.table(headers, rows),
                html.bullets(next_item_notes(report.next_item)),
            )
        )
    if report.checks:
        body.append(html.section("Checks", html.checks_table(report.checks, _num)))
    body.append(html.section("Figures", html.figures(figures, PLOTS_INSTALL)))
    if key_frame is not None:
        order = np.argsort(-key_frame["relative_instability"].to_numpy(dtype=float), kind="stable")
        body.append(
            html.section(
                "Every key",
                html.key_table(
                    key_frame, table_id="keys", order=order, fmt=_num, what="least stable (relative instability) first"
                ),
            )
        )
    return html.page("stabcli audit", verdict(report), body, report_json or dumps(report), report.stabcli_version)


def _sources(report: AuditReport) -> str:
    inp = report.input
    where = f"run set {inp.source}: " if inp.source else ""
    return f"{where}{', '.join(inp.run_names)}; seed {inp.seed}"


def _json_number(data: Any, path: str) -> float | None:
    """The number at dotted ``path`` of a report's JSON (no dots inside keys on these paths)."""
    node = data
    for part in path.split("."):
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


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
        ax.text(x, v + 0.02, _pct(v), ha="center")
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
