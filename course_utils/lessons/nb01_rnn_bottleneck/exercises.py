"""Checks for notebook 01 (the RNN bottleneck): 01.1 the seq2seq forward pass with teacher
forcing, 01.2 greedy decoding, 01.3 the training loop.

Both exercises take a :class:`~course_utils.modeling.models.Seq2SeqRNN` *without* attention and use its
submodules. The check builds a small seeded float64 model from plain weights (so a grader can
hand the case to another process) and compares the student's answer with the model's own
verified methods (``Seq2SeqRNN.forward`` and ``Seq2SeqRNN.greedy_decode``).

While the student's function runs, the model's shortcut methods are switched off (calling them
raises a ``RuntimeError`` that says what to use instead): 01.1 must build the decoder step from
``model.tgt_embed``, ``model.decoder_cell`` and ``model.out``; 01.2 may use ``model.encode`` and
``model.decode_step`` but not ``model.greedy_decode`` or ``model(...)``.

Conventions (those of ``Seq2SeqRNN``):

- ``seq2seq_forward(model, src, src_lengths, tgt_in) -> logits (B, T, V)``:
  ``enc_states, c = model.encode(src, src_lengths)``; ``s_0 = c``; for every t,
  ``s_t = decoder_cell([tgt_embed(tgt_in[:, t]); c], s_{t-1})`` and
  ``logits_t = out([s_t; c])``.
- ``greedy_decode(model, src, src_lengths, max_len) -> tokens (B, T')``, ``T' <= max_len``:
  start from BOS, feed back the argmax, each row up to and including its EOS and PAD after it.
  Stopping early once every row has ended is optional: the check pads shorter outputs with PAD
  to ``max_len`` before comparing.
- ``train_loop(model, forward, batches, optimizer, scheduler, *, steps, val_batch,
  eval_every, clip=1.0) -> (train_losses, val_losses)``: see :func:`train_loop`. The check
  trains a small float64 model with plain SGD with momentum (so that clipping and the loss's
  scale show in the weights) and records, through the ``forward`` it hands over, whether each
  call ran in training mode and with gradients.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor

from course_utils.checks._common import as_tensor, build_module, close, random_weights, size
from course_utils.checks.core import Case, Contract, Exercise, Mistake, generator
from course_utils.data.tasks import BOS, EOS, PAD
from course_utils.lessons.nb01_rnn_bottleneck import LESSON
from course_utils.modeling.models import Seq2SeqRNN

NOTEBOOK = LESSON.filename

__all__ = [
    "EXERCISES",
    "seq2seq_forward",
    "greedy_decode",
    "GuardedSeq2SeqRNN",
    "unguarded",
    "model_case_inputs",
    "build_case_model",
    "train_loop",
]


# ----------------------------------------------------------------------------- shared helpers


class GuardedSeq2SeqRNN(Seq2SeqRNN):
    """A ``Seq2SeqRNN`` whose shortcut methods can be switched off while a student's answer runs.

    ``model.blocked = {"forward": "use ... instead"}`` makes ``model.forward`` (and so
    ``model(...)``) raise ``RuntimeError`` with that message; :func:`unguarded` lifts it.
    """

    def _guard(self, name: str) -> None:
        message = self.__dict__.get("blocked", {}).get(name)
        if message:
            raise RuntimeError(message)

    def forward(self, *args, **kwargs):  # noqa: D401 - same contract as Seq2SeqRNN.forward
        self._guard("forward")
        return super().forward(*args, **kwargs)

    def decode_step(self, *args, **kwargs):
        self._guard("decode_step")
        return super().decode_step(*args, **kwargs)

    def greedy_decode(self, *args, **kwargs):
        self._guard("greedy_decode")
        return super().greedy_decode(*args, **kwargs)


@contextlib.contextmanager
def unguarded(model: torch.nn.Module) -> Iterator[None]:
    """Within this block every method of a :class:`GuardedSeq2SeqRNN` works again."""
    blocked = model.__dict__.pop("blocked", None)
    try:
        yield
    finally:
        if blocked is not None:
            model.__dict__["blocked"] = blocked


def model_case_inputs(
    gen: torch.Generator,
    *,
    attention: bool,
    src_vocab: int,
    tgt_vocab: int,
    emb_dim: int,
    hidden_dim: int,
    attn_dim: int | None = None,
    eos_bias: float = 0.0,
) -> dict:
    """Plain case inputs describing a seeded model: sizes (ints) and ``"w:<name>"`` weights.

    Weights are float64, N(0, 1/fan_in) for matrices; the attention vector ``v`` is scaled up
    so that the weights are far from uniform; ``eos_bias`` is added to the EOS logit's bias.
    """
    sizes = {
        "src_vocab": src_vocab,
        "tgt_vocab": tgt_vocab,
        "emb_dim": emb_dim,
        "hidden_dim": hidden_dim,
        "attention": attention,
        "attn_dim": attn_dim if attn_dim is not None else hidden_dim,
    }
    with torch.random.fork_rng(devices=[]):
        template = _make_model(sizes)
    shapes = {name: tuple(p.shape) for name, p in template.named_parameters()}
    scale = {"attention.v": 10.0, "src_embed.weight": 3.0, "tgt_embed.weight": 3.0}
    weights = random_weights(gen, shapes, scale)
    weights["w:out.bias"][EOS] += eos_bias
    return {**sizes, **weights}


def _make_model(sizes: dict) -> GuardedSeq2SeqRNN:
    return GuardedSeq2SeqRNN(
        int(sizes["src_vocab"]),
        int(sizes["tgt_vocab"]),
        int(sizes["emb_dim"]),
        int(sizes["hidden_dim"]),
        attention=bool(sizes["attention"]),
        attn_dim=int(sizes["attn_dim"]),
    )


def build_case_model(inputs: dict, blocked: dict[str, str] | None = None) -> GuardedSeq2SeqRNN:
    """The case's float64 eval-mode model with its weights; ``blocked`` methods switched off."""
    sizes = {
        k: inputs[k]
        for k in ("src_vocab", "tgt_vocab", "emb_dim", "hidden_dim", "attention", "attn_dim")
    }
    model = build_module(lambda: _make_model(sizes), (), {}, inputs, "Seq2SeqRNN")
    if blocked:
        model.__dict__["blocked"] = dict(blocked)
    return model


