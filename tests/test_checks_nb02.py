"""Checks 02.1 (additive scores), 02.2 (additive attention with a padding mask) and 02.3 (the
attention decoder step) accept correct answers written differently and name each classic
mistake. The wrong answers here are written independently of the check's own.
"""

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

from course_utils import checks
from course_utils.modeling import attention
from course_utils.modeling.attention import padding_mask
from course_utils.modeling.models import Seq2SeqRNN

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
    "weight matrices not transposed (a row vector multiplied by W_query as stored)": lambda q, h, Wq, Wk, v: (
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


# ------------------------------------------------------------------ 02.3 the decoder step
def step_with_module(model, prev_token, state, enc_states, src_mask):
    """Uses the model's AdditiveAttention module."""
    context, weights = model.attention(state, enc_states, mask=src_mask)
    new = model.decoder_cell(torch.cat([model.tgt_embed(prev_token), context], -1), state)
    return model.out(torch.cat([new, context], -1)), new, weights


def step_by_hand(model, prev_token, state, enc_states, src_mask):
    """Scores, masked softmax and context written out with einsum and F.linear."""
    a = model.attention
    hidden = F.linear(state, a.W_query.weight)[:, None] + F.linear(enc_states, a.W_key.weight)
    scores = torch.einsum("bsa,a->bs", torch.tanh(hidden), a.v)
    weights = torch.where(src_mask, scores, torch.full_like(scores, -1e30)).softmax(-1)
    context = torch.einsum("bs,bsh->bh", weights, enc_states)
    emb = F.embedding(prev_token, model.tgt_embed.weight)
    new = model.decoder_cell(torch.cat([emb, context], -1), state)
    return model.out(torch.cat([new, context], -1)), new, weights


def step_as_list(model, prev_token, state, enc_states, src_mask):
    return list(step_with_module(model, prev_token, state, enc_states, src_mask))


@pytest.mark.parametrize(
    "candidate",
    [step_with_module, step_by_hand, step_as_list, checks.get("02.3").reference],
    ids=["attention module", "by hand", "list", "reference"],
)
def test_attention_decoder_step_check_accepts_correct_answers(candidate):
    assert_passes("02.3", candidate)


def _wrong(
    *,
    query_new=False,
    weights_new=False,
    mask="ok",
    ctx_mean=False,
    cat_c_first=False,
    out_c_first=False,
    out_old=False,
    raw_scores=False,
):
    def impl(model, prev_token, state, enc_states, src_mask):
        a = model.attention

        def look(s):
            e = (
                torch.tanh(
                    F.linear(s, a.W_query.weight)[:, None] + F.linear(enc_states, a.W_key.weight)
                )
                @ a.v
            )
            if mask == "ignored":
                w = e.softmax(-1)
            elif mask == "inverted":
                w = e.masked_fill(src_mask, float("-inf")).softmax(-1)
            elif mask == "dim0":
                w = e.masked_fill(~src_mask, float("-inf")).softmax(0)
            else:
                w = e.masked_fill(~src_mask, float("-inf")).softmax(-1)
            return torch.bmm(w[:, None], enc_states)[:, 0], w, e

        ctx, w, e = look(state)
        if ctx_mean:
            ctx = enc_states.mean(1)
        emb = model.tgt_embed(prev_token)
        new = model.decoder_cell(torch.cat([ctx, emb] if cat_c_first else [emb, ctx], -1), state)
        if query_new:
            ctx, w, e = look(new)
        if weights_new:
            _, w, e = look(new)
        s = state if out_old else new
        logits = model.out(torch.cat([ctx, s] if out_c_first else [s, ctx], -1))
        return logits, new, e if raw_scores else w

    return impl


WRONG = {
    "attention computed from the new state s_t instead of the previous state s_{t-1}": _wrong(
        query_new=True
    ),
    "attention over padding (src_mask not applied)": _wrong(mask="ignored"),
    "mask inverted (True treated as padding)": _wrong(mask="inverted"),
    "softmax over the batch (dim=0) instead of the source positions": _wrong(mask="dim0"),
    "context is the plain mean of the encoder states (attention weights not used)": _wrong(
        ctx_mean=True
    ),
    "decoder input concatenated as [c_t; embedding] instead of [embedding; c_t]": _wrong(
        cat_c_first=True
    ),
    "output layer fed [c_t; s_t] instead of [s_t; c_t]": _wrong(out_c_first=True),
    "logits computed from the previous state s_{t-1} instead of the new state s_t": _wrong(
        out_old=True
    ),
    "returned the raw scores instead of the attention weights": _wrong(raw_scores=True),
}


@pytest.mark.parametrize("mistake", sorted(WRONG))
def test_attention_decoder_step_check_names_each_classic_mistake(mistake):
    assert_rejected("02.3", WRONG[mistake], mistake)


def test_attention_decoder_step_check_names_weights_returned_from_the_new_state():
    assert_rejected(
        "02.3",
        _wrong(weights_new=True),
        "attention computed from the new state s_t instead of the previous state s_{t-1}",
    )


def test_attention_decoder_step_check_covers_every_registered_mistake():
    assert set(WRONG) == mistake_names("02.3")
    assert_registered_mistakes_named("02.3", seeds=(0,))


def test_attention_decoder_step_check_refuses_the_models_decode_step():
    def shortcut(model, prev_token, state, enc_states, src_mask):
        return model.decode_step(prev_token, state, enc_states, src_mask)

    result = checks.run("02.3", shortcut)
    assert result.status == "error"
    assert "write the attention decoder step yourself" in result.message


def test_attention_decoder_step_check_says_what_to_return():
    result = checks.run("02.3", lambda *args: step_with_module(*args)[:2])
    assert result.status == "error"
    assert "triple (logits, new_state, weights)" in result.message


def test_attention_decoder_step_stub_is_not_attempted():
    def stub(model, prev_token, state, enc_states, src_mask):
        raise NotImplementedError("Exercise 02.3: implement attention_decoder_step")

    assert checks.run("02.3", stub).status == "not_attempted"


def test_attention_decoder_step_cases_include_padding_and_a_one_word_source():
    for case in checks.get("02.3").make_cases(0):
        mask = case.inputs["src_mask"]
        assert mask.any(dim=-1).all(), case.name
    padded = checks.get("02.3").make_cases(0)[0].inputs["src_mask"]
    assert not padded.all() and (padded.sum(-1) == 1).any()


def test_attention_decoder_step_reference_equals_the_model_decode_step():
    torch.manual_seed(0)
    model = Seq2SeqRNN(9, 11, 4, 6, attention=True, attn_dim=5).double().eval()
    src = torch.tensor([[3, 4, 5, 6], [7, 8, 0, 0]])
    lengths = torch.tensor([4, 2])
    enc, c = model.encode(src, lengths)
    mask = padding_mask(lengths, 4)
    prev = torch.tensor([1, 5])
    expected = model.decode_step(prev, c, enc, mask)
    got = checks.get("02.3").reference(model, prev, c, enc, mask)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)


# ----------------------------------------------------------------------------- every seed
# What tests/test_same_verdict_every_seed.py sweeps over many seeds, by exercise: the correct
# answers written differently, and the wrong ones by the name of the mistake they make.
SWEEP_CORRECT = {
    "02.1": [scores_einsum, scores_linear, scores_loop],
    "02.2": {
        "fill -inf": attn_fill(float("-inf")),
        "fill -1e9": attn_fill(-1e9),
        "mask then renormalise": attn_renormalised,
    },
    "02.3": [step_with_module, step_by_hand, step_as_list],
}
SWEEP_WRONG = {"02.1": SCORES_WRONG, "02.2": ATTN_WRONG, "02.3": WRONG}
