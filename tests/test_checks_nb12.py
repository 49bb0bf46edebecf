"""Checks 12.1 (the captioner's forward) and 12.2 (beam search) accept correct answers written
differently and name each classic mistake. The wrong answers here are written independently
of the check module's own catalogue."""

from __future__ import annotations

import heapq

import torch
import torch.nn.functional as F
from checks_testing import assert_passes, assert_registered_mistakes_named, assert_rejected

from course_utils import checks
from course_utils.modeling.attention import causal_mask

SEEDS = (0, 1)  # each case builds modules or runs searches: two draws keep this file fast


# ----------------------------------------------------------------------------- 12.1


def forward_by_blocks(model, images, captions):
    """Correct, written differently: whole decoder blocks (causal by default), a hand-made
    shift with torch.roll, the loss from log_softmax and a mask."""
    memory = model.encode(images)
    tgt_in = torch.roll(captions, 1, dims=1)
    tgt_in[:, 0] = model.bos_id
    x = model.embed(tgt_in)
    for block in model.blocks:
        x = block(x, memory)
    logits = model.head(model.norm(x))
    nll = -logits.log_softmax(-1).gather(-1, captions[..., None])[..., 0]
    real = captions != model.pad_id
    return logits, nll[real].mean()


def forward_manual_mask(model, images, captions):
    """Correct: an explicit bool causal mask on the manual attention path."""
    memory = model.encode(images)
    T = captions.shape[1]
    bos = torch.full((captions.shape[0], 1), model.bos_id, dtype=captions.dtype)
    x = model.embed(torch.cat([bos, captions[:, :-1]], 1))
    for b in model.blocks:
        b.self_attn.fast = False
        x = x + b.self_attn(b.norm1(x), attn_mask=causal_mask(T))
        x = x + b.cross_attn(b.norm2(x), context=memory)
        x = x + b.mlp(b.norm3(x))
    logits = model.head(model.norm(x))
    loss = F.cross_entropy(logits.transpose(1, 2), captions, ignore_index=model.pad_id)
    return logits, loss


def forward_unshifted(model, images, captions):
    memory = model.encode(images)
    x = model.embed(captions)
    for block in model.blocks:
        x = block(x, memory)
    logits = model.head(model.norm(x))
    return logits, F.cross_entropy(logits.flatten(0, 1), captions.flatten(), ignore_index=0)


def forward_not_causal(model, images, captions):
    memory = model.encode(images)
    bos = torch.full_like(captions[:, :1], model.bos_id)
    x = model.embed(torch.cat([bos, captions[:, :-1]], 1))
    for block in model.blocks:
        x = block(x, memory, is_causal=False)
    logits = model.head(model.norm(x))
    return logits, F.cross_entropy(logits.flatten(0, 1), captions.flatten(), ignore_index=0)


def forward_image_queries(model, images, captions):
    memory = model.encode(images)
    bos = torch.full_like(captions[:, :1], model.bos_id)
    x = model.embed(torch.cat([bos, captions[:, :-1]], 1))
    for b in model.blocks:
        x = x + b.self_attn(b.norm1(x), is_causal=True)
        x = x + b.cross_attn(memory, b.norm2(x))
        x = x + b.mlp(b.norm3(x))
    logits = model.head(model.norm(x))
    return logits, F.cross_entropy(logits.flatten(0, 1), captions.flatten(), ignore_index=0)


def forward_using_decode(model, images, captions):
    bos = torch.full_like(captions[:, :1], model.bos_id)
    logits = model.decode(torch.cat([bos, captions[:, :-1]], 1), model.encode(images))
    return logits, F.cross_entropy(logits.flatten(0, 1), captions.flatten(), ignore_index=0)


def test_12_1_accepts_correct_answers_written_differently():
    assert_passes("12.1", forward_by_blocks, SEEDS)
    assert_passes("12.1", forward_manual_mask, SEEDS)


