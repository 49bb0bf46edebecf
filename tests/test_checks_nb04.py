"""Checks 04.1 (self-attention layer), 04.2 (equivariance test), 04.3 (sinusoidal encoding),
04.4 (RoPE) and 04.5 (relative position bias) accept correct answers written differently and
name each classic mistake. The wrong answers here are written independently of the check's own."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from checks_testing import (
    assert_passes,
    assert_registered_mistakes_named,
    assert_rejected,
    mistake_names,
)
from torch import nn

from course_utils import checks
from course_utils.checks import FAILED, NOT_ATTEMPTED, PASSED, get, run
from course_utils.lessons.nb04_self_cross_position.exercises import (
    EQUIVARIANCE_MISTAKES,
    REPEATED_FUNCTIONS,
    SELF_ATTENTION_MISTAKES,
    TEST_FUNCTIONS,
    SelfAttention,
    is_permutation_equivariant,
)
from course_utils.modeling import positional

# ----------------------------------------------------------------------------- 04.3


def pe_loops(T, D):
    pe = torch.zeros(T, D)
    for pos in range(T):
        for i in range(0, D, 2):
            angle = pos / 10000 ** (i / D)
            pe[pos, i] = math.sin(angle)
            pe[pos, i + 1] = math.cos(angle)
    return pe


def pe_stack(T, D):
    pos = torch.arange(T, dtype=torch.float64).unsqueeze(1)
    inv_freq = torch.exp(-math.log(10000.0) * torch.arange(0, D, 2, dtype=torch.float64) / D)
    angles = pos * inv_freq
    return torch.stack([angles.sin(), angles.cos()], dim=-1).reshape(T, D).float()


def pe_float32_exp(T, D):  # float32 throughout, as in the Annotated Transformer
    pe = torch.zeros(T, D)
    position = torch.arange(0, T).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, D, 2) * -(math.log(10000.0) / D))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


@pytest.mark.parametrize(
    "candidate", [pe_loops, pe_stack, pe_float32_exp, positional.sinusoidal_positional_encoding]
)
def test_sinusoidal_check_accepts_correct_answers(candidate):
    assert_passes("04.3", candidate)


def pe_from(angle_of, layout="interleaved", first=torch.sin, second=torch.cos, offset=0):
    def impl(T, D):
        pos = torch.arange(offset, T + offset, dtype=torch.float64)[:, None]
        half = torch.arange(D // 2, dtype=torch.float64)[None, :]
        if layout == "per-column":
            col = torch.arange(D, dtype=torch.float64)[None, :]
            ang = pos / 10000 ** (col / D)
            out = torch.empty(T, D, dtype=torch.float64)
            out[:, 0::2], out[:, 1::2] = first(ang[:, 0::2]), second(ang[:, 1::2])
            return out
        ang = angle_of(pos, half, D)
        if layout == "concat":
            return torch.cat([first(ang), second(ang)], dim=1)
        out = torch.empty(T, D, dtype=torch.float64)
        out[:, 0::2], out[:, 1::2] = first(ang), second(ang)
        return out

    return impl


def right_angle(pos, i, D):
    return pos / 10000 ** (2 * i / D)


PE_WRONG = {
    "sin and cos swapped": pe_from(right_angle, first=torch.cos, second=torch.sin),
    "sin and cos concatenated instead of interleaved": pe_from(right_angle, layout="concat"),
    "wrong frequency exponent (i/D instead of 2i/D)": pe_from(lambda p, i, D: p / 10000 ** (i / D)),
    "each column its own frequency (exponent j/D with j the column index)": pe_from(
        None, layout="per-column"
    ),
    "frequency inverted (pos * 10000^(2i/D))": pe_from(lambda p, i, D: p * 10000 ** (2 * i / D)),
    "positions start at 1 instead of 0": pe_from(right_angle, offset=1),
    "returned (D, T) instead of (T, D)": lambda T, D: pe_stack(T, D).t(),
}


@pytest.mark.parametrize("mistake", sorted(PE_WRONG))
def test_sinusoidal_check_names_each_classic_mistake(mistake):
    assert_rejected("04.3", PE_WRONG[mistake], mistake)


def test_sinusoidal_check_covers_every_registered_mistake():
    assert set(PE_WRONG) == mistake_names("04.3")
    assert_registered_mistakes_named("04.3")


# ----------------------------------------------------------------------------- 04.4


def rope_complex(x, positions=None):
    T, D = x.shape[-2:]
    pos = torch.arange(T) if positions is None else positions
    theta = pos[:, None].double() * 10000.0 ** (-torch.arange(0, D, 2).double() / D)  # (T, D/2)
    z = torch.view_as_complex(x.reshape(*x.shape[:-1], D // 2, 2).contiguous())
    rotated = z * torch.polar(torch.ones_like(theta).to(x.dtype), theta.to(x.dtype))
    return torch.view_as_real(rotated).reshape(x.shape)


def rope_matrices(x, positions=None):
    T, D = x.shape[-2:]
    pos = torch.arange(T) if positions is None else positions
    out = torch.empty_like(x)
    for i in range(D // 2):
        a = pos.double() * 10000.0 ** (-2 * i / D)  # (T,)
        R = torch.stack(
            [torch.stack([a.cos(), -a.sin()], -1), torch.stack([a.sin(), a.cos()], -1)], -2
        )  # (T, 2, 2)
        R = R.to(x.dtype)
        out[..., 2 * i : 2 * i + 2] = torch.einsum("tij,...tj->...ti", R, x[..., 2 * i : 2 * i + 2])
    return out


@pytest.mark.parametrize("candidate", [rope_complex, rope_matrices, positional.apply_rope])
def test_rope_check_accepts_correct_answers(candidate):
    assert_passes("04.4", candidate)


def rope_from(
    exp2=True, sign=1, layout="pairs", swap=False, use_positions=True, start=0, dt=torch.float64
):
    def impl(x, positions=None):
        T, D = x.shape[-2:]
        pos = (
            torch.arange(start, start + T) if positions is None or not use_positions else positions
        )
        i = torch.arange(D // 2, dtype=dt)
        a = (sign * pos[:, None].to(dt) / 10000 ** ((2 * i if exp2 else i) / D)).double()
        c, s = (a.sin(), a.cos()) if swap else (a.cos(), a.sin())
        if layout == "halves":
            x1, x2 = x.chunk(2, dim=-1)
        else:
            x1, x2 = x[..., ::2], x[..., 1::2]
        y1, y2 = x1 * c - x2 * s, x2 * c + x1 * s
        if layout in ("halves", "concat"):
            return torch.cat([y1, y2], dim=-1)
        out = torch.empty_like(x)
        out[..., ::2], out[..., 1::2] = y1, y2
        return out

    return impl


ROPE_WRONG = {
    "rotates halves instead of interleaved pairs": rope_from(layout="halves"),
    "rotation by the wrong sign (angle -a)": rope_from(sign=-1),
    "wrong frequency exponent (i/D instead of 2i/D)": rope_from(exp2=False),
    "cos and sin swapped": rope_from(swap=True),
    "rotated pairs concatenated instead of interleaved back": rope_from(layout="concat"),
    "positions argument ignored": rope_from(use_positions=False),
    "positions start at 1 instead of 0": rope_from(start=1),
    "angles computed in float32": rope_from(dt=torch.float32),
}


@pytest.mark.parametrize("mistake", sorted(ROPE_WRONG))
def test_rope_check_names_each_classic_mistake(mistake):
    assert_rejected("04.4", ROPE_WRONG[mistake], mistake)


def test_rope_check_covers_every_registered_mistake():
    assert set(ROPE_WRONG) == mistake_names("04.4")
    assert_registered_mistakes_named("04.4")


def test_rope_cases_pass_positions_both_ways():
    cases = checks.get("04.4").make_cases(0)
    assert any("positions" in c.inputs for c in cases)
    assert any("positions" not in c.inputs for c in cases)
    assert any(c.inputs["x"].ndim == 4 for c in cases)


# ============================================================ 04.1 and 04.2


# ----------------------------------------------------------------------------- 04.1


class SelfAttentionManual(nn.Module):
    """Correct, written differently: explicit matmuls with the weights, masks by -inf."""

    def __init__(self, d_in, d_k, d_v):
        super().__init__()
        self.W_q = nn.Linear(d_in, d_k, bias=False)
        self.W_k = nn.Linear(d_in, d_k, bias=False)
        self.W_v = nn.Linear(d_in, d_v, bias=False)

    def forward(self, x, context=None, attn_mask=None):
        c = x if context is None else context
        q = x @ self.W_q.weight.T
        k = c @ self.W_k.weight.T
        v = c @ self.W_v.weight.T
        scores = torch.einsum("btd,bsd->bts", q, k) / math.sqrt(q.shape[-1])
        if attn_mask is not None:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        w = scores.softmax(dim=-1)
        return w @ v, w


class SelfAttentionTorchSDPA(nn.Module):
    """Correct, written differently: biases (zeroed by the check) and torch's fused SDPA."""

    def __init__(self, d_in, d_k, d_v):
        super().__init__()
        self.W_v = nn.Linear(d_in, d_v)
        self.W_k = nn.Linear(d_in, d_k)
        self.W_q = nn.Linear(d_in, d_k)

    def forward(self, x, context=None, attn_mask=None):
        c = x if context is None else context
        q, k, v = self.W_q(x), self.W_k(c), self.W_v(c)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        if attn_mask is not None:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        return out, scores.softmax(-1)


