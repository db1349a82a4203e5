"""Renderers of the drift report (terminal, Markdown, PNG plots). The command's output files
are checked and written by ``stabcli.fs.outputs.OutputPlan``, as for every command."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from stabcli.environment import describe
from stabcli.reports import html
from stabcli.reports.checks import md_checks, print_checks
from stabcli.reports.drift_report import DriftReport, NoiseSection, PerKey
from stabcli.reports.figures import PLOTS_INSTALL, png, pyplot
from stabcli.reports.figures import save as save_figures
from stabcli.reports.html import Cell, Figure
from stabcli.reports.layout import print_table
from stabcli.reports.schema import dumps, to_json
from stabcli.reports.summary import cut_note
from stabcli.reports.text import json_number, literal, md_code, md_text, num, pct

PLOT_NAMES = ("drift_vs_noise.png", "drift_distribution.png")


MEASURE_WORDS = {"direction": "direction (cosine)", "length": "length (norm)", "distance": "distance"}


def verdict(report: DriftReport) -> str:
    """One line: how many keys moved beyond their noise band, or why that cannot be said."""
    d, noise, inp = report.drift, report.noise, report.input
    if noise is None:
        return (
            f"median drift {num(d.distance_median, 3)} (cosine {num(d.cosine_distance_median, 3)}) · "
            f"k-NN overlap {num(d.knn_overlap, 3)} · no noise band: change cannot be separated from training "
            "noise (add --noise RUNSET)"
        )
    return (
        f"moved: {pct(d.moved_share)} of keys in {MEASURE_WORDS[noise.measure]} ({d.moved_count:,} of "
        f"{inp.keys_compared:,}; {d.expected_false_positives:.3g} expected by chance at alpha {noise.alpha:g}) · "
        f"{d.discoveries:,} at FDR {noise.alpha:g} · drift/noise {noise.drift_to_noise:.3g}× · "
        f"k-NN overlap {num(d.knn_overlap, 3)}"
    )


def global_sentence(report: DriftReport) -> str | None:
    """When the typical key moved more than between any two noise runs: one sentence saying
    the whole embedding moved, by how much, and how many keys moved beyond that."""
    d, noise, inp = report.drift, report.noise, report.input
    if noise is None or not d.global_moved:
        return None
    residual = f", rotation residual {num(inp.alignment_residual, 3)}" if inp.alignment_residual is not None else ""
    return (
        f"The whole embedding moved: the typical key's {noise.measure} changed {noise.global_ratio:.3g}× as much as "
        f"between two noise runs (noise pairs {noise.level_range_low:.3g}–{noise.level_range_high:.3g}); global "
        f"scale ×{num(d.global_scale, 3)}{residual}. {d.moved_beyond_global:,} key(s) moved beyond the global change "
        f"(FDR {noise.alpha:g}; drift.moved_beyond_global)."
    )


def notes(report: DriftReport) -> list[str]:
    """The global sentence and the noise warnings, in that order."""
    sentence = global_sentence(report)
    warnings = [f"warning: {w}" for w in report.noise.warnings] if report.noise is not None else []
    return ([sentence] if sentence else []) + warnings


Row = tuple[str, str, str, str | None]  # measure, value, how to read it, JSON path of the value or None


def summary_rows(report: DriftReport) -> list[Row]:
    """(measure, value, how to read it, JSON path of the value or None) rows shared by the
    terminal, Markdown and HTML views: the change, then the noise band's verdict."""
    return _change_rows(report) + (_noise_rows(report, report.noise) if report.noise is not None else [])


