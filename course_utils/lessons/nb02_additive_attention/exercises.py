"""Checks for notebook 02 (additive attention): 02.1 Bahdanau scores, 02.2 weights and context
with a padding mask, 02.3 the attention decoder step.

Fully padded rows (a source sentence of length 0) do not occur in sequence-to-sequence batches,
so 02.2 never draws one and does not grade what an implementation does there (the reference,
:func:`additive_attention`, returns zero weights and a zero context for such a row).

02.3: ``attention_decoder_step(model, prev_token, state, enc_states, src_mask)`` takes a
:class:`~course_utils.modeling.models.Seq2SeqRNN` built *with* attention and does one decoder step
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

from course_utils.checks._common import (
    as_pair,
    as_tensor,
    close,
    distinct_sizes,
    lengths_mask,
    size,
)
from course_utils.checks.core import Case, Exercise, Mistake, generator, randn
from course_utils.lessons.nb01_rnn_bottleneck.exercises import (
    build_case_model,
    model_case_inputs,
    unguarded,
)
from course_utils.lessons.nb02_additive_attention import LESSON
from course_utils.modeling import attention
from course_utils.modeling.models import Seq2SeqRNN

NOTEBOOK = LESSON.filename


def _params(g: torch.Generator, Dq: int, Dk: int, A: int) -> dict[str, Tensor]:
    return {
        "W_query": randn(g, A, Dq) / Dq**0.5,
        "W_key": randn(g, A, Dk) / Dk**0.5,
        "v": randn(g, A),
    }


# ----------------------------------------------------------------------------- 02.1 scores


def _scores_cases(seed: int) -> list[Case]:
    g = generator(seed)
    n, d = size(g, 3, 5), size(g, 6, 8)
    B, S, Dq, Dk, A = distinct_sizes(g, 5, 2, 9)
    return [
        # B == S and Dq == Dk == A: transposes, swaps and broadcasting slips give wrong numbers
        # here instead of shape errors, so the judge can name them
        Case(
            "square sizes (B == S, Dq == Dk == A)",
            {"query": randn(g, n, d), "keys": randn(g, n, n, d), **_params(g, d, d, d)},
        ),
        Case(
            "all sizes different",
            {"query": randn(g, B, Dq), "keys": randn(g, B, S, Dk), **_params(g, Dq, Dk, A)},
        ),
        Case(
            "one query (B = 1)",
            {"query": randn(g, 1, Dq), "keys": randn(g, 1, S, Dk), **_params(g, Dq, Dk, A)},
        ),
        Case(
            "long source (S = 12)",
            {"query": randn(g, B, Dq), "keys": randn(g, B, 12, Dk), **_params(g, Dq, Dk, A)},
        ),
    ]


def _scores_call(candidate, case: Case) -> dict[str, Tensor]:
    i = case.inputs
    out = candidate(i["query"], i["keys"], i["W_query"], i["W_key"], i["v"])
    return {"scores": as_tensor(out, "additive_scores(...)")}


def _without_tanh(query, keys, W_query, W_key, v):
    return ((query @ W_query.T)[:, None, :] + keys @ W_key.T) @ v


def _tanh_outside(query, keys, W_query, W_key, v):
    return torch.tanh(((query @ W_query.T)[:, None, :] + keys @ W_key.T) @ v)


def _untransposed(query, keys, W_query, W_key, v):
    return torch.tanh((query @ W_query)[:, None, :] + keys @ W_key) @ v


def _swapped(query, keys, W_query, W_key, v):
    return torch.tanh((query @ W_key.T)[:, None, :] + keys @ W_query.T) @ v


def _no_unsqueeze(query, keys, W_query, W_key, v):
    return torch.tanh(query @ W_query.T + keys @ W_key.T) @ v  # (B, A) broadcasts over S, not B


def _returned_weights(query, keys, W_query, W_key, v):
    return torch.softmax(attention.additive_scores(query, keys, W_query, W_key, v), dim=-1)


def _v_ignored(query, keys, W_query, W_key, v):
    return torch.tanh((query @ W_query.T)[:, None, :] + keys @ W_key.T).sum(dim=-1)


SCORES_MISTAKES = [
    Mistake(
        "tanh missing",
        "the score is v . tanh(W_query s + W_key h): apply tanh to the sum of the two "
        "projections before the dot product with v",
        _without_tanh,
    ),
    Mistake(
        "tanh applied after the dot product with v",
        "tanh goes inside: v . tanh(W_query s + W_key h), not tanh(v . (...))",
        _tanh_outside,
    ),
    Mistake(
        "weight matrices not transposed (a row vector multiplied by W_query as stored)",
        "W_query has shape (A, Dq), like an nn.Linear weight: a row vector of width Dq is "
        "projected by its transpose (likewise the keys by W_key's)",
        _untransposed,
    ),
    Mistake(
        "W_query and W_key swapped",
        "W_query projects the decoder state (query), W_key the encoder states (keys)",
        _swapped,
    ),
    Mistake(
        "query projection not broadcast over the source positions",
        "the projected query (B, A) must be added to every position of the projected keys "
        "(B, S, A): unsqueeze it to (B, 1, A) first, otherwise it broadcasts along the "
        "wrong axis",
        _no_unsqueeze,
    ),
    Mistake(
        "returned softmax weights instead of raw scores",
        "additive_scores returns the unnormalised scores e (B, S); the softmax comes later",
        _returned_weights,
    ),
    Mistake(
        "v ignored (tanh summed over the attention dimension)",
        "reduce the attention dimension with the learned vector v: tanh(...) @ v",
        _v_ignored,
    ),
]

SCORES = Exercise(
    id="02.1",
    title="Additive (Bahdanau) attention scores",
    points=2,
    notebook=NOTEBOOK,
    function="additive_scores",
    reference=attention.additive_scores,
    make_cases=_scores_cases,
    call=_scores_call,
    mistakes=SCORES_MISTAKES,
    compare=close(),
    hint=(
        "Work out the shapes on paper first: the query is (B, Dq), the keys (B, S, Dk), the "
        "result one number per (b, j). Where must a size-1 axis go so that one projected query "
        "meets every key? Compute e[0, 0] by hand from the prompt's formula and compare it with "
        "yours."
    ),
)

# ----------------------------------------------------------------------------- 02.2 weights + context


def additive_attention(
    query: Tensor,
    keys: Tensor,
    values: Tensor,
    W_query: Tensor,
    W_key: Tensor,
    v: Tensor,
    mask: Tensor | None,
) -> tuple[Tensor, Tensor]:
    """Bahdanau attention with a padding mask (the reference answer to 02.2).

    query (B, Dq), keys (B, S, Dk), values (B, S, Dv), W_query (A, Dq), W_key (A, Dk), v (A,),
    mask (B, S) bool, True = real token -> (context (B, Dv), weights (B, S)). A row with no real
    token gets zero weights and a zero context.
    """
    scores = attention.additive_scores(query, keys, W_query, W_key, v)  # (B, S)
    weights = attention.masked_softmax(scores, mask)  # (B, S), 0 at padding
    context = (weights[:, None, :] @ values).squeeze(1)  # (B, 1, S) @ (B, S, Dv) -> (B, Dv)
    return context, weights


def _attn_cases(seed: int) -> list[Case]:
    g = generator(seed)
    B, S, Dq, Dk, Dv, A = distinct_sizes(g, 6, 2, 9)
    B, S = max(B, 3), max(S, 4)

    def case(name: str, B: int, S: int, mask: Tensor) -> Case:
        return Case(
            name,
            {
                "query": randn(g, B, Dq),
                "keys": randn(g, B, S, Dk),
                "values": randn(g, B, S, Dv),
                **_params(g, Dq, Dk, A),
                "mask": mask,
            },
        )

    ones = torch.ones(1, S, dtype=torch.bool)
    short = lengths_mask(g, B, S)
    short[0] = torch.arange(S) < 1  # a one-token source: all weight on it
    return [
        case("padded batch", B, S, lengths_mask(g, B, S)),
        case("no padding", B, S, torch.ones(B, S, dtype=torch.bool)),
        case("one sentence, no padding (B = 1)", 1, S, ones),
        case("a source of length 1", B, S, short),
    ]


def _attn_call(candidate, case: Case) -> dict[str, Tensor]:
    i = case.inputs
    out = candidate(i["query"], i["keys"], i["values"], i["W_query"], i["W_key"], i["v"], i["mask"])
    context, weights = as_pair(out, "additive_attention", ("context", "weights"))
    return {"context": context, "weights": weights}


def _from_weights(weigh):
    def impl(query, keys, values, W_query, W_key, v, mask):
        scores = attention.additive_scores(query, keys, W_query, W_key, v)
        weights = weigh(scores, mask)
        return torch.einsum("bs,bsd->bd", weights, values), weights

    return impl


def _fill(value: float, invert: bool = False):
    def weigh(scores, mask):
        blocked = mask if invert else ~mask
        return torch.softmax(scores.masked_fill(blocked, value), dim=-1)

    return weigh


def _keys_as_values(query, keys, values, W_query, W_key, v, mask):
    return additive_attention(query, keys, keys, W_query, W_key, v, mask)


def _swapped_outputs(query, keys, values, W_query, W_key, v, mask):
    context, weights = additive_attention(query, keys, values, W_query, W_key, v, mask)
    return weights, context


_INVERTED = (
    "mask is True at real tokens (may attend) and False at padding: block the "
    "positions where the mask is False, scores.masked_fill(~mask, float('-inf'))"
)

ATTENTION_MISTAKES = [
    Mistake(
        "padding masked after the softmax",
        "set the padded scores to -inf before the softmax; zeroing weights afterwards "
        "leaves the real tokens' weights summing to less than 1",
        _from_weights(lambda s, m: torch.softmax(s, dim=-1) * m),
    ),
    Mistake(
        "padding scores filled with 0 instead of -inf",
        "a score of 0 still gets weight exp(0) > 0 in the softmax: fill padded positions "
        "with float('-inf')",
        _from_weights(_fill(0.0)),
    ),
    Mistake(
        "mask inverted (True treated as padding)",
        _INVERTED,
        _from_weights(_fill(float("-inf"), invert=True)),
    ),
    Mistake(
        "mask inverted (True treated as padding)",
        _INVERTED,
        _from_weights(lambda s, m: attention.masked_softmax(s, ~m)),
    ),
    Mistake(
        "mask ignored",
        "padding positions must get zero weight: fill their scores with -inf before the softmax",
        _from_weights(lambda s, m: torch.softmax(s, dim=-1)),
    ),
    Mistake(
        "softmax over the batch (dim=0) instead of the source positions",
        "normalise over the source positions: softmax(scores, dim=-1) on (B, S)",
        _from_weights(lambda s, m: torch.softmax(s.masked_fill(~m, float("-inf")), dim=0)),
    ),
    Mistake(
        "context built from the keys instead of the values",
        "the context is the weighted sum of the values: weights (B, S) times values "
        "(B, S, Dv) summed over S",
        _keys_as_values,
    ),
    Mistake(
        "returned (weights, context) instead of (context, weights)",
        "return the context first, then the weights",
        _swapped_outputs,
    ),
]

ATTENTION = Exercise(
    id="02.2",
    title="Additive attention: weights and context with a padding mask",
    points=3,
    notebook=NOTEBOOK,
    function="additive_attention",
    reference=additive_attention,
    make_cases=_attn_cases,
    call=_attn_call,
    mistakes=ATTENTION_MISTAKES,
    compare=close(),
    hint=(
        "Print your weights for a row with padding: do they sum to 1, and are the padded "
        "positions exactly 0? Which axis does the softmax normalise, and which value must a "
        "padded score take before it (not after)? Is the context (B, Dv), an average of the "
        "values, not of the keys?"
    ),
)


# ------------------------------------------------------------------ 02.3 the decoder step
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
            scores = attention.additive_scores(s, enc_states, a.W_query.weight, a.W_key.weight, a.v)
            if mask == "batch":
                w = torch.softmax(scores.masked_fill(~src_mask, float("-inf")), dim=0)
            elif mask == "inverted_nan":  # a full-length row is then fully masked: NaN
                w = torch.softmax(scores.masked_fill(src_mask, float("-inf")), dim=-1)
            else:
                w = attention.masked_softmax(scores, m)
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
_STEP_MASK_INVERTED = (
    "src_mask is True at real tokens: those may be attended; block where it is False"
)
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
    Mistake("mask inverted (True treated as padding)", _STEP_MASK_INVERTED, _step(mask="inverted")),
    Mistake(
        "mask inverted (True treated as padding)", _STEP_MASK_INVERTED, _step(mask="inverted_nan")
    ),
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
    hint=(
        "Compare with the case piece by piece: which state does the attention query, the one "
        "coming in or the one this step computes? Print the context's shape and check the order "
        "of what you concatenate against the prompt. Are the weights you return the ones this "
        "step used, with padding at 0?"
    ),
)


EXERCISES = [SCORES, ATTENTION, DECODER_STEP]
