"""Notebook 10 (the full Transformer): sizes per profile, training and evaluation helpers.

    cfg = config()                                   # the active profile's recipe
    data = make_data(cfg)                            # notebook 01's toy translation task
    run = train_model("transformer", cfg, data)      # or "rnn", "rnn+attention"
    run.exact_match, run.train_time_s, run.by_length  # by_length: per length bucket
    run = train_model("transformer", cfg, data, make_model=..., loss_fn=..., decode_fn=...)
    step_time_by_length(model, loss_fn, data.train, cfg.batch_size, (5, 14))  # ms per step

The three contenders of the arc's closing comparison share the task, the batch size and the
number of optimizer steps (the same training budget in steps); :func:`train_model` measures
each one's training wall time and CPU time (evaluations excluded) and its test accuracy with
greedy decoding, overall and per source length.

The task and the RNN sizes are notebook 01's (``course_utils.lessons.nb01_rnn_bottleneck.recipe.recipe()``) in every
profile, split as notebook 02 splits it (:func:`course_utils.lessons.nb02_additive_attention.recipe.make_data`): the
models train on sentences of at most ``cfg.task.train_max_len`` words and are tested on
sentences up to ``cfg.task.max_len`` words, so the longest length buckets hold only lengths
no model saw in training.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from course_utils.data.tasks import (
    TaskData,
    accuracy_by_length,
    batches,
    exact_match,
    make_translation_data,
)
from course_utils.modeling.models.seq2seq_rnn import Seq2SeqRNN
from course_utils.modeling.models.transformer import (
    EncoderDecoderTransformer,
    cross_attention_maps,  # notebook 10 calls it as nb10.cross_attention_maps
)
from course_utils.modeling.module_state import eval_mode
from course_utils.runtime import devices
from course_utils.runtime.profiles import ProfileTable
from course_utils.runtime.training import History, sequence_cross_entropy, train

__all__ = [
    "TaskConfig",
    "TransformerConfig",
    "RNNConfig",
    "Config",
    "config",
    "make_data",
    "SIZE_TOLERANCE",
    "parameter_counts",
    "size_matched",
    "position_limit",
    "build_model",
    "seq2seq_loss",
    "decode",
    "evaluate",
    "Run",
    "train_model",
    "MODEL_NAMES",
    "seen_and_unseen",
    "step_time_by_length",
    "cross_attention_maps",
    "alignment_by_layer",
]

MODEL_NAMES = ("rnn", "rnn+attention", "transformer")


@dataclass(frozen=True)
class TaskConfig:
    """The translation task (notebook 01's): sizes of the splits and source lengths."""

    n_train: int
    n_test: int
    min_len: int
    max_len: int  # the longest test sentence
    train_max_len: int  # the longest training sentence (notebook 02's split)
    buckets: tuple[tuple[int, int], ...]  # inclusive source-length ranges for the report
    seed: int = 0


@dataclass(frozen=True)
class TransformerConfig:
    """The encoder-decoder Transformer's size (pre-norm, no dropout)."""

    d_model: int
    n_heads: int
    n_layers: int  # encoder layers and decoder layers each
    d_ff: int


@dataclass(frozen=True)
class RNNConfig:
    """The GRU encoder-decoder's size (the same for the variants with and without attention)."""

    emb_dim: int
    hidden_dim: int


@dataclass(frozen=True)
class Config:
    """Everything notebook 10 trains: the task, the models and the shared training budget."""

    task: TaskConfig
    transformer: TransformerConfig
    rnn: RNNConfig
    batch_size: int
    steps: int  # optimizer steps, the same for every model
    lr: dict[str, float] = field(default_factory=dict)  # peak AdamW rate per model
    warmup: int = 100
    eval_points: int = 5  # test evaluations during training (for accuracy vs training time)
    eval_subset: int = 200  # test pairs used by those evaluations (the final one uses all)
    seeds: tuple[int, ...] = (0,)  # seeds of both attention models' runs (the first is shown)


@dataclass(frozen=True)
class Sizes:
    """The sizes of :class:`Config` that depend on the profile (one row of :data:`SIZES`; the
    task and the RNNs take notebook 01's table, :data:`course_utils.lessons.nb01_rnn_bottleneck.recipe.RECIPES`)."""

    d_model: int  # the Transformer's width
    d_ff: int  # the Transformer's feed-forward width
    steps: int
    transformer_lr: float
    warmup: int
    eval_points: int
    eval_subset: int
    seeds: tuple[int, ...]


# The Transformer's widths make it the size of the RNN + attention (notebook 01's RNN sizes) in
# every profile, within SIZE_TOLERANCE of its parameters (ci 74,068 vs 70,852, cpu 245,956 vs
# 256,324, gpu 950,596 vs 971,332; tests/test_recipe_nb10.py holds it). Its peak rate: in ci the
# RNNs' own 1e-2; in cpu and gpu 3e-3, against the RNNs' 5e-3 and 3e-3 (the notebook prints both
# beside its verdict). Three seeds in cpu and gpu, so that a ranking of the two attention models
# beyond the training lengths rests on three paired runs; ci's one seed keeps it under a minute.
SIZES = ProfileTable(
    ci=Sizes(
        d_model=40,
        d_ff=80,
        steps=200,
        transformer_lr=1e-2,
        warmup=20,
        eval_points=2,
        eval_subset=100,
        seeds=(0,),
    ),
    cpu=Sizes(
        d_model=64,
        d_ff=256,
        steps=800,
        transformer_lr=3e-3,
        warmup=100,
        eval_points=5,
        eval_subset=300,
        seeds=(0, 1, 2),
    ),
    gpu=Sizes(
        d_model=128,
        d_ff=512,
        steps=800,
        transformer_lr=3e-3,
        warmup=100,
        eval_points=5,
        eval_subset=300,
        seeds=(0, 1, 2),
    ),
)


def config(profile: str | None = None) -> Config:
    """The recipe of the active profile (or of ``profile``: "ci", "cpu" or "gpu"): notebook
    01's task and RNN sizes, this notebook's Transformer and the training budget all three
    share."""
    from course_utils.lessons.nb01_rnn_bottleneck import recipe as nb01
    from course_utils.lessons.nb02_additive_attention import recipe as nb02

    r = nb01.RECIPES.for_profile(profile)
    s = SIZES.for_profile(profile)
    return Config(
        task=TaskConfig(
            n_train=r.n_train,
            n_test=r.n_test,
            min_len=r.min_len,
            max_len=r.max_len,
            train_max_len=nb02.train_max_len(r),
            buckets=r.buckets,
            seed=r.seed,
        ),
        transformer=TransformerConfig(d_model=s.d_model, n_heads=4, n_layers=2, d_ff=s.d_ff),
        rnn=RNNConfig(emb_dim=r.emb_dim, hidden_dim=r.hidden_dim),
        batch_size=64,
        steps=s.steps,
        # the RNNs at notebook 01's rate; the Transformer's tuned for the same step budget
        lr={"rnn": r.lr, "rnn+attention": r.lr, "transformer": s.transformer_lr},
        warmup=s.warmup,
        eval_points=s.eval_points,
        eval_subset=s.eval_subset,
        seeds=s.seeds,
    )


# "size-matched": the Transformer within ±15% of the RNN + attention's parameters
SIZE_TOLERANCE = 0.15


def parameter_counts(cfg: Config, data: TaskData) -> dict[str, int]:
    """The parameters of each model of :data:`MODEL_NAMES` built for ``data``'s vocabularies
    (untrained), as ``{name: count}``."""
    return {
        name: sum(p.numel() for p in build_model(name, cfg, data).parameters())
        for name in MODEL_NAMES
    }


def size_matched(n_transformer: int, n_rnn_attention: int) -> bool:
    """Whether a Transformer of ``n_transformer`` parameters is within :data:`SIZE_TOLERANCE`
    of an RNN + attention of ``n_rnn_attention`` (the closing comparison's two attention models)."""
    return abs(n_transformer - n_rnn_attention) <= SIZE_TOLERANCE * n_rnn_attention


def make_data(cfg: Config | None = None) -> TaskData:
    """The toy translation task of notebooks 01, 02 and 10 with ``cfg.task``'s sizes, split as
    notebook 02 splits it: training sentences of ``min_len..train_max_len`` words, test
    sentences of ``min_len..max_len`` (never a training sentence)."""
    t = (cfg or config()).task
    return make_translation_data(
        t.n_train,
        t.n_test,
        t.min_len,
        t.train_max_len,
        seed=t.seed,
        test_min_len=t.min_len,
        test_max_len=t.max_len,
    )


def seen_and_unseen(cfg: Config) -> tuple[list[Any], list[Any]]:
    """The report keys of the length buckets inside the training lengths and of those beyond
    them (every test sentence of an unseen bucket is longer than any training sentence)."""
    longest = cfg.task.train_max_len
    label = [lo if lo == hi else f"{lo}-{hi}" for lo, hi in cfg.task.buckets]
    seen = [k for k, (lo, hi) in zip(label, cfg.task.buckets, strict=True) if hi <= longest]
    unseen = [k for k, (lo, hi) in zip(label, cfg.task.buckets, strict=True) if lo > longest]
    if len(seen) + len(unseen) != len(label):
        raise ValueError(f"a bucket of {cfg.task.buckets} holds lengths on both sides of {longest}")
    return seen, unseen


def position_limit(data: TaskData) -> int:
    """The ``max_len`` (rows of the position table) a Transformer for ``data`` needs: the
    longest source or target of either split, plus a margin for greedy decoding."""
    return 8 + int(
        max(
            data.train.src.shape[1],
            data.test.src.shape[1],
            data.train.tgt_in.shape[1],
            data.test.tgt_in.shape[1],
        )
    )


def build_model(name: str, cfg: Config, data: TaskData) -> nn.Module:
    """A fresh model ``name`` (one of :data:`MODEL_NAMES`) for ``data``'s vocabularies."""
    V_src, V_tgt = len(data.src_vocab), len(data.tgt_vocab)
    if name == "transformer":
        c = cfg.transformer
        max_len = position_limit(data)
        return EncoderDecoderTransformer(
            V_src,
            V_tgt,
            d_model=c.d_model,
            n_heads=c.n_heads,
            n_layers=c.n_layers,
            d_ff=c.d_ff,
            max_len=max_len,
        )
    if name in ("rnn", "rnn+attention"):
        return Seq2SeqRNN(
            V_src, V_tgt, cfg.rnn.emb_dim, cfg.rnn.hidden_dim, attention=name == "rnn+attention"
        )
    raise ValueError(f"expected a model name in {MODEL_NAMES}, got {name!r}")


def seq2seq_loss(model: nn.Module, batch: Any) -> torch.Tensor:
    """Teacher-forced cross-entropy: ``model(src, src_lengths, tgt_in)`` against ``tgt_out``."""
    logits, _ = model(batch.src, batch.src_lengths, batch.tgt_in)
    return sequence_cross_entropy(logits, batch.tgt_out)


DecodeFn = Callable[[nn.Module, torch.Tensor, torch.Tensor, int], Any]


@torch.no_grad()
def decode(
    model: nn.Module, data: Any, *, batch_size: int = 500, decode_fn: DecodeFn | None = None
) -> torch.Tensor:
    """Greedy translations of every row of ``data`` (a Seq2SeqData) -> (N, T') token ids.

    ``decode_fn(model, src, src_lengths, max_len)`` returns tokens or ``(tokens, extra)``;
    default: the model's own ``greedy_decode``. Rows are padded with PAD to a common length.
    Each chunk runs on the model's device; the tokens come back on the CPU.
    """
    device = devices.model_device(model)
    max_len = int(data.tgt_out.shape[1]) + 2
    outs = []
    with eval_mode(model):
        for start in range(0, len(data), batch_size):
            part = data[start : start + batch_size].to(device)
            if decode_fn is None:
                out = model.greedy_decode(part.src, part.src_lengths, max_len)
            else:
                out = decode_fn(model, part.src, part.src_lengths, max_len)
            outs.append((out[0] if isinstance(out, tuple) else out).cpu())
    width = max(o.shape[1] for o in outs)
    return torch.cat([nn.functional.pad(o, (0, width - o.shape[1])) for o in outs])


def evaluate(
    model: nn.Module,
    data: Any,
    *,
    decode_fn: DecodeFn | None = None,
    buckets: Any = None,
) -> tuple[float, dict[Any, float]]:
    """(exact-match accuracy, {length bucket: exact-match accuracy}) with greedy decoding;
    ``buckets`` as in :func:`accuracy_by_length` (None: one per source length)."""
    pred = decode(model, data, decode_fn=decode_fn)
    em = exact_match(pred, data.tgt_out).float().mean().item()
    return em, accuracy_by_length(pred, data.tgt_out, data.src_lengths, buckets)


@dataclass
class Run:
    """One trained model and what was measured on it."""

    name: str
    model: nn.Module
    history: History
    exact_match: float  # on the whole test split
    by_length: dict[Any, float]  # source-length bucket ("3-5", ...) -> exact match
    train_time_s: float  # wall time of the optimizer steps (evaluations excluded)
    train_cpu_s: float  # CPU time of the same (all threads of this process)
    curve_time_s: list[float]  # training wall time at each evaluation ...
    curve_exact: list[float]  # ... and the exact match on the eval subset then
    n_params: int = 0

    def __repr__(self) -> str:
        return (
            f"Run({self.name!r}: exact match {self.exact_match:.3f}, "
            f"{self.train_time_s:.1f} s wall, {self.n_params:,} parameters)"
        )


def train_model(
    name: str,
    cfg: Config,
    data: TaskData,
    *,
    seed: int = 0,
    progress: bool | str = "auto",
    device: torch.device | str | None = None,
    make_model: Callable[[], nn.Module] | None = None,
    loss_fn: Callable[[nn.Module, Any], torch.Tensor] | None = None,
    decode_fn: DecodeFn | None = None,
) -> Run:
    """Train model ``name`` for ``cfg.steps`` steps on ``data.train`` and evaluate it, on
    ``device`` (default: the profile's).

    ``make_model()`` builds the model (after seeding; default :func:`build_model`),
    ``loss_fn(model, batch)`` is its loss (default :func:`seq2seq_loss`) and
    ``decode_fn`` its greedy decoder (default: the model's ``greedy_decode``): a notebook
    trains the student's own model, loss and decoder with them.
    Evaluations (greedy exact match on ``cfg.eval_subset`` test pairs) run ``cfg.eval_points``
    times; their own time is subtracted, so ``train_time_s`` counts optimizer steps only.
    ``by_length`` is the final exact match per ``cfg.task.buckets`` length bucket.
    """
    torch.manual_seed(seed)
    model = build_model(name, cfg, data) if make_model is None else make_model()
    subset = data.test[: cfg.eval_subset]
    spent = {"wall": 0.0, "cpu": 0.0}
    curve_time: list[float] = []
    start = {"wall": time.perf_counter(), "cpu": time.process_time()}

    def eval_fn(m: nn.Module) -> dict[str, float]:
        t0, c0 = time.perf_counter(), time.process_time()
        curve_time.append(t0 - start["wall"] - spent["wall"])
        em, _ = evaluate(m, subset, decode_fn=decode_fn)
        spent["wall"] += time.perf_counter() - t0
        spent["cpu"] += time.process_time() - c0
        return {"exact_match": em}

    g = torch.Generator().manual_seed(seed)
    history = train(
        model,
        batches(data.train, cfg.batch_size, g),
        steps=cfg.steps,
        lr=cfg.lr[name],
        warmup=cfg.warmup,
        loss_fn=seq2seq_loss if loss_fn is None else loss_fn,
        eval_fn=eval_fn,
        eval_every=max(1, cfg.steps // cfg.eval_points),
        seed=seed,
        progress=progress,
        desc=name,
        device=devices.resolve(device),
    )
    wall = time.perf_counter() - start["wall"] - spent["wall"]
    cpu = time.process_time() - start["cpu"] - spent["cpu"]
    em, by_len = evaluate(model, data.test, decode_fn=decode_fn, buckets=list(cfg.task.buckets))
    return Run(
        name,
        model,
        history,
        em,
        by_len,
        wall,
        cpu,
        curve_time,
        list(history.eval.get("exact_match", [])),
        sum(p.numel() for p in model.parameters()),
    )


def step_time_by_length(
    model: nn.Module,
    loss_fn: Callable[[nn.Module, Any], torch.Tensor],
    split: Any,
    batch_size: int,
    lengths: tuple[int, ...],
    *,
    repeats: int = 5,
) -> dict[int, float]:
    """Milliseconds of one training step's forward and backward pass (the median of
    ``repeats``, after one warm-up) on a batch of ``batch_size`` sentences of ``split`` whose
    source has exactly each of ``lengths`` words: how the cost of a step grows with the
    sentence length. The gradients are cleared afterwards; the weights do not change."""
    device = devices.model_device(model)
    out: dict[int, float] = {}
    was = model.training
    model.train()
    try:
        for L in lengths:
            idx = (split.src_lengths == L).nonzero().flatten()[:batch_size]
            if len(idx) == 0:
                raise ValueError(f"no sentence of {L} words in this split")
            batch = split[idx].to(device)
            times = []
            for r in range(repeats + 1):
                t0 = time.perf_counter()
                loss_fn(model, batch).backward()
                devices.synchronize(device)
                if r:
                    times.append(time.perf_counter() - t0)
            model.zero_grad(set_to_none=True)
            out[L] = 1000 * sorted(times)[len(times) // 2]
    finally:
        model.train(was)
    return out


@torch.no_grad()
def alignment_by_layer(model: nn.Module, split: Any, *, batch_size: int = 500) -> list[float]:
    """Per decoder layer, the fraction of target words of ``split`` (those with a gold source
    position) whose strongest cross-attention weight, averaged over heads, falls on that
    position; teacher-forced on the gold targets."""
    device = devices.model_device(model)
    hits: list[int] = []
    valid_total = 0
    for start in range(0, len(split), batch_size):
        part = split[start : start + batch_size].to(device)
        maps = cross_attention_maps(model, part.src, part.src_lengths, part.tgt_out)
        gold = part.alignment[:, : part.tgt_out.shape[1]]
        valid = gold >= 0
        valid_total += int(valid.sum())
        for k, w in enumerate(maps):
            n = int(((w.mean(1).argmax(-1) == gold) & valid).sum())
            if len(hits) <= k:
                hits.append(0)
            hits[k] += n
    return [h / max(1, valid_total) for h in hits]


def gpu_summary() -> str:
    """What this notebook runs in the ``gpu`` profile, in words, from the gpu row of its table
    (``course doctor`` prints it beside the estimate)."""

    s = SIZES.gpu
    return (
        f"Transformer vs RNNs on the translation task, {s.steps} steps each, "
        f"{len(s.seeds)} seeds of each attention model"
    )
