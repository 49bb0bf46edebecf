"""course_utils.modeling.positional: sinusoidal by formula, learned offsets, RoPE's relative-position
property, relative position bias, and positions breaking permutation equivariance."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensors_testing import DEVICES, F64, gen, randn

from course_utils.modeling.attention import scaled_dot_product_attention
from course_utils.modeling.layers import TransformerBlock
from course_utils.modeling.positional import (
    LearnedPositionalEmbedding,
    RelativePositionBias,
    alibi_bias,
    alibi_slopes,
    apply_rope,
    sinusoidal_positional_encoding,
)

FEW = settings(max_examples=15, deadline=None)


# ----------------------------------------------------------------------------- sinusoidal


@pytest.mark.parametrize("T,D", [(7, 8), (5, 6), (3, 5), (1, 1)])
def test_sinusoidal_encoding_is_interleaved_sin_cos_by_the_formula(T, D):
    pe = sinusoidal_positional_encoding(T, D, dtype=F64)
    assert pe.shape == (T, D) and pe.dtype == F64
    for pos in range(T):
        for i in range(D):
            angle = pos / 10000 ** ((i - i % 2) / D)  # pair 2i and 2i+1 share a frequency
            expected = math.sin(angle) if i % 2 == 0 else math.cos(angle)
            assert pe[pos, i].item() == pytest.approx(expected, abs=1e-12)


def test_sinusoidal_encoding_starts_with_sin0_cos0_and_respects_base_and_dtype():
    pe = sinusoidal_positional_encoding(4, 6, base=100.0)
    assert pe.dtype == torch.float32
    assert torch.equal(pe[0], torch.tensor([0.0, 1.0, 0.0, 1.0, 0.0, 1.0]))
    torch.testing.assert_close(pe[3, 2], torch.tensor(math.sin(3 / 100 ** (2 / 6))))
    # each (sin, cos) pair lies on the unit circle
    torch.testing.assert_close(pe[:, 0::2] ** 2 + pe[:, 1::2] ** 2, torch.ones(4, 3))


def test_sinusoidal_similarity_depends_on_distance_not_position():
    pe = sinusoidal_positional_encoding(40, 16, dtype=F64)
    sim = pe @ pe.T  # (T, T)
    for k in (1, 3, 7):
        d = torch.diagonal(sim, offset=k)
        torch.testing.assert_close(d, torch.full_like(d, d[0].item()))


# ----------------------------------------------------------------------------- learned


def test_learned_positional_embedding_adds_the_rows_at_the_offset():
    torch.manual_seed(0)
    emb = LearnedPositionalEmbedding(10, 4)
    assert emb.weight.shape == (10, 4)
    x = torch.randn(2, 3, 4)
    torch.testing.assert_close(emb(x), x + emb.weight[:3])
    torch.testing.assert_close(emb(x, offset=5), x + emb.weight[5:8])
    emb(x, offset=7).sum().backward()
    used = emb.weight.grad.abs().sum(-1) > 0
    assert used.tolist() == [False] * 7 + [True] * 3  # only the rows it used
    with pytest.raises(ValueError, match="max_len=10"):
        emb(x, offset=8)
    with pytest.raises(ValueError, match="D == 4"):
        emb(torch.zeros(2, 3, 5))


# ----------------------------------------------------------------------------- RoPE


def rope_by_complex_numbers(x: torch.Tensor, positions: torch.Tensor, base=10000.0):
    """Independent reference: pairs as complex numbers times e^{i pos theta_i}."""
    D = x.shape[-1]
    theta = base ** (-torch.arange(0, D, 2, dtype=F64) / D)
    z = torch.view_as_complex(x.reshape(*x.shape[:-1], D // 2, 2).contiguous())
    rot = torch.polar(torch.ones_like(theta), positions.to(F64)[:, None] * theta)
    return torch.view_as_real(z * rot).reshape(x.shape)


def test_rope_rotates_interleaved_pairs_like_complex_multiplication():
    g = gen(1)
    x = randn(2, 3, 7, 8, g=g)
    torch.testing.assert_close(apply_rope(x), rope_by_complex_numbers(x, torch.arange(7)))
    pos = torch.tensor([4, 0, 9, 2, 2, 100, 3])
    torch.testing.assert_close(apply_rope(x, pos), rope_by_complex_numbers(x, pos))
    torch.testing.assert_close(apply_rope(x, torch.zeros(7)), x)  # position 0 = identity


@FEW
@given(
    T=st.integers(1, 8),
    half_D=st.integers(1, 6),
    shift=st.integers(-50, 1000),
    seed=st.integers(0, 10**6),
)
def test_rope_scores_depend_only_on_relative_position(T, half_D, shift, seed):
    g = gen(seed)
    q, k = randn(2, T, 2 * half_D, g=g), randn(2, T, 2 * half_D, g=g)
    pos = torch.randint(0, 30, (T,), generator=g)
    scores = apply_rope(q, pos) @ apply_rope(k, pos).transpose(-2, -1)
    shifted = apply_rope(q, pos + shift) @ apply_rope(k, pos + shift).transpose(-2, -1)
    torch.testing.assert_close(shifted, scores)
    # norms are preserved
    torch.testing.assert_close(apply_rope(q, pos).norm(dim=-1), q.norm(dim=-1))


def test_rope_score_of_one_query_key_pair_is_a_function_of_their_distance():
    g = gen(2)
    q, k = randn(1, 16, g=g), randn(1, 16, g=g)

    def score(m, n):
        return (apply_rope(q, torch.tensor([m])) @ apply_rope(k, torch.tensor([n])).T).item()

    for distance in (0, 1, 5):
        values = [score(m, m + distance) for m in (0, 3, 17, 250)]
        assert values == pytest.approx([values[0]] * 4, abs=1e-10)
    assert score(0, 1) != pytest.approx(score(0, 5), abs=1e-6)  # but distance matters


def test_rope_accepts_batched_positions_and_rejects_bad_shapes():
    g = gen(3)
    x = randn(2, 5, 4, g=g)
    pos = torch.stack([torch.arange(5), torch.arange(5) + 3])  # (B, T)
    out = apply_rope(x, pos)
    torch.testing.assert_close(out[1], apply_rope(x[1], torch.arange(5) + 3))
    with pytest.raises(ValueError, match="D even"):
        apply_rope(randn(5, 3, g=g))
    with pytest.raises(ValueError, match=r"positions of shape \(T,\)"):
        apply_rope(x, torch.arange(4))


# ----------------------------------------------------------------------------- relative bias


def test_relative_position_bias_is_indexed_by_clipped_distance():
    torch.manual_seed(4)
    rpb = RelativePositionBias(n_heads=3, max_distance=2)
    with torch.no_grad():
        rpb.table.normal_()
    bias = rpb(4, 6)
    assert bias.shape == (3, 4, 6)
    for h in range(3):
        for i in range(4):
            for j in range(6):
                d = max(-2, min(2, j - (i + 2)))  # query i is at position i + S - T
                assert bias[h, i, j] == rpb.table[d + 2, h]
    # usable as a float attention mask broadcast over the batch
    g = gen(5)
    q, k, v = randn(2, 3, 4, 8, g=g), randn(2, 3, 6, 8, g=g), randn(2, 3, 6, 8, g=g)
    out, w = scaled_dot_product_attention(q, k, v, bias.double())
    scores = q @ k.transpose(-2, -1) / math.sqrt(8) + bias.double()
    torch.testing.assert_close(w, torch.softmax(scores, -1))


# ----------------------------------------------------------------------------- equivariance


@pytest.mark.parametrize("positions", ["sinusoidal", "learned"])
def test_adding_positions_breaks_permutation_equivariance(positions):
    torch.manual_seed(6)
    block = TransformerBlock(8, 2, 16).double()
    x = randn(2, 7, 8, g=gen(7))
    perm = torch.randperm(7, generator=gen(8))
    torch.testing.assert_close(block(x[:, perm]), block(x)[:, perm])  # no positions: equivariant
    if positions == "sinusoidal":
        pe = sinusoidal_positional_encoding(7, 8, dtype=F64)
        add = lambda x: x + pe  # noqa: E731
    else:
        emb = LearnedPositionalEmbedding(16, 8).double()
        add = emb
    with torch.no_grad():
        assert not torch.allclose(block(add(x[:, perm])), block(add(x))[:, perm], atol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_positional_modules_run_in_float32_float64_and_on_cuda(device, dtype):
    x = torch.randn(2, 5, 8, dtype=dtype, device=device)
    pe = sinusoidal_positional_encoding(5, 8, dtype=dtype, device=device)
    assert pe.dtype == dtype and pe.device.type == device
    emb = LearnedPositionalEmbedding(8, 8).to(device, dtype)
    rpb = RelativePositionBias(2, 3).to(device, dtype)
    for out in (apply_rope(x), apply_rope(x, torch.arange(5, device=device) + 2), emb(x, 1)):
        assert out.shape == x.shape and out.dtype == dtype and out.device.type == device
    bias = rpb(5)
    assert bias.shape == (2, 5, 5) and bias.dtype == dtype and bias.device.type == device
    tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else {}
    torch.testing.assert_close(apply_rope(x).norm(dim=-1), x.norm(dim=-1), **tol)


# ----------------------------------------------------------------------------- ALiBi


def _press_get_slopes(n: int) -> list[float]:
    """The reference: ``get_slopes`` from Press et al.'s code (attention_with_linear_biases)."""

    def get_slopes_power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        ratio = start
        return [start * ratio**i for i in range(n)]

    if math.log2(n).is_integer():
        return get_slopes_power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return get_slopes_power_of_2(closest) + _press_get_slopes(2 * closest)[0::2][: n - closest]


