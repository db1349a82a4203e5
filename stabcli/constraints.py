"""Each option's type and range, declared once per options type.

An options dataclass (``AuditOptions``, ``DriftOptions``, ``FeaturizeOptions``,
``TrainConfig``, ...) declares ``parameter_constraints``, a dict from field name to a
:class:`Constraint`, in the spirit of scikit-learn's ``_parameter_constraints``. One
validator, :func:`validate_params`, reads the table when the dataclass is built; the
command line reads the same table for the ranges and choices its ``--help`` shows
(:func:`describe`), and leaves the checking to the library, so a bad value gets one message
whichever command or API call it came through (``tests/test_constraints.py`` walks every
constraint and every command that has its flag).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any

from stabcli.errors import OptionError, quote


@dataclass(frozen=True)
class Constraint:
    """One option's type (``int``, ``float``, ``str``) and range or choices.

    ``low``/``high`` bound numbers (inclusive unless ``open_low``/``open_high``); ``choices``
    lists the allowed strings; ``optional`` allows None (the default meaning "chosen for
    you"); ``requires`` names the flag without which the option does not apply (checked by
    the command, declared here so help and tests can read it).
    """

    kind: type
    low: float | None = None
    high: float | None = None
    open_low: bool = False
    open_high: bool = False
    choices: tuple[str, ...] | None = None
    optional: bool = False
    requires: str | None = None

    def problem(self, value: Any) -> str | None:
        """What is wrong with ``value`` (one clause, naming the value), or None when it fits."""
        if value is None:
            return None if self.optional else f"expected {self._kind_name()}, got None"
        if self.choices is not None:
            if value not in self.choices:
                return f"{shown(value)} is not one of {', '.join(self.choices)}"
            return None
        if self.kind is int and (isinstance(value, bool) or not isinstance(value, Integral)):
            return f"expected an integer, got {shown(value)}"
        if self.kind is float and (isinstance(value, bool) or not isinstance(value, Real)):
            return f"expected a number, got {shown(value)}"
        if self.kind is float and not math.isfinite(float(value)):
            return f"{self._range()}, got {shown(value)}"
        too_low = self.low is not None and (value <= self.low if self.open_low else value < self.low)
        too_high = self.high is not None and (value >= self.high if self.open_high else value > self.high)
        if too_low or too_high:
            return f"{self._range()}, got {shown(value)}"
        return None

    def _kind_name(self) -> str:
        return {int: "an integer", float: "a number"}.get(self.kind, "a string")

    def _range(self) -> str:
        low, high = _number(self.low), _number(self.high)
        if self.low is not None and self.high is not None:
            if self.open_low and self.open_high:
                return f"must be strictly between {low} and {high}"
            return f"must be between {low} and {high}"
        if self.low is not None:
            return f"must be greater than {low}" if self.open_low else f"must be at least {low}"
        if self.high is not None:
            return f"must be less than {high}" if self.open_high else f"must be at most {high}"
        return "must be finite"

    def describe(self) -> str:
        """The range or choices as ``--help`` shows them: ``x>=1``, ``0<x<1``, ``a|b``."""
        if self.choices is not None:
            return "|".join(self.choices)
        parts = []
        if self.low is not None:
            parts.append(f"{_number(self.low)}{'<' if self.open_low else '<='}")
        parts.append("x")
        if self.high is not None:
            parts.append(f"{'<' if self.open_high else '<='}{_number(self.high)}")
        if len(parts) == 2 and self.low is not None:  # x>=1 reads better than 1<=x
            return f"x{'>' if self.open_low else '>='}{_number(self.low)}"
        return "".join(parts)


def _number(value: float | None) -> str:
    if value is None:
        return ""
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else repr(float(value))


def shown(value: Any) -> str:
    """A value as an error message quotes it: numbers as the command line reads them (``2``
    and ``2.0`` alike), anything else as its repr."""
    if isinstance(value, bool) or not isinstance(value, Real):
        return quote(value)
    if isinstance(value, Integral):
        return str(int(value))
    number = float(value)
    if math.isfinite(number) and number.is_integer() and abs(number) < 1e15:
        return str(int(number))
    return repr(number)


def constraints_of(cls: type) -> dict[str, Constraint]:
    """The constraint table of an options type (empty when it declares none)."""
    table: dict[str, Constraint] = getattr(cls, "parameter_constraints", {})
    return table


def validate_params(options: Any) -> None:
    """``OptionError`` naming the first field of ``options`` that breaks its type's table."""
    for name, constraint in constraints_of(type(options)).items():
        problem = constraint.problem(getattr(options, name))
        if problem is not None:
            raise OptionError(name, problem)


def ranged(help: str, constraint: Constraint) -> str:
    """``help`` followed by the declared range, as ``--help`` shows it: ``... [x>=1]``."""
    return f"{help} [{constraint.describe()}]"


# ------------------------------------------------------------------ the tables
# The options types import their table from here (this module imports nothing heavy, so the
# command line reads the same tables for --help without importing the numerics).

SEED_MAX = 2**32 - 1  # numpy's and scikit-learn's seed range
# shared by several options types: one declaration each
KNN_K = Constraint(int, low=1)
TOP = Constraint(int, low=0)
SEED = Constraint(int, low=0)
REFERENCE = Constraint(int, low=0)

AUDIT_OPTIONS = {
    "pairs": Constraint(int, low=1),
    "knn_k": KNN_K,
    "knn_queries": Constraint(int, low=1, optional=True),
    "seed": SEED,
    "top": TOP,
    "min_frequency": Constraint(int, low=1, optional=True),
    "eis_alpha": Constraint(float, low=0, high=100),
}
DRIFT_OPTIONS = {
    "alpha": Constraint(float, low=0, high=1, open_low=True, open_high=True),
    "knn_k": KNN_K,
    "knn_queries": Constraint(int, low=1),
    "top": TOP,
    "seed": SEED,
    "reference": REFERENCE,
    "measure": Constraint(str, choices=("direction", "length", "distance")),
}
DOWNSTREAM_OPTIONS = {
    "test_size": Constraint(float, low=0, high=1, open_low=True, open_high=True, requires="--labels"),
    "split_seed": Constraint(int, low=0, high=SEED_MAX, requires="--labels"),
    "seed": Constraint(int, low=0, high=SEED_MAX),
    "reference": REFERENCE,
    "jobs": Constraint(int, low=1, optional=True),
    "min_class_size": Constraint(int, low=1, requires="--labels"),
    "prefer": Constraint(str, choices=("stability", "balanced", "accuracy"), requires="--labels"),
    "top": TOP,
}
FEATURIZE_OPTIONS = {
    "sigma": Constraint(float, low=0, open_low=True),
    "seed": SEED,
    "reference": REFERENCE,
    "chunk_rows": Constraint(int, low=1, optional=True),
}
NEXT_ITEM_OPTIONS = {
    "users": Constraint(int, low=0, requires="--interactions"),
    "seed": Constraint(int, low=0, high=SEED_MAX),
    "phi_seed": Constraint(int, low=0, high=SEED_MAX),
    "reference": REFERENCE,
    "rbo_p": Constraint(float, low=0, high=1, open_low=True, open_high=True),
    "block_bytes": Constraint(int, low=1),
}
TRAIN_CONFIG = {
    "dim": Constraint(int, low=1),
    "window": Constraint(int, low=1),
    "epochs": Constraint(int, low=1),
    "min_count": Constraint(int, low=1),
    "negative": Constraint(int, low=0),
}
