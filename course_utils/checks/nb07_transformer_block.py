"""Checks for notebook 07 (the Transformer block): 07.1 TransformerBlock.

07.1 is a class. The notebook gives ``__init__(self, d_model, n_heads, d_ff, norm_first=False)``
with the submodules of ``course_utils.layers.TransformerBlock``: ``attn`` (the course's
MultiHeadAttention), ``norm1``, ``norm2`` (LayerNorm) and ``mlp`` (``fc1``, ReLU, ``fc2``); the
student writes ``forward(self, x)`` (B, T, D) -> (B, T, D):

    post-norm (norm_first=False): x = norm1(x + attn(x)); x = norm2(x + mlp(x))
    pre-norm  (norm_first=True):  x = x + attn(norm1(x)); x = x + mlp(norm2(x))

The check copies seeded weights (LayerNorm scales away from 1, so norm1 and norm2 differ) into
both orders and compares with the course's block.

To add an exercise: define its cases, call and mistakes below, then append it to ``EXERCISES``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from course_utils import layers
from course_utils.checks._common import as_tensor, build_module, close, random_weights, size
from course_utils.checks.core import Case, Exercise, Mistake, generator, randn

NOTEBOOK = "07_transformer_block.ipynb"

# ----------------------------------------------------------------------------- 07.1 TransformerBlock


def _block_shapes(D: int, F_: int) -> dict[str, tuple[int, ...]]:
    return {
        "attn.qkv.weight": (3 * D, D),
        "attn.qkv.bias": (3 * D,),
        "attn.out.weight": (D, D),
        "attn.out.bias": (D,),
        "norm1.weight": (D,),
        "norm1.bias": (D,),
        "norm2.weight": (D,),
        "norm2.bias": (D,),
        "mlp.fc1.weight": (F_, D),
        "mlp.fc1.bias": (F_,),
        "mlp.fc2.weight": (D, F_),
        "mlp.fc2.bias": (D,),
    }


def _block_cases(seed: int) -> list[Case]:
    g = generator(seed)
    H, Dh = size(g, 2, 3), size(g, 2, 4)
    D = H * Dh
    F_ = size(g, 2, 4) * D

    def case(name: str, norm_first: bool, B: int, T: int) -> Case:
        return Case(
            name,
            {
                "d_model": D,
                "n_heads": H,
                "d_ff": F_,
                "norm_first": norm_first,
                "x": randn(g, B, T, D),
                **random_weights(g, _block_shapes(D, F_)),
            },
        )

    return [
        case("post-norm (norm_first=False)", False, size(g, 2, 3), size(g, 3, 6)),
        case("pre-norm (norm_first=True)", True, size(g, 2, 3), size(g, 3, 6)),
        case("post-norm, one token", False, 2, 1),
        case("pre-norm, one sequence", True, 1, size(g, 3, 6)),
    ]


def _block_call(candidate, case: Case) -> dict[str, Tensor]:
    i = case.inputs
    module = build_module(
        candidate,
        (i["d_model"], i["n_heads"], i["d_ff"]),
        {"norm_first": i["norm_first"]},
        i,
        "TransformerBlock",
    )
    with torch.no_grad():
        out = module(i["x"])
    return {"output": as_tensor(out, "TransformerBlock(...)(x)")}


class _Block(nn.Module):
    """The notebook's __init__; subclasses below write a wrong forward."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, norm_first: bool = False):
        super().__init__()
        self.norm_first = norm_first
        self.attn = layers.MultiHeadAttention(d_model, n_heads)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.mlp = layers.MLP(d_model, d_ff)


def _block_variant(pre, post):
    """A block whose forward is ``pre(self, x)`` when norm_first else ``post(self, x)``."""

    class Variant(_Block):
        def forward(self, x: Tensor) -> Tensor:
            return pre(self, x) if self.norm_first else post(self, x)

    return Variant


def _pre(m, x):
    x = x + m.attn(m.norm1(x))
    return x + m.mlp(m.norm2(x))


def _post(m, x):
    x = m.norm1(x + m.attn(x))
    return m.norm2(x + m.mlp(x))


def _relu_mlp(m, x):
    return m.mlp(x)


def _linear_mlp(m, x):  # activation missing
    return m.mlp.fc2(m.mlp.fc1(x))


def _gelu_mlp(m, x):
    return m.mlp.fc2(F.gelu(m.mlp.fc1(x)))


def _pre_with(mlp):
    def pre(m, x):
        x = x + m.attn(m.norm1(x))
        return x + mlp(m, m.norm2(x))

    return pre


