"""Notebook 01 (the RNN bottleneck): sizes per profile, training and evaluation helpers.

    r = recipe()                                    # the active profile's sizes and budget
    data = make_data(r)                             # the toy translation task
    model = build_model(data, r, attention=False)   # a seeded Seq2SeqRNN
    history = train_seq2seq(model, data, r)         # r.steps AdamW steps, warmup + cosine
    report = evaluate_by_length(model, data.test, r.buckets, decode_fn=greedy_decode)
    report.gap()                                    # shortest minus longest bucket, in points

Notebook 02 trains the attention model on the same task with the same budget (this recipe),
so the two accuracy-vs-length curves can share one plot.

Training speed: under teacher forcing every decoder input is known in advance, so
:func:`teacher_forced_logits` runs the attention-free decoder as one ``nn.GRU`` call over all
steps (sharing the ``GRUCell``'s weights) and, with attention, projects the keys once and
applies the output layer once after the loop. It computes exactly what
``Seq2SeqRNN.forward`` computes (a test proves it), only faster.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn
from torch.func import functional_call

from course_utils.attention import AdditiveAttention
from course_utils.data.tasks import (
    Seq2SeqData,
    TaskData,
    accuracy_by_length,
    exact_match,
    make_translation_data,
    token_accuracy,
)
from course_utils.models.seq2seq_rnn import Seq2SeqRNN
from course_utils.profiles import pick
from course_utils.training import History, sequence_cross_entropy, train

__all__ = [
    "Recipe",
    "recipe",
    "make_data",
    "build_model",
    "teacher_forced_logits",
    "length_batches",
    "train_seq2seq",
    "LengthReport",
    "evaluate_by_length",
    "decode_tokens",
    "SweepResult",
    "hidden_size_sweep",
    "count_parameters",
]

Bucket = tuple[int, int]


@dataclass(frozen=True)
class Recipe:
    """Task, model size and training budget for notebooks 01 and 02.

    ``buckets`` are inclusive ``(lo, hi)`` source-length ranges for accuracy vs length;
    ``hidden_sizes`` the sweep of notebook 01 (each trained with the same budget).
    """

    n_train: int
    n_test: int
    min_len: int
    max_len: int
    buckets: tuple[Bucket, ...]
    emb_dim: int
    hidden_dim: int
    steps: int
    batch_size: int
    lr: float
    warmup: int
    hidden_sizes: tuple[int, ...]
    seed: int = 0
    profile: str = ""

    @property
    def budget(self) -> str:
        """The training budget in words, e.g. ``250 steps x 64 sentences``."""
        return f"{self.steps} steps x {self.batch_size} sentences"


def _buckets(lo: int, hi: int, width: int) -> tuple[Bucket, ...]:
    return tuple((a, min(a + width - 1, hi)) for a in range(lo, hi + 1, width))


def recipe() -> Recipe:
    """The active profile's recipe (``ci``: seconds on 2 CPU cores; ``cpu``: a few minutes)."""
    ci = Recipe(
        n_train=3000,
        n_test=300,
        min_len=3,
        max_len=11,
        buckets=_buckets(3, 11, 3),
        emb_dim=32,
        hidden_dim=64,
        steps=160,
        batch_size=64,
        lr=1e-2,
        warmup=16,
        hidden_sizes=(16, 32, 64),
        profile="ci",
    )
    cpu = Recipe(
        n_train=20000,
        n_test=600,
        min_len=3,
        max_len=20,
        buckets=_buckets(3, 20, 3),
        emb_dim=64,
        hidden_dim=128,
        steps=800,
        batch_size=64,
        lr=5e-3,
        warmup=50,
        hidden_sizes=(32, 64, 128, 256),
        profile="cpu",
    )
    gpu = Recipe(
        n_train=50000,
        n_test=1000,
        min_len=3,
        max_len=30,
        buckets=_buckets(3, 30, 3),
        emb_dim=128,
        hidden_dim=256,
        steps=3000,
        batch_size=128,
        lr=3e-3,
        warmup=100,
        hidden_sizes=(64, 128, 256, 512, 1024),
        profile="gpu",
    )
    return pick(ci=ci, cpu=cpu, gpu=gpu)


def make_data(r: Recipe) -> TaskData:
    """The toy translation task with ``r``'s sizes (train and test never share a sentence)."""
    return make_translation_data(r.n_train, r.n_test, r.min_len, r.max_len, seed=r.seed)


