"""Checks 10.1 (decoder layer), 10.2 (the assembled encoder-decoder), 10.3 (greedy decoding)
and 10.4 (the loss with the target shift) accept correct answers written differently and name
each classic mistake. The wrong answers here are written independently
of the check module's own catalogue."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from checks_testing import (
    assert_passes,
    assert_registered_mistakes_named,
    assert_rejected,
)
from torch import nn

from course_utils.lessons.nb10_full_transformer.exercises import Seq2SeqTransformer
from course_utils.modeling import layers
from course_utils.modeling.attention import causal_mask

SEEDS = (0, 1)  # each case builds modules: two draws keep this file fast


# ----------------------------------------------------------------------------- 10.1


class Given(nn.Module):
    """The __init__ the notebook gives the student for 10.1."""

    def __init__(self, d_model, n_heads, d_ff, norm_first=True):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = layers.MultiHeadAttention(d_model, n_heads)
        self.cross_attn = layers.MultiHeadAttention(d_model, n_heads)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.mlp = layers.MLP(d_model, d_ff)


class LayerExplicitMasks(Given):
    """Causal and padding masks built by hand, manual attention path, F.layer_norm."""

    def forward(self, x, memory, memory_key_padding_mask=None):
        T = x.shape[1]
        cross_mask = (
            None if memory_key_padding_mask is None else memory_key_padding_mask[:, None, None, :]
        )

        def ln(norm, t):
            return F.layer_norm(t, t.shape[-1:], norm.weight, norm.bias, norm.eps)

        self.self_attn.fast = self.cross_attn.fast = False  # the manual attention path
        subs = [
            (self.norm1, lambda h: self.self_attn(h, attn_mask=causal_mask(T))),
            (self.norm2, lambda h: self.cross_attn(h, memory, attn_mask=cross_mask)),
            (self.norm3, lambda h: self.mlp.fc2(torch.relu(self.mlp.fc1(h)))),
        ]
        for norm, sub in subs:
            x = x + sub(ln(norm, x)) if self.norm_first else ln(norm, x + sub(x))
        return x


class LayerSpelledOut(Given):
    def forward(self, x, memory, memory_key_padding_mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), is_causal=True)
            x = x + self.cross_attn(self.norm2(x), memory, key_padding_mask=memory_key_padding_mask)
            return x + self.mlp(self.norm3(x))
        x = self.norm1(x + self.self_attn(x, is_causal=True))
        x = self.norm2(x + self.cross_attn(x, memory, key_padding_mask=memory_key_padding_mask))
        return self.norm3(x + self.mlp(x))


@pytest.mark.parametrize(
    "candidate", [LayerExplicitMasks, LayerSpelledOut, layers.TransformerDecoderBlock]
)
def test_decoder_layer_check_accepts_correct_answers(candidate):
    assert_passes("10.1", candidate, SEEDS)


def layer_with(self_attn=None, cross_attn=None, residual=(True, True, True)):
    """LayerSpelledOut with one sublayer replaced (pre-norm and post-norm alike)."""

    class Wrong(Given):
        def forward(self, x, memory, memory_key_padding_mask=None):
            mask = memory_key_padding_mask
            subs = [
                (self.norm1, self_attn or (lambda m, h: m.self_attn(h, is_causal=True))),
                (
                    self.norm2,
                    cross_attn or (lambda m, h: m.cross_attn(h, memory, key_padding_mask=mask)),
                ),
                (self.norm3, lambda m, h: m.mlp(h)),
            ]
            for (norm, sub), res in zip(subs, residual, strict=True):
                if self.norm_first:
                    x = (x if res else 0) + sub(self, norm(x))
                else:
                    x = norm((x if res else 0) + sub(self, x))
            return x

    return Wrong


def _torch_convention(m, h):
    T = h.shape[1]
    return m.self_attn(h, attn_mask=torch.triu(torch.ones(T, T), diagonal=1).bool())


LAYER_MISTAKES = {
    "no causal mask in the masked self-attention": layer_with(
        self_attn=lambda m, h: m.self_attn(h)
    ),
    # student B: nn.MultiheadAttention's convention (True = blocked) in the course's MHA
    "causal mask in nn.MultiheadAttention's convention (True = blocked)": layer_with(
        self_attn=_torch_convention
    ),
    "cross attention takes its keys and values from x instead of memory": layer_with(
        cross_attn=lambda m, h: m.cross_attn(h, h)
    ),
    "missing residual around the self-attention": layer_with(residual=(False, True, True)),
    "missing residual around the cross attention": layer_with(residual=(True, False, True)),
    "missing residual around the MLP": layer_with(residual=(True, True, False)),
}


class MaskIgnored(Given):
    def forward(self, x, memory, memory_key_padding_mask=None):
        x = (
            x + self.self_attn(self.norm1(x), is_causal=True)
            if self.norm_first
            else self.norm1(x + self.self_attn(x, is_causal=True))
        )
        if self.norm_first:
            x = x + self.cross_attn(self.norm2(x), memory)
            return x + self.mlp(self.norm3(x))
        x = self.norm2(x + self.cross_attn(x, memory))
        return self.norm3(x + self.mlp(x))


class MaskInvertedTorchStyle(Given):
    """Converts to PyTorch's convention (True = padding) and hands it to the course's MHA."""

    def forward(self, x, memory, memory_key_padding_mask=None):
        pad = None if memory_key_padding_mask is None else memory_key_padding_mask.logical_not()
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), is_causal=True)
            x = x + self.cross_attn(self.norm2(x), memory, key_padding_mask=pad)
            return x + self.mlp(self.norm3(x))
        x = self.norm1(x + self.self_attn(x, is_causal=True))
        x = self.norm2(x + self.cross_attn(x, memory, key_padding_mask=pad))
        return self.norm3(x + self.mlp(x))


class MemoryNormalised(Given):
    """Student B: the memory passed through norm2 together with the queries."""

    def forward(self, x, memory, memory_key_padding_mask=None):
        kpm = memory_key_padding_mask
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), is_causal=True)
            x = x + self.cross_attn(self.norm2(x), self.norm2(memory), key_padding_mask=kpm)
            return x + self.mlp(self.norm3(x))
        x = self.norm1(x + self.self_attn(x, is_causal=True))
        x = self.norm2(x + self.cross_attn(x, self.norm2(memory), key_padding_mask=kpm))
        return self.norm3(x + self.mlp(x))


def test_decoder_layer_check_names_a_normalised_memory():
    assert_rejected("10.1", MemoryNormalised, "the memory normalised too", SEEDS)


class AlwaysPostNorm(LayerSpelledOut):
    def forward(self, x, memory, memory_key_padding_mask=None):
        x = self.norm1(x + self.self_attn(x, is_causal=True))
        x = self.norm2(x + self.cross_attn(x, memory, key_padding_mask=memory_key_padding_mask))
        return self.norm3(x + self.mlp(x))


@pytest.mark.parametrize("name", list(LAYER_MISTAKES))
def test_decoder_layer_check_names_each_mistake(name):
    assert_rejected("10.1", LAYER_MISTAKES[name], name, SEEDS)


def test_decoder_layer_check_names_an_ignored_memory_mask():
    assert_rejected("10.1", MaskIgnored, "memory padding mask ignored", SEEDS)


def test_decoder_layer_check_names_a_torch_style_inverted_mask():
    assert_rejected("10.1", MaskInvertedTorchStyle, "memory padding mask inverted", SEEDS)


def test_decoder_layer_check_names_norms_in_the_wrong_place():
    assert_rejected(
        "10.1",
        AlwaysPostNorm,
        "LayerNorm in the wrong place (pre-norm and post-norm swapped)",
        SEEDS,
    )


def test_decoder_layer_registered_mistakes_are_named():
    assert_registered_mistakes_named("10.1", seeds=(0,))


# ----------------------------------------------------------------------------- 10.2


def greedy_all_steps(model, src, src_lengths, max_len):
    """Runs all max_len steps, recomputing the encoder every step, PAD after EOS."""
    mask = torch.arange(src.shape[1])[None, :] < src_lengths[:, None]
    B = src.shape[0]
    ys = torch.full((B, 1), model.bos_id)
    done = torch.zeros(B, dtype=torch.bool)
    for _ in range(max_len):
        logits = model.decode(ys, model.encode(src, mask), mask)  # (B, t, V)
        nxt = torch.where(done, torch.full((B,), model.pad_id), logits[:, -1, :].argmax(-1))
        done = done | (nxt == model.eos_id)
        ys = torch.cat([ys, nxt.unsqueeze(1)], dim=1)
    return ys[:, 1:]


def greedy_topk_list(model, src, src_lengths, max_len):
    """Builds a Python list of steps and uses topk; stops once every row has ended."""
    mask = model.src_mask(src, src_lengths)
    memory = model.encode(src, mask)
    steps = [torch.full((src.shape[0],), model.bos_id)]
    ended = torch.zeros(src.shape[0], dtype=torch.bool)
    while len(steps) <= max_len and not ended.all():
        logits = model.decode(torch.stack(steps, dim=1), memory, mask)[:, -1]
        tok = logits.topk(1, dim=-1).indices[:, 0]
        tok[ended] = model.pad_id
        ended |= tok == model.eos_id
        steps.append(tok)
    return torch.stack(steps[1:], dim=1)


@pytest.mark.parametrize("candidate", [greedy_all_steps, greedy_topk_list])
def test_greedy_check_accepts_correct_answers(candidate):
    assert_passes("10.3", candidate, SEEDS)


def greedy_by_forward(model, src, src_lengths, max_len):
    """Calls the model's forward on the whole prefix at every step (re-encoding the source each
    time): correct under notebook 10's contract, forward returns the logits alone."""
    ys = torch.full((src.shape[0], 1), model.bos_id)
    done = torch.zeros(src.shape[0], dtype=torch.bool)
    for _ in range(max_len):
        nxt = model(src, src_lengths, ys)[:, -1].argmax(-1)
        nxt[done] = model.pad_id
        done = done | (nxt == model.eos_id)
        ys = torch.cat([ys, nxt[:, None]], 1)
        if bool(done.all()):
            break
    return ys[:, 1:]


