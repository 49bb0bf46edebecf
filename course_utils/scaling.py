"""Power laws from measurements: how time or memory grows with the sequence length (notebooks
07 and 11, the attention benchmark), and how a model's loss falls with its size or its training
compute (notebook 11's section 7, :mod:`course_utils.lessons.nb11_attention_at_scale.scaling_sweep`).

    fit_exponent({128: t1, 256: t2, 512: t3})       # y ~ n^p: p = 2 for O(n^2)
    a, alpha = fit_power_law(params, losses)         # L(N) ~ a * N^(-alpha)
    c, a, alpha = fit_power_law_with_floor(params, losses)   # L(N) ~ c + a * N^(-alpha)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

__all__ = ["fit_exponent", "fit_power_law", "fit_power_law_with_floor", "power_law"]


def fit_exponent(curve: Mapping[int, float], last: int = 3) -> float:
    """Slope p of log(y) against log(n), least squares over the ``last`` largest n: y ~ n^p
    (2 for O(n^2), 1 for O(n)). ``curve`` maps n to a positive measurement (values below
    1e-12 count as 1e-12); fewer than two points give NaN."""
    ns = sorted(curve)[-last:]
    if len(ns) < 2:
        return float("nan")
    xs = [math.log(n) for n in ns]
    ys = [math.log(max(curve[n], 1e-12)) for n in ns]
    return _slope(xs, ys)[0]


def _slope(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares line y = intercept + slope * x: ``(slope, intercept)``."""
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return slope, my - slope * mx


def _checked(xs: Sequence[float], ys: Sequence[float], what: str) -> None:
    if len(xs) != len(ys):
        raise ValueError(f"expected as many xs as ys, got {len(xs)} and {len(ys)}")
    if len(set(xs)) < 2:
        raise ValueError(f"{what} needs at least two different xs, got {list(xs)}")
    bad = [v for v in (*xs, *ys) if not (v > 0 and math.isfinite(v))]
    if bad:
        raise ValueError(f"{what} works on logarithms: every x and y must be > 0, got {bad[:3]}")


def power_law(x: float, a: float, alpha: float, floor: float = 0.0) -> float:
    """``floor + a * x ** (-alpha)``: the curve :func:`fit_power_law` (``floor=0``) and
    :func:`fit_power_law_with_floor` fit."""
    return floor + a * x ** (-alpha)


def fit_power_law(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Fit ``y ~ a * x^(-alpha)`` by least squares in log space: ``(a, alpha)``.

    A straight line ``log y = log a - alpha log x``, so ``alpha > 0`` means y falls as x grows
    (loss against parameters: Kaplan et al. 2020 find alpha_N ~ 0.076). Every x and y must be
    positive; at least two different xs. Least squares on the logarithms weighs each point by
    its relative error, as a log-log plot shows it.
    """
    _checked(xs, ys, "a power-law fit")
    slope, intercept = _slope([math.log(x) for x in xs], [math.log(y) for y in ys])
    return math.exp(intercept), -slope


def fit_power_law_with_floor(
    xs: Sequence[float], ys: Sequence[float], grid: int = 400
) -> tuple[float, float, float]:
    """Fit ``y ~ c + a * x^(-alpha)`` with an irreducible term ``0 <= c < min(y)``:
    ``(c, a, alpha)``.

    For each ``c`` on a grid of ``grid`` values in ``[0, min(y))`` the rest is
    :func:`fit_power_law` of ``y - c``; the ``c`` with the smallest squared error of ``y``
    itself wins. Three parameters need at least three different xs, and with few points the
    floor is poorly determined (many ``(c, alpha)`` pairs fit about as well): read it as a
    hint that the curve bends, not as a measurement of the data's entropy.
    """
    _checked(xs, ys, "a power-law fit with a floor")
    if len(set(xs)) < 3:
        raise ValueError(f"three parameters need at least three different xs, got {list(xs)}")
    top = min(ys)
    best: tuple[float, float, float, float] | None = None
    for i in range(grid):
        c = top * i / grid
        a, alpha = fit_power_law(xs, [y - c for y in ys])
        err = sum((power_law(x, a, alpha, c) - y) ** 2 for x, y in zip(xs, ys))
        if best is None or err < best[0]:
            best = (err, c, a, alpha)
    assert best is not None
    return best[1], best[2], best[3]


def local_slopes(xs: Sequence[float], ys: Sequence[float]) -> list[float]:
    """The log-log slope between each pair of neighbouring points (sorted by x), as exponents:
    ``-d log y / d log x``. A pure power law ``a x^-alpha`` gives ``alpha`` for every pair; a
    curve that bends towards a floor gives slopes that shrink as x grows."""
    _checked(xs, ys, "local slopes")
    pts = sorted(zip(xs, ys))
    return [
        -(math.log(y1) - math.log(y0)) / (math.log(x1) - math.log(x0))
        for (x0, y0), (x1, y1) in zip(pts, pts[1:])
    ]


def residuals(
    xs: Sequence[float], ys: Sequence[float], a: float, alpha: float, floor: float = 0.0
) -> list[float]:
    """Measured minus fitted, ``y - power_law(x, a, alpha, floor)``, in the order of ``xs``."""
    return [y - power_law(x, a, alpha, floor) for x, y in zip(xs, ys)]


def squared_error(
    xs: Sequence[float], ys: Sequence[float], a: float, alpha: float, floor: float = 0.0
) -> float:
    """Sum of squared residuals of a fitted curve (in the units of ``ys``)."""
    return sum(r * r for r in residuals(xs, ys, a, alpha, floor))


def jackknife_exponents(
    xs: Sequence[float], ys: Sequence[float], with_floor: bool = False
) -> list[float]:
    """The exponent refitted with each point left out in turn (leave-one-out): its spread says
    how much one point decides the exponent. Needs one more point than the fit's parameters."""
    need = 4 if with_floor else 3
    if len(xs) < need:
        raise ValueError(f"a jackknife of this fit needs at least {need} points, got {len(xs)}")
    out = []
    for i in range(len(xs)):
        sub_x = [x for j, x in enumerate(xs) if j != i]
        sub_y = [y for j, y in enumerate(ys) if j != i]
        out.append(
            fit_power_law_with_floor(sub_x, sub_y)[2]
            if with_floor
            else fit_power_law(sub_x, sub_y)[1]
        )
    return out


__all__ += ["local_slopes", "residuals", "squared_error", "jackknife_exponents"]
