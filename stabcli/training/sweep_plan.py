"""What a sweep trains: grid cells × data sizes, nested subsamples and swap-one pairs.

* ``parse_grid('window=3,5 negative=3,10')`` → ``{"window": [3, 5], "negative": [3, 10]}``:
  names are pretrain's own options (``dim``, ``window``, ``negative``, ``epochs``, ``sg``,
  ``min_count``) and the gensim arguments ``--param`` accepts (the same allow-list and
  ranges), or, with ``--script``, any ``{name}`` field of the template.
* **Nested subsamples**: one seeded permutation of the corpus's sequences; the sample of
  share s is its first ``ceil(s·N)`` sequences, kept in corpus order. So the 10% sample is
  inside the 20% one, and a curve over sizes is not confounded by different data.
* **Swap-one pairs** (the thesis's empirical stability): for a sample S of size m, pair j
  replaces sequence ``i_j`` of S by a sequence outside S (at the full size, by a copy of
  another sequence of S); both are trained with the same seed.
"""

from __future__ import annotations

import ast
import itertools
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from stabcli.errors import OptionError, UsageError, quote
from stabcli.training.config import DOC2VEC_PARAMS, GENSIM_PARAMS, TrainConfig, check_params
from stabcli.training.trainers import PLACEHOLDERS

CONFIG_FIELDS = ("dim", "window", "negative", "epochs", "sg", "min_count")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SCRIPT_VALUE = re.compile(r"^[A-Za-z0-9._+-]+$")
_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
MAX_CELLS = 1000


def parse_grid(text: str, model: str = "word2vec", script: str | None = None) -> dict[str, list[Any]]:
    """``'name=v1,v2 name2=v3'`` → ``{name: [v1, v2], name2: [v3]}`` in the order given.

    Values are Python literals (``0.001``, ``True``), never evaluated as code, or with a
    script the text as written. Without a script every name must be a pretrain option or an
    accepted gensim argument, each value in its range; with a script every name must be a
    ``{name}`` field of the template. Values equal as numbers (``1``, ``1.0``, ``True``)
    are one value given twice.
    """
    grid: dict[str, list[Any]] = {}
    for item in text.split():
        name, sep, raw = item.partition("=")
        if not sep or not name or not raw:
            raise UsageError(f"--grid {quote(item)}: expected NAME=VALUE,VALUE,... (items separated by spaces)")
        if not _NAME.match(name):
            raise UsageError(f"--grid {quote(item)}: {quote(name)} is not a parameter name")
        if name in grid:
            raise UsageError(f"--grid: {name} is given twice")
        values = [v if script is not None else _literal(v) for v in raw.split(",")]  # a script gets the text
        if any(v == "" for v in values):
            raise UsageError(f"--grid {quote(item)}: empty value")
        if any(_same(a, b) for i, a in enumerate(values) for b in values[:i]):  # 1, 1.0 and True are one value
            raise UsageError(f"--grid {quote(item)}: a value is repeated")
        grid[name] = values
    if script is None:
        accepted = set(CONFIG_FIELDS) | set(GENSIM_PARAMS) | (set(DOC2VEC_PARAMS) if model == "doc2vec" else set())
        for name, values in grid.items():
            if name not in accepted:
                raise UsageError(
                    f"--grid {name}: not a pretrain option or a gensim argument stabcli passes on; "
                    f"accepted: {', '.join(sorted(accepted))}"
                )
            if name not in CONFIG_FIELDS:
                for value in values:
                    try:
                        check_params(model, {name: value})
                    except UsageError as exc:
                        raise UsageError(str(exc).replace("--param", "--grid", 1)) from None
    else:
        for name, values in grid.items():
            if "{" + name + "}" in PLACEHOLDERS:
                raise UsageError(f"--grid {name}: {{{name}}} is filled by stabcli itself")
            if "{" + name + "}" not in script:
                raise UsageError(f"--grid {name}: the --script template has no {{{name}}} field to fill")
            for value in values:
                if not _SCRIPT_VALUE.match(str(value)):
                    raise UsageError(f"--grid {name}={quote(value)}: script values are letters, digits and . _ + -")
    return grid


