"""Checks for notebook 12 (image captioning): 12.1 the captioner's teacher-forced forward,
12.2 beam search with the GNMT length penalty.

12.1 is a function ``caption_forward(model, images, captions) -> (logits, loss)`` over a
``course_utils.modeling.models.captioner.Captioner`` (pre-norm decoder blocks): images
(B, 1, H, W), captions (B, T) (words, EOS, PAD) -> logits (B, T, V) and the mean cross-entropy
over the non-PAD caption tokens. The decoder reads BOS followed by ``captions[:, :-1]``; each
block is causal self attention over the words, cross attention whose queries are the words and
whose keys and values are the patch features ``model.encode(images)``, then the MLP. The model
the check hands over has no ``decode``/``forward`` (they are the answer); its parts
(``encode``, ``embed``, ``blocks``, ``norm``, ``head``) work. The first case has as many
patches as caption positions, so a forward whose queries come from the image still runs and
can be named.

12.2 is a function ``beam_search(log_probs_fn, bos_id, eos_id, beam_size, max_len, alpha)``
-> ``(tokens (L,), score)``: see :mod:`course_utils.modeling.decoding`. The check's
``log_probs_fn`` is a small seeded bigram-like table; its cases are drawn until each classic
mistake gives another answer than the reference on one of them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from course_utils.checks._common import (
    as_pair,
    as_tensor,
    build_module,
    close,
    parameter_shapes,
    random_weights,
    size,
)
from course_utils.checks.core import Case, Exercise, Mistake, generator, randn
from course_utils.lessons.nb12_image_captioning import LESSON
from course_utils.modeling.decoding import beam_search, length_penalty
from course_utils.modeling.models.captioner import Captioner

NOTEBOOK = LESSON.filename

# ----------------------------------------------------------------------------- 12.1 forward


class CaptionerParts(Captioner):
    """A :class:`Captioner` whose whole-decoder methods are withheld: the exercise writes them."""

    def decode(self, tokens, memory):  # noqa: D102
        raise RuntimeError(
            "model.decode is what caption_forward writes: run model.embed, the blocks' "
            "sublayers, model.norm and model.head yourself"
        )

    def forward(self, images, tokens):  # noqa: D102
        raise RuntimeError("model(...) is what caption_forward writes: build it from the parts")


def _forward_cases(seed: int) -> list[Case]:
    g = generator(seed)

    def case(name: str, B: int, T: int, image: int, patch: int, V: int, pad_rows: bool) -> Case:
        kw = {
            "image_size": image,
            "patch_size": patch,
            "d_model": 8,
            "n_heads": 2,
            "enc_layers": 1,
            "dec_layers": 2,
            "d_ff": 16,
            "max_len": 16,
        }
        words = torch.full((B,), T - 1) if not pad_rows else torch.randint(1, T, (B,), generator=g)
        words[0] = T - 1  # one caption fills the row: its EOS is the last column
        caps = torch.randint(3, V, (B, T), generator=g)
        cols = torch.arange(T)[None, :]
        caps = caps.masked_fill(cols == words[:, None], 2).masked_fill(cols > words[:, None], 0)
        shapes = parameter_shapes(CaptionerParts, V, **kw)
        return Case(
            name,
            {
                "vocab_size": V,
                **kw,
                "images": randn(g, B, 1, image, image),
                "captions": caps,
                **random_weights(g, shapes),
            },
        )

    return [
        case("as many patches as words (4 and 4)", 3, 4, 4, 2, size(g, 6, 9), False),
        case("16 patches, captions of different lengths", 4, size(g, 5, 8), 8, 2, 9, True),
        case("one image", 1, size(g, 3, 6), 8, 4, size(g, 6, 9), False),
        case("four patches, longer captions", 2, size(g, 6, 9), 8, 4, size(g, 6, 9), True),
    ]


def _forward_call(candidate, case: Case) -> dict[str, Tensor]:
    i = case.inputs
    kw = {
        k: int(i[k])
        for k in (
            "image_size",
            "patch_size",
            "d_model",
            "n_heads",
            "enc_layers",
            "dec_layers",
            "d_ff",
            "max_len",
        )
    }
    model = build_module(CaptionerParts, (int(i["vocab_size"]),), kw, i, "model")
    with torch.no_grad():
        out = candidate(model, i["images"], i["captions"])
    logits, loss = as_pair(out, "caption_forward", ("logits", "loss"))
    return {"logits": as_tensor(logits, "logits"), "loss": as_tensor(loss, "loss")}


def _forward(
    model,
    images,
    captions,
    *,
    shift="right",
    causal=True,
    queries="words",
    keys="patches",
    ignore_pad=True,
):
    """The forward with switches for the classic mistakes (defaults: right)."""
    memory = model.encode(images)
    bos = torch.full_like(captions[:, :1], model.bos_id)
    pad = torch.full_like(captions[:, :1], model.pad_id)
    target = captions
    if shift == "right":
        tgt_in = torch.cat([bos, captions[:, :-1]], dim=1)
    elif shift == "none":
        tgt_in = captions
    elif shift == "left":
        tgt_in = torch.cat([captions[:, 1:], pad], dim=1)
    else:  # "no bos": the first word is never predicted
        tgt_in, target = captions[:, :-1], captions[:, 1:]
    x = model.embed(tgt_in)
    for block in model.blocks:
        x = x + block.self_attn(block.norm1(x), is_causal=causal)
        h = block.norm2(x)
        if keys == "words":
            x = x + block.cross_attn(h)
        elif queries == "image":
            x = x + block.cross_attn(memory, h)
        else:
            x = x + block.cross_attn(h, memory)
        x = x + block.mlp(block.norm3(x))
    logits = model.head(model.norm(x))
    loss = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]),
        target.reshape(-1),
        ignore_index=model.pad_id if ignore_pad else -100,
    )
    return logits, loss


def _reference_forward(model, images, captions):
    """The verified forward (what notebook 12 trains with): see the module docstring."""
    return _forward(model, images, captions)


def _forward_with(**switches):
    def forward(model, images, captions):
        return _forward(model, images, captions, **switches)

    return forward


FORWARD_MISTAKES = [
    Mistake(
        "no causal mask in the decoder's self attention",
        "word t may only read the words before it: the self attention over the caption must "
        "be causal, or training lets each position see the word it has to predict",
        _forward_with(causal=False),
    ),
    Mistake(
        "queries from the image instead of the words",
        "in the cross attention the words ask and the image answers: queries from the "
        "(normalised) word states, keys and values from the patch features",
        _forward_with(queries="image"),
    ),
    Mistake(
        "cross attention does not look at the image",
        "the cross attention's keys and values are the patch features from model.encode, "
        "not the words again (that is a second self attention)",
        _forward_with(keys="words"),
    ),
    Mistake(
        "target not shifted",
        "the decoder input is the caption shifted right by one (BOS first, the last column "
        "dropped); fed the caption itself, the model learns to copy its input",
        _forward_with(shift="none"),
    ),
    Mistake(
        "target shifted the wrong way",
        "shift the decoder input to the right (BOS, y_1, ..., y_{T-1}); shifting left shows "
        "each position the future",
        _forward_with(shift="left"),
    ),
    Mistake(
        "BOS missing: the first word is never predicted",
        "prepend BOS to the decoder input instead of dropping the caption's first word: "
        "every word, the first included, is a target",
        _forward_with(shift="no bos"),
    ),
    Mistake(
        "padding counted in the loss",
        "the PAD positions after EOS are not targets: ignore model.pad_id in the cross-entropy",
        _forward_with(ignore_pad=False),
    ),
]

FORWARD = Exercise(
    id="12.1",
    title="the captioner's forward: cross attention from words to patches",
    points=4,
    notebook=NOTEBOOK,
    function="caption_forward",
    reference=_reference_forward,
    make_cases=_forward_cases,
    call=_forward_call,
    mistakes=FORWARD_MISTAKES,
    compare=close(),
    hint="encode the images once into patch features; the decoder input is BOS and the "
    "caption without its last column; in each block: causal self attention, cross attention "
    "with the words as queries and the patches as keys and values, the MLP, each pre-norm "
    "with a residual; then the final norm and the head; cross-entropy ignoring PAD",
)

# ----------------------------------------------------------------------------- 12.2 beam search


class _Table:
    """A seeded next-token model: log_softmax(A[last] + B[previous] + C[position] + eos_bias)
    over V tokens; prefixes (K, t) -> (K, V) float64."""

    def __init__(self, g: torch.Generator, V: int, max_len: int, eos_id: int, eos_bias: float):
        self.A = randn(g, V, V) * 2.0
        self.B = randn(g, V, V)
        self.C = randn(g, max_len + 2, V) * 0.5
        self.C[:, eos_id] += eos_bias

    def __call__(self, prefixes: Tensor) -> Tensor:
        prefixes = torch.as_tensor(prefixes).long()
        t = prefixes.shape[1]
        prev = prefixes[:, -2] if t > 1 else prefixes[:, -1]
        logits = self.A[prefixes[:, -1]] + self.B[prev] + self.C[t]
        return logits.log_softmax(dim=-1)


def _beam(
    log_probs_fn,
    bos_id,
    eos_id,
    beam_size,
    max_len,
    alpha,
    *,
    penalty=length_penalty,
    extend_finished=False,
    record_finished=True,
    accumulate=True,
    count_bos=False,
):
    """Beam search with switches for the classic mistakes (defaults: the reference's)."""
    alive = torch.full((1, 1), bos_id, dtype=torch.long)
    alive_logp = torch.zeros(1, dtype=torch.float64)
    finished = []
    for step in range(1, max_len + 1):
        logp = torch.as_tensor(log_probs_fn(alive)).double()
        V = logp.shape[-1]
        total = ((alive_logp[:, None] if accumulate else 0.0) + logp).flatten()
        scores = (alive_logp[:, None] + logp).flatten()
        _, idx = total.topk(min(beam_size, total.numel()))
        top = scores[idx]
        seqs = torch.cat([alive[idx // V], (idx % V)[:, None]], dim=1)
        ended = seqs[:, -1] == eos_id
        L = step + 1 if count_bos else step
        if record_finished:
            for seq, lp in zip(seqs[ended], top[ended], strict=True):
                finished.append((seq[1:], lp / penalty(L, alpha)))
        keep = torch.ones_like(ended) if extend_finished else ~ended
        alive, alive_logp = seqs[keep], top[keep]
        if alive.shape[0] == 0:
            break
    L = max_len + 1 if count_bos else max_len
    for seq, lp in zip(alive, alive_logp, strict=True):
        finished.append((seq[1:], lp / penalty(L, alpha)))
    best = max(range(len(finished)), key=lambda i: float(finished[i][1]))
    return finished[best]


def _beam_with(**switches):
    def search(log_probs_fn, bos_id, eos_id, beam_size, max_len, alpha):
        return _beam(log_probs_fn, bos_id, eos_id, beam_size, max_len, alpha, **switches)

    return search


def _greedy_only(log_probs_fn, bos_id, eos_id, beam_size, max_len, alpha):
    return _beam(log_probs_fn, bos_id, eos_id, 1, max_len, alpha)


def _plain_length(length, alpha):
    return float(length) ** alpha


BEAM_MISTAKES = [
    Mistake(
        "scores not length-normalised",
        "compare finished hypotheses by log P(Y) / lp(Y) with GNMT's "
        "lp(Y) = ((5 + |Y|) / 6) ** alpha; raw log-probabilities favour short captions",
        _beam_with(penalty=lambda length, alpha: 1.0),
    ),
    Mistake(
        "finished beams extended",
        "a beam whose last token is EOS is finished: move it to the finished list and never "
        "extend it (no words after EOS, no beam slot spent on it)",
        _beam_with(extend_finished=True, record_finished=False),
    ),
    Mistake(
        "finished beams extended",
        "a beam whose last token is EOS is finished: record it, then drop it from the alive "
        "beams instead of extending it further",
        _beam_with(extend_finished=True),
    ),
    Mistake(
        "length penalty of the wrong form",
        "use GNMT's lp(Y) = ((5 + |Y|) / 6) ** alpha, not |Y| ** alpha",
        _beam_with(penalty=_plain_length),
    ),
    Mistake(
        "BOS counted in the hypothesis length",
        "|Y| counts the generated tokens, EOS included and BOS not",
        _beam_with(count_bos=True),
    ),
    Mistake(
        "beam scores not accumulated",
        "a beam's score is the sum of the log-probabilities of all its tokens: add each "
        "extension's log-probability to its beam's running total before ranking",
        _beam_with(accumulate=False),
    ),
    Mistake(
        "only one beam kept (greedy search)",
        "keep the beam_size best extensions over all alive beams at every step",
        _greedy_only,
    ),
]


def _beam_case(g: torch.Generator, name: str) -> Case:
    V = size(g, 6, 9)
    max_len = size(g, 4, 7)
    return Case(
        name,
        {
            "V": V,
            "seed": int(torch.randint(0, 2**31 - 1, (1,), generator=g)),
            "eos_bias": float(torch.empty(1).uniform_(-1.0, 1.5, generator=g)),
            "beam_size": size(g, 2, 4),
            "max_len": max_len,
            "alpha": float(torch.empty(1).uniform_(0.5, 1.5, generator=g)),
        },
    )


def _table(i: dict) -> _Table:
    return _Table(generator(int(i["seed"])), int(i["V"]), int(i["max_len"]), 2, i["eos_bias"])


def _beam_outputs(candidate, i: dict) -> dict[str, Tensor]:
    out = candidate(_table(i), 1, 2, int(i["beam_size"]), int(i["max_len"]), float(i["alpha"]))
    tokens, score = as_pair(
        tuple(torch.as_tensor(v) for v in out) if isinstance(out, (tuple, list)) else out,
        "beam_search",
        ("tokens", "score"),
    )
    tokens = tokens.detach().cpu().long().flatten()
    padded = torch.full((int(i["max_len"]) + 1,), -1, dtype=torch.long)
    padded[: min(len(tokens), len(padded))] = tokens[: len(padded)]
    return {"tokens": padded, "length": torch.tensor(len(tokens)), "score": score.double()}


def _beam_call(candidate, case: Case) -> dict[str, Tensor]:
    return _beam_outputs(candidate, case.inputs)


def _differs(mistake: Mistake, case: Case) -> bool:
    want = _beam_call(_reference_beam, case)
    got = _beam_call(mistake.impl, case)
    return close()(case, got, want) is not None


def _beam_cases(seed: int) -> list[Case]:
    """Seeded cases: four draws, then more until every mistake gives another answer than the
    reference on one of them."""
    g = generator(seed)
    cases: list[Case] = []
    missing = list(BEAM_MISTAKES)
    for k in range(40):
        c = _beam_case(g, f"draw {k}")
        shown = [m for m in missing if _differs(m, c)]
        if k < 4 or shown:
            cases.append(c)
            missing = [m for m in missing if m not in shown]
        if k >= 3 and not missing:
            break
    return cases


def _reference_beam(log_probs_fn, bos_id, eos_id, beam_size, max_len, alpha):
    """The verified beam search (:func:`course_utils.modeling.decoding.beam_search`)."""
    return beam_search(log_probs_fn, bos_id, eos_id, beam_size, max_len, alpha)


BEAM = Exercise(
    id="12.2",
    title="beam search with a length penalty",
    points=4,
    notebook=NOTEBOOK,
    function="beam_search",
    reference=_reference_beam,
    make_cases=_beam_cases,
    call=_beam_call,
    mistakes=BEAM_MISTAKES,
    compare=close(),
    hint="alive beams start as [BOS] with score 0; each step add every token's log-probability "
    "to its beam's score, keep the beam_size best over all beams, move those ending in EOS to "
    "the finished list with score / lp(length), continue with the rest; at max_len the alive "
    "ones count as finished; return the best normalised hypothesis without BOS",
)

EXERCISES = [FORWARD, BEAM]
