"""Notebook 11, section 7, "data not limiting": GPTs of many sizes trained on a generated
language whose entropy is known exactly, on fresh text at every step (no token is ever seen
twice), so the loss can only be limited by the model, never by the data.

    source = make_source(seed=0)                    # a random order-k Markov chain
    source.entropy                                  # its entropy rate E, nats/token: the floor
    sweep = config()                                # the profile's sizes, steps and seeds
    runs = train_all(sweep, source)                 # every size x seed, fresh batches
    fit = fit_known_floor(runs, source.entropy)     # excess loss L - E ~ A N^-alpha

The language. Symbols ``0 .. V-1``; the next symbol depends on the last ``k`` (an order-``k``
Markov chain), through a table of ``V^k`` next-symbol distributions drawn at random (a
Dirichlet whose mean follows Zipf's law, so some symbols and contexts are common and many are
rare, as in text). Its entropy rate ``E = sum_s pi(s) H(P(.|s))`` (``pi`` the stationary
distribution of the contexts) is the lowest loss any model can reach.

The measurement. A model's loss on a held-out stream is measured against the *true*
next-symbol distribution at every position (``-sum_y P(y|s) log Q(y|...)``) instead of the
one symbol drawn there: the same expectation as the usual loss, with far less noise, and its
excess over ``E`` is exactly the model's mean KL divergence from the truth (at least 0).
Positions whose context holds fewer than ``k`` symbols are left out (their floor is higher).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from course_utils.modeling.models.gpt import GPT, GPTConfig
from course_utils.modeling.module_state import eval_mode
from course_utils.runtime.profiles import ProfileTable
from course_utils.scaling import fit_power_law, fit_power_law_with_floor, local_slopes

__all__ = [
    "Source",
    "make_source",
    "sample",
    "Sweep",
    "SIZES",
    "config",
    "Run",
    "non_embedding_params",
    "train_one",
    "train_all",
    "KnownFloorFit",
    "fit_known_floor",
    "bootstrap_exponents",
    "HOFFMANN_ALPHA",
    "source_of",
    "held_out_set",
    "mean_by_size",
    "percentile",
    "row",
    "excess_falls",
    "slopes_agree",
    "SLOPE_FACTOR",
    "FLOOR_TOLERANCE",
]

# Hoffmann et al. 2022 (Chinchilla), approach 3: L(N, D) = E + A/N^0.34 + B/D^0.28. With D
# unlimited it is the form fitted here, E + A N^-alpha; their alpha is for English web text.
HOFFMANN_ALPHA = 0.34

# The bars the notebook claims in every profile (measured in ci and cpu)
SLOPE_FACTOR = 2.0  # every local slope of L - E within this factor of the fitted exponent
FLOOR_TOLERANCE = 0.1  # nats: the floor fitted from the losses alone, against the true E


@dataclass(frozen=True)
class Source:
    """An order-``order`` Markov chain over ``vocab`` symbols: ``table[s]`` is the next-symbol
    distribution after context ``s`` (the last ``order`` symbols as a base-``vocab`` number,
    oldest first); ``stationary[s]`` how often context ``s`` occurs in a long stream."""

    vocab: int
    order: int
    table: torch.Tensor  # (vocab**order, vocab), float64, rows sum to 1
    stationary: torch.Tensor  # (vocab**order,), float64, sums to 1

    @property
    def contexts(self) -> int:
        return self.vocab**self.order

    @property
    def entropy(self) -> float:
        """The entropy rate E = sum_s pi(s) H(P(.|s)) in nats per symbol: the floor."""
        p = self.table
        h = -(p * p.clamp_min(1e-300).log()).sum(-1)
        return float((self.stationary * h).sum())

    @property
    def unigram_entropy(self) -> float:
        """The entropy of one symbol without context (what a model that ignores the context
        can reach at best), nats."""
        marginal = (self.stationary[:, None] * self.table).sum(0)
        return float(-(marginal * marginal.log()).sum())


def make_source(
    vocab: int = 32,
    order: int = 1,
    concentration: float = 0.5,
    zipf: float = 1.0,
    shared: float = 0.5,
    seed: int = 0,
) -> Source:
    """A random order-``order`` Markov chain: each context's next-symbol distribution is a
    Dirichlet draw whose mean is ``shared`` parts one Zipf law ``~ 1/rank^zipf`` common to
    every context (so some symbols, and so some contexts, are frequent and many rare, as in
    text) and ``1 - shared`` parts a Zipf law over a ranking of the context's own, with total
    concentration ``concentration * vocab`` (smaller: peakier distributions, lower entropy)."""
    g = torch.Generator().manual_seed(seed)
    ranks = torch.arange(1, vocab + 1, dtype=torch.float64)
    mean = ranks ** (-zipf)
    mean = mean / mean.sum()
    n_ctx = vocab**order
    alpha = torch.stack(
        [
            shared * mean + (1 - shared) * mean[torch.randperm(vocab, generator=g)]
            for _ in range(n_ctx)
        ]
    )
    alpha = alpha * concentration * vocab
    # Dirichlet by normalised Gamma draws (torch's Gamma sampler takes no generator)
    gammas = torch.from_numpy(
        __import__("numpy").random.default_rng(seed).gamma(alpha.numpy())
    ).clamp_min(1e-12)
    table = gammas / gammas.sum(-1, keepdim=True)
    # stationary distribution of the context chain: s -> (s * V) % V^k + y with P(y|s)
    nxt = (torch.arange(n_ctx)[:, None] * vocab) % n_ctx + torch.arange(vocab)[None, :]
    pi = torch.full((n_ctx,), 1.0 / n_ctx, dtype=torch.float64)
    for _ in range(10_000):
        new = torch.zeros_like(pi).index_add_(0, nxt.reshape(-1), (pi[:, None] * table).reshape(-1))
        if (new - pi).abs().sum() < 1e-13:
            pi = new
            break
        pi = new
    return Source(vocab=vocab, order=order, table=table, stationary=pi / pi.sum())


def sample(
    source: Source, batch: int, length: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch`` fresh streams of ``length`` symbols, each starting from a context drawn from
    the stationary distribution: ``(tokens (batch, length) int64, contexts (batch, length))``
    where ``contexts[:, t]`` is the context after symbol t (valid from t = order - 1 on)."""
    V, k, n_ctx = source.vocab, source.order, source.contexts
    state = torch.multinomial(
        source.stationary.float(), batch, replacement=True, generator=generator
    )
    digits = [(state // V ** (k - 1 - i)) % V for i in range(k)]  # the first k symbols
    tokens, contexts = list(digits), [state.new_full((batch,), -1)] * (k - 1) + [state]
    table = source.table.float()
    while len(tokens) < length:
        y = torch.multinomial(table[state], 1, generator=generator).squeeze(1)
        state = (state * V) % n_ctx + y
        tokens.append(y)
        contexts.append(state)
    return torch.stack(tokens[:length], 1), torch.stack(contexts[:length], 1)


@dataclass(frozen=True)
class Sweep:
    """One profile's data-unlimited sweep."""

    sizes: tuple[tuple[int, int, int], ...]  # (n_layers, d_model, n_heads), smallest first
    steps: int  # optimiser steps of every size (fresh batches: steps x batch x block tokens)
    seeds: tuple[int, ...]  # training seeds (model init and data stream) per size
    block_size: int
    batch_size: int
    lr: float
    min_lr: float
    warmup: int
    eval_streams: int  # held-out streams (of block_size symbols) for the final loss
    vocab: int = 32
    order: int = 1
    concentration: float = 0.5
    shared: float = 0.5
    source_seed: int = 0

    @property
    def tokens(self) -> int:
        """Training tokens of each run, every one of them fresh."""
        return self.steps * self.batch_size * self.block_size


SIZES = ProfileTable(
    # about 15 s on one thread: five sizes over 270x in N, one seed
    ci=Sweep(
        sizes=((1, 4, 1), (1, 8, 2), (1, 16, 2), (2, 24, 2), (2, 48, 4)),
        steps=200,
        seeds=(0,),
        block_size=16,
        batch_size=32,
        lr=1e-2,
        min_lr=1e-3,
        warmup=20,
        eval_streams=256,
    ),
    # about a minute on one thread: the ci sizes, two seeds each, 2.5x the steps. A 3x64 size
    # (N = 148k) was tried at this budget and fell off the line (local slope 0.09 against about
    # 0.5 below it): 500 steps are too few for it, so the sweep stops at 2x48.
    cpu=Sweep(
        sizes=((1, 4, 1), (1, 8, 2), (1, 16, 2), (2, 24, 2), (2, 48, 4)),
        steps=500,
        seeds=(0, 1),
        block_size=16,
        batch_size=32,
        lr=1e-2,
        min_lr=1e-3,
        warmup=50,
        eval_streams=512,
    ),
    # one GPU: the same sizes, three seeds, three times the cpu steps on twice the batch
    gpu=Sweep(
        sizes=((1, 4, 1), (1, 8, 2), (1, 16, 2), (2, 24, 2), (2, 48, 4)),
        steps=1500,
        seeds=(0, 1, 2),
        block_size=16,
        batch_size=64,
        lr=1e-2,
        min_lr=1e-3,
        warmup=100,
        eval_streams=2048,
    ),
)


def config(profile: str | None = None) -> Sweep:
    """The data-unlimited sweep of the active profile (or of ``profile``)."""
    return SIZES.for_profile(profile)


def source_of(sweep: Sweep) -> Source:
    """The generated language the sweep trains on."""
    return make_source(
        sweep.vocab, sweep.order, sweep.concentration, shared=sweep.shared, seed=sweep.source_seed
    )


def model_config(size: tuple[int, int, int], sweep: Sweep) -> GPTConfig:
    n_layers, d_model, n_heads = size
    return GPTConfig(
        vocab_size=sweep.vocab,
        block_size=sweep.block_size,
        n_layers=n_layers,
        n_heads=n_heads,
        d_model=d_model,
        dropout=0.0,
        bias=False,
    )


def non_embedding_params(size: tuple[int, int, int], sweep: Sweep) -> int:
    """Kaplan et al.'s N (as :mod:`scaling_sweep` counts it): without the token embedding
    (tied to the LM head) and the position embedding."""
    cfg = model_config(size, sweep)
    return cfg.param_count(non_embedding=True) - cfg.vocab_size * cfg.d_model


@dataclass(frozen=True)
class Run:
    size: tuple[int, int, int]
    seed: int
    params: int  # non-embedding N
    tokens: int  # fresh training tokens
    loss: float  # expected loss against the true distribution, nats/symbol
    half_loss: float  # the same at half the steps
    excess: float  # loss - E: the mean KL divergence from the true distribution
    seconds: float

    @property
    def name(self) -> str:
        return f"{self.size[0]}x{self.size[1]}"


@torch.no_grad()
def expected_loss(
    model: GPT, source: Source, tokens: torch.Tensor, contexts: torch.Tensor
) -> tuple[float, float]:
    """``(loss, excess)``: the mean of ``-sum_y P(y|s_t) log Q(y|x_<=t)`` over positions whose
    context is complete, and its mean excess over ``H(P(.|s_t))`` (the KL divergence)."""
    with eval_mode(model):
        logits, _ = model(tokens)
    logq = F.log_softmax(logits.double(), -1)  # (B, T, V)
    valid = contexts >= 0
    p = source.table.to(logq.device)[contexts.clamp_min(0)]  # (B, T, V)
    ce = -(p * logq).sum(-1)
    h = -(p * p.clamp_min(1e-300).log()).sum(-1)
    return float(ce[valid].mean()), float((ce - h)[valid].mean())


def train_one(
    sweep: Sweep,
    source: Source,
    size: tuple[int, int, int],
    seed: int,
    held_out: tuple[torch.Tensor, torch.Tensor],
    device: torch.device | str = "cpu",
) -> Run:
    """Train one size from ``seed`` on ``sweep.steps`` fresh batches (AdamW, linear warmup,
    cosine decay); measure its expected loss on ``held_out`` at half and at all the steps.
    The data are drawn on the CPU (one seeded stream per seed), the model runs on ``device``."""
    torch.manual_seed(seed)
    model = GPT(model_config(size, sweep)).to(device)
    held_out = tuple(t.to(device) for t in held_out)
    data = torch.Generator().manual_seed(10_000 + seed)
    opt = torch.optim.AdamW(model.parameters(), lr=sweep.lr, betas=(0.9, 0.99), weight_decay=0.0)
    start = time.perf_counter()
    half = float("nan")
    for step in range(sweep.steps):
        if step < sweep.warmup:
            lr = sweep.lr * (step + 1) / sweep.warmup
        else:
            t = (step - sweep.warmup) / max(1, sweep.steps - sweep.warmup)
            lr = sweep.min_lr + 0.5 * (sweep.lr - sweep.min_lr) * (1 + math.cos(math.pi * t))
        for group in opt.param_groups:
            group["lr"] = lr
        x = sample(source, sweep.batch_size, sweep.block_size + 1, data)[0].to(device)
        _, loss = model(x[:, :-1], x[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step + 1 == sweep.steps // 2:
            half = expected_loss(model, source, *held_out)[0]
    loss, excess = expected_loss(model, source, *held_out)
    return Run(
        size=size,
        seed=seed,
        params=non_embedding_params(size, sweep),
        tokens=sweep.tokens,
        loss=loss,
        half_loss=half,
        excess=excess,
        seconds=time.perf_counter() - start,
    )


def held_out_set(sweep: Sweep, source: Source) -> tuple[torch.Tensor, torch.Tensor]:
    """The held-out streams every run is measured on (one fixed draw, seed 123)."""
    return sample(source, sweep.eval_streams, sweep.block_size, torch.Generator().manual_seed(123))


def train_all(
    sweep: Sweep,
    source: Source,
    *,
    device: torch.device | str = "cpu",
    report: Callable[[Run], None] | None = None,
) -> list[Run]:
    """Every size x seed of ``sweep``, smallest size first; ``report(run)`` as each ends."""
    held_out = held_out_set(sweep, source)
    runs = []
    for size in sweep.sizes:
        for seed in sweep.seeds:
            run = train_one(sweep, source, size, seed, held_out, device)
            if report is not None:
                report(run)
            runs.append(run)
    return runs


def mean_by_size(runs: Sequence[Run]) -> list[tuple[int, float, float]]:
    """``(N, mean loss, mean excess)`` per size, in order of N."""
    by: dict[int, list[Run]] = {}
    for r in runs:
        by.setdefault(r.params, []).append(r)
    return [
        (n, sum(r.loss for r in rs) / len(rs), sum(r.excess for r in rs) / len(rs))
        for n, rs in sorted(by.items())
    ]


@dataclass(frozen=True)
class KnownFloorFit:
    """Fits of the per-size mean losses: the known floor, a fitted floor, and no floor."""

    entropy: float  # E, known
    ns: tuple[int, ...]
    losses: tuple[float, ...]
    excess: tuple[float, ...]
    a_known: float  # L = E + a_known * N^-alpha_known (E known: a line in log(L - E))
    alpha_known: float
    e_fit: float  # L = e_fit + a_fit * N^-alpha_fit (all three fitted)
    a_fit: float
    alpha_fit: float
    a_pure: float  # L = a_pure * N^-alpha_pure (no floor)
    alpha_pure: float

    def curve(self, n: float, which: str) -> float:
        if which == "known":
            return self.entropy + self.a_known * n ** (-self.alpha_known)
        if which == "fitted":
            return self.e_fit + self.a_fit * n ** (-self.alpha_fit)
        return self.a_pure * n ** (-self.alpha_pure)

    def residuals(self, which: str) -> list[float]:
        return [lo - self.curve(n, which) for n, lo in zip(self.ns, self.losses)]

    def squared_error(self, which: str) -> float:
        return sum(r * r for r in self.residuals(which))

    def excess_slopes(self) -> list[float]:
        """Local log-log slopes of the excess loss L - E between neighbouring sizes."""
        return local_slopes(self.ns, self.excess)

    def loss_slopes(self) -> list[float]:
        """Local log-log slopes of the loss L itself."""
        return local_slopes(self.ns, self.losses)


def _fit_points(
    ns: Sequence[float], losses: Sequence[float], entropy: float
) -> tuple[float, float]:
    return fit_power_law(ns, [lo - entropy for lo in losses])


def fit_known_floor(runs: Sequence[Run], entropy: float) -> KnownFloorFit:
    """Fit the per-size mean losses three ways (see :class:`KnownFloorFit`)."""
    rows = mean_by_size(runs)
    ns = [n for n, _, _ in rows]
    losses = [lo for _, lo, _ in rows]
    excess = [ex for _, _, ex in rows]
    a_known, alpha_known = fit_power_law(ns, excess)
    e_fit, a_fit, alpha_fit = fit_power_law_with_floor(ns, losses)
    a_pure, alpha_pure = fit_power_law(ns, losses)
    return KnownFloorFit(
        entropy=entropy,
        ns=tuple(ns),
        losses=tuple(losses),
        excess=tuple(excess),
        a_known=a_known,
        alpha_known=alpha_known,
        e_fit=e_fit,
        a_fit=a_fit,
        alpha_fit=alpha_fit,
        a_pure=a_pure,
        alpha_pure=alpha_pure,
    )


def bootstrap_exponents(runs: Sequence[Run], samples: int = 1000, seed: int = 0) -> list[float]:
    """The known-floor exponent refitted on ``samples`` bootstrap resamples of the runs: the
    sizes are resampled with replacement (at least three different ones), and within each drawn
    size one of its seeds' runs. Sorted; its 5th and 95th percentiles make a 90% interval."""
    rng = random.Random(seed)
    by: dict[int, list[Run]] = {}
    for r in runs:
        by.setdefault(r.params, []).append(r)
    sizes = sorted(by)
    out = []
    while len(out) < samples:
        drawn = [rng.choice(sizes) for _ in sizes]
        if len(set(drawn)) < 3:
            continue
        picked = [rng.choice(by[n]) for n in drawn]
        out.append(fit_power_law([r.params for r in picked], [r.excess for r in picked])[1])
    return sorted(out)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0..1) of sorted ``values`` (nearest rank)."""
    i = min(len(values) - 1, max(0, round(q * (len(values) - 1))))
    return values[i]


def slopes_agree(fit: KnownFloorFit, factor: float = SLOPE_FACTOR) -> bool:
    """True when every local log-log slope of the excess ``L - E`` lies within ``factor`` of
    the fitted exponent: a straight line, no bend."""
    a = fit.alpha_known
    return a > 0 and all(a / factor <= s <= a * factor for s in fit.excess_slopes())


def excess_falls(fit: KnownFloorFit) -> bool:
    """True when the mean excess loss falls at every step up in size."""
    return all(b < a for a, b in zip(fit.excess, fit.excess[1:]))


def row(run: Run) -> str:
    return (
        f"{run.name:>5} seed {run.seed}  N = {run.params:>7,}  D = {run.tokens:>9,} fresh  "
        f"loss {run.loss:.4f} (half-way {run.half_loss:.4f})  L - E = {run.excess:.4f}  "
        f"({run.seconds:.1f} s)"
    )
