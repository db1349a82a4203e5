"""Where the command line writes: the stdout and stderr consoles, progress, warnings, the
exit codes, and a report command's output files (all or nothing)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from stabcli.errors import MESSAGE_LIMIT, one_line, shorten
from stabcli.reports.text import literal, plain_console

if TYPE_CHECKING:
    from stabcli.fs.outputs import OutputPlan
    from stabcli.measure.downstream import DownstreamOptions

EXIT_FAILED_CHECK = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for `yes | head -1`

PIPE_WIDTH = 10_000
MIN_WIDTH = 40


def print_line(console: Console, prefix: str, style: str, text: str) -> None:
    """``prefix`` in ``style`` then ``text`` as data (no markup, emoji or highlighting), one line."""
    console.print(literal(prefix, style) + literal(" " + text), soft_wrap=True)


def quiet_broken_pipe() -> None:
    """The reader of stdout went away (``stabcli audit runs | head -1``): stop quietly as
    standard tools do, with no traceback and no Python complaint when stdout is flushed."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout without a descriptor (tests)
        pass
    raise SystemExit(EXIT_BROKEN_PIPE)


class _Console(Console):
    """rich's console, but a closed pipe ends stabcli with ``EXIT_BROKEN_PIPE``, not 1 (the
    code of a failed check)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        quiet_broken_pipe()


def _console(stream: Any, stderr: bool = False) -> Console:
    """A console that honours a valid ``COLUMNS`` (never narrower than ``MIN_WIDTH``: rich
    prints nothing at all at width 0, and tables lose their numbers below that), and that,
    when ``stream`` is not a terminal and ``COLUMNS`` is unset or not a number, never wraps:
    logs and pipes get every table and line at its full width."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit():  # rich's own test; "0" would otherwise mean width 0
        width: int | None = max(int(columns), MIN_WIDTH)
    elif hasattr(stream, "isatty") and stream.isatty():
        width = None  # rich asks the terminal
    else:
        width = PIPE_WIDTH
    return plain_console(_Console, stderr=stderr, width=width)


err = _console(sys.stderr, stderr=True)
out = _console(sys.stdout)


def progress() -> Progress:
    """A transient progress display on stderr, off when stderr is not a terminal."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=not err.is_terminal,
    )


def warn(msg: str) -> None:
    """One ``warning:`` line on stderr."""
    print_line(err, "warning:", "yellow", shorten(one_line(msg), MESSAGE_LIMIT))


def write_json_stdout(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def report_outputs(
    inputs: list[Path],
    downstream: DownstreamOptions | None,
    json_path: Path | None,
    markdown_path: Path | None,
    plots: Path | None,
    per_key: Path | None,
    key_names: Path | None,
    force: bool,
) -> OutputPlan:
    """Every output of an audit or a drift (--json, --markdown, --plots, --per-key,
    GITHUB_STEP_SUMMARY) against every input (``inputs`` with their companion keys files,
    --labels, --key-names)."""
    from stabcli.fs.outputs import OutputPlan, plots_owned, with_companions

    plan = OutputPlan([companion for path in inputs for companion in with_companions(path)], force=force)
    if downstream is not None:
        plan.add_input(downstream.labels)
    if key_names is not None:
        plan.add_input(key_names)
    if per_key:
        plan.add(per_key, "--per-key")
    if json_path:
        plan.add(json_path, "--json")
    if markdown_path:
        plan.add(markdown_path, "--markdown")
    if plots:
        plan.add(plots, "--plots", kind="dir", owned=plots_owned)
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        plan.add(os.environ["GITHUB_STEP_SUMMARY"], "GITHUB_STEP_SUMMARY", kind="append")
    return plan


def write_report_outputs(
    plan: OutputPlan,
    text: str,
    markdown: Callable[[], str],
    json_path: Path | None,
    markdown_path: Path | None,
    plots: Path | None,
    write_plots: Callable[[Path], list[Path]],
    per_key: Path | None,
    frame: Callable[[], Any],
) -> None:
    """Write a report command's outputs (``report_outputs``) all or nothing: the JSON
    ``text``, the Markdown (also appended to GITHUB_STEP_SUMMARY), the figures
    ``write_plots(directory)`` draws and the per-key table ``frame()``; names the figures."""
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    written: list[Path] = []
    with plan:  # all or nothing: every output appears together, or none on any failure
        if json_path:
            plan.write_text(json_path, text)
        rendered = markdown() if markdown_path or summary else ""
        if markdown_path:
            plan.write_text(markdown_path, rendered)
        if summary:
            plan.write_text(summary, rendered)
        if plots:
            written = [plots / path.name for path in write_plots(plan.staging(plots))]
        if per_key:
            from stabcli.inputs.keytable import write_per_key  # pandas (60 MB, a second): only when asked

            write_per_key(frame(), per_key, plan.staging(per_key))
    for path in written:
        err.print(literal(f"wrote {path}"), soft_wrap=True)