def _source(gen: torch.Generator, B: int, S: int, vocab: int) -> tuple[Tensor, Tensor]:
    """Padded source ids (B, S) with lengths in [1, S] (one row full, one of length 1 if B > 2)."""
    lengths = torch.randint(1, S + 1, (B,), generator=gen)
    lengths[size(gen, 0, B - 1)] = S
    if B > 2:
        lengths[(int(lengths.argmax()) + 1) % B] = 1
    src = torch.randint(3, vocab, (B, S), generator=gen)
    src = src.masked_fill(torch.arange(S)[None, :] >= lengths[:, None], PAD)
    return src, lengths


# ----------------------------------------------------------------------------- 01.1 forward

_FORWARD_BLOCKED = {
    "forward": "exercise 01.1 asks you to write the forward pass yourself: do not call model(...) "
    "or model.forward; use model.encode, model.tgt_embed, model.decoder_cell and "
    "model.out",
    "decode_step": "exercise 01.1 asks you to write the decoder step yourself: use "
    "model.tgt_embed, model.decoder_cell and model.out (model.decode_step "
    "packages the same step, and you may use it in exercise 01.2)",
    "greedy_decode": "exercise 01.1 is the teacher-forced forward pass: feed the true previous "
    "tokens tgt_in, do not decode greedily",
}


def seq2seq_forward(model: Seq2SeqRNN, src: Tensor, src_lengths: Tensor, tgt_in: Tensor) -> Tensor:
    """Teacher-forced logits of a ``Seq2SeqRNN`` (the reference answer to 01.1).

    src (B, S) ids, src_lengths (B,), tgt_in (B, T) = BOS + target -> logits (B, T, V)
    predicting tgt_out = target + EOS. Uses the model's own verified ``forward``.
    """
    with unguarded(model):
        return Seq2SeqRNN.forward(model, src, src_lengths, tgt_in)[0]


def _forward_cases(seed: int) -> list[Case]:
    g = generator(seed)
    cases = []
    shapes = [
        ("padded batch", size(g, 3, 5), size(g, 5, 7), 8),
        ("one sentence (B = 1)", 1, size(g, 3, 6), 5),
        ("short target, long source", size(g, 2, 4), 9, 3),
    ]
    for name, B, S, T in shapes:
        E, H = 5, 7
        inputs = model_case_inputs(
            g,
            attention=False,
            src_vocab=size(g, 9, 12),
            tgt_vocab=size(g, 10, 13),
            emb_dim=E,
            hidden_dim=H,
        )
        src, lengths = _source(g, B, S, inputs["src_vocab"])
        tgt_len = torch.randint(1, T + 1, (B,), generator=g)
        tgt_len[0] = T
        tgt_in = torch.randint(3, inputs["tgt_vocab"], (B, T), generator=g)
        tgt_in[:, 0] = BOS
        tgt_in = tgt_in.masked_fill(torch.arange(T)[None, :] >= tgt_len[:, None], PAD)
        cases.append(Case(name, {**inputs, "src": src, "src_lengths": lengths, "tgt_in": tgt_in}))
    return cases


