"""Checks for notebook 07 (the Transformer block), in reading order:

07.1 ``layer_norm(x, weight, bias, eps=1e-5)``: normalise over the last dimension with the
biased variance, eps inside the square root, then scale and shift (``F.layer_norm``).

07.2 ``MLP(d_model, d_ff)``: the position-wise feed-forward network the student writes whole
(``__init__`` and ``forward``): ``fc1`` (Linear d_model -> d_ff), ReLU, ``fc2`` (Linear
d_ff -> d_model), i.e. ``course_utils.modeling.layers.MLP`` with its defaults (no dropout). The
check reads the layers' sizes first (a wrong hidden width is named without running anything),
then copies seeded weights in and compares outputs in eval mode, and then checks that training
mode gives the same outputs (a dropout layer with p > 0 is named).

07.3 ``TransformerBlock``. The notebook gives ``__init__(self, d_model, n_heads, d_ff,
norm_first=False)`` with the submodules of ``course_utils.modeling.layers.TransformerBlock``: ``attn``
(the course's MultiHeadAttention), ``norm1``, ``norm2`` (LayerNorms built on the student's
``layer_norm``) and ``mlp`` (the student's ``MLP``); the student writes ``forward(self, x)``
(B, T, D) -> (B, T, D):

    post-norm (norm_first=False): x = norm1(x + attn(x)); x = norm2(x + mlp(x))
    pre-norm  (norm_first=True):  x = x + attn(norm1(x)); x = x + mlp(norm2(x))

The check copies seeded weights (LayerNorm scales away from 1, so norm1 and norm2 differ) into
both orders and compares with the course's block.

07.4: the parameter count of a Transformer block.

The student writes ``block_param_count(d_model, n_heads, d_ff) -> int``, a *formula* for the
number of trainable parameters of one encoder block (multi-head self attention with biases,
two LayerNorms, an MLP ``d_model -> d_ff -> d_model`` with biases), i.e. of
``course_utils.modeling.layers.TransformerBlock(d_model, n_heads, d_ff)`` and of
``nn.TransformerEncoderLayer(d_model, n_heads, d_ff)``:

    attention  4 D^2 + 4 D         (W_Q, W_K, W_V, W_O and their biases; independent of H)
    MLP        2 D d_ff + d_ff + D (fc1 and fc2 with biases)
    LayerNorm  4 D                 (two of them, each a scale gamma and a shift beta)

The reference counts ``sum(p.numel())`` of a ``TransformerBlock`` built on the ``meta``
device (no memory), so the check compares the formula with the real module. The candidate
runs under a guard that rejects building big tensors: the exercise asks for arithmetic, and
the GPT-3-sized case would need gigabytes if a module were built to count.
"""

from __future__ import annotations

import numbers
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from course_utils.checks._common import (
    FormulaOnly,
    as_tensor,
    build_module,
    close,
    distinct_sizes,
    parameter_shapes,
    random_weights,
    size,
)
from course_utils.checks.core import Case, Exercise, Mistake, Outputs, generator, randn
from course_utils.lessons.nb07_transformer_block import LESSON
from course_utils.modeling import layers

NOTEBOOK = LESSON.filename

# ----------------------------------------------------------------------------- 07.1 layer_norm


def reference_layer_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float = 1e-5) -> Tensor:
    """LayerNorm over the last dimension: ``F.layer_norm(x, (D,), weight, bias, eps)``."""
    return F.layer_norm(x, x.shape[-1:], weight, bias, eps)


