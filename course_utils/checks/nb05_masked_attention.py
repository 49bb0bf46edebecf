"""Checks for notebook 05 (masked attention): 05.1 the causal mask, 05.2 masked softmax.

Masks are bool, True = may attend. A fully masked row gives all-zero weights, never NaN.

To add an exercise: define its cases, call and mistakes below, then append it to ``EXERCISES``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from course_utils import attention
from course_utils.checks._common import as_tensor, close, lengths_mask, random_mask, size
from course_utils.checks.core import Case, Exercise, Mistake, allclose_compare, generator, randn
from course_utils.checks.nb03_scaled_dot_product import MASK_MISTAKES_HINTS

NOTEBOOK = "05_masked_attention.ipynb"

# ----------------------------------------------------------------------------- 05.1 causal mask


def _causal_cases(seed: int) -> list[Case]:
    g = generator(seed)
    return [
        Case("T tokens", {"T": size(g, 3, 9)}),
        Case("one token (T = 1)", {"T": 1}),
        Case("two tokens (T = 2)", {"T": 2}),
        Case("a longer sequence", {"T": size(g, 10, 16)}),
    ]


def _causal_call(candidate, case: Case) -> dict[str, Tensor]:
    return {"mask": as_tensor(candidate(case.inputs["T"]), "causal_mask(T)")}


def _ones(T: int) -> Tensor:
    return torch.ones(T, T, dtype=torch.bool)


CAUSAL_MISTAKES = [
    Mistake(
        "diagonal excluded (torch.tril(..., diagonal=-1))",
        "a token may attend to itself: keep the diagonal, torch.tril(ones) with diagonal=0",
        lambda T: torch.tril(_ones(T), diagonal=-1),
    ),
    Mistake(
        "triu instead of tril (attends to the future, not the past)",
        "query i (row) may attend keys j <= i: the lower triangle, torch.tril",
        lambda T: torch.triu(_ones(T)),
    ),
    Mistake(
        "mask inverted (True marks the blocked future)",
        "True means MAY attend: return the allowed positions (lower triangle incl. the "
        "diagonal), not the blocked ones",
        lambda T: torch.triu(_ones(T), diagonal=1),
    ),
    Mistake(
        "float 0/1 mask instead of bool",
        "return a bool tensor (dtype=torch.bool); a float mask would be added to the scores",
        lambda T: torch.tril(torch.ones(T, T)),
    ),
    Mistake(
        "additive float mask (0 / -inf) instead of bool",
        "the course's masks are bool with True = may attend; build torch.tril(torch.ones(T, T, "
        "dtype=torch.bool))",
        lambda T: torch.zeros(T, T).masked_fill(~torch.tril(_ones(T)), float("-inf")),
    ),
]

CAUSAL = Exercise(
    id="05.1",
    title="Causal mask",
    points=1,
    notebook=NOTEBOOK,
    function="causal_mask",
    reference=attention.causal_mask,
    make_cases=_causal_cases,
    call=_causal_call,
    mistakes=CAUSAL_MISTAKES,
    compare=allclose_compare,  # exact for bool masks
    hint="a (T, T) bool tensor, True where key j <= query i: torch.tril(torch.ones(T, T, "
    "dtype=torch.bool))",
)

# ----------------------------------------------------------------------------- 05.2 masked softmax


def _masked_softmax_cases(seed: int) -> list[Case]:
    g = generator(seed)
    T, S = size(g, 3, 6), size(g, 7, 9)  # T != S
    B, H = size(g, 2, 3), size(g, 2, 3)
    huge = 1e4 + randn(g, B, T, S)
    return [
        Case(
            "(T, S) scores with a mask",
            {"scores": randn(g, T, S) * 2, "mask": random_mask(g, T, S)},
        ),
        Case(
            "heads (B, H, T, S), mask (T, S) broadcast",
            {"scores": randn(g, B, H, T, S) * 2, "mask": random_mask(g, T, S)},
        ),
        Case(
            "fully masked rows (expect zeros)",
            {"scores": randn(g, B, T, S) * 2, "mask": random_mask(g, B, T, S, full_rows=True)},
        ),
        Case(
            "key padding mask (B, 1, 1, S)",
            {"scores": randn(g, B, H, T, S), "mask": lengths_mask(g, B, S)[:, None, None, :]},
        ),
        Case("huge scores (about 1e4)", {"scores": huge, "mask": random_mask(g, B, T, S)}),
        Case(
            "nothing masked", {"scores": randn(g, T, S), "mask": torch.ones(T, S, dtype=torch.bool)}
        ),
    ]


def _masked_softmax_call(candidate, case: Case) -> dict[str, Tensor]:
    i = case.inputs
    return {"weights": as_tensor(candidate(i["scores"], i["mask"]), "masked_softmax(scores, mask)")}


def _filled(fill: float, invert: bool = False, dim: int = -1):
    def impl(scores: Tensor, mask: Tensor) -> Tensor:
        return torch.softmax(scores.masked_fill(mask if invert else ~mask, fill), dim=dim)

    return impl


def _naive_exp(scores: Tensor, mask: Tensor) -> Tensor:
    e = torch.exp(scores.masked_fill(~mask, float("-inf")))  # inf for scores above ~709
    total = e.sum(dim=-1, keepdim=True)
    return torch.where(total > 0, e / total, torch.zeros_like(e))  # empty rows handled


MASKED_SOFTMAX_MISTAKES = [
    Mistake(
        "mask applied after the softmax",
        MASK_MISTAKES_HINTS["after"],
        lambda s, m: torch.softmax(s, dim=-1) * m,
    ),
    Mistake(
        "masked scores filled with 0 instead of -inf", MASK_MISTAKES_HINTS["zero"], _filled(0.0)
    ),
    Mistake(
        "mask inverted (True treated as blocked)",
        MASK_MISTAKES_HINTS["inverted"],
        _filled(float("-inf"), invert=True),
    ),
    Mistake(
        "mask inverted (True treated as blocked)",
        MASK_MISTAKES_HINTS["inverted"],
        lambda s, m: attention.masked_softmax(s, ~m),
    ),
    Mistake("mask ignored", MASK_MISTAKES_HINTS["ignored"], lambda s, m: torch.softmax(s, dim=-1)),
    Mistake(
        "softmax over the wrong axis (dim=-2)",
        "normalise each query's row over the keys: dim=-1",
        lambda s, m: attention.masked_softmax(s, m, dim=-2),
    ),
    Mistake("NaN on fully masked rows", MASK_MISTAKES_HINTS["nan"], _filled(float("-inf"))),
    Mistake(
        "fully masked rows get uniform weights (finite fill such as -1e9)",
        MASK_MISTAKES_HINTS["uniform"],
        _filled(-1e9),
    ),
    Mistake(
        "exp without subtracting the max (overflow)",
        "exp(1e4) is inf: subtract each row's maximum over the allowed entries before exp "
        "(or fill with -inf and use a stable softmax)",
        _naive_exp,
    ),
]

MASKED_SOFTMAX = Exercise(
    id="05.2",
    title="Masked softmax",
    points=2,
    notebook=NOTEBOOK,
    function="masked_softmax",
    reference=attention.masked_softmax,
    make_cases=_masked_softmax_cases,
    call=_masked_softmax_call,
    mistakes=MASKED_SOFTMAX_MISTAKES,
    compare=close(),
    hint="scores.masked_fill(~mask, float('-inf')), a stable softmax over dim=-1, and rows with "
    "no allowed entry set to 0 (not NaN); masked entries get exactly 0",
)

EXERCISES = [CAUSAL, MASKED_SOFTMAX]  # append this notebook's later exercises here
