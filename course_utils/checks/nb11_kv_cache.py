"""Check for notebook 11, exercise 11.2: one decoding step with a key/value cache.

The student writes ``kv_cache_decode_step(x_t, W_q, W_k, W_v, cache_k, cache_v)``: the newest
token's vector ``x_t`` (..., 1, D) is projected to a query, a key and a value; the key and value
are appended to the cache along the time axis (dim -2); the one new query attends over every
cached position, itself included, with ``softmax(q K^T / sqrt(Dk)) V``. No mask is needed: the
newest token is the last position, so every cached key is in its past. Returns
``(out (..., 1, Dv), cache_k (..., S + 1, Dk), cache_v (..., S + 1, Dv))``.

Classic mistakes that raise a shape error (concatenating along the wrong dim) are carried as
plain data (the error's text and whether it came from ``torch.cat``), so they are named too.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode

from course_utils.attention import scaled_dot_product_attention
from course_utils.checks._common import close, compare_or_raised, distinct_sizes, raised
from course_utils.checks.core import Case, Exercise, Mistake, Outputs, generator, randn

NOTEBOOK = "11_attention_at_scale.ipynb"


def _check_shapes(
    x_t: Tensor, W_q: Tensor, W_k: Tensor, W_v: Tensor, cache_k: Tensor, cache_v: Tensor
) -> None:
    D = x_t.shape[-1]
    if x_t.ndim < 2 or x_t.shape[-2] != 1:
        raise ValueError(
            f"expected x_t of shape (..., 1, D) (one new token), got {tuple(x_t.shape)}"
        )
    for name, W in (("W_q", W_q), ("W_k", W_k), ("W_v", W_v)):
        if W.ndim != 2 or W.shape[0] != D:
            raise ValueError(
                f"expected {name} of shape (D, ...) with D == x_t.shape[-1] = {D}, "
                f"got {tuple(W.shape)}"
            )
    if cache_k.shape[-1] != W_k.shape[1] or cache_v.shape[-1] != W_v.shape[1]:
        raise ValueError(
            f"expected cache_k (..., S, Dk={W_k.shape[1]}) and cache_v "
            f"(..., S, Dv={W_v.shape[1]}), got {tuple(cache_k.shape)} and "
            f"{tuple(cache_v.shape)}"
        )
    if cache_k.shape[-2] != cache_v.shape[-2]:
        raise ValueError(
            f"cache_k and cache_v should hold the same number of tokens S, got "
            f"{cache_k.shape[-2]} and {cache_v.shape[-2]}"
        )


def kv_cache_decode_step(
    x_t: Tensor, W_q: Tensor, W_k: Tensor, W_v: Tensor, cache_k: Tensor, cache_v: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """One decoding step of single-head self attention with a key/value cache.

    x_t: (..., 1, D) the newest token; W_q, W_k: (D, Dk); W_v: (D, Dv);
    cache_k: (..., S, Dk), cache_v: (..., S, Dv) the keys and values of the S earlier tokens
    (S may be 0). Returns (out (..., 1, Dv), cache_k (..., S+1, Dk), cache_v (..., S+1, Dv)).
    """
    _check_shapes(x_t, W_q, W_k, W_v, cache_k, cache_v)
    q, k, v = x_t @ W_q, x_t @ W_k, x_t @ W_v  # (..., 1, Dk), (..., 1, Dk), (..., 1, Dv)
    cache_k = torch.cat([cache_k, k], dim=-2)  # (..., S+1, Dk): append first,
    cache_v = torch.cat([cache_v, v], dim=-2)  # so the token also attends to itself
    out, _ = scaled_dot_product_attention(q, cache_k, cache_v)  # no mask: all keys are in the past
    return out, cache_k, cache_v


# ----------------------------------------------------------------------------- classic mistakes


def _attend(q: Tensor, k: Tensor, v: Tensor, scale: float, dim: int = -1) -> Tensor:
    w = torch.softmax(q @ k.transpose(-2, -1) * scale, dim=dim)
    return w @ v


def _scale(x: Tensor) -> float:
    return 1 / math.sqrt(x.shape[-1])


def _attend_before_append(x_t, W_q, W_k, W_v, cache_k, cache_v):
    q, k, v = x_t @ W_q, x_t @ W_k, x_t @ W_v
    out = _attend(q, cache_k, cache_v, _scale(q))  # the old cache only
    return out, torch.cat([cache_k, k], dim=-2), torch.cat([cache_v, v], dim=-2)


def _top_left_causal(x_t, W_q, W_k, W_v, cache_k, cache_v):
    q, k, v = x_t @ W_q, x_t @ W_k, x_t @ W_v
    K, V = torch.cat([cache_k, k], dim=-2), torch.cat([cache_v, v], dim=-2)
    allowed = torch.ones(1, K.shape[-2], dtype=torch.bool).tril()  # query 0 sees key 0 only
    s = (q @ K.transpose(-2, -1) * _scale(q)).masked_fill(~allowed, float("-inf"))
    return torch.softmax(s, dim=-1) @ V, K, V


def _no_scaling(x_t, W_q, W_k, W_v, cache_k, cache_v):
    q, k, v = x_t @ W_q, x_t @ W_k, x_t @ W_v
    K, V = torch.cat([cache_k, k], dim=-2), torch.cat([cache_v, v], dim=-2)
    return _attend(q, K, V, 1.0), K, V


def _key_from_W_q(x_t, W_q, W_k, W_v, cache_k, cache_v):
    q, k, v = x_t @ W_q, x_t @ W_q, x_t @ W_v
    K, V = torch.cat([cache_k, k], dim=-2), torch.cat([cache_v, v], dim=-2)
    return _attend(q, K, V, _scale(q)), K, V


def _past_keys_projected_again(x_t, W_q, W_k, W_v, cache_k, cache_v):
    q, k, v = x_t @ W_q, x_t @ W_k, x_t @ W_v
    K = torch.cat([cache_k @ W_k, k], dim=-2)  # the cache already holds keys, not inputs
    V = torch.cat([cache_v, v], dim=-2)
    return _attend(q, K, V, _scale(q)), K, V


def _old_cache_returned(x_t, W_q, W_k, W_v, cache_k, cache_v):
    q, k, v = x_t @ W_q, x_t @ W_k, x_t @ W_v
    K, V = torch.cat([cache_k, k], dim=-2), torch.cat([cache_v, v], dim=-2)
    return _attend(q, K, V, _scale(q)), cache_k, cache_v


def _softmax_over_queries(x_t, W_q, W_k, W_v, cache_k, cache_v):
    q, k, v = x_t @ W_q, x_t @ W_k, x_t @ W_v
    K, V = torch.cat([cache_k, k], dim=-2), torch.cat([cache_v, v], dim=-2)
    return _attend(q, K, V, _scale(q), dim=-2), K, V


def _wrong_cat_dim(x_t, W_q, W_k, W_v, cache_k, cache_v):
    q, k, v = x_t @ W_q, x_t @ W_k, x_t @ W_v
    K, V = torch.cat([cache_k, k], dim=-1), torch.cat([cache_v, v], dim=-1)  # features, not time
    return _attend(q, K, V, _scale(q)), K, V


WRONG_DIM = "concatenated along the wrong dim"

MISTAKES = [
    Mistake(
        WRONG_DIM,
        "the cache is (..., S, Dk): tokens run along dim -2. Append the new key and value "
        "there, torch.cat([cache_k, k_t], dim=-2), which works whatever the batch dims are "
        "(dim=0, dim=1 or dim=-1 pick the batch or feature axis)",
        _wrong_cat_dim,
    ),
    Mistake(
        "attends before appending the new key and value",
        "append k_t and v_t to the cache first, then attend: the new token must attend to "
        "itself as well as to the S earlier tokens (S + 1 keys)",
        _attend_before_append,
    ),
    Mistake(
        "top-left causal mask on the single query",
        "with one new query at the last position every cached key is in its past: use no "
        "mask at all (a square tril, or F.scaled_dot_product_attention(..., is_causal=True), "
        "aligns the query with the FIRST key and hides all the others)",
        _top_left_causal,
    ),
    Mistake(
        "missing 1/sqrt(d_k) scaling",
        "divide the scores q @ K^T by sqrt(Dk) = sqrt(W_k.shape[1]) before the softmax",
        _no_scaling,
    ),
    Mistake(
        "new key projected with W_q",
        "the query is x_t @ W_q, the new key x_t @ W_k and the new value x_t @ W_v",
        _key_from_W_q,
    ),
    Mistake(
        "cached keys projected again",
        "the cache already holds keys (x_j @ W_k for the earlier tokens): concatenate it "
        "as it is; only the new token x_t is projected",
        _past_keys_projected_again,
    ),
    Mistake(
        "the old cache returned",
        "return the caches with the new token appended, (out, new_cache_k, new_cache_v), "
        "so that the next step sees it",
        _old_cache_returned,
    ),
    Mistake(
        "softmax over the wrong axis",
        "the weights of the query over its S + 1 keys must sum to 1: softmax(..., dim=-1)",
        _softmax_over_queries,
    ),
]


# ----------------------------------------------------------------------------- cases and call


def make_cases(seed: int) -> list[Case]:
    """Random cases; the first has D == Dk so that re-projected cached keys run and are named.

    S is never 1 (a wrong-dim concatenation then always fails the same way); the empty cache
    (the first generated token) comes last.
    """
    g = generator(seed)
    D, Dk, Dv = distinct_sizes(g, 3, 3, 8)
    specs = [  # name, batch dims, S, D, Dk
        ("batch of 2, 5 cached tokens, D == Dk", (2,), 5, Dk, Dk),
        ("no batch dims, 7 cached tokens", (), 7, D, Dk),
        ("batch and heads (2, 3), 4 cached tokens", (2, 3), 4, D, Dk),
        ("large scores, 9 cached tokens", (2,), 9, D, Dk),
        ("empty cache (the first token)", (3,), 0, D, Dk),
    ]
    cases = []
    for name, batch, S, d, dk in specs:
        gain = 4.0 if name.startswith("large") else 1.0
        cases.append(
            Case(
                name,
                {
                    "x_t": randn(g, *batch, 1, d) * gain,
                    "W_q": randn(g, d, dk) / math.sqrt(d),
                    "W_k": randn(g, d, dk) / math.sqrt(d),
                    "W_v": randn(g, d, Dv) / math.sqrt(d),
                    "cache_k": randn(g, *batch, S, dk) * gain,
                    "cache_v": randn(g, *batch, S, Dv),
                },
            )
        )
    return cases


class _CatWatcher(TorchFunctionMode):
    """Notes whether an exception was raised inside ``torch.cat`` (or ``Tensor.cat``...)."""

    def __init__(self) -> None:
        super().__init__()
        self.failed_in_cat = False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        try:
            return func(*args, **(kwargs or {}))
        except RuntimeError:
            if getattr(func, "__name__", "") in (
                "cat",
                "concat",
                "concatenate",
                "hstack",
                "vstack",
                "stack",
            ):
                self.failed_in_cat = True
            raise


def _raised(exc: BaseException, in_cat: bool) -> Outputs:
    return {**raised(exc), "raised_in_cat": torch.tensor(in_cat)}


def call(candidate, case: Case) -> Outputs:
    """Run ``candidate(x_t, W_q, W_k, W_v, cache_k, cache_v)`` -> ``(out, cache_k, cache_v)``."""
    i = case.inputs
    watcher = _CatWatcher()
    try:
        with watcher:
            result = candidate(i["x_t"], i["W_q"], i["W_k"], i["W_v"], i["cache_k"], i["cache_v"])
    except NotImplementedError:  # a RuntimeError too: the stub, "not attempted"
        raise
    except RuntimeError as exc:  # shape errors from torch
        return _raised(exc, watcher.failed_in_cat)
    if not isinstance(result, (tuple, list)) or len(result) != 3:
        got = type(result).__name__ + (
            f" of length {len(result)}" if isinstance(result, (tuple, list)) else ""
        )
        raise TypeError(
            "kv_cache_decode_step should return a triple (out, new_cache_k, "
            f"new_cache_v), got a {got}"
        )
    names = ("output", "cache_k", "cache_v")
    for name, value in zip(names, result):
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{name} should be a torch.Tensor, got {type(value).__name__}")
    return dict(zip(names, result))


_values = close()


def compare(case: Case, got: Outputs, expected: Outputs) -> str | None:
    """Values within tolerance; errors raised inside ``torch.cat`` count as the same mistake."""
    if (
        "raised" in got
        and "raised" in expected
        and bool(got["raised_in_cat"])
        and bool(expected["raised_in_cat"])
    ):
        return None  # both failed to concatenate: the wrong-dim mistake
    return compare_or_raised(case, got, expected, _values)


EXERCISES = [
    Exercise(
        id="11.2",
        title="A decoding step with a key/value cache",
        points=3,
        notebook=NOTEBOOK,
        function="kv_cache_decode_step",
        reference=kv_cache_decode_step,
        make_cases=make_cases,
        call=call,
        mistakes=MISTAKES,
        compare=compare,
        hint="q, k_t, v_t = x_t @ W_q, x_t @ W_k, x_t @ W_v; append k_t and v_t to the caches "
        "along dim -2; out = softmax(q @ K^T / sqrt(Dk)) @ V over all S + 1 positions; "
        "return (out, K, V).",
    )
]
