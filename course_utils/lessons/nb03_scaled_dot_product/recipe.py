"""Notebook 03 (scaled dot-product attention): experiment sizes per profile and small helpers.

Every size the notebook uses comes from :func:`config`, so the ``ci`` profile stays under
~20 s while ``cpu`` and ``gpu`` draw more samples for smoother curves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from course_utils.runtime.profiles import ProfileTable


@dataclass(frozen=True, kw_only=True)
class Config:
    """Sizes of notebook 03's experiments."""

    dims: tuple[int, ...]  # widths d swept in the variance / saturation experiments
    hist_dims: tuple[int, ...] = (4, 64, 1024)  # widths shown in the histograms
    n_pairs: int  # random (q, x) pairs per width for the variance measurement
    n_keys: int = 16  # keys per query in the softmax-saturation experiment
    n_queries: int  # queries per width (the median over them is plotted)
    init_d_k: int = 64  # head width of the default-init measurement (the base Transformer's)
    init_d_model: int = 512  # its input width (8 heads x 64)
    recall_steps: int  # training steps of the key/value recall task
    recall_batch: int  # episodes per step
    recall_records: int = 8  # records (data vectors) per episode
    recall_d_key: int = 8  # width of a record's key (and of the queries)
    recall_d_value: int = 8  # width of a record's value
    recall_lr: float = 0.03
    timing_tokens: int  # queries (and keys) in the loop-versus-matrix timing
    timing_width: int = 64  # their width
    timing_repeats: int  # timings per form; the median is reported


SIZES = ProfileTable(
    ci=Config(
        dims=(2, 8, 32, 128, 512, 2048),
        n_pairs=8_000,  # as cpu: the variance table is the same in every profile (03.Q1)
        n_queries=256,
        recall_steps=300,
        recall_batch=64,
        timing_tokens=128,
        timing_repeats=5,
    ),
    cpu=Config(
        dims=(2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048),
        n_pairs=8_000,
        n_queries=1_024,
        recall_steps=600,
        recall_batch=128,
        timing_tokens=512,
        timing_repeats=9,
    ),
    gpu=Config(
        dims=(2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048),
        n_pairs=8_000,
        n_queries=1_024,
        recall_steps=600,
        recall_batch=128,
        timing_tokens=512,
        timing_repeats=9,
    ),
)


def config(profile: str | None = None) -> Config:
    """The sizes of the active profile (or of ``profile``: "ci", "cpu" or "gpu"): that row of
    :data:`SIZES` (the fields no row sets keep :class:`Config`'s defaults)."""
    return SIZES.for_profile(profile)


def softmax_entropy(weights: Tensor) -> Tensor:
    """Entropy in nats of attention weights ``(..., S) -> (...)`` (0 log 0 counts as 0)."""
    return -(weights * weights.clamp_min(1e-30).log()).sum(dim=-1)


def saturation(
    d: int, scaled: bool, n_queries: int, n_keys: int, gen: torch.Generator
) -> tuple[float, float]:
    """Median softmax entropy and median gradient norm at the scores, for ``n_queries``
    random queries against ``n_keys`` random keys and values of width ``d``, with or without
    the ``1/sqrt(d)`` scale (section 3 of notebook 03). The loss is a random projection of the
    attention output, so the gradient at the scores is what a layer below would receive."""
    q = torch.randn(n_queries, 1, d, generator=gen)  # (N, 1, d)
    k = torch.randn(n_queries, n_keys, d, generator=gen)  # (N, S, d)
    v = torch.randn(n_queries, n_keys, d, generator=gen)  # (N, S, d)
    u = F.normalize(torch.randn(n_queries, 1, d, generator=gen), dim=-1)
    scores = q @ k.transpose(-2, -1) / (math.sqrt(d) if scaled else 1.0)  # (N, 1, S)
    scores.requires_grad_(True)
    probs = scores.softmax(dim=-1)
    ((probs @ v) * u).sum().backward()
    grad = scores.grad.norm(dim=-1)  # (N, 1)
    return softmax_entropy(probs.detach()).median().item(), grad.median().item()


def default_init_scores(
    d_k: int, d_model: int, n_queries: int, n_keys: int, gen: torch.Generator
) -> tuple[float, float]:
    """Variance of the unscaled scores ``q . k`` and the median softmax entropy (nats) of their
    weights when ``q`` and ``k`` come from two ``nn.Linear(d_model, d_k)`` with PyTorch's default
    init, applied to unit-variance inputs: ``n_queries`` queries against ``n_keys`` keys each.

    That init draws weights from U(-1/sqrt(d_model), 1/sqrt(d_model)), variance
    1/(3 d_model), so each component of q and k has variance about 1/3 and
    Var(q . k) is about d_k / 9 (the takeaway of notebook 03). ``gen`` draws the inputs and the
    seed of the layers' init, which runs on a forked global RNG (the caller's stream is
    untouched; seeding it with the inputs' own seed would correlate weights and inputs)."""
    init_seed = int(torch.randint(2**31 - 1, (1,), generator=gen))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(init_seed)
        w_q, w_k = torch.nn.Linear(d_model, d_k), torch.nn.Linear(d_model, d_k)
    x_q = torch.randn(n_queries, 1, d_model, generator=gen)  # (N, 1, d_model)
    x_k = torch.randn(n_queries, n_keys, d_model, generator=gen)  # (N, S, d_model)
    with torch.no_grad():
        scores = w_q(x_q) @ w_k(x_k).transpose(-2, -1)  # (N, 1, S), no 1/sqrt(d_k)
    return scores.var().item(), softmax_entropy(scores.softmax(dim=-1)).median().item()


def recall_batch(
    n: int, records: int, d_key: int, d_value: int, mix: Tensor, generator: torch.Generator
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Episodes of a key -> value lookup ("which record has this key? return its value").

    Each episode holds ``records`` data vectors x_i = [key_i, value_i] @ mix (the key and the
    value are entangled by the fixed invertible ``mix`` of shape (d_key + d_value,) * 2), and a
    query: one of the keys. The answer is that record's value.
    Returns (query (n, 1, d_key), x (n, records, d_key + d_value), target (n, 1, d_value),
    index (n,) of the record asked for).
    """
    keys = torch.randn(n, records, d_key, generator=generator)
    values = torch.randn(n, records, d_value, generator=generator)
    x = torch.cat([keys, values], dim=-1) @ mix  # (n, records, d_key + d_value)
    index = torch.randint(0, records, (n,), generator=generator)
    rows = torch.arange(n)
    query = keys[rows, index][:, None, :]  # (n, 1, d_key)
    target = values[rows, index][:, None, :]  # (n, 1, d_value)
    return query, x, target, index


def gpu_summary() -> str:
    """What this notebook runs in the ``gpu`` profile, in words, from the gpu row of its table
    (``course doctor`` prints it beside the estimate)."""

    s = SIZES.gpu
    return (
        f"scaled dot-product attention: {len(s.dims)} widths up to d = {s.dims[-1]}, "
        f"recall task {s.recall_steps} steps x {s.recall_batch}"
    )