def test_reference_layer_passes_its_own_check():
    assert run("04.1", SelfAttention).passed


@pytest.mark.parametrize("answer", [SelfAttentionManual, SelfAttentionTorchSDPA])
def test_correct_layers_written_differently_pass(answer):
    result = run("04.1", answer)
    assert result.status == PASSED, result.message


@pytest.mark.parametrize("mistake", SELF_ATTENTION_MISTAKES, ids=lambda m: m.name)
def test_each_classic_layer_mistake_is_rejected_and_named(mistake):
    result = run("04.1", mistake.impl)
    assert result.status == FAILED
    assert result.mistake == mistake.name
    assert mistake.hint in result.message


def test_layer_without_the_named_projections_gets_a_clear_error():
    class Fused(nn.Module):
        def __init__(self, d_in, d_k, d_v):
            super().__init__()
            self.qkv = nn.Linear(d_in, 2 * d_k + d_v, bias=False)

    result = run("04.1", Fused)
    assert result.status == "error" and "W_q, W_k, W_v" in result.message


def test_unsolved_layer_is_not_attempted():
    class Stub(nn.Module):
        def __init__(self, d_in, d_k, d_v):
            super().__init__()
            raise NotImplementedError("Exercise 04.1")

    assert run("04.1", Stub).status == NOT_ATTEMPTED