def _same(a: Any, b: Any) -> bool:
    """Equal grid values (``1``, ``1.0`` and ``True`` configure the same cell)."""
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return False


def _literal(raw: str) -> Any:
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return raw


def parse_sizes(text: str) -> list[float]:
    """``'0.1,0.2,1'`` → ascending distinct shares of the corpus's sequences in (0, 1]."""
    sizes = []
    for item in text.split(","):
        try:
            if not item.isascii():  # float() also reads fullwidth and other scripts' digits
                raise ValueError(item)
            value = float(item)
        except ValueError:
            raise UsageError(f"--sizes {quote(text)}: {quote(item.strip())} is not a number") from None
        if not (math.isfinite(value) and 0 < value <= 1):
            raise UsageError(f"--sizes {quote(text)}: {item.strip()} is not a share in (0, 1]")
        sizes.append(value)
    if len(set(sizes)) != len(sizes):
        raise UsageError(f"--sizes {quote(text)}: a size is repeated")
    return sorted(sizes)


@dataclass(frozen=True)
class Cell:
    """One grid cell at one data size: its run set name, grid values and configuration."""

    name: str
    size: float
    values: dict[str, Any]
    config: TrainConfig


def size_label(size: float) -> str:
    return f"size-{size:g}"


def cells(grid: dict[str, list[Any]], sizes: list[float], base: TrainConfig) -> list[Cell]:
    """Every (grid combination, size), sizes outermost; each configuration validated here
    (an out-of-range value is a UsageError naming it) before anything is trained."""
    for smaller, larger in itertools.pairwise(sorted(sizes)):
        if size_label(smaller) == size_label(larger):
            raise UsageError(f"--sizes {smaller},{larger}: the same size to 6 digits ({size_label(larger)})")
    if base.script is not None:
        unfilled = sorted(set(_FIELD.findall(base.script)) - set(grid) - {p.strip("{}") for p in PLACEHOLDERS})
        if unfilled:
            raise UsageError(
                f"--script: {{{unfilled[0]}}} is neither a field stabcli fills ({' '.join(PLACEHOLDERS)}) nor a "
                "--grid name; every cell would run it literally"
            )
    names = list(grid)
    combos = list(itertools.product(*(grid[n] for n in names)))
    if len(combos) * len(sizes) > MAX_CELLS:
        raise UsageError(f"--grid × --sizes: {len(combos) * len(sizes):,} cells; at most {MAX_CELLS:,}")
    result = []
    for size in sizes:
        for combo in combos:
            values = dict(zip(names, combo, strict=True))
            result.append(Cell(cell_name(size, values), size, values, cell_config(base, values)))
    seen: set[str] = set()
    for cell in result:
        if cell.name in seen:
            raise UsageError(f"--grid: two cells would both be named {cell.name}; use plainer values")
        seen.add(cell.name)
    return result


def cell_name(size: float, values: dict[str, Any]) -> str:
    """``size-0.4_window-3_negative-10``: a directory name and a ``--check`` path part."""
    parts = [size_label(size)] + [f"{k}-{_plain(v)}" for k, v in values.items()]
    return "_".join(parts)