def _forward_call(candidate, case: Case) -> dict[str, Tensor]:
    i = case.inputs
    model = build_case_model(i, _FORWARD_BLOCKED)
    out = candidate(model, i["src"].clone(), i["src_lengths"].clone(), i["tgt_in"].clone())
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        out = out[0]  # (logits, attention) like model.forward: the logits count
    return {"logits": as_tensor(out, "seq2seq_forward(...)")}


def _decoder_loop(
    model,
    src,
    src_lengths,
    tgt_in,
    *,
    initial="c",
    context="c",
    order="emb_c",
    out_order="s_c",
    out_from="new",
    feed="teacher",
    stack_dim=1,
    probs=False,
    shift=0,
):
    """A configurable teacher-forced loop, used to write the classic mistakes."""
    enc_states, c = Seq2SeqRNN.encode(model, src, src_lengths)
    if initial == "padded_last":
        c = enc_states[:, -1]
    ctx = torch.zeros_like(c) if context == "zeros" else c
    state = torch.zeros_like(c) if initial == "zeros" else c
    B, T = tgt_in.shape
    if shift == 1:  # reads the token it should predict
        tokens = torch.cat([tgt_in[:, 1:], torch.full_like(tgt_in[:, :1], PAD)], dim=1)
    elif shift == -1:  # BOS prepended once more
        tokens = torch.cat([torch.full_like(tgt_in[:, :1], BOS), tgt_in[:, :-1]], dim=1)
    else:
        tokens = tgt_in
    logits, token = [], tokens[:, 0]
    for t in range(T):
        if feed == "teacher":
            token = tokens[:, t]
        emb = model.tgt_embed(token)
        x = torch.cat([emb, ctx] if order == "emb_c" else [ctx, emb], dim=-1)
        new = model.decoder_cell(x, state)
        s = new if out_from == "new" else state
        step = model.out(torch.cat([s, ctx] if out_order == "s_c" else [ctx, s], dim=-1))
        logits.append(step)
        state = new
        token = step.argmax(dim=-1)
    out = torch.stack(logits, dim=stack_dim)
    return out.softmax(dim=-1) if probs else out


def _loop(**kw):
    def impl(model, src, src_lengths, tgt_in):
        return _decoder_loop(model, src, src_lengths, tgt_in, **kw)

    return impl


FORWARD_MISTAKES = [
    Mistake(
        "predictions fed back instead of the true previous tokens (no teacher forcing)",
        "under teacher forcing the decoder reads the true previous token tgt_in[:, t] at "
        "step t, not its own argmax prediction",
        _loop(feed="greedy"),
    ),
    Mistake(
        "off by one: the decoder reads the token it should predict",
        "tgt_in is already shifted (BOS, y_1, ..., y_{T-1}); at step t feed tgt_in[:, t] to "
        "predict tgt_out[:, t] = y_t, not tgt_in[:, t + 1]",
        _loop(shift=1),
    ),
    Mistake(
        "off by one: tgt_in shifted a second time (BOS fed twice)",
        "tgt_in already starts with BOS: feed tgt_in[:, t] at step t, do not prepend another BOS",
        _loop(shift=-1),
    ),
    Mistake(
        "decoder started from a zero state instead of the context vector c",
        "the context vector c (the encoder's final state, from model.encode) is the "
        "decoder's initial state: s_0 = c",
        _loop(initial="zeros"),
    ),
    Mistake(
        "context c taken from enc_states[:, -1] (a padding position for short sentences)",
        "enc_states is zero after each sentence's last real token; use the second output of "
        "model.encode, the state after the last real token",
        _loop(initial="padded_last"),
    ),
    Mistake(
        "context c not fed to the decoder at every step",
        "this decoder reads [embedding of y_{t-1}; c] at every step and its output layer "
        "reads [s_t; c] (Cho et al. 2014): concatenate c, not zeros",
        _loop(context="zeros"),
    ),
    Mistake(
        "decoder input concatenated as [c; embedding] instead of [embedding; c]",
        "the decoder cell reads the word's embedding first, then c, joined along the feature "
        "dimension",
        _loop(order="c_emb"),
    ),
    Mistake(
        "output layer fed [c; s_t] instead of [s_t; c]",
        "the output layer reads the new state first, then c, joined along the feature dimension",
        _loop(out_order="c_s"),
    ),
    Mistake(
        "logits computed from the previous state s_{t-1} instead of the new state s_t",
        "first update the state, s_t = decoder_cell(...), then compute out([s_t; c])",
        _loop(out_from="old"),
    ),
    Mistake(
        "logits stacked time-first (T, B, V) instead of (B, T, V)",
        "the result is batch-first: the time steps go in dimension 1, between the batch and "
        "the vocabulary",
        _loop(stack_dim=0),
    ),
    Mistake(
        "returned softmax probabilities instead of logits",
        "return the raw logits; the cross-entropy loss applies the softmax itself",
        _loop(probs=True),
    ),
]

