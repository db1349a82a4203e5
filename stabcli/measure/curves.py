"""Learning curves of stability: power-law fits over data size and Pareto fronts (docs/commands.md, stabcli sweep).

The seed thesis measures an instability ``g`` at several training-set sizes ``m`` and fits
``g(m) = a·m^b`` by least squares on log-log axes, to the per-size maximum and median
over repetitions; a curve that does not decrease is noted, not forced into the fit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PowerLawFit:
    """``g(m) = a·m^b`` fitted to (m, g) by least squares on ``log g = log a + b log m``."""

    a: float
    b: float
    r2: float | None  # of the log-log fit; None with two points (a line through two points fits exactly)
    points: int

    def predict(self, m: float) -> float:
        return self.a * m**self.b

    def size_for(self, g: float) -> float | None:
        """The m where the curve reaches ``g`` (None when it never does: b = 0, or g ≤ 0)."""
        if g <= 0 or self.b == 0 or not math.isfinite(self.b):
            return None
        with np.errstate(over="ignore"):
            value = float(np.exp((math.log(g) - math.log(self.a)) / self.b))
        return value if math.isfinite(value) else None


def fit_power_law(m: Sequence[float], g: Sequence[float]) -> PowerLawFit | None:
    """Least-squares fit of ``log g = log a + b log m`` over the points with m > 0 and g > 0
    (an instability of 0 has no logarithm: it is left out). None with fewer than two
    such points or a single distinct m."""
    x = np.asarray(m, dtype=np.float64)
    y = np.asarray(g, dtype=np.float64)
    keep = (x > 0) & (y > 0) & np.isfinite(x) & np.isfinite(y)
    x, y = np.log(x[keep]), np.log(y[keep])
    if len(x) < 2 or np.ptp(x) == 0:
        return None
    b, log_a = np.polyfit(x, y, 1)
    residual = y - (log_a + b * x)
    spread = float(np.sum((y - y.mean()) ** 2))
    r2 = None if len(x) < 3 else (1.0 - float(np.sum(residual**2)) / spread if spread > 0 else 1.0)
    return PowerLawFit(a=float(np.exp(log_a)), b=float(b), r2=r2, points=len(x))


def rises(m: Sequence[float], g: Sequence[float], tolerance: float = 0.0) -> list[tuple[float, float]]:
    """The consecutive sizes (m_i, m_{i+1}), m ascending, where the instability g grows by
    more than ``tolerance`` (relative): where a learning curve is not monotone."""
    order = np.argsort(np.asarray(m, dtype=np.float64), kind="stable")
    xs = [float(m[i]) for i in order]
    ys = [float(g[i]) for i in order]
    return [
        (xs[i], xs[i + 1])
        for i in range(len(xs) - 1)
        if math.isfinite(ys[i]) and math.isfinite(ys[i + 1]) and ys[i + 1] > ys[i] * (1 + tolerance) + 1e-15
    ]


def pareto_front(stability: Sequence[float | None], quality: Sequence[float | None]) -> list[int]:
    """Indices of the points no other point beats: none has stability and quality both at
    least as high and one of them higher (both axes: higher is better). Points with a
    missing or non-finite coordinate are never on the front. In input order."""
    points = [
        (i, float(s), float(q))
        for i, (s, q) in enumerate(zip(stability, quality, strict=True))
        if s is not None and q is not None and math.isfinite(s) and math.isfinite(q)
    ]
    front = []
    for i, s, q in points:
        dominated = any((s2 >= s and q2 >= q) and (s2 > s or q2 > q) for j, s2, q2 in points if j != i)
        if not dominated:
            front.append(i)
    return front