def _change_rows(report: DriftReport) -> list[Row]:
    d, inp = report.drift, report.input
    knn_how = f"{d.knn_keys:,} keys" + (" (seeded sample)" if d.knn_sampled else " (every key)")
    rows: list[Row] = [
        (
            "keys compared / added / removed",
            f"{inp.keys_compared:,} / {inp.keys_added:,} / {inp.keys_removed:,}",
            "keys in both, only in AFTER, only in BEFORE",
            "input.keys_compared",
        ),
        (
            "median distance",
            num(d.distance_median, 4),
            f"‖before − after‖; p90 {num(d.distance_p90, 4)}, p99 {num(d.distance_p99, 4)}",
            "drift.distance_median",
        ),
        (
            "median cosine distance",
            num(d.cosine_distance_median, 4),
            f"1 − cos; p90 {num(d.cosine_distance_p90, 4)}",
            "drift.cosine_distance_median",
        ),
        (
            "median norm change",
            num(d.norm_change_median, 3),
            f"‖after‖ − ‖before‖; relative {num(d.relative_norm_change_median, 3)}",
            "drift.norm_change_median",
        ),
        (
            f"k-NN overlap@{d.knn_k}",
            num(d.knn_overlap, 3),
            f"shared neighbours BEFORE vs AFTER, {knn_how}, chance {d.knn_chance:.2g}",
            "drift.knn_overlap",
        ),
    ]
    if inp.aligned:
        rows.append(
            (
                "alignment residual",
                num(inp.alignment_residual, 3),
                "‖AFTER·Q − BEFORE‖ / ‖BEFORE‖ after Procrustes",
                "input.alignment_residual",
            )
        )
    else:
        rows.append(("alignment", "none", "--no-align: coordinates compared raw", None))
    return rows


def _noise_rows(report: DriftReport, noise: NoiseSection) -> list[Row]:
    d = report.drift
    rows: list[Row] = [
        (
            "median noise",
            num(noise.noise_median, 4),
            f"a key's RMS {noise.measure} change between two noise runs ({noise.runs} runs, {noise.pairs} pairs)",
            "noise.noise_median",
        ),
        (
            "drift / noise",
            f"{noise.drift_to_noise:.3g}×",
            f"median {noise.measure} change over median noise",
            "noise.drift_to_noise",
        ),
        (
            "global ratio",
            f"{noise.global_ratio:.3g}",
            f"this refresh's typical ratio vs a noise pair's; "
            f"level applied {noise.level_factor:.3g} "
            f"(noise pairs {noise.level_range_low:.3g}–{noise.level_range_high:.3g})",
            "noise.global_ratio",
        ),
        (
            "moved",
            f"{d.moved_count:,} ({pct(d.moved_share)})",
            f"p < {noise.alpha:g}; {d.expected_false_positives:.3g} expected by chance",
            "drift.moved_count",
        ),
        ("listed at FDR", f"{d.discoveries:,}", f"Benjamini–Hochberg q ≤ {noise.alpha:g}", "drift.discoveries"),
        (
            "beyond the global change",
            f"{d.moved_beyond_global:,}",
            "discoveries once the typical key's change is divided out"
            + (" (the whole embedding moved)" if d.global_moved else " (equal to FDR: no global move)"),
            "drift.moved_beyond_global",
        ),
    ]
    for name, test in (d.by_measure or {}).items():
        rows.append(
            (
                f"{name} test",
                f"{test.moved_count:,} / {test.discoveries:,}",
                f"moved / at FDR; global ratio {test.global_ratio:.3g} (noise pairs "
                f"{test.level_range_low:.3g}–{test.level_range_high:.3g})"
                + (" · decides moved" if name == noise.measure else ""),
                None,
            )
        )
    rows.append(
        (
            "smallest p",
            f"{noise.smallest_empirical_p:.2g}",
            f"1/(1 + {noise.null_samples:,} null samples): smaller p-values come from the fitted tail",
            "noise.smallest_empirical_p",
        )
    )
    return rows


def _top_headers(report: DriftReport) -> list[str]:
    d = report.drift
    headers = ["key"]
    if any(t.name for t in d.top):
        headers.append("name")
    headers += ["distance", "cosine", "rel. norm"]
    if report.noise is not None:  # the other measures' p-values beside the deciding one's q
        headers += ["noise band", "ratio", "q"]
        headers += [f"{name} p" for name in ("direction", "length") if name != report.noise.measure]
    if any(t.frequency is not None for t in d.top):
        headers.append("frequency")
    headers.append(f"k-NN@{d.knn_k}")
    return headers


