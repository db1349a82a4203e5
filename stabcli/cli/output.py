"""Where the command line writes: the stdout and stderr consoles, progress, warnings, the
exit codes, and a report command's output files (all or nothing)."""

from __future__ import annotations

import importlib
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from stabcli.errors import MESSAGE_LIMIT, one_line, shorten
from stabcli.fs.atomic import cannot_write
from stabcli.reports.text import literal, plain_console

if TYPE_CHECKING:
    from stabcli.fs.outputs import OutputPlan
    from stabcli.measure.downstream import DownstreamOptions
    from stabcli.reports.html import Figure
    from stabcli.reports.tracking import Tracker

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


def report_outputs(
    inputs: list[Path],
    downstream: DownstreamOptions | None,
    json_path: Path | None,
    markdown_path: Path | None,
    plots: Path | None,
    per_key: Path | None,
    key_names: Path | None,
    force: bool,
    html_path: Path | None = None,
) -> OutputPlan:
    """Every output of an audit or a drift (--json, --markdown, --html, --plots, --per-key,
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
    if html_path:
        plan.add(html_path, "--html")
    if plots:
        plan.add(plots, "--plots", kind="dir", owned=plots_owned)
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        plan.add(os.environ["GITHUB_STEP_SUMMARY"], "GITHUB_STEP_SUMMARY", kind="append")
    return plan


class Renderings:
    """A finished report's renderings, each made once and only when some output needs it:
    the JSON ``text``, ``markdown(key_rows)`` (per-key lists cut to ``key_rows`` rows, None:
    all of them), the figures, the per-key table and the HTML page built from them."""

    def __init__(
        self,
        text: str,
        markdown: Callable[[int | None], str],
        draw: Callable[[], list[Figure]],
        frame: Callable[[], Any],
        page: Callable[[list[Figure] | None, Any], str],
        key_rows: int,
    ):
        self.text, self._markdown, self._draw, self._frame, self._page = text, markdown, draw, frame, page
        self.key_rows = key_rows
        self._cache: dict[str, Any] = {}

    def _once(self, name: str, make: Callable[[], Any]) -> Any:
        if name not in self._cache:
            self._cache[name] = make()
        return self._cache[name]

    def markdown(self, key_rows: int | None = None) -> str:
        return (
            self._markdown(key_rows) if key_rows is not None else self._once("markdown", lambda: self._markdown(None))
        )

    def figures(self) -> list[Figure] | None:
        """The figures; None without matplotlib (the HTML page then says so)."""
        from stabcli.reports.figures import available

        return self._once("figures", lambda: self._draw() if available() else None)

    def frame(self) -> Any:
        return self._once("frame", self._frame)

    def page(self) -> str:
        return self._once("page", lambda: self._page(self.figures(), self.frame()))


def step_summary(path: str, renderings: Renderings) -> str | None:
    """The Markdown to append to GITHUB_STEP_SUMMARY ``path``, cut to fit GitHub's 1 MiB per
    step with what the file holds already; None (with a warning) when nothing fits."""
    from stabcli.reports.summary import STEP_SUMMARY_LIMIT, bounded

    try:
        used = os.path.getsize(path) if os.path.isfile(path) else 0
    except OSError:
        used = 0
    text = bounded(renderings.markdown, renderings.key_rows, used)
    if text is None:
        warn(
            f"GITHUB_STEP_SUMMARY {path} holds {used:,} bytes; with this report it would pass GitHub's "
            f"{STEP_SUMMARY_LIMIT:,}-byte limit for a step, so the report is not appended to it"
        )
    return text


def write_report_outputs(
    plan: OutputPlan,
    renderings: Renderings,
    json_path: Path | None,
    markdown_path: Path | None,
    plots: Path | None,
    per_key: Path | None,
    html_path: Path | None = None,
) -> None:
    """Write a report command's outputs (``report_outputs``) all or nothing: the JSON, the
    Markdown (also appended to GITHUB_STEP_SUMMARY, within GitHub's size limit), the HTML
    page, the figures and the per-key table; names the figures."""
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    written: list[Path] = []
    with plan:  # all or nothing: every output appears together, or none on any failure
        if json_path:
            plan.write_text(json_path, renderings.text)
        if markdown_path:
            plan.write_text(markdown_path, renderings.markdown())
        if summary and (bounded := step_summary(summary, renderings)) is not None:
            plan.write_text(summary, bounded)
        if html_path:
            plan.write_text(html_path, renderings.page())
        if plots:
            from stabcli.reports.figures import save

            written = [plots / path.name for path in save(renderings.figures() or [], plan.staging(plots))]
        if per_key:
            from stabcli.inputs.keytable import write_per_key  # pandas (60 MB, a second): only when asked

            write_per_key(renderings.frame(), per_key, plan.staging(per_key))
    for path in written:
        info(f"wrote {path}")
    if html_path:
        info(f"wrote {html_path}")


def publish(
    plan: OutputPlan,
    renderings: Renderings,
    *,
    command: str,
    fmt: str,
    terminal: Callable[[], None],
    json_path: Path | None,
    markdown_path: Path | None,
    html_path: Path | None,
    plots: Path | None = None,
    per_key: Path | None = None,
    tracker: Tracker | None = None,
    params: dict[str, Any] | None = None,
) -> None:
    """The end of every report command: write its outputs (all or nothing), log them to
    MLflow (``tracker``), then the report on stdout: the JSON (``--format json``) or
    ``terminal()``."""
    write_report_outputs(plan, renderings, json_path, markdown_path, plots, per_key, html_path)
    if tracker is not None:
        log_report(tracker, command, params or {}, renderings)
    if fmt == "json":
        write_json_stdout(renderings.text)
    else:
        terminal()


def open_tracker(mlflow: bool, experiment: str | None) -> Tracker | None:
    """The MLflow experiment to log into (``--mlflow``), opened before any work so that a
    missing extra or a store MLflow refuses is one error line first; None without ``--mlflow``."""
    if experiment is not None and not mlflow:
        from stabcli.errors import UsageError

        raise UsageError("--mlflow-experiment only applies with --mlflow")
    if not mlflow:
        return None
    import logging

    from stabcli.reports.tracking import Tracker, require_mlflow

    require_mlflow()
    importlib.import_module("mlflow")  # MLflow configures its loggers on import: quiet them after

    if not os.environ.get("MLFLOW_LOGGING_LEVEL"):  # MLflow's INFO lines (database setup) are noise in a report
        logging.getLogger("mlflow").setLevel(logging.WARNING)
    return Tracker(experiment)


def log_report(tracker: Tracker, command: str, options: dict[str, Any], renderings: Renderings) -> None:
    """Log a report command's run: its options as params, every number of the report as a
    metric, and the JSON, Markdown, HTML, figures and per-key table as artifacts."""
    import json

    from stabcli.inputs.keytable import write_per_key
    from stabcli.reports.tracking import RunRecord, params_of, report_metrics, report_tags

    data = json.loads(renderings.text)
    artifacts: dict[str, bytes | str] = {
        f"{command}.json": renderings.text,
        f"{command}.md": renderings.markdown(),
        f"{command}.html": renderings.page(),
    }
    for figure in renderings.figures() or []:
        artifacts[f"plots/{figure.name}"] = figure.png
    frame = renderings.frame()
    writers = (
        {} if frame is None else {f"{command}-per-key.csv": lambda path: write_per_key(frame, Path(path.name), path)}
    )
    run = tracker.log(
        RunRecord(
            name=f"stabcli {command}",
            params=params_of(options),
            metrics=list(report_metrics(data)),
            tags={"stabcli.command": command, **report_tags(data)},
            artifacts=artifacts,
            writers=writers,
        )
    )
    info(f"logged to MLflow: run {run.run_id} in experiment {tracker.experiment!r} at {tracker.tracking_uri}")


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
