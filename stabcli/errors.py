"""User-facing errors. The CLI prints their message on one line and exits with code 2.

Every class also subclasses ``ValueError`` (scikit-learn's convention), so library users
and scikit-learn pipelines catch them where they catch bad parameter values.
"""

from __future__ import annotations


class StabcliError(ValueError):
    """Base class: something the user can fix (bad input, bad options, bad files)."""


class InputError(StabcliError):
    """An input file is missing, unreadable or malformed. The message names the file."""


class UsageError(StabcliError):
    """Options that do not make sense together, or an invalid option value."""


class OptionError(UsageError):
    """One option has an invalid value. ``param`` is the library's parameter name
    (``knn_k``); the CLI shows it as its flag (``--knn-k``)."""

    def __init__(self, param: str, problem: str):
        super().__init__(f"{param}: {problem}")
        self.param = param
        self.problem = problem


class RunSetError(StabcliError):
    """A run set on disk is inconsistent, locked, or was made with another configuration."""


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP turned into the Ctrl-C path, so every ``finally:`` cleans up; the
    CLI exits with 128 + ``signum``."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum
