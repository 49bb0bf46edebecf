"""Checks for notebook 04 (self-attention, cross-attention, position): 04.3 sinusoidal positional
encoding, 04.4 rotary position embedding (RoPE).

Conventions (``course_utils.positional``): the sinusoidal table is interleaved,
pe[pos, 2i] = sin(pos / 10000^(2i/D)), pe[pos, 2i+1] = cos(pos / 10000^(2i/D)); RoPE rotates the
interleaved pairs (x[..., 2i], x[..., 2i+1]) by the angle pos * 10000^(-2i/D).

To add an exercise: define its cases, call and mistakes below, then append it to ``EXERCISES``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from course_utils import positional
from course_utils.checks._common import as_tensor, close, size
from course_utils.checks.core import Case, Exercise, Mistake, generator, randn

NOTEBOOK = "04_self_cross_position.ipynb"

# ----------------------------------------------------------------------------- 04.3 sinusoidal


def _pe_cases(seed: int) -> list[Case]:
    g = generator(seed)
    T, D = size(g, 5, 12), 2 * size(g, 3, 8)
    return [
        Case("T != D", {"T": T if T != D else T + 1, "D": D}),
        Case("a long sequence (T = 48)", {"T": 48, "D": 2 * size(g, 4, 10)}),
        Case("one position (T = 1)", {"T": 1, "D": D}),
        Case("two dimensions (D = 2)", {"T": T, "D": 2}),
    ]


def _pe_call(candidate, case: Case) -> dict[str, Tensor]:
    i = case.inputs
    return {"pe": as_tensor(candidate(i["T"], i["D"]), "sinusoidal_positional_encoding(T, D)")}


def _pe(angle, *, interleave: bool = True, swap: bool = False, start: int = 0):
    """A sinusoidal table built from ``angle(pos (T, 1), col (1, D)) -> (T, D)``."""

    def impl(T: int, D: int) -> Tensor:
        pos = torch.arange(start, start + T, dtype=torch.float64)[:, None]  # (T, 1)
        col = torch.arange(D, dtype=torch.float64)[None, :]  # (1, D)
        ang = angle(pos, col, D)  # (T, D): entry j holds the angle of column j
        even, odd = (torch.cos, torch.sin) if swap else (torch.sin, torch.cos)
        if interleave:
            is_even = (torch.arange(D) % 2 == 0)[None, :]
            return torch.where(is_even, even(ang), odd(ang))
        half = ang[:, 0::2]  # one angle per pair
        return torch.cat([even(half), odd(half)], dim=-1)

    return impl


def _pair_angle(pos, col, D, exponent=lambda i, D: 2 * i / D):
    i = torch.div(col, 2, rounding_mode="floor")  # pair index of each column
    return pos / 10000.0 ** exponent(i, D)


_RIGHT = "pe[pos, 2i] = sin(pos / 10000^(2i/D)) and pe[pos, 2i+1] = cos(pos / 10000^(2i/D))"

PE_MISTAKES = [
    Mistake(
        "sin and cos swapped",
        f"even columns take sin, odd columns cos: {_RIGHT}",
        _pe(_pair_angle, swap=True),
    ),
    Mistake(
        "sin and cos concatenated instead of interleaved",
        f"interleave them, pe[:, 0::2] = sin(...) and pe[:, 1::2] = cos(...), instead of "
        f"putting all sines first: {_RIGHT}",
        _pe(_pair_angle, interleave=False),
    ),
    Mistake(
        "wrong frequency exponent (i/D instead of 2i/D)",
        f"with i the pair index the exponent is 2i/D: {_RIGHT}",
        _pe(lambda p, c, D: _pair_angle(p, c, D, exponent=lambda i, D: i / D)),
    ),
    Mistake(
        "each column its own frequency (exponent j/D with j the column index)",
        f"the sin and the cos of a pair share one frequency, 10000^(2i/D): {_RIGHT}",
        _pe(lambda p, c, D: p / 10000.0 ** (c / D)),
    ),
    Mistake(
        "frequency inverted (pos * 10000^(2i/D))",
        f"divide the position by 10000^(2i/D) (the frequencies decrease along D): {_RIGHT}",
        _pe(lambda p, c, D: p * 10000.0 ** (2 * torch.div(c, 2, rounding_mode="floor") / D)),
    ),
    Mistake(
        "positions start at 1 instead of 0",
        "the first position is 0: pe[0] = (0, 1, 0, 1, ...)",
        _pe(_pair_angle, start=1),
    ),
    Mistake(
        "returned (D, T) instead of (T, D)",
        "return one row per position: shape (T, D)",
        lambda T, D: _pe(_pair_angle)(T, D).T,
    ),
]

PE = Exercise(
    id="04.3",
    title="Sinusoidal positional encoding",
    points=2,
    notebook=NOTEBOOK,
    function="sinusoidal_positional_encoding",
    reference=positional.sinusoidal_positional_encoding,
    make_cases=_pe_cases,
    call=_pe_call,
    mistakes=PE_MISTAKES,
    compare=close(rtol=1e-4, atol=1e-4),  # the reference table is float32
    hint=f"a (T, D) table with {_RIGHT}; positions 0..T-1, i = 0..D/2-1",
)

# ----------------------------------------------------------------------------- 04.4 RoPE


def _rope_cases(seed: int) -> list[Case]:
    g = generator(seed)
    T, D = size(g, 3, 8), 2 * size(g, 2, 6)
    B, H = size(g, 1, 3), size(g, 2, 3)
    offset = size(g, 3, 20)
    scattered = torch.randperm(40, generator=g)[:T].sort().values
    return [
        Case("(T, D), default positions", {"x": randn(g, T, D)}),
        Case("heads (B, H, T, D), default positions", {"x": randn(g, B, H, T, D)}),
        Case(
            "positions offset (decoding after a prefix)",
            {"x": randn(g, B, T, D), "positions": torch.arange(T) + offset},
        ),
        Case("scattered positions", {"x": randn(g, B, H, T, D), "positions": scattered}),
        Case("one pair (D = 2)", {"x": randn(g, T, 2)}),
    ]


def _rope_call(candidate, case: Case) -> dict[str, Tensor]:
    i = case.inputs
    if "positions" in i:
        out = candidate(i["x"], i["positions"])
    else:
        out = candidate(i["x"])
    return {"rotated": as_tensor(out, "apply_rope(x, positions)")}


def _rope(
    *,
    exponent=lambda i, D: 2 * i / D,
    sign: float = 1.0,
    halves: bool = False,
    concat: bool = False,
    swap: bool = False,
    use_positions: bool = True,
    start: int = 0,
):
    """A RoPE with one thing changed (for the mistakes)."""

    def impl(x: Tensor, positions: Tensor | None = None) -> Tensor:
        T, D = x.shape[-2], x.shape[-1]
        if positions is None or not use_positions:
            positions = torch.arange(start, start + T)
        i = torch.arange(D // 2, dtype=torch.float64)
        angle = positions.to(torch.float64)[:, None] / 10000.0 ** exponent(i, D) * sign
        cos, sin = (angle.sin(), angle.cos()) if swap else (angle.cos(), angle.sin())
        if halves:
            a, b = x[..., : D // 2], x[..., D // 2 :]
        else:
            a, b = x[..., 0::2], x[..., 1::2]
        ra, rb = a * cos - b * sin, a * sin + b * cos
        if halves or concat:
            return torch.cat([ra, rb], dim=-1)
        return torch.stack([ra, rb], dim=-1).flatten(-2)

    return impl


_PAIRS = (
    "(x[..., 2i], x[..., 2i+1]) -> (x0 cos(a) - x1 sin(a), x0 sin(a) + x1 cos(a)) with "
    "a = pos * 10000^(-2i/D)"
)

ROPE_MISTAKES = [
    Mistake(
        "rotates halves instead of interleaved pairs",
        f"the course's RoPE pairs neighbouring dimensions (x[..., 0::2], x[..., 1::2]), "
        f"not the first and second half of D (the GPT-NeoX layout): {_PAIRS}",
        _rope(halves=True),
    ),
    Mistake(
        "rotation by the wrong sign (angle -a)",
        f"rotate counter-clockwise: {_PAIRS}",
        _rope(sign=-1.0),
    ),
    Mistake(
        "wrong frequency exponent (i/D instead of 2i/D)",
        f"with i the pair index the angle is pos * 10000^(-2i/D): {_PAIRS}",
        _rope(exponent=lambda i, D: i / D),
    ),
    Mistake(
        "cos and sin swapped",
        f"the rotation matrix is [[cos, -sin], [sin, cos]]: {_PAIRS}",
        _rope(swap=True),
    ),
    Mistake(
        "rotated pairs concatenated instead of interleaved back",
        "put each rotated pair back in place: out[..., 0::2] = x0', out[..., 1::2] = x1' "
        "(torch.stack([x0', x1'], dim=-1).flatten(-2)), not torch.cat([x0', x1'], dim=-1)",
        _rope(concat=True),
    ),
    Mistake(
        "positions argument ignored",
        "use the positions you are given (default arange(T) only when positions is None)",
        _rope(use_positions=False),
    ),
    Mistake(
        "positions start at 1 instead of 0",
        "the default positions are torch.arange(T): the first token is not rotated",
        _rope(start=1),
    ),
]

ROPE = Exercise(
    id="04.4",
    title="Rotary position embedding (RoPE)",
    points=3,
    notebook=NOTEBOOK,
    function="apply_rope",
    reference=positional.apply_rope,
    make_cases=_rope_cases,
    call=_rope_call,
    mistakes=ROPE_MISTAKES,
    compare=close(),
    hint=f"rotate each pair {_PAIRS}; positions default to arange(T); the output has x's shape",
)

EXERCISES = [PE, ROPE]  # append this notebook's 04.1 and 04.2 here (keep the ids in order)