def _ln_cases(seed: int) -> list[Case]:
    g = generator(seed)
    B, T, D = distinct_sizes(g, 3, 3, 9)

    def case(name: str, x: Tensor, eps: float = 1e-5) -> Case:
        d = x.shape[-1]
        return Case(
            name,
            {
                "x": x,
                "weight": 1.0 + 0.5 * randn(g, d),
                "bias": 0.5 * randn(g, d),
                "eps": eps,
            },
        )

    offset = 3.0 + randn(g, B, T, 1)  # every token has its own mean and scale
    scale = 0.5 + torch.rand(B, T, 1, generator=g, dtype=torch.float64)
    return [
        case(f"x of shape (B, T, D) = ({B}, {T}, {D})", offset + scale * randn(g, B, T, D)),
        # variance ~1e-6 < eps: where eps sits (inside or outside the square root) matters
        case(
            f"tiny variance, (B, T, D) = ({T}, {B}, {D})",
            randn(g, T, B, 1) + 1e-3 * randn(g, T, B, D),
        ),
        case(f"another eps (1e-2), (B, T, D) = ({B}, {D}, {T})", randn(g, B, D, T), eps=1e-2),
        case(f"4-D input (2, {B}, {T}, {D})", 2.0 * randn(g, 2, B, T, D) - 1.0),
    ]


def _ln_call(candidate: Any, case: Case) -> Outputs:
    i = case.inputs
    out = candidate(i["x"], i["weight"], i["bias"], eps=i["eps"])
    return {"output": as_tensor(out, "layer_norm(x, weight, bias, eps)")}


