"""Checks for notebook 00 (start here): 00.1 a numerically stable softmax.

To add an exercise: define its cases, call and mistakes below, then append it to ``EXERCISES``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from course_utils import attention
from course_utils.checks._common import as_tensor, close, size
from course_utils.checks.core import Case, Exercise, Mistake, generator, randn

NOTEBOOK = "00_start_here.ipynb"

# ----------------------------------------------------------------------------- 00.1 softmax


def _softmax_cases(seed: int) -> list[Case]:
    g = generator(seed)
    n = size(g, 3, 6)
    R, C = size(g, 2, 4), size(g, 5, 8)  # non-square from here on: R != C
    huge = 1e4 + randn(g, R, C)
    mixed = randn(g, R, C)
    mixed[0] += 1e4  # one row far above the others: a global max underflows the rest
    with_inf = randn(g, R, C) * 3
    with_inf[torch.rand(R, C, generator=g) < 0.3] = float("-inf")
    with_inf[:, size(g, 0, C - 1)] = 0.5  # every row keeps a finite entry
    return [
        Case("square matrix", {"x": randn(g, n, n) * 3}),
        Case("extra batch dims (2, 3, T, C)", {"x": randn(g, 2, 3, R, C) * 3}),
        Case("huge logits (about 1e4)", {"x": huge}),
        Case("very negative logits (about -1e4)", {"x": -huge}),
        Case("rows of very different scale (1e4 and 1)", {"x": mixed}),
        Case("-inf entries", {"x": with_inf}),
        Case("one column", {"x": randn(g, R, 1)}),
        Case("float32 logits", {"x": randn(g, R, C, dtype=torch.float32) * 5}),
    ]


def _softmax_call(candidate, case: Case) -> dict[str, Tensor]:
    return {"softmax(x)": as_tensor(candidate(case.inputs["x"]), "softmax(x)")}


def _naive(x: Tensor) -> Tensor:
    e = torch.exp(x)
    return e / e.sum(dim=-1, keepdim=True)


def _global_max(x: Tensor) -> Tensor:
    e = torch.exp(x - x.max())
    return e / e.sum(dim=-1, keepdim=True)


def _over(dim: int):
    def softmax(x: Tensor) -> Tensor:
        e = torch.exp(x - x.amax(dim=dim, keepdim=True))
        return e / e.sum(dim=dim, keepdim=True)

    return softmax


def _max_no_keepdim(x: Tensor) -> Tensor:
    e = torch.exp(x - x.max(dim=-1).values)
    return e / e.sum(dim=-1, keepdim=True)


def _sum_no_keepdim(x: Tensor) -> Tensor:
    e = torch.exp(x - x.max(dim=-1, keepdim=True).values)
    return e / e.sum(dim=-1)


def _not_normalised(x: Tensor) -> Tensor:
    return torch.exp(x - x.max(dim=-1, keepdim=True).values)


def _log_softmax(x: Tensor) -> Tensor:
    z = x - x.max(dim=-1, keepdim=True).values
    return z - torch.exp(z).sum(dim=-1, keepdim=True).log()


_KEEPDIM = (
    "keep the reduced dimension so it broadcasts along each row: "
    "x.max(dim=-1, keepdim=True).values and e.sum(dim=-1, keepdim=True)"
)

SOFTMAX_MISTAKES = [
    Mistake(
        "exp without subtracting the max (overflow)",
        "exp(1e4) is inf even in float64, and inf / inf is NaN (exp(-1e4) underflows to "
        "0 / 0 the same way): subtract each row's maximum first, "
        "x - x.max(dim=-1, keepdim=True).values; the result is unchanged mathematically",
        _naive,
    ),
    Mistake(
        "max subtracted over the whole tensor instead of per row",
        "x - x.max() shifts every row by the same number, so a row far below the largest "
        "one underflows to exp(...) = 0 and gives 0 / 0 = NaN: take the max of each row, "
        "x.max(dim=-1, keepdim=True).values",
        _global_max,
    ),
    Mistake(
        "softmax over the wrong dimension (dim=0)",
        "each row (the last dimension) must sum to 1: reduce over dim=-1, not dim=0",
        _over(0),
    ),
    Mistake(
        "softmax over dim=1 instead of dim=-1",
        "dim=1 is the last dimension only for 2-D inputs; with extra batch dimensions "
        "(..., C) reduce over dim=-1",
        _over(1),
    ),
    Mistake("max taken without keepdim=True", _KEEPDIM, _max_no_keepdim),
    Mistake("sum taken without keepdim=True", _KEEPDIM, _sum_no_keepdim),
    Mistake(
        "not normalised (no division by the sum)",
        "divide exp(x - max) by its sum over the last dimension so each row sums to 1",
        _not_normalised,
    ),
    Mistake(
        "returned log-softmax instead of softmax",
        "return exp(x - max) / sum(exp(x - max)), not its logarithm",
        _log_softmax,
    ),
]

SOFTMAX = Exercise(
    id="00.1",
    title="Numerically stable softmax",
    points=2,
    notebook=NOTEBOOK,
    function="softmax",
    reference=attention.softmax,
    make_cases=_softmax_cases,
    call=_softmax_call,
    mistakes=SOFTMAX_MISTAKES,
    compare=close(),
    hint="softmax(x) = exp(x - m) / sum(exp(x - m)) with m = x.max(dim=-1, keepdim=True).values, "
    "all along the last dimension; each row of the result sums to 1",
)

EXERCISES = [SOFTMAX]  # append this notebook's later exercises here