def test_greedy_check_accepts_a_decoder_calling_forward_every_step():
    # student B's false rejection: the check's model returned (logits, None) from forward
    assert_passes("10.3", greedy_by_forward, SEEDS)


def test_greedy_check_rejects_a_pair_with_the_contract_in_the_message():
    from course_utils import checks

    result = checks.run("10.3", lambda m, s, n, L: (greedy_by_forward(m, s, n, L), None))
    assert result.status == "error" and "token ids (B, T')" in result.message


def wrong_greedy(*, first=None, feed=True, pad=True, dim=-1):
    def decode(model, src, src_lengths, max_len):
        mask = model.src_mask(src, src_lengths)
        memory = model.encode(src, mask)
        B = src.shape[0]
        ys = torch.full((B, 1), model.bos_id if first is None else first)
        done = torch.zeros(B, dtype=torch.bool)
        for _ in range(max_len):
            logits = model.decode(ys if feed else ys[:, :1], memory, mask)[:, -1]
            tok = logits.argmax(dim=dim)
            if pad:
                tok = tok.masked_fill(done, model.pad_id)
            done |= tok == model.eos_id
            ys = torch.cat([ys, tok[:, None]], dim=1)
            if done.all():
                break
        return ys[:, 1:]

    return decode


GREEDY_MISTAKES = {
    "predicted token not fed back": wrong_greedy(feed=False),
    "tokens after EOS not replaced by PAD": wrong_greedy(pad=False),
    "argmax over the wrong dimension": wrong_greedy(dim=0),
    "decoding does not start from BOS": wrong_greedy(first=0),
}


