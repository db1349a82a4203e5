"""The building blocks of stabcli's HTML reports: one self-contained page per report.

A page carries everything it shows: styles and a few lines of script inline, figures as
base64 PNG ``data:`` URIs, and the report's JSON (the very text ``--json`` writes) in a
``<script type="application/json" id="stabcli-report">`` element. Its Content-Security-Policy
forbids any network request, so a page that tried one would show it in the browser console.
Every piece of data (keys, names, paths, messages) goes through ``esc``: a key is text,
never markup. The per-command renderers (``audit_render.render_html``,
``drift_render.render_html``, ``compare``'s) put these blocks together from the same rows
their terminal and Markdown views use.
"""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from stabcli.reports import schema

# per-key rows written into a page: a table of 1M keys would be 200 MB of HTML; the full
# table is the --per-key file
PAGE_KEY_ROWS = 2_000

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'"

_STYLE = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:2em auto;max-width:1100px;
padding:0 1em;color:#1d232a;background:#fff}
h1{font-size:1.5em;margin-bottom:.2em}h2{font-size:1.2em;margin-top:1.8em;border-bottom:1px solid #d8dee4}
.verdict{font-weight:600;font-size:1.05em;background:#f3f6f9;border-left:4px solid #4c72b0;padding:.6em .8em}
table{border-collapse:collapse;margin:.6em 0;font-variant-numeric:tabular-nums}
th,td{padding:.25em .7em;border-bottom:1px solid #e4e8ec;text-align:left;vertical-align:top}
td.num,th.num{text-align:right;white-space:nowrap}th{background:#f6f8fa}
table.sortable th{cursor:pointer;user-select:none}
th[aria-sort=ascending]::after{content:" \\25B2"}th[aria-sort=descending]::after{content:" \\25BC"}
td.reading{color:#57606a}.note{color:#57606a}.fail{color:#b4232a;font-weight:600}.pass{color:#1a7f37}
tr.chosen td{font-weight:600;background:#eef8ee}
figure{display:inline-block;vertical-align:top;max-width:48%;margin:.5em 1% .5em 0}
figure img{width:100%;border:1px solid #e4e8ec}
figcaption{font-size:.85em;color:#57606a}input[type=search]{padding:.3em .5em;width:20em}
code{background:#f3f6f9;padding:0 .2em}footer{margin-top:3em;font-size:.85em;color:#57606a}
"""

# sort a table.sortable by the clicked column (numbers by data-value, text otherwise; empty
# cells last) and filter the rows of a table by the text of an input[data-filter=TABLE-ID]
_SCRIPT = """
(function () {
  "use strict";
  function key(cell) {
    var v = cell.getAttribute("data-value");
    return v === null ? cell.textContent : (v === "" ? null : Number(v));
  }
  function compare(a, b, up) {
    if (a === null || b === null) { return a === b ? 0 : (a === null ? 1 : -1); }
    var c = typeof a === "number" && typeof b === "number" ? a - b : String(a).localeCompare(String(b));
    return up ? c : -c;
  }
  document.querySelectorAll("table.sortable").forEach(function (table) {
    var heads = table.tHead.rows[0].cells;
    Array.prototype.forEach.call(heads, function (th, col) {
      th.addEventListener("click", function () {
        var up = th.getAttribute("aria-sort") !== "ascending";
        Array.prototype.forEach.call(heads, function (h) { h.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", up ? "ascending" : "descending");
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (r, s) { return compare(key(r.cells[col]), key(s.cells[col]), up); });
        rows.forEach(function (row) { body.appendChild(row); });
      });
    });
  });
  document.querySelectorAll("input[data-filter]").forEach(function (input) {
    var table = document.getElementById(input.getAttribute("data-filter"));
    input.addEventListener("input", function () {
      var q = input.value.trim().toLowerCase();
      Array.prototype.forEach.call(table.tBodies[0].rows, function (row) {
        row.hidden = q !== "" && row.textContent.toLowerCase().indexOf(q) < 0;
      });
    });
  });
})();
"""


def esc(text: Any) -> str:
    """``text`` as HTML text or attribute value: ``& < > " '`` escaped."""
    return html.escape(str(text), quote=True)


@dataclass(frozen=True)
class Cell:
    """A table cell: the text shown and, for a number, its exact value (``data-value``, what
    the table sorts by) and the JSON path it shows (``data-path``)."""

    text: str
    value: float | None = None
    path: str | None = None
    numeric: bool = False


def number_value(value: Any) -> str:
    """``data-value`` text of a number: its shortest exact repr; empty when null or not finite."""
    if value is None or isinstance(value, bool):
        return ""
    number = float(value)
    return repr(int(value)) if isinstance(value, int) else (repr(number) if math.isfinite(number) else "")


def _class(css: str | None) -> str:
    return f' class="{css}"' if css else ""


def _cell(cell: str | Cell, tag: str = "td", css: str | None = None) -> str:
    if isinstance(cell, str):
        cell = Cell(cell)
    attrs = []
    classes = [c for c in (css, "num" if cell.numeric or cell.value is not None else None) if c]
    if classes:
        attrs.append(f'class="{" ".join(classes)}"')
    if cell.value is not None or cell.numeric or cell.path is not None:
        attrs.append(f'data-value="{esc(number_value(cell.value))}"')
    if cell.path is not None:
        attrs.append(f'data-path="{esc(cell.path)}"')
    return f"<{tag}{''.join(' ' + a for a in attrs)}>{esc(cell.text)}</{tag}>"


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[str | Cell]],
    *,
    right_from: int = 1,
    sortable: bool = False,
    table_id: str | None = None,
    reading_column: int | None = None,
    row_class: Any = None,
) -> str:
    """An HTML table; columns from ``right_from`` on are right-aligned (numbers).
    ``reading_column`` is dimmed (the "how to read it" text); ``row_class(row)`` names a CSS
    class for a row (``chosen``, ``fail``) or None."""
    head = "".join(
        f'<th scope="col"{_class("num" if i >= right_from and i != reading_column else None)}>{esc(h)}</th>'
        for i, h in enumerate(headers)
    )
    body = []
    for row in rows:
        css = row_class(row) if row_class else None
        cells = "".join(
            _cell(cell, css="reading" if i == reading_column else ("num" if i >= right_from else None))
            for i, cell in enumerate(row)
        )
        body.append(f"<tr{_class(css)}>{cells}</tr>")
    attrs = (f' id="{esc(table_id)}"' if table_id else "") + (' class="sortable"' if sortable else "")
    return f"<table{attrs}><thead><tr>{head}</tr></thead><tbody>\n" + "\n".join(body) + "\n</tbody></table>"


def section(title: str, *parts: str) -> str:
    return f"<section><h2>{esc(title)}</h2>\n" + "\n".join(p for p in parts if p) + "\n</section>"


def paragraph(text: str, css: str | None = None) -> str:
    return f"<p{_class(css)}>{esc(text)}</p>"


def bullets(items: Iterable[str]) -> str:
    return "<ul>" + "".join(f"<li>{esc(item)}</li>" for item in items) + "</ul>"


@dataclass(frozen=True)
class Figure:
    """A drawn figure: the file name ``--plots`` gives it, its title and its PNG bytes."""

    name: str
    title: str
    png: bytes


def figures(drawn: Sequence[Figure] | None, install: str) -> str:
    """The figures as inline PNG images, or the sentence saying why there are none."""
    if drawn is None:
        return paragraph(f"No figures: drawing them needs matplotlib ({install}).", "note")
    return "\n".join(
        f'<figure><img alt="{esc(f.title)}" src="data:image/png;base64,{base64.b64encode(f.png).decode("ascii")}">'
        f"<figcaption>{esc(f.name)}</figcaption></figure>"
        for f in drawn
    )


def checks_table(checks: Sequence[schema.Check], fmt: Any) -> str:
    """The ``--check`` results, failed ones marked."""
    rows = [
        [c.name, Cell(fmt(c.value), c.value, f"checks.{i}.value"), "pass" if c.passed else "FAIL"]
        for i, c in enumerate(checks)
    ]
    return table(
        ["check", "value", "result"], rows, right_from=1, row_class=lambda r: "pass" if r[2] == "pass" else "fail"
    )


def key_table(
    frame: Any,
    *,
    table_id: str,
    order: Any,
    fmt: Any,
    what: str,
    limit: int = PAGE_KEY_ROWS,
) -> str:
    """The per-key table (a pandas DataFrame, the ``--per-key`` file's columns), sortable by
    any column and searchable by text; at most ``limit`` rows, in ``order`` (row positions,
    a sequence or an integer array: the most interesting first), with a sentence saying which rows are shown."""
    import pandas as pd

    columns = [c for c in frame.columns if not frame[c].isna().all()]  # a column without any value says nothing
    total = len(frame)
    shown = list(order[:limit])
    numeric = {c: pd.api.types.is_numeric_dtype(frame[c]) and not pd.api.types.is_bool_dtype(frame[c]) for c in columns}
    integer = {c: pd.api.types.is_integer_dtype(frame[c]) for c in columns}
    data = {c: frame[c].to_numpy(dtype=object) for c in columns}
    rows = []
    for i in shown:
        row: list[str | Cell] = []
        for c in columns:
            value = data[c][i]
            missing = value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))
            if numeric[c]:
                number = None if missing else (int(value) if integer[c] else float(value))
                row.append(Cell("" if number is None else fmt(number), number, numeric=True))
            else:
                row.append(Cell("" if missing else str(value)))
        rows.append(row)
    first_numeric = next((i for i, c in enumerate(columns) if numeric[c]), len(columns))
    note = (
        f"All {total:,} keys, {what}."
        if len(shown) == total
        else f"The first {len(shown):,} of {total:,} keys, {what}; every key is in the --per-key file."
    )
    search = (
        f'<p><label>Filter: <input type="search" data-filter="{esc(table_id)}" '
        f'placeholder="key or name" aria-label="filter the keys"></label> '
        f'<span class="note">{esc(note)} Click a column header to sort.</span></p>'
    )
    return search + "\n" + table(columns, rows, right_from=first_numeric, sortable=True, table_id=table_id)


def page(title: str, verdict: str, body: Sequence[str], report_json: str, version: str) -> str:
    """The whole document: head with styles and a no-network policy, title, verdict, the
    sections, the report's JSON text and the script."""
    data = report_json.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<link rel="icon" href="data:,">\n'
        f"<title>{esc(title)}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n"
        f"<h1>{esc(title)}</h1>\n"
        f'<p class="verdict">{esc(verdict)}</p>\n' + "\n".join(p for p in body if p) + "\n"
        f"<footer>stabcli {esc(version)}. This page is self-contained: the report's JSON is embedded in it "
        "(element <code>stabcli-report</code>).</footer>\n"
        f'<script type="application/json" id="stabcli-report">{data}</script>\n'
        f"<script>{_SCRIPT}</script>\n</body>\n</html>\n"
    )
