"""Check for notebook 03, exercise 03.2: attention with learned key and value projections.

The student writes ``kv_attention(q, x, W_k, W_v)``: the data vectors ``x`` are projected
twice, to keys ``K = x W_k`` (what a query is matched against) and values ``V = x W_v``
(what comes back), then ``softmax(q K^T / sqrt(Dk)) V`` (slides 27-29).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from course_utils.attention import scaled_dot_product_attention
from course_utils.checks._common import compare_or_raised, raised
from course_utils.checks.core import (
    Case,
    Exercise,
    Mistake,
    Outputs,
    generator,
    randn,
)

NOTEBOOK = "03_scaled_dot_product.ipynb"


def _check_shapes(q: Tensor, x: Tensor, W_k: Tensor, W_v: Tensor) -> None:
    if W_k.ndim != 2 or W_v.ndim != 2 or W_k.shape[0] != x.shape[-1] or W_v.shape[0] != x.shape[-1]:
        raise ValueError(
            f"expected W_k of shape (Din, Dk) and W_v of shape (Din, Dv) with Din == x.shape[-1] "
            f"= {x.shape[-1]}, got W_k {tuple(W_k.shape)} and W_v {tuple(W_v.shape)}"
        )
    if q.shape[-1] != W_k.shape[1]:
        raise ValueError(
            f"expected q of shape (..., T, Dk) with Dk == W_k.shape[1] = {W_k.shape[1]}, "
            f"got {tuple(q.shape)}"
        )


def kv_attention(q: Tensor, x: Tensor, W_k: Tensor, W_v: Tensor) -> tuple[Tensor, Tensor]:
    """Attention whose keys and values are two learned projections of the data vectors.

    q: (..., T, Dk) queries; x: (..., S, Din) data vectors; W_k: (Din, Dk); W_v: (Din, Dv).
    K = x W_k (..., S, Dk), V = x W_v (..., S, Dv).
    Returns (output (..., T, Dv), weights (..., T, S)) of softmax(q K^T / sqrt(Dk)) V.
    """
    _check_shapes(q, x, W_k, W_v)
    k = x @ W_k  # (..., S, Dk): what each data vector is matched on
    v = x @ W_v  # (..., S, Dv): what each data vector hands back
    return scaled_dot_product_attention(q, k, v)


# ----------------------------------------------------------------------------- classic mistakes


def _attend(q: Tensor, k: Tensor, v: Tensor, scale: float) -> tuple[Tensor, Tensor]:
    w = torch.softmax(q @ k.transpose(-2, -1) * scale, dim=-1)
    return w @ v, w


def _swapped(q, x, W_k, W_v):
    return _attend(q, x @ W_v, x @ W_k, 1 / math.sqrt(q.shape[-1]))


def _no_scaling(q, x, W_k, W_v):
    return _attend(q, x @ W_k, x @ W_v, 1.0)


def _scale_by_din(q, x, W_k, W_v):
    return _attend(q, x @ W_k, x @ W_v, 1 / math.sqrt(x.shape[-1]))


def _scale_by_d(q, x, W_k, W_v):
    return _attend(q, x @ W_k, x @ W_v, 1 / q.shape[-1])


def _queries_projected(q, x, W_k, W_v):
    return _attend(q @ W_k, x @ W_k, x @ W_v, 1 / math.sqrt(q.shape[-1]))


def _values_not_projected(q, x, W_k, W_v):
    return _attend(q, x @ W_k, x, 1 / math.sqrt(q.shape[-1]))


def _keys_not_projected(q, x, W_k, W_v):
    return _attend(q, x, x @ W_v, 1 / math.sqrt(q.shape[-1]))


def _transposed_weights(q, x, W_k, W_v):
    return _attend(q, x @ W_k.T, x @ W_v.T, 1 / math.sqrt(q.shape[-1]))


def _softmax_over_queries(q, x, W_k, W_v):
    k, v = x @ W_k, x @ W_v
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-2)
    return w @ v, w


MISTAKES = [
    Mistake(
        "keys and values swapped",
        "the keys are what a query is compared with, K = x @ W_k; the values are what "
        "comes back, V = x @ W_v. You used W_v for the scores and W_k for the output.",
        _swapped,
    ),
    Mistake(
        "missing 1/sqrt(d) scaling",
        "divide the scores q @ K^T by sqrt(Dk) before the softmax (Dk = q.shape[-1]).",
        _no_scaling,
    ),
    Mistake(
        "scaled by sqrt(Din) instead of sqrt(Dk)",
        "the scale is 1/sqrt(Dk), the width of the queries and keys that are multiplied, "
        "not the width Din of the data vectors x.",
        _scale_by_din,
    ),
    Mistake(
        "scaled by 1/d instead of 1/sqrt(d)",
        "the variance of q . k is Dk, so its standard deviation is sqrt(Dk): divide by "
        "sqrt(Dk), not Dk.",
        _scale_by_d,
    ),
    Mistake(
        "queries projected with W_k",
        "q is already a query in key space (..., T, Dk): use it as it is. Only the data "
        "vectors x are projected, to keys with W_k and to values with W_v.",
        _queries_projected,
    ),
    Mistake(
        "values not projected (V = x)",
        "the values are a second projection of the data, V = x @ W_v, not x itself.",
        _values_not_projected,
    ),
    Mistake(
        "keys not projected (K = x)",
        "the keys are a projection of the data, K = x @ W_k, not x itself.",
        _keys_not_projected,
    ),
    Mistake(
        "projection matrices transposed",
        "W_k has shape (Din, Dk) and multiplies from the right: K = x @ W_k (no .T).",
        _transposed_weights,
    ),
    Mistake(
        "softmax over the queries instead of the keys",
        "each query's weights over the S data vectors must sum to 1: softmax(..., dim=-1).",
        _softmax_over_queries,
    ),
]


# ----------------------------------------------------------------------------- cases and call


def make_cases(seed: int) -> list[Case]:
    """Random cases; the first is square (Din = Dk = Dv) so every classic mistake can be named."""
    gen = generator(seed)
    specs = [  # name, batch dims, T, S, Din, Dk, Dv
        ("square, one batch dim", (2,), 3, 5, 4, 4, 4),
        ("Din != Dk != Dv, T != S", (2,), 4, 6, 5, 3, 7),
        ("no batch dims", (), 2, 5, 6, 4, 3),
        ("two batch dims", (2, 3), 3, 4, 5, 6, 2),
        ("one query", (3,), 1, 7, 4, 8, 5),
    ]
    cases = []
    for name, batch, T, S, Din, Dk, Dv in specs:
        cases.append(
            Case(
                name,
                {
                    "q": randn(gen, *batch, T, Dk) * 1.5,
                    "x": randn(gen, *batch, S, Din),
                    "W_k": randn(gen, Din, Dk),
                    "W_v": randn(gen, Din, Dv),
                },
            )
        )
    return cases


def call(candidate, case: Case) -> Outputs:
    """Run ``candidate(q, x, W_k, W_v)``, which should return ``(output, weights)``."""
    i = case.inputs
    try:
        result = candidate(i["q"], i["x"], i["W_k"], i["W_v"])
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


def compare(case: Case, got: Outputs, expected: Outputs) -> str | None:
    """Output and weights within tolerance; a missing ``weights`` says what to return."""
    if "weights" in expected and "output" in got and "weights" not in got:
        return (
            f"case '{case.name}': kv_attention should return a tuple (output, weights), "
            "like scaled_dot_product_attention"
        )
    return compare_or_raised(case, got, expected)


EXERCISES = [
    Exercise(
        id="03.2",
        title="Attention with learned key and value projections",
        points=3,
        notebook=NOTEBOOK,
        function="kv_attention",
        reference=kv_attention,
        make_cases=make_cases,
        call=call,
        mistakes=MISTAKES,
        compare=compare,
        hint="compute K = x @ W_k and V = x @ W_v, then softmax(q @ K^T / sqrt(Dk)) @ V "
        "(reuse your scaled_dot_product_attention).",
    )
]
