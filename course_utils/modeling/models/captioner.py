"""An image captioner: notebook 09's ViT encoder, notebook 10's decoder (slide 31).

    images (B, 1, H, W) -> ViT trunk (mean-pool variant, no class token) -> patch features
    memory (B, N, D)    -> decoder: token + position embeddings, pre-norm
                           TransformerDecoderBlocks (causal self attention over the words,
                           cross attention from the words to the patches), LayerNorm, head
                        -> logits (B, T, V)

``pooled=True`` is the bottleneck baseline: the memory is one vector per image, the mean of
the patch features (B, 1, D), so the decoder's cross attention has a single key to look at.
"""

from __future__ import annotations

import torch
from torch import nn

from course_utils.modeling.layers import TransformerDecoderBlock
from course_utils.modeling.models.vit import ViT

__all__ = ["Captioner"]


class Captioner(nn.Module):
    """ViT patch encoder + Transformer decoder with cross attention to the patches.

    Submodules: ``encoder`` (a :class:`ViT` with ``pool="mean"``; only its trunk is used),
    ``tok_emb``, ``pos_emb`` (learned, ``max_len`` rows), ``blocks`` (pre-norm
    :class:`TransformerDecoderBlock` s), ``norm``, ``head``.
    """

    def __init__(
        self,
        vocab_size: int,
        *,
        image_size: int = 24,
        patch_size: int = 4,
        d_model: int = 64,
        n_heads: int = 4,
        enc_layers: int = 2,
        dec_layers: int = 2,
        d_ff: int = 128,
        max_len: int = 32,
        pooled: bool = False,
        pad_id: int = 0,
        bos_id: int = 1,
        eos_id: int = 2,
    ) -> None:
        super().__init__()
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self.pooled = pooled
        self.max_len = max_len
        self.encoder = ViT(
            image_size=image_size,
            patch_size=patch_size,
            in_channels=1,
            num_classes=1,
            d_model=d_model,
            n_layers=enc_layers,
            n_heads=n_heads,
            d_ff=d_ff,
            pool="mean",
        )
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList(
            TransformerDecoderBlock(d_model, n_heads, d_ff, norm_first=True, activation="gelu")
            for _ in range(dec_layers)
        )
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    @property
    def num_patches(self) -> int:
        """N, the number of patch features per image (1 for the pooled baseline's memory)."""
        return self.encoder.config.num_patches

    def encode(self, images: torch.Tensor) -> torch.Tensor:
        """images (B, 1, H, W) -> memory (B, N, D): the patch features (B, 1, D) if pooled."""
        feats = self.encoder.forward_features(images)  # (B, N, D)
        return feats.mean(dim=1, keepdim=True) if self.pooled else feats

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (B, T) -> word + position embeddings (B, T, D)."""
        T = tokens.shape[1]
        if T > self.max_len:
            raise ValueError(f"expected at most {self.max_len} tokens, got {T}")
        pos = torch.arange(T, device=tokens.device)
        return self.tok_emb(tokens) + self.pos_emb(pos)[None]

    def decode(self, tokens: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        """tokens (B, T) (BOS first), memory (B, N, D) -> logits (B, T, V)."""
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, memory, is_causal=True)
        return self.head(self.norm(x))

    def forward(self, images: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """images (B, 1, H, W), decoder input tokens (B, T) -> logits (B, T, V)."""
        return self.decode(tokens, self.encode(images))

    @torch.no_grad()
    def greedy_decode(self, images: torch.Tensor, max_len: int) -> torch.Tensor:
        """Greedy captions (B, T' <= max_len) without BOS, PAD after each row's EOS."""
        memory = self.encode(images)
        B = images.shape[0]
        ys = torch.full((B, 1), self.bos_id, dtype=torch.long, device=images.device)
        done = torch.zeros(B, dtype=torch.bool, device=images.device)
        for _ in range(max_len):
            token = self.decode(ys, memory)[:, -1].argmax(dim=-1)
            token = token.masked_fill(done, self.pad_id)
            ys = torch.cat([ys, token[:, None]], dim=1)
            done |= token == self.eos_id
            if bool(done.all()):
                break
        return ys[:, 1:]
