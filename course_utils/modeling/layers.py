"""Transformer layers: multi-head attention, the MLP, encoder and decoder blocks, a KV cache.

Shapes: ``B`` batch, ``T`` query length, ``S`` key length, ``D`` model width (``d_model``),
``H`` heads, ``Dh = D / H`` per-head width.

Masks follow :mod:`course_utils.modeling.attention`: bool, ``True`` = may attend, broadcastable to
(B, H, T, S); ``key_padding_mask`` is (B, S) with ``True`` = real token. (PyTorch's
``nn.MultiheadAttention`` uses the *opposite* convention for ``key_padding_mask``: there
``True`` = padding. Convert with ``~mask``.)

Every module copies its weights from the matching PyTorch module with ``from_torch`` and is
tested to give the same outputs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import check_mask, combine_masks, fast_attention, scaled_dot_product_attention
from .positional import alibi_bias, apply_rope

POSITIONS_IN_ATTENTION = (None, "rope", "alibi")

__all__ = [
    "split_heads",
    "merge_heads",
    "KVCache",
    "MultiHeadAttention",
    "record_attention",
    "MLP",
    "residual",
    "TransformerBlock",
    "TransformerDecoderBlock",
    "pre_norm_stack",
]


def split_heads(x: Tensor, n_heads: int) -> Tensor:
    """(B, T, D) -> (B, H, T, D/H): reshape the last dim into heads, then move heads forward.

    Works on any leading dims: (..., T, D) -> (..., H, T, D/H).
    """
    if x.ndim < 2 or x.shape[-1] % n_heads != 0:
        raise ValueError(
            f"expected x of shape (B, T, D) with D divisible by n_heads={n_heads}, "
            f"got {tuple(x.shape)}"
        )
    *lead, T, D = x.shape
    x = x.reshape(*lead, T, n_heads, D // n_heads)  # (B, T, H, Dh)
    return x.transpose(-3, -2)  # (B, H, T, Dh)


def merge_heads(x: Tensor) -> Tensor:
    """(B, H, T, Dh) -> (B, T, H*Dh), the inverse of :func:`split_heads`."""
    if x.ndim < 3:
        raise ValueError(f"expected x of shape (B, H, T, Dh), got {tuple(x.shape)}")
    *lead, H, T, Dh = x.shape
    x = x.transpose(-3, -2)  # (B, T, H, Dh)
    return x.reshape(*lead, T, H * Dh)  # (B, T, D); reshape copies if not contiguous


class KVCache:
    """Keys and values of the tokens seen so far, for one attention layer.

    ``update(k, v)`` appends the new tokens' k, v (B, H, T_new, Dh) along the time axis and
    returns everything cached, (B, H, S, Dh). Pass it to ``MultiHeadAttention(..., cache=c)``:
    the layer then projects only the new tokens and the causal mask is offset by ``len(c)``.
    Use one cache per layer (e.g. ``[KVCache() for _ in blocks]``).
    """

    def __init__(self) -> None:
        self.k: Tensor | None = None  # (B, H, S, Dh)
        self.v: Tensor | None = None  # (B, H, S, Dh)

    def __len__(self) -> int:
        """Number of cached time steps S."""
        return 0 if self.k is None else self.k.shape[-2]

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append k, v (B, H, T_new, Dh); return all cached (k, v), each (B, H, S, Dh)."""
        if self.k is None:
            self.k, self.v = k, v
        else:
            if k.shape[:-2] != self.k.shape[:-2] or k.shape[-1] != self.k.shape[-1]:
                raise ValueError(
                    f"expected k of shape (B, H, T_new, Dh) = (*{tuple(self.k.shape[:-2])}, T_new, "
                    f"{self.k.shape[-1]}) to match the cache, got {tuple(k.shape)}"
                )
            self.k = torch.cat([self.k, k], dim=-2)
            self.v = torch.cat([self.v, v], dim=-2)
        return self.k, self.v

    def reset(self) -> None:
        """Forget everything (start a new sequence)."""
        self.k = self.v = None

    def __repr__(self) -> str:
        shape = None if self.k is None else tuple(self.k.shape)
        return f"KVCache(len={len(self)}, k_shape={shape})"


