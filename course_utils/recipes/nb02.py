"""Notebook 02 (additive attention): the same task and budget as notebook 01, plus helpers to
decode with a given decoder step and to draw alignments.

    r = recipe()                                        # notebook 01's recipe, unchanged
    tokens, weights = greedy_translate(model, src, src_lengths, max_len, step_fn=my_step)
    fig = plot_alignment(weights[0], src_words, out_words, gold=alignment)

The training and evaluation helpers are notebook 01's (:mod:`course_utils.recipes.nb01`),
re-exported here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import matplotlib.pyplot as plt
import torch
from matplotlib.axes import Axes
from torch import Tensor

from course_utils.data.tasks import (
    BOS,
    EOS,
    PAD,
    Example,
    Seq2SeqData,
    TaskData,
    alignment_score,
    encode_examples,
)
from course_utils.models.seq2seq_rnn import Seq2SeqRNN
from course_utils.plots import show_heatmap
from course_utils.recipes.nb01 import (
    LengthReport,
    Recipe,
    build_model,
    count_parameters,
    evaluate_by_length,
    make_data,
    recipe,
    teacher_forced_logits,
    train_seq2seq,
)

__all__ = [
    "Recipe",
    "recipe",
    "make_data",
    "build_model",
    "train_seq2seq",
    "evaluate_by_length",
    "LengthReport",
    "count_parameters",
    "teacher_forced_logits",
    "greedy_translate",
    "Translation",
    "translate_examples",
    "alignment_accuracy",
    "plot_alignment",
    "showcase_examples",
    "reordered",
    "one_to_many",
    "LECTURE_SENTENCE",
]

# the lecture's example (slide 15, Bahdanau et al.): "European Economic Area" is reordered
LECTURE_SENTENCE = "the european economic area saw my red car"

StepFn = Callable[[Seq2SeqRNN, Tensor, Tensor, Tensor, Tensor], tuple[Tensor, Tensor, Tensor]]


def _model_step(
    model: Seq2SeqRNN, prev_token: Tensor, state: Tensor, enc_states: Tensor, src_mask: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    logits, state, weights = model.decode_step(prev_token, state, enc_states, src_mask)
    return logits, state, weights


@torch.no_grad()
def greedy_translate(
    model: Seq2SeqRNN,
    src: Tensor,
    src_lengths: Tensor,
    max_len: int,
    *,
    step_fn: StepFn | None = None,
) -> tuple[Tensor, Tensor]:
    """Greedy decoding of an attention model with a given decoder step.

    ``step_fn(model, prev_token, state, enc_states, src_mask) -> (logits, state, weights)``
    (the notebook's ``attention_decoder_step``; default: ``model.decode_step``).
    src (B, S), src_lengths (B,) -> (tokens (B, T') without BOS, PAD after each EOS;
    weights (B, T', S), the attention of every output step).
    """
    if model.attention is None:
        raise ValueError("greedy_translate needs a Seq2SeqRNN built with attention=True")
    step = step_fn or _model_step
    enc_states, c = model.encode(src, src_lengths)
    mask = model.src_mask(src, src_lengths)
    B = src.shape[0]
    token = torch.full((B,), BOS, dtype=torch.long, device=src.device)
    state, finished = c, torch.zeros(B, dtype=torch.bool, device=src.device)
    tokens, weights = [], []
    for _ in range(max_len):
        logits, state, w = step(model, token, state, enc_states, mask)
        token = logits.argmax(dim=-1).masked_fill(finished, PAD)
        tokens.append(token)
        weights.append(w)
        finished |= token == EOS
        if bool(finished.all()):
            break
    return torch.stack(tokens, dim=1), torch.stack(weights, dim=1)


@dataclass
class Translation:
    """One decoded sentence with its attention map and gold alignment, ready to plot.

    ``weights`` (T_out, S): attention of each output word (EOS included) over the source
    words; ``gold[j]``: the source position output word ``j`` should come from (-1: none).
    """

    source: list[str]
    output: list[str]  # the model's words, then "<eos>"
    reference: list[str]
    weights: Tensor
    gold: list[int]

    @property
    def correct(self) -> bool:
        return self.output[:-1] == self.reference and self.output[-1:] == ["<eos>"]

    @property
    def label(self) -> str:
        return " ".join(self.source)


def translate_examples(
    model: Seq2SeqRNN, data: TaskData, examples: Sequence[Example], *, step_fn: StepFn | None = None
) -> list[Translation]:
    """Decode ``examples`` (from ``data.test_examples`` or ``data.task.example(...)``) and keep
    each one's attention map, trimmed to the real source words and output steps."""
    enc = encode_examples(list(examples), data.src_vocab, data.tgt_vocab)
    device = next(model.parameters()).device
    max_len = enc.tgt_out.shape[1] + 5
    tokens, weights = greedy_translate(
        model, enc.src.to(device), enc.src_lengths.to(device), max_len, step_fn=step_fn
    )
    out = []
    for i, ex in enumerate(examples):
        row = tokens[i].tolist()
        n_out = row.index(EOS) + 1 if EOS in row else len(row)
        words = data.tgt_vocab.decode(row[:n_out], stop_at_eos=True)
        if EOS in row:
            words = words + ["<eos>"]
        S = len(ex.src)
        out.append(
            Translation(
                list(ex.src),
                words,
                list(ex.tgt),
                weights[i, :n_out, :S].detach().cpu(),
                list(ex.alignment),
            )
        )
    return out


@torch.no_grad()
def alignment_accuracy(model: Seq2SeqRNN, split: Seq2SeqData) -> float:
    """How often an output word's strongest attention falls on its gold source word.

    Teacher-forced attention over ``split`` (each target word, EOS excluded), compared with
    the task's gold alignment by :func:`course_utils.data.tasks.alignment_score`.
    """
    device = next(model.parameters()).device
    split = split.to(device)
    _, weights = teacher_forced_logits(
        model, split.src, split.src_lengths, split.tgt_in, return_attention=True
    )
    if weights is None:
        raise ValueError("alignment_accuracy needs a model with attention")
    return alignment_score(weights, split.alignment)


def plot_alignment(
    t: Translation, title: str | None = None, ax: Axes | None = None, *, show_gold: bool = True
) -> Axes:
    """Heatmap of one translation's attention: output words (rows) by source words (columns).

    Red circles mark the gold alignment, so agreement (a dark cell inside a circle) is
    visible at a glance. Returns the axes.
    """
    if ax is None:
        S, T = len(t.source), len(t.output)
        _, ax = plt.subplots(figsize=(1.8 + 0.42 * S, 1.4 + 0.36 * T), constrained_layout=True)
    verdict = "correct" if t.correct else "wrong"
    show_heatmap(
        t.weights,
        x_labels=t.source,
        y_labels=t.output,
        ax=ax,
        cmap="Greys",
        vmin=0.0,
        vmax=1.0,
        title=title or f"attention while translating ({verdict}); circles: gold",
        xlabel="source words (encoder states $h_j$)",
        ylabel="output words (decoder steps $t$)",
    )
    if show_gold:
        pts = [(s, j) for j, s in enumerate(t.gold[: len(t.output)]) if s >= 0]
        if pts:
            ax.scatter(
                [p[0] for p in pts],
                [p[1] for p in pts],
                s=110,
                facecolors="none",
                edgecolors="tab:red",
                linewidths=1.2,
            )
    return ax


def reordered(ex: Example) -> bool:
    """The gold alignment goes backwards somewhere (adjectives moved after their noun)."""
    return any(b < a for a, b in zip(ex.alignment, ex.alignment[1:]))


def one_to_many(ex: Example) -> bool:
    """Some source word produces two output words (a past tense verb: ``saw`` -> ``a vu``)."""
    return len(set(ex.alignment)) < len(ex.alignment)


def _inversions(ex: Example) -> int:
    return sum(b < a for a, b in zip(ex.alignment, ex.alignment[1:]))


def showcase_examples(data: TaskData, n: int = 12) -> list[Example]:
    """Test sentences that show what attention does: the lecture's sentence first, then the
    test sentences with the most reorderings and a one-to-many verb, longest first."""
    out: list[Example] = []
    try:
        out.append(data.task.example(LECTURE_SENTENCE))
    except (ValueError, AttributeError):  # a task without these words
        pass
    pool = [e for e in data.test_examples if reordered(e) and one_to_many(e)]
    pool.sort(key=lambda e: (-_inversions(e), -len(e.src), e.src))
    out += pool[: max(0, n - len(out))]
    return out