def _plain(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    return re.sub(r"[^A-Za-z0-9.+-]", "", text) or "x"


def cell_config(base: TrainConfig, values: dict[str, Any]) -> TrainConfig:
    """``base`` with the cell's grid values: pretrain options as fields, the rest as gensim
    arguments, or with a script the template's ``{name}`` fields filled in."""
    try:
        if base.script is not None:
            script = base.script
            for name, value in values.items():
                script = script.replace("{" + name + "}", str(value))
            return replace(base, script=script)
        fields = {k: v for k, v in values.items() if k in CONFIG_FIELDS}
        params = {k: v for k, v in values.items() if k not in CONFIG_FIELDS}
        if "sg" in fields:
            fields["sg"] = _flag(fields["sg"])
        return replace(base, **fields, params={**base.params, **params})
    except OptionError as exc:
        value = values.get(exc.param)
        raise UsageError(f"--grid {exc.param}={quote(value)}: {exc.problem}") from None


def _flag(value: Any) -> bool:
    if value in (0, 1) and type(value) in (int, bool):
        return bool(value)
    raise OptionError("sg", "must be 0 or 1 (True or False)")


def check_samples(
    sequences: Sequence[Sequence[str]], order: np.ndarray, cells: Sequence[Cell], script: bool
) -> dict[float, int]:
    """The sample size (in sequences) of each of the cells' sizes; UsageError before anything
    is written when a sample holds fewer than 2 sequences, two sizes give the same sample,
    or a cell's min_count leaves fewer than 2 keys in its
    sample (gensim trainers; a script reads its own vocabulary)."""
    sizes = sorted({cell.size for cell in cells})
    counts = {size: int(sample_indices(order, size).size) for size in sizes}
    n = len(order)
    for smaller, larger in itertools.pairwise(sizes):
        if counts[smaller] == counts[larger]:
            raise UsageError(
                f"--sizes {smaller},{larger}: both give the same sample ({counts[smaller]:,} of {n:,} sequences); "
                "choose sizes further apart"
            )
    if sizes and counts[sizes[0]] < 2:
        raise UsageError(f"--sizes {sizes[0]:g}: {n} sequences give a sample of 1; use larger sizes")
    if script:
        return counts
    for size in sizes:
        tokens = Counter(t for i in sample_indices(order, size) for t in sequences[int(i)])
        for cell in (c for c in cells if c.size == size):
            min_count = cell.config.min_count
            kept = sum(1 for c in tokens.values() if c >= min_count)
            if kept < 2:
                option = f"--grid min_count={min_count}" if "min_count" in cell.values else f"--min-count {min_count}"
                raise UsageError(
                    f"{option}: the {size_label(size)} sample ({counts[size]:,} sequences) has {kept} distinct "
                    f"token(s) occurring at least {min_count} time(s); an embedding needs at least 2"
                )
    return counts


def nested_order(n: int, seed: int) -> np.ndarray:
    """The seeded permutation every sample is a prefix of."""
    return np.random.default_rng([seed, 0x5EE9]).permutation(n)


def sample_indices(order: np.ndarray, size: float) -> np.ndarray:
    """Sequence indices of the sample of share ``size``: the first ``ceil(size·N)`` of
    ``order``, in corpus order (so a smaller sample is inside every larger one)."""
    count = max(1, math.ceil(size * len(order) - 1e-9))
    return np.sort(order[:count])


@dataclass(frozen=True)
class Swap:
    """Pair j of a size: position ``removed`` of the sample replaced by sequence ``added``."""

    removed: int  # index into the corpus of the sequence taken out
    added: int  # index into the corpus of the sequence put in its place


def swaps(order: np.ndarray, size: float, count: int, seed: int) -> list[Swap]:
    """``count`` seeded swaps for the sample of share ``size``: a sequence of the sample out,
    one outside it in (a copy of another sample sequence when the sample is everything)."""
    inside = sample_indices(order, size)
    outside = np.setdiff1d(order, inside)
    rng = np.random.default_rng([seed, 0x5A9, round(size * 1e6)])
    result = []
    for _ in range(count):
        removed = int(inside[rng.integers(len(inside))])
        if len(outside):
            added = int(outside[rng.integers(len(outside))])
        else:
            others = inside[inside != removed]
            added = int(others[rng.integers(len(others))]) if len(others) else removed
        result.append(Swap(removed, added))
    return result


def swapped(inside: np.ndarray, swap: Swap) -> list[int]:
    """The sample's sequence indices with ``swap`` applied (the new sequence takes the
    removed one's place, so nothing else moves)."""
    return [swap.added if i == swap.removed else int(i) for i in inside]