class MultiHeadAttention(nn.Module):
    """Multi-head attention with a fused QKV projection (self or cross attention).

    Parameters: ``qkv`` = Linear(D, 3D) whose weight rows are [W_q; W_k; W_v] (the layout of
    ``nn.MultiheadAttention.in_proj_weight``), ``out`` = Linear(D, D) (W_O).
    ``dropout`` is applied to the attention weights in training mode.
    ``fast`` (default True) attends through ``F.scaled_dot_product_attention``; False, or
    recording with :func:`record_attention`, uses the taught manual path (same result).
    ``position`` (self attention only): ``"rope"`` rotates q and k by their positions
    (:func:`~course_utils.modeling.positional.apply_rope`), ``"alibi"`` adds ALiBi's distance
    penalty to the scores (:func:`~course_utils.modeling.positional.alibi_bias`); positions
    count from the start of the sequence, a :class:`KVCache`'s length included.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        bias: bool = True,
        dropout: float = 0.0,
        position: str | None = None,
    ):
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError(
                f"expected d_model divisible by n_heads, got d_model={d_model}, n_heads={n_heads}"
            )
        if position not in POSITIONS_IN_ATTENTION:
            raise ValueError(f"expected position None, 'rope' or 'alibi', got {position!r}")
        if position == "rope" and (d_model // n_heads) % 2:
            raise ValueError(f"rope needs an even head width, got {d_model // n_heads}")
        self.position = position
        self.d_model = d_model
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.dropout = dropout
        self.fast = True
        self.recorded: list[Tensor] | None = None  # set by record_attention
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out = nn.Linear(d_model, d_model, bias=bias)

    def forward(
        self,
        x: Tensor,
        context: Tensor | None = None,
        *,
        attn_mask: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
        cache: KVCache | None = None,
    ) -> Tensor:
        """x (B, T, D), context (B, S, D) or None (self attention) -> out (B, T, D).

        attn_mask: bool (True = may attend) or float (added), broadcastable to (B, H, T, S).
        key_padding_mask: (B, S) bool, True = real token. is_causal: query i sees keys <= i
        (offset by the cache length when decoding with ``cache``, a :class:`KVCache`).
        """
        self._check_inputs(x, context, cache)
        q, k, v = self._project(x, context)  # (B, T, D), (B, S, D), (B, S, D)
        q, k, v = (split_heads(t, self.n_heads) for t in (q, k, v))  # (B, H, L, Dh)
        if self.position == "rope":
            start = 0 if cache is None else len(cache)
            pos = torch.arange(start, start + q.shape[-2], device=q.device)  # (T,)
            q, k = apply_rope(q, pos), apply_rope(k, pos)
        if cache is not None:
            k, v = cache.update(k, v)  # (B, H, S_past + T, Dh)
        y = self._attend(q, k, v, attn_mask, key_padding_mask, is_causal)  # (B, H, T, Dh)
        return self.out(merge_heads(y))  # (B, T, D)

    def _check_inputs(self, x: Tensor, context: Tensor | None, cache: KVCache | None) -> None:
        """Raise a ValueError unless x is (B, T, D) and context is None or (B, S, D)."""
        if x.ndim != 3 or x.shape[-1] != self.d_model:
            raise ValueError(
                f"expected x of shape (B, T, D) with D == {self.d_model}, got {tuple(x.shape)}"
            )
        if context is None:
            return
        if context.ndim != 3 or context.shape[0] != x.shape[0] or context.shape[-1] != self.d_model:
            raise ValueError(
                f"expected context of shape (B, S, D) = ({x.shape[0]}, S, {self.d_model}), "
                f"got {tuple(context.shape)}"
            )
        if cache is not None:
            raise ValueError("cache is for self attention: pass context=None with a KVCache")
        if self.position is not None:
            raise ValueError(f"position={self.position!r} is for self attention (context=None)")

    def _project(self, x: Tensor, context: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
        """q from x (B, T, D); k, v from context (B, S, D) (x itself for self attention)."""
        D = self.d_model
        if context is None:
            return self.qkv(x).split(D, dim=-1)  # 3 x (B, T, D): one matmul for all three
        w_q, w_kv = self.qkv.weight.split([D, 2 * D])  # (D, D), (2D, D)
        b_q, b_kv = (None, None) if self.qkv.bias is None else self.qkv.bias.split([D, 2 * D])
        q = F.linear(x, w_q, b_q)  # (B, T, D)
        k, v = F.linear(context, w_kv, b_kv).split(D, dim=-1)  # 2 x (B, S, D)
        return q, k, v

    def _attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        attn_mask: Tensor | None,
        key_padding_mask: Tensor | None,
        is_causal: bool,
    ) -> Tensor:
        """q (B, H, T, Dh), k, v (B, H, S, Dh) -> (B, H, T, Dh): SDPA, or the manual path
        (which appends its weights (B, H, T, S) to ``self.recorded`` while recording)."""
        B, H, T, S = *q.shape[:-1], k.shape[-2]
        if attn_mask is not None:
            check_mask(attn_mask, torch.Size((B, H, T, S)))
        if self.position == "alibi":
            attn_mask = _with_alibi(attn_mask, H, T, S, q)
        mask = combine_masks(attn_mask, key_padding_mask, S=S)  # causality is applied below
        dropout_p = self.dropout if self.training else 0.0
        if self.fast and self.recorded is None:
            return fast_attention(q, k, v, mask, is_causal=is_causal, dropout_p=dropout_p)
        y, weights = scaled_dot_product_attention(
            q, k, v, mask, is_causal=is_causal, dropout_p=dropout_p
        )
        if self.recorded is not None:
            self.recorded.append(weights.detach())
        return y

    @classmethod
    def from_torch(cls, mha: nn.MultiheadAttention) -> MultiHeadAttention:
        """A MultiHeadAttention with the weights of ``mha`` (same embed dim for q, k, v; no
        bias_k / add_zero_attn). Our inputs are batch-first whatever ``mha.batch_first`` says."""
        if not mha._qkv_same_embed_dim or mha.bias_k is not None or mha.add_zero_attn:
            raise ValueError(
                "expected an nn.MultiheadAttention with kdim == vdim == embed_dim, "
                "add_bias_kv=False and add_zero_attn=False"
            )
        bias = mha.in_proj_bias is not None
        ours = cls(mha.embed_dim, mha.num_heads, bias=bias, dropout=mha.dropout)
        w = mha.in_proj_weight
        ours = ours.to(device=w.device, dtype=w.dtype)
        with torch.no_grad():
            ours.qkv.weight.copy_(w)
            ours.out.weight.copy_(mha.out_proj.weight)
            if bias:
                ours.qkv.bias.copy_(mha.in_proj_bias)
                ours.out.bias.copy_(mha.out_proj.bias)
        return ours


def _with_alibi(attn_mask: Tensor | None, H: int, T: int, S: int, q: Tensor) -> Tensor:
    """ALiBi's bias (H, T, S) merged into ``attn_mask``: a float mask (blocked entries -inf)."""
    bias = alibi_bias(H, T, S, dtype=q.dtype, device=q.device)
    if attn_mask is None:
        return bias
    if attn_mask.dtype == torch.bool:
        return bias.masked_fill(~attn_mask, float("-inf"))
    return bias + attn_mask