FORWARD = Exercise(
    id="01.1",
    title="Seq2seq forward pass with teacher forcing",
    points=3,
    notebook=NOTEBOOK,
    function="seq2seq_forward",
    reference=seq2seq_forward,
    make_cases=_forward_cases,
    call=_forward_call,
    mistakes=FORWARD_MISTAKES,
    compare=close(),
    hint=(
        "Compare your logits with the case's at the first step only, then at the second: what "
        "does the decoder cell read at step t (which word, and what else), which state does it "
        "start from, and which state does the output layer see? Print the shape of one step's "
        "logits, (B, V), and of the stacked result, (B, T, V)."
    ),
)


# ----------------------------------------------------------------------------- 01.2 greedy

_GREEDY_BLOCKED = {
    "forward": "exercise 01.2 asks you to decode step by step: use model.encode and "
    "model.decode_step, not model(...) (the teacher-forced forward needs the answer)",
    "greedy_decode": "exercise 01.2 asks you to write greedy decoding yourself: do not call "
    "model.greedy_decode; use model.encode and model.decode_step",
}


def greedy_decode(model: Seq2SeqRNN, src: Tensor, src_lengths: Tensor, max_len: int) -> Tensor:
    """Greedy decoding (the reference answer to 01.2), the model's own ``greedy_decode``.

    src (B, S), src_lengths (B,) -> tokens (B, T') with T' <= max_len, without BOS: each row
    up to and including its EOS, PAD after it.
    """
    with unguarded(model):
        return Seq2SeqRNN.greedy_decode(model, src, src_lengths, max_len)[0]


def _eos_steps(tokens: Tensor, max_len: int) -> list[int]:
    """Step at which each row produced EOS (max_len if never)."""
    out = []
    for row in tokens.tolist():
        out.append(row.index(EOS) if EOS in row else max_len)
    return out


@torch.no_grad()
def _eos_margins(inputs: dict) -> Tensor:
    """(B, max_len): how far the EOS logit stays below the best other token at each greedy step.

    Decoding with EOS never chosen follows the same path as real greedy decoding until EOS
    wins, and adding ``b`` to EOS's bias makes a row end at the first step whose margin is
    below ``b``. So the bias that spreads the sentence ends can be computed, not searched.
    """
    model = build_case_model(inputs)
    src, lengths, max_len = inputs["src"], inputs["src_lengths"], int(inputs["max_len"])
    enc_states, c = model.encode(src, lengths)
    mask = model.src_mask(src, lengths)
    token, state, margins = torch.full((src.shape[0],), BOS, dtype=torch.long), c, []
    for _ in range(max_len):
        logits, state, _ = model.decode_step(token, state, enc_states, mask, c)
        eos = logits[:, EOS].clone()
        logits[:, EOS] = float("-inf")
        best, token = logits.max(dim=-1)
        margins.append(best - eos)
    return torch.stack(margins, dim=1)


def _end_steps(margins: Tensor, bias: float) -> Tensor:
    """(B,) the step at which each row ends with this EOS bias (``max_len`` if never)."""
    below = margins < bias
    never = torch.full((margins.shape[0],), margins.shape[1])
    return torch.where(below.any(dim=1), below.float().argmax(dim=1), never)


def _greedy_draw(seed: int) -> list[Case]:
    """Cases whose sentences end at many different steps (and one that never ends).

    For a seeded model, a pool of random sources is decoded once; an EOS bias and then the B
    sources are chosen so that the rows end at as many different steps as possible. B equals
    the target vocabulary size, so an argmax over the wrong axis still yields valid (wrong)
    tokens instead of a crash, and the judge can name it.
    """
    g = generator(seed)
    cases = []
    for name, S, max_len, never in [
        ("sentences end at different steps", size(g, 4, 6), 9, False),
        ("one sentence never ends (stops at max_len)", size(g, 3, 5), 7, True),
        ("long source", 10, 8, False),
    ]:
        V = size(g, 6, 8)
        B = V
        inputs = model_case_inputs(
            g, attention=False, src_vocab=size(g, 8, 11), tgt_vocab=V, emb_dim=4, hidden_dim=6
        )
        inputs["w:out.weight"] *= 4.0  # livelier logits: sentences end at different steps
        inputs["w:decoder_cell.weight_hh"] *= 2.0
        pool_src, pool_len = _source(g, 48, S, inputs["src_vocab"])
        margins = _eos_margins(
            {**inputs, "src": pool_src, "src_lengths": pool_len, "max_len": max_len}
        )
        values = margins.flatten().sort().values
        best, best_score = 0.0, -1
        for b in ((values[1:] + values[:-1]) / 2).tolist():
            ends = _end_steps(margins, b)
            score = len({e for e in ends.tolist() if 0 < e < max_len})
            if score > best_score and (not never or bool((ends == max_len).any())):
                best, best_score = b, score
        ends = _end_steps(margins, best).tolist()
        # one row per distinct end step (latest first), then fill up round-robin
        groups: dict[int, list[int]] = {}
        for row, e in enumerate(ends):
            if e == 0 or (e == max_len and not never):
                continue
            groups.setdefault(e, []).append(row)
        order = sorted(groups, reverse=True)
        chosen: list[int] = []
        while len(chosen) < B and any(groups.values()):
            for e in order:
                if groups[e] and len(chosen) < B:
                    chosen.append(groups[e].pop(0))
        chosen += [r for r in range(len(ends)) if r not in chosen][: B - len(chosen)]
        idx = torch.tensor(chosen)
        src, lengths = pool_src[idx], pool_len[idx]
        keep = int(lengths.max())
        inputs["w:out.bias"][EOS] += best
        cases.append(
            Case(name, {**inputs, "src": src[:, :keep], "src_lengths": lengths, "max_len": max_len})
        )
    return cases