def test_layer_cases_cover_cross_attention_and_masks():
    cases = get("04.1").make_cases(0)
    assert any(c.inputs["context"] is not None for c in cases)
    assert any(c.inputs["attn_mask"] is not None for c in cases)
    assert any(c.inputs["d_in"] != c.inputs["d_k"] != c.inputs["d_v"] for c in cases)


# ----------------------------------------------------------------------------- 04.2


def equivariance_with_inverse_on_the_input_side(fn, x):
    """Correct, written differently: undo the shuffle of the output instead of shuffling fn(x)."""
    y = fn(x)
    for _ in range(4):
        p = torch.randperm(x.shape[1])
        if (p == torch.arange(len(p))).all():
            continue
        if not torch.allclose(fn(x[:, p])[:, p.argsort()], y, atol=1e-4):
            return False
    return True


def equivariance_with_permutation_matrices(fn, x):
    """Correct, written differently: P @ x with random permutation matrices, max-error test."""
    T = x.shape[1]
    for _ in range(3):
        P = torch.eye(T, dtype=x.dtype)[torch.randperm(T)]
        if not ((fn(P @ x) - P @ fn(x)).abs().max() < 1e-4).item():
            return False
    return True


def test_reference_test_classifies_every_function_correctly():
    ex = get("04.2")
    for case in ex.make_cases(0):
        verdicts = ex.call(is_permutation_equivariant, case)["verdicts"]
        truths = [truth for _, _, truth in TEST_FUNCTIONS]
        assert verdicts.tolist() == truths + [f[2] for f in REPEATED_FUNCTIONS]


