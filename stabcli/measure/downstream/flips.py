"""Per-key prediction instability over N runs: which test keys' decisions flip between retrains.

For a test key and R runs of the same model on R embeddings (the same split and seed):

* **flip rate** (classification): the share of the R(R−1)/2 run pairs whose predictions for
  the key differ; for multi-label, the share of (run pair, label) decisions that differ. The
  mean over test keys is the variant's churn.
* **prediction range** (regression): max − min over runs of the key's prediction (the width
  of the interval the runs span), in label units; its std over runs (ddof=1) too.
* **directional flip rates** (binary classification, and each label of a multi-label
  task): of the test decisions negative under the reference run's model, the share that is
  positive under another run's refit model (negative→positive), and the converse,
  averaged over the other runs. The positive class is the second of the two sorted classes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

import numpy as np


@dataclass
class KeyFlips:
    """One variant's per-test-key instability (arrays in test-key order)."""

    task: str
    flip_rate: np.ndarray | None = None  # classification, multilabel
    prediction_range: np.ndarray | None = None  # regression, label units
    prediction_std: np.ndarray | None = None  # regression, label units
    negative_to_positive: float | None = None
    positive_to_negative: float | None = None
    positive_class: str | None = None

    @property
    def instability(self) -> np.ndarray:
        """The per-key number keys are ranked by: flip rate, or prediction range."""
        value = self.flip_rate if self.flip_rate is not None else self.prediction_range
        assert value is not None
        return value


@dataclass
class PerKeyFlips:
    """Every variant's ``KeyFlips`` over the test keys (the ``--per-key`` columns)."""

    test_keys: list[str]
    by_variant: dict[str, KeyFlips] = field(default_factory=dict)

    def columns(self, keys: Sequence[str]) -> dict[str, np.ndarray]:
        """Columns aligned to ``keys``: ``flip_rate[VARIANT]`` (or ``prediction_range[VARIANT]``
        for regression), NaN for keys outside the test split."""
        position = {k: i for i, k in enumerate(keys)}
        rows = np.fromiter((position[k] for k in self.test_keys), dtype=np.int64, count=len(self.test_keys))
        out: dict[str, np.ndarray] = {}
        for name, flips in self.by_variant.items():
            column = "flip_rate" if flips.flip_rate is not None else "prediction_range"
            values = np.full(len(keys), np.nan)
            values[rows] = flips.instability
            out[f"{column}[{name}]"] = values
        return out


def key_flips(
    task: str, predictions: Sequence[np.ndarray], scale: float, reference: int, classes: Sequence[str]
) -> KeyFlips:
    """Per-key instability of R ≥ 2 runs' test predictions (regression: of labels divided by
    ``scale``; the range and std come back in label units)."""
    if task == "regression":
        stacked = np.asarray(predictions, dtype=np.float64)
        spread = np.ptp(stacked, axis=0)
        std = np.std(stacked - stacked[0], axis=0, ddof=1)
        with np.errstate(over="ignore", under="ignore"):  # scale is a power of two: exact within range
            return KeyFlips(task, prediction_range=spread * scale, prediction_std=std * scale)
    n = len(predictions[0])
    differing = np.zeros(n, dtype=np.float64)
    pairs = 0
    for a, b in combinations(predictions, 2):
        flipped = a != b
        differing += flipped.mean(axis=1) if flipped.ndim == 2 else flipped
        pairs += 1
    flips = KeyFlips(task, flip_rate=differing / pairs)
    if task == "multilabel":
        flips.negative_to_positive, flips.positive_to_negative = _directional(predictions, reference, 1)
    elif len(classes) == 2:
        flips.negative_to_positive, flips.positive_to_negative = _directional(predictions, reference, classes[1])
        flips.positive_class = classes[1]
    return flips


def _directional(predictions: Sequence[np.ndarray], reference: int, positive: Any) -> tuple[float | None, float | None]:
    """(negative→positive, positive→negative): from the reference run's decisions to every
    other run's, the share of negative (positive) decisions that became positive (negative)."""
    base = predictions[reference] == positive
    up, down = [], []
    for r, other in enumerate(predictions):
        if r == reference:
            continue
        now = other == positive
        if (~base).any():
            up.append(float(np.mean(now[~base])))
        if base.any():
            down.append(float(np.mean(~now[base])))
    return (float(np.mean(up)) if up else None, float(np.mean(down)) if down else None)


Bands = Callable[[np.ndarray], list[tuple[str, int, int | None, np.ndarray]]]
"""Frequencies → (label, low, high, member positions) of every non-empty band (the audit's bands)."""


def flips_summary(
    flips: KeyFlips,
    keys: Sequence[str],
    names: Mapping[str, str] | None,
    frequency: np.ndarray | None,
    top: int,
    bands: Bands | None = None,
) -> dict[str, Any]:
    """The JSON summary of one variant's ``KeyFlips``: totals, directional rates, the ``top``
    most unstable test keys, and the mean instability per frequency band (``bands`` of the
    test keys' ``frequency``; null without either)."""
    value = flips.instability
    shown = [int(i) for i in np.argsort(-value, kind="stable")[:top] if value[i] > 0]
    classification = flips.flip_rate is not None
    by_band = None
    if frequency is not None and bands is not None and np.any(frequency >= 0):
        by_band = [
            {
                "band": label,
                "low": low,
                "high": high,
                "keys": len(members),
                "mean": float(np.mean(value[members])),
                "unstable_share": float(np.mean(value[members] > 0)),
            }
            for label, low, high, members in bands(frequency)
        ]
    return {
        "keys": len(keys),
        "unstable_keys": int(np.count_nonzero(value > 0)),
        "flip_rate_mean": float(np.mean(value)) if classification else None,
        "prediction_range_mean": None if classification else float(np.mean(value)),
        "prediction_range_median": None if classification else float(np.median(value)),
        "negative_to_positive": flips.negative_to_positive,
        "positive_to_negative": flips.positive_to_negative,
        "positive_class": flips.positive_class,
        "most_unstable": [
            {
                "key": keys[i],
                "name": names.get(keys[i]) if names else None,
                "frequency": None if frequency is None or frequency[i] < 0 else int(frequency[i]),
                "value": float(value[i]),
            }
            for i in shown
        ],
        "by_frequency": by_band,
    }
