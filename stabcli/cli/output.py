"""Where the command line writes: the stdout and stderr consoles, progress, warnings, the
exit codes, and a report command's output files (all or nothing)."""

from __future__ import annotations

import os
import sys
import threading
import time
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
        disable=not err.is_terminal or _state["quiet"],
    )


def warn(msg: str) -> None:
    """One ``warning:`` line on stderr."""
    print_line(err, "warning:", "yellow", shorten(one_line(msg), MESSAGE_LIMIT))


def write_json_stdout(text: str) -> None:
    STDOUT.write(text)
    STDOUT.flush()


def report_files(
    json_path: Path | None,
    markdown_path: Path | None,
    plots: Path | None,
    per_key: Path | None,
    force: bool,
    html: Path | None = None,
    mlflow: bool = False,
    mlflow_experiment: str | None = None,
) -> dict[str, Any]:
    """A report command's file options as the entry point's keywords, with the CI step summary
    (``GITHUB_STEP_SUMMARY``, where GitHub Actions shows Markdown) when it is set, the HTML
    page and the MLflow run (``--mlflow``: MLflow's own INFO lines are kept off stderr)."""
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    files: dict[str, Any] = {
        "json": json_path,
        "markdown": markdown_path,
        "plots": plots,
        "per_key": per_key,
        "step_summary": Path(summary) if summary else None,
        "force": force,
    }
    if html is not None:
        files["html"] = html
    if mlflow or mlflow_experiment is not None:
        files.update(mlflow=mlflow, mlflow_experiment=mlflow_experiment, on_logged=info)
        quiet_mlflow_logs()
    return files


def quiet_mlflow_logs() -> None:
    """MLflow configures its loggers on import and prints INFO lines (its database setup);
    keep them off a report's stderr unless ``MLFLOW_LOGGING_LEVEL`` asks for them."""
    import importlib.util

    if os.environ.get("MLFLOW_LOGGING_LEVEL") or importlib.util.find_spec("mlflow") is None:
        return
    import logging

    importlib.import_module("mlflow")
    logging.getLogger("mlflow").setLevel(logging.WARNING)


def wrote(path: Path) -> None:
    """``wrote PATH`` on stderr, for each figure and page a report command writes (not with --quiet)."""
    info(f"wrote {path}")


@contextmanager
def spinner(label: str) -> Iterator[Callable[[str], None] | None]:
    """The ``on_step`` callback of a command's stages (``Stages``): a status line on a
    terminal's stderr, one line per long stage in a log, nothing with --quiet."""
    with Stages(label) as stages:
        yield stages.step


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


# -- quiet and progress -------------------------------------------------------------------


_state = {"quiet": False}


def set_quiet(quiet: bool) -> None:
    """``--quiet``: no progress and no informational lines on stderr for this command."""
    _state["quiet"] = bool(quiet)


def info(text: str) -> None:
    """One informational line on stderr (not with --quiet)."""
    if not _state["quiet"]:
        err.print(literal(text), soft_wrap=True)


def plain_progress() -> bool:
    """Whether progress is told in plain lines: stderr is not a terminal (a CI log, a file)
    and not ``--quiet``. On a terminal, bars and spinners instead."""
    return not err.is_terminal and not _state["quiet"]


STAGE_LINE_SECONDS = 5.0  # a stage quicker than this gets no line in a log (tiny inputs: none at all)


class Stages:
    """A command's stages (``on_step(name)`` of the library): a spinner naming the current
    stage on a terminal; in a log, one line per finished stage that took at least
    ``STAGE_LINE_SECONDS`` (``audit: nearest neighbours done in 12.3 s``); nothing with
    ``--quiet``."""

    def __init__(self, command: str):
        self.command = command
        self.name: str | None = None
        self.started = 0.0
        self._status: Any = None

    def __enter__(self) -> Stages:
        if err.is_terminal and not _state["quiet"]:
            self._status = err.status(self.command, spinner="dots")
            self._status.start()
        return self

    def step(self, name: str) -> None:
        self._finish()
        self.name, self.started = name, time.monotonic()
        if self._status is not None:
            self._status.update(f"{self.command}: {name}")

    def _finish(self) -> None:
        if self.name is None or not plain_progress():
            return
        seconds = time.monotonic() - self.started
        if seconds >= STAGE_LINE_SECONDS:
            info(f"{self.command}: {self.name} done in {seconds:.1f} s")

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._status is not None:
            self._status.stop()
        if exc_type is None:
            self._finish()


class RunLines:
    """``pretrain``'s progress in a log: one line per finished run (``pretrain: run 3 of 10
    finished, 42 s``; a failed one also gets its ``failed:`` line at the end), from the
    library's progress callback; nothing on a terminal (the bars say it) or with ``--quiet``."""

    def __init__(self, command: str):
        self.command, self.seen, self.started = command, -1, time.monotonic()
        self._lock = threading.Lock()  # called from the training loop and from its progress thread

    def __call__(self, done: int, total: int) -> None:
        with self._lock:
            if self.seen < 0:  # the first report counts the runs kept from before
                self.seen = done
                return
            if done > self.seen and plain_progress():
                for n in range(self.seen + 1, done + 1):
                    info(f"{self.command}: run {n} of {total} finished, {time.monotonic() - self.started:.0f} s")
            self.seen = max(self.seen, done)
