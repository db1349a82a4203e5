"""The recommendation: the most stable representation whose metric is within one std of the best."""

from __future__ import annotations

from typing import Any

STALE_TOLERANCE = 0.01  # a stale-model drop above this is called out in the recommendation


def recommend(results: dict[str, dict[str, Any]], primary: str, resolution: float = 0.0) -> dict[str, Any]:
    """The most stable variant (lowest churn, then std) whose mean is within one std of the best.

    ``resolution`` is the smallest difference the metric can show (one test prediction,
    1/n_test, for accuracy): "within one std" means within max(std, resolution), so a
    best variant whose std happens to be 0 does not exclude a variant one prediction behind.
    """
    eligible = {
        name: r
        for name, r in results.items()
        if r["churn"] is not None and r[f"{primary}_std"] is not None and r[f"{primary}_mean"] is not None
    }
    if not eligible:
        return {"variant": None, "reason": "no variant has more than one run; nothing to compare"}
    label = {"accuracy": "accuracy", "r2": "R²", "f1_micro": "micro-F1"}[primary]
    best = max(eligible, key=lambda n: eligible[n][f"{primary}_mean"])
    best_mean, best_std = eligible[best][f"{primary}_mean"], eligible[best][f"{primary}_std"]
    close = [n for n, r in eligible.items() if r[f"{primary}_mean"] >= best_mean - max(best_std, resolution) - 1e-12]
    choice = min(close, key=lambda n: (eligible[n]["churn"], eligible[n][f"{primary}_std"]))
    c = eligible[choice]
    churn_text = _churn_text(primary, c["churn"])
    if choice == "h":
        reason = (
            f"raw h is already the best choice: churn {churn_text}, {label} {c[f'{primary}_mean']:.3f} "
            f"(std {c[f'{primary}_std']:.3f}); no variant within one std of the best {label} "
            f"({best}: {best_mean:.3f} ± {best_std:.3f}) has lower churn."
        )
    else:
        # "vs raw h" only where h competed (it is then never below the choice); otherwise say why h lost
        versus = f" vs {_churn_text(primary, eligible['h']['churn'])} for raw h" if "h" in close else ""
        reason = (
            f"{choice}: lowest churn ({churn_text}{versus}) among the {len(close)} variant(s) whose {label} is "
            f"within one std of the best ({best}: {best_mean:.3f} ± {best_std:.3f}); its {label} is "
            f"{c[f'{primary}_mean']:.3f} (std {c[f'{primary}_std']:.3f})."
        )
        if "h" in eligible and "h" not in close:
            h = eligible["h"]
            relation = "lower" if h["churn"] < c["churn"] else "higher" if h["churn"] > c["churn"] else "the same"
            reason += (
                f" Raw h has {relation} churn ({_churn_text(primary, h['churn'])}) but its {label} "
                f"{h[f'{primary}_mean']:.3f} is not within one std of the best."
            )
    stale_key = f"stale_{primary}_mean"
    stale = {n: r[stale_key] for n, r in eligible.items() if r[stale_key] is not None}
    if stale and c["stale_drop"] is not None and c["stale_drop"] > STALE_TOLERANCE:
        keeper = max(stale, key=lambda name: stale[name])
        reason += (
            f" A downstream model that is not refit scores {label} {c[stale_key]:.3f} with {choice} "
            f"(drop {c['stale_drop']:.3f}); "
            + (
                f"with {keeper} it keeps {stale[keeper]:.3f}, so refit on every refresh or use {keeper}."
                if keeper != choice
                else "refit it on every refresh."
            )
        )
    return {"variant": choice, "reason": reason}


def _churn_text(primary: str, value: float) -> str:
    return f"{value:.3g} RMS" if primary == "r2" else f"{value:.1%}"
