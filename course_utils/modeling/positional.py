"""Positional information for attention: sinusoidal, learned, rotary (RoPE) and relative.

Self-attention alone is permutation equivariant: shuffle the tokens and the outputs shuffle
the same way. These are the ways to tell it where each token is:

- absolute, added to the input: :func:`sinusoidal_positional_encoding` (Vaswani et al. 2017),
  :class:`LearnedPositionalEmbedding` (GPT, BERT, ViT);
- rotary, applied to q and k: :func:`apply_rope` (Su et al. 2021) -- scores then depend only
  on the *relative* position i - j;
- a learned bias on the scores per relative distance: :class:`RelativePositionBias`
  (Shaw et al. 2018 / T5 style, without T5's log buckets);
- a fixed, linear penalty on the scores per distance, one slope per head: :func:`alibi_bias`
  (ALiBi, Press et al. 2022).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

__all__ = [
    "sinusoidal_positional_encoding",
    "LearnedPositionalEmbedding",
    "rope_angles",
    "apply_rope",
    "RelativePositionBias",
    "alibi_slopes",
    "alibi_bias",
]


def sinusoidal_positional_encoding(
    T: int,
    D: int,
    base: float = 10000.0,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Tensor:
    """Sinusoidal encodings (T, D), interleaved as in Vaswani et al.:

    pe[pos, 2i] = sin(pos / base^(2i/D)),  pe[pos, 2i+1] = cos(pos / base^(2i/D)).
    Computed in float64, returned in ``dtype``. Odd D is allowed (the last column is a sin).
    """
    if T < 0 or D < 1:
        raise ValueError(f"expected T >= 0 and D >= 1, got T={T}, D={D}")
    pos = torch.arange(T, dtype=torch.float64, device=device)[:, None]  # (T, 1)
    two_i = torch.arange(0, D, 2, dtype=torch.float64, device=device)  # (ceil(D/2),) = 2i
    angles = pos / base ** (two_i / D)  # (T, ceil(D/2))
    pe = torch.zeros(T, D, dtype=torch.float64, device=device)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles[:, : D // 2])
    return pe.to(dtype)


class LearnedPositionalEmbedding(nn.Module):
    """A learned vector per position, added to the input: x + P[offset : offset + T].

    ``weight`` is the table P of shape (max_len, d_model), initialised N(0, 0.02^2).
    forward(x (B, T, D), offset=0) -> (B, T, D); ``offset`` is the position of x's first token
    (e.g. the KV-cache length while decoding).
    """

    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        self.max_len = max_len
        self.weight = nn.Parameter(torch.randn(max_len, d_model) * 0.02)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """x (B, T, D) -> x + P[offset : offset + T], shape (B, T, D)."""
        T, D = x.shape[-2], x.shape[-1]
        if D != self.weight.shape[1]:
            raise ValueError(
                f"expected x of shape (B, T, D) with D == {self.weight.shape[1]}, got {tuple(x.shape)}"
            )
        if offset < 0 or offset + T > self.max_len:
            raise ValueError(
                f"positions offset..offset+T = {offset}..{offset + T} exceed max_len={self.max_len}"
            )
        return x + self.weight[offset : offset + T]  # (T, D) broadcasts over B


def rope_angles(positions: Tensor, D: int, base: float = 10000.0) -> Tensor:
    """Rotation angles pos * base^(-2i/D) for each pair i: positions (...,) -> (..., D/2)."""
    inv_freq = base ** (-torch.arange(0, D, 2, dtype=torch.float64, device=positions.device) / D)
    return positions.to(torch.float64)[..., None] * inv_freq  # (..., D/2)


def apply_rope(x: Tensor, positions: Tensor | None = None, base: float = 10000.0) -> Tensor:
    """Rotary position embedding: rotate each pair (x[..., 2i], x[..., 2i+1]) by pos * base^(-2i/D).

    x: (..., T, D) with D even (apply to q and k, per head); positions: (T,) or broadcastable
    to x.shape[:-1], default arange(T). Returns the shape of x. Rotations keep norms, and
    (R_m q) . (R_n k) depends only on n - m.
    """
    if x.ndim < 2 or x.shape[-1] % 2 != 0:
        raise ValueError(f"expected x of shape (..., T, D) with D even, got {tuple(x.shape)}")
    T, D = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(T, device=x.device)
    positions = torch.as_tensor(positions, device=x.device)
    try:
        ok = torch.broadcast_shapes(positions.shape, x.shape[:-1]) == x.shape[:-1]
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(
            f"expected positions of shape (T,) = ({T},) or broadcastable to {tuple(x.shape[:-1])}, "
            f"got {tuple(positions.shape)}"
        )
    angles = rope_angles(positions, D, base)  # (..., T, D/2), float64 for accuracy
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]  # (..., T, D/2) each: the pairs
    out = torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)  # (..., T, D/2, 2)
    return out.flatten(-2)  # (..., T, D), pairs interleaved back


class RelativePositionBias(nn.Module):
    """A learned bias per head and relative distance, added to the attention scores.

    bias[h, i, j] = table[clip(j - i, -max_distance, max_distance), h].
    forward(T, S=None) -> (H, T, S) float, to pass as a float ``attn_mask`` (it broadcasts to
    (B, H, T, S)). With S > T the queries are the last T of S positions, as in ``causal_mask``.
    """

    def __init__(self, n_heads: int, max_distance: int):
        super().__init__()
        self.n_heads = n_heads
        self.max_distance = max_distance
        self.table = nn.Parameter(torch.zeros(2 * max_distance + 1, n_heads))  # (2M+1, H)

    def relative_positions(self, T: int, S: int | None = None) -> Tensor:
        """(T, S) integer matrix j - i (query i at position i + S - T)."""
        S = T if S is None else S
        q_pos = torch.arange(T, device=self.table.device)[:, None] + (S - T)  # (T, 1)
        k_pos = torch.arange(S, device=self.table.device)[None, :]  # (1, S)
        return k_pos - q_pos  # (T, S)

    def forward(self, T: int, S: int | None = None) -> Tensor:
        """-> bias (H, T, S)."""
        rel = self.relative_positions(T, S).clamp(-self.max_distance, self.max_distance)
        bias = self.table[rel + self.max_distance]  # (T, S, H)
        return bias.permute(2, 0, 1)  # (H, T, S)


def alibi_slopes(n_heads: int) -> Tensor:
    """ALiBi's head slopes (Press et al. 2022), shape (H,), float64.

    For H a power of two: m_i = 2^(-8i/H), i = 1..H (a geometric sequence from 2^(-8/H)).
    Otherwise the paper's rule: the slopes of the closest smaller power of two n, then every
    other slope of 2n's sequence until there are H.
    """
    if n_heads < 1:
        raise ValueError(f"expected n_heads >= 1, got {n_heads}")

    def power_of_two(n: int) -> list[float]:
        return [2.0 ** (-8.0 * i / n) for i in range(1, n + 1)]

    n = 2 ** int(math.floor(math.log2(n_heads)))
    slopes = power_of_two(n) + power_of_two(2 * n)[0::2][: n_heads - n]
    return torch.tensor(slopes, dtype=torch.float64)


def alibi_bias(
    n_heads: int,
    T: int,
    S: int | None = None,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Tensor:
    """ALiBi's bias on the attention scores: bias[h, i, j] = m_h * (j - i), shape (H, T, S).

    Key j at distance i - j behind query i costs ``m_h * (i - j)`` (:func:`alibi_slopes`);
    keys ahead get a positive value, so use it with a causal mask, as the paper does. With
    S > T the queries are the last T of S positions (as with a KV cache). Add it to the scores
    (a float ``attn_mask``); nothing is learned and any length works.
    """
    S = T if S is None else S
    q_pos = torch.arange(T, dtype=torch.float64, device=device)[:, None] + (S - T)  # (T, 1)
    k_pos = torch.arange(S, dtype=torch.float64, device=device)[None, :]  # (1, S)
    slopes = alibi_slopes(n_heads).to(device)[:, None, None]  # (H, 1, 1)
    return (slopes * (k_pos - q_pos)).to(dtype)  # (H, T, S)
