"""A decoder-only Transformer language model (GPT), nanoGPT style.

    idx (B, T) token ids
      -> token embedding (+ learned or sinusoidal positions) (B, T, D)
      -> n_layers pre-norm causal TransformerBlocks       (B, T, D)
      -> final LayerNorm -> LM head (tied to the token embedding)  (B, T, V)
      -> next-token cross-entropy against targets (B, T)

``GPTConfig.position`` chooses how positions enter (notebook 04's encodings):
``"learned"`` (GPT-2's table, the default), ``"sinusoidal"`` (Vaswani et al., added to the
tokens), ``"rope"`` (q and k rotated in every attention layer) or ``"alibi"`` (a per-head
distance penalty on the scores). The last three learn nothing about positions and accept
sequences longer than ``block_size`` in ``forward``; ``generate`` still keeps the last
``block_size`` tokens as its context.

Training uses the fast path (``F.scaled_dot_product_attention`` with ``is_causal=True``).
``generate`` samples with temperature and top-k, optionally with a KV cache: each new token
then costs one position through every layer instead of the whole context, and the result is
the same as recomputing everything (a test proves it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from course_utils.modeling.layers import KVCache, pre_norm_stack, record_attention
from course_utils.modeling.models.config import resolve_config
from course_utils.modeling.module_state import eval_mode, model_device
from course_utils.modeling.positional import sinusoidal_positional_encoding

POSITIONS = ("learned", "sinusoidal", "rope", "alibi")

__all__ = ["GPT", "GPTConfig", "sample_next_token"]


@dataclass
class GPTConfig:
    """Sizes of a :class:`GPT`. ``d_ff=None`` means ``4 * d_model``.

    The default is nanoGPT's CPU size for character-level tiny-shakespeare. The field names
    are the course's everywhere (``d_model``, ``n_heads``, ``n_layers``, ``d_ff``: the paper's,
    and those of :class:`ViTConfig`, :class:`EncoderDecoderTransformer` and the layers); nanoGPT
    calls the first three ``n_embd``, ``n_head`` and ``n_layer``.
    """

    vocab_size: int = 65
    block_size: int = 64  # the longest context the model sees (the learned table's length)
    n_layers: int = 4
    n_heads: int = 4
    d_model: int = 128
    dropout: float = 0.0
    bias: bool = True  # biases in Linear layers (and LayerNorms, as in nanoGPT)
    d_ff: int | None = None
    activation: str = "gelu"
    layer_norm_eps: float = 1e-5
    position: str = "learned"  # "learned", "sinusoidal", "rope" or "alibi" (see the module)

    def __post_init__(self) -> None:
        if self.position not in POSITIONS:
            raise ValueError(f"expected position in {POSITIONS}, got {self.position!r}")
        if self.d_model % self.n_heads:
            raise ValueError(
                f"expected d_model divisible by n_heads, got d_model={self.d_model}, "
                f"n_heads={self.n_heads}"
            )
        if self.d_ff is None:
            self.d_ff = 4 * self.d_model

    PRESETS = {
        # nanoGPT's CPU recipe (README "I only have a macbook"), char-level shakespeare
        "nanogpt-cpu": dict(block_size=64, n_layers=4, n_heads=4, d_model=128, dropout=0.0),
        # nanoGPT's config/train_shakespeare_char.py
        "nanogpt-gpu": dict(block_size=256, n_layers=6, n_heads=6, d_model=384, dropout=0.2),
        # GPT-2 small (124M) and GPT-3 175B (Brown et al. 2020, Table 2.1)
        "gpt2": dict(vocab_size=50257, block_size=1024, n_layers=12, n_heads=12, d_model=768),
        "gpt3-175b": dict(
            vocab_size=50257, block_size=2048, n_layers=96, n_heads=96, d_model=12288
        ),
    }

    @classmethod
    def preset(cls, name: str, **overrides) -> GPTConfig:
        """A named configuration: ``"nanogpt-cpu"``, ``"nanogpt-gpu"``, ``"gpt2"``,
        ``"gpt3-175b"``; keyword overrides win (e.g. ``vocab_size=65``)."""
        if name not in cls.PRESETS:
            raise ValueError(f"unknown GPT preset {name!r}; choose one of {sorted(cls.PRESETS)}")
        return cls(**{**cls.PRESETS[name], **overrides})

    def param_count(self, non_embedding: bool = False) -> int:
        """Parameters of ``GPT(self)`` from the formula, without building the model.

        Per layer: 2 LayerNorms (2·2D), QKV (3D² + 3D), output projection (D² + D),
        MLP (D·F + F + F·D + D). Plus token embedding V·D (shared with the LM head),
        position embedding T·D (``position="learned"`` only) and the final LayerNorm 2D. Without biases drop every bias
        term. ``non_embedding=True`` leaves out the position embedding (nanoGPT's convention).
        """
        D, F_, L, b = self.d_model, self.d_ff, self.n_layers, int(self.bias)
        ln = D + b * D
        attn = 3 * D * D + b * 3 * D + D * D + b * D
        mlp = D * F_ + b * F_ + F_ * D + b * D
        total = L * (2 * ln + attn + mlp) + ln + self.vocab_size * D
        if not non_embedding and self.position == "learned":
            total += self.block_size * D
        return total


class GPT(nn.Module):
    """Decoder-only Transformer LM.

    ``GPT(config)`` or ``GPT(n_layers=2, ...)`` (keywords override the config's fields; a
    ``d_ff`` that followed the 4 x d_model rule follows it for the new width too).
    forward(idx (B, T), targets (B, T) or None) -> (logits (B, T, V), loss or None).
    """

    def __init__(self, config: GPTConfig | None = None, **overrides) -> None:
        super().__init__()
        self.config = config = resolve_config(GPTConfig, config, overrides)
        D = config.d_model
        self.tok_emb = nn.Embedding(config.vocab_size, D)
        if config.position == "learned":
            self.pos_emb = nn.Embedding(config.block_size, D)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = pre_norm_stack(
            config.n_layers,
            D,
            config.n_heads,
            config.d_ff,
            dropout=config.dropout,
            activation=config.activation,
            layer_norm_eps=config.layer_norm_eps,
            bias=config.bias,
            position=config.position if config.position in ("rope", "alibi") else None,
        )
        self.ln_f = nn.LayerNorm(D, eps=config.layer_norm_eps, bias=config.bias)
        self.lm_head = nn.Linear(D, config.vocab_size, bias=False)
        self.lm_head.weight = self.tok_emb.weight  # weight tying (Press & Wolf, 2017)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """GPT-2 init: N(0, 0.02) weights, zero biases, and residual projections
        (attention output, second MLP layer) scaled by 1/sqrt(2 * n_layers)."""
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)
        std = 0.02 / math.sqrt(2 * self.config.n_layers)
        for block in self.blocks:
            nn.init.normal_(block.attn.out.weight, mean=0.0, std=std)
            nn.init.normal_(block.mlp.fc2.weight, mean=0.0, std=std)

    def num_params(self, non_embedding: bool = False) -> int:
        """Number of parameters (the tied head counted once). ``non_embedding=True`` leaves
        out the position embedding, as nanoGPT reports."""
        n = sum(p.numel() for p in self.parameters())
        if non_embedding and self.config.position == "learned":
            n -= self.pos_emb.weight.numel()
        return n

    # ----------------------------------------------------------------------------------
    # forward
    # ----------------------------------------------------------------------------------
    def embed(self, idx: torch.Tensor, start_pos: int = 0) -> torch.Tensor:
        """idx (B, T) -> token (+ position) embeddings (B, T, D) for positions start_pos...

        ``start_pos`` > 0 is used by cached decoding, where ``idx`` continues a sequence.
        With ``position="rope"`` or ``"alibi"`` the positions enter in attention instead.
        """
        if idx.dim() != 2:
            raise ValueError(f"expected idx of shape (B, T), got {tuple(idx.shape)}")
        T, position = idx.shape[1], self.config.position
        if position == "learned" and start_pos + T > self.config.block_size:
            raise ValueError(
                f"sequence of length {start_pos + T} is longer than block_size="
                f"{self.config.block_size}; crop the context to the last block_size tokens"
            )
        x = self.tok_emb(idx)  # (B, T, D)
        if position == "learned":
            pos = torch.arange(start_pos, start_pos + T, device=idx.device)  # (T,)
            x = x + self.pos_emb(pos)
        elif position == "sinusoidal":
            pe = sinusoidal_positional_encoding(
                start_pos + T, x.shape[-1], dtype=x.dtype, device=x.device
            )
            x = x + pe[start_pos:]  # (T, D) broadcasts over B
        return self.drop(x)  # (B, T, D)

    def forward(
        self,
        idx: torch.Tensor,
        targets: torch.Tensor | None = None,
        *,
        cache: list[KVCache] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """idx (B, T), targets (B, T) -> (logits (B, T, V), mean cross-entropy or None).

        Targets equal to -1 are ignored. ``cache`` (one :class:`KVCache` per layer, from
        :meth:`new_cache`) makes ``idx`` continue the cached sequence; the caches are
        updated in place.
        """
        start = 0 if cache is None else _cache_len(cache[0])
        x = self.embed(idx, start)
        for i, block in enumerate(self.blocks):
            x = block(x, is_causal=True, cache=None if cache is None else cache[i])
        logits = self.lm_head(self.ln_f(x))  # (B, T, V)
        loss = None
        if targets is not None:
            if targets.shape != idx.shape:
                raise ValueError(
                    f"expected targets of shape {tuple(idx.shape)} (like idx), "
                    f"got {tuple(targets.shape)}"
                )
            loss = F.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-1
            )
        return logits, loss

    @torch.no_grad()
    def attention_maps(self, idx: torch.Tensor) -> list[torch.Tensor]:
        """Attention weights of every layer for plots: idx (B, T) -> list of (B, H, T, T).

        Runs in eval mode (no dropout) through the manual attention path, then restores the
        previous mode. Row i of a map is query position i; its entries after i are zero.
        """
        idx = idx.to(model_device(self))  # a prompt from the CPU joins the model
        with eval_mode(self), record_attention(self) as maps:
            self(idx)
        return maps

    # ----------------------------------------------------------------------------------
    # generation
    # ----------------------------------------------------------------------------------
    def new_cache(self) -> list[KVCache]:
        """One empty :class:`KVCache` per layer."""
        return [KVCache() for _ in self.blocks]

    @torch.no_grad()
    def generate(
        self,
        idx: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        use_cache: bool = True,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Sample ``max_new_tokens`` tokens after the prompt: idx (B, T) -> (B, T + new).

        ``temperature=0`` means greedy (argmax). The context is cropped to the last
        ``block_size`` tokens. With ``use_cache`` the prompt is run once and each new token
        reuses the cached keys/values; once the cache holds ``block_size`` positions the
        window slides, the positions shift, and the cache is rebuilt from the cropped context,
        so the output equals ``use_cache=False`` exactly (up to float rounding).
        Runs in eval mode (no dropout) and restores the previous mode. The prompt moves to
        the model's device; pass a ``generator`` on that device (``devices.generator``).
        """
        if idx.dim() != 2:
            raise ValueError(f"expected idx of shape (B, T), got {tuple(idx.shape)}")
        if idx.shape[1] == 0:
            raise ValueError("expected a prompt with at least one token, got T = 0")
        idx = idx.to(model_device(self))  # a prompt from the CPU joins the model
        block_size = self.config.block_size
        cache = None
        with eval_mode(self):
            for _ in range(max_new_tokens):
                if not use_cache:
                    logits, _ = self(idx[:, -block_size:])
                elif cache is None or _cache_len(cache[0]) >= block_size:
                    cache = self.new_cache()  # (re)fill from the cropped context
                    logits, _ = self(idx[:, -block_size:], cache=cache)
                else:
                    logits, _ = self(idx[:, -1:], cache=cache)  # one new position
                next_token = sample_next_token(
                    logits[:, -1, :], temperature=temperature, top_k=top_k, generator=generator
                )
                idx = torch.cat([idx, next_token], dim=1)
        return idx


def sample_next_token(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Sample one token per row: logits (B, V) -> token ids (B, 1).

    Divide by ``temperature`` (0 = argmax), keep only the ``top_k`` largest logits
    (the rest become -inf), softmax, then draw with ``torch.multinomial``.
    """
    if logits.dim() != 2:
        raise ValueError(f"expected logits of shape (B, V), got {tuple(logits.shape)}")
    if temperature < 0:
        raise ValueError(f"expected temperature >= 0, got {temperature}")
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits / temperature
    if top_k is not None:
        if top_k < 1:
            raise ValueError(f"expected top_k >= 1, got {top_k}")
        kth = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = F.softmax(logits, dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator)


def _cache_len(cache: KVCache) -> int:
    """Number of positions already stored in a layer's cache."""
    return len(cache)
