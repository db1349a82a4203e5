"""Renderers of the comparison (``stabcli.commands.compare.CompareReport``): terminal,
Markdown and HTML, from the same rows."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from stabcli.commands.compare import CompareReport, Delta, Side
from stabcli.reports import html
from stabcli.reports.checks import md_checks
from stabcli.reports.html import Cell
from stabcli.reports.layout import print_table
from stabcli.reports.schema import dumps
from stabcli.reports.text import literal, md_text, num, pct

HEADERS = ["measure", "A", "B", "B − A", "spread A", "spread B", "beyond spread"]


def _share(name: str) -> bool:
    return name.endswith("noise_share")


def _value(name: str, value: float | None) -> str:
    return pct(value) if _share(name) else num(value, 4)


def _difference(name: str, delta: float | None) -> str:
    if delta is None:
        return "—"
    if delta == 0:
        return "0"
    return f"{delta * 100:+.2g} pp" if _share(name) else f"{delta:+.3g}"


def _range(name: str, entry: Delta, side: str) -> str:
    spread = entry.spread_a if side == "a" else entry.spread_b
    if spread is None:
        return "n/a"
    return f"{_value(name, spread.min)} – {_value(name, spread.max)}"


def _beyond(entry: Delta) -> str:
    if entry.exceeds_a is None and entry.exceeds_b is None:
        return "n/a"
    sides = [s for s, flag in (("A", entry.exceeds_a), ("B", entry.exceeds_b)) if flag]
    return " and ".join(sides) if sides else "no"


def rows(report: CompareReport) -> list[tuple[str, Delta, list[str]]]:
    """(name, entry, cells under ``HEADERS``) for every measure, in the report's order."""
    return [
        (
            name,
            e,
            [
                e.label,
                _value(name, e.a),
                _value(name, e.b),
                _difference(name, e.delta),
                _range(name, e, "a"),
                _range(name, e, "b"),
                _beyond(e),
            ],
        )
        for name, e in report.compare.items()
    ]


def side_line(label: str, side: Side) -> str:
    what = "run set, audited now" if side.kind == "run set" else "saved audit"
    featurized = side.featurized
    transform = ""
    if featurized:
        dim = featurized.get("dim")
        transform = "; featurized: " + ("aligned only" if dim == 0 else f"phi M={dim}, σ={featurized.get('sigma')}")
    return f"{label}: {side.source} ({what}): {side.runs} runs × {side.keys:,} keys × {side.dim} dims{transform}"


def verdict(report: CompareReport) -> str:
    """One line: how many measures differ beyond the run-pair spreads, or why that cannot be said."""
    entries = list(report.compare.values())
    weighed = [e for e in entries if e.exceeds_a is not None or e.exceeds_b is not None]
    if not weighed:
        return (
            f"{len(entries)} measures compared; no spreads in these audits, so no difference can be weighed "
            "against run-to-run noise (audit with stabcli 0.3 or later)"
        )
    both = sum(bool(e.exceeds_a and e.exceeds_b) for e in weighed)
    one = sum(bool(e.exceeds_a) != bool(e.exceeds_b) for e in weighed)
    return (
        f"{both} of {len(weighed)} measures with spreads differ beyond both sides' spread, {one} beyond one side's"
        + (f"; {len(entries) - len(weighed)} without spreads" if len(entries) > len(weighed) else "")
    )


def render_terminal(report: CompareReport, console: Console) -> None:
    console.print(literal(verdict(report), style="bold"), soft_wrap=True)
    console.print(literal(side_line("A", report.a)), soft_wrap=True)
    console.print(literal(side_line("B", report.b)), soft_wrap=True)
    table = Table()
    for i, header in enumerate(HEADERS):
        table.add_column(header, justify="left" if i == 0 else "right", no_wrap=True)
    for _, entry, cells in rows(report):
        beyond = bool(entry.exceeds_a and entry.exceeds_b)
        table.add_row(*(literal(c) for c in cells), style="bold" if beyond else None)
    print_table(console, table, literal("A vs B", "italic"))
    for check in sorted(report.checks, key=lambda c: c.passed, reverse=True):
        mark = literal("PASS", "green") if check.passed else literal("FAIL", "bold red")
        console.print(mark, literal(f"{check.name} (value {num(check.value)})"), soft_wrap=True)


def render_markdown(report: CompareReport) -> str:
    lines = [
        "## stabcli compare",
        "",
        f"**{md_text(verdict(report))}**",
        "",
        f"- {md_text(side_line('A', report.a))}",
        f"- {md_text(side_line('B', report.b))}",
        "",
        "| " + " | ".join(HEADERS) + " |",
        "| --- " + "| ---: " * (len(HEADERS) - 1) + "|",
    ]
    lines += ["| " + " | ".join(md_text(c) for c in cells) + " |" for _, _, cells in rows(report)]
    lines += md_checks(report.checks)
    return "\n".join(lines) + "\n"


def render_html(report: CompareReport, report_json: str | None = None) -> str:
    """The comparison as one self-contained page; every value cell carries its JSON path."""
    table_rows: list[list[str | Cell]] = []
    for name, entry, cells in rows(report):
        base = f"compare.{name}"
        table_rows.append(
            [
                cells[0],
                Cell(cells[1], entry.a, f"{base}.a"),
                Cell(cells[2], entry.b, f"{base}.b"),
                Cell(cells[3], entry.delta, f"{base}.delta"),
                *cells[4:],
            ]
        )
    body = [
        html.bullets([side_line("A", report.a), side_line("B", report.b)]),
        html.section(
            "A vs B",
            html.table(
                HEADERS,
                table_rows,
                sortable=True,
                table_id="compare",
                row_class=lambda row: "chosen" if row[-1] == "A and B" else None,
            ),
            html.paragraph(
                "B − A exceeds a side's spread when its size is larger than that side's max − min over run pairs "
                "(representation measures) or runs (downstream metrics).",
                "note",
            ),
        ),
    ]
    if report.checks:
        body.append(html.section("Checks", html.checks_table(report.checks, num)))
    return html.page("stabcli compare", verdict(report), body, report_json or dumps(report), report.stabcli_version)
