"""Checks 02.1 (additive scores) and 02.2 (additive attention with a padding mask) accept
correct answers written differently and name each classic mistake. The wrong answers here are
written independently of the check's own."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from checks_testing import (
    assert_passes,
    assert_registered_mistakes_named,
    assert_rejected,
    mistake_names,
)

from course_utils import attention, checks

# ----------------------------------------------------------------------------- 02.1


def scores_einsum(query, keys, W_query, W_key, v):
    hidden = torch.einsum("ad,bd->ba", W_query, query)[:, None] + torch.einsum(
        "ad,bsd->bsa", W_key, keys
    )
    return torch.einsum("bsa,a->bs", torch.tanh(hidden), v)


def scores_linear(query, keys, W_query, W_key, v):
    return torch.tanh(F.linear(query, W_query).unsqueeze(1) + F.linear(keys, W_key)) @ v


def scores_loop(query, keys, W_query, W_key, v):
    B, S, _ = keys.shape
    out = torch.empty(B, S, dtype=query.dtype)
    for b in range(B):
        for j in range(S):
            out[b, j] = v @ torch.tanh(W_query @ query[b] + W_key @ keys[b, j])
    return out


@pytest.mark.parametrize(
    "candidate", [scores_einsum, scores_linear, scores_loop, attention.additive_scores]
)
def test_additive_scores_check_accepts_correct_answers(candidate):
    assert_passes("02.1", candidate)


SCORES_WRONG = {
    "tanh missing": lambda q, h, Wq, Wk, v: (F.linear(q, Wq)[:, None] + F.linear(h, Wk)) @ v,
    "tanh applied after the dot product with v": lambda q, h, Wq, Wk, v: torch.tanh(
        (F.linear(q, Wq)[:, None] + F.linear(h, Wk)) @ v
    ),
    "weight matrices not transposed (query @ W_query instead of query @ W_query.T)": lambda q, h, Wq, Wk, v: (
        torch.tanh((q @ Wq)[:, None] + h @ Wk) @ v
    ),
    "W_query and W_key swapped": lambda q, h, Wq, Wk, v: (
        torch.tanh(F.linear(q, Wk)[:, None] + F.linear(h, Wq)) @ v
    ),
    "query projection not broadcast over the source positions": lambda q, h, Wq, Wk, v: (
        torch.tanh(F.linear(q, Wq) + F.linear(h, Wk)) @ v
    ),
    "returned softmax weights instead of raw scores": lambda q, h, Wq, Wk, v: F.softmax(
        scores_einsum(q, h, Wq, Wk, v), dim=1
    ),
    "v ignored (tanh summed over the attention dimension)": lambda q, h, Wq, Wk, v: torch.tanh(
        F.linear(q, Wq)[:, None] + F.linear(h, Wk)
    ).sum(-1),
}


@pytest.mark.parametrize("mistake", sorted(SCORES_WRONG))
def test_additive_scores_check_names_each_classic_mistake(mistake):
    assert_rejected("02.1", SCORES_WRONG[mistake], mistake)


def test_additive_scores_check_covers_every_registered_mistake():
    assert set(SCORES_WRONG) == mistake_names("02.1")
    assert_registered_mistakes_named("02.1")


# ----------------------------------------------------------------------------- 02.2


def attn_fill(fill):
    def impl(query, keys, values, W_query, W_key, v, mask):
        e = scores_linear(query, keys, W_query, W_key, v).masked_fill(~mask, fill)
        w = torch.softmax(e, dim=-1)
        return torch.bmm(w.unsqueeze(1), values).squeeze(1), w

    return impl


def attn_renormalised(query, keys, values, W_query, W_key, v, mask):
    w = torch.softmax(scores_einsum(query, keys, W_query, W_key, v), dim=-1) * mask
    w = w / w.sum(dim=-1, keepdim=True)
    return torch.einsum("bs,bsd->bd", w, values), w


@pytest.mark.parametrize(
    "candidate",
    [
        attn_fill(float("-inf")),
        attn_fill(-1e9),
        attn_renormalised,
        checks.get("02.2").reference,
    ],
    ids=["fill -inf", "fill -1e9", "mask then renormalise", "reference"],
)
def test_additive_attention_check_accepts_correct_answers(candidate):
    assert_passes("02.2", candidate)


def attn_weights(weigh, use_keys=False, swap=False):
    def impl(query, keys, values, W_query, W_key, v, mask):
        w = weigh(scores_linear(query, keys, W_query, W_key, v), mask)
        ctx = (w.unsqueeze(-1) * (keys if use_keys else values)).sum(dim=1)
        return (w, ctx) if swap else (ctx, w)

    return impl


def _masked(e, m):
    return F.softmax(e.masked_fill(m == 0, float("-inf")), dim=-1)


ATTN_WRONG = {
    "padding masked after the softmax": attn_weights(lambda e, m: F.softmax(e, -1) * m.double()),
    "padding scores filled with 0 instead of -inf": attn_weights(
        lambda e, m: F.softmax(torch.where(m, e, torch.zeros_like(e)), -1)
    ),
    "mask inverted (True treated as padding)": attn_weights(
        lambda e, m: F.softmax(e.masked_fill(m, float("-inf")), -1)
    ),
    "mask ignored": attn_weights(lambda e, m: F.softmax(e, -1)),
    "softmax over the batch (dim=0) instead of the source positions": attn_weights(
        lambda e, m: F.softmax(e.masked_fill(~m, float("-inf")), 0)
    ),
    "context built from the keys instead of the values": attn_weights(_masked, use_keys=True),
    "returned (weights, context) instead of (context, weights)": attn_weights(_masked, swap=True),
}


@pytest.mark.parametrize("mistake", sorted(ATTN_WRONG))
def test_additive_attention_check_names_each_classic_mistake(mistake):
    assert_rejected("02.2", ATTN_WRONG[mistake], mistake)


def test_additive_attention_check_covers_every_registered_mistake():
    assert set(ATTN_WRONG) == mistake_names("02.2")
    assert_registered_mistakes_named("02.2")


def test_additive_attention_cases_never_draw_an_all_padding_row():
    for seed in range(5):
        for case in checks.get("02.2").make_cases(seed):
            assert case.inputs["mask"].any(dim=-1).all(), case.name


def test_additive_attention_reference_matches_the_course_module():
    torch.manual_seed(0)
    module = attention.AdditiveAttention(5, 4, 6).double()
    q, h, val = (
        torch.randn(3, 5).double(),
        torch.randn(3, 7, 4).double(),
        torch.randn(3, 7, 2).double(),
    )
    mask = attention.padding_mask([7, 3, 1], 7)
    ctx, w = checks.get("02.2").reference(
        q, h, val, module.W_query.weight, module.W_key.weight, module.v, mask
    )
    ctx_m, w_m = module(q, h, val, mask)
    torch.testing.assert_close(ctx, ctx_m)
    torch.testing.assert_close(w, w_m)
