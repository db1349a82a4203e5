"""User-facing errors. The CLI prints their message on one line and exits with code 2."""


class StabcliError(Exception):
    """Base class: something the user can fix (bad input, bad options, bad files)."""


class InputError(StabcliError):
    """An input file is missing, unreadable or malformed. The message names the file."""


class UsageError(StabcliError):
    """Options that do not make sense together, or an invalid option value."""


class RunSetError(StabcliError):
    """A run set on disk is inconsistent, locked, or was made with another configuration."""
