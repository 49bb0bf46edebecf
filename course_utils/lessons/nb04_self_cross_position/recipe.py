"""Notebook 04 (self, cross and position): experiment sizes per profile and the lag task.

The lag task needs positions: the answer at position t is the token at position t - lag, so a
model that sees only the *set* of tokens cannot know which one to copy.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from course_utils.runtime.profiles import ProfileTable


@dataclass(frozen=True, kw_only=True)
class Config:
    """Sizes of notebook 04's experiments."""

    vocab: int = 16  # token ids 0..vocab-1 in the lag task
    seq_len: int = 24  # tokens per sequence
    d_model: int = 32  # width of the embeddings and of q, k, v
    lag: int = 2  # the answer at position t is the token at t - lag
    steps: int  # training steps per positional encoding
    batch: int = 32  # sequences per step
    lr: float = 0.01
    max_distance: int = 8  # relative position bias: distances clipped to +-max_distance
    n_test: int  # test sequences


SIZES = ProfileTable(
    ci=Config(steps=150, n_test=256),
    cpu=Config(steps=400, n_test=1024),
    gpu=Config(steps=400, n_test=1024),
)


def config(profile: str | None = None) -> Config:
    """The sizes of the active profile (or of ``profile``: "ci", "cpu" or "gpu"): that row of
    :data:`SIZES` (the fields no row sets keep :class:`Config`'s defaults)."""
    return SIZES.for_profile(profile)


def lag_batch(n: int, cfg: Config, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Random token sequences and their lag-task targets.

    Returns (tokens (n, seq_len) int64, targets (n, seq_len - lag)): the target for position
    t >= lag is tokens[:, t - lag], so ``targets[:, i]`` belongs to position ``i + lag``.
    """
    tokens = torch.randint(0, cfg.vocab, (n, cfg.seq_len), generator=generator)
    return tokens, tokens[:, : cfg.seq_len - cfg.lag]


def gpu_summary() -> str:
    """What this notebook runs in the ``gpu`` profile, in words, from the gpu row of its table
    (``course doctor`` prints it beside the estimate)."""

    return f"self / cross attention, positions: lag task, {SIZES.gpu.steps} steps per encoding"
