"""Notebook 08 (a Transformer language model): sizes per profile, the corpus, training, evaluation.

    cfg = config()                                  # the active profile's recipe
    data = load_dataset()                           # tiny-shakespeare (bundled with the package)
    model, history = train_char_gpt(cfg, data)      # or time_budget_s=... to stop on wall time
    history.final_val, history.tokens_per_second

The ``cpu`` recipe is nanoGPT's CPU size (4 layers, 4 heads, 128 wide, context 64) on
tiny-shakespeare, tuned to beat nanoGPT's own CPU recipe (batch 12, lr 1e-3, 2000 steps) at the
same wall time on the same machine (``course bench gpt`` runs both): a higher learning rate, a
larger batch (more tokens per second from bigger matrix products), a short warmup, cosine
decay to a small final rate, no dropout, no biases and few, small evaluations.
"""

from __future__ import annotations

import copy
import os
import statistics
import time
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from course_utils.data.text import CharDataset, TextCorpus, load_text_corpus
from course_utils.modeling.models.gpt import GPT, GPTConfig
from course_utils.modeling.module_state import eval_mode
from course_utils.runtime import devices
from course_utils.runtime.precision import dtype_name
from course_utils.runtime.profiles import ProfileTable, cap_steps, current
from course_utils.runtime.training import History, lr_schedule, train

__all__ = [
    "Config",
    "config",
    "load_dataset",
    "unigram_entropy",
    "probe_model_config",
    "initial_loss_at_std",
    "estimate_loss",
    "CharGPTHistory",
    "train_char_gpt",
    "lr_at",
    "time_generation",
]


@dataclass(frozen=True)
class Config:
    """One training recipe: the model's size and how to train it."""

    model: GPTConfig  # vocab_size is replaced by the corpus's
    batch_size: int  # sequences per step (each block_size tokens)
    steps: int  # optimizer steps (a time budget may stop earlier)
    lr: float  # peak AdamW learning rate
    min_lr: float  # final learning rate of the cosine decay
    warmup: int  # linear warmup steps
    weight_decay: float = 0.1  # on matrices only
    betas: tuple[float, float] = (0.9, 0.99)
    grad_clip: float = 1.0
    eval_every: int = 200  # steps between evaluations during training
    eval_batches: int = 8  # batches per split per evaluation during training
    final_eval_batches: int = 50  # batches per split for the final, more precise estimate
    eval_batch_size: int = 64
    time_budget_s: float | None = None  # stop training after this many seconds (None: steps)
    # Keep the weights of the best periodic evaluation (nanoGPT's always_save_checkpoint=False
    # for this corpus: a 10M-parameter model overfits 1M characters, val turns up near the end)
    keep_best: bool = False
    autocast_dtype: torch.dtype | None = None  # e.g. torch.bfloat16 on a GPU
    device: str | None = None  # None: the profile's device

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.model.block_size


# The validation loss (nats/char) each recipe is held to on tiny-shakespeare
GPU_VAL_BAR = 1.47  # nanoGPT's config/train_shakespeare_char.py (about 3 minutes on an A100)
CPU_VAL_BAR = 1.80  # the cpu recipe, in the wall time of nanoGPT's CPU recipe (course bench gpt)

RECIPES = ProfileTable(
    # seconds on 2 CPU cores: a small model that still learns words and line structure
    ci=Config(
        model=GPTConfig(block_size=32, n_layers=2, n_heads=4, d_model=64, dropout=0.0, bias=False),
        batch_size=16,
        steps=400,
        lr=8e-3,
        min_lr=8e-4,
        warmup=40,
        eval_every=100,
        eval_batches=4,
        final_eval_batches=10,
        eval_batch_size=32,
    ),
    # nanoGPT's CPU size; tuned (see the module docstring and the notebook's closing note)
    cpu=Config(
        model=GPTConfig.preset("nanogpt-cpu", bias=False),
        batch_size=24,
        steps=1100,
        lr=1.2e-2,
        min_lr=1e-4,
        warmup=70,
        eval_every=250,
        eval_batches=4,
        final_eval_batches=50,
        eval_batch_size=64,
    ),
    # nanoGPT's config/train_shakespeare_char.py (val GPU_VAL_BAR in about 3 minutes on an A100)
    gpu=Config(
        model=GPTConfig.preset("nanogpt-gpu", bias=False),
        batch_size=64,
        steps=5000,
        lr=1e-3,
        min_lr=1e-4,
        warmup=100,
        eval_every=250,
        eval_batches=20,
        final_eval_batches=100,
        eval_batch_size=64,
        keep_best=True,
        autocast_dtype=torch.bfloat16,
    ),
)


