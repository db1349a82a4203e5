"""User-facing errors. The CLI prints their message on one line and exits with code 2.

Every class also subclasses ``ValueError`` (scikit-learn's convention), so library users
and scikit-learn pipelines catch them where they catch bad parameter values.
"""

from __future__ import annotations

# the longest piece of data (a label, a class name, a key, a line of a file) a message quotes
QUOTE_LIMIT = 200
# the longest message the CLI prints: paths can be long, but never megabytes of data
MESSAGE_LIMIT = 2000


def one_line(text: str) -> str:
    """``text`` with every character that would break or hide part of the line (newlines,
    carriage returns, escape sequences, invisible format marks) written as its escape
    (``\\n``, ``\\x1b``, ``\\u200f``): a path or key holding one stays one visible line."""
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def shorten(text: str, limit: int = QUOTE_LIMIT) -> str:
    """``text`` cut in the middle to at most about ``limit`` characters, saying how much was left
    out: data quoted in a message (a 200 MB label, a 1 MB class name) stays readable."""
    if len(text) <= limit:
        return text
    head = max(limit * 2 // 3, 1)
    tail = max(limit - head, 0)
    return f"{text[:head]}…[{len(text) - head - tail:,} characters]…{text[len(text) - tail :] if tail else ''}"


def quoted(text: str, limit: int = QUOTE_LIMIT) -> str:
    """Data for a message: one line, shortened to about ``limit`` characters."""
    return shorten(one_line(text), limit)


def quote(value: object, limit: int = QUOTE_LIMIT) -> str:
    """``repr(value)`` for a message, shortened to about ``limit`` characters: how every
    message quotes a user's value (a label, a key, a class name, an option value), so a
    300,000-character label is never copied whole into an error or a warning."""
    return repr(shorten(value, limit)) if isinstance(value, str) else shorten(one_line(repr(value)), limit)


class StabcliError(ValueError):
    """Base class: something the user can fix (bad input, bad options, bad files).

    The message is capped at ``MESSAGE_LIMIT`` characters (cut in the middle, saying how much
    was left out), for library callers as for the command line, whatever data it quotes."""

    def __init__(self, *args: object):
        if args and isinstance(args[0], str):
            args = (shorten(args[0], MESSAGE_LIMIT), *args[1:])
        super().__init__(*args)


class InputError(StabcliError):
    """An input file is missing, unreadable or malformed. The message names the file."""


class UsageError(StabcliError):
    """Options that do not make sense together, or an invalid option value."""


class OptionError(UsageError):
    """One option has an invalid value. ``param`` is the library's parameter name
    (``knn_k``); the CLI shows it as its flag (``--knn-k``)."""

    def __init__(self, param: str, problem: str):
        # room for "param: " and shorten's own marker, so the message is not cut a second time
        # (which would miscount what was left out)
        self.problem = shorten(problem, MESSAGE_LIMIT - len(param) - 60)
        super().__init__(f"{param}: {self.problem}")
        self.param = param


class WriteError(StabcliError):
    """An output could not be written (disk full, file-size limit, read-only file system,
    stdout on a full device, an output another command published first). The message names
    the output; the CLI exits 2, never 1 (the code of a failed ``--check``)."""


class RunSetError(StabcliError):
    """A run set on disk is inconsistent, locked, or was made with another configuration."""


class StabcliWarning(UserWarning):
    """What the library warns about (a dropped class, keys matched by position...) when the
    caller gives no ``on_warning`` callback; the CLI prints these as ``warning:`` lines."""


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP turned into the Ctrl-C path, so every ``finally:`` cleans up; the
    CLI exits with 128 + ``signum``."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum
