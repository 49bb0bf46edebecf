"""Checks 07.1 (layer_norm) and 07.2 (the MLP) accept correct answers written differently and
name each classic mistake.

Check 07.3 (TransformerBlock, pre- and post-norm) accepts correct answers written
differently and names each classic mistake; its reference agrees with
nn.TransformerEncoderLayer. The wrong answers here are written independently of the check's own.

The 07.4 check (parameter count of a Transformer block) accepts correct formulas written
differently, rejects each classic mistake with a hint naming it, and insists on a formula.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from checks_testing import (
    SEEDS,
    assert_passes,
    assert_registered_mistakes_named,
    assert_rejected,
    mistake_names,
)
from torch import nn

from course_utils import checks
from course_utils.checks import ERROR, FAILED, NOT_ATTEMPTED, PASSED, get, run
from course_utils.checks._common import build_module
from course_utils.lessons.nb07_transformer_block.exercises import (
    MISTAKES,
    block_param_count,
    call,
    formula_block_param_count,
    make_cases,
)
from course_utils.modeling import layers
from course_utils.modeling.layers import TransformerBlock

ID = "07.3"


class Given(nn.Module):
    """The __init__ the notebook gives the student."""

    def __init__(self, d_model, n_heads, d_ff, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.attn = layers.MultiHeadAttention(d_model, n_heads)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.mlp = layers.MLP(d_model, d_ff)


class BlockSublayers(Given):
    def _attn(self, x):
        return self.attn(x)

    def _ff(self, x):
        return self.mlp.fc2(torch.relu(self.mlp.fc1(x)))

    def forward(self, x):
        for sub, norm in ((self._attn, self.norm1), (self._ff, self.norm2)):
            x = x + sub(norm(x)) if self.norm_first else norm(x + sub(x))
        return x


class BlockFunctionalNorm(Given):
    def forward(self, x):
        def ln(norm, t):
            return F.layer_norm(t, t.shape[-1:], norm.weight, norm.bias, norm.eps)

        if self.norm_first:
            h = x + self.attn(ln(self.norm1, x))
            return h + self.mlp(ln(self.norm2, h))
        h = ln(self.norm1, x + self.attn(x))
        return ln(self.norm2, h + self.mlp(h))


@pytest.mark.parametrize(
    "candidate", [BlockSublayers, BlockFunctionalNorm, layers.TransformerBlock]
)
def test_block_check_accepts_correct_answers(candidate):
    assert_passes(ID, candidate)


def block_from(pre, post):
    class Wrong(Given):
        def forward(self, x):
            return pre(self, x) if self.norm_first else post(self, x)

    return Wrong


def right_pre(m, x):
    h = x + m.attn(m.norm1(x))
    return h + m.mlp(m.norm2(h))


def right_post(m, x):
    h = m.norm1(x + m.attn(x))
    return m.norm2(h + m.mlp(h))


def ff(m, x, act):
    return m.mlp.fc2(act(m.mlp.fc1(x)))


WRONG = {
    "LayerNorm in the wrong place (pre-norm and post-norm swapped)": block_from(
        right_post, right_pre
    ),
    "missing residual around the attention": block_from(
        lambda m, x: (lambda a: a + m.mlp(m.norm2(a)))(m.attn(m.norm1(x))),
        lambda m, x: (lambda a: m.norm2(a + m.mlp(a)))(m.norm1(m.attn(x))),
    ),
    "missing residual around the MLP": block_from(
        lambda m, x: m.mlp(m.norm2(x + m.attn(m.norm1(x)))),
        lambda m, x: m.norm2(m.mlp(m.norm1(x + m.attn(x)))),
    ),
    "norm1 and norm2 swapped": block_from(
        lambda m, x: (lambda a: a + m.mlp(m.norm1(a)))(x + m.attn(m.norm2(x))),
        lambda m, x: (lambda a: m.norm1(a + m.mlp(a)))(m.norm2(x + m.attn(x))),
    ),
    "the same LayerNorm for both sublayers": block_from(
        lambda m, x: (lambda a: a + m.mlp(m.norm1(a)))(x + m.attn(m.norm1(x))),
        lambda m, x: (lambda a: m.norm1(a + m.mlp(a)))(m.norm1(x + m.attn(x))),
    ),
    "pre-norm residual taken from the normalised input": block_from(
        lambda m, x: (lambda n: (lambda a: m.norm2(a) + m.mlp(m.norm2(a)))(n + m.attn(n)))(
            m.norm1(x)
        ),
        right_post,
    ),
    "LayerNorm applied to the sublayer output before the residual": block_from(
        right_pre, lambda m, x: (lambda a: a + m.norm2(m.mlp(a)))(x + m.norm1(m.attn(x)))
    ),
    "MLP fed the block input instead of the attention sublayer's output": block_from(
        lambda m, x: x + m.attn(m.norm1(x)) + m.mlp(m.norm2(x)),
        lambda m, x: m.norm2(m.norm1(x + m.attn(x)) + m.mlp(x)),
    ),
    "MLP activation missing": block_from(
        lambda m, x: (lambda a: a + ff(m, m.norm2(a), nn.Identity()))(x + m.attn(m.norm1(x))),
        lambda m, x: (lambda a: m.norm2(a + ff(m, a, nn.Identity())))(m.norm1(x + m.attn(x))),
    ),
    "GELU instead of ReLU": block_from(
        lambda m, x: (lambda a: a + ff(m, m.norm2(a), nn.GELU()))(x + m.attn(m.norm1(x))),
        lambda m, x: (lambda a: m.norm2(a + ff(m, a, nn.GELU())))(m.norm1(x + m.attn(x))),
    ),
}


@pytest.mark.parametrize("mistake", sorted(WRONG))
def test_block_check_names_each_classic_mistake(mistake):
    assert_rejected(ID, WRONG[mistake], mistake)


def test_block_check_covers_every_registered_mistake():
    assert set(WRONG) == mistake_names(ID)
    assert_registered_mistakes_named(ID)


def test_block_ignoring_norm_first_is_named_as_the_wrong_norm_place():
    assert_rejected(
        ID,
        block_from(right_post, right_post),
        "LayerNorm in the wrong place (pre-norm and post-norm swapped)",
    )


def test_block_cases_cover_both_norm_orders_with_distinct_norms():
    cases = checks.get(ID).make_cases(0)
    assert {c.inputs["norm_first"] for c in cases} == {True, False}
    for c in cases:
        assert not torch.allclose(c.inputs["w:norm1.weight"], c.inputs["w:norm2.weight"])


@pytest.mark.parametrize("seed", SEEDS)
def test_block_reference_agrees_with_nn_transformer_encoder_layer_on_every_case(seed):
    exercise = checks.get(ID)
    for case in exercise.make_cases(seed):
        i = case.inputs
        ours = build_module(
            layers.TransformerBlock,
            (i["d_model"], i["n_heads"], i["d_ff"]),
            {"norm_first": i["norm_first"]},
            i,
            "TransformerBlock",
        )
        theirs = nn.TransformerEncoderLayer(
            i["d_model"],
            i["n_heads"],
            i["d_ff"],
            dropout=0.0,
            batch_first=True,
            norm_first=i["norm_first"],
        )
        theirs = theirs.double().eval()
        with torch.no_grad():
            theirs.self_attn.in_proj_weight.copy_(ours.attn.qkv.weight)
            theirs.self_attn.in_proj_bias.copy_(ours.attn.qkv.bias)
            theirs.self_attn.out_proj.weight.copy_(ours.attn.out.weight)
            theirs.self_attn.out_proj.bias.copy_(ours.attn.out.bias)
            for name in ("norm1", "norm2"):
                getattr(theirs, name).load_state_dict(getattr(ours, name).state_dict())
            theirs.linear1.load_state_dict(ours.mlp.fc1.state_dict())
            theirs.linear2.load_state_dict(ours.mlp.fc2.state_dict())
            expected = theirs(i["x"])
        got = exercise.call(layers.TransformerBlock, case)["output"]
        torch.testing.assert_close(got, expected, msg=case.name)


# ----------------------------------------------------------------------------- 07.4 parameter count
def _count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("seed", range(5))
def test_closed_form_equals_the_parameters_of_a_real_block(seed):
    g = torch.Generator().manual_seed(seed)
    H = int(torch.randint(1, 5, (1,), generator=g))
    D = H * int(torch.randint(2, 9, (1,), generator=g))
    F = int(torch.randint(1, 64, (1,), generator=g))
    ours = TransformerBlock(D, H, F)
    torchs = nn.TransformerEncoderLayer(D, H, F)
    assert formula_block_param_count(D, H, F) == _count(ours) == _count(torchs)
    assert block_param_count(D, H, F) == _count(ours)


def test_reference_passes_its_own_check():
    assert run("07.4", block_param_count).passed
    assert run("07.4", formula_block_param_count).passed


def _per_head(d_model, n_heads, d_ff):
    """Correct, written differently: head by head, then W_O, MLP and norms."""
    dh = d_model // n_heads
    heads = n_heads * 3 * (d_model * dh + dh)
    w_o = d_model * d_model + d_model
    mlp = (d_model * d_ff + d_ff) + (d_ff * d_model + d_model)
    return heads + w_o + mlp + 2 * (d_model + d_model)


def _float_arithmetic(d_model, n_heads, d_ff):
    """Correct, with true division (returns a float that is a whole number)."""
    per_head_width = d_model / n_heads
    return (
        4 * n_heads * per_head_width * d_model
        + 4 * d_model
        + 2 * d_model * d_ff
        + d_ff
        + 5 * d_model
    )


def _numpy_int(d_model, n_heads, d_ff):
    return np.int64(4 * d_model**2 + 2 * d_model * d_ff + 9 * d_model + d_ff)


def _tensor_scalar(d_model, n_heads, d_ff):
    return torch.tensor(4 * d_model**2 + 2 * d_model * d_ff + 9 * d_model + d_ff)


@pytest.mark.parametrize("answer", [_per_head, _float_arithmetic, _numpy_int, _tensor_scalar])
def test_correct_formulas_written_differently_pass(answer):
    result = run("07.4", answer)
    assert result.status == PASSED, result.message


@pytest.mark.parametrize("mistake", MISTAKES, ids=lambda m: m.name)
def test_each_classic_mistake_is_rejected_with_a_hint_naming_it(mistake):
    result = run("07.4", mistake.impl)
    assert result.status == FAILED
    assert result.mistake == mistake.name
    assert mistake.name in result.message and mistake.hint in result.message


def test_required_mistakes_are_all_known():
    names = {m.name for m in MISTAKES}
    for required in (
        "forgot the biases",
        "forgot the LayerNorm parameters",
        "W_O counted twice",
        "W_O not counted",
        "d_model and d_ff swapped",
    ):
        assert required in names


@pytest.mark.parametrize("seed", range(10))
def test_mistakes_give_distinct_counts_on_the_first_case_of_every_seed(seed):
    case = make_cases(seed)[0]
    args = (case.inputs["d_model"], case.inputs["n_heads"], case.inputs["d_ff"])
    counts = [formula_block_param_count(*args)] + [m.impl(*args) for m in MISTAKES]
    assert len(set(counts)) == len(counts), (case.name, counts)


def test_cases_include_real_model_sizes_and_keep_d_ff_apart_from_d_model():
    cases = make_cases(3)
    names = " ".join(c.name for c in cases)
    assert "BERT-base" in names and "GPT-3" in names
    for c in cases[:2]:
        D, H, F = c.inputs["d_model"], c.inputs["n_heads"], c.inputs["d_ff"]
        assert D % H == 0 and H >= 2 and F % D != 0 and D % F != 0


def test_bert_base_layer_has_the_known_count():
    assert formula_block_param_count(768, 12, 3072) == 7_087_872


def test_building_a_block_to_count_is_rejected_as_not_a_formula():
    def count_a_module(d_model, n_heads, d_ff):
        return _count(TransformerBlock(d_model, n_heads, d_ff))

    result = run("07.4", count_a_module)
    assert result.status == ERROR
    assert "formula" in result.message


def test_non_integer_count_is_an_error_that_says_so():
    result = run(
        "07.4",
        lambda d_model, n_heads, d_ff: formula_block_param_count(d_model, n_heads, d_ff) + 0.5,
    )
    assert result.status == ERROR
    assert "whole number" in result.message


def test_stub_is_not_attempted():
    def block_param_count_stub(d_model, n_heads, d_ff):
        raise NotImplementedError("Exercise 07.4: implement block_param_count")

    assert run("07.4", block_param_count_stub).status == NOT_ATTEMPTED


def test_outputs_are_plain_int64_scalars():
    case = make_cases(0)[0]
    out = call(formula_block_param_count, case)
    assert set(out) == {"count"} and out["count"].dtype == torch.int64
    assert out["count"].ndim == 0


def test_exercise_is_registered_for_notebook_07():
    ex = get("07.4")
    assert ex.notebook == "07_transformer_block.ipynb"
    assert ex.function == "block_param_count"


# ----------------------------------------------------------------------------- 07.1 layer_norm
LN = "07.1"


def ln_var_unbiased_false(x, weight, bias, eps=1e-5):
    mu = x.mean(dim=-1, keepdim=True)
    var = x.var(dim=-1, unbiased=False, keepdim=True)
    return weight * (x - mu) / torch.sqrt(var + eps) + bias


def ln_mean_of_squares(x, weight, bias, eps=1e-5):
    """E[x^2] - E[x]^2 for the variance, then rsqrt."""
    mu = x.mean(-1, keepdim=True)
    var = (x * x).mean(-1, keepdim=True) - mu * mu
    return (x - mu) * torch.rsqrt(var + eps) * weight + bias


def ln_var_mean_correction0(x, weight, bias, eps=1e-5):
    var, mu = torch.var_mean(x, dim=-1, correction=0, keepdim=True)
    return torch.addcmul(bias, (x - mu) / (var + eps).sqrt(), weight)


def ln_torch(x, weight, bias, eps=1e-5):
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


# F.layer_norm (ln_torch) is not accepted: 07.1 forbids it (tests/test_checks_shortcuts.py)
@pytest.mark.parametrize(
    "candidate", [ln_var_unbiased_false, ln_mean_of_squares, ln_var_mean_correction0]
)
def test_layer_norm_check_accepts_correct_answers(candidate):
    assert_passes(LN, candidate)


def _ln_core(x, eps, dim=-1, unbiased=False):
    mu = x.mean(dim, keepdim=True)
    var = x.var(dim, unbiased=unbiased, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps)


LN_WRONG = {
    "unbiased variance": lambda x, w, b, eps=1e-5: _ln_core(x, eps, unbiased=True) * w + b,
    "eps outside the square root": lambda x, w, b, eps=1e-5: (
        (x - x.mean(-1, keepdim=True)) / (x.std(-1, unbiased=False, keepdim=True) + eps) * w + b
    ),
    "standard deviation used as the variance": lambda x, w, b, eps=1e-5: (
        (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.std(-1, correction=0, keepdim=True) + eps) * w
        + b
    ),
    "no square root": lambda x, w, b, eps=1e-5: (
        (x - x.mean(-1, keepdim=True)) / (x.var(-1, correction=0, keepdim=True) + eps) * w + b
    ),
    "normalised over the batch axis": lambda x, w, b, eps=1e-5: _ln_core(x, eps, dim=0) * w + b,
    "normalised over the time axis": lambda x, w, b, eps=1e-5: _ln_core(x, eps, dim=-2) * w + b,
    "mean not subtracted": lambda x, w, b, eps=1e-5: (
        x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w + b
    ),
    "forgot weight and bias": lambda x, w, b, eps=1e-5: _ln_core(x, eps),
    "forgot the bias": lambda x, w, b, eps=1e-5: _ln_core(x, eps) * w,
    "forgot the weight": lambda x, w, b, eps=1e-5: _ln_core(x, eps) + b,
}


@pytest.mark.parametrize("mistake", sorted(LN_WRONG))
def test_layer_norm_check_names_each_classic_mistake(mistake):
    assert_rejected(LN, LN_WRONG[mistake], mistake)


def test_layer_norm_check_covers_every_registered_mistake():
    assert set(LN_WRONG) == mistake_names(LN)
    assert_registered_mistakes_named(LN)


def test_layer_norm_cases_make_eps_matter_and_vary_eps():
    cases = checks.get(LN).make_cases(0)
    variances = [c.inputs["x"].var(-1, unbiased=False).max().item() for c in cases]
    assert min(variances) < 1e-5 < max(variances)
    assert len({c.inputs["eps"] for c in cases}) > 1
    assert {c.inputs["x"].ndim for c in cases} >= {3, 4}


def test_layer_norm_returning_a_tuple_is_an_error_that_says_so():
    result = checks.run(LN, lambda x, w, b, eps=1e-5: (ln_torch(x, w, b, eps), None))
    assert result.status == ERROR
    assert "should be a torch.Tensor" in result.message


# ----------------------------------------------------------------------------- 07.2 MLP
MLP_ID = "07.2"


class MLPSequential(nn.Module):
    """Correct, written with nn.Sequential-free explicit layers and F.relu."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