@pytest.mark.parametrize("name", list(GREEDY_MISTAKES))
def test_greedy_check_names_each_mistake(name):
    assert_rejected("10.3", GREEDY_MISTAKES[name], name, SEEDS)


def test_greedy_check_rejects_output_longer_than_max_len():
    from course_utils import checks

    result = checks.run("10.3", lambda m, s, n, L: torch.zeros(s.shape[0], L + 3, dtype=torch.long))
    assert result.status == "error" and "more than max_len" in result.message


def test_greedy_cases_have_rows_ending_at_different_steps():
    from course_utils import checks
    from course_utils.lessons.nb10_full_transformer.exercises import _build_model

    ex = checks.get("10.3")
    for seed in SEEDS:
        case = ex.make_cases(seed)[0]
        model = _build_model(case.inputs)
        tokens = model.greedy_decode(
            case.inputs["src"], case.inputs["src_lengths"], case.inputs["max_len_decode"]
        )[0]
        ends = {row.index(2) if 2 in row else -1 for row in tokens.tolist()}
        assert len(ends) >= 2, f"seed {seed}: every row ends at the same step: {tokens}"


def test_greedy_registered_mistakes_are_named():
    assert_registered_mistakes_named("10.3", seeds=(0,))


# ----------------------------------------------------------------------------- 10.2