def test_test_functions_include_both_kinds_and_the_classic_traps():
    names = {name for name, _, _ in TEST_FUNCTIONS}
    assert sum(truth for _, _, truth in TEST_FUNCTIONS) >= 4
    assert sum(not truth for _, _, truth in TEST_FUNCTIONS) >= 4
    assert "causal self-attention" in names and "self-attention without positions" in names


@pytest.mark.parametrize(
    "answer", [equivariance_with_inverse_on_the_input_side, equivariance_with_permutation_matrices]
)
def test_correct_equivariance_tests_written_differently_pass(answer):
    result = run("04.2", answer)
    assert result.status == PASSED, result.message


@pytest.mark.parametrize("mistake", EQUIVARIANCE_MISTAKES, ids=lambda m: m.name)
def test_each_classic_equivariance_mistake_is_rejected_and_named(mistake):
    result = run("04.2", mistake.impl)
    assert result.status == FAILED
    assert result.mistake == mistake.name
    assert mistake.hint in result.message


def test_a_test_that_always_says_false_names_the_equivariant_functions():
    result = run("04.2", lambda fn, x: False)
    assert result.status == FAILED
    assert (
        "'self-attention without positions' is equivariant but your test says it is not"
        in result.message
    )


def test_returning_a_tensor_of_verdicts_is_an_error_that_says_so():
    result = run("04.2", lambda fn, x: torch.isclose(fn(x), fn(x)))
    assert result.status == "error" and "one True/False" in result.message


def test_equivariance_check_leaves_the_notebooks_random_state_alone():
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    run("04.2", is_permutation_equivariant)
    assert torch.equal(torch.rand(3), expected)


def test_unsolved_equivariance_test_is_not_attempted():
    def stub(fn, x):
        raise NotImplementedError("Exercise 04.2")

    assert run("04.2", stub).status == NOT_ATTEMPTED


# ============================================================ 04.5


def rel_bias_loops(table, T, S=None):
    """Correct, written with loops over (h, i, j)."""
    S = T if S is None else S
    M = (table.shape[0] - 1) // 2
    out = torch.empty(table.shape[1], T, S, dtype=table.dtype)
    for h in range(table.shape[1]):
        for i in range(T):
            for j in range(S):
                d = max(-M, min(M, j - (i + S - T)))
                out[h, i, j] = table[d + M, h]
    return out


def rel_bias_module(table, T, S=None):
    """The values are right (the course's RelativePositionBias module with the table loaded)
    but it is the course's implementation and not differentiable in ``table``."""
    M = (table.shape[0] - 1) // 2
    module = positional.RelativePositionBias(n_heads=table.shape[1], max_distance=M).double()
    with torch.no_grad():
        module.table.copy_(table)
    return module(T, S).detach()


@pytest.mark.parametrize("candidate", [rel_bias_loops, checks.get("04.5").reference])
def test_relative_bias_check_accepts_correct_answers(candidate):
    assert_passes("04.5", candidate)


def _rel_unsigned(table, T, S=None):
    """Written independently: a symmetric bias from the absolute distance."""
    S = T if S is None else S
    M = (table.shape[0] - 1) // 2
    i = torch.arange(S - T, S).view(-1, 1)
    j = torch.arange(S).view(1, -1)
    idx = torch.minimum((j - i).abs(), torch.tensor(M)) + M
    return table[idx].movedim(-1, 0)


