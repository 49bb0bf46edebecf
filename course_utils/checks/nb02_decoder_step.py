"""Check for notebook 02 (additive attention): 02.3 the attention decoder step.

``attention_decoder_step(model, prev_token, state, enc_states, src_mask)`` takes a
:class:`~course_utils.models.Seq2SeqRNN` built *with* attention and does one decoder step
(Bahdanau et al. 2015; slides 6-11), returning ``(logits (B, V), new state (B, H),
weights (B, S))``:

    c_t, a_t  = attention(s_{t-1}, h_1..h_S)     scores from the *previous* state, padding masked
    s_t       = decoder_cell([embed(y_{t-1}); c_t], s_{t-1})
    logits_t  = out([s_t; c_t])

The check builds a small seeded float64 model from plain weights and compares with the
model's own verified ``Seq2SeqRNN.decode_step``; while the student's function runs,
``model.decode_step``, ``model.forward`` and ``model.greedy_decode`` are switched off (calling
them raises a ``RuntimeError`` saying what to use instead). ``model.attention`` (the
``AdditiveAttention`` module) and the notebook's own ``additive_attention`` are allowed.
"""

from __future__ import annotations

import torch
from torch import Tensor

from course_utils import attention as attn
from course_utils.checks._common import as_tensor, close, size
from course_utils.checks.core import Case, Exercise, Mistake, generator, randn
from course_utils.checks.nb01_rnn_bottleneck import (
    build_case_model,
    model_case_inputs,
    unguarded,
)
from course_utils.models import Seq2SeqRNN

NOTEBOOK = "02_additive_attention.ipynb"

__all__ = ["EXERCISES", "attention_decoder_step"]

_BLOCKED = {
    "decode_step": "exercise 02.3 asks you to write the attention decoder step yourself: do not "
    "call model.decode_step; use model.attention, model.tgt_embed, "
    "model.decoder_cell and model.out",
    "forward": "exercise 02.3 is one decoder step: do not call model(...) or model.forward",
    "greedy_decode": "exercise 02.3 is one decoder step: do not call model.greedy_decode",
}