def test_12_1_names_the_classic_mistakes():
    assert_rejected("12.1", forward_unshifted, "target not shifted", SEEDS)
    assert_rejected(
        "12.1", forward_not_causal, "no causal mask in the decoder's self attention", SEEDS
    )
    assert_rejected(
        "12.1", forward_image_queries, "queries from the image instead of the words", SEEDS
    )
    assert_registered_mistakes_named("12.1", SEEDS)


def test_12_1_withholds_the_models_own_decoder():
    result = checks.run("12.1", forward_using_decode)
    assert result.status == "error" and "caption_forward writes" in result.message


# ----------------------------------------------------------------------------- 12.2


def beam_with_heaps(log_probs_fn, bos_id, eos_id, beam_size, max_len, alpha):
    """Correct, written differently: Python lists and heapq, one beam at a time."""
    alive = [(0.0, [bos_id])]
    done = []
    for step in range(1, max_len + 1):
        cand = []
        for score, seq in alive:
            row = log_probs_fn(torch.tensor([seq]))[0]
            cand += [(score + float(row[w]), seq + [w]) for w in range(len(row))]
        best = heapq.nlargest(beam_size, cand, key=lambda c: c[0])
        alive = [(s, q) for s, q in best if q[-1] != eos_id]
        done += [(s / ((5 + step) / 6) ** alpha, q[1:]) for s, q in best if q[-1] == eos_id]
        if not alive:
            break
    done += [(s / ((5 + max_len) / 6) ** alpha, q[1:]) for s, q in alive]
    score, seq = max(done, key=lambda d: d[0])
    return seq, score


def beam_unnormalised(log_probs_fn, bos_id, eos_id, beam_size, max_len, alpha):
    return beam_with_heaps(log_probs_fn, bos_id, eos_id, beam_size, max_len, 0.0)


def beam_extends_everything(log_probs_fn, bos_id, eos_id, beam_size, max_len, alpha):
    """EOS treated as any word: every beam runs to max_len."""
    alive = [(0.0, [bos_id])]
    for _ in range(max_len):
        cand = []
        for score, seq in alive:
            row = log_probs_fn(torch.tensor([seq]))[0]
            cand += [(score + float(row[w]), seq + [w]) for w in range(len(row))]
        alive = heapq.nlargest(beam_size, cand, key=lambda c: c[0])
    score, seq = max(alive, key=lambda c: c[0] / ((5 + max_len) / 6) ** alpha)
    return seq[1:], score / ((5 + max_len) / 6) ** alpha


def test_12_2_accepts_correct_answers_written_differently():
    assert_passes("12.2", beam_with_heaps, SEEDS)


def test_12_2_names_the_classic_mistakes():
    assert_rejected("12.2", beam_unnormalised, "scores not length-normalised", SEEDS)
    assert_rejected("12.2", beam_extends_everything, "finished beams extended", SEEDS)
    for mistake in checks.get("12.2").mistakes:  # each one is rejected; seed 0 names it too
        assert checks.run("12.2", mistake.impl, seed=1).status == "failed"
        assert checks.run("12.2", mistake.impl, seed=0).mistake == mistake.name


def test_failure_messages_never_print_a_solution_line():
    import json
    from pathlib import Path

    nb = json.loads(
        Path(__file__).parents[1].joinpath("solutions/12_image_captioning.ipynb").read_text()
    )
    lines = set()
    for cell in nb["cells"]:
        src = "".join(cell["source"])
        if "### BEGIN SOLUTION" in src:
            body = src.split("### BEGIN SOLUTION")[1].split("### END SOLUTION")[0]
            lines |= {ln.split("#")[0].strip() for ln in body.splitlines() if len(ln.strip()) > 12}
    for ex in (checks.get("12.1"), checks.get("12.2")):
        text = " ".join([ex.hint, *(m.hint for m in ex.mistakes)])
        assert not [ln for ln in lines if ln and ln in text]