def config(profile: str | None = None) -> Config:
    """The recipe of the active profile (or of ``profile``: "ci", "cpu" or "gpu"); a copy, so
    changing its model's fields leaves :data:`RECIPES` as it is."""
    return copy.deepcopy(RECIPES.for_profile(profile))


def load_dataset(path: str | os.PathLike | None = None, val_fraction: float = 0.1) -> CharDataset:
    """The character corpus as a :class:`CharDataset` with nanoGPT's 90/10 split.

    tiny-shakespeare from ``path``, else from ``$COURSE_DATA_DIR`` (or the cache folder), else
    the copy bundled with the package; only if that is missing or damaged, the offline generated
    corpus (its ``corpus.note`` says so and how to get the real text).
    """
    corpus: TextCorpus = load_text_corpus(path, allow_fallback=True)
    return CharDataset(corpus, val_fraction=val_fraction)


def probe_model_config(vocab_size: int) -> GPTConfig:
    """The small model of 08.Q1's initialisation probe: the ``ci`` recipe's 2 layers x 4 heads x
    64, in every profile, so the grader recomputes the number a student's run printed."""
    return replace(RECIPES.ci.model, vocab_size=vocab_size)


@torch.no_grad()
def initial_loss_at_std(data: CharDataset, std: float, seed: int = 0) -> float:
    """The loss at initialisation of :func:`probe_model_config`'s GPT when every weight matrix
    (the tied token table included) is drawn from N(0, ``std``) instead of GPT-2's 0.02 scheme,
    on 16 training windows drawn with ``seed`` (question 08.Q1). Deterministic on any CPU up to
    float rounding; on tiny-shakespeare std 0.02 gives 4.19 (log V = 4.17), std 0.2 gives 5.51."""
    cfg = probe_model_config(data.vocab_size)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = GPT(cfg).eval()
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, std)
        x, y = data.get_batch("train", cfg.block_size, 16, torch.Generator().manual_seed(seed))
        _, loss = model(x, y)
    return float(loss)


def unigram_entropy(data: torch.Tensor, vocab_size: int) -> float:
    """Entropy (nats/char) of the character frequencies in ``data`` (N,): the loss of the best
    model that ignores context, the baseline a language model must beat."""
    counts = torch.bincount(data, minlength=vocab_size).double()
    p = counts[counts > 0] / counts.sum()
    return float(-(p * p.log()).sum())


@torch.no_grad()
def estimate_loss(
    model: GPT,
    data: CharDataset,
    *,
    batches: int = 20,
    batch_size: int = 64,
    block_size: int | None = None,
    seed: int = 1234,
    splits: tuple[str, ...] = ("train", "val"),
    autocast_dtype: torch.dtype | None = None,
) -> dict[str, float]:
    """Mean next-token cross-entropy on ``batches`` random batches of each split (nanoGPT's
    ``estimate_loss``). The windows come from a fixed seed, so two models (or two points of
    one training run) are measured on the same text. Returns ``{"train": ..., "val": ...}``."""
    device = devices.model_device(model)
    T = block_size or model.config.block_size
    out = {}
    with eval_mode(model):
        for split in splits:
            gen = torch.Generator().manual_seed(seed)
            total = 0.0
            for _ in range(batches):
                x, y = data.get_batch(split, T, batch_size, gen, device)
                with _autocast(device, autocast_dtype):
                    _, loss = model(x, y)
                total += float(loss)
            out[split] = total / batches
    return out


def _autocast(device: torch.device, dtype: torch.dtype | None):
    return devices.autocast(device, dtype)