def _rel_flipped(table, T, S=None):
    """Written independently: query minus key."""
    S = T if S is None else S
    M = (table.shape[0] - 1) // 2
    i = torch.arange(S - T, S).view(-1, 1)
    j = torch.arange(S).view(1, -1)
    return table[(i - j).clamp(-M, M) + M].movedim(-1, 0)


@pytest.mark.parametrize(
    ("candidate", "mistake"),
    [
        (_rel_unsigned, "absolute distance |j - i| (keys before and after the query share a bias)"),
        (_rel_flipped, "distance taken as i - j instead of j - i"),
    ],
)
def test_relative_bias_check_names_independent_mistakes(candidate, mistake):
    assert_rejected("04.5", candidate, mistake)


def test_relative_bias_check_names_every_registered_mistake():
    assert_registered_mistakes_named("04.5")


def test_relative_bias_reference_equals_the_module():
    table = torch.randn(9, 3, dtype=torch.float64)
    for T, S in [(5, None), (1, 7), (3, 6)]:
        assert torch.equal(checks.get("04.5").reference(table, T, S), rel_bias_module(table, T, S))


# ----------------------------------------------------------------------------- student C's report
# (reviews/turn4/student-C.md): each false acceptance and shortcut of 04, by name.

from checks_testing import assert_not_accepted, assert_own_work_passes  # noqa: E402


def _c_any(fn, x, n_trials=3, atol=1e-5):
    y = fn(x)
    for _ in range(n_trials):
        p = torch.randperm(x.shape[1])
        if torch.allclose(fn(x[:, p]), y[:, p], atol=atol):
            return True
    return False


def _c_swap01(fn, x, n_trials=3, atol=1e-5):
    p = torch.arange(x.shape[1])
    p[0], p[1] = 1, 0
    return torch.allclose(fn(x[:, p]), fn(x)[:, p], atol=atol)


def _c_tensor(fn, x, n_trials=3, atol=1e-5):
    y = fn(x)
    p = torch.randperm(x.shape[1])
    if torch.equal(p, torch.arange(x.shape[1])):
        p = torch.roll(p, 1)
    return (fn(x[:, p]) - y[:, p]).abs().max() <= atol


def test_C_FA1_04_2_any_instead_of_all_is_rejected_at_every_seed():
    """Fooled in some runs of 'only the last two positions scaled': 640 runs per case make a
    lucky pass a e^-8 event per case (and both cases must be lucky)."""
    assert_rejected(
        "04.2", _c_any, "yes as soon as one permutation agrees (any instead of all)", range(8)
    )


def test_04_2_any_instead_of_all_is_named_at_seed_9_where_it_took_the_swaps_name():
    """The seed sweep's finding: at seed 9 this answer drew a permutation (of T = 6 tokens) that
    commutes with 'the first two alike' and was named 'one fixed swap of tokens 0 and 1'; the
    fixed first case (T = 16) names it at every seed."""
    assert_rejected(
        "04.2", _c_any, "yes as soon as one permutation agrees (any instead of all)", (9,)
    )


def test_C_FA2_04_2_one_fixed_swap_of_tokens_0_and_1_is_rejected():
    assert_rejected("04.2", _c_swap01, "one fixed swap of tokens 0 and 1")


def test_C_FA3_04_2_a_0d_tensor_for_the_bool_is_rejected():
    """Student C's one-permutation version is now wrong in value too; the type alone fails an
    otherwise right test (several permutations, the verdict as a 0-d tensor)."""
    assert_not_accepted("04.2", _c_tensor, seeds=(0,))

    def right_but_tensor(fn, x, n_trials=4, atol=1e-5):
        y, ok = fn(x), torch.tensor(True)
        for _ in range(n_trials):
            p = torch.randperm(x.shape[1])
            ok = ok & ((fn(x[:, p]) - y[:, p]).abs().max() <= atol)
        return ok

    assert_not_accepted("04.2", right_but_tensor, "should return a Python bool", seeds=(0,))


