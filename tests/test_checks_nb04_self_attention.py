"""The 04.1 (self-attention layer) and 04.2 (equivariance test) checks accept correct answers
written differently and name the classic mistakes."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_utils.checks import FAILED, NOT_ATTEMPTED, PASSED, get, run
from course_utils.checks.nb04_self_attention import (
    EQUIVARIANCE_MISTAKES,
    SELF_ATTENTION_MISTAKES,
    TEST_FUNCTIONS,
    SelfAttention,
    is_permutation_equivariant,
)

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
        assert verdicts.tolist() == [truth for _, _, truth in TEST_FUNCTIONS]


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
