"""Check 02.3 (the attention decoder step) accepts correct answers written differently from the
model's and names each classic mistake. The wrong answers here are written independently of
the check's own."""

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
from course_utils.attention import padding_mask
from course_utils.models import Seq2SeqRNN


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