@contextmanager
def record_attention(*modules: nn.Module) -> Iterator[list[Tensor]]:
    """Record the attention weights of every :class:`MultiHeadAttention` inside ``modules``.

    ``with record_attention(model) as maps: model(x)`` leaves in ``maps`` one weights tensor
    (B, H, T, S) per attention call, in call order (so for a stack of blocks, one per layer).
    While recording the layers attend through the manual path (same outputs as SDPA) and
    the weights are detached; pass e.g. ``*(b.cross_attn for b in model.decoder)`` to record
    only some layers. Forwards return one tensor; this is how the weights come out.
    """
    layers = [
        m for module in modules for m in module.modules() if isinstance(m, MultiHeadAttention)
    ]
    if not layers:
        raise ValueError("record_attention found no MultiHeadAttention in the given modules")
    maps: list[Tensor] = []
    previous = [m.recorded for m in layers]
    for m in layers:
        m.recorded = maps
    try:
        yield maps
    finally:
        for m, old in zip(layers, previous, strict=True):
            m.recorded = old


_ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU}


class MLP(nn.Module):
    """Position-wise feed-forward network: fc2(dropout(act(fc1(x)))).

    x (..., D) -> (..., D), hidden width ``d_ff``; activation "relu" or "gelu" (exact gelu,
    as ``nn.TransformerEncoderLayer(activation="gelu")``).
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        activation: str = "relu",
        dropout: float = 0.0,
        bias: bool = True,
    ):
        super().__init__()
        if activation not in _ACTIVATIONS:
            raise ValueError(f"expected activation in {sorted(_ACTIVATIONS)}, got {activation!r}")
        self.fc1 = nn.Linear(d_model, d_ff, bias=bias)
        self.act = _ACTIVATIONS[activation]()
        self.dropout = nn.Dropout(dropout)
        self.fc2 = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        """x (..., D) -> (..., D)."""
        return self.fc2(self.dropout(self.act(self.fc1(x))))  # (..., d_ff) inside


def _torch_activation_name(layer: nn.Module) -> str:
    """'relu' or 'gelu' for an nn.TransformerEncoderLayer / DecoderLayer."""
    act = layer.activation
    if act is F.relu or isinstance(act, nn.ReLU):
        return "relu"
    if act is F.gelu or (isinstance(act, nn.GELU) and act.approximate == "none"):
        return "gelu"
    raise ValueError(f"expected a relu or gelu activation, got {act!r}")


def _block_like(cls: type, layer: nn.Module) -> nn.Module:
    """An untrained ``cls`` block with the configuration (sizes, dropout, norm placement,
    activation, eps, bias), device and dtype of torch's encoder or decoder ``layer``."""
    sa = layer.self_attn
    ours = cls(
        sa.embed_dim,
        sa.num_heads,
        layer.linear1.out_features,
        dropout=layer.dropout.p,
        norm_first=layer.norm_first,
        activation=_torch_activation_name(layer),
        layer_norm_eps=layer.norm1.eps,
        bias=layer.linear1.bias is not None,
    )
    w = layer.linear1.weight
    return ours.to(device=w.device, dtype=w.dtype)