@dataclass
class CharGPTHistory(History):
    """A :class:`~course_utils.runtime.training.History` plus what a language-model run reports."""

    tokens_per_step: int = 0
    final: dict[str, float] = field(default_factory=dict)  # final estimate_loss
    kept_step: int | None = None  # the evaluation whose weights were kept (Config.keep_best)

    @property
    def tokens_seen(self) -> int:
        return self.steps_done * self.tokens_per_step

    @property
    def tokens_per_second(self) -> float:
        """Training throughput: tokens / seconds spent in optimizer steps."""
        return self.tokens_seen / self.train_seconds if self.train_seconds else float("nan")

    @property
    def final_val(self) -> float:
        return self.final.get("val", float("nan"))

    def summary(self) -> str:
        """One line: steps, tokens, time, throughput and the final losses."""
        return (
            f"{self.steps_done} steps x {self.tokens_per_step} tokens = "
            f"{self.tokens_seen / 1e6:.2f}M tokens in {self.wall_seconds:.1f} s "
            f"({self.train_seconds:.1f} s in optimizer steps, "
            f"{self.tokens_per_second:,.0f} tokens/s); final loss: train "
            f"{self.final.get('train', float('nan')):.3f}, val {self.final_val:.3f} "
            f"(stopped by {self.stopped_by}"
            + (
                f"; weights of step {self.kept_step} kept, val's best"
                if self.kept_step is not None
                else ""
            )
            + ")"
        )


def lr_at(step: int, cfg: Config, time_fraction: float = 0.0) -> float:
    """The recipe's learning rate at ``step``: :func:`course_utils.runtime.training.lr_schedule` with
    ``cfg``'s peak, warmup and final rate (linear warmup, then half a cosine)."""
    return lr_schedule(
        step,
        lr=cfg.lr,
        steps=cfg.steps,
        warmup=cfg.warmup,
        min_lr=cfg.min_lr,
        time_fraction=time_fraction,
    )


def train_char_gpt(
    cfg: Config,
    data: CharDataset | TextCorpus | str,
    *,
    steps: int | None = None,
    time_budget_s: float | None = None,
    seed: int = 0,
    model: GPT | None = None,
    progress: bool = True,
    log_every: int = 10,
    desc: str = "training GPT",
) -> tuple[GPT, CharGPTHistory]:
    """Train a character-level GPT on ``data`` with the course's loop
    (:func:`course_utils.runtime.training.train`); returns ``(model, history)``.

    ``steps`` (default ``cfg.steps``) and ``time_budget_s`` (default ``cfg.time_budget_s``):
    training stops at whichever comes first, and the learning-rate decay follows the larger
    of the two progress fractions, so a time-limited run still ends its cosine decay on time.
    The wall time counted includes the periodic evaluations (as nanoGPT's does) but not the
    final, larger ``estimate_loss`` stored in ``history.final``.
    Each step: a random batch (B, T) of windows and its shifted targets, forward, backward,
    gradient clipping and a (fused) AdamW step with weight decay on matrices only.
    Deterministic for a given ``seed`` when stopped by steps.
    """
    ds = data if isinstance(data, CharDataset) else CharDataset(data)
    steps = cap_steps(cfg.steps if steps is None else steps)  # COURSE_MAX_STEPS: GPU check
    device = torch.device(cfg.device) if cfg.device else current().device
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)  # draws the batch windows, on the CPU with the data
    if model is None:
        model = GPT(replace(cfg.model, vocab_size=ds.vocab_size))
    model.to(device)
    T, B = model.config.block_size, cfg.batch_size

    keeper = _BestKeeper(cfg.keep_best)

    def evaluate(net: GPT) -> dict[str, float]:
        losses = estimate_loss(
            net,
            ds,
            batches=cfg.eval_batches,
            batch_size=cfg.eval_batch_size,
            autocast_dtype=cfg.autocast_dtype,
        )
        keeper.see(net, losses["val"])
        return {"train loss (eval)": losses["train"], "val loss": losses["val"]}

    history = train(
        model,
        lambda step: ds.get_batch("train", T, B, gen, device),
        steps=steps,
        lr=cfg.lr,
        loss_fn=lambda net, batch: net(*batch)[1],
        weight_decay=cfg.weight_decay,
        betas=cfg.betas,
        fused=device.type in ("cuda", "cpu"),
        warmup=cfg.warmup,
        min_lr=cfg.min_lr,
        grad_clip=cfg.grad_clip,
        eval_fn=evaluate if cfg.eval_every else None,
        eval_every=cfg.eval_every or None,
        eval_at_end=False,  # the final, larger estimate below replaces it
        log_every=log_every,
        time_budget_s=cfg.time_budget_s if time_budget_s is None else time_budget_s,
        autocast_dtype=cfg.autocast_dtype,
        progress=progress,
        desc=desc,
    )
    hist = CharGPTHistory(**vars(history), tokens_per_step=B * T)
    hist.kept_step = keeper.restore(model, hist.eval_step)
    hist.final = estimate_loss(
        model,
        ds,
        batches=cfg.final_eval_batches,
        batch_size=cfg.eval_batch_size,
        autocast_dtype=cfg.autocast_dtype,
    )
    _record_eval(hist, max(hist.steps_done - 1, 0), hist.wall_seconds, hist.final)
    return model, hist