# The first case is the same at every seed: the first case of this seed's draw, on which every
# mistake's tokens differ from the reference's and from every other mistake's. On a seed's random
# model two mistakes can give the same tokens (feeding BOS at every step, or not carrying the
# state, ended the rows as stopping at the first EOS or as replacing EOS by PAD did), and the
# first failing case names the first mistake that matches: the seed sweep found 'the prediction
# is not fed back' and 'decoder state not carried' under other names at seeds 58, 64, 114, 132
# and 168 of 200.
GREEDY_FIXED_SEED = 1000


def _greedy_cases(seed: int) -> list[Case]:
    """The fixed case (the first of seed :data:`GREEDY_FIXED_SEED`'s draw), then seed's draw."""
    fixed = _greedy_draw(GREEDY_FIXED_SEED)[0]
    return [Case(f"fixed: {fixed.name}", fixed.inputs), *_greedy_draw(seed)]


def _greedy_call(candidate, case: Case) -> dict[str, Tensor]:
    i = case.inputs
    model = build_case_model(i, _GREEDY_BLOCKED)
    max_len = int(i["max_len"])
    with torch.no_grad():
        out = candidate(model, i["src"].clone(), i["src_lengths"].clone(), max_len)
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        out = out[0]  # (tokens, attention) like model.greedy_decode
    tokens = as_tensor(out, "greedy_decode(...)")
    if tokens.dim() != 2 or tokens.shape[0] != i["src"].shape[0]:
        raise ValueError(
            f"greedy_decode should return token ids of shape (B, T') with "
            f"B = {i['src'].shape[0]}, got {tuple(tokens.shape)}"
        )
    if tokens.is_floating_point():
        raise TypeError(
            f"greedy_decode should return integer token ids (argmax), got {tokens.dtype}"
        )
    tokens = tokens.long()
    if tokens.shape[1] < max_len:  # stopping early once every row has ended is allowed
        pad = torch.full(
            (tokens.shape[0], max_len - tokens.shape[1]),
            PAD,
            dtype=torch.long,
            device=tokens.device,
        )
        tokens = torch.cat([tokens, pad], dim=1)
    return {"tokens": tokens}


def _greedy_loop(
    model,
    src,
    src_lengths,
    max_len,
    *,
    mask_after_eos=True,
    stop="all",
    keep_eos=True,
    feed="prediction",
    argmax_dim=-1,
    bos_in_output=False,
    carry_state=True,
):
    """A configurable greedy decoder, used to write the classic mistakes."""
    enc_states, c = Seq2SeqRNN.encode(model, src, src_lengths)
    mask = model.src_mask(src, src_lengths)
    B = src.shape[0]
    state = c
    bos = torch.full((B,), BOS, dtype=torch.long)
    token, finished, out = bos, torch.zeros(B, dtype=torch.bool), []
    for _ in range(max_len):
        logits, new_state, _ = Seq2SeqRNN.decode_step(model, token, state, enc_states, mask, c)
        if carry_state:
            state = new_state
        pred = logits.argmax(dim=argmax_dim)
        emitted = pred
        if mask_after_eos:
            emitted = emitted.masked_fill(finished, PAD)
        is_eos = emitted == EOS
        if not keep_eos:
            emitted = emitted.masked_fill(is_eos, PAD)
        out.append(emitted)
        finished = finished | is_eos
        token = bos if feed == "bos" else pred
        if stop == "any" and bool(finished.any()):
            break
        if stop == "all" and bool(finished.all()):
            break
    tokens = torch.stack(out, dim=1)
    if bos_in_output:
        tokens = torch.cat([bos[:, None], tokens], dim=1)
    return tokens


def _greedy(**kw):
    def impl(model, src, src_lengths, max_len):
        return _greedy_loop(model, src, src_lengths, max_len, **kw)

    return impl


