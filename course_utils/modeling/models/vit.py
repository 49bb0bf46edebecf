"""A teaching Vision Transformer (Dosovitskiy et al., 2021), in the spirit of timm's
``vision_transformer.py`` with far fewer options.

Pipeline (slide 51)::

    images (B, C, H, W)
      -> patchify                      (B, N, C*p*p)      N = (H/p) * (W/p)
      -> linear projection (PatchEmbed) (B, N, D)
      -> prepend a class token          (B, N+1, D)        (pool="cls"; "mean" adds no token)
      -> + learned position embeddings
      -> pre-norm TransformerBlocks     (B, N+1, D)
      -> LayerNorm -> pool -> head      (B, num_classes)

The blocks are the same ``course_utils.modeling.layers.TransformerBlock`` the text models use:
one architecture, many modalities.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn

from course_utils.modeling.layers import pre_norm_stack
from course_utils.modeling.models.config import resolve_config

__all__ = ["PatchEmbed", "ViT", "ViTConfig", "patchify", "unpatchify"]


def _pair(x: int | tuple[int, int]) -> tuple[int, int]:
    return (x, x) if isinstance(x, int) else (int(x[0]), int(x[1]))


def patchify(images: torch.Tensor, patch_size: int | tuple[int, int]) -> torch.Tensor:
    """Cut images into non-overlapping patches and flatten each one.

    images (B, C, H, W) -> patches (B, N, C*p*p) with N = (H/p) * (W/p).

    Patches are numbered row-major (left to right, then top to bottom) and each is flattened
    in (C, p, p) order, i.e. exactly ``F.unfold(images, p, stride=p).transpose(1, 2)``.
    ``patch_size`` may be an int or a (ph, pw) pair.
    """
    if not isinstance(images, torch.Tensor) or images.dim() != 4:
        shape = tuple(images.shape) if isinstance(images, torch.Tensor) else type(images).__name__
        raise ValueError(f"expected images of shape (B, C, H, W), got {shape}")
    ph, pw = _pair(patch_size)
    if ph <= 0 or pw <= 0:
        raise ValueError(f"expected a positive patch_size, got {patch_size}")
    B, C, H, W = images.shape
    if H % ph or W % pw:
        raise ValueError(
            f"expected image height and width divisible by patch_size={patch_size}, "
            f"got H={H}, W={W}"
        )
    gh, gw = H // ph, W // pw
    x = images.reshape(B, C, gh, ph, gw, pw)  # (B, C, gh, ph, gw, pw)
    x = x.permute(0, 2, 4, 1, 3, 5)  # (B, gh, gw, C, ph, pw): grid first, then one patch
    return x.reshape(B, gh * gw, C * ph * pw)


def unpatchify(
    patches: torch.Tensor,
    patch_size: int | tuple[int, int],
    image_size: int | tuple[int, int],
    channels: int = 1,
) -> torch.Tensor:
    """Inverse of :func:`patchify` (handy for plotting patch grids).

    patches (B, N, C*p*p) -> images (B, C, H, W).
    """
    ph, pw = _pair(patch_size)
    H, W = _pair(image_size)
    if patches.dim() != 3 or patches.shape[-1] != channels * ph * pw:
        raise ValueError(
            f"expected patches of shape (B, N, C*p*p) = (B, N, {channels * ph * pw}), "
            f"got {tuple(patches.shape)}"
        )
    gh, gw = H // ph, W // pw
    if patches.shape[1] != gh * gw:
        raise ValueError(
            f"expected N = (H/p)*(W/p) = {gh * gw} patches for a {H}x{W} image, "
            f"got {patches.shape[1]}"
        )
    B = patches.shape[0]
    x = patches.reshape(B, gh, gw, channels, ph, pw).permute(0, 3, 1, 4, 2, 5)
    return x.reshape(B, channels, H, W)


@dataclass
class ViTConfig:
    """Sizes of a :class:`ViT`. ``d_ff=None`` means ``4 * d_model``."""

    image_size: int | tuple[int, int] = 8
    patch_size: int | tuple[int, int] = 2
    in_channels: int = 1
    num_classes: int = 10
    d_model: int = 64
    n_layers: int = 4
    n_heads: int = 4
    d_ff: int | None = None
    pool: str = "cls"  # "cls" (class token) or "mean" (average of the patch tokens)
    dropout: float = 0.0
    activation: str = "gelu"
    bias: bool = True
    layer_norm_eps: float = 1e-6
    init: str = "xavier"  # "xavier" (the original ViT's; notebook 09's) or "timm" (N(0, 0.02^2))
    pos_std: float = 0.2  # init="xavier": std of the position embedding and class token

    def __post_init__(self) -> None:
        if self.pool not in ("cls", "mean"):
            raise ValueError(f"expected pool to be 'cls' or 'mean', got {self.pool!r}")
        if self.init not in ("xavier", "timm"):
            raise ValueError(f"expected init to be 'xavier' or 'timm', got {self.init!r}")
        H, W = _pair(self.image_size)
        ph, pw = _pair(self.patch_size)
        if H % ph or W % pw:
            raise ValueError(
                f"expected image_size {self.image_size} divisible by patch_size {self.patch_size}"
            )
        if self.d_model % self.n_heads:
            raise ValueError(
                f"expected d_model divisible by n_heads, got d_model={self.d_model}, "
                f"n_heads={self.n_heads}"
            )
        if self.d_ff is None:
            self.d_ff = 4 * self.d_model

    @property
    def grid_size(self) -> tuple[int, int]:
        """Patches per column and per row: (H/p, W/p)."""
        (H, W), (ph, pw) = _pair(self.image_size), _pair(self.patch_size)
        return H // ph, W // pw

    @property
    def num_patches(self) -> int:
        """N = (H/p) * (W/p)."""
        gh, gw = self.grid_size
        return gh * gw

    @property
    def patch_dim(self) -> int:
        """C * p * p: the length of one flattened patch."""
        ph, pw = _pair(self.patch_size)
        return self.in_channels * ph * pw

    @property
    def num_tokens(self) -> int:
        """Sequence length the blocks see: N + 1 with a class token, N with mean pooling."""
        return self.num_patches + (1 if self.pool == "cls" else 0)


class PatchEmbed(nn.Module):
    """patchify + one shared linear map: images (B, C, H, W) -> tokens (B, N, D).

    (timm uses an equivalent Conv2d with kernel = stride = p; the Linear shows the idea.)
    """

    def __init__(
        self,
        image_size: int | tuple[int, int],
        patch_size: int | tuple[int, int],
        in_channels: int,
        d_model: int,
    ) -> None:
        super().__init__()
        self.image_size = _pair(image_size)
        self.patch_size = _pair(patch_size)
        self.in_channels = in_channels
        ph, pw = self.patch_size
        self.num_patches = (self.image_size[0] // ph) * (self.image_size[1] // pw)
        self.proj = nn.Linear(in_channels * ph * pw, d_model)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """images (B, C, H, W) -> (B, N, D)."""
        if images.dim() != 4 or tuple(images.shape[1:]) != (self.in_channels, *self.image_size):
            raise ValueError(
                f"expected images of shape (B, {self.in_channels}, {self.image_size[0]}, "
                f"{self.image_size[1]}), got {tuple(images.shape)}"
            )
        return self.proj(patchify(images, self.patch_size))


class ViT(nn.Module):
    """Vision Transformer classifier.

    forward(images (B, C, H, W)) -> logits (B, num_classes). Attention maps come from
    :func:`course_utils.modeling.layers.record_attention`: one (B, n_heads, L, L) per layer,
    L = N + 1 with a class token (token 0) or N with mean pooling.
    """

    def __init__(self, config: ViTConfig | None = None, **overrides) -> None:
        super().__init__()
        self.config = config = resolve_config(ViTConfig, config, overrides)
        D = config.d_model
        self.patch_embed = PatchEmbed(config.image_size, config.patch_size, config.in_channels, D)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, D)) if config.pool == "cls" else None
        self.pos_embed = nn.Parameter(torch.zeros(1, config.num_tokens, D))
        self.pos_drop = nn.Dropout(config.dropout)
        self.blocks = pre_norm_stack(
            config.n_layers,
            D,
            config.n_heads,
            config.d_ff,
            dropout=config.dropout,
            activation=config.activation,
            layer_norm_eps=config.layer_norm_eps,
            bias=config.bias,
        )
        self.norm = nn.LayerNorm(D, eps=config.layer_norm_eps)
        self.head = nn.Linear(D, config.num_classes)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Initialise every parameter as ``config.init`` says; LayerNorms keep (1, 0).

        ``"xavier"`` (the default, the original ViT's, what notebook 09 trains with):
        Xavier-uniform weights and zero biases for every linear layer, a zero classification
        head, position embeddings and class token from N(0, ``pos_std``^2). ``"timm"``:
        truncated N(0, 0.02^2) linear weights, zero biases and head, N(0, 0.02^2) positions and
        class token -- suited to large models and data; on digits it leaves the patch tokens,
        and the positions beside them, so small that the first epochs are nearly wasted.

        The Xavier weights are drawn after timm's (which they replace), so that a seed gives
        the very weights notebook 09's runs have always started from.
        """
        nn.init.normal_(self.pos_embed, std=0.02)
        if self.cls_token is not None:
            nn.init.normal_(self.cls_token, std=0.02)
        self._init_linears(lambda w: nn.init.trunc_normal_(w, std=0.02))
        if self.config.init == "xavier":
            self._init_linears(nn.init.xavier_uniform_)
            nn.init.normal_(self.pos_embed, std=self.config.pos_std)
            if self.cls_token is not None:
                nn.init.normal_(self.cls_token, std=self.config.pos_std)

    def _init_linears(self, init_weight: Callable[[torch.Tensor], Any]) -> None:
        """``init_weight`` on every linear layer's weight, zero biases, then a zero head."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                init_weight(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        nn.init.zeros_(self.head.weight)

    def no_weight_decay(self) -> set[str]:
        """Parameters that weight decay must not pull to zero (timm's convention, honoured by
        :func:`course_utils.runtime.training.param_groups`): the position embedding and the
        class token are learned vectors, not weights of a map."""
        return {"pos_embed", "cls_token"} if self.cls_token is not None else {"pos_embed"}

    def num_params(self) -> int:
        """Number of trainable parameters."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def embed(self, images: torch.Tensor) -> torch.Tensor:
        """images (B, C, H, W) -> tokens with class token and positions (B, L, D)."""
        x = self.patch_embed(images)  # (B, N, D)
        if self.cls_token is not None:
            cls = self.cls_token.expand(x.shape[0], -1, -1)  # (B, 1, D)
            x = torch.cat([cls, x], dim=1)  # (B, N+1, D)
        return self.pos_drop(x + self.pos_embed)

    def forward_features(self, images: torch.Tensor) -> torch.Tensor:
        """images (B, C, H, W) -> normalised tokens (B, L, D)."""
        x = self.embed(images)
        for block in self.blocks:
            x = block(x)
        return self.norm(x)

    def pool(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (B, L, D) -> one vector per image (B, D): the class token or the mean."""
        return tokens[:, 0] if self.config.pool == "cls" else tokens.mean(dim=1)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """images (B, C, H, W) -> logits (B, num_classes)."""
        return self.head(self.pool(self.forward_features(images)))