class ModelWritten(Seq2SeqTransformer):
    """The notebook's given ``__init__`` (the reference's) with every method written again:
    mask from the tokens (PAD is 0 beyond each length), positions through index_select."""

    def src_mask(self, src, src_lengths):
        return src != self.pad_id

    def _in(self, tokens, emb):
        pos = self.pe.index_select(0, torch.arange(tokens.shape[1]))
        return emb(tokens) * self.d_model**0.5 + pos.unsqueeze(0)

    def encode(self, src, src_mask):
        h = self._in(src, self.src_embed)
        for blk in self.encoder:
            h = blk(h, key_padding_mask=src_mask)
        return self.encoder_norm(h)

    def decode(self, tgt_in, memory, src_mask):
        h = self._in(tgt_in, self.tgt_embed)
        for lay in self.decoder:
            h = lay(h, memory, memory_key_padding_mask=src_mask)
        return self.generator(self.decoder_norm(h))

    def forward(self, src, src_lengths, tgt_in):
        m = self.src_mask(src, src_lengths)
        return self.decode(tgt_in, self.encode(src, m), m)


def model_with(**wrong):
    """ModelWritten with one classic assembly bug."""

    class Wrong(ModelWritten):
        def src_mask(self, src, src_lengths):
            m = torch.arange(src.shape[1])[None, :] < src_lengths[:, None]
            return m.logical_not() if wrong.get("inverted") else m

        def _in(self, tokens, emb):
            x = emb(tokens) * (1.0 if wrong.get("unscaled") else self.d_model**0.5)
            return x if wrong.get("no_positions") else x + self.pe[: tokens.shape[1]]

        def encode(self, src, src_mask):
            h = self._in(src, self.src_embed)
            for blk in self.encoder:
                h = blk(h, key_padding_mask=None if wrong.get("encoder_unmasked") else src_mask)
            return self.encoder_norm(h)

        def decode(self, tgt_in, memory, src_mask):
            h = self._in(tgt_in, self.tgt_embed)
            for lay in self.decoder:
                if wrong.get("self_memory"):
                    h = lay(h, h)
                elif wrong.get("cross_unmasked"):
                    h = lay(h, memory)
                else:
                    h = lay(h, memory, memory_key_padding_mask=src_mask)
            return self.generator(h if wrong.get("no_final_norm") else self.decoder_norm(h))

    return Wrong


def test_model_check_accepts_a_correct_model_written_differently():
    assert_passes("10.2", ModelWritten, SEEDS)


