"""Shared helpers for the tests of ``course_utils``' building blocks (attention, positional
encodings, layers): float64 random tensors from explicit generators, devices to run on.

Not a test module (pytest only collects ``test_*.py``); imported by name because ``tests/`` is
on ``sys.path`` under pytest's default import mode.
"""

from __future__ import annotations

import pytest
import torch

F64 = torch.float64
DEVICES = [
    "cpu",
    pytest.param(
        "cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
    ),
]


def gen(seed: int) -> torch.Generator:
    """A CPU generator seeded with ``seed`` (every random draw in these tests names one)."""
    return torch.Generator().manual_seed(seed)


def randn(*shape, g, dtype=F64):
    """Standard normal tensor of ``shape`` drawn from generator ``g`` (float64 by default)."""
    return torch.randn(*shape, generator=g, dtype=dtype)


def random_mask(*shape, g, p=0.6):
    """Bool mask with at least one True per row (torch gives NaN on fully masked rows)."""
    mask = torch.rand(*shape, generator=g) < p
    mask[..., 0] = True
    return mask
