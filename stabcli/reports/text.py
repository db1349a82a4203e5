"""Text that is data (keys, names, paths, labels, tags) in every renderer: never rich markup,
emoji codes or highlighting in the terminal, never Markdown syntax in Markdown.

``sku:new:35`` stays ``sku:new:35`` (rich's emoji codes would print ``sku🆕35``), ``[bold]x[/]``
stays visible, ``:x:`` in a file name stays ``:x:``. Every console stabcli prints through is
made by :func:`plain_console`, and renderers wrap data in :func:`literal` so they stay literal
on a console made elsewhere too.
"""

from __future__ import annotations

import re
from typing import Any

from rich.console import Console
from rich.text import Text

from stabcli.errors import one_line


def plain_console(console_class: type[Console] = Console, **kwargs: Any) -> Console:
    """A rich console (of ``console_class``) that prints strings as they are: no markup, no
    emoji codes, no highlighting (styles are given as ``Text`` styles instead)."""
    return console_class(markup=False, emoji=False, highlight=False, **kwargs)


def literal(text: str, style: str = "") -> Text:
    """``text`` as a rich renderable that is printed as it is, on one line."""
    return Text(one_line(text), style=style)


_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|~&:])")


def md_text(text: str) -> str:
    """``text`` for Markdown prose or a table cell: one line, every character Markdown or
    GitHub would interpret (emphasis, links, HTML, ``|`` cell breaks, ``:emoji:`` codes)
    backslash-escaped."""
    return _MD_SPECIAL.sub(r"\\\1", one_line(text))


def md_code(text: str, cell: bool = True) -> str:
    """``text`` as a Markdown code span: one line, fenced by more backticks than it holds;
    in a table ``cell``, ``|`` escaped (GitHub splits cells before it parses spans)."""
    text = one_line(text)
    if cell:
        text = text.replace("|", "\\|")
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text.strip() else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def pct(value: float | None) -> str:
    """A share as a percentage, with more digits below 10% and 0.1%; ``n/a`` for None."""
    if value is None:
        return "n/a"
    return f"{value:.0%}" if value >= 0.1 or value == 0 else f"{value:.1%}" if value >= 0.001 else f"{value:.2%}"


def num(value: Any, digits: int = 4) -> str:
    """An int with thousands separators, a float to ``digits`` significant digits; ``—`` for None."""
    if value is None:
        return "—"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:.{digits}g}"


def json_number(data: Any, path: str) -> float | None:
    """The number at dotted ``path`` of a report's JSON (no dots inside keys on these paths)."""
    node = data
    for part in path.split("."):
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node
