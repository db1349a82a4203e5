"""Where the command line writes: the stdout and stderr consoles, progress, warnings, the
exit codes, and a report command's output files (all or nothing)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from stabcli.errors import MESSAGE_LIMIT, one_line, shorten
from stabcli.fs.atomic import cannot_write
from stabcli.reports.text import literal, plain_console

if TYPE_CHECKING:
    pass

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


class _Stdout:
    """``sys.stdout`` (whatever it is at the moment, for tests' captures), except that a write
    that fails for any reason but a closed pipe (``> /dev/full``, a file-size limit) is a
    ``WriteError`` naming stdout: one line and exit 2, never a traceback or exit 1."""

    def write(self, text: str) -> int:
        try:
            return sys.stdout.write(text)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise cannot_write("stdout", exc) from None

    def flush(self) -> None:
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise cannot_write("stdout", exc) from None

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding: rich asks
        return getattr(sys.stdout, name)


STDOUT = _Stdout()


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
    return plain_console(_Console, stderr=stderr, width=width, file=None if stderr else STDOUT)


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
    STDOUT.write(text)
    STDOUT.flush()


def report_files(
    json_path: Path | None, markdown_path: Path | None, plots: Path | None, per_key: Path | None, force: bool
) -> dict[str, Any]:
    """A report command's file options as the entry point's keywords, with the CI step summary
    (``GITHUB_STEP_SUMMARY``, where GitHub Actions shows Markdown) when it is set."""
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    return {
        "json": json_path,
        "markdown": markdown_path,
        "plots": plots,
        "per_key": per_key,
        "step_summary": Path(summary) if summary else None,
        "force": force,
    }


def wrote(path: Path) -> None:
    """``wrote PATH`` on stderr, for each figure a report command writes."""
    err.print(literal(f"wrote {path}"), soft_wrap=True)


@contextmanager
def spinner(label: str) -> Iterator[Callable[[str], None] | None]:
    """A status line on a terminal's stderr while the block runs; yields the ``on_step``
    callback that updates it (None when stderr is not a terminal)."""
    if not err.is_terminal:
        yield None
        return
    with err.status(label, spinner="dots") as status:
        yield lambda step: status.update(f"{label}: {step}")


def render_report(report: Any, fmt: str, render_terminal: Callable[[Any, Console], None]) -> None:
    """The report on stdout (exact JSON, or the terminal view); exit 1 when a check failed."""
    if fmt == "json":
        from stabcli.reports.schema import dumps

        write_json_stdout(dumps(report))
    else:
        render_terminal(report, out)
    if not report.passed:
        import typer

        raise typer.Exit(EXIT_FAILED_CHECK)
