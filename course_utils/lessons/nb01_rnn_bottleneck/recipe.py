"""Notebook 01 (the RNN bottleneck): sizes per profile, training and evaluation helpers.

    r = recipe()                                    # the active profile's sizes and budget
    data = make_data(r)                             # the toy translation task
    model = build_model(data, r, attention=False)   # a seeded Seq2SeqRNN
    history = train_seq2seq(model, data, r)         # r.steps AdamW steps, warmup + cosine
    report = evaluate_by_length(model, data.test, r.buckets, decode_fn=greedy_decode)
    report.gap()                                    # shortest minus longest bucket, in points
    history = fit(model, data, r, train_loop)       # the same budget through the student's loop
    probe_context(model, data, r)                   # what a linear reader finds in c, by length
    reversed_data(data)                             # the sources reversed (Sutskever et al.)

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

from course_utils.data.tasks import (
    Seq2SeqData,
    TaskData,
    accuracy_by_length,
    exact_match,
    make_translation_data,
    token_accuracy,
)
from course_utils.modeling.attention import AdditiveAttention
from course_utils.modeling.models.seq2seq_rnn import Seq2SeqRNN
from course_utils.modeling.module_state import eval_mode, model_device
from course_utils.runtime.profiles import ProfileTable
from course_utils.runtime.training import History, sequence_cross_entropy, train

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
    "train_batches",
    "optimizer_and_schedule",
    "LoopHistory",
    "fit",
    "reverse_source",
    "reversed_data",
    "ProbeReport",
    "probe_context",
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
    control_factor: int = 4  # the control run trains this many times r.steps
    evals: int = 20  # validation estimates per training run

    @property
    def eval_every(self) -> int:
        """Steps between two validation estimates (``steps // evals``, at least 1)."""
        return max(1, self.steps // self.evals)

    @property
    def budget(self) -> str:
        """The training budget in words, e.g. ``250 steps x 64 sentences``."""
        return f"{self.steps} steps x {self.batch_size} sentences"


def _buckets(lo: int, hi: int, width: int) -> tuple[Bucket, ...]:
    return tuple((a, min(a + width - 1, hi)) for a in range(lo, hi + 1, width))


# ``ci``: seconds on 2 CPU cores; ``cpu``: a few minutes; ``gpu``: longer sentences, wider models
RECIPES = ProfileTable(
    ci=Recipe(
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
        control_factor=2,
        evals=8,
    ),
    cpu=Recipe(
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
        control_factor=3,
    ),
    gpu=Recipe(
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
    ),
)


def recipe(profile: str | None = None) -> Recipe:
    """The recipe of the active profile (or of ``profile``: "ci", "cpu" or "gpu")."""
    return RECIPES.for_profile(profile)


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
    device = model_device(model)

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
    device = model_device(model)
    out = torch.zeros(len(split), max_len, dtype=torch.long)
    with eval_mode(model), torch.no_grad():
        for start in range(0, len(split), batch_size):
            part = split[torch.arange(start, min(start + batch_size, len(split)))].to(device)
            tokens = decode_fn(model, part.src, part.src_lengths, max_len)
            if isinstance(tokens, (tuple, list)):
                tokens = tokens[0]
            tokens = tokens[:, :max_len].cpu()
            out[start : start + tokens.shape[0], : tokens.shape[1]] = tokens
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
    history: Any = field(repr=False)
    model: Any = field(default=None, repr=False)


def hidden_size_sweep(
    data: TaskData,
    r: Recipe,
    *,
    sizes: Sequence[int] | None = None,
    decode_fn: Callable[..., Any] | None = None,
    trained: dict[int, tuple[Seq2SeqRNN, History]] | None = None,
    progress: bool | str = True,
    loop: Callable[..., Any] | None = None,
) -> dict[int, SweepResult]:
    """Train an attention-free model per hidden size (same data, steps, batch size, seed)
    and evaluate each by length. ``trained`` maps sizes already trained (e.g. the notebook's
    main model) to ``(model, history)``, so they are not trained twice. With ``loop`` (the
    notebook's ``train_loop``) each model is trained by :func:`fit`, else by
    :func:`train_seq2seq`."""
    results: dict[int, SweepResult] = {}
    for h in sizes or r.hidden_sizes:
        if trained and h in trained:
            model, history = trained[h]
        else:
            model = build_model(data, r, attention=False, hidden_dim=h)
            if loop is not None:
                history = fit(model, data, r, loop)
            else:
                history = train_seq2seq(
                    model, data, r, progress=progress, desc=f"no attention, H={h}"
                )
        report = evaluate_by_length(model, data.test, r.buckets, decode_fn=decode_fn)
        results[h] = SweepResult(
            h, report, count_parameters(model), history.total_time, history, model
        )
    return results


# --------------------------------------------------------------------------------------------
# The student's training loop (exercise 01.3), its inputs, and the experiments built on it
# --------------------------------------------------------------------------------------------
def train_batches(split: Seq2SeqData, batch_size: int, seed: int = 0) -> Iterator[Seq2SeqData]:
    """An endless stream of length-sorted shuffled batches (:class:`length_batches`, epoch
    after epoch), for a loop that takes ``next(batches)`` once per step."""
    epochs = length_batches(split, batch_size, torch.Generator().manual_seed(seed))
    while True:
        yield from epochs


def optimizer_and_schedule(
    model: nn.Module, r: Recipe, steps: int | None = None
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW at ``r.lr`` and a scheduler for ``steps`` (default ``r.steps``) steps: linear
    warmup over ``r.warmup`` steps, then cosine decay to ``r.lr / 10`` (the schedule of
    :func:`course_utils.runtime.training.lr_schedule`, stepped once per optimizer step)."""
    from course_utils.runtime.training import lr_schedule, make_optimizer

    total = steps or r.steps
    opt = make_optimizer(model, r.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: lr_schedule(min(s, total - 1), lr=1.0, steps=total, warmup=r.warmup)
    )
    return opt, sched


@dataclass
class LoopHistory:
    """What a run of the training loop recorded: a loss per step and a validation estimate
    every ``eval_every`` steps (``val_steps`` counts steps from 1), and its wall time."""

    train_loss: list[float]
    val_steps: list[int]
    val_loss: list[float]
    seconds: float

    @property
    def total_time(self) -> float:
        return self.seconds

    def smoothed(self, window: int = 20) -> list[float]:
        """The training loss averaged over the last ``window`` steps at each step."""
        out, acc = [], 0.0
        for i, v in enumerate(self.train_loss):
            acc += v - (self.train_loss[i - window] if i >= window else 0.0)
            out.append(acc / min(i + 1, window))
        return out

    def late_val_drop(self, fraction: float = 0.25) -> float:
        """How much the validation loss fell over the last ``fraction`` of the run (>= 0 when
        it still fell): the first estimate in that stretch minus the last one."""
        k = max(1, round(len(self.val_loss) * fraction))
        return self.val_loss[-k - 1] - self.val_loss[-1] if len(self.val_loss) > k else float("nan")

    def plot(self, ax=None, label: str = "", color=None):
        """Training loss (smoothed) and validation loss against the step, on ``ax``."""
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(6.5, 3.8), constrained_layout=True)
        steps = range(1, len(self.train_loss) + 1)
        (line,) = ax.plot(
            steps,
            self.smoothed(),
            lw=1,
            alpha=0.6,
            color=color,
            label=f"{label} train (smoothed)".strip(),
        )
        ax.plot(
            self.val_steps,
            self.val_loss,
            marker="o",
            ms=3,
            color=line.get_color(),
            label=f"{label} validation".strip(),
        )
        ax.set(xlabel="step", ylabel="cross-entropy")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        return ax


def reverse_source(split: Seq2SeqData) -> Seq2SeqData:
    """The same pairs with each source sentence reversed (padding stays at the end), as
    Sutskever et al. (2014) fed it. The targets and lengths are unchanged."""
    S = split.src.shape[1]
    pos = torch.arange(S)[None, :]
    lengths = split.src_lengths[:, None]
    idx = torch.where(pos < lengths, lengths - 1 - pos, pos)  # reversed within the sentence
    src = split.src.gather(1, idx.to(split.src.device))
    align = split.alignment
    align = torch.where(align >= 0, split.src_lengths[:, None] - 1 - align, align)
    return Seq2SeqData(
        src, split.src_lengths, split.tgt_in, split.tgt_out, split.tgt_lengths, align
    )


def reversed_data(data: TaskData) -> TaskData:
    """``data`` with every source sentence reversed (train and test)."""
    import dataclasses

    return dataclasses.replace(
        data, train=reverse_source(data.train), test=reverse_source(data.test)
    )


def fit(
    model: Seq2SeqRNN,
    data: TaskData,
    r: Recipe,
    loop: Callable[..., Any],
    *,
    steps: int | None = None,
    forward_fn: Callable[..., Any] | None = None,
) -> LoopHistory:
    """Train ``model`` with ``loop`` (the notebook's ``train_loop``, exercise 01.3) for
    ``steps`` (default ``r.steps``) steps: AdamW + warmup/cosine (:func:`optimizer_and_schedule`),
    batches from :func:`train_batches`, gradients clipped to 1, and a validation estimate on
    the test split (capped at 512 sentences) ``r.evals`` times. Leaves the model in eval mode."""
    import time

    total = steps or r.steps
    opt, sched = optimizer_and_schedule(model, r, total)
    val = data.test[torch.arange(min(512, len(data.test)))]
    eval_every = max(1, total // r.evals)
    start = time.perf_counter()
    train_losses, val_losses = loop(
        model,
        forward_fn or teacher_forced_logits,
        train_batches(data.train, r.batch_size, r.seed),
        opt,
        sched,
        steps=total,
        val_batch=val,
        eval_every=eval_every,
        clip=1.0,
    )
    seconds = time.perf_counter() - start
    model.eval()
    val_steps = [eval_every * (k + 1) for k in range(len(val_losses))]
    return LoopHistory(list(train_losses), val_steps, list(val_losses), seconds)


@dataclass
class ProbeReport:
    """Linear-probe accuracy of reading source word i out of a frozen context vector c.

    ``grid[L][i]``: accuracy on test sentences of length L for position i (0-based) ;
    ``by_bucket[bucket]``: the mean over positions and sentences of each length bucket;
    ``baseline[bucket]``: the same for a reader that ignores c and always answers the most
    frequent word at each position (what the position alone gives away, e.g. an article at
    position 0).
    """

    hidden_dim: int
    grid: dict[int, list[float]]
    by_bucket: dict[Any, float]
    baseline: dict[Any, float]


@torch.no_grad()
def probe_context(
    model: Seq2SeqRNN, data: TaskData, r: Recipe, *, ridge: float = 1e-2
) -> ProbeReport:
    """Fit one linear read-out per source position i: c (H,) -> the id of source word i, by
    ridge regression of the one-hot word onto [c, 1] over the training sentences longer than i;
    score the argmax on the test sentences, by length. The encoder stays frozen: the probe asks
    how much of the source a *linear* reader can still find in c."""
    model.eval()

    def contexts(split: Seq2SeqData) -> Tensor:
        cs = []
        for start in range(0, len(split), 1024):
            part = split[torch.arange(start, min(start + 1024, len(split)))]
            cs.append(model.encode(part.src, part.src_lengths)[1].double())
        return torch.cat(cs)

    train, test = data.train, data.test
    c_train, c_test = contexts(train), contexts(test)
    ones = torch.ones(len(c_train), 1, dtype=torch.float64)
    X = torch.cat([c_train, ones], dim=1)  # (N, H + 1)
    Xt = torch.cat([c_test, torch.ones(len(c_test), 1, dtype=torch.float64)], dim=1)
    V = len(data.src_vocab)
    correct = torch.zeros(len(test), r.max_len, dtype=torch.bool)
    guessed = torch.zeros(len(test), r.max_len, dtype=torch.bool)
    for i in range(r.max_len):
        rows = train.src_lengths > i
        if int(rows.sum()) == 0:
            continue
        Xi = X[rows]
        Y = torch.nn.functional.one_hot(train.src[rows, i], V).double()  # (n, V)
        A = Xi.T @ Xi + ridge * len(Xi) * torch.eye(Xi.shape[1], dtype=torch.float64)
        W = torch.linalg.solve(A, Xi.T @ Y)  # (H + 1, V)
        has = test.src_lengths > i
        pred = (Xt[has] @ W).argmax(dim=1)
        correct[has, i] = pred == test.src[has, i]
        guessed[has, i] = test.src[has, i] == train.src[rows, i].bincount(minlength=V).argmax()
    grid: dict[int, list[float]] = {}
    for L in range(r.min_len, r.max_len + 1):
        rows = test.src_lengths == L
        if int(rows.sum()):
            grid[L] = correct[rows, :L].double().mean(0).tolist()
    by_bucket, baseline = {}, {}
    for lo, hi in r.buckets:
        key = lo if lo == hi else f"{lo}-{hi}"
        Ls = [L for L in grid if lo <= L <= hi]
        if not Ls:
            continue
        rows = (test.src_lengths >= lo) & (test.src_lengths <= hi)
        lens = test.src_lengths[rows]
        cor = correct[rows]
        valid = torch.arange(r.max_len)[None, :] < lens[:, None]
        by_bucket[key] = (cor & valid).sum().item() / valid.sum().item()
        baseline[key] = (guessed[rows] & valid).sum().item() / valid.sum().item()
    return ProbeReport(model.hidden_dim, grid, by_bucket, baseline)


def gpu_summary() -> str:
    """What this notebook runs in the ``gpu`` profile, in words, from the gpu row of its table
    (``course doctor`` prints it beside the estimate)."""

    r = RECIPES.gpu
    widths = f"{len(r.hidden_sizes)} widths ({r.hidden_sizes[0]} to {r.hidden_sizes[-1]})"
    return f"GRU encoder-decoder at {widths}, {r.budget}, sentences of up to {r.max_len} words"
