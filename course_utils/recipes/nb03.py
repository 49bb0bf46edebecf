"""Notebook 03 (scaled dot-product attention): experiment sizes per profile and small helpers.

Every size the notebook uses comes from :func:`config`, so the ``ci`` profile stays under
~20 s while ``cpu`` and ``gpu`` draw more samples for smoother curves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from course_utils.profiles import pick


@dataclass(frozen=True)
class Config:
    """Sizes of notebook 03's experiments."""

    dims: tuple[int, ...]  # widths d swept in the variance / saturation experiments
    hist_dims: tuple[int, ...]  # widths shown in the histograms
    n_pairs: int  # random (q, x) pairs per width for the variance measurement
    n_keys: int  # keys per query in the softmax-saturation experiment
    n_queries: int  # queries averaged over per width
    recall_steps: int  # training steps of the key/value recall task
    recall_batch: int  # episodes per step
    recall_records: int  # records (data vectors) per episode
    recall_lr: float


def config() -> Config:
    """The active profile's sizes."""
    return Config(
        dims=pick(ci=(2, 8, 32, 128, 512, 2048), cpu=(2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)),
        hist_dims=(4, 64, 1024),
        n_pairs=pick(ci=4_000, cpu=20_000),
        n_keys=16,
        n_queries=pick(ci=256, cpu=1_024),
        recall_steps=pick(ci=300, cpu=600, gpu=600),
        recall_batch=pick(ci=64, cpu=128, gpu=128),
        recall_records=8,
        recall_lr=0.03,
    )


def entropy(weights: Tensor, dim: int = -1) -> Tensor:
    """Shannon entropy (nats) of probability vectors along ``dim``: (..., S) -> (...).

    ``0 log 0`` counts as 0, so one-hot rows have entropy exactly 0.
    """
    logs = torch.where(weights > 0, weights.log(), torch.zeros_like(weights))
    return -(weights * logs).sum(dim=dim)


def saturation_stats(d: int, *, scaled: bool, n_queries: int, n_keys: int,
                     generator: torch.Generator) -> tuple[float, float]:
    """Softmax entropy and the gradient reaching the query, for random unit-variance q, k, v.

    Draws ``n_queries`` queries q (d,), each with ``n_keys`` keys k (n_keys, d) and values v,
    all N(0, 1); scores q . k (divided by sqrt(d) when ``scaled``). Returns the mean entropy
    of the softmax weights and the mean norm of d L / d q for L = u . (softmax(scores) v),
    u a random unit direction (the gradient a downstream loss would send).
    """
    q = torch.randn(n_queries, 1, d, generator=generator, requires_grad=True)
    k = torch.randn(n_queries, n_keys, d, generator=generator)
    v = torch.randn(n_queries, n_keys, d, generator=generator)
    u = torch.nn.functional.normalize(torch.randn(n_queries, 1, d, generator=generator), dim=-1)
    scores = q @ k.transpose(-2, -1) / (math.sqrt(d) if scaled else 1.0)  # (N, 1, n_keys)
    weights = torch.softmax(scores, dim=-1)
    y = weights @ v  # (N, 1, d)
    (y * u).sum().backward()
    grad_norm = q.grad.norm(dim=-1).mean().item()
    return entropy(weights.detach()).mean().item(), grad_norm


def recall_batch(n: int, records: int, d_key: int, d_value: int, mix: Tensor,
                 generator: torch.Generator) -> tuple[Tensor, Tensor, Tensor, Tensor]:
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
