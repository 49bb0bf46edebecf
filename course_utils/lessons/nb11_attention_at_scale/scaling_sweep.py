"""Notebook 11, section 7 (scale, measured): a sweep of GPT sizes on the character corpus of
notebook 08, its parameter and compute counts, and what the notebook claims about it.

    sweep = config()                               # the active profile's sizes and budgets
    data = nb08.load_dataset()                     # tiny-shakespeare if found, else offline text
    runs = same_tokens(sweep, data)                # every size, the same number of tokens
    runs += same_compute(sweep, data, runs)        # every size, the same training FLOPs
    a, alpha = fit_power_law([r.params for r in runs_of(runs, SAME_TOKENS)], ...)

Parameters are counted as Kaplan et al. (2020) count them: **non-embedding** parameters N,
every weight except the token and position embeddings (the LM head is tied to the token
embedding, so it is left out with it). Training compute is their ``C ~ 6 N D`` FLOPs for D
training tokens: 2 N per token for the forward pass, 4 N for the backward pass (the
attention scores' own ``O(T)`` share per token is left out, as theirs is).

Every run trains with notebook 08's loop (:func:`course_utils.lessons.nb08_gpt.recipe.train_char_gpt`):
AdamW, linear warmup, cosine decay, one learning rate for every size, one seed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from course_utils.data.text import CharDataset
from course_utils.lessons.nb08_gpt import recipe as nb08
from course_utils.modeling.models.gpt import GPTConfig
from course_utils.runtime.profiles import ProfileTable
from course_utils.scaling import fit_power_law

__all__ = [
    "Sweep",
    "Run",
    "SIZES",
    "config",
    "model_config",
    "non_embedding_params",
    "training_flops",
    "tokens_for_flops",
    "train_one",
    "same_tokens",
    "same_compute",
    "runs_of",
    "frontier",
    "winners",
    "falls_with_size",
    "SAME_TOKENS",
    "SAME_COMPUTE",
    "ALPHA_RANGE",
    "MONOTONE_SLACK",
    "KAPLAN_ALPHA_N",
    "KAPLAN_ALPHA_C",
    "CHINCHILLA_TOKENS_PER_PARAM",
    "fit_same_tokens",
    "describe",
    "row",
]

SAME_TOKENS, SAME_COMPUTE = "same tokens", "same compute"

# The bars the notebook claims in every profile (measured in ci and cpu, see the notebook)
ALPHA_RANGE = (0.01, 0.6)  # (turn 4) the band 11.Q1 used to ask for; kept for old notebooks
MONOTONE_SLACK = 0.02  # nats/char: a larger model may lose at most this much to a smaller one

# Published constants the notebook compares with (cited there)
KAPLAN_ALPHA_N = 0.076  # Kaplan et al. 2020, L(N), non-embedding N, data not limiting
KAPLAN_ALPHA_C = 0.050  # Kaplan et al. 2020, L(C_min) on the compute-efficient frontier
CHINCHILLA_TOKENS_PER_PARAM = 20  # Hoffmann et al. 2022: N_opt and D_opt both ~ C^0.5


@dataclass(frozen=True)
class Sweep:
    """One profile's sweep: the model sizes and how each is trained."""

    sizes: tuple[tuple[int, int, int], ...]  # (n_layers, d_model, n_heads), smallest first
    tokens: int  # training tokens of every size in the same-token sweep
    # same-compute runs: (i, (j, ...)) trains sizes j, ... with the FLOPs of size i's
    # same-token run (indices into sizes; sizes far from i would need absurdly many or few steps)
    compute: tuple[tuple[int, tuple[int, ...]], ...]
    block_size: int  # context length T
    batch_size: int  # sequences per step (B); each step sees B * T tokens
    lr: float  # peak AdamW learning rate, the same for every size
    min_lr: float  # end of the cosine decay
    warmup_fraction: float  # of each run's steps
    eval_batches: int  # batches per split for the final loss estimate
    eval_batch_size: int
    autocast_dtype: torch.dtype | None = None

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.block_size


