"""Text that is data (keys, names, paths, labels, tags) in every renderer: never rich markup,
emoji codes or highlighting in the terminal, never Markdown syntax in Markdown.

``sku:new:35`` stays ``sku:new:35`` (rich's emoji codes would print ``sku🆕35``), ``[bold]x[/]``
stays visible, ``:x:`` in a file name stays ``:x:``. Every console stabcli prints through is
made by :func:`plain_console`, and renderers wrap data in :func:`literal` so they stay literal
on a console made elsewhere too.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.text import Text

from stabcli.errors import one_line

if TYPE_CHECKING:
    from stabcli.reports.schema import Check


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


def md_checks(checks: Sequence[Check], number: Callable[[Any], str]) -> list[str]:
    """The ``--check`` results as Markdown lines: a blank line, then a table of check, value
    (``number``) and result; no lines without checks."""
    if not checks:
        return []
    lines = ["", "| check | value | result |", "| --- | ---: | --- |"]
    return lines + [f"| {md_code(c.name)} | {number(c.value)} | {'pass' if c.passed else '**FAIL**'} |" for c in checks]