class _BestKeeper:
    """Config.keep_best: remembers the weights of the periodic evaluation with the lowest
    validation loss (nanoGPT's always_save_checkpoint=False) and puts them back at the end."""

    def __init__(self, enabled: bool) -> None:
        self.enabled, self.calls, self.index = enabled, 0, None
        self.val, self.state = float("inf"), None

    def see(self, net: torch.nn.Module, val: float) -> None:
        """One periodic evaluation of ``net`` with validation loss ``val``."""
        self.calls += 1
        if self.enabled and val < self.val:
            self.val, self.index = val, self.calls - 1
            self.state = {k: v.detach().clone() for k, v in net.state_dict().items()}

    def restore(self, net: torch.nn.Module, eval_steps: list[int]) -> int | None:
        """Load the kept weights into ``net`` when an earlier evaluation beat the last one;
        returns that evaluation's step (``eval_steps[index]``), else None."""
        if self.index is None or self.index == self.calls - 1:
            return None
        net.load_state_dict(self.state)
        return eval_steps[self.index]


def _record_eval(hist: History, step: int, t: float, losses: dict[str, float]) -> None:
    hist.eval_step.append(step)
    hist.eval_time.append(t)
    hist.eval.setdefault("train loss (eval)", []).append(losses["train"])
    hist.eval.setdefault("val loss", []).append(losses["val"])


@torch.no_grad()
def time_generation(
    model: GPT,
    prompt: torch.Tensor,
    max_new_tokens: int,
    *,
    use_cache: bool,
    repeats: int = 3,
    seed: int = 0,
) -> tuple[float, torch.Tensor]:
    """Best-of-``repeats`` wall time (s) of ``model.generate`` and the generated ids (B, T + new).

    Greedy decoding (temperature 0) so that the runs with and without the cache can be
    compared token for token. The prompt moves to the model's device; the ids come back on the
    CPU; the clock waits for the device."""
    device = devices.model_device(model)
    prompt = prompt.to(device)
    best, out = float("inf"), prompt
    for _ in range(repeats):
        devices.synchronize(device)
        t0 = time.perf_counter()
        out = model.generate(
            prompt,
            max_new_tokens,
            temperature=0.0,
            use_cache=use_cache,
            generator=devices.generator(seed, device),
        )
        devices.synchronize(device)
        best = min(best, time.perf_counter() - t0)
    return best, out.cpu()


def next_token_distribution(model: GPT, ids: torch.Tensor) -> torch.Tensor:
    """Logits (V,) of the token after the 1-D prompt ``ids`` (cropped to the block size), in
    float32 on the CPU, ready to plot; the prompt runs on the model's device."""
    ctx = devices.to_model_device(model, ids[-model.config.block_size :][None, :])
    with torch.no_grad():
        logits, _ = model(ctx)
    return logits[0, -1].float().cpu()


def on_model_device(sample_fn):
    """Wrap a sampler ``sample_fn(model, idx, max_new_tokens, ..., generator=None)`` (the
    notebook's ``generate``) so that it runs where the model is: the prompt ``idx`` moves to the
    model's device, ``seed=`` becomes a generator on that device, and the ids come back on the
    CPU. ``sample(model, prompt, 100, temperature=0.8, seed=1) -> (B, T + 100)``."""

    def sample(
        model: GPT, idx: torch.Tensor, max_new_tokens: int, *, seed: int | None = None, **kw
    ):
        device = devices.model_device(model)
        if seed is not None:
            kw["generator"] = devices.generator(seed, device)
        return sample_fn(model, idx.to(device), max_new_tokens, **kw).cpu()

    sample.__doc__ = sample_fn.__doc__
    sample.__name__ = getattr(sample_fn, "__name__", "sample")
    return sample


