"""Messages quote a user's value through one owner (``stabcli.errors.quote``): a 300,000-character
label, key or option value is shortened in what the library raises, not only in the CLI's line."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import stabcli
from conftest import REPO, invoke, make_runset
from stabcli.errors import MESSAGE_LIMIT, QUOTE_LIMIT, InputError, OptionError, StabcliError, quote

HUGE = 300_000
# what a message may grow to around one shortened value: the value's share plus the sentence
SHORT = QUOTE_LIMIT * 2 + 600
WARNING_CALLS = {"on_warning", "warn", "_warn", "warning", "announce"}


def _repr_in_messages(path: Path) -> list[str]:
    """``file:line`` of every raise or warning call whose message formats a value with ``!r``
    or ``repr(...)`` instead of ``quote(...)``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        call = None
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            name = node.exc.func.id if isinstance(node.exc.func, ast.Name) else ""
            call = None if name == "AttributeError" else node.exc  # module __getattr__ follows Python's wording
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            call = node if name in WARNING_CALLS else None
        if call is None:
            continue
        for sub in ast.walk(call):
            bad_conversion = isinstance(sub, ast.FormattedValue) and sub.conversion == ord("r")
            bad_call = isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id == "repr"
            if bad_conversion or bad_call:
                found.append(f"{path.relative_to(REPO)}:{call.lineno}")
                break
    return found


def test_every_library_message_quotes_values_through_quote():
    found = [site for path in sorted((REPO / "stabcli").rglob("*.py")) for site in _repr_in_messages(path)]
    assert found == [], "format values with stabcli.errors.quote, not !r or repr(): " + ", ".join(found)


def test_quote_shortens_and_keeps_one_line():
    assert quote("ab") == "'ab'" and quote(3) == "3"
    long = quote("x" * HUGE)
    assert len(long) < QUOTE_LIMIT + 40 and f"{HUGE - QUOTE_LIMIT:,} characters" in long
    assert "\n" not in quote("a\nb" * HUGE) and len(quote(list(range(HUGE)))) < QUOTE_LIMIT + 40
    assert "\n" not in quote(np.arange(4.0).reshape(2, 2))  # numpy's repr spans lines
    assert f"{HUGE - (MESSAGE_LIMIT - 5 - 60):,} characters" in str(OptionError("model", "z" * HUGE))


def test_every_error_is_capped_for_library_callers():
    assert len(str(InputError("y" * HUGE))) <= MESSAGE_LIMIT + 40
    exc = OptionError("model", "z" * HUGE)
    assert len(str(exc)) <= MESSAGE_LIMIT + 60 and len(exc.problem) <= MESSAGE_LIMIT + 40
    assert str(InputError("short")) == "short"


@pytest.fixture
def labeled_runs(tmp_path: Path) -> tuple[Path, list[str]]:
    keys = [f"k{i}" for i in range(40)]
    return make_runset(tmp_path / "runs", runs=2, n=40, dim=4), keys


def _labels(path: Path, rows: list[tuple[str, str]]) -> Path:
    path.write_text("".join(f"{k}\t{v}\n" for k, v in rows), encoding="utf-8")
    return path


def _check_short(message: str, fragment: str, limit: int = SHORT) -> None:
    assert fragment in message, message[:500]
    assert len(message) < limit and "characters]…" in message, len(message)


def _check_cli(result, fragment: str) -> None:
    """The CLI's one line: shortened by the library, or (a value click itself quotes, such as
    a ``--task`` choice) capped at ``MESSAGE_LIMIT``."""
    assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1, result.stderr[:500]
    _check_short(result.stderr, fragment, MESSAGE_LIMIT + 100)


def test_a_huge_label_is_shortened_by_the_api_and_the_cli(labeled_runs, tmp_path):
    runs, keys = labeled_runs
    # the one class with a single key is named in the error: a 300,000-character class name
    rows = [(k, "a" if i % 2 else "b") for i, k in enumerate(keys[:-1])] + [(keys[-1], "L" * HUGE)]
    labels = _labels(tmp_path / "labels.tsv", rows)
    with pytest.raises(StabcliError) as caught:
        stabcli.audit(runs, labels=labels, min_class_size=1, jobs=1)
    _check_short(str(caught.value), "has only 1 labeled key")
    result = invoke("audit", runs, "--labels", labels, "--min-class-size", "1", "--jobs", "1")
    _check_cli(result, "has only 1 labeled key")
    assert len(result.stderr) < SHORT


def test_a_huge_key_with_two_labels_is_shortened(labeled_runs, tmp_path):
    runs, keys = labeled_runs
    huge_key = "K" * HUGE
    vectors = [np.random.default_rng(r).standard_normal((41, 4)).astype(np.float32) for r in range(2)]
    runs = make_runset(tmp_path / "huge", vectors=vectors, keys=[*keys, huge_key])
    rows = [(k, "a" if i % 2 else "b") for i, k in enumerate(keys)] + [(huge_key, "a"), (huge_key, "b")]
    labels = _labels(tmp_path / "two.tsv", rows)
    with pytest.raises(StabcliError) as caught:
        stabcli.audit(runs, labels=labels, task="classification", jobs=1)
    _check_short(str(caught.value), "has the labels")


@pytest.mark.parametrize(
    ("option", "flag", "value", "fragment"),
    [
        ("model", "--model", "m" * HUGE, "is not one of"),
        ("model_params", "--model-param", ["p" * HUGE], "is not NAME=VALUE"),
        ("variants", "--variants", ["v" * HUGE], "unknown variant"),
        ("task", "--task", "t" * HUGE, "is not one of"),
    ],
)
def test_a_huge_option_value_is_shortened(labeled_runs, tmp_path, option, flag, value, fragment):
    runs, keys = labeled_runs
    labels = _labels(tmp_path / "labels.tsv", [(k, "a" if i % 2 else "b") for i, k in enumerate(keys)])
    with pytest.raises(OptionError) as caught:
        stabcli.audit(runs, labels=labels, jobs=1, **{option: value})
    _check_short(str(caught.value), fragment)
    result = invoke("audit", runs, "--labels", labels, flag, value[0] if isinstance(value, list) else value)
    _check_cli(result, fragment)