_NO_MASK = (
    "once a sentence has produced EOS it is finished: keep a bool `finished` (B,) and "
    "write PAD for its later steps, token.masked_fill(finished, PAD)"
)

GREEDY_MISTAKES = [
    Mistake(
        "tokens after EOS not replaced by PAD", _NO_MASK, _greedy(mask_after_eos=False, stop="all")
    ),
    Mistake(
        "tokens after EOS not replaced by PAD",
        _NO_MASK,
        _greedy(mask_after_eos=False, stop="never"),
    ),
    Mistake(
        "stopped when the first sentence ended instead of when every sentence had",
        "stop early only when *every* row has produced EOS (finished.all()), or run all "
        "max_len steps",
        _greedy(stop="any"),
    ),
    Mistake(
        "EOS itself replaced by PAD",
        "keep each sentence's EOS in the output (it tells where the sentence ends); only "
        "the steps after it become PAD",
        _greedy(keep_eos=False),
    ),
    Mistake(
        "the prediction is not fed back (BOS fed at every step)",
        "greedy decoding feeds its own argmax prediction as the next input token",
        _greedy(feed="bos"),
    ),
    Mistake(
        "argmax over the batch axis (dim=0) instead of the vocabulary",
        "logits from model.decode_step have shape (B, V): the next token is logits.argmax(dim=-1)",
        _greedy(argmax_dim=0),
    ),
    Mistake(
        "BOS included as the first output token",
        "return only the generated tokens: the output starts with the first predicted "
        "word, not with BOS",
        _greedy(bos_in_output=True),
    ),
    Mistake(
        "decoder state not carried to the next step",
        "use the new state that model.decode_step returns as the state of the next step",
        _greedy(carry_state=False),
    ),
]

GREEDY = Exercise(
    id="01.2",
    title="Greedy decoding",
    points=3,
    notebook=NOTEBOOK,
    function="greedy_decode",
    reference=greedy_decode,
    make_cases=_greedy_cases,
    call=_greedy_call,
    mistakes=GREEDY_MISTAKES,
    compare=close(),
    hint=(
        "Decode one short sentence by hand with max_len = 3 and print, at each step, the word fed"
        " in, the word chosen and the state passed on: does the next step read the chosen word? "
        "Then look at a batch where one row ends early: what does that row hold after its EOS, "
        "and when may the loop stop? Is BOS part of what you return?"
    ),
)


# ----------------------------------------------------------------------------- 01.3 train loop


def train_loop(
    model,
    forward,
    batches,
    optimizer,
    scheduler,
    *,
    steps: int,
    val_batch,
    eval_every: int,
    clip: float = 1.0,
) -> tuple[list[float], list[float]]:
    """Teacher-forced training of a seq2seq model (the reference answer to 01.3).

    Each of ``steps`` steps takes the next batch of ``batches`` (objects with ``src``,
    ``src_lengths``, ``tgt_in``, ``tgt_out``), computes ``forward(model, src, src_lengths,
    tgt_in) -> logits (B, T, V)``, the mean cross-entropy against ``tgt_out`` over non-PAD
    positions, zeroes the gradients, back-propagates, clips the global gradient norm to
    ``clip``, steps the optimizer and then the scheduler (when not None). After every
    ``eval_every``-th step (counted from 1) it estimates the same loss on ``val_batch`` in eval
    mode without gradients, then returns to training mode. Returns (one training loss per
    step, one validation loss per estimate) as Python floats.
    """
    train_losses, val_losses = [], []
    model.train()
    for step, batch in zip(range(1, steps + 1), batches):
        logits = forward(model, batch.src, batch.src_lengths, batch.tgt_in)  # (B, T, V)
        loss = F.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=PAD)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        train_losses.append(loss.item())
        if step % eval_every == 0:
            model.eval()
            with torch.no_grad():
                v = forward(model, val_batch.src, val_batch.src_lengths, val_batch.tgt_in)
                val = F.cross_entropy(
                    v.flatten(0, 1), val_batch.tgt_out.flatten(), ignore_index=PAD
                )
            val_losses.append(val.item())
            model.train()
    return train_losses, val_losses


class _Batch:
    """A mini-batch as the loop sees it: src, src_lengths, tgt_in, tgt_out."""

    def __init__(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor, tgt_out: Tensor):
        self.src, self.src_lengths, self.tgt_in, self.tgt_out = src, src_lengths, tgt_in, tgt_out