def build_model(
    data: TaskData,
    r: Recipe,
    *,
    attention: bool,
    hidden_dim: int | None = None,
    seed: int | None = None,
    device: torch.device | str | None = None,
) -> Seq2SeqRNN:
    """A ``Seq2SeqRNN`` for ``data``'s vocabularies, initialised from ``seed`` (default r.seed).

    The same seed gives the same initial weights whatever ran before in the notebook.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(r.seed if seed is None else seed)
        model = Seq2SeqRNN(
            len(data.src_vocab),
            len(data.tgt_vocab),
            r.emb_dim,
            hidden_dim or r.hidden_dim,
            attention=attention,
        )
    return model.to(device) if device is not None else model


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


# --------------------------------------------------------------------------------------------
# Fast teacher-forced forward
# --------------------------------------------------------------------------------------------
_GRUS: dict[tuple[int, int, str], nn.GRU] = {}


def _gru_like(cell: nn.GRUCell) -> nn.GRU:
    key = (cell.input_size, cell.hidden_size, str(cell.weight_ih.device))
    if key not in _GRUS:
        with torch.random.fork_rng(devices=[]):
            _GRUS[key] = nn.GRU(cell.input_size, cell.hidden_size, batch_first=True).to(
                cell.weight_ih.device
            )
    return _GRUS[key]


def _gru_over_time(cell: nn.GRUCell, inputs: Tensor, h0: Tensor) -> Tensor:
    """Run ``cell`` over inputs (B, T, D) from h0 (B, H) as one nn.GRU call -> states (B, T, H)."""
    params = {
        "weight_ih_l0": cell.weight_ih,
        "weight_hh_l0": cell.weight_hh,
        "bias_ih_l0": cell.bias_ih,
        "bias_hh_l0": cell.bias_hh,
    }
    gru = _gru_like(cell)
    states, _ = functional_call(
        gru, params, (inputs.to(cell.weight_ih.dtype), h0[None].contiguous())
    )
    return states


def teacher_forced_logits(
    model: Seq2SeqRNN,
    src: Tensor,
    src_lengths: Tensor | None,
    tgt_in: Tensor,
    *,
    return_attention: bool = False,
) -> Tensor | tuple[Tensor, Tensor | None]:
    """``model(src, src_lengths, tgt_in)``'s logits, computed faster (same numbers).

    src (B, S), src_lengths (B,), tgt_in (B, T) -> logits (B, T, V); with
    ``return_attention`` also the attention weights (B, T, S) (None without attention).
    """
    enc_states, c = model.encode(src, src_lengths)  # (B, S, H), (B, H)
    B, T = tgt_in.shape
    emb = model.dropout(model.tgt_embed(tgt_in))  # (B, T, E)
    if model.attention is None:
        ctx = c[:, None, :].expand(B, T, c.shape[-1])  # the same c at every step
        states = _gru_over_time(model.decoder_cell, torch.cat([emb, ctx], dim=-1), c)
        logits = model.out(model.dropout(torch.cat([states, ctx], dim=-1)))
        return (logits, None) if return_attention else logits
    att = model.attention
    mask = model.src_mask(src, src_lengths)  # (B, S)
    additive = isinstance(att, AdditiveAttention)  # else any module att(s, h, mask=) -> (c, a)
    keys = att.W_key(enc_states) if additive else None  # (B, S, A): projected once
    s, states, contexts, weights = c, [], [], []
    for t in range(T):
        if additive:
            scores = torch.tanh(keys + att.W_query(s)[:, None, :]) @ att.v  # (B, S) from s_{t-1}
            w = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)  # (B, S)
            ctx = torch.bmm(w[:, None, :], enc_states)[:, 0]  # (B, H)
        else:
            ctx, w = att(s, enc_states, mask=mask)
        s = model.decoder_cell(torch.cat([emb[:, t], ctx], dim=-1), s)  # s_t
        states.append(s)
        contexts.append(ctx)
        weights.append(w)
    out_in = torch.cat([torch.stack(states, 1), torch.stack(contexts, 1)], dim=-1)  # (B, T, 2H)
    logits = model.out(model.dropout(out_in))
    return (logits, torch.stack(weights, 1)) if return_attention else logits


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------
class length_batches:  # noqa: N801 - used like a function, like data.batches
    """Shuffled mini-batches of sentences of similar length (re-iterable, one epoch per iter).

    Each epoch: shuffle, cut into pools of ``pool`` batches, sort each pool by target length,
    cut into batches and shuffle their order. Less padding means fewer decoder steps per
    batch; the randomness of the batches stays.
    """

    def __init__(
        self, data: Seq2SeqData, batch_size: int, generator: torch.Generator, *, pool: int = 16
    ) -> None:
        if batch_size < 1 or batch_size > len(data):
            raise ValueError(
                f"expected 1 <= batch_size <= {len(data)} (the data's size), got {batch_size}"
            )
        self.data, self.batch_size, self.generator, self.pool = data, batch_size, generator, pool

    def __len__(self) -> int:
        return len(self.data) // self.batch_size

    def __iter__(self) -> Iterator[Seq2SeqData]:
        n, bs = len(self.data), self.batch_size
        perm = torch.randperm(n, generator=self.generator)
        chunks = []
        for start in range(0, n, bs * self.pool):
            idx = perm[start : start + bs * self.pool]
            idx = idx[torch.argsort(self.data.tgt_lengths[idx], stable=True)]
            chunks += [idx[j : j + bs] for j in range(0, len(idx) - bs + 1, bs)]
        for k in torch.randperm(len(chunks), generator=self.generator).tolist():
            yield self.data[chunks[k]]


def train_seq2seq(
    model: Seq2SeqRNN,
    data: TaskData,
    r: Recipe,
    *,
    forward_fn: Callable[..., Any] | None = None,
    steps: int | None = None,
    progress: bool | str = True,
    desc: str | None = None,
) -> History:
    """Train ``model`` on ``data.train`` with teacher forcing for ``r.steps`` AdamW steps.

    Loss: cross-entropy of the logits (B, T, V) against ``tgt_out`` (PAD ignored).
    ``forward_fn(model, src, src_lengths, tgt_in) -> logits`` defaults to
    :func:`teacher_forced_logits`; pass the notebook's ``seq2seq_forward`` to train with it.
    Warmup then cosine decay; gradients clipped to norm 1. Leaves the model in eval mode.
    """
    forward = forward_fn or teacher_forced_logits
    gen = torch.Generator().manual_seed(r.seed)
    device = next(model.parameters()).device

    def loss_fn(m: nn.Module, batch: Seq2SeqData) -> Tensor:
        logits = forward(m, batch.src, batch.src_lengths, batch.tgt_in)
        if isinstance(logits, (tuple, list)):
            logits = logits[0]
        return sequence_cross_entropy(logits, batch.tgt_out)

    name = desc or (
        f"{'attention' if model.uses_attention else 'no attention'}, H={model.hidden_dim}"
    )
    return train(
        model,
        length_batches(data.train, r.batch_size, gen),
        loss_fn=loss_fn,
        steps=steps or r.steps,
        lr=r.lr,
        warmup=r.warmup,
        grad_clip=1.0,
        log_every=max(1, (steps or r.steps) // 50),
        progress=progress,
        desc=name,
        device=device,
    )


# --------------------------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------------------------
@dataclass
class LengthReport:
    """Greedy-decoding accuracy of one model, overall and per source-length bucket.

    ``exact[bucket]`` / ``token[bucket]``: exact-match and token accuracy (fractions);
    ``counts[bucket]``: test sentences in the bucket.
    """

    exact: dict[Any, float]
    token: dict[Any, float]
    counts: dict[Any, int]
    overall_exact: float
    overall_token: float
    predictions: Tensor = field(repr=False)

    def gap(self, metric: str = "exact") -> float:
        """Accuracy of the shortest bucket minus the longest's, in percentage points."""
        series = self.exact if metric == "exact" else self.token
        values = list(series.values())
        return 100.0 * (values[0] - values[-1])

    def table(self, name: str = "") -> str:
        """A small text table: bucket, sentences, exact match, token accuracy."""
        lines = [
            f"{name}" if name else "",
            f"{'source length':>13} | {'sentences':>9} | {'exact match':>11} | {'token acc.':>10}",
        ]
        for key in self.exact:
            lines.append(
                f"{key!s:>13} | {self.counts[key]:>9} | {100 * self.exact[key]:>10.1f}% "
                f"| {100 * self.token[key]:>9.1f}%"
            )
        lines.append(
            f"{'all':>13} | {sum(self.counts.values()):>9} | "
            f"{100 * self.overall_exact:>10.1f}% | {100 * self.overall_token:>9.1f}%"
        )
        return "\n".join(line for line in lines if line)

    def __str__(self) -> str:
        return self.table()


