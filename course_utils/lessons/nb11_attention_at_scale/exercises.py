"""Checks for notebook 11 (attention at scale): 11.1 tiled attention with an online softmax,
11.2 a decoding step with a KV cache.

11.1: ``tiled_attention(q, k, v, block_size, causal=False)``: q (..., T, Dk), k (..., S, Dk),
v (..., S, Dv) -> (..., T, Dv), visiting the keys ``block_size`` at a time. Besides the values,
the check watches the tensors the candidate's torch calls return (``AllocationTracker``): a
floating-point tensor with T*S elements or more means the full score matrix (or a full-size
float mask) was built, which is what tiling avoids; a call to F.scaled_dot_product_attention
is reported too (the exercise is to write the loop). The cases keep every legitimate tensor --
inputs, a (..., T, block_size) tile, the running statistics -- well below T*S elements. Causal
cases use T == S (``causal_mask``'s alignment when S > T is not part of this exercise).

11.2: one decoding step with a key/value cache.

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

from course_utils.checks import mistakes
from course_utils.checks._common import (
    FUSED_ATTENTION_OPS,
    AllocationTracker,
    as_tensor,
    close,
    compare_or_raised,
    distinct_sizes,
    raised,
    size,
)
from course_utils.checks.core import Case, Exercise, Mistake, Outputs, generator, randn
from course_utils.lessons.nb11_attention_at_scale import LESSON
from course_utils.modeling import attention
from course_utils.modeling.attention import scaled_dot_product_attention

NOTEBOOK = LESSON.filename

# ----------------------------------------------------------------------------- 11.1 tiled attention


def _tiled_cases(seed: int) -> list[Case]:
    g = generator(seed)
    Dk = size(g, 4, 6)
    Dv = size(g, 3, 6)
    Dv = Dv + 1 if Dv == Dk else Dv
    bs = size(g, 6, 9)

    def case(
        name: str,
        *batch: int,
        T: int,
        S: int,
        block_size: int = bs,
        causal: bool = False,
        gain: float = 1.0,
        watch: bool = True,
    ) -> Case:
        return Case(
            name,
            {
                "q": randn(g, *batch, T, Dk) * gain,
                "k": randn(g, *batch, S, Dk) * gain,
                "v": randn(g, *batch, S, Dv),
                "block_size": block_size,
                "causal": causal,
                "max_elements": T * S if watch else 0,
            },
        )

    # Sizes keep every legitimate tensor below T*S elements: batch * max(Dk, Dv, block_size)
    # < min(T, S) (batch <= 2 here), so only a full-size tensor trips the watch.
    T, S = size(g, 20, 28), size(g, 40, 52)
    S += S % bs == 0  # a last, partial block
    L = size(g, 24, 32)
    L += L % bs == 0
    return [
        case("no batch dims, T != S, a partial last block", T=T, S=S),
        case("heads (1, 2, T, D)", 1, 2, T=T, S=S),
        case("causal (T == S)", 2, T=L, S=L, causal=True),
        case("large scores (exp overflows without the running max)", 2, T=T, S=S, gain=20.0),
        case("block_size 1", T=12, S=25, block_size=1),
        case("a single block (block_size >= S)", 2, T=9, S=11, block_size=16, watch=False),
        case("causal, a single block", T=7, S=7, block_size=8, causal=True, watch=False),
    ]


def _tiled_call(candidate, case: Case) -> dict[str, Tensor]:
    i = case.inputs
    tracker = AllocationTracker()
    with torch.no_grad(), tracker:
        out = candidate(i["q"], i["k"], i["v"], i["block_size"], causal=i["causal"])
    out = as_tensor(out, "tiled_attention(...)")
    limit = i["max_elements"]
    return {
        "output": out,
        "full_matrix": torch.tensor(bool(limit) and tracker.largest >= limit),
        "largest_shape": torch.tensor(tracker.largest_shape or (0,), dtype=torch.int64),
        "fused_kernel": torch.tensor(tracker.fused is not None),
    }


_values = close()


def _tiled_compare(case: Case, got, expected) -> str | None:
    problem = _values(
        case, {k: got[k] for k in ("output",) if k in got}, {"output": expected["output"]}
    )
    if problem is not None:
        return problem

    def flag(outputs, key: str) -> bool:
        value = outputs.get(key)
        return isinstance(value, torch.Tensor) and value.numel() == 1 and bool(value)

    if flag(got, "fused_kernel") != flag(expected, "fused_kernel"):
        if flag(got, "fused_kernel"):
            return (
                f"case '{case.name}': the values are right, but your code calls "
                f"F.scaled_dot_product_attention: write the loop over key blocks yourself"
            )
        return f"case '{case.name}': F.scaled_dot_product_attention was not called"
    if flag(got, "full_matrix") != flag(expected, "full_matrix"):
        T, S = case.inputs["q"].shape[-2], case.inputs["k"].shape[-2]
        if flag(got, "full_matrix"):
            shape = tuple(int(s) for s in got.get("largest_shape", torch.zeros(0)))
            return (
                f"case '{case.name}': the values are right, but a tensor of shape {shape} "
                f"was created, with at least T*S = {T}*{S} elements: tiled attention must "
                f"never build the full (T, S) score matrix (nor a full-size float mask)"
            )
        return f"case '{case.name}': no tensor of T*S = {T}*{S} elements was created"
    return None


def tiled_variant(
    *,
    rescale_sum: bool = True,
    rescale_acc: bool = True,
    use_max: bool = True,
    scaled: bool = True,
    drop_last: bool = False,
    causal_mode: str = "global",
):
    """An online-softmax tiled attention with one thing changed (for the mistakes).

    causal_mode: "global" (right), "local" (tril on each block's own indices) or "ignored".
    """

    def impl(q: Tensor, k: Tensor, v: Tensor, block_size: int, causal: bool = False) -> Tensor:
        T, S = q.shape[-2], k.shape[-2]
        factor = 1 / math.sqrt(q.shape[-1]) if scaled else 1.0
        m = torch.full((*q.shape[:-1], 1), float("-inf"), dtype=q.dtype)
        l = torch.zeros_like(m)
        acc = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
        stop = S - S % block_size if drop_last else S
        for start in range(0, stop, block_size):
            kb, vb = k[..., start : start + block_size, :], v[..., start : start + block_size, :]
            s = q @ kb.transpose(-2, -1) * factor  # (..., T, nb)
            if causal and causal_mode != "ignored":
                nb = kb.shape[-2]
                if causal_mode == "local":
                    allowed = torch.ones(T, nb, dtype=torch.bool).tril()
                else:
                    allowed = torch.arange(start, start + nb)[None, :] <= torch.arange(T)[:, None]
                s = s.masked_fill(~allowed, float("-inf"))
            if use_max:
                m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
                shift = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
                alpha = torch.exp(m - shift)
            else:
                m_new, shift, alpha = m, 0.0, torch.ones_like(m)
            p = torch.exp(s - shift)
            l = (l * alpha if rescale_sum else l) + p.sum(dim=-1, keepdim=True)
            acc = (acc * alpha if rescale_acc else acc) + p @ vb
            m = m_new
        return acc / torch.where(l > 0, l, torch.ones_like(l))

    return impl


def _blocks_normalised_separately(q, k, v, block_size, causal=False):
    outs = []
    for start in range(0, k.shape[-2], block_size):
        kb, vb = k[..., start : start + block_size, :], v[..., start : start + block_size, :]
        mask = None
        if causal:
            T = q.shape[-2]
            mask = torch.arange(start, start + kb.shape[-2])[None, :] <= torch.arange(T)[:, None]
        outs.append(attention.scaled_dot_product_attention(q, kb, vb, mask)[0])
    return torch.stack(outs).mean(dim=0)


def _materialised(q, k, v, block_size, causal=False):
    return attention.scaled_dot_product_attention(q, k, v, is_causal=causal)[0]


def _fused(q, k, v, block_size, causal=False):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)


TILED_MISTAKES = [
    Mistake(
        "materialises the full (T, S) score matrix",
        "compute the scores one key block at a time, q @ k_block^T of shape "
        "(..., T, block_size), and fold each block into running statistics (max m, sum l, "
        "output acc); never q @ k^T for all keys at once, nor a full-size mask",
        _materialised,
    ),
    Mistake(
        "calls F.scaled_dot_product_attention instead of tiling",
        "the fused kernel does the tiling for you; here the point is to write it: loop "
        "over key blocks with a running max, sum and output",
        _fused,
    ),
    Mistake(
        "online softmax without rescaling",
        "when the running max grows from m to m_new, what was summed so far was computed "
        "with the old max: multiply both the running sum l and the accumulator acc by "
        "exp(m - m_new) before adding the new block",
        tiled_variant(rescale_sum=False, rescale_acc=False),
    ),
    Mistake(
        "running sum rescaled but not the output accumulator",
        "rescale the accumulator acc by exp(m - m_new) too, like the running sum l",
        tiled_variant(rescale_acc=False),
    ),
    Mistake(
        "output accumulator rescaled but not the running sum",
        "rescale the running sum l by exp(m - m_new) too, like the accumulator acc",
        tiled_variant(rescale_sum=False),
    ),
    Mistake(
        "no running max (exp overflows on large scores)",
        "exp(score) overflows to inf for scores above ~709 (float64): keep a running max "
        "and exponentiate score - max",
        tiled_variant(use_max=False),
    ),
    Mistake(
        "each block normalised on its own (block outputs averaged)",
        "a softmax per block is not the softmax over all keys: carry the running max and "
        "sum across blocks and divide by the total sum once at the end",
        _blocks_normalised_separately,
    ),
    Mistake(
        "last partial block dropped",
        "when S is not a multiple of block_size the last block is shorter: loop with "
        "range(0, S, block_size) and slice k[..., start:start + block_size, :]",
        tiled_variant(drop_last=True),
    ),
    mistakes.MISSING_SCALE(
        tiled_variant(scaled=False),
        hint="scale each block's scores by 1/sqrt(d_k) = 1/sqrt(q.shape[-1])",
    ),
    Mistake(
        "causal mask built from block-local indices",
        "compare absolute positions: key start + j may be attended by query i iff "
        "start + j <= i; a torch.tril on each block uses the wrong offsets",
        tiled_variant(causal_mode="local"),
    ),
    Mistake(
        "causal flag ignored",
        "with causal=True query i may only attend keys j <= i: mask each block's scores",
        tiled_variant(causal_mode="ignored"),
    ),
]

TILED = Exercise(
    id="11.1",
    concepts=("scaled dot-product attention",),
    title="Tiled attention with an online softmax",
    points=4,
    notebook=NOTEBOOK,
    function="tiled_attention",
    reference=attention.tiled_attention,
    make_cases=_tiled_cases,
    call=_tiled_call,
    mistakes=TILED_MISTAKES,
    compare=_tiled_compare,
    forbids=FUSED_ATTENTION_OPS,
    hint=(
        "Run your tiling with one block (block_size >= S): it must equal plain attention. Then "
        "use two blocks on a row whose largest score sits in the second block, and print the "
        "running maximum, denominator and sum after each block: what must happen to the first "
        "block's share when the maximum grows? With causal=True, which keys of a block may each "
        "query see?"
    ),
)


# ----------------------------------------------------------------------------- 11.2 KV-cache decoding step
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
    mistakes.MISSING_SCALE(
        _no_scaling,
        hint="divide the scores q @ K^T by sqrt(Dk) = sqrt(W_k.shape[1]) before the softmax",
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


KV_CACHE = Exercise(
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
    hint=(
        "Decode three tokens one by one and compare with full causal attention over the three: do"
        " they agree at every step? Print the caches' shapes before and after a step: did they "
        "grow by one position along the sequence axis? Which positions may the new token attend, "
        "and which width sets the scale?"
    ),
)

EXERCISES = [TILED, KV_CACHE]
