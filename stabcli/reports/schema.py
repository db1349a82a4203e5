"""Typed report sections and their one conversion to JSON.

A command's report is a tree of frozen dataclasses. Each field declares its meaning with
``doc(meaning)``; from those types this module derives, without running anything:

* ``to_json(report)``: the JSON value (the only place a report becomes JSON). Non-finite
  floats become ``null``: JSON output never contains ``NaN`` or ``Infinity``.
* ``check_path(Report, "representation.knn_overlap")``: whether a ``--check`` path names a
  number in the schema, so a typo fails before any computation.
* ``key_rows(Report)`` / ``markdown_table(Report)``: the JSON reference in ``docs/json.md``.
* ``validate_checks`` / ``evaluate_checks``: the ``--check 'PATH OP VALUE'`` gates of every
  command (audit, drift), parsed and resolved against the report type before any work and
  evaluated on the finished report, into ``Check`` results.

Field types understood: dataclasses (a JSON object), ``list[T]`` (path part ``N``, an
index), ``dict[str, T]`` (path part ``NAME``, any key, dots allowed), ``T | None``,
``float``, ``int``, ``str``, ``bool`` and ``Any`` (free-form; checked only on the value).
"""

from __future__ import annotations

import json
import math
import operator
import re
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import MISSING, Field, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

import numpy as np

from stabcli.errors import UsageError, quote


def doc(
    meaning: str,
    *,
    default: Any = MISSING,
    default_factory: Any = MISSING,
    when: Callable[[Any], bool] | None = None,
    json: bool = True,
) -> Any:
    """A report field with its documented meaning.

    ``when(section)`` false leaves the key out of that section's JSON (e.g. regression
    metrics in a classification result); ``json=False`` never writes it (internal state).
    """
    metadata = {"doc": meaning, "when": when, "json": json}
    if default_factory is not MISSING:
        return field(default_factory=default_factory, metadata=metadata)
    return field(default=default, metadata=metadata)


# ------------------------------------------------------------------ values → JSON


def to_json(value: Any) -> Any:
    """The JSON value of a report (or any part of it): plain dicts, lists, str, int, float,
    bool and None; NaN and ±inf become None."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in fields(value) if _written(f, value)}
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [to_json(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, Path):
        return str(value)
    return value


class JsonReport:
    """Mixed into every command's report dataclass: ``to_dict()`` is its JSON value, exactly
    what the command prints with ``--format json``."""

    def to_dict(self) -> dict[str, Any]:
        """The report as plain JSON types (``to_json``): what ``--format json`` prints."""
        value: dict[str, Any] = to_json(self)
        return value


def dumps(report: Any) -> str:
    """The report as indented JSON text with a final newline (strict: no NaN, no Infinity)."""
    return json.dumps(to_json(report), indent=2, allow_nan=False, ensure_ascii=False) + "\n"


def _written(f: Field, obj: Any) -> bool:
    if not f.metadata.get("json", True):
        return False
    when = f.metadata.get("when")
    return when is None or bool(when(obj))


# ------------------------------------------------------------------ types


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _unwrap(tp: Any) -> tuple[Any, bool]:
    """(T, nullable) for ``T | None``; other types unchanged."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], len(args) < len(typing.get_args(tp))
    return tp, False


def _schema_fields(cls: type) -> list[tuple[Field, Any]]:
    hints = _hints(cls)
    return [(f, hints[f.name]) for f in fields(cls) if f.metadata.get("json", True)]


def _type_name(tp: Any) -> str:
    tp, nullable = _unwrap(tp)
    origin = typing.get_origin(tp)
    if origin is list:
        item = _type_name(typing.get_args(tp)[0])
        name = "list of " + (f"({item})" if " or " in item else item)
    elif origin is dict or tp is dict or is_dataclass(tp):
        name = "object"
    else:
        name = {float: "number", int: "integer", str: "string", bool: "boolean"}.get(tp, "any")
    return name + (" or null" if nullable else "")


def _is_number(tp: Any) -> bool:
    tp, _ = _unwrap(tp)
    return tp in (float, int) or tp is Any


def check_path(cls: type, path: str) -> None:
    """UsageError unless dotted ``path`` names a number in reports of type ``cls``.

    List items are addressed by index (``by_epoch.0.noise_share``), dict entries by their
    key, which may contain dots (``variants.phi:64@0.5.churn``).
    """
    problem = _path_problem(cls, path.split("."), [])
    if problem:
        raise UsageError(f"--check: {problem}")


def _path_problem(tp: Any, parts: list[str], walked: list[str]) -> str | None:
    tp, _ = _unwrap(tp)
    where = ".".join(walked) or "the report"
    if not parts:
        return None if _is_number(tp) else f"{where} is not a number (it is {_type_name(tp)})"
    if tp is Any:
        return None
    origin = typing.get_origin(tp)
    if isinstance(tp, type) and is_dataclass(tp):
        names = [f.name for f, _ in _schema_fields(tp)]
        hints = _hints(tp)
        if parts[0] not in names:
            return f"no {parts[0]!r} in {where} (has: {', '.join(sorted(names))})"
        return _path_problem(hints[parts[0]], parts[1:], walked + [parts[0]])
    if origin is list:
        if not parts[0].isdigit():
            return f"{where} is a list: expected an index, found {parts[0]!r}"
        return _path_problem(typing.get_args(tp)[0], parts[1:], walked + [parts[0]])
    if origin is dict or tp is dict:
        value_type = typing.get_args(tp)[1] if typing.get_args(tp) else Any
        problem = None
        for size in range(len(parts), 0, -1):  # a key may contain dots: any split that works
            problem = _path_problem(value_type, parts[size:], walked + [".".join(parts[:size])])
            if problem is None:
                return None
        return problem  # the reading with a one-part key explains best
    return f"{where} is {_type_name(tp)}, it has no {parts[0]!r}"


