"""Notebook 02 (additive attention): the task, model size and budget of notebook 01, trained
on shorter sentences than it is tested on, plus helpers to decode with a given decoder step,
to draw alignments and to take the alignment misses apart.

    r = recipe()                                        # notebook 01's recipe, unchanged
    data = make_data(r)                                 # train up to train_max_len(r) words
    model = build_model(data, r, attention=True, score="dot", bidirectional=True)
    tokens, weights = greedy_translate(model, src, src_lengths, max_len, step_fn=my_step)
    fig = plot_alignment(weights[0], src_words, out_words, gold=alignment)
    misses = miss_breakdown(model, data)                # where the strongest weight goes instead

The training and evaluation helpers are notebook 01's (:mod:`course_utils.lessons.nb01_rnn_bottleneck.recipe`),
re-exported here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import matplotlib.pyplot as plt
import torch
from matplotlib.axes import Axes
from torch import Tensor, nn

from course_utils.data.tasks import (
    BOS,
    CONJUNCTIONS,
    DETERMINERS,
    EOS,
    NOUNS,
    PAD,
    Example,
    Seq2SeqData,
    TaskData,
    alignment_score,
    encode_examples,
    exact_match,
    make_translation_data,
)
from course_utils.lessons.nb01_rnn_bottleneck import recipe as nb01
from course_utils.lessons.nb01_rnn_bottleneck.recipe import (
    LengthReport,
    Recipe,
    count_parameters,
    evaluate_by_length,
    recipe,
    teacher_forced_logits,
    train_seq2seq,
)
from course_utils.modeling.attention import AdditiveAttention, masked_softmax
from course_utils.modeling.models.seq2seq_rnn import Seq2SeqRNN
from course_utils.modeling.module_state import model_device
from course_utils.plots import show_heatmap
from course_utils.runtime.profiles import PROFILES, ProfileTable

__all__ = [
    "Recipe",
    "recipe",
    "train_max_len",
    "attention_parameters",
    "bucket_label",
    "seen_and_unseen",
    "early_stops",
    "make_data",
    "build_model",
    "DotProductAttention",
    "BidirectionalSeq2SeqRNN",
    "miss_breakdown",
    "count_misses",
    "MissBreakdown",
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


# --------------------------------------------------------------------------------------------
# Data and models: train short, test long; additive or dot-product scores; a bidirectional encoder
# --------------------------------------------------------------------------------------------
# the longest training sentence per profile (the recipes' max_len: 11, 20, 30 words)
TRAIN_MAX_LEN = ProfileTable(ci=8, cpu=14, gpu=20)


def train_max_len(r: Recipe) -> int:
    """The longest training sentence of notebook 02: test sentences go up to ``r.max_len``,
    so the longest test buckets hold lengths no model has seen in training (ci: 8 of 11 words,
    cpu: 14 of 20, gpu: 20 of 30; another recipe: two thirds of its longest sentence)."""
    if r.profile in PROFILES:
        return TRAIN_MAX_LEN.for_profile(r.profile)
    return max(r.min_len, 2 * r.max_len // 3)


def make_data(r: Recipe) -> TaskData:
    """Notebook 01's task with ``r``'s sizes, but trained on sentences of ``r.min_len`` to
    :func:`train_max_len` words and tested on ``r.min_len`` to ``r.max_len`` words (train and
    test never share a sentence)."""
    return make_translation_data(
        r.n_train,
        r.n_test,
        r.min_len,
        train_max_len(r),
        seed=r.seed,
        test_min_len=r.min_len,
        test_max_len=r.max_len,
    )


def attention_parameters(model: Seq2SeqRNN) -> tuple[Tensor, Tensor, Tensor]:
    """The trained weights of ``model``'s additive attention, as exercise 02.2 takes them:
    ``(W_query (A, H), W_key (A, H), v (A,))``."""
    att = model.attention
    if not isinstance(att, AdditiveAttention):
        raise ValueError(f"expected a model with additive attention, got {type(att).__name__}")
    return att.W_query.weight, att.W_key.weight, att.v


def bucket_label(bucket: tuple[int, int]) -> int | str:
    """The key of ``bucket`` in a :class:`LengthReport` (``5`` or ``"3-5"``)."""
    lo, hi = bucket
    return lo if lo == hi else f"{lo}-{hi}"


def seen_and_unseen(r: Recipe) -> tuple[list[int | str], list[int | str]]:
    """The report keys of the length buckets inside the training lengths and of those beyond
    them (every test sentence of an unseen bucket is longer than any training sentence)."""
    longest = train_max_len(r)
    straddle = [b for b in r.buckets if b[0] <= longest < b[1]]
    if straddle:
        raise ValueError(f"bucket {straddle[0]} holds both seen and unseen lengths (<= {longest})")
    seen = [bucket_label(b) for b in r.buckets if b[1] <= longest]
    return seen, [bucket_label(b) for b in r.buckets if b[0] > longest]


def early_stops(report: LengthReport, split: Seq2SeqData, bucket: tuple[int, int]) -> float:
    """Among the wrong translations of ``split``'s sentences of ``bucket`` source words, the
    fraction whose output ends (EOS, or runs out) before the reference does; NaN if none is
    wrong. ``report`` is :func:`evaluate_by_length` of ``split``."""
    lo, hi = bucket
    pred, target = report.predictions, split.tgt_out.cpu()
    inside = (split.src_lengths.cpu() >= lo) & (split.src_lengths.cpu() <= hi)

    def ends(tokens: Tensor) -> Tensor:  # index of the first EOS, or the row length
        is_eos = tokens == EOS
        return torch.where(is_eos.any(1), is_eos.float().argmax(1), tokens.shape[1])

    wrong = inside & ~exact_match(pred, target)
    if not bool(wrong.any()):
        return float("nan")
    return (ends(pred[wrong]) < ends(target[wrong])).float().mean().item()


class DotProductAttention(nn.Module):
    """Multiplicative (Luong et al. 2015, "general") scores, scaled as in notebook 03:
    ``e_i = (W_query s) . (W_key h_i) / sqrt(A)``, then the same masked softmax and weighted sum
    as :class:`~course_utils.modeling.attention.AdditiveAttention` (same interface, same shapes).

    ``s^T W_query^T W_key h_i`` is Luong's bilinear form ``s^T W_a h_i`` with a rank-``A``
    ``W_a``; it needs no tanh and no ``v``, and a whole batch of queries is one matmul -- the
    step from Bahdanau's score to the Transformer's.
    """

    def __init__(self, query_dim: int, key_dim: int, attn_dim: int):
        super().__init__()
        self.W_query = nn.Linear(query_dim, attn_dim, bias=False)
        self.W_key = nn.Linear(key_dim, attn_dim, bias=False)

    def forward(
        self, query: Tensor, keys: Tensor, values: Tensor | None = None, mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """query (B, Dq), keys (B, S, Dk), values (B, S, Dv) (default: keys), mask (B, S) bool
        (True = real token) -> (context (B, Dv), weights (B, S))."""
        values = keys if values is None else values
        q = self.W_query(query)  # (B, A)
        k = self.W_key(keys)  # (B, S, A)
        scores = (k @ q[:, :, None])[..., 0] / math.sqrt(q.shape[-1])  # (B, S)
        weights = masked_softmax(scores, mask)  # (B, S)
        return (weights[:, :, None] * values).sum(dim=1), weights


class BidirectionalSeq2SeqRNN(Seq2SeqRNN):
    """:class:`Seq2SeqRNN` with Bahdanau et al.'s encoder: a bidirectional GRU, so that every
    ``h_i`` summarises the words before *and after* word ``i``.

    Each direction has ``hidden_dim // 2`` units and their states are concatenated, so
    ``enc_states`` (B, S, H) and ``c`` (B, H) keep the shapes of the one-directional model and
    everything downstream (attention, decoder, output layer) is unchanged. ``encode`` is
    :class:`Seq2SeqRNN`'s: ``c`` is ``[forward state after the last word; backward state after
    the first word]``.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self.hidden_dim % 2:
            raise ValueError(
                f"a bidirectional encoder needs an even hidden_dim, got {self.hidden_dim}"
            )
        self.encoder = nn.GRU(
            self.src_embed.embedding_dim, self.hidden_dim // 2, batch_first=True, bidirectional=True
        )