@pytest.mark.parametrize("H", [1, 2, 4, 8, 16, 32])
def test_alibi_slopes_are_two_to_the_minus_8i_over_h_for_powers_of_two(H):
    expected = torch.tensor([2.0 ** (-8 * i / H) for i in range(1, H + 1)], dtype=F64)
    torch.testing.assert_close(alibi_slopes(H), expected, rtol=1e-14, atol=0)


@pytest.mark.parametrize("H", range(1, 25))
def test_alibi_slopes_follow_the_papers_code_for_every_head_count(H):
    expected = torch.tensor(_press_get_slopes(H), dtype=F64)
    torch.testing.assert_close(alibi_slopes(H), expected, rtol=1e-14, atol=0)
    with pytest.raises(ValueError, match="n_heads"):
        alibi_slopes(0)


@FEW
@given(H=st.integers(1, 6), T=st.integers(1, 7), extra=st.integers(0, 4))
def test_alibi_bias_is_minus_slope_times_distance_by_loops(H, T, extra):
    S = T + extra  # the queries are the last T of S positions
    bias = alibi_bias(H, T, S, dtype=F64)
    slopes = _press_get_slopes(H)
    expected = torch.tensor(
        [[[-slopes[h] * ((i + S - T) - j) for j in range(S)] for i in range(T)] for h in range(H)],
        dtype=F64,
    )
    assert bias.shape == (H, T, S)
    torch.testing.assert_close(bias, expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(alibi_bias(H, T, dtype=F64), expected[:, :, extra:])  # S = T


def test_alibi_scores_depend_only_on_the_distance():
    """Shift the queries and keys together: the causal part of the bias does not change."""
    small, big = alibi_bias(4, 5, 5, dtype=F64), alibi_bias(4, 5, 9, dtype=F64)
    torch.testing.assert_close(small, big[:, :, 4:])