def _top_rows(report: DriftReport) -> list[list[str]]:
    headers = _top_headers(report)
    rows = []
    for t in report.drift.top:
        cells = {
            "key": t.key,
            "name": t.name or "",
            "distance": num(t.distance, 3),
            "cosine": num(t.cosine_distance, 3),
            "rel. norm": num(t.relative_norm_change, 2),
            "direction p": num(t.direction_p, 2),
            "length p": num(t.length_p, 2),
            "noise band": num(t.noise_band, 3),
            "ratio": num(t.ratio, 3),
            "q": num(t.q_value, 2),
            "frequency": "—" if t.frequency is None else f"{int(t.frequency):,}",
            f"k-NN@{report.drift.knn_k}": num(t.knn_overlap, 2),
        }
        rows.append([cells[h] for h in headers])
    return rows


def _top_title(report: DriftReport) -> str:
    if report.noise is None:
        return f"Largest changes (top {len(report.drift.top)} by distance; without a noise band some may be noise)"
    d, noise = report.drift, report.noise
    if d.global_moved:
        return (
            f"Moved beyond the global change (top {len(d.top)} of {d.moved_beyond_global:,} at FDR {noise.alpha:g}, "
            f"{noise.measure}; by q then ratio)"
        )
    return f"Moved keys (top {len(d.top)} of {d.discoveries:,} at FDR {noise.alpha:g}, {noise.measure}; by p-value then ratio)"


def downstream_rows(report: DriftReport) -> list[tuple[str, str]]:
    ds = report.downstream
    assert ds is not None, "downstream_rows needs a report with a downstream section"
    label = "accuracy" if ds.metric == "accuracy" else "R²"
    churn = (lambda v: pct(v)) if ds.task == "classification" else (lambda v: num(v, 3) + " RMS")
    rows = [
        (f"BEFORE model on BEFORE ({label})", num(ds.before, 3)),
        (f"refit on AFTER ({label})", num(ds.refit, 3)),
        (f"BEFORE model on raw AFTER ({label})", f"{num(ds.stale_raw, 3)} (drop {num(ds.drop_raw, 3)})"),
    ]
    if ds.stale_aligned is not None:
        rows.append(
            (
                f"BEFORE model on aligned AFTER ({label})",
                f"{num(ds.stale_aligned, 3)} (drop {num(ds.drop_aligned, 3)})",
            )
        )
    rows.append(("prediction churn, refit vs BEFORE", churn(ds.churn_refit)))
    if ds.churn_stale_aligned is not None:
        rows.append(("prediction churn, aligned stale vs BEFORE", churn(ds.churn_stale_aligned)))
    return rows


def render_terminal(report: DriftReport, console: Console) -> None:
    inp = report.input
    console.print(literal(verdict(report), "bold"), soft_wrap=True)
    console.print(
        literal(
            f"{inp.before} → {inp.after}: {inp.keys_compared:,} keys × {inp.dim} dims"
            + (
                f" · noise: {inp.noise} ({inp.noise_runs} runs"
                + (", BEFORE is one of them)" if inp.before_in_noise else ")")
                if inp.noise
                else ""
            )
            + (" · rows matched by position (keyless arrays)" if inp.keyless else "")
        ),
        soft_wrap=True,
    )
    environment = describe(inp.environment)
    if environment:
        console.print(literal(environment, "yellow"), soft_wrap=True)
    for note in notes(report):
        console.print(literal(note, "yellow" if note.startswith("warning") else "bold"), soft_wrap=True)
    table = Table()
    table.add_column("measure", no_wrap=True)
    table.add_column("value", justify="right", no_wrap=True)
    table.add_column("reading", style="dim")
    for row in summary_rows(report):
        table.add_row(*map(literal, row[:3]))
    print_table(console, table, literal("Drift", "italic"))
    if report.drift.top:
        top = Table()
        for header in _top_headers(report):
            top.add_column(header, justify="left" if header in ("key", "name") else "right", no_wrap=True)
        for top_row in _top_rows(report):
            top.add_row(*map(literal, top_row))  # keys and names are data, not markup or emoji codes
        print_table(console, top, literal(_top_title(report), "italic"))
    elif report.noise is not None:
        console.print(literal(f"no key moved beyond its noise band at FDR {report.noise.alpha:g}"))
    if report.downstream is not None:
        ds = report.downstream
        title = (
            f"Downstream: {ds.model} on {Path(ds.labels).name} ({ds.task}, {ds.train:,} train / {ds.test:,} test keys)"
        )
        table = Table()
        table.add_column("model", no_wrap=True)
        table.add_column("value", justify="right", no_wrap=True)
        for name, value in downstream_rows(report):
            table.add_row(literal(name), literal(value))
        print_table(console, table, literal(title, "italic"))
    print_checks(report.checks, console)


