"""Growth exponents from measurements: how time or memory scales with the sequence length.

Used by notebooks 07 and 11 (``nb07.fit_exponent``, ``nb11.fit_exponent``) and the attention
benchmark.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

__all__ = ["fit_exponent"]


def fit_exponent(curve: Mapping[int, float], last: int = 3) -> float:
    """Slope p of log(y) against log(n), least squares over the ``last`` largest n: y ~ n^p
    (2 for O(n^2), 1 for O(n)). ``curve`` maps n to a positive measurement (values below
    1e-12 count as 1e-12); fewer than two points give NaN."""
    ns = sorted(curve)[-last:]
    if len(ns) < 2:
        return float("nan")
    xs = [math.log(n) for n in ns]
    ys = [math.log(max(curve[n], 1e-12)) for n in ns]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
