"""Checks 12.1 (the captioner's forward) and 12.2 (beam search) accept correct answers written
differently and name each classic mistake. The wrong answers here are written independently
of the check module's own catalogue."""

from __future__ import annotations

import heapq

import torch
import torch.nn.functional as F
from checks_testing import assert_passes, assert_registered_mistakes_named, assert_rejected

from course_utils import checks
from course_utils.checks import core
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


# ----------------------------------------------------------------------------- student D's report
# (reviews/turn4/student-D.md): each false acceptance, shortcut and false rejection, by name.

from checks_testing import assert_not_accepted, assert_own_work_passes  # noqa: E402

from course_utils.lessons.nb12_image_captioning import exercises as nb12  # noqa: E402
from course_utils.modeling import decoding  # noqa: E402
from course_utils.modeling.decoding import length_penalty  # noqa: E402
from course_utils.modeling.models.captioner import Captioner  # noqa: E402


def _solution_forward(model, images, captions, *, kpm=False):
    memory = model.encode(images)
    bos = torch.full_like(captions[:, :1], model.bos_id)
    inp = torch.cat([bos, captions[:, :-1]], dim=1)
    x = model.embed(inp)
    for block in model.blocks:
        extra = {"key_padding_mask": inp != model.pad_id} if kpm else {}
        x = x + block.self_attn(block.norm1(x), is_causal=True, **extra)
        x = x + block.cross_attn(block.norm2(x), memory)
        x = x + block.mlp(block.norm3(x))
    logits = model.head(model.norm(x))
    loss = F.cross_entropy(logits.flatten(0, 1), captions.flatten(), ignore_index=model.pad_id)
    return logits, loss


def test_D_FR1_a_decoder_padding_mask_on_pad_inputs_passes():
    """12.1 compares the logits only where the target is a real token."""
    assert_own_work_passes("12.1", lambda m, i, c: _solution_forward(m, i, c, kpm=True))


def test_D_FA4_a_detached_loss_is_rejected():
    def detached(model, images, captions):
        logits, loss = _solution_forward(model, images, captions)
        return logits, loss.detach()

    assert_not_accepted("12.1", detached, "'loss' is not differentiable")


def test_D_FA5_a_forward_under_no_grad_is_rejected():
    assert_not_accepted("12.1", torch.no_grad()(_solution_forward), "not differentiable")


def test_D_shortcut_whole_decoder_blocks_in_12_1_are_refused():
    assert_not_accepted("12.1", forward_by_blocks, "TransformerDecoderBlock.forward")


def test_D_shortcut_captioner_decode_unbound_in_12_1_is_refused():
    def unbound(model, images, captions):
        bos = torch.full_like(captions[:, :1], model.bos_id)
        tokens = torch.cat([bos, captions[:, :-1]], 1)
        logits = Captioner.decode(model, tokens, model.encode(images))
        loss = F.cross_entropy(logits.flatten(0, 1), captions.flatten(), ignore_index=0)
        return logits, loss

    assert_not_accepted("12.1", unbound, "Captioner.decode")


def test_D_shortcut_importing_decoding_beam_search_in_12_2_is_refused():
    def imported(log_probs_fn, bos_id, eos_id, beam_size, max_len, alpha):
        return decoding.beam_search(log_probs_fn, bos_id, eos_id, beam_size, max_len, alpha)

    def built_at_run_time(log_probs_fn, bos_id, eos_id, beam_size, max_len, alpha):
        fn = getattr(decoding, "beam_" + "search")
        return fn(log_probs_fn, bos_id, eos_id, beam_size, max_len, alpha)

    for candidate in (imported, built_at_run_time):
        assert_not_accepted("12.2", candidate, "decoding.beam_search", seeds=(0,))