def render_markdown(report: DriftReport, key_rows: int | None = None) -> str:
    """The report in Markdown; ``key_rows`` cuts the list of moved keys to that many rows, with
    a note (for GITHUB_STEP_SUMMARY's size limit, ``stabcli.reports.summary``)."""
    inp = report.input
    lines = [
        "## stabcli drift",
        "",
        f"**{verdict(report)}**",
        "",
        f"{md_code(inp.before, cell=False)} → {md_code(inp.after, cell=False)}: {inp.keys_compared:,} keys × {inp.dim} dims"
        + (f"; noise: {md_code(inp.noise, cell=False)} ({inp.noise_runs} runs)" if inp.noise else ""),
        "",
        *([f"**{md_text(describe(inp.environment) or '')}**", ""] if inp.environment else []),
        *[line for note in notes(report) for line in (f"**{md_text(note)}**", "")],
        "| measure | value | reading |",
        "| --- | ---: | --- |",
    ]
    lines += [f"| {md_text(a)} | {md_text(b)} | {md_text(c)} |" for a, b, c, _ in summary_rows(report)]
    if report.drift.top:
        headers = _top_headers(report)
        lines += [
            "",
            _top_title(report) + ":",
            "",
            "| " + " | ".join(headers) + " |",
            "| " + " | ".join("---" if h in ("key", "name") else "---:" for h in headers) + " |",
        ]
        lines += [
            "| " + " | ".join(md_code(c) if i == 0 else md_text(c) for i, c in enumerate(row)) + " |"
            for row in _top_rows(report)[:key_rows]
        ]
        if key_rows is not None and key_rows < len(report.drift.top):
            lines += ["", cut_note(key_rows, len(report.drift.top))]
    if report.downstream is not None:
        lines += ["", "| downstream | value |", "| --- | ---: |"]
        lines += [f"| {md_text(a)} | {md_text(b)} |" for a, b in downstream_rows(report)]
    lines += md_checks(report.checks)
    return "\n".join(lines) + "\n"


def render_html(
    report: DriftReport,
    per_key: PerKey | None = None,
    figures: list[Figure] | None = None,
    report_json: str | None = None,
) -> str:
    """The report as one self-contained HTML page: the terminal view's tables (each number of
    the summary carrying its JSON path), the figures (``plot_figures``; None: matplotlib is
    missing and the page says so), every key's measures (``per_key``: moved keys first,
    sortable and searchable) and the JSON text."""
    inp = report.input
    data = to_json(report)
    body = [
        html.paragraph(
            f"{inp.before} → {inp.after}: {inp.keys_compared:,} keys × {inp.dim} dims"
            + (f"; noise: {inp.noise} ({inp.noise_runs} runs)" if inp.noise else "")
            + ("; rows matched by position (keyless arrays)" if inp.keyless else "")
        ),
        html.paragraph(describe(inp.environment) or "", "note"),
        *[html.paragraph(note, "fail" if note.startswith("warning") else None) for note in notes(report)],
    ]
    rows: list[list[str | Cell]] = [
        [name, Cell(value, json_number(data, path), path) if path else value, reading]
        for name, value, reading, path in summary_rows(report)
    ]
    body.append(html.section("Drift", html.table(["measure", "value", "reading"], rows, reading_column=2)))
    if report.drift.top:
        headers = _top_headers(report)
        body.append(
            html.section(
                _top_title(report),
                html.table(headers, _top_rows(report), right_from=2 if "name" in headers else 1),
            )
        )
    elif report.noise is not None:
        body.append(html.paragraph(f"No key moved beyond its noise band at FDR {report.noise.alpha:g}."))
    if report.downstream is not None:
        ds = report.downstream
        body.append(
            html.section(
                f"Downstream: {ds.model} on {Path(ds.labels).name} ({ds.task}, {ds.train:,} train / {ds.test:,} test keys)",
                html.table(["model", "value"], [list(row) for row in downstream_rows(report)]),
            )
        )
    if report.checks:
        body.append(html.section("Checks", html.checks_table(report.checks, num)))
    body.append(html.section("Figures", html.figures(figures, PLOTS_INSTALL)))
    if per_key is not None:
        frame = per_key.frame()
        if "p_value" in frame:
            order = np.lexsort((-frame["ratio"].to_numpy(dtype=float), frame["p_value"].to_numpy(dtype=float)))
            what = "smallest p-value (then largest ratio) first"
        else:
            order = np.argsort(-frame["distance"].to_numpy(dtype=float), kind="stable")
            what = "largest distance first"
        body.append(html.section("Every key", html.key_table(frame, table_id="keys", order=order, fmt=num, what=what)))
    return html.page("stabcli drift", verdict(report), body, report_json or dumps(report), report.stabcli_version)


