"""Checks for notebook 09 (the Vision Transformer): 09.1 patchify.

Convention (``course_utils.models.patchify``): images (B, C, H, W) -> patches (B, N, C*p*p),
patches numbered row-major (left to right, then top to bottom), each flattened in (C, p, p)
order -- exactly ``F.unfold(images, p, stride=p).transpose(1, 2)``.

To add an exercise: define its cases, call and mistakes below, then append it to ``EXERCISES``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from course_utils.checks._common import as_tensor, close, size
from course_utils.checks.core import Case, Exercise, Mistake, generator, randn
from course_utils.models import patchify

NOTEBOOK = "09_vit.ipynb"

# ----------------------------------------------------------------------------- 09.1 patchify


def _patch_cases(seed: int) -> list[Case]:
    g = generator(seed)
    p = size(g, 2, 4)
    gh = size(g, 2, 4)
    gw = gh + size(g, 1, 2)  # a wider grid than tall: row and column order differ

    def case(name: str, B: int, C: int, gh: int, gw: int, p: int) -> Case:
        return Case(name, {"images": randn(g, B, C, gh * p, gw * p), "patch_size": p})

    return [
        case("colour images, wider than tall", size(g, 2, 3), 3, gh, gw, p),
        case("taller than wide", 2, 3, gw, gh, p),
        case("one channel", 2, 1, gh, gw, p),
        case("one patch per image", 2, 2, 1, 1, p),
        case("patch size 1", 1, 2, gh, gw, 1),
    ]


def _patch_call(candidate, case: Case) -> dict[str, Tensor]:
    i = case.inputs
    return {
        "patches": as_tensor(
            candidate(i["images"], i["patch_size"]), "patchify(images, patch_size)"
        )
    }


def _grid(images: Tensor, p: int) -> Tensor:
    B, C, H, W = images.shape
    return images.reshape(B, C, H // p, p, W // p, p)  # (B, C, gh, ph, gw, pw)


def _ordered(perm: tuple[int, ...]):
    """Patches from the (B, C, gh, ph, gw, pw) grid permuted by ``perm`` then flattened."""

    def impl(images: Tensor, patch_size: int) -> Tensor:
        B, C, H, W = images.shape
        p = patch_size
        return _grid(images, p).permute(*perm).reshape(B, (H // p) * (W // p), C * p * p)

    return impl


def _plain_reshape(images: Tensor, patch_size: int) -> Tensor:
    B, C, H, W = images.shape
    return images.reshape(B, -1, C * patch_size * patch_size)


def _unfold_no_transpose(images: Tensor, patch_size: int) -> Tensor:
    return torch.nn.functional.unfold(images, patch_size, stride=patch_size)


PATCH_MISTAKES = [
    Mistake(
        "patches in column order (top to bottom, then left to right)",
        "number the patches row by row, as you read: left to right along the first row of "
        "the grid, then the next row (grid axes in the order (gh, gw))",
        _ordered((0, 4, 2, 1, 3, 5)),
    ),
    Mistake(
        "each patch flattened as (p, p, C) instead of (C, p, p)",
        "flatten each patch channel first, (C, p, p), the order of F.unfold and of a "
        "Conv2d patch embedding's weight",
        _ordered((0, 2, 4, 3, 5, 1)),
    ),
    Mistake(
        "each patch transposed (flattened as (C, p_w, p_h))",
        "inside a patch keep rows before columns: (C, ph, pw)",
        _ordered((0, 2, 4, 1, 5, 3)),
    ),
    Mistake(
        "plain reshape without permuting (pixels of different patches mixed)",
        "a reshape alone cuts the image in raster order, not into p x p squares: reshape to "
        "(B, C, H/p, p, W/p, p), permute to (B, H/p, W/p, C, p, p), then flatten",
        _plain_reshape,
    ),
    Mistake(
        "returned (B, C*p*p, N) (F.unfold without transpose)",
        "one row per patch: transpose F.unfold's output to (B, N, C*p*p)",
        _unfold_no_transpose,
    ),
]

PATCHIFY = Exercise(
    id="09.1",
    title="Cut images into patches",
    points=2,
    notebook=NOTEBOOK,
    function="patchify",
    reference=patchify,
    make_cases=_patch_cases,
    call=_patch_call,
    mistakes=PATCH_MISTAKES,
    compare=close(),
    hint="(B, C, H, W) -> reshape (B, C, H/p, p, W/p, p) -> permute (B, H/p, W/p, C, p, p) -> "
    "reshape (B, N, C*p*p); F.unfold(images, p, stride=p).transpose(1, 2) is the same",
)

EXERCISES = [PATCHIFY]  # append this notebook's 09.2 here
