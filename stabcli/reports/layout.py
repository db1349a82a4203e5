"""Tables at any terminal width: whole, or stacked.

A report table is printed as a table only when every key and number column fits at its
widest cell (such cells never wrap or shorten: ``phi:64@0.5`` and ``0.449 (0.012)`` stay
whole) and the prose columns keep at least ``PROSE_MIN`` cells to wrap into; when it fits
only without its borders, it is printed without them (columns two spaces apart). Below
that width it is printed **stacked**: one block per row, its key cells (the first, or the
first ``keys``) as the heading and one ``header: value`` line per other column, printed
whole (a terminal may fold a long line, nothing is cut), and a blank line after the last
block. No column is ever dropped and no number truncated.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

PROSE_MIN = 20  # cells a wrapping (prose) column needs to stay readable


def _text(cell: object) -> str:
    if isinstance(cell, Text):
        return cell.plain
    return str(cell)


def _width(cell: object) -> int:
    return max((Text(line).cell_len for line in _text(cell).splitlines()), default=0)


def needed_width(table: Table, borders: bool = True) -> int:
    """Cells a table needs: key and number columns (``no_wrap``) at their widest cell,
    prose columns at ``PROSE_MIN`` (or their widest cell when narrower), plus padding and
    column separators as rich lays them out (none with ``borders=False``)."""
    need = 0
    for column in table.columns:
        widest = max([_width(column.header), *(_width(c) for c in column._cells)])
        need += widest if column.no_wrap else min(widest, PROSE_MIN)
    left, right = table.padding[3], table.padding[1]
    count = len(table.columns)
    need += count * (left + right)
    if borders and table.box is not None:
        need += count - 1 + (2 if table.show_edge else 0)
    return need


def print_table(console: Console, table: Table, title: str | Text | None = None, keys: int = 1) -> None:
    """``table`` as a table when it fits ``console.width`` (with its borders, or else without
    them), else stacked (module docstring) with its first ``keys`` cells as each block's
    heading. ``title`` (or the table's own) is printed whole on its own line above it."""
    title = title if title is not None else table.title
    table.title = None
    if title:
        console.print(title if isinstance(title, Text) else Text(str(title), style="italic"), soft_wrap=True)
    if needed_width(table) <= console.width:
        console.print(table)
        return
    if needed_width(table, borders=False) <= console.width:
        table.box = None
        console.print(table)
        return
    headers = [_text(c.header) for c in table.columns]
    rows = list(zip(*(column._cells for column in table.columns), strict=True)) if table.columns else []
    keys = max(1, min(keys, len(headers)))
    for row in rows:
        heading = " · ".join(f"{h}: {_text(c)}" if h else _text(c) for h, c in zip(headers[:keys], row, strict=False))
        console.print(Text(heading, style="bold"), soft_wrap=True)
        for header, cell in zip(headers[keys:], row[keys:], strict=True):
            value = " ".join(_text(cell).split("\n"))
            console.print(Text(f"  {header}: {value}" if header else f"  {value}"), soft_wrap=True)
        console.print()
