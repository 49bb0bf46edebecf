"""Attention from first principles: softmax, masks, scaled dot-product, additive and tiled attention.

Shapes: ``B`` batch, ``H`` heads, ``T`` query length, ``S`` key length, ``D`` width.

One mask convention everywhere (PyTorch's): a boolean mask where ``True`` means the query
*may attend* to the key, broadcastable to ``(B, H, T, S)``. A float mask is *added* to the
scores (``0`` = keep, ``-inf`` = block). A query that may attend to nothing (a fully masked
row) gets all-zero weights and a zero output -- never NaN.

The manual code paths here are the taught ones; :func:`fast_attention` is the same
computation through ``torch.nn.functional.scaled_dot_product_attention``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "softmax",
    "causal_mask",
    "padding_mask",
    "masked_softmax",
    "combine_masks",
    "check_mask",
    "scaled_dot_product_attention",
    "fast_attention",
    "additive_scores",
    "AdditiveAttention",
    "tiled_attention",
]


# ----------------------------------------------------------------------------- softmax & masks


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    """Numerically stable softmax along ``dim``: ``exp(x - max) / sum(exp(x - max))``.

    x: any shape -> same shape, non-negative, summing to 1 along ``dim``.
    Subtracting the row maximum changes nothing mathematically but keeps ``exp`` from
    overflowing (``exp(1e4)`` is ``inf`` in float64).
    """
    x_max = x.amax(dim=dim, keepdim=True).detach()  # shift does not change the result
    e = torch.exp(x - x_max)
    return e / e.sum(dim=dim, keepdim=True)


def causal_mask(
    T: int, S: int | None = None, *, device: torch.device | str | None = None
) -> Tensor:
    """Boolean causal mask of shape (T, S), True = may attend.

    With ``S == T`` (the default) query ``i`` sees keys ``0..i`` (lower triangle).
    With ``S > T`` the queries are the *last* T of S positions (decoding with a KV cache):
    query ``i`` may attend key ``j`` iff ``j <= i + (S - T)``.
    """
    S = T if S is None else S
    if T < 0 or S < 0:
        raise ValueError(f"expected non-negative lengths T and S, got T={T}, S={S}")
    ones = torch.ones(T, S, dtype=torch.bool, device=device)
    return torch.tril(ones, diagonal=S - T)  # (T, S)


def padding_mask(lengths: Tensor | list[int], S: int) -> Tensor:
    """Boolean key padding mask of shape (B, S), True at real tokens (``j < lengths[b]``).

    lengths: (B,) integer lengths. Use ``mask[:, None, None, :]`` to broadcast it to (B, H, T, S).
    """
    lengths = torch.as_tensor(lengths)
    if lengths.ndim != 1:
        raise ValueError(f"expected lengths of shape (B,), got {tuple(lengths.shape)}")
    positions = torch.arange(S, device=lengths.device)  # (S,)
    return positions[None, :] < lengths[:, None]  # (B, S)


def check_mask(mask: Tensor, scores_shape: torch.Size, name: str = "attn_mask") -> None:
    """Raise a ValueError unless ``mask`` broadcasts to ``scores_shape`` (..., T, S).

    Used wherever a mask meets scores (here and in :mod:`course_utils.modeling.layers`)."""
    try:
        shape = torch.broadcast_shapes(mask.shape, scores_shape)
    except RuntimeError:
        shape = None
    if shape != scores_shape:
        raise ValueError(
            f"expected {name} broadcastable to the scores' shape (..., T, S) = "
            f"{tuple(scores_shape)}, got {tuple(mask.shape)}"
        )


def masked_softmax(scores: Tensor, mask: Tensor | None = None, dim: int = -1) -> Tensor:
    """Softmax over ``dim`` that ignores masked entries and stays finite on fully masked rows.

    scores: (..., T, S); mask: bool, broadcastable to scores, True = keep (may attend).
    Returns weights of the shape of ``scores``: masked entries are exactly 0; a row with no
    allowed entry (all masked, or all ``-inf`` scores) is all zeros, and its gradient is 0, not NaN.
    """
    if mask is not None:
        if mask.dtype != torch.bool:
            raise ValueError(f"expected a bool mask (True = may attend), got dtype {mask.dtype}")
        check_mask(mask, scores.shape, "mask")
        scores = scores.masked_fill(~mask, float("-inf"))
    x_max = scores.amax(dim=dim, keepdim=True).detach()
    # A fully masked row has max -inf; shift it by 0 instead so exp(-inf - 0) = 0, not NaN.
    x_max = torch.where(torch.isfinite(x_max), x_max, torch.zeros_like(x_max))
    e = torch.exp(scores - x_max)  # 0 at masked entries
    denom = e.sum(dim=dim, keepdim=True)
    denom = torch.where(denom > 0, denom, torch.ones_like(denom))  # 0 / 1 = 0 on empty rows
    return e / denom


def combine_masks(
    attn_mask: Tensor | None = None,
    key_padding_mask: Tensor | None = None,
    *,
    is_causal: bool = False,
    T: int | None = None,
    S: int | None = None,
    device: torch.device | str | None = None,
) -> Tensor | None:
    """Merge an attention mask, a key padding mask and causality into one mask (or None).

    attn_mask: bool (True = may attend) or float (added to scores), broadcastable to (B, H, T, S).
    key_padding_mask: bool (B, S), True = real token; it becomes (B, 1, 1, S).
    is_causal: AND with ``causal_mask(T, S)`` (needs T and S).
    Returns a bool mask if every input is bool, a float mask if ``attn_mask`` is float,
    or None when there is nothing to mask.
    """
    mask = attn_mask
    if key_padding_mask is not None:
        if key_padding_mask.ndim != 2 or key_padding_mask.dtype != torch.bool:
            raise ValueError(
                "expected key_padding_mask of shape (B, S) and dtype bool (True = real token), "
                f"got shape {tuple(key_padding_mask.shape)} and dtype {key_padding_mask.dtype}"
            )
        if S is not None and key_padding_mask.shape[-1] != S:
            raise ValueError(
                f"expected key_padding_mask of shape (B, S) with S == {S}, "
                f"got {tuple(key_padding_mask.shape)}"
            )
        kpm = key_padding_mask[:, None, None, :]  # (B, 1, 1, S)
        mask = _and_masks(mask, kpm)
    if is_causal:
        if T is None:
            raise ValueError("combine_masks(is_causal=True) needs the query length T")
        mask = _and_masks(mask, causal_mask(T, S, device=device))
    return mask


def _and_masks(mask: Tensor | None, allowed: Tensor) -> Tensor:
    """Restrict ``mask`` (bool, float or None) to the positions where bool ``allowed`` is True."""
    if mask is None:
        return allowed
    if mask.dtype == torch.bool:
        return mask & allowed
    return mask.masked_fill(~allowed, float("-inf"))


# ----------------------------------------------------------------------------- dot-product


def _check_qkv(q: Tensor, k: Tensor, v: Tensor) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.ndim < 2:
            raise ValueError(
                f"expected {name} of shape (..., L, D) with at least 2 dims, got {tuple(t.shape)}"
            )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"expected q of shape (..., T, Dk) and k of shape (..., S, Dk) with the same Dk, "
            f"got q {tuple(q.shape)} and k {tuple(k.shape)}"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"expected k of shape (..., S, Dk) and v of shape (..., S, Dv) with the same S, "
            f"got k {tuple(k.shape)} and v {tuple(v.shape)}"
        )
    try:
        torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ValueError(
            "expected q, k, v with broadcastable batch dims (...), "
            f"got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        ) from None


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    attn_mask: Tensor | None = None,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    dropout_p: float = 0.0,
) -> tuple[Tensor, Tensor]:
    """softmax(q k^T / sqrt(Dk) + mask) v, the manual (taught) path.

    q: (..., T, Dk), k: (..., S, Dk), v: (..., S, Dv), any broadcastable leading dims.
    attn_mask: bool (True = may attend) or float (added to scores), broadcastable to (..., T, S).
    is_causal: also apply ``causal_mask(T, S)`` (queries are the last T of S positions when
    S > T; note ``F.scaled_dot_product_attention`` aligns top-left instead, same when T == S).
    scale: defaults to 1 / sqrt(Dk). dropout_p: dropout on the weights (always applied when > 0).
    Returns (output (..., T, Dv), weights (..., T, S)); weights are before dropout, and a fully
    masked query row has zero weights and zero output.
    """
    _check_qkv(q, k, v)
    T, S = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * scale  # (..., T, Dk) @ (..., Dk, S) -> (..., T, S)
    if attn_mask is not None:
        check_mask(attn_mask, scores.shape)
        if attn_mask.dtype != torch.bool:
            scores = scores + attn_mask  # float mask: added, -inf blocks
            attn_mask = None
    if is_causal:
        attn_mask = combine_masks(attn_mask, is_causal=True, T=T, S=S, device=q.device)
    weights = masked_softmax(scores, attn_mask)  # (..., T, S)
    attn = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
    out = attn @ v  # (..., T, S) @ (..., S, Dv) -> (..., T, Dv)
    return out, weights


def fast_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    attn_mask: Tensor | None = None,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    dropout_p: float = 0.0,
) -> Tensor:
    """The same as :func:`scaled_dot_product_attention` through ``F.scaled_dot_product_attention``.

    q: (..., T, Dk), k: (..., S, Dk), v: (..., S, Dv) -> output (..., T, Dv) (no weights).
    Masks and causality follow our conventions (causal is bottom-right aligned when S != T);
    fully masked rows give zeros, with zero (not NaN) gradients, whatever backend runs.
    """
    _check_qkv(q, k, v)
    T, S = q.shape[-2], k.shape[-2]
    if attn_mask is not None:
        batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
        check_mask(attn_mask, torch.Size((*batch, T, S)))
    if is_causal and attn_mask is None and T == S:
        return F.scaled_dot_product_attention(
            q, k, v, dropout_p=dropout_p, is_causal=True, scale=scale
        )
    if is_causal:
        attn_mask = combine_masks(attn_mask, is_causal=True, T=T, S=S, device=q.device)
    if attn_mask is None:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, scale=scale)
    # Rows where nothing may be attended: let them attend everything (finite everywhere),
    # then zero their output. Backends disagree on what they do with such rows otherwise.
    if attn_mask.dtype == torch.bool:
        empty = ~attn_mask.any(dim=-1, keepdim=True)  # (..., T, 1)
        safe_mask = attn_mask | empty
    else:
        empty = torch.isneginf(attn_mask).all(dim=-1, keepdim=True)
        safe_mask = attn_mask.masked_fill(empty, 0.0).to(q.dtype)
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=safe_mask, dropout_p=dropout_p, scale=scale
    )
    return out.masked_fill(empty, 0.0)  # (..., T, Dv)


# ----------------------------------------------------------------------------- additive (Bahdanau)


def additive_scores(
    query: Tensor, keys: Tensor, W_query: Tensor, W_key: Tensor, v: Tensor
) -> Tensor:
    """Bahdanau alignment scores e_j = v^T tanh(W_query s + W_key h_j).

    query s: (B, Dq), keys h: (B, S, Dk), W_query: (A, Dq), W_key: (A, Dk), v: (A,) -> (B, S).
    """
    if query.ndim != 2 or keys.ndim != 3 or query.shape[0] != keys.shape[0]:
        raise ValueError(
            f"expected query of shape (B, Dq) and keys of shape (B, S, Dk), "
            f"got query {tuple(query.shape)} and keys {tuple(keys.shape)}"
        )
    A = v.shape[-1]
    if W_query.shape != (A, query.shape[-1]):
        raise ValueError(
            f"expected W_query of shape (A, Dq) = {(A, query.shape[-1])}, got {tuple(W_query.shape)}"
        )
    if W_key.shape != (A, keys.shape[-1]):
        raise ValueError(
            f"expected W_key of shape (A, Dk) = {(A, keys.shape[-1])}, got {tuple(W_key.shape)}"
        )
    q = query @ W_query.T  # (B, A)
    k = keys @ W_key.T  # (B, S, A)
    return torch.tanh(q[:, None, :] + k) @ v  # (B, S, A) @ (A,) -> (B, S)


class AdditiveAttention(nn.Module):
    """Bahdanau (additive) attention: weights = softmax(v^T tanh(W_query s + W_key h)).

    ``W_query`` (Dq -> A) and ``W_key`` (Dk -> A) are bias-free ``nn.Linear`` layers (a bias
    in one of them would be equivalent to a bias inside the tanh; we keep the formula's form),
    ``v`` is a parameter of shape (A,). So
    ``additive_scores(s, h, m.W_query.weight, m.W_key.weight, m.v)`` equals the module's scores.
    """

    def __init__(self, query_dim: int, key_dim: int, attn_dim: int):
        super().__init__()
        self.W_query = nn.Linear(query_dim, attn_dim, bias=False)
        self.W_key = nn.Linear(key_dim, attn_dim, bias=False)
        self.v = nn.Parameter(
            torch.empty(attn_dim).uniform_(-1 / math.sqrt(attn_dim), 1 / math.sqrt(attn_dim))
        )

    def forward(
        self, query: Tensor, keys: Tensor, values: Tensor | None = None, mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """query (B, Dq), keys (B, S, Dk), values (B, S, Dv) (default: keys), mask (B, S) bool
        (True = real token) -> (context (B, Dv), weights (B, S))."""
        values = keys if values is None else values
        if values.shape[:2] != keys.shape[:2]:
            raise ValueError(
                f"expected values of shape (B, S, Dv) matching keys (B, S) = {tuple(keys.shape[:2])}, "
                f"got {tuple(values.shape)}"
            )
        if mask is not None and mask.shape != keys.shape[:2]:
            raise ValueError(
                f"expected mask of shape (B, S) = {tuple(keys.shape[:2])}, got {tuple(mask.shape)}"
            )
        scores = additive_scores(
            query, keys, self.W_query.weight, self.W_key.weight, self.v
        )  # (B, S)
        weights = masked_softmax(scores, mask)  # (B, S)
        context = (weights[:, :, None] * values).sum(dim=1)  # (B, Dv)
        return context, weights


# ----------------------------------------------------------------------------- tiled (flash-style)


def tiled_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    block_size: int = 128,
    causal: bool = False,
    *,
    scale: float | None = None,
) -> Tensor:
    """Exact attention with an online softmax over key blocks (the idea behind FlashAttention).

    q: (..., T, Dk), k: (..., S, Dk), v: (..., S, Dv) -> output (..., T, Dv).
    Queries are taken ``block_size`` at a time and, for each query block, keys are visited
    ``block_size`` at a time; a running max ``m``, normaliser ``l`` and unnormalised output
    ``acc`` are rescaled as each key block arrives, so the largest score tensor is
    (..., block_size, block_size) -- the (T, S) matrix is never built, and the extra memory
    beyond the output is O(block_size**2), independent of T and S.
    causal: same alignment as ``causal_mask(T, S)``; fully masked rows give zeros.
    """
    _check_qkv(q, k, v)
    if block_size < 1:
        raise ValueError(f"expected block_size >= 1, got {block_size}")
    T, S = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    dtype = torch.promote_types(q.dtype, v.dtype)

    q = q.expand(*batch, T, q.shape[-1])
    # Query blocks are independent: each one's rows of the output need only its own queries.
    # Blocking them too keeps every temporary at (..., block, block); each block's rows go
    # straight into the output, so nothing else of size T is ever held.
    out = torch.empty((*batch, T, v.shape[-1]), dtype=dtype, device=q.device)  # (..., T, Dv)
    for i in range(0, T, block_size):
        out[..., i : i + block_size, :] = _online_softmax_block(
            q[..., i : i + block_size, :], k, v, i + (S - T), block_size, causal, scale, dtype
        )
    return out


def _online_softmax_block(
    qb: Tensor,
    k: Tensor,
    v: Tensor,
    first_pos: int,
    block_size: int,
    causal: bool,
    scale: float,
    dtype: torch.dtype,
) -> Tensor:
    """Attention output for one query block qb (..., Tq, Dk) whose first query sits at absolute
    position ``first_pos``: the online softmax over key blocks. Returns (..., Tq, Dv)."""
    Tq, S = qb.shape[-2], k.shape[-2]
    batch = qb.shape[:-2]
    m = torch.full((*batch, Tq, 1), float("-inf"), dtype=dtype, device=qb.device)  # running max
    l = torch.zeros((*batch, Tq, 1), dtype=dtype, device=qb.device)  # running sum of exp
    acc = torch.zeros((*batch, Tq, v.shape[-1]), dtype=dtype, device=qb.device)  # sum of p v
    q_pos = torch.arange(first_pos, first_pos + Tq, device=qb.device)[:, None]  # (Tq, 1)
    # causal: keys after this block's last query are masked for every row, so never visited
    last_key = min(S, first_pos + Tq) if causal else S

    for start in range(0, last_key, block_size):
        kb = k[..., start : start + block_size, :]  # (..., Bk, Dk)
        vb = v[..., start : start + block_size, :]  # (..., Bk, Dv)
        s = (qb @ kb.transpose(-2, -1)) * scale  # (..., Tq, Bk)
        if causal:
            k_pos = torch.arange(start, start + kb.shape[-2], device=qb.device)[None, :]  # (1, Bk)
            s = s.masked_fill(k_pos > q_pos, float("-inf"))
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))  # (..., Tq, 1)
        m_safe = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
        p = torch.exp(s - m_safe)  # (..., Tq, Bk), 0 where masked
        alpha = torch.exp(m - m_safe)  # rescales what was summed under the old max
        l = l * alpha + p.sum(dim=-1, keepdim=True)
        acc = acc * alpha + p @ vb  # (..., Tq, Dv)
        m = m_new

    return acc / torch.where(l > 0, l, torch.ones_like(l))  # (..., Tq, Dv)