def student_beam(log_probs_fn, bos_id, eos_id, beam_size, max_len, alpha, *, mistake=""):
    """Student D's pure-Python bookkeeping, with the report's wrong variants as switches."""
    beams, finished = [([bos_id], 0.0)], []  # finished: (ids, normalised, raw, length)
    for step in range(1, max_len + 1):
        logp = log_probs_fn(torch.tensor([ids for ids, _ in beams]))
        opts = [
            (s + float(lp), ids + [w])
            for (ids, s), row in zip(beams, logp, strict=True)
            for w, lp in enumerate(row)
        ]
        opts.sort(key=lambda o: o[0], reverse=True)
        beams = []
        for score, ids in opts[:beam_size]:
            if ids[-1] == eos_id:
                finished.append((ids[1:], score / length_penalty(step, alpha), score))
                if mistake == "first finished":
                    return torch.tensor(ids[1:]), finished[-1][1]
            else:
                beams.append((ids, score))
        if not beams:
            break
    if not (mistake == "drop alive" and finished):
        lp_len = max_len + 1 if mistake == "lp(max_len + 1)" else max_len
        finished += [(ids[1:], s / length_penalty(lp_len, alpha), s) for ids, s in beams]
    key = 2 if mistake == "raw" else 1
    ids, score, _ = max(finished, key=lambda f: f[key])
    return torch.tensor(ids), score


def _student(mistake):
    def search(log_probs_fn, bos_id, eos_id, beam_size, max_len, alpha):
        return student_beam(
            log_probs_fn, bos_id, eos_id, beam_size, max_len, alpha, mistake=mistake
        )

    return search


D_BEAM_MISTAKES = {
    "raw": "best hypothesis chosen by raw log P",  # FA-1
    "drop alive": "alive beams dropped at max_len",  # FA-2
    "first finished": "stopped at the first finished hypothesis",  # FA-3
    "lp(max_len + 1)": "alive beams normalised at length max_len + 1",
}


def test_D_FA1_to_FA3_and_the_other_beam_mistakes_are_named_at_every_seed():
    """Every mistake of the report, written as the student wrote it, fails under its name."""
    for mistake, name in D_BEAM_MISTAKES.items():
        assert_rejected("12.2", _student(mistake), name, seeds=range(6))


def test_D_refill_and_shrinking_beam_conventions_fail_with_the_prompts_convention():
    for impl, name in [
        (nb12._beam_with(refill=True), "alive set refilled to beam_size (top 2k)"),
        (nb12._beam_with(shrink=True), "beam narrowed to beam_size - |finished|"),
        (nb12._beam_with(per_beam=True), "each beam's own top-k kept, not the best over all beams"),
    ]:
        assert_rejected("12.2", impl, name, seeds=range(6))
        result = checks.run("12.2", impl, seed=3)
        assert "alive set shrinks" in result.message or "flat list" in result.message


def test_the_beam_search_verdict_is_the_same_at_200_seeds():
    """Every seed's cases start with the fixed adversarial tables, on which each catalogued
    mistake fails under its own name (so it fails at every seed: the verdict is decided at the
    first differing case); the honest bookkeeping styles pass every seed's random draws."""
    ex = checks.get("12.2")
    fixed = nb12._fixed_cases()
    for mistake in ex.mistakes:
        _, outputs, _ = core.collect_outputs(ex, mistake.impl, fixed)
        result = core.judge(ex, fixed, outputs)
        assert result.status == "failed" and result.mistake == mistake.name, mistake.name
    honest = [ex.reference, _student(""), beam_with_heaps]
    for seed in range(200):
        cases = ex.make_cases(seed)
        assert [c.inputs for c in cases[: len(fixed)]] == [c.inputs for c in fixed]
        drawn = cases[len(fixed) :]
        for candidate in honest:
            status, outputs, message = core.collect_outputs(ex, candidate, drawn)
            assert status == "passed", (seed, message)
            assert core.judge(ex, drawn, outputs).passed, (seed, candidate)


# ----------------------------------------------------------------------------- every seed
# What tests/test_same_verdict_every_seed.py sweeps over many seeds, by exercise: the correct
# answers written differently, and the wrong ones by the name of the mistake they make.
SWEEP_CORRECT = {
    "12.1": {
        "whole blocks": forward_by_blocks,
        "manual mask": forward_manual_mask,
        "PAD inputs masked (student D's FR-1)": lambda m, i, c: _solution_forward(
            m, i, c, kpm=True
        ),
    },
    "12.2": {"heapq": beam_with_heaps, "student D's lists": _student("")},
}
SWEEP_WRONG = {
    "12.1": {
        "target not shifted": forward_unshifted,
        "no causal mask in the decoder's self attention": forward_not_causal,
        "queries from the image instead of the words": forward_image_queries,
    },
    "12.2": {
        "scores not length-normalised": beam_unnormalised,
        "finished beams extended": beam_extends_everything,
        **{name: _student(switch) for switch, name in D_BEAM_MISTAKES.items()},
    },
}
