"""Checks for notebook 03 (scaled dot-product attention): 03.1 scaled_dot_product_attention.

Masks are bool, True = may attend; a fully masked query row must give zero weights and a zero
output (never NaN), as everywhere in the course.

To add an exercise: define its cases, call and mistakes below, then append it to ``EXERCISES``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from course_utils import attention
from course_utils.checks._common import (
    as_pair,
    close,
    distinct_sizes,
    lengths_mask,
    random_mask,
    size,
)
from course_utils.checks.core import Case, Exercise, Mistake, generator, randn

NOTEBOOK = "03_scaled_dot_product.ipynb"

# ----------------------------------------------------------------------------- 03.1 sdpa


def _sdpa_cases(seed: int) -> list[Case]:
    g = generator(seed)
    # T, S, Dk, Dv all different (and Dk >= 5 so sqrt(T) is never Dk): a scale taken from the
    # wrong size, or a softmax over the wrong axis, changes the numbers
    Dk = size(g, 5, 9)
    T, S, Dv = (s if s < Dk else s + 1 for s in distinct_sizes(g, 3, 2, 8))
    B, H = size(g, 2, 3), size(g, 2, 3)

    def qkv(*batch: int, T: int = T, S: int = S, dtype: torch.dtype = torch.float64) -> dict:
        return {
            "q": randn(g, *batch, T, Dk, dtype=dtype),
            "k": randn(g, *batch, S, Dk, dtype=dtype),
            "v": randn(g, *batch, S, Dv, dtype=dtype),
        }

    return [
        Case("batch (B, T, D), T != S, Dk != Dv", qkv(B)),
        Case(
            "heads (B, H, T, D) with a bool mask (T, S)",
            {**qkv(B, H), "attn_mask": random_mask(g, T, S)},
        ),
        Case(
            "fully masked query rows (expect zeros)",
            {**qkv(B, H), "attn_mask": random_mask(g, B, 1, T, S, full_rows=True)},
        ),
        Case(
            "key padding mask (B, 1, 1, S)",
            {**qkv(B, H), "attn_mask": lengths_mask(g, B, S)[:, None, None, :]},
        ),
        Case(
            "causal self-attention (T == S)",
            {**qkv(B, T=T, S=T), "attn_mask": torch.ones(T, T, dtype=torch.bool).tril()},
        ),
        Case("no batch dims (T, D)", qkv()),
        Case("one query, one key (T = S = 1)", qkv(B, T=1, S=1)),
        Case("float32 inputs", qkv(B, dtype=torch.float32)),
    ]


def _sdpa_call(candidate, case: Case) -> dict[str, Tensor]:
    i = case.inputs
    if "attn_mask" in i:
        result = candidate(i["q"], i["k"], i["v"], attn_mask=i["attn_mask"])
    else:
        result = candidate(i["q"], i["k"], i["v"])
    out, weights = as_pair(result, "scaled_dot_product_attention", ("output", "weights"))
    return {"output": out, "weights": weights}


def sdpa_variant(*, scale=None, softmax_dim: int = -1, weigh=None, scale_after: bool = False):
    """A scaled dot-product attention with one thing changed (for the mistakes).

    scale(q, v) -> the factor the scores are multiplied by; weigh(scores, mask) -> weights.
    """

    def impl(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None = None):
        factor = 1 / math.sqrt(q.shape[-1]) if scale is None else scale(q, v)
        scores = q @ k.transpose(-2, -1)
        if not scale_after:
            scores = scores * factor
        if weigh is not None:
            weights = weigh(scores, attn_mask)
        elif attn_mask is None:
            weights = torch.softmax(scores, dim=softmax_dim)
        else:
            weights = attention.masked_softmax(scores, attn_mask, dim=softmax_dim)
        if scale_after:
            weights = weights * factor
        return weights @ v, weights

    return impl


def _masked(fill: float, invert: bool = False):
    def weigh(scores: Tensor, mask: Tensor | None) -> Tensor:
        if mask is not None:
            scores = scores.masked_fill(mask if invert else ~mask, fill)
        return torch.softmax(scores, dim=-1)

    return weigh


def _after(scores: Tensor, mask: Tensor | None) -> Tensor:
    weights = torch.softmax(scores, dim=-1)
    return weights if mask is None else weights * mask


def _inverted_safe(scores: Tensor, mask: Tensor | None) -> Tensor:
    return attention.masked_softmax(scores, None if mask is None else ~mask)


def _swapped_outputs(q, k, v, attn_mask=None):
    out, weights = attention.scaled_dot_product_attention(q, k, v, attn_mask)
    return weights, out


# Mistakes a mask can cause, shared with later notebooks' checks (05.2, 06.3).
MASK_MISTAKES_HINTS = {
    "after": (
        "mask before the softmax: fill blocked scores with float('-inf'), then softmax; "
        "zeroing weights afterwards leaves each row summing to less than 1"
    ),
    "zero": (
        "a blocked score of 0 still gets weight exp(0) > 0: fill blocked positions with "
        "float('-inf')"
    ),
    "inverted": (
        "the mask is True where a query MAY attend: block where it is False, "
        "scores.masked_fill(~mask, float('-inf'))"
    ),
    "ignored": "blocked positions (mask False) must get zero weight",
    "nan": (
        "a row whose keys are all blocked is all -inf and softmax gives 0/0 = NaN: make "
        "such rows zero (e.g. torch.nan_to_num(weights) or torch.where(mask.any(-1, "
        "keepdim=True), weights, 0))"
    ),
    "uniform": (
        "a finite fill like -1e9 makes a fully blocked row uniform (1/S everywhere); "
        "the course convention is zeros: zero the weights of rows with no allowed key"
    ),
}

SDPA_MISTAKES = [
    Mistake(
        "missing 1/sqrt(d_k) scaling",
        "divide the scores q @ k^T by sqrt(d_k) = sqrt(q.shape[-1]) before the softmax",
        sdpa_variant(scale=lambda q, v: 1.0),
    ),
    Mistake(
        "scaled by 1/sqrt(d_v) instead of 1/sqrt(d_k)",
        "the scale comes from the query/key width d_k = q.shape[-1], not the value width",
        sdpa_variant(scale=lambda q, v: 1 / math.sqrt(v.shape[-1])),
    ),
    Mistake(
        "scaled by 1/d_k instead of 1/sqrt(d_k)",
        "divide by the square root of d_k: math.sqrt(q.shape[-1])",
        sdpa_variant(scale=lambda q, v: 1 / q.shape[-1]),
    ),
    Mistake(
        "multiplied by sqrt(d_k) instead of dividing",
        "scores = q @ k^T / sqrt(d_k): divide, do not multiply",
        sdpa_variant(scale=lambda q, v: math.sqrt(q.shape[-1])),
    ),
    Mistake(
        "scaled by the wrong size (q.shape[1] instead of q.shape[-1])",
        "d_k is the last dimension, q.shape[-1]; q.shape[1] is the sequence length for "
        "(B, T, D) inputs and the number of heads for (B, H, T, D)",
        sdpa_variant(scale=lambda q, v: 1 / math.sqrt(q.shape[1])),
    ),
    Mistake(
        "softmax over the query axis (dim=-2) instead of the keys (dim=-1)",
        "each query's weights over the keys must sum to 1: softmax(scores, dim=-1) on (..., T, S)",
        sdpa_variant(softmax_dim=-2),
    ),
    Mistake(
        "scaling applied after the softmax",
        "scale the scores before the softmax; scaling the weights afterwards breaks their sum to 1",
        sdpa_variant(scale_after=True),
    ),
    Mistake(
        "mask applied after the softmax", MASK_MISTAKES_HINTS["after"], sdpa_variant(weigh=_after)
    ),
    Mistake(
        "masked scores filled with 0 instead of -inf",
        MASK_MISTAKES_HINTS["zero"],
        sdpa_variant(weigh=_masked(0.0)),
    ),
    Mistake(
        "mask inverted (True treated as blocked)",
        MASK_MISTAKES_HINTS["inverted"],
        sdpa_variant(weigh=_masked(float("-inf"), invert=True)),
    ),
    Mistake(
        "mask inverted (True treated as blocked)",
        MASK_MISTAKES_HINTS["inverted"],
        sdpa_variant(weigh=_inverted_safe),
    ),
    Mistake(
        "mask ignored",
        MASK_MISTAKES_HINTS["ignored"],
        sdpa_variant(weigh=lambda s, m: torch.softmax(s, dim=-1)),
    ),
    Mistake(
        "NaN on fully masked rows",
        MASK_MISTAKES_HINTS["nan"],
        sdpa_variant(weigh=_masked(float("-inf"))),
    ),
    Mistake(
        "fully masked rows get uniform weights (finite fill such as -1e9)",
        MASK_MISTAKES_HINTS["uniform"],
        sdpa_variant(weigh=_masked(-1e9)),
    ),
    Mistake(
        "returned (weights, output) instead of (output, weights)",
        "return the output first, then the weights",
        _swapped_outputs,
    ),
]

SDPA = Exercise(
    id="03.1",
    title="Scaled dot-product attention",
    points=3,
    notebook=NOTEBOOK,
    function="scaled_dot_product_attention",
    reference=attention.scaled_dot_product_attention,
    make_cases=_sdpa_cases,
    call=_sdpa_call,
    mistakes=SDPA_MISTAKES,
    compare=close(),
    hint="scores = q @ k.transpose(-2, -1) / sqrt(d_k) (..., T, S); masked_fill(~mask, -inf); "
    "softmax over dim=-1 with fully masked rows set to 0; output = weights @ v (..., T, Dv)",
)

EXERCISES = [SDPA]  # append this notebook's later exercises (03.2) here