def _target_pair(g: torch.Generator, B: int, T: int, vocab: int) -> tuple[Tensor, Tensor]:
    """tgt_in = BOS + y, tgt_out = y + EOS, PAD after each row's end (one row full length)."""
    lengths = torch.randint(1, T, (B,), generator=g)
    lengths[0] = T - 1
    y = torch.randint(3, vocab, (B, T), generator=g)
    pos = torch.arange(T)[None, :]
    tgt_in = torch.cat([torch.full((B, 1), BOS), y[:, :-1]], dim=1)
    tgt_in = tgt_in.masked_fill(pos > lengths[:, None], PAD)
    tgt_out = y.masked_fill(pos == lengths[:, None], EOS).masked_fill(pos > lengths[:, None], PAD)
    return tgt_in, tgt_out


def _loop_cases(seed: int) -> list[Case]:
    g = generator(seed)
    cases = []
    for name, n_batches, eval_every, with_scheduler in [
        ("6 steps, validation every 2, a decaying learning rate", 6, 2, True),
        ("5 steps, validation every 5, no scheduler", 5, 5, False),
    ]:
        inputs = model_case_inputs(
            g,
            attention=False,
            src_vocab=size(g, 9, 12),
            tgt_vocab=size(g, 8, 11),
            emb_dim=4,
            hidden_dim=6,
        )
        batches = {}
        for k in range(n_batches + 1):  # one batch more than the steps: never to be used
            B, S, T = 3, size(g, 3, 5), size(g, 3, 6)
            src, lengths = _source(g, B, S, inputs["src_vocab"])
            tgt_in, tgt_out = _target_pair(g, B, T, inputs["tgt_vocab"])
            batches[f"b{k}"] = (src, lengths, tgt_in, tgt_out)
        src, lengths = _source(g, 5, 4, inputs["src_vocab"])  # validation: B = 5, never trained on
        val = (src, lengths, *_target_pair(g, 5, 5, inputs["tgt_vocab"]))
        cases.append(
            Case(
                name,
                {
                    **inputs,
                    "batches": batches,
                    "val": val,
                    "steps": n_batches,
                    "eval_every": eval_every,
                    "scheduler": with_scheduler,
                    "clip": 0.05,  # below the gradient norms of these models: clipping shows
                },
            )
        )
    return cases


def _loop_call(candidate, case: Case) -> dict[str, Tensor]:
    i = case.inputs
    model = build_case_model(i)
    model.train()
    val = _Batch(*i["val"])
    batches = [_Batch(*i["batches"][k]) for k in sorted(i["batches"], key=lambda k: int(k[1:]))]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    scheduler = (
        torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0 / (1 + s))
        if i["scheduler"]
        else None
    )
    train_modes, val_modes = [], []

    def forward(m, src, src_lengths, tgt_in):
        is_val = src.shape == val.src.shape and torch.equal(src.cpu(), val.src)
        (val_modes if is_val else train_modes).append([m.training, torch.is_grad_enabled()])
        return seq2seq_forward(m, src, src_lengths, tgt_in)

    out = candidate(
        model,
        forward,
        iter(batches),
        optimizer,
        scheduler,
        steps=int(i["steps"]),
        val_batch=val,
        eval_every=int(i["eval_every"]),
        clip=float(i["clip"]),
    )
    train_losses, val_losses = _losses_pair(out)
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    return {
        "train_losses": train_losses.double(),
        "val_losses": val_losses.double(),
        "weights after training": weights,
        "(training mode, gradients on) at each training forward": torch.tensor(
            train_modes, dtype=torch.bool
        ).reshape(-1, 2),
        "(training mode, gradients on) at each validation forward": torch.tensor(
            val_modes, dtype=torch.bool
        ).reshape(-1, 2),
    }


def _losses_pair(out) -> tuple[Tensor, Tensor]:
    """(train_losses, val_losses) as float64 vectors; a clear error for anything else."""
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise TypeError(
            "train_loop(...) should return a pair (train_losses, val_losses) of lists of "
            f"floats, got {type(out).__name__}"
        )
    pair = []
    for name, values in zip(("train_losses", "val_losses"), out, strict=True):
        try:
            pair.append(torch.tensor([float(v) for v in values], dtype=torch.float64))
        except (TypeError, ValueError, RuntimeError) as exc:
            raise TypeError(
                f"{name} should be a list of Python floats (loss.item()), got {values!r:.80}"
            ) from exc
    return pair[0], pair[1]


def _loss(logits, tgt_out, how="mean"):
    flat, target = logits.flatten(0, 1), tgt_out.flatten()
    if how == "unmasked":
        return F.cross_entropy(flat, target)
    if how == "sum":
        return F.cross_entropy(flat, target, ignore_index=PAD, reduction="sum")
    return F.cross_entropy(flat, target, ignore_index=PAD)


