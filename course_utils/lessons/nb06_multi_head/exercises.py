"""Checks for notebook 06 (multi-head attention): 06.1 multi_head_loop (one head at a time,
per-head projections), 06.2 split_heads, 06.3 merge_heads, 06.4 the MultiHeadAttention module.

06.1 takes per-head weight lists: ``multi_head_loop(x, W_q, W_k, W_v, W_o)`` with ``x``
(B, T, D), ``W_q``, ``W_k``, ``W_v`` lists of H matrices (D, Dh) and ``W_o`` (H * Dh, D), in the
math convention ``q = x @ W`` (no biases).

06.4 is a class. The notebook gives its ``__init__(self, d_model, n_heads)`` with
``self.qkv = nn.Linear(d_model, 3 * d_model)`` (rows: W_q, W_k, W_v, the layout of
``nn.MultiheadAttention.in_proj_weight``) and ``self.out = nn.Linear(d_model, d_model)``; the
student writes ``forward(self, x, attn_mask=None)`` (B, T, D) -> (B, T, D). The check builds the
class, copies seeded weights into ``qkv`` and ``out`` and compares with
``course_utils.modeling.layers.MultiHeadAttention``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from course_utils.checks import mistakes
from course_utils.checks._common import (
    as_tensor,
    build_module,
    close,
    distinct_sizes,
    lengths_mask,
    random_mask,
    random_weights,
    size,
)
from course_utils.checks.core import Case, Contract, Exercise, Mistake, generator, randn
from course_utils.lessons.nb06_multi_head import LESSON
from course_utils.modeling import attention, layers

NOTEBOOK = LESSON.filename

# ----------------------------------------------------------------------------- 06.1 the loop


def multi_head_loop_reference(
    x: Tensor, W_q: list[Tensor], W_k: list[Tensor], W_v: list[Tensor], W_o: Tensor
) -> Tensor:
    """Multi-head self attention one head at a time: x (B, T, D) -> (B, T, D_out).

    Head h: softmax((x W_q[h]) (x W_k[h])^T / sqrt(Dh)) (x W_v[h]); the H outputs concatenated
    along the features, then multiplied by W_o (H * Dh, D_out).
    """
    heads = []
    for wq, wk, wv in zip(W_q, W_k, W_v, strict=True):
        q, k, v = x @ wq, x @ wk, x @ wv
        scores = q @ k.transpose(-2, -1) / math.sqrt(wq.shape[-1])
        heads.append(torch.softmax(scores, dim=-1) @ v)
    return torch.cat(heads, dim=-1) @ W_o


def _loop_cases(seed: int) -> list[Case]:
    g = generator(seed)
    B, T, H, Dh = distinct_sizes(g, 4, 2, 6)

    def case(name: str, *, B: int = B, T: int = T, H: int = H, Dh: int = Dh) -> Case:
        D = H * Dh + 1  # the input width differs from H * Dh: W_o's shape says which is which
        # Weights at a layer's initial scale (std 1/sqrt(fan_in)): scores of order 1, as in a
        # model. Unscaled ones gave scores near 100 on some seeds, where a softmax written as
        # exp(s) / sum(exp(s)) overflows in float32: a verdict that depended on the seed.
        w = D**-0.5
        return Case(
            name,
            {
                "x": randn(g, B, T, D),
                "W_q": randn(g, H, D, Dh) * w,  # stacked: the student gets a list of H matrices
                "W_k": randn(g, H, D, Dh) * w,
                "W_v": randn(g, H, D, Dh) * w,
                "W_o": randn(g, H * Dh, D) * (H * Dh) ** -0.5,
            },
        )

    return [
        case("B, T, H, Dh all different"),
        case("one sequence, one token (T = 1)", B=1, T=1),
        case("one head (H = 1)", H=1),
        case("one dimension per head (Dh = 1)", Dh=1),
    ]


def _loop_call(candidate, case: Case) -> dict[str, Tensor]:
    i = case.inputs
    W_q, W_k, W_v = (list(i[name].unbind(0)) for name in ("W_q", "W_k", "W_v"))
    out = candidate(i["x"], W_q, W_k, W_v, i["W_o"])
    return {"output": as_tensor(out, "multi_head_loop(x, W_q, W_k, W_v, W_o)")}


def _loop_variant(*, scale=None, cat=None, shared: bool = False, project_out: bool = True, dim=-1):
    """The reference loop with one thing changed."""

    def loop(x: Tensor, W_q: list[Tensor], W_k: list[Tensor], W_v: list[Tensor], W_o: Tensor):
        heads = []
        for h in range(len(W_q)):
            j = 0 if shared else h
            q, k, v = x @ W_q[j], x @ W_k[j], x @ W_v[j]
            factor = 1 / math.sqrt(q.shape[-1]) if scale is None else scale(x)
            heads.append(torch.softmax(q @ k.transpose(-2, -1) * factor, dim=dim) @ v)
        y = (cat or (lambda hs: torch.cat(hs, dim=-1)))(heads)
        return y @ W_o if project_out else y

    return loop


LOOP_MISTAKES = [
    Mistake(
        "scaled by 1/sqrt(d_model) instead of 1/sqrt(d_head)",
        "each head works in Dh dimensions (the width of its W_q[h]): divide its scores by "
        "sqrt(Dh), not by the square root of the input width",
        _loop_variant(scale=lambda x: 1 / math.sqrt(x.shape[-1])),
    ),
    Mistake(
        "missing 1/sqrt(d_head) scaling",
        "divide each head's scores by sqrt(Dh), Dh = the width of its W_q[h]",
        _loop_variant(scale=lambda x: 1.0),
    ),
    Mistake(
        "one head's projections used for every head",
        "head h must use its own W_q[h], W_k[h] and W_v[h]; with the same projections every "
        "head computes the same thing",
        _loop_variant(shared=True),
    ),
    Mistake(
        "heads concatenated along the wrong axis (features interleaved)",
        "put the heads' outputs side by side along the feature axis: head 0's Dh features, "
        "then head 1's, ... (stacking on a new last axis and flattening interleaves them)",
        _loop_variant(cat=lambda hs: torch.stack(hs, dim=-1).flatten(-2)),
    ),
    Mistake(
        "output projection missing",
        "after concatenating the heads multiply by W_o, which mixes what the heads found",
        _loop_variant(project_out=False),
    ),
    mistakes.SOFTMAX_OVER_QUERIES(
        _loop_variant(dim=-2), hint="normalise each query's scores over the keys: dim=-1"
    ),
]

LOOP = Exercise(
    id="06.1",
    title="Multi-head attention, one head at a time",
    points=2,
    notebook=NOTEBOOK,
    function="multi_head_loop",
    reference=multi_head_loop_reference,
    make_cases=_loop_cases,
    call=_loop_call,
    mistakes=LOOP_MISTAKES,
    compare=close(),
    hint="run your loop with H = 1 and compare it with notebook 03's attention on that one "
    "head: same scale? same axis for the normalisation? Then with two heads: does each head "
    "use its own matrices, and in which order do the heads' outputs meet W_o?",
    concepts=("multi-head attention",),
    contract=Contract(float32=True, differentiable=("x",)),
)

# ----------------------------------------------------------------------------- 06.2 split_heads


def _split_cases(seed: int) -> list[Case]:
    g = generator(seed)
    B, T, H, Dh = distinct_sizes(g, 4, 2, 6)  # all different: a wrong axis changes the result
    return [
        Case("(B, T, D) with B, T, H, Dh all different", {"x": randn(g, B, T, H * Dh), "H": H}),
        Case("one sequence, one token", {"x": randn(g, 1, 1, H * Dh), "H": H}),
        Case("one head (H = 1)", {"x": randn(g, B, T, Dh), "H": 1}),
        Case("one dimension per head (Dh = 1)", {"x": randn(g, B, T, H), "H": H}),
    ]


def _split_call(candidate, case: Case) -> dict[str, Tensor]:
    i = case.inputs
    return {"heads": as_tensor(candidate(i["x"], i["H"]), "split_heads(x, H)")}


def _split_no_transpose(x: Tensor, H: int) -> Tensor:
    B, T, D = x.shape
    return x.reshape(B, H, T, D // H)


def _split_strided(x: Tensor, H: int) -> Tensor:
    B, T, D = x.shape
    return x.reshape(B, T, D // H, H).permute(0, 3, 1, 2)


def _split_no_move(x: Tensor, H: int) -> Tensor:
    B, T, D = x.shape
    return x.reshape(B, T, H, D // H)


def _split_transposed_rows(x: Tensor, H: int) -> Tensor:
    B, T, D = x.shape
    return x.reshape(B, T, H, D // H).permute(0, 2, 3, 1)


SPLIT_MISTAKES = [
    Mistake(
        "heads split without transpose (plain reshape to (B, H, T, Dh))",
        "first cut each token's D features into H pieces, giving (B, T, H, Dh), then swap the "
        "token and head axes; reshaping straight to (B, H, T, Dh) mixes features of different "
        "tokens",
        _split_no_transpose,
    ),
    Mistake(
        "heads take strided columns (reshape to (B, T, Dh, H))",
        "head h owns the contiguous columns h*Dh:(h+1)*Dh: reshape to (B, T, H, Dh), "
        "not (B, T, Dh, H)",
        _split_strided,
    ),
    Mistake(
        "head axis not moved forward (returned (B, T, H, Dh))",
        "after cutting the features into heads, (B, T, H, Dh), swap the token and head axes "
        "to get (B, H, T, Dh)",
        _split_no_move,
    ),
    Mistake(
        "returned (B, H, Dh, T)",
        "swap only the token and head axes: (B, T, H, Dh) becomes (B, H, T, Dh); Dh stays last",
        _split_transposed_rows,
    ),
]

SPLIT = Exercise(
    id="06.2",
    title="Split into heads",
    points=1,
    notebook=NOTEBOOK,
    function="split_heads",
    reference=layers.split_heads,
    make_cases=_split_cases,
    call=_split_call,
    mistakes=SPLIT_MISTAKES,
    compare=close(),
    hint="fill x with torch.arange and look at heads[0, h, t]: does it hold token t's "
    "features h * Dh ... (h + 1) * Dh - 1, and is the shape (B, H, T, D // H)?",
    contract=Contract(float32=True, differentiable=("x",)),
)

# ----------------------------------------------------------------------------- 06.3 merge_heads


def _merge_cases(seed: int) -> list[Case]:
    g = generator(seed)
    B, T, H, Dh = distinct_sizes(g, 4, 2, 6)
    return [
        Case("(B, H, T, Dh) with B, T, H, Dh all different", {"x": randn(g, B, H, T, Dh)}),
        Case(
            "non-contiguous input (a transposed view)", {"x": randn(g, B, T, H, Dh).transpose(1, 2)}
        ),
        Case("one head (H = 1)", {"x": randn(g, B, 1, T, Dh)}),
        Case("one token (T = 1)", {"x": randn(g, B, H, 1, Dh)}),
    ]


def _merge_call(candidate, case: Case) -> dict[str, Tensor]:
    return {"merged": as_tensor(candidate(case.inputs["x"]), "merge_heads(x)")}


def _merge_no_transpose(x: Tensor) -> Tensor:
    B, H, T, Dh = x.shape
    return x.reshape(B, T, H * Dh)


def _merge_strided(x: Tensor) -> Tensor:
    B, H, T, Dh = x.shape
    return x.permute(0, 2, 3, 1).reshape(B, T, Dh * H)


MERGE_MISTAKES = [
    Mistake(
        "heads merged without transpose (plain reshape to (B, T, D))",
        "move the head axis back next to Dh first, (B, H, T, Dh) becomes (B, T, H, Dh), and "
        "only then join the last two axes; a plain reshape mixes tokens",
        _merge_no_transpose,
    ),
    Mistake(
        "merged in the wrong order (B, T, Dh, H)",
        "concatenate whole heads: bring the axes to (B, T, H, Dh), heads before features, "
        "then join the last two axes into H * Dh",
        _merge_strided,
    ),
    Mistake(
        "heads summed instead of concatenated",
        "the heads' outputs are concatenated (B, T, H * Dh), not added",
        lambda x: x.sum(dim=1),
    ),
    Mistake(
        "heads averaged instead of concatenated",
        "the heads' outputs are concatenated (B, T, H * Dh), not averaged",
        lambda x: x.mean(dim=1),
    ),
]

MERGE = Exercise(
    id="06.3",
    title="Merge heads",
    points=1,
    notebook=NOTEBOOK,
    function="merge_heads",
    reference=layers.merge_heads,
    make_cases=_merge_cases,
    call=_merge_call,
    mistakes=MERGE_MISTAKES,
    compare=close(),
    hint="check merge_heads(split_heads(x, H)) == x on an arange tensor: which axes must be "
    "next to each other before two of them can be joined, and can your join handle a tensor "
    "that is not contiguous?",
    contract=Contract(float32=True, differentiable=("x",)),
)

# ----------------------------------------------------------------------------- 06.4 MultiHeadAttention


def _mha_cases(seed: int) -> list[Case]:
    g = generator(seed)
    H, Dh = size(g, 2, 4), size(g, 2, 5)
    B, T = size(g, 2, 3), size(g, 3, 7)
    if T == Dh:
        T += 1

    def case(name: str, mask: Tensor | None = None, *, H: int = H, T: int = T) -> Case:
        D = H * Dh
        inputs = {
            "d_model": D,
            "n_heads": H,
            "x": randn(g, B, T, D),
            **random_weights(
                g,
                {
                    "qkv.weight": (3 * D, D),
                    "qkv.bias": (3 * D,),
                    "out.weight": (D, D),
                    "out.bias": (D,),
                },
            ),
        }
        if mask is not None:
            inputs["attn_mask"] = mask
        return Case(name, inputs)

    return [
        case("no mask"),
        case("causal mask (T, T)", torch.ones(T, T, dtype=torch.bool).tril()),
        case("key padding mask (B, 1, 1, T)", lengths_mask(g, B, T)[:, None, None, :]),
        case("per-head mask (B, H, T, T)", random_mask(g, B, H, T, T)),
        case("one head (H = 1)", H=1),
        case("one token (T = 1)", T=1),
    ]


def _mha_call(candidate, case: Case) -> dict[str, Tensor]:
    i = case.inputs
    module = build_module(candidate, (i["d_model"], i["n_heads"]), {}, i, "MultiHeadAttention")
    if "attn_mask" in i:
        out = module(i["x"], attn_mask=i["attn_mask"])
    else:
        out = module(i["x"])
    return {"output": as_tensor(out, "MultiHeadAttention(...)(x)")}


def _mha_variant(
    *, split=None, merge=None, scale=None, chunk=None, weigh=None, project_out: bool = True
):
    """A MultiHeadAttention (same __init__ as the notebook's) with one thing changed."""

    class Variant(nn.Module):
        def __init__(self, d_model: int, n_heads: int):
            super().__init__()
            self.n_heads = n_heads
            self.qkv = nn.Linear(d_model, 3 * d_model)
            self.out = nn.Linear(d_model, d_model)

        def forward(self, x: Tensor, attn_mask: Tensor | None = None) -> Tensor:
            H = self.n_heads
            q, k, v = (chunk or _chunk_blocks)(self.qkv(x), H)
            q, k, v = ((split or layers.split_heads)(t, H) for t in (q, k, v))
            factor = 1 / math.sqrt(q.shape[-1]) if scale is None else scale(q, x)
            scores = q @ k.transpose(-2, -1) * factor
            weights = (weigh or attention.masked_softmax)(scores, attn_mask)
            y = (merge or layers.merge_heads)(weights @ v)
            return self.out(y) if project_out else y

    return Variant


def _chunk_blocks(qkv: Tensor, H: int) -> tuple[Tensor, Tensor, Tensor]:
    return qkv.chunk(3, dim=-1)


def _chunk_per_head(qkv: Tensor, H: int) -> tuple[Tensor, Tensor, Tensor]:
    B, T, D3 = qkv.shape
    q, k, v = qkv.reshape(B, T, H, D3 // H).chunk(3, dim=-1)  # each (B, T, H, Dh)
    return q.flatten(-2), k.flatten(-2), v.flatten(-2)


def _softmax_fill(fill: float, invert: bool = False, dim: int = -1):
    def weigh(scores: Tensor, mask: Tensor | None) -> Tensor:
        if mask is not None:
            scores = scores.masked_fill(mask if invert else ~mask, fill)
        return torch.softmax(scores, dim=dim)

    return weigh


MHA_MISTAKES = [
    Mistake(
        "heads split without transpose (plain reshape to (B, H, T, Dh))",
        SPLIT_MISTAKES[0].hint,
        _mha_variant(split=_split_no_transpose),
    ),
    Mistake(
        "heads merged without transpose (plain reshape to (B, T, D))",
        MERGE_MISTAKES[0].hint,
        _mha_variant(merge=_merge_no_transpose),
    ),
    Mistake(
        "missing 1/sqrt(d_head) scaling",
        "divide each head's scores by sqrt(Dh), Dh = d_model // n_heads",
        _mha_variant(scale=lambda q, x: 1.0),
    ),
    Mistake(
        "scaled by 1/sqrt(d_model) instead of 1/sqrt(d_head)",
        "each head works in Dh = d_model // n_heads dimensions: scale by 1/sqrt(Dh)",
        _mha_variant(scale=lambda q, x: 1 / math.sqrt(x.shape[-1])),
    ),
    Mistake(
        "q, k, v cut per head from qkv instead of as three blocks [q | k | v]",
        "the fused projection's output is [q | k | v] along the last dim, three blocks of "
        "d_model each (the layout of nn.MultiheadAttention): cut it into its three blocks "
        "first, then split each block into heads",
        _mha_variant(chunk=_chunk_per_head),
    ),
    Mistake(
        "output projection missing",
        "after merging the heads apply the output projection (W_O) to mix them",
        _mha_variant(project_out=False),
    ),
    mistakes.SOFTMAX_OVER_QUERIES(
        _mha_variant(weigh=lambda s, m: attention.masked_softmax(s, m, dim=-2)),
        hint="normalise each query's scores over the keys: dim=-1",
    ),
    mistakes.MASK_INVERTED(_mha_variant(weigh=_softmax_fill(float("-inf"), invert=True))),
    mistakes.MASK_INVERTED(
        _mha_variant(weigh=lambda s, m: attention.masked_softmax(s, None if m is None else ~m))
    ),
    mistakes.MASK_FILLED_WITH_ZERO(_mha_variant(weigh=_softmax_fill(0.0))),
    mistakes.MASK_AFTER_SOFTMAX(
        _mha_variant(weigh=lambda s, m: torch.softmax(s, -1) * (1 if m is None else m))
    ),
    mistakes.MASK_IGNORED(
        _mha_variant(weigh=lambda s, m: torch.softmax(s, dim=-1)),
        hint="pass attn_mask on to the attention (True = may attend)",
    ),
]

MHA = Exercise(
    id="06.4",
    title="MultiHeadAttention module",
    points=4,
    notebook=NOTEBOOK,
    function="MultiHeadAttention",
    reference=layers.MultiHeadAttention,
    make_cases=_mha_cases,
    call=_mha_call,
    mistakes=MHA_MISTAKES,
    compare=close(),
    hint="print the shape after every line of your forward for the case above and compare "
    "with the prompt's shape table: which block of qkv's output is which, does every head "
    "see the mask as given (True = may attend), and what does a row with no allowed key "
    "give?",
    concepts=("multi-head attention",),
    contract=Contract(
        float32=True,
        differentiable=("x",),
        masked="attn_mask",
        masked_output="zero attention weights: the output projection's bias, never NaN",
    ),
)

EXERCISES = [LOOP, SPLIT, MERGE, MHA]