def plot_figures(report: DriftReport, per_key: PerKey) -> list[Figure]:
    """Drift against noise per key (log scale, moved keys in red) and the distribution of
    drift and of noise, as PNG; UsageError without matplotlib."""
    plt = pyplot()
    cols = per_key.columns
    measure = report.noise.measure if report.noise is not None else "distance"
    distance = np.asarray(cols["statistic"] if "statistic" in cols else cols["distance"])
    drawn: list[Figure] = []

    floor = max(float(distance[distance > 0].min()) if (distance > 0).any() else 1e-12, 1e-12)
    fig, ax = plt.subplots(figsize=(5.5, 4.2))
    if "noise_scale" in cols and report.noise is not None:
        alpha = report.noise.alpha
        band = np.maximum(np.asarray(cols["noise_band"]), floor)
        moved = np.asarray(cols["moved"], dtype=bool)
        ax.scatter(
            band[~moved], np.maximum(distance[~moved], floor), s=6, alpha=0.5, color="#4c72b0", label="within band"
        )
        ax.scatter(
            band[moved],
            np.maximum(distance[moved], floor),
            s=10,
            alpha=0.8,
            color="#c44e52",
            label=f"moved (p < {alpha:g})",
        )
        lims = [min(band.min(), distance.max(initial=floor)), max(band.max(), distance.max(initial=floor))]
        ax.plot(lims, lims, color="black", lw=0.8, label="drift = noise band")
        ax.set(
            xscale="log",
            yscale="log",
            xlabel=f"noise band ({measure} flagged at alpha)",
            ylabel=f"drift ({measure})",
            title="Drift against each key's noise band",
        )
        ax.legend(fontsize=8)
    else:
        norms = np.maximum(np.asarray(cols["norm_before"]), floor)
        ax.scatter(norms, np.maximum(distance, floor), s=6, alpha=0.5, color="#4c72b0")
        ax.set(
            xscale="log",
            yscale="log",
            xlabel="‖before‖",
            ylabel="drift (distance)",
            title="Drift per key (no noise band: --noise RUNSET)",
        )
    drawn.append(png(fig, PLOT_NAMES[0]))

    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    positive = distance[distance > 0]
    bins = np.geomspace(floor, max(positive.max(initial=floor), floor * 10), 40)
    ax.hist(np.maximum(distance, floor), bins=list(bins), alpha=0.6, color="#c44e52", label="drift BEFORE→AFTER")
    if "noise_scale" in cols:
        ax.hist(
            np.maximum(np.asarray(cols["noise_scale"]), floor),
            bins=list(bins),
            alpha=0.6,
            color="#4c72b0",
            label=f"noise (RMS over noise pairs, {measure})",
        )
    ax.set(xscale="log", xlabel=measure, ylabel="keys", title="Distribution of drift and of noise")
    ax.legend(fontsize=8)
    drawn.append(png(fig, PLOT_NAMES[1]))
    return drawn


def write_plots(report: DriftReport, per_key: PerKey, directory: Path) -> list[Path]:
    """PNG figures (``plot_figures``) into ``directory`` (the output plan's staging
    directory). Returns the files written."""
    return save_figures(plot_figures(report, per_key), directory)