def test_model_reference_equals_the_course_model_with_the_same_weights():
    from course_utils.modeling.models import EncoderDecoderTransformer

    torch.manual_seed(0)
    course = EncoderDecoderTransformer(9, 11, d_model=16, n_heads=2, n_layers=2, d_ff=32).eval()
    ours = Seq2SeqTransformer(9, 11, 16, 2, 2, 32).eval()
    ours.load_state_dict(course.state_dict())
    src, lengths = torch.randint(3, 9, (3, 6)), torch.tensor([6, 3, 1])
    tgt_in = torch.randint(3, 11, (3, 5))
    with torch.no_grad():
        assert torch.allclose(
            ours(src, lengths, tgt_in), course(src, lengths, tgt_in)[0], atol=1e-6
        )


class ScaledSourceOnly(ModelWritten):
    def decode(self, tgt_in, memory, src_mask):
        h = self.tgt_embed(tgt_in) + self.pe[: tgt_in.shape[1]]  # no sqrt(D) on this side
        for lay in self.decoder:
            h = lay(h, memory, memory_key_padding_mask=src_mask)
        return self.generator(self.decoder_norm(h))


class MaskLessOrEqual(ModelWritten):
    def src_mask(self, src, src_lengths):
        return torch.arange(src.shape[1])[None, :] <= src_lengths[:, None]


MODEL_MISTAKES = {
    "embeddings scaled by sqrt(d_model) on one side only": ScaledSourceOnly,
    "src_mask off by one (position j real when j <= length)": MaskLessOrEqual,
    "positions missing": model_with(no_positions=True),
    "embeddings not scaled by sqrt(d_model)": model_with(unscaled=True),
    "source padding mask missing in the encoder": model_with(encoder_unmasked=True),
    "source padding mask missing in the cross-attention": model_with(cross_unmasked=True),
    "padding mask inverted": model_with(inverted=True),
    "cross-attention attends to the decoder's own states": model_with(self_memory=True),
    "final LayerNorm missing": model_with(no_final_norm=True),
}


@pytest.mark.parametrize("name", list(MODEL_MISTAKES))
def test_model_check_names_each_mistake(name):
    assert_rejected("10.2", MODEL_MISTAKES[name], name, SEEDS)


def test_model_check_rejects_forward_returning_a_pair_and_states_the_contract():
    # student B: (logits, None), copied from EncoderDecoderTransformer, passed 10.2 and broke
    # the notebook's comparison and training cells
    from course_utils import checks

    class Pair(ModelWritten):
        def forward(self, src, src_lengths, tgt_in):
            return super().forward(src, src_lengths, tgt_in), None

    for seed in SEEDS:
        result = checks.run("10.2", Pair, seed=seed)
        assert result.status == "error" and result.points == 0
        assert "returns ONE tensor, the logits (B, T, V)" in result.message


def test_every_model_handed_to_a_candidate_returns_logits_alone():
    """10.3's and 10.4's checks build the model they pass in; both hold 10.2's contract."""
    from course_utils import checks

    seen = []

    def spy_decode(model, src, src_lengths, max_len):
        seen.append(model(src, src_lengths, torch.full((src.shape[0], 1), model.bos_id)))
        return greedy_by_forward(model, src, src_lengths, max_len)

    def spy_loss(model, src, src_lengths, tgt):
        seen.append(model(src, src_lengths, tgt))
        return loss_written(model, src, src_lengths, tgt)

    assert checks.run("10.3", spy_decode).passed and checks.run("10.4", spy_loss).passed
    assert seen and all(isinstance(out, torch.Tensor) and out.ndim == 3 for out in seen)


def test_model_check_names_a_renamed_submodule():
    from course_utils import checks

    class Renamed(ModelWritten):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.out = self.generator
            del self.generator

    result = checks.run("10.2", Renamed)
    assert result.status == "error" and "generator" in result.message