SIZES = ProfileTable(
    # about 45 CPU seconds, one thread: the cpu profile's five sizes (126x in N, so that the
    # bend of section 7 can show), on fewer tokens and a shorter context. Batch 32 (not 16):
    # 15% less CPU for the same tokens, and a clearer bend (measured on one run each: the
    # floor fit's squared error 20x below the pure law's, against 5.9x at batch 16; the
    # claim asks 4x)
    ci=Sweep(
        sizes=((2, 16, 2), (2, 32, 2), (2, 64, 4), (3, 96, 4), (4, 128, 4)),
        tokens=300_000,
        compute=((0, (1, 2)),),
        block_size=32,
        batch_size=32,
        lr=7e-3,
        min_lr=7e-4,
        warmup_fraction=0.1,
        eval_batches=10,
        eval_batch_size=64,
    ),
    # a few minutes on 2 cores: five sizes spanning about 60x in non-embedding parameters
    cpu=Sweep(
        sizes=((2, 16, 2), (2, 32, 2), (2, 64, 4), (3, 96, 4), (4, 128, 4)),
        tokens=500_000,
        compute=((2, (1, 3, 4)),),
        block_size=64,
        batch_size=16,
        lr=1e-2,
        min_lr=1e-3,
        warmup_fraction=0.1,
        eval_batches=20,
        eval_batch_size=64,
    ),
    # one data-centre GPU: seven sizes up to nanoGPT's 6 x 384, about 4 passes over the text
    gpu=Sweep(
        sizes=(
            (2, 64, 4),
            (2, 128, 4),
            (4, 128, 4),
            (4, 192, 6),
            (4, 256, 8),
            (6, 320, 8),
            (6, 384, 6),
        ),
        tokens=4_000_000,
        compute=((2, (0, 1, 3, 4)), (4, (2, 3, 5, 6))),
        block_size=128,
        batch_size=32,
        lr=3e-3,
        min_lr=3e-4,
        warmup_fraction=0.05,
        eval_batches=50,
        eval_batch_size=64,
        autocast_dtype=torch.bfloat16,
    ),
)


def config(profile: str | None = None) -> Sweep:
    """The sweep of the active profile (or of ``profile``: "ci", "cpu" or "gpu")."""
    return SIZES.for_profile(profile)


def model_config(size: tuple[int, int, int], block_size: int, vocab_size: int) -> GPTConfig:
    """The GPT of one ``(n_layers, d_model, n_heads)`` size: no biases, no dropout."""
    n_layers, d_model, n_heads = size
    return GPTConfig(
        vocab_size=vocab_size,
        block_size=block_size,
        n_layers=n_layers,
        n_heads=n_heads,
        d_model=d_model,
        dropout=0.0,
        bias=False,
    )


def non_embedding_params(cfg: GPTConfig) -> int:
    """Kaplan et al.'s N: the parameters of ``GPT(cfg)`` without the token embedding (which
    is also the tied LM head) and the position embedding; the LayerNorms count. Close to
    ``12 * n_layers * d_model**2`` for the 4x MLP without biases."""
    return cfg.param_count(non_embedding=True) - cfg.vocab_size * cfg.d_model


def training_flops(params: int, tokens: int) -> float:
    """Training compute ``C = 6 N D`` (Kaplan et al. 2020): 2N FLOPs per token forward, 4N
    backward, for ``params`` = N non-embedding parameters and ``tokens`` = D."""
    return 6.0 * params * tokens


