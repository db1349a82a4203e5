"""The recommendation: which representation to feed the downstream model (``--prefer``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

STALE_TOLERANCE = 0.01  # a stale-model drop above this is called out in the recommendation
# --prefer: how many times the noise a less stable variant's gain must exceed to be recommended
PREFERENCES = {"stability": math.inf, "balanced": 2.0, "accuracy": 1.0}
DEFAULT_PREFER = "balanced"

FEATURIZED_INPUT = "phi(h)"  # the name of an already featurized input among the variants
PRIMARY_LABELS = {"accuracy": "accuracy", "r2": "R²", "f1_micro": "micro-F1"}  # the primary metric in the reason


@dataclass(frozen=True)
class _Field:
    """The usable variants' scores and the comparisons against the baseline."""

    mean: dict[str, float]
    std: dict[str, float]
    churn: dict[str, float]
    baseline: str
    resolution: float

    def noise(self, n: str) -> float:
        return max(self.std[self.baseline], self.std[n], self.resolution)

    def steadier(self, n: str) -> bool:
        b = self.baseline
        return self.churn[n] <= self.churn[b] + 1e-12 and self.std[n] <= self.std[b] + 1e-12


def recommend(
    results: dict[str, dict[str, Any]],
    primary: str,
    resolution: float = 0.0,
    prefer: str = DEFAULT_PREFER,
    baseline: str = "h",
) -> dict[str, Any]:
    """The variant to use: stability first, accuracy when its gain is beyond the noise.

    Against the input itself (``baseline``: raw h, or ``phi(h)`` for a featurized input), a
    variant is *steadier* when neither its churn nor its run-to-run std is larger. The noise
    of a comparison is the larger of the two std and ``resolution`` (one test key for
    accuracy). Candidates: the baseline; steadier variants that lose at most the noise; and
    less steady variants whose gain exceeds ``PREFERENCES[prefer]`` × the noise (never with
    ``stability``, 2× with ``balanced``, 1× with ``accuracy``). Among the candidates within
    the noise of the best candidate's metric, ``accuracy`` takes the best, the others the
    lowest churn (then std). A featurized baseline's phi variants (phi of phi) never compete.
    """
    usable = {
        name: r
        for name, r in results.items()
        if r["churn"] is not None and r[f"{primary}_std"] is not None and r[f"{primary}_mean"] is not None
    }
    if not usable:
        return {"variant": None, "reason": "no variant has more than one run; nothing to compare", "prefer": prefer}
    mean = {n: r[f"{primary}_mean"] for n, r in usable.items()}
    std = {n: r[f"{primary}_std"] for n, r in usable.items()}
    churn_of = {n: r["churn"] for n, r in usable.items()}
    if baseline not in usable:  # --variants without h: the most stable variant is the reference
        baseline = min(usable, key=lambda n: (churn_of[n], std[n]))
    field = _Field(mean, std, churn_of, baseline, resolution)
    excluded = [n for n in usable if baseline == FEATURIZED_INPUT and "phi:" in n]
    margin = PREFERENCES[prefer]
    candidates, held_back = _candidates(field, excluded, margin)
    best = max(candidates, key=lambda n: mean[n])
    close = [n for n in candidates if mean[n] >= mean[best] - field.noise(best) - 1e-12]
    choice = best if prefer == "accuracy" else min(close, key=lambda n: (churn_of[n], std[n]))  # ties: the input
    reason = _reason(field, choice, held_back, primary, prefer)
    if excluded:
        reason += f" The input is already featurized ({baseline}): {', '.join(excluded)} (phi of phi) not recommended."
    reason += _stale_note(usable, primary, choice)
    return {"variant": choice, "reason": reason, "prefer": prefer}


def _candidates(field: _Field, excluded: list[str], margin: float) -> tuple[list[str], list[str]]:
    """The variants that may be recommended, and the less steady ones whose gain is within the noise."""
    candidates, held_back = [field.baseline], []
    for n in field.mean:
        if n == field.baseline or n in excluded:
            continue
        gain = field.mean[n] - field.mean[field.baseline]
        if field.steadier(n):
            if gain >= -field.noise(n) - 1e-12:
                candidates.append(n)
        elif gain > margin * field.noise(n) + 1e-12:
            candidates.append(n)
        elif gain > 0:
            held_back.append(n)
    return candidates, held_back


def _reason(field: _Field, choice: str, held_back: list[str], primary: str, prefer: str) -> str:
    """Why ``choice``: its scores against the baseline's, and the rule of ``--prefer``."""
    mean, std, churn_of, baseline = field.mean, field.std, field.churn, field.baseline
    label = PRIMARY_LABELS[primary]
    margin = PREFERENCES[prefer]
    base = "raw h" if baseline == "h" else baseline
    rule = f"--prefer {prefer}: a variant with more churn or a larger run-to-run std than {base} is " + (
        "never recommended"
        if math.isinf(margin)
        else f"recommended only when its {label} gain exceeds {margin:g}× the noise (the larger run-to-run std of the two)"
    )
    stats = f"churn {_churn_text(primary, churn_of[choice])}, {label} {mean[choice]:.3f} (std {std[choice]:.3f})"
    if choice == baseline:
        reason = f"{base} is already the best choice: {stats}."
        if held_back:
            h = max(held_back, key=lambda n: mean[n])
            reason += (
                f" {h} gains {label} {mean[h] - mean[baseline]:+.3f} but with "
                f"{_ratio(churn_of[h], churn_of[baseline])} the churn and {_ratio(std[h], std[baseline])} the std: "
                f"within {margin:g}× the noise ({margin * field.noise(h):.3f})."
            )
    else:
        gain = mean[choice] - mean[baseline]
        steadier = field.steadier(choice)
        reason = (
            f"{choice}: {stats}, against {base}'s churn {_churn_text(primary, churn_of[baseline])}, "
            f"{label} {mean[baseline]:.3f} (std {std[baseline]:.3f}); "
            + f"{'steadier' if steadier else 'less steady'}, {label} change {gain:+.3f}"
            + ("" if steadier else f", beyond {margin:g}× the noise ({margin * field.noise(choice):.3f})")
            + "."
        )
    return reason + f" Rule: {rule}."


def _stale_note(usable: dict[str, dict[str, Any]], primary: str, choice: str) -> str:
    """A sentence when a model that is not refit loses more than ``STALE_TOLERANCE`` with ``choice``."""
    label = PRIMARY_LABELS[primary]
    c = usable[choice]
    stale_key = f"stale_{primary}_mean"
    stale = {n: r[stale_key] for n, r in usable.items() if r[stale_key] is not None}
    if not (stale and c["stale_drop"] is not None and c["stale_drop"] > STALE_TOLERANCE):
        return ""
    keeper = max(stale, key=lambda name: stale[name])
    return (
        f" A downstream model that is not refit scores {label} {c[stale_key]:.3f} with {choice} "
        f"(drop {c['stale_drop']:.3f}); "
        + (
            f"with {keeper} it keeps {stale[keeper]:.3f}, so refit on every refresh or use {keeper}."
            if keeper != choice
            else "refit it on every refresh."
        )
    )


def _ratio(value: float, reference: float) -> str:
    return f"{value / reference:.2g}×" if reference > 0 else "more than"


def _churn_text(primary: str, value: float) -> str:
    return f"{value:.3g} RMS" if primary == "r2" else f"{value:.1%}"
