"""The ``--check`` results as every report command prints them: PASS/FAIL lines on the
terminal (failed ones last, so a CI log ends with what failed) and a Markdown table. The
HTML table is ``html.checks_table``; the checks are evaluated in ``schema``."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console

from stabcli.reports.schema import Check
from stabcli.reports.text import literal, md_code, num


def print_checks(checks: Sequence[Check], console: Console) -> None:
    """One line per check, passed ones first, failed ones in red."""
    for check in sorted(checks, key=lambda c: c.passed, reverse=True):
        mark = literal("PASS", "green") if check.passed else literal("FAIL", "bold red")
        console.print(mark + literal(f" {check.name} (value {num(check.value)})"), soft_wrap=True)


def md_checks(checks: Sequence[Check]) -> list[str]:
    """The Markdown lines of the checks table, after a blank line; none without checks."""
    if not checks:
        return []
    return ["", "| check | value | result |", "| --- | ---: | --- |"] + [
        f"| {md_code(c.name)} | {num(c.value)} | {'pass' if c.passed else '**FAIL**'} |" for c in checks
    ]
