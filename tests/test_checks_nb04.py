"""Checks 04.3 (sinusoidal encoding) and 04.4 (RoPE) accept correct answers written
differently and name each classic mistake. The wrong answers here are written independently of
the check's own."""

from __future__ import annotations

import math

import pytest
import torch
from checks_testing import (
    assert_passes,
    assert_registered_mistakes_named,
    assert_rejected,
    mistake_names,
)

from course_utils import checks, positional

# ----------------------------------------------------------------------------- 04.3


def pe_loops(T, D):
    pe = torch.zeros(T, D)
    for pos in range(T):
        for i in range(0, D, 2):
            angle = pos / 10000 ** (i / D)
            pe[pos, i] = math.sin(angle)
            pe[pos, i + 1] = math.cos(angle)
    return pe


def pe_stack(T, D):
    pos = torch.arange(T, dtype=torch.float64).unsqueeze(1)
    inv_freq = torch.exp(-math.log(10000.0) * torch.arange(0, D, 2, dtype=torch.float64) / D)
    angles = pos * inv_freq
    return torch.stack([angles.sin(), angles.cos()], dim=-1).reshape(T, D)


def pe_float32_exp(T, D):  # float32 throughout, as in the Annotated Transformer
    pe = torch.zeros(T, D)
    position = torch.arange(0, T).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, D, 2) * -(math.log(10000.0) / D))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


@pytest.mark.parametrize(
    "candidate", [pe_loops, pe_stack, pe_float32_exp, positional.sinusoidal_positional_encoding]
)
def test_sinusoidal_check_accepts_correct_answers(candidate):
    assert_passes("04.3", candidate)


def pe_from(angle_of, layout="interleaved", first=torch.sin, second=torch.cos, offset=0):
    def impl(T, D):
        pos = torch.arange(offset, T + offset, dtype=torch.float64)[:, None]
        half = torch.arange(D // 2, dtype=torch.float64)[None, :]
        if layout == "per-column":
            col = torch.arange(D, dtype=torch.float64)[None, :]
            ang = pos / 10000 ** (col / D)
            out = torch.empty(T, D, dtype=torch.float64)
            out[:, 0::2], out[:, 1::2] = first(ang[:, 0::2]), second(ang[:, 1::2])
            return out
        ang = angle_of(pos, half, D)
        if layout == "concat":
            return torch.cat([first(ang), second(ang)], dim=1)
        out = torch.empty(T, D, dtype=torch.float64)
        out[:, 0::2], out[:, 1::2] = first(ang), second(ang)
        return out

    return impl


def right_angle(pos, i, D):
    return pos / 10000 ** (2 * i / D)


PE_WRONG = {
    "sin and cos swapped": pe_from(right_angle, first=torch.cos, second=torch.sin),
    "sin and cos concatenated instead of interleaved": pe_from(right_angle, layout="concat"),
    "wrong frequency exponent (i/D instead of 2i/D)": pe_from(lambda p, i, D: p / 10000 ** (i / D)),
    "each column its own frequency (exponent j/D with j the column index)": pe_from(
        None, layout="per-column"
    ),
    "frequency inverted (pos * 10000^(2i/D))": pe_from(lambda p, i, D: p * 10000 ** (2 * i / D)),
    "positions start at 1 instead of 0": pe_from(right_angle, offset=1),
    "returned (D, T) instead of (T, D)": lambda T, D: pe_stack(T, D).t(),
}


@pytest.mark.parametrize("mistake", sorted(PE_WRONG))
def test_sinusoidal_check_names_each_classic_mistake(mistake):
    assert_rejected("04.3", PE_WRONG[mistake], mistake)


def test_sinusoidal_check_covers_every_registered_mistake():
    assert set(PE_WRONG) == mistake_names("04.3")
    assert_registered_mistakes_named("04.3")


# ----------------------------------------------------------------------------- 04.4


def rope_complex(x, positions=None):
    T, D = x.shape[-2:]
    pos = torch.arange(T) if positions is None else positions
    theta = pos[:, None].double() * 10000.0 ** (-torch.arange(0, D, 2).double() / D)  # (T, D/2)
    z = torch.view_as_complex(x.reshape(*x.shape[:-1], D // 2, 2).contiguous())
    rotated = z * torch.polar(torch.ones_like(theta), theta)
    return torch.view_as_real(rotated).reshape(x.shape)


def rope_matrices(x, positions=None):
    T, D = x.shape[-2:]
    pos = torch.arange(T) if positions is None else positions
    out = torch.empty_like(x)
    for i in range(D // 2):
        a = pos.double() * 10000.0 ** (-2 * i / D)  # (T,)
        R = torch.stack(
            [torch.stack([a.cos(), -a.sin()], -1), torch.stack([a.sin(), a.cos()], -1)], -2
        )  # (T, 2, 2)
        out[..., 2 * i : 2 * i + 2] = torch.einsum("tij,...tj->...ti", R, x[..., 2 * i : 2 * i + 2])
    return out


@pytest.mark.parametrize("candidate", [rope_complex, rope_matrices, positional.apply_rope])
def test_rope_check_accepts_correct_answers(candidate):
    assert_passes("04.4", candidate)


def rope_from(exp2=True, sign=1, layout="pairs", swap=False, use_positions=True, start=0):
    def impl(x, positions=None):
        T, D = x.shape[-2:]
        pos = (
            torch.arange(start, start + T) if positions is None or not use_positions else positions
        )
        i = torch.arange(D // 2, dtype=torch.float64)
        a = sign * pos[:, None].double() / 10000 ** ((2 * i if exp2 else i) / D)
        c, s = (a.sin(), a.cos()) if swap else (a.cos(), a.sin())
        if layout == "halves":
            x1, x2 = x.chunk(2, dim=-1)
        else:
            x1, x2 = x[..., ::2], x[..., 1::2]
        y1, y2 = x1 * c - x2 * s, x2 * c + x1 * s
        if layout in ("halves", "concat"):
            return torch.cat([y1, y2], dim=-1)
        out = torch.empty_like(x)
        out[..., ::2], out[..., 1::2] = y1, y2
        return out

    return impl


ROPE_WRONG = {
    "rotates halves instead of interleaved pairs": rope_from(layout="halves"),
    "rotation by the wrong sign (angle -a)": rope_from(sign=-1),
    "wrong frequency exponent (i/D instead of 2i/D)": rope_from(exp2=False),
    "cos and sin swapped": rope_from(swap=True),
    "rotated pairs concatenated instead of interleaved back": rope_from(layout="concat"),
    "positions argument ignored": rope_from(use_positions=False),
    "positions start at 1 instead of 0": rope_from(start=1),
}


@pytest.mark.parametrize("mistake", sorted(ROPE_WRONG))
def test_rope_check_names_each_classic_mistake(mistake):
    assert_rejected("04.4", ROPE_WRONG[mistake], mistake)


def test_rope_check_covers_every_registered_mistake():
    assert set(ROPE_WRONG) == mistake_names("04.4")
    assert_registered_mistakes_named("04.4")


def test_rope_cases_pass_positions_both_ways():
    cases = checks.get("04.4").make_cases(0)
    assert any("positions" in c.inputs for c in cases)
    assert any("positions" not in c.inputs for c in cases)
    assert any(c.inputs["x"].ndim == 4 for c in cases)
