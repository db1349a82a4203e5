"""The ``stabcli`` command line: the typer app, its commands, help rendering, and the one
place that turns errors and signals into a line on stderr and an exit code.

Each command lives in its own module (``stabcli/cli/<command>.py``) and only parses its
options, calls the library, renders and picks the exit code; the options several commands
share are declared once in ``stabcli/cli/options.py``.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import signal
import sys
import threading
from typing import Any

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup

from stabcli import __version__
from stabcli.cli.audit import HELP as AUDIT_HELP
from stabcli.cli.audit import audit_cmd
from stabcli.cli.compare import compare_cmd
from stabcli.cli.demo import demo_cmd
from stabcli.cli.drift import drift_cmd
from stabcli.cli.featurize import featurize_cmd
from stabcli.cli.options import flag_for
from stabcli.cli.output import (
    EXIT_BAD_INPUT,
    EXIT_BROKEN_PIPE,
    EXIT_FAILED_CHECK,
    EXIT_INTERRUPTED,
    STDOUT,
    err,
    print_line,
    quiet_broken_pipe,
)
from stabcli.cli.pretrain import pretrain_cmd
from stabcli.cli.sweep import sweep_cmd
from stabcli.errors import MESSAGE_LIMIT, Interrupted, OptionError, StabcliError, one_line, shorten

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_BROKEN_PIPE",
    "EXIT_FAILED_CHECK",
    "EXIT_INTERRUPTED",
    "app",
    "error_line",
    "main",
]


def _debug_enabled(ctx: Any) -> bool:
    return bool(ctx.params.get("debug")) or os.environ.get("STABCLI_DEBUG", "") not in ("", "0")


def error_line(exc: StabcliError) -> str:
    """The one line the CLI prints for a library error; option errors name the flag. Never
    longer than ``MESSAGE_LIMIT`` characters, whatever data the message quotes."""
    if isinstance(exc, OptionError):
        return shorten(one_line(f"{flag_for(exc.param)}: {exc.problem}"), MESSAGE_LIMIT)
    return shorten(one_line(str(exc)), MESSAGE_LIMIT)


try:  # typer before 0.2x parses with the click package; later ones vendor click (no click package needed)
    from click import UsageError as _ClickUsageError

    _CLICK_USAGE_ERRORS: tuple[Any, ...] = (_ClickUsageError,)
except ImportError:
    _CLICK_USAGE_ERRORS = ()
# click's UsageError, and the one of the click that typer vendors (BadParameter's base)
_PARSE_ERRORS: tuple[Any, ...] = tuple(
    {*_CLICK_USAGE_ERRORS, *[c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError"]}
)


def _raise_interrupted(signum: int, frame: Any) -> None:
    raise Interrupted(signum)


def _handle_stop_signals() -> dict[int, Any]:
    """SIGTERM and SIGHUP take the Ctrl-C path (cleanup in ``finally:``, one line, 128 + signal)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    previous = {}
    for name in ("SIGTERM", "SIGHUP"):
        signum = getattr(signal, name, None)
        if signum is not None:
            previous[signum] = signal.signal(signum, _raise_interrupted)
    return previous


class _Argument(TyperArgument):
    """An argument shown by its metavar alone: ``CORPUS`` or ``INPUTS...`` in the usage line and
    the help, not typer's ``{corpus}`` and ``<list[Path]>``."""

    def display_type_rich(self, ctx: Any) -> str | None:
        return None

    def _usage_display_name(self) -> str:
        name = self.metavar or (self.name or "").upper()
        name = name if self.required else f"[{name}]"
        return name if self.nargs == 1 or name.endswith("...") else name + "..."


def _readable_params(params: list[Any]) -> None:
    """Help without typer's internal type names: arguments by their name, flags (and --help)
    with no ``<bool>``. Value options declare their own metavar (N, FILE, table|json...)."""
    for param in params:
        if type(param) is TyperArgument:
            param.__class__ = _Argument  # same object, readable rendering
        elif getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""


HELP_WIDTHS = (80, 100, 120, 160, 200, 300)  # tried in order for help written to a pipe or file
HELP_MAX_WIDTH = 1000


def _words(text: str) -> set[str]:
    """The words of rendered help, its box-drawing characters removed."""
    return set(re.sub("[\u2500-\u257f]", " ", text).split())