def build_model(
    data: TaskData,
    r: Recipe,
    *,
    attention: bool,
    score: str = "additive",
    bidirectional: bool = False,
    hidden_dim: int | None = None,
    seed: int | None = None,
    device: torch.device | str | None = None,
) -> Seq2SeqRNN:
    """Notebook 01's seeded ``Seq2SeqRNN``, with ``score="additive"`` (Bahdanau) or ``"dot"``
    (:class:`DotProductAttention`) scores and, with ``bidirectional``, Bahdanau's
    bidirectional encoder (:class:`BidirectionalSeq2SeqRNN`). Same seed, same initial weights."""
    if score not in ("additive", "dot"):
        raise ValueError(f"score must be 'additive' or 'dot', got {score!r}")
    if score == "dot" and not attention:
        raise ValueError("score='dot' needs attention=True")
    model = nb01.build_model(data, r, attention=attention, hidden_dim=hidden_dim, seed=seed)
    if score == "dot" or bidirectional:
        H = model.hidden_dim
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed((r.seed if seed is None else seed) + 1)
            if bidirectional:
                bi = BidirectionalSeq2SeqRNN(
                    len(data.src_vocab), len(data.tgt_vocab), r.emb_dim, H, attention=attention
                )
                bi.load_state_dict(
                    {k: v for k, v in model.state_dict().items() if not k.startswith("encoder.")},
                    strict=False,
                )
                model = bi
            if score == "dot":
                model.attention = DotProductAttention(H, H, H)
    return model.to(device) if device is not None else model