def _mistaken_loop(
    *,
    zero_grad="before_backward",
    loss="mean",
    target="tgt_out",
    do_clip=True,
    scheduler_step=True,
    val_eval=True,
    val_no_grad=True,
    back_to_train=True,
    eval_offset=0,
    val_on="val",
):
    """The reference loop with one thing changed, to write the classic mistakes."""

    def impl(
        model, forward, batches, optimizer, scheduler, *, steps, val_batch, eval_every, clip=1.0
    ):
        max_norm = clip
        train_losses, val_losses = [], []
        model.train()
        for step, batch in zip(range(1, steps + 1), batches):
            logits = forward(model, batch.src, batch.src_lengths, batch.tgt_in)
            tgt = batch.tgt_out if target == "tgt_out" else batch.tgt_in
            l = _loss(logits, tgt, loss)
            if zero_grad == "before_backward":
                optimizer.zero_grad()
            l.backward()
            if zero_grad == "after_backward":
                optimizer.zero_grad()
            if do_clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            optimizer.step()
            if scheduler is not None and scheduler_step:
                scheduler.step()
            train_losses.append(l.item())
            if (step - eval_offset) % eval_every == 0:
                if val_eval:
                    model.eval()
                vb = val_batch if val_on == "val" else batch
                with torch.no_grad() if val_no_grad else contextlib.nullcontext():
                    v = forward(model, vb.src, vb.src_lengths, vb.tgt_in)
                    val_losses.append(_loss(v, vb.tgt_out, loss).item())
                if back_to_train:
                    model.train()
        return train_losses, val_losses

    return impl


LOOP_MISTAKES = [
    Mistake(
        "gradients never zeroed (they accumulate over the steps)",
        "the backward pass adds to the gradients already stored: clear the optimizer's "
        "gradients once per step, before the backward pass",
        _mistaken_loop(zero_grad="never"),
    ),
    Mistake(
        "gradients zeroed between backward() and step() (the optimizer sees zeros)",
        "the order is zero_grad(), then backward(), then clipping, then step()",
        _mistaken_loop(zero_grad="after_backward"),
    ),
    Mistake(
        "padding counted in the loss",
        "PAD positions of tgt_out are not words: leave them out of the mean (cross-entropy's "
        "ignore_index=PAD, or a mask of tgt_out != PAD)",
        _mistaken_loop(loss="unmasked"),
    ),
    Mistake(
        "loss summed over the tokens instead of averaged",
        "the loss is the MEAN cross-entropy over the non-PAD target positions of the batch",
        _mistaken_loop(loss="sum"),
    ),
    Mistake(
        "loss computed against tgt_in (not shifted: the decoder is asked to copy its input)",
        "the logits at step t predict tgt_out[:, t], the word after tgt_in[:, t]: compare "
        "with tgt_out",
        _mistaken_loop(target="tgt_in"),
    ),
    Mistake(
        "gradients not clipped before the optimizer's step",
        "after backward() and before step(), rescale the gradients so that their global norm "
        "is at most clip (torch.nn.utils.clip_grad_norm_)",
        _mistaken_loop(do_clip=False),
    ),
    Mistake(
        "learning-rate scheduler never stepped",
        "when a scheduler is given, advance it once per step, after the optimizer's step",
        _mistaken_loop(scheduler_step=False),
    ),
    Mistake(
        "validation run in training mode (eval mode missing)",
        "switch the model to eval mode for the validation estimate: dropout must be off",
        _mistaken_loop(val_eval=False),
    ),
    Mistake(
        "validation run with gradients on (torch.no_grad() missing)",
        "compute the validation loss inside torch.no_grad(): no graph is needed, and building "
        "one costs memory and time",
        _mistaken_loop(val_no_grad=False),
    ),
    Mistake(
        "training continued in eval mode after the first validation (training mode missing)",
        "after the validation estimate, switch the model back to training mode before the "
        "next step",
        _mistaken_loop(back_to_train=False),
    ),
    Mistake(
        "validation loss estimated on the training batch",
        "estimate the loss on val_batch, sentences the model is never trained on",
        _mistaken_loop(val_on="train"),
    ),
    Mistake(
        "validation at the wrong steps (counted from 0: before the first update)",
        "estimate after steps eval_every, 2 * eval_every, ... counting steps from 1",
        _mistaken_loop(eval_offset=1),
    ),
]

LOOP = Exercise(
    id="01.3",
    title="The training loop",
    points=4,
    notebook=NOTEBOOK,
    function="train_loop",
    reference=train_loop,
    make_cases=_loop_cases,
    call=_loop_call,
    mistakes=LOOP_MISTAKES,
    compare=close(rtol=1e-6, atol=1e-8),
    hint=(
        "Print the first few training losses and model.training during validation: does the loss "
        "fall on one small batch repeated? Print one parameter's gradient norm at each step: does"
        " step 2 still carry step 1's gradient? Which positions of tgt_out should the loss count,"
        " and does validation run without gradients and with dropout off?"
    ),
    contract=Contract(updates_weights=True),  # a training step: the weights change
)

EXERCISES = [FORWARD, GREEDY, LOOP]