def tokens_for_flops(flops: float, params: int) -> int:
    """The tokens D with ``6 N D = flops`` (rounded down): a smaller model sees more."""
    return int(flops // (6 * params))


@dataclass(frozen=True)
class Run:
    """One trained size: what it was, what it saw and the losses it reached (nats/char)."""

    kind: str  # SAME_TOKENS or SAME_COMPUTE
    size: tuple[int, int, int]  # (n_layers, d_model, n_heads)
    params: int  # non-embedding parameters N
    tokens: int  # training tokens D actually seen (whole steps)
    train_loss: float
    val_loss: float
    seconds: float  # wall time of the training steps and the final evaluation

    @property
    def flops(self) -> float:
        return training_flops(self.params, self.tokens)

    @property
    def name(self) -> str:
        n_layers, d_model, _ = self.size
        return f"{n_layers}x{d_model}"

    @property
    def tokens_per_param(self) -> float:
        return self.tokens / self.params


def train_one(
    sweep: Sweep,
    size: tuple[int, int, int],
    data: CharDataset,
    tokens: int,
    kind: str,
    *,
    seed: int = 0,
    progress: bool = False,
) -> Run:
    """Train the GPT of ``size`` on ``tokens`` training tokens (whole steps of B x T, at least
    one) from ``seed``; returns its :class:`Run`."""
    model_cfg = model_config(size, sweep.block_size, data.vocab_size)
    steps = max(1, round(tokens / sweep.tokens_per_step))
    recipe = nb08.Config(
        model=model_cfg,
        batch_size=sweep.batch_size,
        steps=steps,
        lr=sweep.lr,
        min_lr=sweep.min_lr,
        warmup=max(1, round(sweep.warmup_fraction * steps)),
        eval_every=0,
        final_eval_batches=sweep.eval_batches,
        eval_batch_size=sweep.eval_batch_size,
        autocast_dtype=sweep.autocast_dtype,
    )
    _, history = nb08.train_char_gpt(
        recipe, data, seed=seed, progress=progress, desc=f"{kind}: {size[0]}x{size[1]}"
    )
    return Run(
        kind=kind,
        size=size,
        params=non_embedding_params(model_cfg),
        tokens=history.tokens_seen,
        train_loss=history.final["train"],
        val_loss=history.final_val,
        seconds=history.wall_seconds,
    )


def _reported(run: Run, report: Callable[[Run], None] | None) -> Run:
    if report is not None:
        report(run)
    return run


def same_tokens(
    sweep: Sweep,
    data: CharDataset,
    *,
    progress: bool = False,
    report: Callable[[Run], None] | None = None,
) -> list[Run]:
    """Every size of ``sweep`` trained on the same ``sweep.tokens`` tokens, smallest first;
    ``report(run)`` is called as each run ends (e.g. to print a line)."""
    return [
        _reported(train_one(sweep, s, data, sweep.tokens, SAME_TOKENS, progress=progress), report)
        for s in sweep.sizes
    ]


def same_compute(
    sweep: Sweep,
    data: CharDataset,
    fixed: Sequence[Run],
    *,
    progress: bool = False,
    report: Callable[[Run], None] | None = None,
) -> list[Run]:
    """For each ``(i, others)`` of ``sweep.compute``, the sizes ``others`` trained with the
    FLOPs of size i's same-token run in ``fixed``, on ``tokens_for_flops(budget, N)`` tokens
    each: smaller models see more tokens, larger ones fewer. Size i's run is not repeated."""
    runs = []
    for index, others in sweep.compute:
        budget = fixed[index].flops
        for size in (sweep.sizes[j] for j in others):
            params = non_embedding_params(model_config(size, sweep.block_size, data.vocab_size))
            tokens = tokens_for_flops(budget, params)
            run = train_one(sweep, size, data, tokens, SAME_COMPUTE, progress=progress)
            runs.append(_reported(run, report))
    return runs


def runs_of(runs: Sequence[Run], kind: str) -> list[Run]:
    """The runs of one kind (``SAME_TOKENS`` or ``SAME_COMPUTE``), in their order."""
    return [r for r in runs if r.kind == kind]


def frontier(runs: Sequence[Run]) -> list[Run]:
    """The compute frontier: the runs no cheaper run beats (each has a lower validation loss
    than every run with fewer or equal FLOPs), in order of FLOPs."""
    best, out = float("inf"), []
    for r in sorted(runs, key=lambda r: (r.flops, r.val_loss)):
        if r.val_loss < best:
            out.append(r)
            best = r.val_loss
    return out


def winners(sweep: Sweep, runs: Sequence[Run], rel: float = 0.02) -> dict[float, list[Run]]:
    """For each same-compute budget, every run within ``rel`` of it in FLOPs (both kinds: the
    budget's own same-token run belongs to it), best validation loss first."""
    out: dict[float, list[Run]] = {}
    fixed = runs_of(runs, SAME_TOKENS)
    for index, _ in sweep.compute:
        budget = fixed[index].flops
        near = [r for r in runs if abs(r.flops - budget) <= rel * budget]
        out[budget] = sorted(near, key=lambda r: r.val_loss)
    return out


def falls_with_size(runs: Sequence[Run], slack: float = MONOTONE_SLACK) -> bool:
    """True when, ordered by N, no run's validation loss exceeds a smaller model's by more than
    ``slack`` and the largest model beats the smallest."""
    ordered = sorted(runs, key=lambda r: r.params)
    losses = [r.val_loss for r in ordered]
    steps_ok = all(b <= min(losses[: i + 1]) + slack for i, b in enumerate(losses[1:]))
    return steps_ok and losses[-1] < losses[0]


def fit_same_tokens(runs: Sequence[Run]) -> tuple[float, float]:
    """``(a, alpha)`` of ``L(N) ~ a N^(-alpha)`` over the same-token runs (validation loss)."""
    fixed = runs_of(runs, SAME_TOKENS)
    return fit_power_law([r.params for r in fixed], [r.val_loss for r in fixed])


def describe(sweep: Sweep, vocab_size: int) -> list[str]:
    """One line per size: its shape, N (exact and Kaplan's 12 L d^2) and its same-token run's
    training FLOPs."""
    lines = []
    for size in sweep.sizes:
        cfg = model_config(size, sweep.block_size, vocab_size)
        n = non_embedding_params(cfg)
        lines.append(
            f"{size[0]} layers x {size[1]} wide ({size[2]} heads): N = {n:,} non-embedding "
            f"(12 L d^2 = {12 * size[0] * size[1] ** 2:,}), "
            f"C = 6 N D = {training_flops(n, sweep.tokens):.2e} FLOPs for D = {sweep.tokens:,}"
        )
    return lines


def row(run: Run) -> str:
    """One line of a table of runs: shape, N, tokens (and per parameter), FLOPs, losses, time."""
    return (
        f"{run.name:>7}  N = {run.params:>9,}  D = {run.tokens:>10,} "
        f"({run.tokens_per_param:7.1f} tokens/param)  C = {run.flops:.2e}  "
        f"train {run.train_loss:.3f}  val {run.val_loss:.3f}  ({run.seconds:.1f} s)"
    )
