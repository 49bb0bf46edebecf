"""Checks for notebook 00 (start here): 00.1 a numerically stable softmax, 00.2 logsumexp.

To add an exercise: define its cases, call and mistakes below, then append it to ``EXERCISES``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from course_utils.checks._common import as_tensor, close, size
from course_utils.checks.core import Case, Exercise, Mistake, generator, randn
from course_utils.lessons.nb00_start_here import LESSON
from course_utils.modeling import attention

NOTEBOOK = LESSON.filename

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
    "keep the reduced dimension (as a size-1 dimension) so that each row's maximum and each "
    "row's sum broadcast along that row; without it they line up with the wrong axis"
)

SOFTMAX_MISTAKES = [
    Mistake(
        "exp without subtracting the max (overflow)",
        "exp(1e4) is inf even in float64, and inf / inf is NaN (exp(-1e4) underflows to "
        "0 / 0 the same way): subtract each row's maximum before the exponential; the "
        "result is unchanged mathematically",
        _naive,
    ),
    Mistake(
        "max subtracted over the whole tensor instead of per row",
        "x - x.max() shifts every row by the same number, so a row far below the largest "
        "one underflows to exp(...) = 0 and gives 0 / 0 = NaN: shift each row by its own "
        "maximum, taken along the last dimension",
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
    concepts=("softmax",),
    title="Numerically stable softmax",
    points=2,
    notebook=NOTEBOOK,
    function="softmax",
    reference=attention.softmax,
    make_cases=_softmax_cases,
    call=_softmax_call,
    mistakes=SOFTMAX_MISTAKES,
    compare=close(),
    forbids=(
        "torch.softmax",
        "torch.nn.functional.softmax",
        "torch.Tensor.softmax",
        "torch.log_softmax",
        "aten::_softmax",
        "aten::_log_softmax",
        "aten::_safe_softmax",
    ),
    hint=(
        "Try the row [1000, 1001] by hand: what does exp give, and what changes if you subtract "
        "the same number from every entry of a row (the softmax should not)? Then run a batch "
        "with extra dims and print result.sum(-1): does every row sum to 1, or did a row "
        "statistic line up with the wrong axis?"
    ),
)

# ----------------------------------------------------------------------------- 00.2 logsumexp


def _logsumexp_reference(x: Tensor) -> Tensor:
    """log(sum(exp(x))) over the last dimension, stably: (..., D) -> (...); -inf for a row of
    -inf (the log of an empty sum), never NaN."""
    return torch.logsumexp(x, dim=-1)


def _logsumexp_cases(seed: int) -> list[Case]:
    g = generator(seed)
    R, C = size(g, 2, 4), size(g, 5, 8)
    huge = 1e4 + randn(g, R, C)
    mixed = randn(g, R, C)
    mixed[0] += 1e4
    with_inf = randn(g, R, C) * 3
    with_inf[torch.rand(R, C, generator=g) < 0.3] = float("-inf")
    with_inf[:, size(g, 0, C - 1)] = 0.5
    empty_row = randn(g, R, C)
    empty_row[size(g, 0, R - 1)] = float("-inf")  # a row with nothing in it: log 0 = -inf
    return [
        Case("matrix (R, C)", {"x": randn(g, R, C) * 3}),
        Case("extra batch dims (2, 3, R, C)", {"x": randn(g, 2, 3, R, C) * 3}),
        Case("huge logits (about 1e4)", {"x": huge}),
        Case("very negative logits (about -1e4)", {"x": -huge}),
        Case("rows of very different scale (1e4 and 1)", {"x": mixed}),
        Case("-inf entries", {"x": with_inf}),
        Case("a row of only -inf (expect -inf, not NaN)", {"x": empty_row}),
        Case("float32 logits", {"x": randn(g, R, C, dtype=torch.float32) * 5}),
    ]


def _logsumexp_call(candidate, case: Case) -> dict[str, Tensor]:
    return {"logsumexp(x)": as_tensor(candidate(case.inputs["x"]), "logsumexp(x)")}


def _lse_naive(x: Tensor) -> Tensor:
    return torch.exp(x).sum(dim=-1).log()


def _lse_no_add_back(x: Tensor) -> Tensor:
    m = x.amax(dim=-1, keepdim=True)
    return torch.exp(x - m).sum(dim=-1).log()


def _lse_global_max(x: Tensor) -> Tensor:
    m = x.max()
    return m + torch.exp(x - m).sum(dim=-1).log()


def _lse_keepdim_added(x: Tensor) -> Tensor:
    m = x.amax(dim=-1, keepdim=True)  # (..., 1) added to (...,): broadcasts to (..., ...)
    return m + torch.exp(x - m).sum(dim=-1).log()


def _lse_keepdim_result(x: Tensor) -> Tensor:
    m = x.amax(dim=-1, keepdim=True)
    return m + torch.exp(x - m).sum(dim=-1, keepdim=True).log()


def _lse_nan_on_empty(x: Tensor) -> Tensor:
    m = x.amax(dim=-1, keepdim=True)  # -inf on an all -inf row: -inf - (-inf) = NaN
    return (m + torch.exp(x - m).sum(dim=-1, keepdim=True).log()).squeeze(-1)


def _lse_max(x: Tensor) -> Tensor:
    return x.amax(dim=-1)


LOGSUMEXP_MISTAKES = [  # NaN first: on a 1-D output any NaN hides the other values
    Mistake(
        "NaN on a row of only -inf",
        "on a row where every entry is -inf the maximum is -inf and x - m is -inf - (-inf) = NaN; "
        "the right answer is log 0 = -inf: where the maximum is not finite, shift by 0 instead",
        _lse_nan_on_empty,
    ),
    Mistake(
        "log(sum(exp(x))) without subtracting the max (overflow)",
        "exp(1e4) is inf, so the log of the sum is inf (and exp(-1e4) underflows to log 0 = "
        "-inf): pull the row maximum m out first, log sum exp(x) = m + log sum exp(x - m)",
        _lse_naive,
    ),
    Mistake(
        "the maximum is not added back",
        "log sum exp(x - m) is the log of the shifted sum; the identity is "
        "log sum exp(x) = m + log sum exp(x - m): add m back",
        _lse_no_add_back,
    ),
    Mistake(
        "max taken over the whole tensor instead of per row",
        "one global maximum leaves a row far below it with exp(...) = 0 and log 0 = -inf: "
        "take each row's own maximum over the last dimension",
        _lse_global_max,
    ),
    Mistake(
        "a kept dimension broadcast the result to the wrong shape",
        "the row maximum kept as (..., 1) and the log of the sum reduced to (...,) broadcast "
        "against each other: reduce both the same way so the result has shape (...,)",
        _lse_keepdim_added,
    ),
    Mistake(
        "result keeps the reduced dimension (shape (..., 1))",
        "logsumexp reduces the last dimension: return shape (...,), one number per row",
        _lse_keepdim_result,
    ),
    Mistake(
        "reduced over the wrong dimension",
        "one number per row: reduce the last dimension (dim=-1)",
        lambda x: torch.logsumexp(x, dim=0),
    ),
    Mistake(
        "returned the row maximum only",
        "max(x) is only a lower bound of log sum exp(x); add log sum exp(x - max)",
        _lse_max,
    ),
]

LOGSUMEXP = Exercise(
    id="00.2",
    concepts=("log-sum-exp",),
    title="Stable logsumexp",
    points=1,
    notebook=NOTEBOOK,
    function="logsumexp",
    reference=_logsumexp_reference,
    make_cases=_logsumexp_cases,
    call=_logsumexp_call,
    mistakes=LOGSUMEXP_MISTAKES,
    compare=close(),
    forbids=(
        "torch.logsumexp",
        "torch.Tensor.logsumexp",
        "torch.log_softmax",
        "aten::logsumexp",
        "aten::_log_softmax",
    ),
    hint=(
        "Compare with hand-worked rows: [0, 0] gives log 2, [1e4, 1e4] gives 1e4 + log 2. Where "
        "does yours overflow or lose the answer? Which number can come out of the sum so that "
        "every exp stays at most 1, and how does it go back in? What does a row of only -inf give"
        " in yours, and is the result one number per row?"
    ),
)

EXERCISES = [SOFTMAX, LOGSUMEXP]
