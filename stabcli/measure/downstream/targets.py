"""Labels → targets: match the label file to the embedding keys, decide the task, split.

Classification drops classes below ``--min-class-size``; regression divides labels beyond
2^±400 by a power of two (``scale``, exact); multi-label keeps every label of a key as a
0/1 indicator matrix (one column per label, labels below ``--min-class-size`` keys dropped).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from sklearn.model_selection import train_test_split

from stabcli.errors import InputError, quote
from stabcli.inputs.labels import LabelSets, read_label_sets
from stabcli.measure.metrics import peak, power_of_two_scale

if TYPE_CHECKING:
    from stabcli.measure.downstream.options import DownstreamOptions

REGRESSION_MIN_DISTINCT = 21  # auto: numeric labels with more distinct values than this (or fractions) are regression
DROPPED_SHOWN = 10  # dropped classes named in the warning line


@dataclass
class Targets:
    task: str
    rows: np.ndarray  # positions in the runs' common keys that have a (kept) label
    y: np.ndarray  # labels of those rows (str for classification, float for regression, 0/1 [rows, labels] multilabel)
    skipped: int  # common keys without a label
    classes: list[str]  # classification: the classes; multilabel: the labels (columns of y)
    dropped_classes: list[dict[str, Any]]  # {label, count} of classes below --min-class-size
    scale: float = 1.0  # regression: y is the labels divided by this power of two


def targets_for(
    keys: Sequence[str], options: DownstreamOptions, on_warning: Callable[[str], None] | None = None
) -> Targets:
    """Match the label file to the embedding keys and decide the task.

    Classes with fewer than ``options.min_class_size`` labeled keys are dropped, with one
    warning naming them. Regression labels beyond 2^±400 are divided by a power of two
    (exact), so squared errors stay in range; ``scale`` converts back to label units.
    """
    labels = read_label_sets(options.labels, set(keys), options.encoding)
    rows = _labeled_rows(keys, labels)
    sets = [labels.by_key[keys[i]] for i in rows]
    skipped = len(keys) - len(rows)
    multiple = sum(len(s) > 1 for s in sets)
    task = options.task
    if task == "auto" and multiple:
        task = "multilabel"
        if on_warning:
            on_warning(
                f"{labels.source}: {multiple:,} of the {len(rows):,} labeled keys have several labels: "
                "audited as multi-label (--task classification keeps each key's first label)"
            )
    if task == "multilabel":
        return _multilabel(labels.source, rows, sets, skipped, options.min_class_size, on_warning)
    if multiple and labels.format == "delimited":
        key, several = next((keys[i], s) for i, s in zip(rows, sets, strict=True) if len(s) > 1)
        raise InputError(
            f"{labels.source}: key {quote(key)} has the labels {', '.join(map(quote, several))}; "
            f"--task {task} needs one label per key (--task multilabel keeps every label)"
        )
    raw = [s[0] for s in sets]
    numbers = _as_numbers(raw)
    if task == "auto":
        fractional = numbers is not None and bool(np.any(numbers != np.round(numbers)))
        many = numbers is not None and len(np.unique(numbers)) >= REGRESSION_MIN_DISTINCT
        task = "regression" if fractional or many else "classification"
    if task == "regression":
        if numbers is None:
            bad = next(v for v in raw if _as_numbers([v]) is None)
            raise InputError(f"{labels.source}: --task regression needs finite numeric labels, found {quote(bad)}")
        scale = power_of_two_scale(peak(numbers))
        return Targets(task, rows, numbers / scale, skipped, [], [], scale)
    y = np.array(raw, dtype=object)
    return _classification(labels.source, rows, y, skipped, options.min_class_size, on_warning)


def _labeled_rows(keys: Sequence[str], labels: LabelSets) -> np.ndarray:
    """The positions of the keys that have a label; an error when none has."""
    rows = np.array([i for i, k in enumerate(keys) if k in labels.by_key], dtype=np.int64)
    if len(rows) == 0:
        sample = next(iter(labels.by_key))
        raise InputError(
            f"{labels.source}: none of its {len(labels.by_key):,} keys is an embedding key "
            f"(label key {quote(sample)}, embedding key {quote(keys[0])})"
        )
    return rows


def _classification(
    source: Any,
    rows: np.ndarray,
    y: np.ndarray,
    skipped: int,
    min_size: int,
    on_warning: Callable[[str], None] | None,
) -> Targets:
    """The class targets; classes on fewer than ``min_size`` keys are dropped (warned)."""
    classes, counts = np.unique(y, return_counts=True)
    rare = counts < min_size
    dropped = [{"label": str(c), "count": int(n)} for c, n in zip(classes, counts, strict=False) if n < min_size]
    shown = sorted(dropped, key=lambda d: (d["count"], d["label"]))[:DROPPED_SHOWN]  # the rarest first
    listed = ", ".join(f"{quote(d['label'])} ({d['count']})" for d in shown)
    listed += f" and {len(dropped) - len(shown)} more (all in the JSON)" if len(dropped) > len(shown) else ""
    if dropped:
        kept = ~np.isin(y, classes[rare])
        rows, y = rows[kept], y[kept]
        classes, counts = classes[~rare], counts[~rare]
    if len(classes) < 2 and dropped:
        found = f"only one class ({quote(classes[0])}) has" if len(classes) else "no class has"
        raise InputError(
            f"{source}: {found} at least {min_size} labeled keys (--min-class-size "
            f"{min_size} dropped {listed}); classification needs at least 2 classes"
        )
    if len(classes) < 2:
        raise InputError(
            f"{source}: only one class ({quote(classes[0])}) among the {len(rows):,} labeled keys; "
            "classification needs at least 2"
        )
    if dropped and on_warning:  # one line, and only when the audit goes on
        on_warning(
            f"{source}: dropped {len(dropped)} class(es) with fewer than {min_size} "
            f"labeled keys (--min-class-size): {listed}"
        )
    if counts.min() < 2:
        rare_class = classes[int(np.argmin(counts))]
        raise InputError(
            f"{source}: class {quote(rare_class)} has only 1 labeled key; a stratified split needs at "
            "least 2 per class (--min-class-size 2 or more drops it)"
        )
    return Targets("classification", rows, y, skipped, [str(c) for c in classes], dropped)


def _as_numbers(values: Sequence[str]) -> np.ndarray | None:
    try:
        numbers = np.array([float(v) for v in values])
    except ValueError:
        return None
    return numbers if np.all(np.isfinite(numbers)) else None


def split(targets: Targets, test_size: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """One seeded (stratified for classification) split into train and test positions."""
    positions = np.arange(len(targets.rows))
    try:
        train, test = train_test_split(
            positions,
            test_size=test_size,
            random_state=seed,
            stratify=targets.y if targets.task == "classification" else None,
        )
    except ValueError as exc:
        raise InputError(
            f"cannot split {len(positions):,} labeled keys with --test-size {test_size:g}: {exc}"
        ) from None
    if targets.task != "classification" and min(len(train), len(test)) < 2:
        raise InputError(f"{len(positions)} labeled keys are too few for a train/test split")
    return np.sort(train), np.sort(test)


def _multilabel(
    source: Any,
    rows: np.ndarray,
    sets: list[tuple[str, ...]],
    skipped: int,
    min_size: int,
    on_warning: Callable[[str], None] | None,
) -> Targets:
    """The 0/1 indicator targets; labels on fewer than ``min_size`` keys are dropped (warned)."""
    names = sorted({label for s in sets for label in s})
    column = {name: j for j, name in enumerate(names)}
    y = np.zeros((len(sets), len(names)), dtype=np.int8)
    for i, s in enumerate(sets):
        y[i, [column[label] for label in s]] = 1
    counts = y.sum(axis=0)
    kept = counts >= min_size
    dropped = [{"label": n, "count": int(c)} for n, c, k in zip(names, counts, kept, strict=True) if not k]
    if kept.sum() < 1:
        raise InputError(f"{source}: no label is on at least {min_size} keys (--min-class-size)")
    if dropped and on_warning:
        shown = ", ".join(f"{quote(d['label'])} ({d['count']})" for d in dropped[:DROPPED_SHOWN])
        on_warning(
            f"{source}: dropped {len(dropped)} label(s) on fewer than {min_size} keys (--min-class-size): {shown}"
        )
    y = y[:, kept]
    return Targets("multilabel", rows, y, skipped, [n for n, k in zip(names, kept, strict=True) if k], dropped)