def test_04_2_honest_tests_pass_at_every_seed():
    def own_generator(fn, x, n_trials=3, atol=1e-5):
        g = torch.Generator().manual_seed(7)
        y = fn(x)
        for _ in range(n_trials):
            p = torch.randperm(x.shape[1], generator=g)
            if not torch.allclose(fn(x[:, p]), y[:, p], atol=atol, rtol=1e-4):
                return False
        return True

    def ten_trials(fn, x, n_trials=10, atol=1e-5):
        return all(
            torch.allclose(fn(x[:, p]), fn(x)[:, p], atol=atol, rtol=1e-4)
            for p in (torch.randperm(x.shape[1]) for _ in range(n_trials))
        )

    for candidate in (own_generator, ten_trials):
        assert_own_work_passes("04.2", candidate, seeds=range(4))


def test_C_FA4_04_3_a_float64_table_is_rejected():
    def pe64(T, D):
        pos = torch.arange(T, dtype=torch.float64)[:, None]
        ang = pos / 10000.0 ** (torch.arange(0, D, 2, dtype=torch.float64) / D)
        out = torch.zeros(T, D, dtype=torch.float64)
        out[:, 0::2], out[:, 1::2] = ang.sin(), ang.cos()
        return out

    assert_not_accepted("04.3", pe64, "dtype torch.float64, expected torch.float32")


def test_C_FA5_04_4_float64_angles_left_in_a_float32_output_are_rejected():
    def rope_no_cast(x, positions=None):
        T, D = x.shape[-2:]
        pos = torch.arange(T) if positions is None else positions
        ang = pos.double()[:, None] * 10000.0 ** (-torch.arange(0, D, 2).double() / D)
        cos, sin = ang.cos(), ang.sin()  # no .to(x.dtype)
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack([a * cos - b * sin, a * sin + b * cos], -1).flatten(-2)

    assert_not_accepted("04.4", rope_no_cast, "in float32", "expected torch.float32")


def test_C_04_4_float32_angles_are_named_the_prompt_asks_for_float64():
    """Student C's float32 angles passed the check and then failed the notebook's claim on
    RoPE's exactness: a case with far positions now names them."""

    def rope_float32_angles(x, positions=None):
        T, D = x.shape[-2:]
        pos = torch.arange(T) if positions is None else positions
        ang = pos.float()[:, None] * 10000.0 ** (-torch.arange(0, D, 2).float() / D)
        cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack([a * cos - b * sin, a * sin + b * cos], -1).flatten(-2)

    assert_not_accepted(
        "04.4", rope_float32_angles, "far positions", "compute the angles in float64"
    )


def _rel_rows(table, T, S):
    M = (table.shape[0] - 1) // 2
    S = T if S is None else S
    q = torch.arange(T)[:, None] + (S - T)
    return (torch.arange(S)[None, :] - q).clamp(-M, M) + M


def test_C_FA6_04_5_a_detached_table_is_rejected():
    def detached(table, T, S=None):
        return table.detach()[_rel_rows(table, T, S)].permute(2, 0, 1)

    assert_not_accepted("04.5", detached, "not differentiable in table")


def test_C_FA7_04_5_numbers_copied_out_of_the_table_are_rejected():
    def copied(table, T, S=None):
        rows = _rel_rows(table, T, S)
        return torch.tensor(table.tolist(), dtype=table.dtype)[rows].permute(2, 0, 1)

    assert_not_accepted("04.5", copied, "not differentiable in table")


def test_C_04_5_gather_and_embedding_variants_pass():
    def embedding(table, T, S=None):
        return F.embedding(_rel_rows(table, T, S), table).permute(2, 0, 1)

    def gather(table, T, S=None):
        rows = _rel_rows(table, T, S)
        return table.T[:, rows]

    for candidate in (embedding, gather):
        assert_own_work_passes("04.5", candidate)