def _ln_unbiased(x, weight, bias, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(x.var(-1, keepdim=True) + eps) * weight + bias


def _ln_eps_outside(x, weight, bias, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / (torch.sqrt(var) + eps) * weight + bias


def _ln_std_for_var(x, weight, bias, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    std = ((x - mu) ** 2).mean(-1, keepdim=True).sqrt()
    return (x - mu) / torch.sqrt(std + eps) * weight + bias


def _ln_over(dim):
    def ln(x, weight, bias, eps=1e-5):
        mu = x.mean(dim, keepdim=True)
        var = ((x - mu) ** 2).mean(dim, keepdim=True)
        return (x - mu) / torch.sqrt(var + eps) * weight + bias

    return ln


def _ln_no_affine(x, weight, bias, eps=1e-5):
    return reference_layer_norm(x, None, None, eps)


def _ln_no_bias(x, weight, bias, eps=1e-5):
    return reference_layer_norm(x, weight, None, eps)


def _ln_no_weight(x, weight, bias, eps=1e-5):
    return reference_layer_norm(x, None, bias, eps)


def _ln_no_centering(x, weight, bias, eps=1e-5):  # RMSNorm
    return x / torch.sqrt((x**2).mean(-1, keepdim=True) + eps) * weight + bias


def _ln_no_sqrt(x, weight, bias, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    return (x - mu) / (((x - mu) ** 2).mean(-1, keepdim=True) + eps) * weight + bias


LN_MISTAKES = [
    Mistake(
        "unbiased variance",
        "LayerNorm divides by D, not D - 1: torch.var's default is the unbiased (D - 1) "
        "estimate; pass unbiased=False (or correction=0), or average the squared deviations",
        _ln_unbiased,
    ),
    Mistake(
        "eps outside the square root",
        "eps goes inside the square root, added to the variance: divide by sqrt(var + eps), "
        "not by sqrt(var) + eps (it matters when the variance is small)",
        _ln_eps_outside,
    ),
    Mistake(
        "standard deviation used as the variance",
        "the denominator is the square root of the variance (the mean of the squared "
        "deviations) plus eps; you took the square root of the standard deviation",
        _ln_std_for_var,
    ),
    Mistake(
        "no square root",
        "divide by the standard deviation sqrt(var + eps), not by the variance",
        _ln_no_sqrt,
    ),
    Mistake(
        "normalised over the batch axis",
        "LayerNorm normalises each token's vector over its D features (the last dimension, "
        "dim=-1), not over the batch (that would be BatchNorm)",
        _ln_over(0),
    ),
    Mistake(
        "normalised over the time axis",
        "LayerNorm normalises each token's vector over its D features (dim=-1), not over the "
        "positions of the sequence (dim=-2)",
        _ln_over(-2),
    ),
    Mistake(
        "mean not subtracted",
        "subtract the mean before dividing: LayerNorm centres the vector (without it this "
        "is RMSNorm)",
        _ln_no_centering,
    ),
    Mistake(
        "forgot weight and bias",
        "after normalising, scale by weight (gamma) and add bias (beta), feature by feature",
        _ln_no_affine,
    ),
    Mistake(
        "forgot the bias",
        "after scaling by weight (gamma), add bias (beta)",
        _ln_no_bias,
    ),
    Mistake(
        "forgot the weight",
        "multiply the normalised vector by weight (gamma) before adding bias (beta)",
        _ln_no_weight,
    ),
]

LAYER_NORM = Exercise(
    id="07.1",
    concepts=("layer norm",),
    title="LayerNorm",
    points=2,
    notebook=NOTEBOOK,
    function="layer_norm",
    reference=reference_layer_norm,
    make_cases=_ln_cases,
    call=_ln_call,
    mistakes=LN_MISTAKES,
    compare=close(),
    forbids=(
        "torch.nn.functional.layer_norm",
        "torch.layer_norm",
        "aten::native_layer_norm",
        "aten::layer_norm",
    ),
    hint=(
        "Normalise one vector, e.g. [1, 2, 3, 4], by hand: its mean, its variance (divided by D "
        "or by D - 1?), and where does eps go? Compare with yours, then check that weight and "
        "bias act feature by feature, over the last dimension only."
    ),
)


# ----------------------------------------------------------------------------- 07.2 MLP


def _mlp_cases(seed: int) -> list[Case]:
    g = generator(seed)
    D = size(g, 3, 8)
    F_ = D
    while F_ % D == 0:  # a hidden width that is no multiple of d_model
        F_ = size(g, D + 1, 5 * D)

    def case(name: str, x: Tensor) -> Case:
        return Case(
            name,
            {
                "d_model": D,
                "d_ff": F_,
                "x": x,
                **random_weights(g, parameter_shapes(layers.MLP, D, F_)),
            },
        )

    B, T = size(g, 2, 3), size(g, 3, 6)
    return [
        case(f"x of shape (B, T, D) = ({B}, {T}, {D}), d_ff = {F_}", randn(g, B, T, D)),
        case(f"x of shape (N, D) = ({T}, {D})", randn(g, T, D)),
        case(f"one token (1, 1, {D})", randn(g, 1, 1, D)),
        case(f"4-D input (2, {B}, {T}, {D})", 2.0 * randn(g, 2, B, T, D)),
    ]


def _mlp_call(candidate: Any, case: Case) -> Outputs:
    """The hidden width first (``{"widths": [fc1 in, fc1 out, fc2 in, fc2 out]}``), then,
    only when it is right, the output with the case's weights."""
    i = case.inputs
    D, F_ = i["d_model"], i["d_ff"]
    with torch.random.fork_rng(devices=[]):
        module = candidate(D, F_)
    fcs = [getattr(module, name, None) for name in ("fc1", "fc2")]
    if not all(isinstance(fc, nn.Linear) for fc in fcs):
        raise ValueError(
            "your MLP needs two nn.Linear layers named fc1 and fc2 (the names the check "
            "and the block's weights use)"
        )
    widths = [fcs[0].in_features, fcs[0].out_features, fcs[1].in_features, fcs[1].out_features]
    out: Outputs = {"widths": torch.tensor(widths, dtype=torch.int64)}
    if widths != [D, F_, F_, D]:
        return out
    weights = {k: v for k, v in i.items() if k.startswith("w:")}
    module = build_module(lambda *a: module, (), {}, weights, "MLP")
    with torch.no_grad():
        y = module(i["x"])
    out["output"] = as_tensor(y, "MLP(d_model, d_ff)(x)")
    # The MLP has no dropout (the course's has none, and the notebook trains blocks built on
    # it): in training mode it must compute exactly what it computes in eval mode. Under a
    # forked RNG, so a dropout that draws does not move the notebook's random stream.
    module.train()
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        y_train = module(i["x"])
    out["train_output"] = as_tensor(y_train, "MLP(d_model, d_ff)(x) in training mode")
    return out


def _mlp_compare(case: Case, got: Outputs, expected: Outputs) -> str | None:
    g, e = got["widths"].tolist(), expected["widths"].tolist()
    D, F_ = case.inputs["d_model"], case.inputs["d_ff"]

    def wrong_hidden(w: list[int]) -> bool:  # d_model in and out, another hidden width
        return w[0] == w[3] == D and w[1] == w[2] != F_

    if wrong_hidden(g) and wrong_hidden(e):  # the same mistake, whatever width was taken
        return None
    if g != e:
        return (
            f"case '{case.name}': your layers map {g[0]} -> {g[1]} (fc1) and {g[2]} -> {g[3]} "
            f"(fc2); expected d_model -> d_ff -> d_model = {e[0]} -> {e[1]} -> {e[3]}"
        )
    problem = close()(case, {"output": got.get("output")}, {"output": expected["output"]})
    if problem is not None:
        return problem
    train, output = got.get("train_output"), got["output"]
    if train is not None and not (
        train.shape == output.shape and torch.allclose(train, output, rtol=1e-5, atol=1e-6)
    ):
        return (
            f"case '{case.name}': right in eval mode, but in training mode (module.train()) "
            "your MLP computes something else: this MLP has no dropout (nor anything else "
            "that depends on the mode), like the course's; the notebook trains blocks built "
            "on it"
        )
    return None


class _MLPBase(nn.Module):
    def __init__(self, d_model: int, d_ff: int, hidden: int | None = None, bias: bool = True):
        super().__init__()
        hidden = d_ff if hidden is None else hidden
        self.fc1 = nn.Linear(d_model, hidden, bias=bias)
        self.fc2 = nn.Linear(hidden, d_model, bias=bias)


def _mlp_variant(forward, hidden=None):
    class Variant(_MLPBase):
        def __init__(self, d_model: int, d_ff: int):
            super().__init__(d_model, d_ff, None if hidden is None else hidden(d_model, d_ff))

        def forward(self, x: Tensor) -> Tensor:
            return forward(self, x)

    return Variant


MLP_MISTAKES = [
    Mistake(
        "activation missing",
        "put a ReLU between fc1 and fc2: without it the two layers collapse into one linear map",
        _mlp_variant(lambda m, x: m.fc2(m.fc1(x))),
    ),
    Mistake(
        "activation after the second linear",
        "the ReLU goes between the two layers, on the d_ff hidden units; the MLP's output "
        "(fc2's) is not activated, or it could never be negative",
        _mlp_variant(lambda m, x: torch.relu(m.fc2(m.fc1(x)))),
    ),
    Mistake(
        "activation after both linears",
        "only the hidden units (fc1's output) go through the ReLU; fc2's output is returned "
        "as it is",
        _mlp_variant(lambda m, x: torch.relu(m.fc2(torch.relu(m.fc1(x))))),
    ),
    Mistake(
        "GELU instead of ReLU",
        "this MLP uses ReLU, as in the 2017 paper and nn.TransformerEncoderLayer's default "
        "(GPT-2 and BERT use GELU)",
        _mlp_variant(lambda m, x: m.fc2(F.gelu(m.fc1(x)))),
    ),
    Mistake(
        "residual added inside the MLP",
        "the MLP returns only the second layer's output; the residual around it is the "
        "block's job (exercise 07.3), not the MLP's",
        _mlp_variant(lambda m, x: x + m.fc2(torch.relu(m.fc1(x)))),
    ),
    Mistake(
        "wrong hidden width",
        "fc1 maps d_model -> d_ff and fc2 maps d_ff -> d_model: the hidden width is the "
        "d_ff argument (often 4 * d_model, but take the argument)",
        _mlp_variant(lambda m, x: m.fc2(torch.relu(m.fc1(x))), hidden=lambda d, f: d),
    ),
]

MLP_EXERCISE = Exercise(
    id="07.2",
    title="position-wise MLP",
    points=2,
    notebook=NOTEBOOK,
    function="MLP",
    reference=layers.MLP,
    make_cases=_mlp_cases,
    call=_mlp_call,
    mistakes=MLP_MISTAKES,
    compare=_mlp_compare,
    hint=(
        "Print the shapes through your forward for d_model = 4 and d_ff = 16: (..., 4) to (..., "
        "16) and back. Which layer's output goes through the ReLU? Are the submodules named as "
        "the prompt names them (the check loads the weights by name)?"
    ),
)


# ----------------------------------------------------------------------------- 07.3 TransformerBlock


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
                **random_weights(g, parameter_shapes(layers.TransformerBlock, D, H, F_)),
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


def _pre_one_norm(m, x):
    x = x + m.attn(m.norm1(x))
    return x + m.mlp(m.norm1(x))


def _post_one_norm(m, x):
    x = m.norm1(x + m.attn(x))
    return m.norm1(x + m.mlp(x))


def _pre_parallel(m, x):
    return x + m.attn(m.norm1(x)) + m.mlp(m.norm2(x))


def _post_parallel(m, x):
    h = m.norm1(x + m.attn(x))
    return m.norm2(h + m.mlp(x))


BLOCK_MISTAKES = [
    Mistake(
        "LayerNorm in the wrong place (pre-norm and post-norm swapped)",
        "post-norm (norm_first false) normalises each residual SUM, sublayer output plus its "
        "input; pre-norm (norm_first true) normalises each sublayer's INPUT and adds the "
        "sublayer's output to the unnormalised stream. Yours does the opposite of what "
        "norm_first asks",
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
        "the same LayerNorm for both sublayers",
        "each sublayer has its own LayerNorm, with its own weight and bias: norm1 around "
        "the attention, norm2 around the MLP",
        _block_variant(pre=_pre_one_norm, post=_post_one_norm),
    ),
    Mistake(
        "pre-norm residual taken from the normalised input",
        "in pre-norm the residual stream stays unnormalised: the sublayer reads the "
        "normalised input, but its output is added to the input as it was, not to its "
        "normalised version",
        _block_variant(pre=_pre_residual_normalised, post=_post),
    ),
    Mistake(
        "LayerNorm applied to the sublayer output before the residual",
        "post-norm normalises the residual sum (input plus sublayer output), not the "
        "sublayer's output before it is added",
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
        "use the block's MLP as it is, with its ReLU between the two layers; without the "
        "nonlinearity it is a single linear map",
        _block_variant(pre=_pre_with(_linear_mlp), post=_post_with(_linear_mlp)),
    ),
    Mistake(
        "GELU instead of ReLU",
        "this block's MLP uses ReLU, as in the 2017 paper and nn.TransformerEncoderLayer's "
        "default: use the block's own MLP submodule rather than rebuilding it",
        _block_variant(pre=_pre_with(_gelu_mlp), post=_post_with(_gelu_mlp)),
    ),
]

BLOCK = Exercise(
    id="07.3",
    concepts=("Transformer encoder layer",),
    title="Transformer block (pre-norm and post-norm)",
    points=4,
    notebook=NOTEBOOK,
    function="TransformerBlock",
    reference=layers.TransformerBlock,
    make_cases=_block_cases,
    call=_block_call,
    mistakes=BLOCK_MISTAKES,
    compare=close(),
    hint=(
        "Set norm_first to each value and compare with the case: which tensor does each LayerNorm"
        " see, the sublayer's input or the residual sum? Are the two sublayers in the prompt's "
        "order? Print x before and after your forward: is the caller's tensor unchanged?"
    ),
)


# ----------------------------------------------------------------------------- 07.4 parameter count
# A formula needs no tensor at all; a module being built is caught at its first weight.


def block_param_count(d_model: int, n_heads: int, d_ff: int) -> int:
    """Trainable parameters of ``TransformerBlock(d_model, n_heads, d_ff)`` (biases and
    LayerNorms included), counted on a ``meta``-device module: ``sum(p.numel())``."""
    from course_utils.modeling.layers import TransformerBlock

    with torch.device("meta"):
        block = TransformerBlock(d_model, n_heads, d_ff)
    return sum(p.numel() for p in block.parameters() if p.requires_grad)


def formula_block_param_count(d_model: int, n_heads: int, d_ff: int) -> int:
    """The closed form: ``4 D^2 + 4 D`` (attention) ``+ 2 D d_ff + d_ff + D`` (MLP) ``+ 4 D``
    (two LayerNorms). ``n_heads`` does not appear: the heads split D, they do not add weights."""
    D, F = d_model, d_ff
    attention = 4 * D * D + 4 * D
    mlp = 2 * D * F + F + D
    norms = 2 * 2 * D
    return attention + mlp + norms


# ----------------------------------------------------------------------------- mistakes


def _forgot_biases(d_model, n_heads, d_ff):
    D, F = d_model, d_ff
    return 4 * D * D + 2 * D * F + 4 * D


def _forgot_mlp_biases(d_model, n_heads, d_ff):
    return formula_block_param_count(d_model, n_heads, d_ff) - d_ff - d_model


def _forgot_layernorm(d_model, n_heads, d_ff):
    return formula_block_param_count(d_model, n_heads, d_ff) - 4 * d_model


def _layernorm_half(d_model, n_heads, d_ff):
    return formula_block_param_count(d_model, n_heads, d_ff) - 2 * d_model


def _w_o_twice(d_model, n_heads, d_ff):
    D = d_model
    return formula_block_param_count(d_model, n_heads, d_ff) + D * D + D


def _w_o_missing(d_model, n_heads, d_ff):
    D = d_model
    return formula_block_param_count(d_model, n_heads, d_ff) - D * D - D


def _swapped(d_model, n_heads, d_ff):
    return formula_block_param_count(d_ff, n_heads, d_model)


def _per_head_full_width(d_model, n_heads, d_ff):
    D, H = d_model, n_heads
    return formula_block_param_count(d_model, n_heads, d_ff) + (H - 1) * (3 * D * D + 3 * D)


def _only_one_mlp_layer(d_model, n_heads, d_ff):
    return formula_block_param_count(d_model, n_heads, d_ff) - d_model * d_ff - d_model


MISTAKES = [
    Mistake(
        "forgot the biases",
        "every nn.Linear has a bias vector as long as its output: qkv has 3*d_model, out "
        "has d_model, fc1 has d_ff and fc2 has d_model.",
        _forgot_biases,
    ),
    Mistake(
        "forgot the LayerNorm parameters",
        "each of the two LayerNorms has a learned scale gamma and shift beta, d_model "
        "each: 4*d_model in all. (Forgetting the four attention biases, 3*d_model for "
        "qkv and d_model for W_O, would also leave you 4*d_model short.)",
        _forgot_layernorm,
    ),
    Mistake(
        "LayerNorm parameters half counted",
        "there are two LayerNorms (after attention and after the MLP), and each has two "
        "vectors of length d_model (gamma and beta): 4*d_model, not 2*d_model.",
        _layernorm_half,
    ),
    Mistake(
        "forgot the MLP biases",
        "fc1 has a bias of length d_ff and fc2 one of length d_model.",
        _forgot_mlp_biases,
    ),
    Mistake(
        "W_O counted twice",
        "attention has four d_model x d_model matrices (W_Q, W_K, W_V and W_O), each with "
        "a bias: 4*d_model**2 + 4*d_model. W_O appears once.",
        _w_o_twice,
    ),
    Mistake(
        "W_O not counted",
        "after the heads are merged, the output projection W_O (d_model x d_model, plus a "
        "bias) mixes them: attention has 4 matrices, not 3.",
        _w_o_missing,
    ),
    Mistake(
        "d_model and d_ff swapped",
        "d_model is the width of the residual stream (attention and LayerNorm work at "
        "this width); d_ff is only the hidden width of the MLP. Check the argument order "
        "(d_model, n_heads, d_ff).",
        _swapped,
    ),
    Mistake(
        "each head counted with full-width projections",
        "the heads split d_model: each head's W_Q is d_model x (d_model / n_heads), so all "
        "heads together have d_model x d_model per projection. The count does not depend "
        "on n_heads.",
        _per_head_full_width,
    ),
    Mistake(
        "only one MLP layer counted",
        "the MLP has two layers: fc1 (d_model -> d_ff) and fc2 (d_ff -> d_model), "
        "each with weights and a bias.",
        _only_one_mlp_layer,
    ),
]


# ----------------------------------------------------------------------------- cases


def make_cases(seed: int) -> list[Case]:
    """Two seeded small blocks (n_heads >= 2, d_ff != d_model, not a multiple of it), then
    BERT-base's layer (768, 12, 3072) and GPT-3's (12288, 96, 49152)."""
    gen = generator(seed)
    cases = []
    for i in range(2):
        H = int(torch.randint(2, 7, (1,), generator=gen))
        Dh = int(torch.randint(3, 17, (1,), generator=gen))
        D = H * Dh
        F = D
        while F % D == 0 or D % F == 0:  # keep d_ff apart from d_model and its multiples
            F = int(torch.randint(8, 8 * D, (1,), generator=gen))
        cases.append(
            Case(
                f"random sizes #{i + 1} (d_model={D}, n_heads={H}, d_ff={F})",
                {"d_model": D, "n_heads": H, "d_ff": F},
            )
        )
    cases.append(
        Case(
            "BERT-base layer (d_model=768, n_heads=12, d_ff=3072)",
            {"d_model": 768, "n_heads": 12, "d_ff": 3072},
        )
    )
    cases.append(
        Case(
            "GPT-3 layer (d_model=12288, n_heads=96, d_ff=49152)",
            {"d_model": 12288, "n_heads": 96, "d_ff": 49152},
        )
    )
    return cases


def _formula_only() -> FormulaOnly:
    return FormulaOnly(
        lambda shape: (
            f"block_param_count created a tensor of shape {shape}: exercise 07.4 asks "
            "for a formula in d_model, n_heads and d_ff (plain arithmetic), not for building a "
            "block and counting its parameters"
        )
    )


def _as_count(value: Any) -> int:
    """The candidate's return value as a Python int, or an error a student can act on."""
    if isinstance(value, Tensor):
        if value.numel() != 1:
            raise TypeError(
                f"block_param_count should return one number, got a tensor of "
                f"shape {tuple(value.shape)}"
            )
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"block_param_count should return an int, got {type(value).__name__}")
    if isinstance(value, numbers.Integral):
        return int(value)
    if not float(value).is_integer():
        raise ValueError(
            f"block_param_count returned {value}, which is not a whole number: a "
            "parameter count is an integer (use // when you divide)"
        )
    return int(value)


def call(candidate: Any, case: Case) -> Outputs:
    """``candidate(d_model, n_heads, d_ff)`` -> ``{"count": int64 scalar}``.

    The reference builds a meta-device block; every other candidate runs under a guard
    that rejects big tensors, so the count must come from a formula.
    """
    args = (case.inputs["d_model"], case.inputs["n_heads"], case.inputs["d_ff"])
    if candidate is block_param_count:
        value = candidate(*args)
    else:
        with _formula_only():
            value = candidate(*args)
    return {"count": torch.tensor(_as_count(value), dtype=torch.int64)}


def compare(case: Case, got: Outputs, expected: Outputs) -> str | None:
    """Exact integer equality; the message gives both counts and their difference."""
    g, e = int(got["count"]), int(expected["count"])
    if g == e:
        return None
    return (
        f"case '{case.name}': your formula gives {g:,} but the block has {e:,} "
        f"parameters ({g - e:+,})"
    )


PARAM_COUNT = Exercise(
    id="07.4",
    title="parameter count of a Transformer block",
    points=2,
    notebook=NOTEBOOK,
    function="block_param_count",
    reference=block_param_count,
    make_cases=make_cases,
    call=call,
    mistakes=MISTAKES,
    compare=compare,
    hint=(
        "Print [(n, p.shape) for n, p in TransformerBlock(8, 2, 24).named_parameters()] and add "
        "the sizes up: which tensors did your formula miss or count twice? Does the number of "
        "heads change the total?"
    ),
)

EXERCISES = [LAYER_NORM, MLP_EXERCISE, BLOCK, PARAM_COUNT]