def describe(cfg: Config) -> dict[str, Any]:
    """The recipe as a flat dict for printing."""
    m = cfg.model
    return {
        "n_layers": m.n_layers,
        "n_heads": m.n_heads,
        "d_model": m.d_model,
        "d_ff": m.d_ff,
        "block_size": m.block_size,
        "bias": m.bias,
        "dropout": m.dropout,
        "batch": cfg.batch_size,
        "steps": cfg.steps,
        "tokens/step": cfg.tokens_per_step,
        "lr": cfg.lr,
        "min_lr": cfg.min_lr,
        "warmup": cfg.warmup,
        "weight_decay": cfg.weight_decay,
        "betas": cfg.betas,
        "time_budget_s": cfg.time_budget_s,
    }


__all__ += ["next_token_distribution", "on_model_device", "describe"]


# ----------------------------------------------------------------------------- the KV cache


@dataclass(frozen=True)
class CacheTiming:
    """Greedy generation with and without the KV cache, timed in alternation.

    ``plain_s`` / ``cache_s``: median wall seconds of one generation; ``speedup``: the median
    of the per-round ratios plain / cache (each round times both, one right after the other,
    so a burst of load from another program hits both sides of a ratio);
    ``same_tokens``: whether both runs produced the same ids; ``full_forwards``: how many of
    the cached run's steps ran the model on more than one position (see
    :func:`count_full_forwards`)."""

    new_tokens: int
    plain_s: float
    cache_s: float
    speedup: float
    same_tokens: bool
    full_forwards: int


def count_full_forwards(model: GPT, prompt: torch.Tensor, max_new_tokens: int) -> int:
    """How many forward passes of ``model.generate(..., use_cache=True)`` (greedy) see more
    than one position: the prompt's (if it has more than one token), plus one for every step
    after the window is full, where the cache is rebuilt from the cropped context."""
    count = 0

    def hook(module, args, kwargs):
        nonlocal count
        idx = args[0] if args else kwargs["idx"]
        count += int(idx.shape[1] > 1)

    handle = model.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        model.generate(prompt.to(devices.model_device(model)), max_new_tokens, temperature=0.0)
    finally:
        handle.remove()
    return count


def compare_generation(
    model: GPT, prompt: torch.Tensor, max_new_tokens: int, rounds: int = 5
) -> CacheTiming:
    """Time greedy generation of ``max_new_tokens`` tokens without and with the KV cache,
    alternating for ``rounds`` rounds (see :class:`CacheTiming`). ``prompt`` (1, T)."""
    if rounds < 1:
        raise ValueError(f"expected rounds >= 1, got {rounds}")
    plain, cached, ratios = [], [], []
    same = True
    for _ in range(rounds):
        t_plain, out_plain = time_generation(
            model, prompt, max_new_tokens, use_cache=False, repeats=1
        )
        t_cache, out_cache = time_generation(
            model, prompt, max_new_tokens, use_cache=True, repeats=1
        )
        plain.append(t_plain)
        cached.append(t_cache)
        ratios.append(t_plain / t_cache)
        same = same and torch.equal(out_plain, out_cache)
    return CacheTiming(
        new_tokens=max_new_tokens,
        plain_s=statistics.median(plain),
        cache_s=statistics.median(cached),
        speedup=statistics.median(ratios),
        same_tokens=same,
        full_forwards=count_full_forwards(model, prompt, max_new_tokens),
    )


__all__ += ["CacheTiming", "count_full_forwards", "compare_generation"]


def gpu_summary() -> str:
    """What this notebook runs in the ``gpu`` profile, in words, from the gpu row of its table
    (``course doctor`` prints it beside the estimate)."""

    c = RECIPES.gpu
    m = c.model
    return (
        f"GPT {m.n_layers}x{m.n_heads}x{m.d_model}, {c.steps} steps, {dtype_name(c.autocast_dtype)}, "
        f"fused AdamW (bar: val <= {GPU_VAL_BAR})"
    )