# --------------------------------------------------------------------------------------------
# Where the misses go
# --------------------------------------------------------------------------------------------
@dataclass
class MissBreakdown:
    """Target words whose strongest attention is not on their gold source word, by kind.

    ``article_to_noun``: an article (le/la, un/une, ce/cette) whose strongest weight is on the
    noun of its own noun phrase (the noun decides the article's gender); ``et_ahead``: ``et``
    looking at a later word (what follows ``and`` decides the next words); ``other``: the rest.
    Counts over the teacher-forced test set, EOS excluded.
    """

    words: int
    misses: int
    article_to_noun: int
    et_ahead: int
    other: int

    @property
    def accuracy(self) -> float:
        """Fraction of target words whose strongest weight is on the gold source word."""
        return 1.0 - self.misses / max(1, self.words)

    def share(self, kind: str) -> float:
        """The fraction of the misses of one kind (``article_to_noun``, ``et_ahead``, ``other``)."""
        return getattr(self, kind) / max(1, self.misses)


@torch.no_grad()
def miss_breakdown(model: Seq2SeqRNN, data: TaskData) -> MissBreakdown:
    """Classify every alignment miss of ``model`` on ``data``'s test set (teacher-forced)."""
    device = model_device(model)
    split = data.test.to(device)
    _, weights = teacher_forced_logits(
        model, split.src, split.src_lengths, split.tgt_in, return_attention=True
    )
    if weights is None:
        raise ValueError("miss_breakdown needs a model with attention")
    return count_misses(data.test_examples, weights.argmax(dim=-1).cpu())


def count_misses(examples: Sequence[Example], strongest: Tensor) -> MissBreakdown:
    """The :class:`MissBreakdown` of ``examples`` given, for each target word, the source
    position of its strongest attention weight: ``strongest`` (N, T) (T >= the longest target;
    EOS and padding columns are not read)."""
    articles = {w for pair in DETERMINERS.values() for w in pair}
    et = set(CONJUNCTIONS.values())
    words = misses = to_noun = ahead = 0
    for i, ex in enumerate(examples):
        for j, (word, gold) in enumerate(zip(ex.tgt, ex.alignment)):
            words += 1
            got = int(strongest[i, j])
            if got == gold:
                continue
            misses += 1
            if word in articles and got > gold and _own_noun(ex.src, gold) == got:
                to_noun += 1
            elif word in et and got > gold:
                ahead += 1
    return MissBreakdown(words, misses, to_noun, ahead, misses - to_noun - ahead)


def _own_noun(src: Sequence[str], article: int) -> int:
    """Position of the noun that ends the noun phrase starting at ``article``."""
    for k in range(article + 1, len(src)):
        if src[k] in NOUNS:
            return k
    return -1


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
    device = model_device(model)
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
    device = model_device(model)
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


def gpu_summary() -> str:
    """What this notebook runs in the ``gpu`` profile, in words, from the gpu row of its table
    (``course doctor`` prints it beside the estimate)."""
    from course_utils.lessons.nb01_rnn_bottleneck.recipe import RECIPES

    r = RECIPES.gpu
    return (
        f"Bahdanau attention on the same task ({r.budget}), trained on up to "
        f"{TRAIN_MAX_LEN.gpu} words, tested on up to {r.max_len}"
    )