class MLPClamp(nn.Module):
    """Correct, with a ReLU module and clamp_min in the forward."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_ff)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        h = self.fc1(x).clamp_min(0.0)
        return self.fc2(h)


@pytest.mark.parametrize("candidate", [MLPSequential, MLPClamp, layers.MLP])
def test_mlp_check_accepts_correct_answers(candidate):
    assert_passes(MLP_ID, candidate)


def mlp_from(forward, hidden=None):
    class Wrong(nn.Module):
        def __init__(self, d_model, d_ff):
            super().__init__()
            h = d_ff if hidden is None else hidden(d_model, d_ff)
            self.fc1 = nn.Linear(d_model, h)
            self.fc2 = nn.Linear(h, d_model)

        def forward(self, x):
            return forward(self, x)

    return Wrong


MLP_WRONG = {
    "activation missing": mlp_from(lambda m, x: m.fc2(m.fc1(x))),
    "activation after the second linear": mlp_from(lambda m, x: F.relu(m.fc2(m.fc1(x)))),
    "activation after both linears": mlp_from(lambda m, x: F.relu(m.fc2(F.relu(m.fc1(x))))),
    "GELU instead of ReLU": mlp_from(lambda m, x: m.fc2(nn.GELU()(m.fc1(x)))),
    "residual added inside the MLP": mlp_from(lambda m, x: m.fc2(m.fc1(x).relu()) + x),
    "wrong hidden width": mlp_from(lambda m, x: m.fc2(m.fc1(x).relu()), lambda d, f: 4 * d),
}


@pytest.mark.parametrize("mistake", sorted(MLP_WRONG))
def test_mlp_check_names_each_classic_mistake(mistake):
    assert_rejected(MLP_ID, MLP_WRONG[mistake], mistake)


def test_mlp_check_covers_every_registered_mistake():
    assert set(MLP_WRONG) == mistake_names(MLP_ID)
    assert_registered_mistakes_named(MLP_ID)


def test_mlp_hidden_width_of_d_model_is_also_named():
    wrong = mlp_from(lambda m, x: m.fc2(m.fc1(x).relu()), lambda d, f: d)
    assert_rejected(MLP_ID, wrong, "wrong hidden width")


def test_mlp_with_other_layer_names_is_an_error_naming_fc1_and_fc2():
    class Renamed(nn.Module):
        def __init__(self, d_model, d_ff):
            super().__init__()
            self.up = nn.Linear(d_model, d_ff)
            self.down = nn.Linear(d_ff, d_model)

        def forward(self, x):
            return self.down(F.relu(self.up(x)))

    result = checks.run(MLP_ID, Renamed)
    assert result.status == ERROR
    assert "fc1" in result.message and "fc2" in result.message


class MLPDropout(nn.Module):
    """The MLP with a dropout on the hidden units, as in nn.TransformerEncoderLayer."""

    def __init__(self, d_model, d_ff, p=0.1):
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_ff)
        self.dropout = nn.Dropout(p)
        self.fc2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.fc2(self.dropout(F.relu(self.fc1(x))))


def test_mlp_with_dropout_is_rejected_naming_dropout():
    """The prompt says the MLP has no dropout; the check runs it in eval mode and in training
    mode, so a Dropout(0.1) that eval mode would hide is named (student-A SA-6)."""
    result = checks.run(MLP_ID, MLPDropout)
    assert result.status == FAILED
    assert "training mode" in result.message and "dropout" in result.message


def test_mlp_with_a_zero_dropout_passes_and_the_check_leaves_the_random_stream_alone():
    torch.manual_seed(0)
    before = torch.get_rng_state()
    assert_passes(MLP_ID, lambda d_model, d_ff: MLPDropout(d_model, d_ff, p=0.0))
    checks.run(MLP_ID, MLPDropout)
    assert torch.equal(torch.get_rng_state(), before)


def test_mlp_stub_raising_in_init_is_not_attempted():
    class Stub(nn.Module):
        def __init__(self, d_model, d_ff):
            raise NotImplementedError("Exercise 07.2: implement MLP")

    assert checks.run(MLP_ID, Stub).status == NOT_ATTEMPTED


def test_mlp_reference_agrees_with_the_torch_encoder_layer_feed_forward():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, 20, dropout=0.0, batch_first=True)
    ours = layers.MLP(8, 20)
    ours.fc1.load_state_dict(layer.linear1.state_dict())
    ours.fc2.load_state_dict(layer.linear2.state_dict())
    x = torch.randn(3, 5, 8)
    torch.testing.assert_close(ours(x), layer._ff_block(x))


class _InPlacePreNorm(Given):
    """Wrong: a pre-norm block that adds into the caller's tensor (x += ...). Its output is
    right, but the caller's x changes: student A's 07.3 answer that broke three later cells."""

    def forward(self, x):
        if self.norm_first:
            x += self.attn(self.norm1(x))
            x += self.mlp(self.norm2(x))
            return x
        x = self.norm1(x + self.attn(x))
        return self.norm2(x + self.mlp(x))


def test_block_that_updates_the_callers_x_in_place_is_rejected_saying_so():
    result = run(ID, _InPlacePreNorm)
    assert result.status != PASSED and result.points == 0, result.message
    assert "in place" in result.message.lower(), result.message


# ----------------------------------------------------------------------------- every seed
# What tests/test_same_verdict_every_seed.py sweeps over many seeds, by exercise: the correct
# answers written differently, and the wrong ones by the name of the mistake they make.
SWEEP_CORRECT = {
    LN: [ln_var_unbiased_false, ln_mean_of_squares, ln_var_mean_correction0],
    MLP_ID: [MLPSequential, MLPClamp],
    ID: [BlockSublayers, BlockFunctionalNorm],
    "07.4": [_per_head, _float_arithmetic, _numpy_int, _tensor_scalar],
}
SWEEP_WRONG = {LN: LN_WRONG, MLP_ID: MLP_WRONG, ID: WRONG}