def test_model_registered_mistakes_are_named():
    assert_registered_mistakes_named("10.2", seeds=(0,))


# ----------------------------------------------------------------------------- 10.4


def loss_written(model, src, src_lengths, tgt):
    """Builds the input with F.pad and a roll; averages by hand over the real targets."""
    tgt_in = F.pad(tgt, (1, 0), value=model.bos_id)[:, :-1]
    logp = model(src, src_lengths, tgt_in).log_softmax(-1)
    nll = -logp.gather(-1, tgt.unsqueeze(-1)).squeeze(-1)
    real = tgt != model.pad_id
    return nll[real].mean()


def loss_longer_input(model, src, src_lengths, tgt):
    """BOS + the whole target as input (T + 1 positions), a PAD target for the extra one."""
    bos = torch.full_like(tgt[:, :1], model.bos_id)
    logits = model(src, src_lengths, torch.cat([bos, tgt], dim=1))
    target = torch.cat([tgt, torch.zeros_like(bos)], dim=1)
    return F.cross_entropy(logits.transpose(1, 2), target, ignore_index=0)


@pytest.mark.parametrize("candidate", [loss_written, loss_longer_input])
def test_loss_check_accepts_correct_answers(candidate):
    assert_passes("10.4", candidate, SEEDS)


def wrong_loss(*, shift="right", pad=True, reduction="mean"):
    def loss(model, src, src_lengths, tgt):
        B = tgt.shape[0]
        bos = torch.ones(B, 1, dtype=torch.long)
        tgt_in = {
            "right": torch.cat([bos, tgt[:, :-1]], 1),
            "none": tgt,
            "left": torch.cat([tgt[:, 1:], 0 * bos], 1),
        }[shift]
        logits = model(src, src_lengths, tgt_in)
        return F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]),
            tgt.reshape(-1),
            ignore_index=0 if pad else -100,
            reduction=reduction,
        )

    return loss


def loss_one_short(model, src, src_lengths, tgt):
    """Student B: T - 1 decoder inputs, so the last target column is never scored."""
    tgt_in = torch.cat([torch.ones_like(tgt[:, :1]), tgt[:, :-2]], 1)
    logits = model(src, src_lengths, tgt_in)
    return F.cross_entropy(logits.transpose(1, 2), tgt[:, :-1], ignore_index=0)


LOSS_MISTAKES = {
    "decoder input one column short": loss_one_short,
    "no target shift": wrong_loss(shift="none"),
    "target shifted the wrong way": wrong_loss(shift="left"),
    "padding counted in the loss": wrong_loss(pad=False),
    "loss summed instead of averaged": wrong_loss(reduction="sum"),
}


@pytest.mark.parametrize("name", list(LOSS_MISTAKES))
def test_loss_check_names_each_mistake(name):
    assert_rejected("10.4", LOSS_MISTAKES[name], name, SEEDS)


def test_loss_check_rejects_a_per_token_loss_with_a_clear_error():
    from course_utils import checks

    def per_token(model, src, src_lengths, tgt):
        tgt_in = torch.cat([torch.ones_like(tgt[:, :1]), tgt[:, :-1]], 1)
        logits = model(src, src_lengths, tgt_in)
        return F.cross_entropy(logits.transpose(1, 2), tgt, reduction="none")

    result = checks.run("10.4", per_token)
    assert result.status == "failed" and "has shape" in result.message


def test_loss_registered_mistakes_are_named():
    assert_registered_mistakes_named("10.4", seeds=(0,))


# ----------------------------------------------------------------------------- messages


def _solution_needles() -> list[str]:
    """Every searched form of every solution line of notebook 10 (as the no-answer rule)."""
    import json
    from pathlib import Path

    from course_utils.authoring.leaks import _solution_lines, _squash, needles

    path = Path(__file__).resolve().parents[1] / "solutions" / "10_full_transformer.ipynb"
    cells = json.loads(path.read_text())["cells"]
    out = []
    for cell in cells:
        if cell["cell_type"] == "code":
            for line in _solution_lines(cell)[0]:
                out += [_squash(n) for n in needles(line)]
    return out