def decode_tokens(
    decode_fn: Callable[..., Any],
    model: Seq2SeqRNN,
    split: Seq2SeqData,
    max_len: int | None = None,
    batch_size: int = 512,
) -> Tensor:
    """Greedy outputs for every row of ``split``: ``decode_fn(model, src, src_lengths,
    max_len)`` in chunks -> tokens (N, max_len), PAD-filled. ``max_len`` default: longest
    target + 5."""
    max_len = max_len or split.tgt_out.shape[1] + 5
    device = next(model.parameters()).device
    out = torch.zeros(len(split), max_len, dtype=torch.long)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for start in range(0, len(split), batch_size):
                part = split[torch.arange(start, min(start + batch_size, len(split)))].to(device)
                tokens = decode_fn(model, part.src, part.src_lengths, max_len)
                if isinstance(tokens, (tuple, list)):
                    tokens = tokens[0]
                tokens = tokens[:, :max_len].cpu()
                out[start : start + tokens.shape[0], : tokens.shape[1]] = tokens
    finally:
        model.train(was_training)
    return out


def _model_greedy(model: Seq2SeqRNN, src: Tensor, src_lengths: Tensor, max_len: int) -> Tensor:
    return model.greedy_decode(src, src_lengths, max_len)[0]


def evaluate_by_length(
    model: Seq2SeqRNN,
    split: Seq2SeqData,
    buckets: Sequence[Bucket],
    *,
    decode_fn: Callable[..., Any] | None = None,
) -> LengthReport:
    """Greedy-decode ``split`` and measure exact-match and token accuracy per length bucket.

    ``decode_fn(model, src, src_lengths, max_len) -> tokens (B, T')`` defaults to the model's
    ``greedy_decode`` (pass the notebook's ``greedy_decode``). A sentence counts as an exact
    match when every target token and the EOS are right.
    """
    pred = decode_tokens(decode_fn or _model_greedy, model, split)
    target, lengths = split.tgt_out.cpu(), split.src_lengths.cpu()
    exact = accuracy_by_length(pred, target, lengths, list(buckets), metric="exact")
    token = accuracy_by_length(pred, target, lengths, list(buckets), metric="token")
    counts = {}
    for lo, hi in buckets:
        n = int(((lengths >= lo) & (lengths <= hi)).sum())
        if n:
            counts[lo if lo == hi else f"{lo}-{hi}"] = n
    return LengthReport(
        exact=exact,
        token=token,
        counts=counts,
        overall_exact=exact_match(pred, target).float().mean().item(),
        overall_token=token_accuracy(pred, target).mean().item(),
        predictions=pred,
    )


