"""Checks for notebook 03 (scaled dot-product attention): 03.1 scaled_dot_product_attention,
03.2 attention with learned query, key and value projections (slides 27-29).

Masks are bool, True = may attend; a fully masked query row must give zero weights and a zero
output (never NaN), as everywhere in the course.

To add an exercise: define its cases, call and mistakes below, then append it to ``EXERCISES``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from course_utils.checks import mistakes
from course_utils.checks._common import (
    FUSED_ATTENTION_OPS,
    as_pair,
    close,
    compare_or_raised,
    distinct_sizes,
    lengths_mask,
    raised,
    random_mask,
    size,
)
from course_utils.checks.core import Case, Exercise, Mistake, Outputs, generator, randn
from course_utils.lessons.nb03_scaled_dot_product import LESSON
from course_utils.modeling import attention

NOTEBOOK = LESSON.filename

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


# Mistakes a mask can cause, shared with later notebooks' checks (05.3, 06.4).
SDPA_MISTAKES = [
    mistakes.MISSING_SCALE(
        sdpa_variant(scale=lambda q, v: 1.0),
        hint="divide the scores q @ k^T by sqrt(d_k) = sqrt(q.shape[-1]) before the softmax",
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
    mistakes.SOFTMAX_OVER_QUERIES(
        sdpa_variant(softmax_dim=-2),
        hint="each query's weights over the keys must sum to 1: softmax(scores, dim=-1) on (..., T, S)",
    ),
    Mistake(
        "scaling applied after the softmax",
        "scale the scores before the softmax; scaling the weights afterwards breaks their sum to 1",
        sdpa_variant(scale_after=True),
    ),
    mistakes.MASK_AFTER_SOFTMAX(sdpa_variant(weigh=_after)),
    mistakes.MASK_FILLED_WITH_ZERO(sdpa_variant(weigh=_masked(0.0))),
    mistakes.MASK_INVERTED(sdpa_variant(weigh=_masked(float("-inf"), invert=True))),
    mistakes.MASK_INVERTED(sdpa_variant(weigh=_inverted_safe)),
    mistakes.MASK_IGNORED(sdpa_variant(weigh=lambda s, m: torch.softmax(s, dim=-1))),
    mistakes.MASKED_ROW_NAN(sdpa_variant(weigh=_masked(float("-inf")))),
    mistakes.MASKED_ROW_UNIFORM(sdpa_variant(weigh=_masked(-1e9))),
    Mistake(
        "returned (weights, output) instead of (output, weights)",
        "return the output first, then the weights",
        _swapped_outputs,
    ),
]

SDPA = Exercise(
    id="03.1",
    concepts=("scaled dot-product attention",),
    title="Scaled dot-product attention",
    points=3,
    notebook=NOTEBOOK,
    function="scaled_dot_product_attention",
    reference=attention.scaled_dot_product_attention,
    make_cases=_sdpa_cases,
    call=_sdpa_call,
    mistakes=SDPA_MISTAKES,
    compare=close(),
    forbids=FUSED_ATTENTION_OPS,
    hint=(
        "Work a tiny case by hand (one query, two keys of width 4): what are the scores, and "
        "which factor keeps their spread independent of d_k? Print your weights: does each row "
        "sum to 1 over the keys, are masked keys at 0, and what does a row with every key masked "
        "give (zeros, never NaN)? Check the shapes with T != S and d_k != d_v."
    ),
)

# ----------------------------------------------------------------------------- 03.2 q/k/v projections


def _check_qkv_shapes(queries: Tensor, x: Tensor, W_q: Tensor, W_k: Tensor, W_v: Tensor) -> None:
    if any(W.ndim != 2 for W in (W_q, W_k, W_v)):
        raise ValueError("expected 2-D projection matrices W_q, W_k, W_v")
    if W_k.shape[0] != x.shape[-1] or W_v.shape[0] != x.shape[-1]:
        raise ValueError(
            f"expected W_k (Din, Dk) and W_v (Din, Dv) with Din == x.shape[-1] = {x.shape[-1]}, "
            f"got W_k {tuple(W_k.shape)} and W_v {tuple(W_v.shape)}"
        )
    if W_q.shape[0] != queries.shape[-1] or W_q.shape[1] != W_k.shape[1]:
        raise ValueError(
            f"expected W_q of shape (Dq, Dk) with Dq == queries.shape[-1] = {queries.shape[-1]} "
            f"and Dk == W_k.shape[1] = {W_k.shape[1]}, got {tuple(W_q.shape)}"
        )


def qkv_attention(
    queries: Tensor, x: Tensor, W_q: Tensor, W_k: Tensor, W_v: Tensor
) -> tuple[Tensor, Tensor]:
    """Attention with learned projections: Q = queries W_q, K = x W_k, V = x W_v.

    queries: (..., T, Dq) query inputs; x: (..., S, Din) data vectors; W_q: (Dq, Dk);
    W_k: (Din, Dk); W_v: (Din, Dv). Returns (output (..., T, Dv), weights (..., T, S)) of
    softmax(Q K^T / sqrt(Dk)) V.
    """
    _check_qkv_shapes(queries, x, W_q, W_k, W_v)
    q = queries @ W_q  # (..., T, Dk): what each query looks for
    k = x @ W_k  # (..., S, Dk): what each data vector is matched on
    v = x @ W_v  # (..., S, Dv): what each data vector hands back
    return attention.scaled_dot_product_attention(q, k, v)


def _qkv(project_q=True, keys="k", values="v", scale="dk", transpose=False, dim=-1):
    """A classic wrong answer built from the right one by changing one choice."""

    def impl(queries, x, W_q, W_k, W_v):
        Wq, Wk, Wv = (W_q.T, W_k.T, W_v.T) if transpose else (W_q, W_k, W_v)
        q = queries @ {True: Wq, "Wk": Wk}[project_q] if project_q else queries
        k, v = (x if p == "x" else x @ {"k": Wk, "v": Wv}[p] for p in (keys, values))
        width = {"dk": q.shape[-1], "din": x.shape[-1], "d": q.shape[-1] ** 2}
        factor = 1.0 if scale is None else 1 / math.sqrt(width[scale])
        w = torch.softmax(q @ k.transpose(-2, -1) * factor, dim=dim)
        return w @ v, w

    return impl


QKV_MISTAKES = [
    Mistake(
        "keys and values swapped",
        "the keys (x projected by W_k) are what a query is compared with; the values (x "
        "projected by W_v) are what comes back. You used W_v for the scores and W_k for the "
        "output.",
        _qkv(keys="v", values="k"),
    ),
    Mistake(
        "queries not projected",
        "the query inputs are projected too, by W_q, before they are compared with the keys.",
        _qkv(project_q=False),
    ),
    Mistake(
        "queries projected with W_k instead of W_q",
        "queries have their own projection W_q (Dq, Dk); W_k projects the data vectors x.",
        _qkv(project_q="Wk"),
    ),
    Mistake(
        "missing 1/sqrt(d) scaling",
        "divide the scores Q @ K^T by sqrt(Dk) before the softmax (Dk = W_k.shape[1]).",
        _qkv(scale=None),
    ),
    Mistake(
        "scaled by sqrt(Din) instead of sqrt(Dk)",
        "the scale is 1/sqrt(Dk), the width of the projected queries and keys that are "
        "multiplied, not the width Din of the data vectors x.",
        _qkv(scale="din"),
    ),
    Mistake(
        "scaled by 1/d instead of 1/sqrt(d)",
        "the variance of q . k is Dk, so its standard deviation is sqrt(Dk): divide by "
        "sqrt(Dk), not Dk.",
        _qkv(scale="d"),
    ),
    Mistake(
        "values not projected (V = x)",
        "the values are a second projection of the data (by W_v), not x itself.",
        _qkv(values="x"),
    ),
    Mistake(
        "keys not projected (K = x)",
        "the keys are a projection of the data (by W_k), not x itself.",
        _qkv(keys="x"),
    ),
    Mistake(
        "projection matrices transposed",
        "each W is stored (input width, output width): it multiplies its input from the "
        "right as it is, without a transpose.",
        _qkv(transpose=True),
    ),
    Mistake(
        "softmax over the queries instead of the keys",
        "each query's weights over the S data vectors must sum to 1: softmax over the last "
        "dimension.",
        _qkv(dim=-2),
    ),
]


def _qkv_cases(seed: int) -> list[Case]:
    """The first case is square (Dq = Din = Dk = Dv) so every classic mistake can be named."""
    gen = generator(seed)
    specs = [  # name, batch dims, T, S, Dq, Din, Dk, Dv
        ("square, one batch dim", (2,), 3, 5, 4, 4, 4, 4),
        ("Dq != Din != Dk != Dv, T != S", (2,), 4, 6, 3, 5, 6, 7),
        ("no batch dims", (), 2, 5, 4, 6, 5, 3),
        ("two batch dims", (2, 3), 3, 4, 2, 5, 6, 3),
        ("one query", (3,), 1, 7, 5, 4, 8, 5),
    ]
    return [
        Case(
            name,
            {
                "queries": randn(gen, *batch, T, Dq),
                "x": randn(gen, *batch, S, Din),
                "W_q": randn(gen, Dq, Dk),
                "W_k": randn(gen, Din, Dk),
                "W_v": randn(gen, Din, Dv),
            },
        )
        for name, batch, T, S, Dq, Din, Dk, Dv in specs
    ]


def _qkv_call(candidate, case: Case) -> Outputs:
    """Run ``candidate(queries, x, W_q, W_k, W_v)``, which should return ``(output, weights)``."""
    i = case.inputs
    try:
        result = candidate(i["queries"], i["x"], i["W_q"], i["W_k"], i["W_v"])
    except NotImplementedError:  # a RuntimeError too: the stub, "not attempted"
        raise
    except RuntimeError as exc:  # shape mismatches from torch
        return raised(exc)
    if isinstance(result, (tuple, list)) and len(result) == 2:
        out, weights = result
        return {"output": torch.as_tensor(out), "weights": torch.as_tensor(weights)}
    return {
        "output": torch.as_tensor(result if not isinstance(result, (tuple, list)) else result[0])
    }


def _qkv_compare(case: Case, got: Outputs, expected: Outputs) -> str | None:
    """Output and weights within tolerance; a missing ``weights`` says what to return."""
    if "weights" in expected and "output" in got and "weights" not in got:
        return (
            f"case '{case.name}': qkv_attention should return a tuple (output, weights), "
            "like scaled_dot_product_attention"
        )
    return compare_or_raised(case, got, expected)


QKV = Exercise(
    id="03.2",
    title="Attention with learned query, key and value projections",
    points=3,
    notebook=NOTEBOOK,
    function="qkv_attention",
    reference=qkv_attention,
    make_cases=_qkv_cases,
    call=_qkv_call,
    mistakes=QKV_MISTAKES,
    compare=_qkv_compare,
    hint=(
        "Which input do the queries come from, and which the keys and values? Print the shape "
        "after each projection: (..., T, Dk), (..., S, Dk) and (..., S, Dv). Which width sets the"
        " scale, the input's or the keys'? Your function of 03.1 does the rest."
    ),
)

EXERCISES = [SDPA, QKV]
