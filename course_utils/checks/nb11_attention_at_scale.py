"""Checks for notebook 11 (attention at scale): 11.1 tiled attention with an online softmax.

``tiled_attention(q, k, v, block_size, causal=False)``: q (..., T, Dk), k (..., S, Dk),
v (..., S, Dv) -> (..., T, Dv), visiting the keys ``block_size`` at a time. Besides the values,
the check watches the tensors the candidate's torch calls return (``AllocationTracker``): a
floating-point tensor with T*S elements or more means the full score matrix (or a full-size
float mask) was built, which is what tiling avoids; a call to F.scaled_dot_product_attention
is reported too (the exercise is to write the loop). The cases keep every legitimate tensor --
inputs, a (..., T, block_size) tile, the running statistics -- well below T*S elements. Causal
cases use T == S (``causal_mask``'s alignment when S > T is not part of this exercise).

To add an exercise: define its cases, call and mistakes below, then append it to ``EXERCISES``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from course_utils import attention
from course_utils.checks._common import AllocationTracker, as_tensor, close, size
from course_utils.checks.core import Case, Exercise, Mistake, generator, randn

NOTEBOOK = "11_attention_at_scale.ipynb"

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
    Mistake(
        "missing 1/sqrt(d_k) scaling",
        "scale each block's scores by 1/sqrt(d_k) = 1/sqrt(q.shape[-1])",
        tiled_variant(scaled=False),
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
    title="Tiled attention with an online softmax",
    points=4,
    notebook=NOTEBOOK,
    function="tiled_attention",
    reference=attention.tiled_attention,
    make_cases=_tiled_cases,
    call=_tiled_call,
    mistakes=TILED_MISTAKES,
    compare=_tiled_compare,
    hint="for each key block: s = q @ k_blk^T / sqrt(d); m_new = max(m, s.max(-1)); "
    "p = exp(s - m_new); l = l * exp(m - m_new) + p.sum(-1); "
    "acc = acc * exp(m - m_new) + p @ v_blk; m = m_new. Return acc / l",
)

EXERCISES = [TILED]  # append this notebook's 11.2 here