def attention_decoder_step(
    model: Seq2SeqRNN, prev_token: Tensor, state: Tensor, enc_states: Tensor, src_mask: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """One attention decoder step (the reference answer to 02.3): the model's ``decode_step``.

    prev_token (B,) ids, state s_{t-1} (B, H), enc_states (B, S, H), src_mask (B, S) bool
    (True = real token) -> (logits (B, V), new state s_t (B, H), weights (B, S)).
    """
    if model.attention is None:
        raise ValueError("attention_decoder_step needs a Seq2SeqRNN built with attention=True")
    with unguarded(model):
        logits, new_state, weights = Seq2SeqRNN.decode_step(
            model, prev_token, state, enc_states, src_mask
        )
    return logits, new_state, weights


def _cases(seed: int) -> list[Case]:
    g = generator(seed)
    cases = []
    E, H, A = 5, 7, 6  # all different: a concatenation in the wrong order changes the numbers
    for name, B, S in [
        ("padded batch", size(g, 3, 5), size(g, 5, 8)),
        ("one sentence (B = 1)", 1, size(g, 3, 6)),
        ("long source", size(g, 2, 4), 11),
    ]:
        inputs = model_case_inputs(
            g,
            attention=True,
            src_vocab=size(g, 8, 11),
            tgt_vocab=size(g, 9, 12),
            emb_dim=E,
            hidden_dim=H,
            attn_dim=A,
        )
        lengths = torch.randint(1, S + 1, (B,), generator=g)
        lengths[0] = S
        if B > 2:
            lengths[1] = 1  # a one-token source: all weight on it
        mask = torch.arange(S)[None, :] < lengths[:, None]
        cases.append(
            Case(
                name,
                {
                    **inputs,
                    "prev_token": torch.randint(1, inputs["tgt_vocab"], (B,), generator=g),
                    "state": randn(g, B, H) * 0.5,
                    # padding positions hold junk, not zeros: attending to them shows in the output
                    "enc_states": randn(g, B, S, H) * 0.8,
                    "src_mask": mask,
                },
            )
        )
    return cases


def _call(candidate, case: Case) -> dict[str, Tensor]:
    i = case.inputs
    model = build_case_model(i, _BLOCKED)
    out = candidate(
        model,
        i["prev_token"].clone(),
        i["state"].clone(),
        i["enc_states"].clone(),
        i["src_mask"].clone(),
    )
    if not isinstance(out, (tuple, list)) or len(out) != 3:
        got = type(out).__name__ + (
            f" of length {len(out)}" if isinstance(out, (tuple, list)) else ""
        )
        raise TypeError(
            "attention_decoder_step should return a triple (logits, new_state, "
            f"weights), got a {got}"
        )
    names = ("logits", "new_state", "weights")
    return {n: as_tensor(v, n) for n, v in zip(names, out)}


def _step(
    *,
    query="old",
    mask="mask",
    cell_order="emb_c",
    out_order="s_c",
    out_state="new",
    weights_out="weights",
    context="attention",
    weights_from=None,
):
    """A configurable (mostly wrong) decoder step, used to write the classic mistakes."""

    def impl(model, prev_token, state, enc_states, src_mask):
        a = model.attention
        m = {
            "mask": src_mask,
            "none": None,
            "inverted": ~src_mask,
            "batch": src_mask,
            "inverted_nan": ~src_mask,
        }[mask]

        def attend(s):
            scores = attn.additive_scores(s, enc_states, a.W_query.weight, a.W_key.weight, a.v)
            if mask == "batch":
                w = torch.softmax(scores.masked_fill(~src_mask, float("-inf")), dim=0)
            elif mask == "inverted_nan":  # a full-length row is then fully masked: NaN
                w = torch.softmax(scores.masked_fill(src_mask, float("-inf")), dim=-1)
            else:
                w = attn.masked_softmax(scores, m)
            return (w[:, :, None] * enc_states).sum(dim=1), w, scores

        ctx, w, scores = attend(state)
        if context == "mean":
            ctx = enc_states.mean(dim=1)
        emb = model.tgt_embed(prev_token)
        x = torch.cat([emb, ctx] if cell_order == "emb_c" else [ctx, emb], dim=-1)
        new = model.decoder_cell(x, state)
        if query == "new":  # attention recomputed from the new state for the output
            ctx, w, scores = attend(new)
        if weights_from == "new":
            _, w, scores = attend(new)
        s = new if out_state == "new" else state
        logits = model.out(torch.cat([s, ctx] if out_order == "s_c" else [ctx, s], dim=-1))
        return logits, new, scores if weights_out == "scores" else w

    return impl


_NEW_STATE = (
    "Bahdanau attention scores the encoder states against the decoder state *before* "
    "the update: e_tj = f_att(s_{t-1}, h_j); compute c_t from `state`, then "
    "s_t = decoder_cell([embedding; c_t], state), and use that same c_t in the output"
)
_INVERTED = "src_mask is True at real tokens: those may be attended; block where it is False"
_NO_MASK = (
    "padding positions must get zero weight: pass mask=src_mask to the attention "
    "(scores of padded positions set to -inf before the softmax)"
)

MISTAKES = [
    Mistake(
        "attention computed from the new state s_t instead of the previous state s_{t-1}",
        _NEW_STATE,
        _step(query="new"),
    ),
    Mistake(
        "attention computed from the new state s_t instead of the previous state s_{t-1}",
        _NEW_STATE,
        _step(weights_from="new"),
    ),
    Mistake("attention over padding (src_mask not applied)", _NO_MASK, _step(mask="none")),
    Mistake("mask inverted (True treated as padding)", _INVERTED, _step(mask="inverted")),
    Mistake("mask inverted (True treated as padding)", _INVERTED, _step(mask="inverted_nan")),
    Mistake(
        "softmax over the batch (dim=0) instead of the source positions",
        "normalise the scores (B, S) over the source positions, dim=-1",
        _step(mask="batch"),
    ),
    Mistake(
        "context is the plain mean of the encoder states (attention weights not used)",
        "c_t = sum_j a_tj h_j: weight each encoder state by its attention weight",
        _step(context="mean"),
    ),
    Mistake(
        "decoder input concatenated as [c_t; embedding] instead of [embedding; c_t]",
        "decoder_cell expects torch.cat([embedding, c_t], dim=-1): embedding first",
        _step(cell_order="c_emb"),
    ),
    Mistake(
        "output layer fed [c_t; s_t] instead of [s_t; c_t]",
        "the output layer expects torch.cat([s_t, c_t], dim=-1): the new state first",
        _step(out_order="c_s"),
    ),
    Mistake(
        "logits computed from the previous state s_{t-1} instead of the new state s_t",
        "first update the state with the GRU cell, then logits = out([s_t; c_t])",
        _step(out_state="old"),
    ),
    Mistake(
        "returned the raw scores instead of the attention weights",
        "return the softmax-normalised weights a_t (rows sum to 1 over the real tokens), "
        "not the scores e_t",
        _step(weights_out="scores"),
    ),
]

DECODER_STEP = Exercise(
    id="02.3",
    title="Attention decoder step",
    points=3,
    notebook=NOTEBOOK,
    function="attention_decoder_step",
    reference=attention_decoder_step,
    make_cases=_cases,
    call=_call,
    mistakes=MISTAKES,
    compare=close(),
    hint="context, weights = model.attention(state, enc_states, mask=src_mask) (scores from the "
    "previous state); new_state = model.decoder_cell(torch.cat([model.tgt_embed(prev_token), "
    "context], -1), state); logits = model.out(torch.cat([new_state, context], -1)); "
    "return logits, new_state, weights",
)

EXERCISES = [DECODER_STEP]
