"""The 03.2 check (attention with learned K/V projections) accepts correct answers written
differently and names the classic mistakes."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from course_utils.checks import FAILED, NOT_ATTEMPTED, PASSED, get, run
from course_utils.checks.nb03_kv_projection import MISTAKES, kv_attention


def kv_attention_einsum(q, x, W_k, W_v):
    k = torch.einsum("...si,ik->...sk", x, W_k)
    v = torch.einsum("...si,iv->...sv", x, W_v)
    scores = torch.einsum("...tk,...sk->...ts", q / math.sqrt(q.shape[-1]), k)
    w = torch.exp(scores - scores.amax(-1, keepdim=True))
    w = w / w.sum(-1, keepdim=True)
    return torch.einsum("...ts,...sv->...tv", w, v), w


def kv_attention_torch_sdpa(q, x, W_k, W_v):
    k, v = x @ W_k, x @ W_v
    out = F.scaled_dot_product_attention(q, k, v)
    w = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1)
    return out, w


def test_reference_passes_its_own_check():
    assert run("03.2", kv_attention).passed


@pytest.mark.parametrize("answer", [kv_attention_einsum, kv_attention_torch_sdpa])
def test_correct_answers_written_differently_pass(answer):
    result = run("03.2", answer)
    assert result.status == PASSED, result.message


@pytest.mark.parametrize("mistake", MISTAKES, ids=lambda m: m.name)
def test_each_classic_mistake_is_rejected_and_named(mistake):
    result = run("03.2", mistake.impl)
    assert result.status == FAILED
    assert result.mistake == mistake.name
    assert mistake.name in result.message and mistake.hint in result.message


def test_swapped_projections_are_named_even_though_they_raise_on_non_square_cases():
    def swapped(q, x, W_k, W_v):
        k, v = x @ W_v, x @ W_k
        w = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1)
        return w @ v, w

    result = run("03.2", swapped)
    assert result.status == FAILED and result.mistake == "keys and values swapped"


def test_an_unknown_shape_error_is_reported_with_the_case():
    def broken(q, x, W_k, W_v):
        if x.shape[-1] != q.shape[-1]:
            return q @ x  # a shape error only on non-square cases
        return kv_attention(q, x, W_k, W_v)

    result = run("03.2", broken)
    assert result.status == FAILED and result.mistake is None
    assert "your code raised RuntimeError" in result.message


def test_returning_only_the_output_says_to_return_the_weights_too():
    result = run("03.2", lambda q, x, W_k, W_v: kv_attention(q, x, W_k, W_v)[0])
    assert result.status == FAILED and "(output, weights)" in result.message


def test_unsolved_stub_is_not_attempted():
    def stub(q, x, W_k, W_v):
        raise NotImplementedError("Exercise 03.2")

    assert run("03.2", stub).status == NOT_ATTEMPTED


def test_cases_cover_batch_dims_and_unequal_widths():
    cases = get("03.2").make_cases(0)
    shapes = {(c.inputs["q"].ndim, c.inputs["W_k"].shape, c.inputs["W_v"].shape) for c in cases}
    assert any(nd == 2 for nd, _, _ in shapes) and any(nd == 4 for nd, _, _ in shapes)
    assert any(wk[0] != wk[1] != wv[1] for _, wk, wv in shapes)
    first = cases[0].inputs  # square, so every mistake runs and can be named
    assert first["W_k"].shape[0] == first["W_k"].shape[1] == first["W_v"].shape[1]


def test_reference_matches_torch_sdpa_on_every_case():
    for case in get("03.2").make_cases(3):
        i = case.inputs
        out, w = kv_attention(i["q"], i["x"], i["W_k"], i["W_v"])
        torch.testing.assert_close(
            out, F.scaled_dot_product_attention(i["q"], i["x"] @ i["W_k"], i["x"] @ i["W_v"])
        )
        torch.testing.assert_close(w.sum(-1), torch.ones_like(w.sum(-1)))