# --------------------------------------------------------------------------------------------
# The hidden-size sweep
# --------------------------------------------------------------------------------------------
@dataclass
class SweepResult:
    """One model of the sweep: its report, parameter count, training seconds and history."""

    hidden_dim: int
    report: LengthReport
    parameters: int
    seconds: float
    history: History = field(repr=False)


def hidden_size_sweep(
    data: TaskData,
    r: Recipe,
    *,
    sizes: Sequence[int] | None = None,
    decode_fn: Callable[..., Any] | None = None,
    trained: dict[int, tuple[Seq2SeqRNN, History]] | None = None,
    progress: bool | str = True,
) -> dict[int, SweepResult]:
    """Train an attention-free model per hidden size (same data, steps, batch size, seed)
    and evaluate each by length. ``trained`` maps sizes already trained (e.g. the notebook's
    main model) to ``(model, history)``, so they are not trained twice."""
    results: dict[int, SweepResult] = {}
    for h in sizes or r.hidden_sizes:
        if trained and h in trained:
            model, history = trained[h]
        else:
            model = build_model(data, r, attention=False, hidden_dim=h)
            history = train_seq2seq(model, data, r, progress=progress, desc=f"no attention, H={h}")
        report = evaluate_by_length(model, data.test, r.buckets, decode_fn=decode_fn)
        results[h] = SweepResult(h, report, count_parameters(model), history.total_time, history)
    return results