def _post_with(mlp):
    def post(m, x):
        x = m.norm1(x + m.attn(x))
        return m.norm2(x + mlp(m, x))

    return post


def _pre_no_attn_residual(m, x):
    h = m.attn(m.norm1(x))
    return h + m.mlp(m.norm2(h))


def _post_no_attn_residual(m, x):
    h = m.norm1(m.attn(x))
    return m.norm2(h + m.mlp(h))


def _pre_no_mlp_residual(m, x):
    h = x + m.attn(m.norm1(x))
    return m.mlp(m.norm2(h))


def _post_no_mlp_residual(m, x):
    h = m.norm1(x + m.attn(x))
    return m.norm2(m.mlp(h))


def _pre_norms_swapped(m, x):
    h = x + m.attn(m.norm2(x))
    return h + m.mlp(m.norm1(h))


def _post_norms_swapped(m, x):
    h = m.norm2(x + m.attn(x))
    return m.norm1(h + m.mlp(h))


def _pre_residual_normalised(m, x):
    h = m.norm1(x)
    h = h + m.attn(h)
    z = m.norm2(h)
    return z + m.mlp(z)


def _post_norm_inside(m, x):
    h = x + m.norm1(m.attn(x))
    return h + m.norm2(m.mlp(h))


def _pre_parallel(m, x):
    return x + m.attn(m.norm1(x)) + m.mlp(m.norm2(x))


def _post_parallel(m, x):
    h = m.norm1(x + m.attn(x))
    return m.norm2(h + m.mlp(x))


BLOCK_MISTAKES = [
    Mistake(
        "LayerNorm in the wrong place (pre-norm and post-norm swapped)",
        "norm_first=False (post-norm): x = norm1(x + attn(x)), then x = norm2(x + mlp(x)); "
        "norm_first=True (pre-norm): x = x + attn(norm1(x)), then x = x + mlp(norm2(x))",
        _block_variant(pre=_post, post=_pre),
    ),
    Mistake(
        "missing residual around the attention",
        "add the sublayer's input back: x + attn(...), not attn(...) alone",
        _block_variant(pre=_pre_no_attn_residual, post=_post_no_attn_residual),
    ),
    Mistake(
        "missing residual around the MLP",
        "add the sublayer's input back: x + mlp(...), not mlp(...) alone",
        _block_variant(pre=_pre_no_mlp_residual, post=_post_no_mlp_residual),
    ),
    Mistake(
        "norm1 and norm2 swapped",
        "norm1 belongs to the attention sublayer, norm2 to the MLP",
        _block_variant(pre=_pre_norms_swapped, post=_post_norms_swapped),
    ),
    Mistake(
        "pre-norm residual taken from the normalised input",
        "in pre-norm the residual stream stays unnormalised: x = x + attn(norm1(x)), not "
        "h = norm1(x); x = h + attn(h)",
        _block_variant(pre=_pre_residual_normalised, post=_post),
    ),
    Mistake(
        "LayerNorm applied to the sublayer output before the residual",
        "post-norm normalises the sum: norm1(x + attn(x)), not x + norm1(attn(x))",
        _block_variant(pre=_pre, post=_post_norm_inside),
    ),
    Mistake(
        "MLP fed the block input instead of the attention sublayer's output",
        "the two sublayers run one after the other: the MLP sees the output of the "
        "attention sublayer (with its residual), not the block's input",
        _block_variant(pre=_pre_parallel, post=_post_parallel),
    ),
    Mistake(
        "MLP activation missing",
        "the MLP is fc2(relu(fc1(x))); without the nonlinearity it is a single linear map",
        _block_variant(pre=_pre_with(_linear_mlp), post=_post_with(_linear_mlp)),
    ),
    Mistake(
        "GELU instead of ReLU",
        "this block's MLP uses ReLU, as in the 2017 paper and nn.TransformerEncoderLayer's "
        "default: call self.mlp(x)",
        _block_variant(pre=_pre_with(_gelu_mlp), post=_post_with(_gelu_mlp)),
    ),
]

BLOCK = Exercise(
    id="07.1",
    title="Transformer block (pre-norm and post-norm)",
    points=4,
    notebook=NOTEBOOK,
    function="TransformerBlock",
    reference=layers.TransformerBlock,
    make_cases=_block_cases,
    call=_block_call,
    mistakes=BLOCK_MISTAKES,
    compare=close(),
    hint="post-norm: x = norm1(x + attn(x)); x = norm2(x + mlp(x)). pre-norm: "
    "x = x + attn(norm1(x)); x = x + mlp(norm2(x)). Use self.norm_first to choose",
)

EXERCISES = [BLOCK]  # append this notebook's 07.2 here