def test_C_shortcut_04_5_relative_position_bias_module_with_the_table_swapped_is_refused():
    def swapped(table, T, S=None):
        m = positional.RelativePositionBias(table.shape[1], (table.shape[0] - 1) // 2)
        del m.table
        m.table = table
        return m(T, S)

    assert_not_accepted("04.5", swapped, "RelativePositionBias.forward")


def test_C_04_5_an_h_s_t_layout_is_named_as_a_layout_not_a_sign():
    def hst(table, T, S=None):
        return checks.get("04.5").reference(table, T, S).transpose(-2, -1)

    assert_rejected("04.5", hst, "returned (H, S, T) instead of (H, T, S)")


def test_C_04_3_the_concatenated_hint_no_longer_shows_the_solution_lines():
    hint = {m.name: m.hint for m in checks.get("04.3").mistakes}[
        "sin and cos concatenated instead of interleaved"
    ]
    assert "0::2" not in hint and "1::2" not in hint


def test_C_04_1_an_inverted_mask_is_named():
    class Inverted(SelfAttention):
        def forward(self, x, context=None, attn_mask=None):
            c = x if context is None else context
            q, k, v = self.W_q(x), self.W_k(c), self.W_v(c)
            s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
            if attn_mask is not None:
                s = s.masked_fill(attn_mask, float("-inf"))
            w = s.softmax(-1)
            return w @ v, w

    assert_rejected("04.1", Inverted, "mask inverted (True treated as blocked)")


def test_C_04_1_a_bool_mask_added_as_a_float_is_named():
    """Student C: 04.1 with the bool mask added to the scores got only the generic hint."""

    class AddedAsFloat(SelfAttention):
        def forward(self, x, context=None, attn_mask=None):
            c = x if context is None else context
            q, k, v = self.W_q(x), self.W_k(c), self.W_v(c)
            s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
            if attn_mask is not None:
                s = s + attn_mask.to(s.dtype)
            w = s.softmax(-1)
            return w @ v, w

    assert_rejected("04.1", AddedAsFloat, "bool mask added to the scores as 0/1")


def test_04_4_float32_angles_are_named_at_the_seeds_where_they_passed():
    """The seed sweep's finding: with the seeded far-positions case's small D the float32
    angles were within the tolerance at 22 of 200 seeds (10, 24, 90, 104, ...); the fixed far
    case (D = 16) comes first at every seed."""
    assert_rejected(
        "04.4",
        ROPE_WRONG["angles computed in float32"],
        "angles computed in float32",
        (10, 24, 90, 104),
    )


# ----------------------------------------------------------------------------- every seed
# What tests/test_same_verdict_every_seed.py sweeps over many seeds, by exercise: the correct
# answers written differently, and the wrong ones by the name of the mistake they make.
SWEEP_CORRECT = {
    "04.1": [SelfAttentionManual, SelfAttentionTorchSDPA],
    "04.2": [equivariance_with_inverse_on_the_input_side, equivariance_with_permutation_matrices],
    "04.3": [pe_loops, pe_stack, pe_float32_exp],
    "04.4": [rope_complex, rope_matrices],
    "04.5": [rel_bias_loops],
}
SWEEP_WRONG = {
    "04.2": {
        "yes as soon as one permutation agrees (any instead of all)": _c_any,
        "one fixed swap of tokens 0 and 1": _c_swap01,
    },
    "04.3": PE_WRONG,
    "04.4": ROPE_WRONG,
    "04.5": {
        "absolute distance |j - i| (keys before and after the query share a bias)": _rel_unsigned,
        "distance taken as i - j instead of j - i": _rel_flipped,
        "returned (H, S, T) instead of (H, T, S)": lambda table, T, S=None: (
            checks.get("04.5").reference(table, T, S).transpose(-2, -1)
        ),
    },
}
