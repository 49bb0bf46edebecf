"""Notebook 05 (masked attention): experiment sizes per profile, a character corpus and a tiny
one-layer attention language model.

The corpus is generated (no download): English sentences of the toy translation task, joined
into one string. The model is deliberately small, so that training it with and without the
causal mask takes seconds and the difference is the mask alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from course_utils.data.tasks import TranslationTask
from course_utils.modeling.attention import scaled_dot_product_attention
from course_utils.runtime.profiles import ProfileTable


@dataclass(frozen=True, kw_only=True)
class Config:
    """Sizes of notebook 05's experiments."""

    n_sentences: int = 3000  # sentences in the character corpus
    seq_len: int = 32  # characters per training window
    d_model: int = 48  # width of the embeddings and of q, k, v
    steps: int  # training steps per model
    batch: int = 32  # windows per step
    lr: float = 1e-2
    n_eval: int  # windows in the evaluation batch
    sample_len: int = 48  # characters generated per sample


SIZES = ProfileTable(
    ci=Config(steps=200, n_eval=32),
    cpu=Config(steps=800, n_eval=128),
    gpu=Config(steps=800, n_eval=128),
)


def config(profile: str | None = None) -> Config:
    """The sizes of the active profile (or of ``profile``: "ci", "cpu" or "gpu"): that row of
    :data:`SIZES` (the fields no row sets keep :class:`Config`'s defaults)."""
    return SIZES.for_profile(profile)


def char_corpus(n_sentences: int, seed: int = 0) -> tuple[str, list[str]]:
    """(text, characters): English sentences of :class:`TranslationTask` joined by " . "."""
    task = TranslationTask(seed=seed)
    text = " . ".join(" ".join(ex.src) for ex in task.sample(n_sentences, 3, 12, generator=seed))
    return text, sorted(set(text))


def windows(
    data: Tensor, n: int, seq_len: int, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """Random training windows of a 1-D token tensor: (inputs (n, seq_len), targets (n, seq_len)),
    targets shifted by one (the next character)."""
    start = torch.randint(0, len(data) - seq_len - 1, (n,), generator=generator)
    idx = start[:, None] + torch.arange(seq_len)[None, :]  # (n, seq_len)
    return data[idx], data[idx + 1]


class TinyLM(nn.Module):
    """Character embedding + learned positions -> one self-attention layer (residual) -> MLP ->
    next-character logits. ``mask`` (bool (T, T), True = may attend) decides what each position
    sees; ``None`` lets every position see the whole window, the future included.
    """

    def __init__(self, vocab: int, d_model: int, max_len: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.randn(max_len, d_model) * 0.02)
        self.W_q = nn.Linear(d_model, d_model, bias=False)
        self.W_k = nn.Linear(d_model, d_model, bias=False)
        self.W_v = nn.Linear(d_model, d_model, bias=False)
        self.mlp = nn.Sequential(
            nn.LayerNorm(d_model),
            nn.Linear(d_model, 4 * d_model),
            nn.GELU(),
            nn.Linear(4 * d_model, vocab),
        )

    def embed_tokens(self, tokens: Tensor) -> Tensor:
        """tokens (B, T) -> input vectors (B, T, D): character embedding + position."""
        return self.embed(tokens) + self.pos[: tokens.shape[1]]

    def from_embeddings(self, x: Tensor, mask: Tensor | None) -> Tensor:
        """x (B, T, D) -> logits (B, T, vocab); differentiable in x (for the Jacobian)."""
        q, k, v = self.W_q(x), self.W_k(x), self.W_v(x)
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        return self.mlp(x + out)

    def forward(self, tokens: Tensor, mask: Tensor | None) -> Tensor:
        """tokens (B, T) -> logits (B, T, vocab)."""
        return self.from_embeddings(self.embed_tokens(tokens), mask)


def uniform_loss(vocab: int) -> float:
    """Cross-entropy (nats) of guessing uniformly among ``vocab`` characters."""
    return math.log(vocab)


def gpu_summary() -> str:
    """What this notebook runs in the ``gpu`` profile, in words, from the gpu row of its table
    (``course doctor`` prints it beside the estimate)."""

    return f"masks: one-layer character model, {SIZES.gpu.steps} steps with and without the mask"