def key_rows(cls: type, prefix: str = "") -> list[tuple[str, str, str]]:
    """(dotted key, JSON type, meaning) for every key of ``cls``, depth first, in field order."""
    rows = []
    for f, tp in _schema_fields(cls):
        name = prefix + f.name
        rows.append((name, _type_name(tp), f.metadata.get("doc", "")))
        inner, _ = _unwrap(tp)
        origin = typing.get_origin(inner)
        if origin is list and is_dataclass(typing.get_args(inner)[0]):
            rows += key_rows(typing.get_args(inner)[0], name + ".N.")
        elif origin is dict and is_dataclass(typing.get_args(inner)[1]):
            rows += key_rows(typing.get_args(inner)[1], name + ".NAME.")
        elif isinstance(inner, type) and is_dataclass(inner):
            rows += key_rows(inner, name + ".")
    return rows


def markdown_table(cls: type) -> str:
    """The Markdown reference table of every JSON key of ``cls``."""
    lines = ["| key | type | meaning |", "| --- | --- | --- |"]
    lines += [f"| `{name}` | {kind} | {_cell(doc)} |" for name, kind, doc in key_rows(cls)]
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


# ------------------------------------------------------------------ --check gates (every command)


@dataclass(frozen=True)
class Check:
    name: str = doc("the expression as given")
    path: str = doc("the dotted path it reads")
    op: str = doc("`<`, `<=`, `>`, `>=` or `==`")
    value: float | None = doc("the value found (null if not finite; such a check fails)")
    threshold: float = doc("the number compared with")
    passed: bool = doc("whether the comparison holds")


OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    ">=": operator.ge,
    "==": operator.eq,
    "<": operator.lt,
    ">": operator.gt,
}
_CHECK_RE = re.compile(r"^\s*([^\s<>=]+)\s*(<=|>=|==|<|>)\s*([^\s<>=]+)\s*$")


def parse_check(expression: str) -> tuple[str, str, float]:
    """``'representation.knn_overlap>=0.6'`` → (path, op, threshold); UsageError if malformed."""
    match = _CHECK_RE.match(expression)
    if not match:
        raise UsageError(f"--check {quote(expression)}: expected PATH OP VALUE with OP one of < <= > >= ==")
    path, op, raw = match.groups()
    try:
        threshold = float(raw)
    except ValueError:
        raise UsageError(f"--check {quote(expression)}: {quote(raw)} is not a number") from None
    if not math.isfinite(threshold):
        raise UsageError(f"--check {quote(expression)}: the threshold must be a finite number")
    return path, op, threshold


def validate_checks(
    cls: type, expressions: Sequence[str], needs: Callable[[str], str | None] | None = None
) -> list[tuple[str, str, float]]:
    """Parse every expression and resolve its path against report type ``cls``, before any
    input is read. ``needs(path)`` names what the command lacks for that path (``"--labels
    FILE"``), or None; a lacking path is a UsageError."""
    parsed = [parse_check(expression) for expression in expressions]
    for path, _, _ in parsed:
        missing = needs(path) if needs else None
        if missing:
            raise UsageError(f"--check {path}: {missing}")
        check_path(cls, path)
    return parsed


def resolve(report: Any, path: str, cls: type | None = None) -> float | None:
    """The number at dotted ``path`` in the report (its JSON value); UsageError naming the
    first bad part. None for a null (non-finite or unavailable) value; ``cls`` (default: the
    report's own type) tells a null number from a null section.

    A key may itself contain dots (variant ``phi:64@0.5``): at each level the longest run
    of parts that is a key wins.
    """
    node: Any = to_json(report)
    parts = path.split(".")
    walked: list[str] = []
    while parts:
        for size in range(len(parts), 0, -1):
            name = ".".join(parts[:size])
            if isinstance(node, dict) and name in node:
                node = node[name]
                break
            if size == 1 and isinstance(node, list) and name.isdigit() and int(name) < len(node):
                node = node[int(name)]
                break
        else:
            where = ".".join(walked) or "the report"
            if isinstance(node, list):
                raise UsageError(f"--check {path}: {where} has {len(node)} entries, no {quote(parts[0])}")
            options = ", ".join(sorted(node)) if isinstance(node, dict) else "no named fields"
            raise UsageError(f"--check: no {quote(parts[0])} in {where} (has: {options})")
        walked.append(name)
        parts = parts[size:]
    if node is None:  # a number that is null (NaN, unavailable) fails its check; a null section is an error
        cls = cls or (type(report) if is_dataclass(report) and not isinstance(report, type) else None)
        if cls is not None:
            check_path(cls, path)
        return None
    if isinstance(node, bool) or not isinstance(node, (int, float)):
        raise UsageError(f"--check: {path} is not a number (it is {type(node).__name__})")
    return float(node)


def evaluate_checks(report: Any, expressions: Sequence[str], cls: type | None = None) -> list[Check]:
    """Every check expression evaluated on ``report`` (a typed report, or its JSON with its
    type ``cls``); a check whose value is null (NaN, unavailable) fails."""
    results = []
    for expression in expressions:
        path, op, threshold = parse_check(expression)
        value = resolve(report, path, cls)
        passed = value is not None and OPS[op](value, threshold)
        results.append(
            Check(name=expression.strip(), path=path, op=op, value=value, threshold=threshold, passed=passed)
        )
    return results