def _generic_wrong(exercise_id):
    """A wrong answer no mistake describes: the right answer's output plus noise."""
    from course_utils import checks

    ref = checks.get(exercise_id).reference
    if exercise_id == "10.1":

        class Noisy(layers.TransformerDecoderBlock):
            def forward(self, x, memory, memory_key_padding_mask=None):
                return 1.5 * super().forward(
                    x, memory, memory_key_padding_mask=memory_key_padding_mask
                )

        return Noisy
    if exercise_id == "10.2":

        class Doubled(ModelWritten):
            def forward(self, src, src_lengths, tgt_in):
                return 2 * super().forward(src, src_lengths, tgt_in)

        return Doubled
    if exercise_id == "10.3":
        return lambda m, s, n, L: ref(m, s, n, L).flip(1)
    return lambda m, s, n, t: ref(m, s, n, t) + 0.5


@pytest.mark.parametrize("exercise_id", ["10.1", "10.2", "10.3", "10.4"])
def test_no_failure_message_prints_a_solution_line(exercise_id):
    from course_utils import checks
    from course_utils.authoring.leaks import _squash

    needles = _solution_needles()
    assert len(needles) > 20  # the notebook's solutions were found
    exercise = checks.get(exercise_id)
    candidates = [m.impl for m in exercise.mistakes] + [_generic_wrong(exercise_id)]
    for candidate in candidates:
        result = checks.run(exercise_id, candidate, seed=0)
        assert result.status == "failed", result.message
        text = _squash(result.message)
        leaked = [n for n in needles if n in text]
        assert not leaked, f"{exercise_id}: {result.message!r} prints {leaked}"


# ----------------------------------------------------------------------------- every seed
# What tests/test_same_verdict_every_seed.py sweeps over many seeds, by exercise: the correct
# answers written differently, and the wrong ones by the name of the mistake they make.
SWEEP_CORRECT = {
    "10.1": [LayerExplicitMasks, LayerSpelledOut],
    "10.2": [ModelWritten],
    "10.3": [greedy_all_steps, greedy_topk_list, greedy_by_forward],
    "10.4": [loss_written, loss_longer_input],
}
SWEEP_WRONG = {
    "10.1": {**LAYER_MISTAKES, "memory padding mask ignored": MaskIgnored},
    "10.2": MODEL_MISTAKES,
    "10.3": GREEDY_MISTAKES,
    "10.4": LOSS_MISTAKES,
}


def test_10_4_each_mistake_is_named_on_the_fixed_case_alone():
    """The fixed case comes first at every seed and separates every mistake (the loss is one
    number, so a random draw can make two mistakes agree): the verdict on each is decided there."""
    from course_utils import checks
    from course_utils.checks import core
    from course_utils.lessons.nb10_full_transformer import exercises as nb10

    ex = checks.get("10.4")
    fixed = ex.make_cases(0)[:1]
    assert fixed[0].name.startswith("fixed: ")
    assert all(
        torch.equal(
            ex.make_cases(s)[0].inputs["tgt"],
            nb10._loss_draw(nb10.LOSS_FIXED_SEED)[0].inputs["tgt"],
        )
        for s in (1, 62)
    )
    for mistake in ex.mistakes:
        _, outputs, _ = core.collect_outputs(ex, mistake.impl, fixed)
        result = core.judge(ex, fixed, outputs)
        assert result.status == "failed" and result.mistake == mistake.name, mistake.name


def test_10_4_loss_averaged_per_sentence_is_named_at_seed_62():
    """At seed 62 its loss matched "target shifted the wrong way" within the tolerance."""
    from course_utils import checks

    name = "loss averaged per sentence first"
    impl = next(m.impl for m in checks.get("10.4").mistakes if m.name == name)
    assert_rejected("10.4", impl, name, seeds=(62,))