def _copy_linear(dst: nn.Linear, src: nn.Linear) -> None:
    dst.weight.copy_(src.weight)
    if src.bias is not None:
        dst.bias.copy_(src.bias)


def _copy_norm(dst: nn.LayerNorm, src: nn.LayerNorm) -> None:
    dst.weight.copy_(src.weight)
    if src.bias is not None:
        dst.bias.copy_(src.bias)


def residual(
    x: Tensor,
    branch: Callable[[Tensor], Tensor],
    norm: nn.Module,
    dropout: nn.Module,
    norm_first: bool,
) -> Tensor:
    """One sublayer with its residual connection, (B, T, D) -> (B, T, D):
    pre-norm ``x + dropout(branch(norm(x)))``, post-norm ``norm(x + dropout(branch(x)))``."""
    if norm_first:
        return x + dropout(branch(norm(x)))
    return norm(x + dropout(branch(x)))


class TransformerBlock(nn.Module):
    """Encoder block: self attention + MLP, each with a residual connection and LayerNorm.

    post-norm (``norm_first=False``, the 2017 paper): x = norm1(x + attn(x)); x = norm2(x + mlp(x))
    pre-norm  (``norm_first=True``, GPT-2 and most modern models):
        x = x + attn(norm1(x)); x = x + mlp(norm2(x))
    Submodules ``attn``, ``norm1``, ``norm2``, ``mlp`` (``fc1``, ``fc2``); ``dropout`` is used on
    the attention weights, inside the MLP and on both residual branches (as PyTorch does).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        *,
        dropout: float = 0.0,
        norm_first: bool = False,
        activation: str = "relu",
        layer_norm_eps: float = 1e-5,
        bias: bool = True,
        position: str | None = None,
    ):
        super().__init__()
        self.norm_first = norm_first
        self.attn = MultiHeadAttention(
            d_model, n_heads, bias=bias, dropout=dropout, position=position
        )
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.mlp = MLP(d_model, d_ff, activation=activation, dropout=dropout, bias=bias)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(
        self,
        x: Tensor,
        *,
        attn_mask: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
        cache: KVCache | None = None,
    ) -> Tensor:
        """x (B, T, D) -> (B, T, D). Masks as in :class:`MultiHeadAttention`
        (key_padding_mask: True = real token)."""
        kw = dict(
            attn_mask=attn_mask, key_padding_mask=key_padding_mask, is_causal=is_causal, cache=cache
        )
        x = residual(x, lambda h: self.attn(h, **kw), self.norm1, self.dropout1, self.norm_first)
        return residual(x, self.mlp, self.norm2, self.dropout2, self.norm_first)

    @classmethod
    def from_torch(cls, layer: nn.TransformerEncoderLayer) -> TransformerBlock:
        """A TransformerBlock with the configuration and weights of ``layer``."""
        sa = layer.self_attn
        ours = _block_like(cls, layer)
        ours.attn = MultiHeadAttention.from_torch(sa)
        with torch.no_grad():
            _copy_norm(ours.norm1, layer.norm1)
            _copy_norm(ours.norm2, layer.norm2)
            _copy_linear(ours.mlp.fc1, layer.linear1)
            _copy_linear(ours.mlp.fc2, layer.linear2)
        return ours


def pre_norm_stack(
    n_layers: int,
    d_model: int,
    n_heads: int,
    d_ff: int,
    *,
    dropout: float = 0.0,
    activation: str = "gelu",
    layer_norm_eps: float = 1e-5,
    bias: bool = True,
    position: str | None = None,
) -> nn.ModuleList:
    """``n_layers`` pre-norm :class:`TransformerBlock` s of width ``d_model``: the trunk that
    GPT (causal, over tokens) and ViT (bidirectional, over patches) share.
    Each maps (B, T, d_model) -> (B, T, d_model); ``position``: see :class:`MultiHeadAttention`."""
    return nn.ModuleList(
        TransformerBlock(
            d_model,
            n_heads,
            d_ff,
            dropout=dropout,
            norm_first=True,
            activation=activation,
            layer_norm_eps=layer_norm_eps,
            bias=bias,
            position=position,
        )
        for _ in range(n_layers)
    )


class TransformerDecoderBlock(nn.Module):
    """Decoder block: causal self attention, cross attention to ``memory``, MLP.

    post-norm: x = norm1(x + self_attn(x)); x = norm2(x + cross_attn(x, memory));
    x = norm3(x + mlp(x)). pre-norm applies each norm to the branch input instead.
    Submodules ``self_attn``, ``cross_attn``, ``norm1``, ``norm2``, ``norm3``, ``mlp``.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        *,
        dropout: float = 0.0,
        norm_first: bool = False,
        activation: str = "relu",
        layer_norm_eps: float = 1e-5,
        bias: bool = True,
    ):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, bias=bias, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, bias=bias, dropout=dropout)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm3 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.mlp = MLP(d_model, d_ff, activation=activation, dropout=dropout, bias=bias)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        *,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        is_causal: bool = True,
        cache: KVCache | None = None,
    ) -> Tensor:
        """x (B, T, D), memory (B, S, D) -> (B, T, D).

        tgt_mask / tgt_key_padding_mask (B, T) apply to self attention (causal by default;
        ``cache`` caches its keys/values); memory_mask / memory_key_padding_mask (B, S) to cross
        attention. True = may attend / real token.
        """

        def sa(h: Tensor) -> Tensor:
            return self.self_attn(
                h,
                attn_mask=tgt_mask,
                key_padding_mask=tgt_key_padding_mask,
                is_causal=is_causal,
                cache=cache,
            )

        def ca(h: Tensor) -> Tensor:
            return self.cross_attn(
                h, memory, attn_mask=memory_mask, key_padding_mask=memory_key_padding_mask
            )

        x = residual(x, sa, self.norm1, self.dropout1, self.norm_first)
        x = residual(x, ca, self.norm2, self.dropout2, self.norm_first)
        return residual(x, self.mlp, self.norm3, self.dropout3, self.norm_first)

    @classmethod
    def from_torch(cls, layer: nn.TransformerDecoderLayer) -> TransformerDecoderBlock:
        """A TransformerDecoderBlock with the configuration and weights of ``layer``."""
        sa = layer.self_attn
        ours = _block_like(cls, layer)
        ours.self_attn = MultiHeadAttention.from_torch(sa)
        ours.cross_attn = MultiHeadAttention.from_torch(layer.multihead_attn)
        with torch.no_grad():
            _copy_norm(ours.norm1, layer.norm1)
            _copy_norm(ours.norm2, layer.norm2)
            _copy_norm(ours.norm3, layer.norm3)
            _copy_linear(ours.mlp.fc1, layer.linear1)
            _copy_linear(ours.mlp.fc2, layer.linear2)
        return ours