class _ReadableHelp:
    """Mixed into stabcli's command and group classes: their parameters, and --help, read as above."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _readable_params(self.params)  # type: ignore[attr-defined]

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)  # type: ignore[misc]
        if option is not None:
            _readable_params([option])
        return option

    def format_help(self, ctx: Any, formatter: Any) -> None:
        """Help on a terminal as typer lays it out; into a pipe or a file at the narrowest
        width that cuts nothing, from ``COLUMNS``/``TERMINAL_WIDTH`` when one is set (a CI log
        may set 40: the words are still whole)."""
        if sys.stdout.isatty():
            super().format_help(ctx, formatter)  # type: ignore[misc]
            return
        import typer.rich_utils as rich_help

        def rendered(width: int) -> str:
            rich_help.MAX_WIDTH = width
            buffer = io.StringIO()
            with contextlib.redirect_stdout(buffer):
                super(_ReadableHelp, self).format_help(ctx, formatter)  # type: ignore[misc]
            return buffer.getvalue()

        previous = rich_help.MAX_WIDTH
        try:
            whole = _words(rendered(HELP_MAX_WIDTH))  # every word whole: none cut with "…" or folded
            asked = next(
                (int(v) for v in (os.environ.get(n, "") for n in ("TERMINAL_WIDTH", "COLUMNS")) if v.isdigit()), 0
            )
            widths = ([asked] if asked else []) + [w for w in HELP_WIDTHS if w > asked]
            width = next((w for w in widths if whole <= _words(rendered(w))), HELP_MAX_WIDTH)
            rich_help.MAX_WIDTH = width
            super().format_help(ctx, formatter)  # type: ignore[misc]
        finally:
            rich_help.MAX_WIDTH = previous


class _Command(_ReadableHelp, TyperCommand):
    """Every stabcli command: typer's, with readable arguments and flags in ``--help``."""


class _Group(_ReadableHelp, TyperGroup):
    """Turns StabcliError into one line on stderr and exit 2; Ctrl-C, SIGTERM and SIGHUP into
    one line and exit 128 + signal (130, 143, 129)."""

    def invoke(self, ctx: Any) -> Any:  # typer's vendored click Context
        previous = _handle_stop_signals()
        try:
            try:
                result = super().invoke(ctx)
            except typer.Exit:  # a failed check (exit 1) still has a report to deliver
                STDOUT.flush()
                raise
            STDOUT.flush()  # a full device fails here, as one line, not at interpreter exit
            return result
        except StabcliError as exc:
            if _debug_enabled(ctx):
                raise
            print_line(err, "error:", "bold red", error_line(exc))
            raise typer.Exit(EXIT_BAD_INPUT) from None
        except KeyboardInterrupt as exc:
            signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
            trains = ctx.invoked_subcommand in (
                "pretrain",
                "demo",
                "sweep",
            )  # the commands that keep what they finished
            err.print(
                "interrupted; finished runs are kept" if trains else "interrupted; nothing was written", highlight=False
            )
            raise typer.Exit(128 + int(signum)) from None
        except BrokenPipeError:
            quiet_broken_pipe()
        except _PARSE_ERRORS as exc:  # typer's own parsing (an int that is not one, a missing argument)
            if _debug_enabled(ctx):
                raise
            where = exc.ctx.command_path if exc.ctx else "stabcli"
            message = one_line(exc.format_message().replace("Value error, ", ""))  # pydantic's prefix, inside typer
            print_line(err, "error:", "bold red", f"{shorten(message, MESSAGE_LIMIT)} (see '{where} --help')")
            raise typer.Exit(EXIT_BAD_INPUT) from None
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)


app = typer.Typer(
    cls=_Group,
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="markdown",
    context_settings={"help_option_names": ["-h", "--help"]},
    help="Audit the run-to-run stability of pretrained embeddings.\n\n"
    "Exit codes: 0 ok, 1 a requested check failed, 2 bad usage or bad input, 130 interrupted (Ctrl-C), "
    "143 terminated (SIGTERM), 129 hung up (SIGHUP).",
)


def _version(value: bool) -> None:
    if value:
        print(f"stabcli {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
    debug: bool = typer.Option(False, "--debug", help="Show full tracebacks (also STABCLI_DEBUG=1)."),
) -> None:
    """Audit the run-to-run stability of pretrained embeddings."""


# in this order in --help
app.command("pretrain", cls=_Command)(pretrain_cmd)
app.command("audit", cls=_Command, help=AUDIT_HELP)(audit_cmd)
app.command("featurize", cls=_Command)(featurize_cmd)
app.command("demo", cls=_Command)(demo_cmd)
app.command("drift", cls=_Command)(drift_cmd)
app.command("sweep", cls=_Command)(sweep_cmd)
app.command("compare", cls=_Command)(compare_cmd)


def main() -> None:
    app(prog_name="stabcli")
