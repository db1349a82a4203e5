"""What determines a run: ``TrainConfig`` (checked on construction, stored in the manifest,
compared on resume) and the gensim arguments ``--param`` may pass, each with its range."""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from stabcli.constraints import TRAIN_CONFIG, Constraint, validate_params
from stabcli.errors import OptionError, UsageError, quote
from stabcli.training.trainers import script_argv

MODELS = ("word2vec", "doc2vec")
VARY = ("seed", "shuffle", "bootstrap")
# Arguments stabcli sets itself; --param may not override them.
_RESERVED = {
    "sentences",
    "corpus_iterable",
    "corpus_file",
    "documents",
    "workers",
    "seed",
    "callbacks",
    "vector_size",
    "window",
    "negative",
    "epochs",
    "sg",
    "dm",
    "min_count",
    "compute_loss",
}


@dataclass(frozen=True)
class TrainConfig:
    """Everything that determines a run's result; stored in the manifest and compared on resume."""

    model: str = "word2vec"
    dim: int = 32
    window: int = 3
    negative: int = 3
    epochs: int = 10
    sg: bool = True
    min_count: int = 1
    vary: str = "seed"
    params: dict[str, Any] = field(default_factory=dict)
    script: str | None = None
    checkpoints: bool = False

    parameter_constraints: ClassVar[dict[str, Constraint]] = TRAIN_CONFIG

    def __post_init__(self) -> None:
        if self.script is not None:
            if not isinstance(self.script, str) or "{out}" not in self.script:
                raise OptionError("script", "must contain {out}: the directory the script writes its embedding into")
            script_argv(self.script, seed=0, out=Path("out"), run=0, corpus=None)  # fails early on bad quoting
            return
        if self.model not in MODELS:
            raise OptionError("model", f"{quote(self.model)}: choose one of {', '.join(MODELS)}")
        if self.vary not in VARY:
            raise OptionError("vary", f"{quote(self.vary)}: choose one of {', '.join(VARY)}")
        validate_params(self)
        for name in TRAIN_CONFIG:
            value = getattr(self, name)
            if value > 2**31 - 1:
                raise OptionError(name, f"{value} is larger than gensim accepts (2**31 - 1)")
        if not isinstance(self.params, dict):
            raise OptionError("param", "expected a dict of gensim arguments")
        check_params(self.model, self.params)

    def identity(self) -> dict[str, Any]:
        if self.script is not None:
            return {"model": "script", "script": self.script}
        return asdict(self)


def _flag(value: Any) -> str | None:
    return None if type(value) is bool or (value in (0, 1) and type(value) is int) else "0 or 1"


def _number(low: float, high: float, *, low_open: bool = False) -> Callable[[Any], str | None]:
    bracket = "(" if low_open else "["

    def check(value: Any) -> str | None:
        if (
            type(value) not in (int, float)
            or not math.isfinite(value)
            or value > high
            or value < low
            or (low_open and value == low)
        ):
            return f"a finite number in {bracket}{low:g}, {high:g}]"
        return None

    return check


def _count(low: int, high: int, *, optional: bool = False) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        if optional and value is None:
            return None
        if type(value) is not int or not low <= value <= high:
            return f"an integer from {low:,} to {high:,}" + (" or None" if optional else "")
        return None

    return check


# The gensim arguments --param accepts: plain numeric and boolean hyperparameters, each with
# its range. Anything that could run code or open files (callbacks, trim_rule, hashfxn,
# corpus_file, dv_mapfile, ...) is not here, so it is refused.
GENSIM_PARAMS: dict[str, Callable[[Any], str | None]] = {
    "alpha": _number(0.0, 1.0, low_open=True),
    "min_alpha": _number(0.0, 1.0),
    "sample": _number(0.0, 1.0),
    "ns_exponent": _number(-10.0, 10.0),
    "hs": _flag,
    "cbow_mean": _flag,
    "null_word": _flag,
    "sorted_vocab": _flag,
    "shrink_windows": _flag,
    "max_vocab_size": _count(1, 2**40, optional=True),
    "max_final_vocab": _count(1, 2**40, optional=True),
    "batch_words": _count(1, 10**7),
}
DOC2VEC_PARAMS: dict[str, Callable[[Any], str | None]] = {
    "dm_mean": lambda v: None if v is None else _flag(v),
    "dm_concat": _flag,
    "dm_tag_count": _count(1, 1000),
    "dbow_words": _flag,
}


def check_params(model: str, params: dict[str, Any]) -> None:
    """Refuse a gensim argument stabcli does not pass through, or a value out of its range
    (non-finite, negative, not 0/1, not a number), before gensim sees it."""
    accepted = {**GENSIM_PARAMS, **(DOC2VEC_PARAMS if model == "doc2vec" else {})}
    for name, value in params.items():
        if name in _RESERVED:
            raise UsageError(f"--param {name}: set by stabcli itself; use its own option instead")
        if name not in accepted:
            hint = " (a doc2vec argument; add --model doc2vec)" if name in DOC2VEC_PARAMS else ""
            raise UsageError(
                f"--param {name}: not an argument of gensim {'Doc2Vec' if model == 'doc2vec' else 'Word2Vec'} "
                f"that stabcli passes on{hint}; accepted: {', '.join(sorted(accepted))}"
            )
        expected = accepted[name](value)
        if expected is not None:
            raise UsageError(f"--param {name}={_short_repr(value)}: expected {expected}")


def _short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def parse_params(model: str, pairs: Iterable[str]) -> dict[str, Any]:
    """``key=value`` strings → gensim keyword arguments from an allow-list of numeric and
    boolean hyperparameters, each checked against its range.

    Values are Python literals (``1e-3``, ``True``, ``None``; never evaluated as code).
    """
    params: dict[str, Any] = {}
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        name = name.strip()
        if not sep or not name:
            raise UsageError(f"--param {quote(pair)}: expected key=value")
        try:
            params[name] = ast.literal_eval(raw.strip())
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            params[name] = raw.strip()
        check_params(model, {name: params[name]})
    return params
