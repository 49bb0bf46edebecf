"""Check 09.1 (patchify) accepts correct answers written differently and names each classic
mistake. The wrong answers here are written independently of the check's own."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from checks_testing import (
    assert_passes,
    assert_registered_mistakes_named,
    assert_rejected,
    mistake_names,
)

from course_utils import checks
from course_utils.models import patchify

ID = "09.1"


def patch_unfold(images, p):
    return F.unfold(images, kernel_size=p, stride=p).transpose(1, 2)


def patch_tensor_unfold(images, p):
    B, C = images.shape[:2]
    x = images.unfold(2, p, p).unfold(3, p, p)  # (B, C, gh, gw, p, p)
    return x.permute(0, 2, 3, 1, 4, 5).reshape(B, -1, C * p * p)


def patch_loops(images, p):
    B, C, H, W = images.shape
    rows = [
        images[:, :, r : r + p, c : c + p].reshape(B, -1)
        for r in range(0, H, p)
        for c in range(0, W, p)
    ]
    return torch.stack(rows, dim=1)


@pytest.mark.parametrize("candidate", [patch_unfold, patch_tensor_unfold, patch_loops, patchify])
def test_patchify_check_accepts_correct_answers(candidate):
    assert_passes(ID, candidate)


def patch_column_order(images, p):
    B, C, H, W = images.shape
    cols = [
        images[:, :, r : r + p, c : c + p].reshape(B, -1)
        for c in range(0, W, p)
        for r in range(0, H, p)
    ]
    return torch.stack(cols, dim=1)


def patch_channels_last(images, p):
    B, C, H, W = images.shape
    rows = [
        images[:, :, r : r + p, c : c + p].permute(0, 2, 3, 1).reshape(B, -1)
        for r in range(0, H, p)
        for c in range(0, W, p)
    ]
    return torch.stack(rows, dim=1)


def patch_transposed(images, p):
    B, C, H, W = images.shape
    rows = [
        images[:, :, r : r + p, c : c + p].transpose(-1, -2).reshape(B, -1)
        for r in range(0, H, p)
        for c in range(0, W, p)
    ]
    return torch.stack(rows, dim=1)


WRONG = {
    "patches in column order (top to bottom, then left to right)": patch_column_order,
    "each patch flattened as (p, p, C) instead of (C, p, p)": patch_channels_last,
    "each patch transposed (flattened as (C, p_w, p_h))": patch_transposed,
    "plain reshape without permuting (pixels of different patches mixed)": lambda images, p: (
        images.reshape(images.shape[0], -1, images.shape[1] * p * p)
    ),
    "returned (B, C*p*p, N) (F.unfold without transpose)": lambda images, p: F.unfold(
        images, p, stride=p
    ),
}


@pytest.mark.parametrize("mistake", sorted(WRONG))
def test_patchify_check_names_each_classic_mistake(mistake):
    assert_rejected(ID, WRONG[mistake], mistake)


def test_patchify_check_covers_every_registered_mistake():
    assert set(WRONG) == mistake_names(ID)
    assert_registered_mistakes_named(ID)


def test_patchify_cases_use_rectangular_colour_images():
    cases = checks.get(ID).make_cases(0)
    shapes = [tuple(c.inputs["images"].shape) for c in cases]
    assert any(C == 3 and H != W for _, C, H, W in shapes)
