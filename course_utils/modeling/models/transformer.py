"""The full encoder-decoder Transformer (Vaswani et al., 2017) -- notebook 10.

    src (B, S) -> embed * sqrt(D) + sinusoidal positions -> encoder blocks -> memory (B, S, D)
    tgt_in (B, T) -> embed * sqrt(D) + sinusoidal positions
                  -> decoder blocks (masked self-attention, cross-attention on memory, MLP)
                  -> linear -> logits (B, T, V)

Source padding is a key padding mask (True = real token) in the encoder's self-attention and
in every cross-attention, so padding never changes a real output. The decoder is causal.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from course_utils.modeling.attention import padding_mask
from course_utils.modeling.layers import TransformerBlock, TransformerDecoderBlock, record_attention
from course_utils.modeling.module_state import eval_mode, model_device
from course_utils.modeling.positional import sinusoidal_positional_encoding

__all__ = ["EncoderDecoderTransformer", "cross_attention_maps"]


class EncoderDecoderTransformer(nn.Module):
    """Encoder-decoder Transformer for sequence-to-sequence tasks.

    Submodules: ``src_embed``, ``tgt_embed`` (nn.Embedding), buffer ``pe`` (max_len, D),
    ``encoder`` / ``decoder`` (ModuleLists of TransformerBlock / TransformerDecoderBlock),
    ``encoder_norm`` / ``decoder_norm`` (final LayerNorms with ``norm_first``, else Identity),
    ``generator`` (Linear D -> tgt_vocab).
    """

    def __init__(
        self,
        src_vocab: int,
        tgt_vocab: int,
        d_model: int = 128,
        n_heads: int = 4,
        n_layers: int = 2,
        d_ff: int | None = None,
        dropout: float = 0.0,
        max_len: int = 256,
        norm_first: bool = True,
        *,
        n_decoder_layers: int | None = None,
        activation: str = "relu",
        pad_id: int = 0,
        bos_id: int = 1,
        eos_id: int = 2,
    ) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(
                f"expected d_model divisible by n_heads, got d_model={d_model}, n_heads={n_heads}"
            )
        d_ff = 4 * d_model if d_ff is None else d_ff
        n_decoder_layers = n_layers if n_decoder_layers is None else n_decoder_layers
        self.d_model, self.max_len = d_model, max_len
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self.src_embed = nn.Embedding(src_vocab, d_model, padding_idx=pad_id)
        self.tgt_embed = nn.Embedding(tgt_vocab, d_model, padding_idx=pad_id)
        self.register_buffer(
            "pe", sinusoidal_positional_encoding(max_len, d_model), persistent=False
        )  # (max_len, D)
        self.dropout = nn.Dropout(dropout)
        kw = dict(dropout=dropout, norm_first=norm_first, activation=activation)
        self.encoder = nn.ModuleList(
            TransformerBlock(d_model, n_heads, d_ff, **kw) for _ in range(n_layers)
        )
        self.decoder = nn.ModuleList(
            TransformerDecoderBlock(d_model, n_heads, d_ff, **kw) for _ in range(n_decoder_layers)
        )
        # Pre-norm stacks leave the residual stream un-normalised: close them with a LayerNorm.
        self.encoder_norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()
        self.decoder_norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()
        self.generator = nn.Linear(d_model, tgt_vocab)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Embeddings ~ N(0, 1/D), so that ``embedding * sqrt(D)`` has unit scale like the
        positional encoding (with PyTorch's default N(0, 1) the positions would be drowned out);
        Xavier-uniform matrices elsewhere, as ``nn.Transformer`` does."""
        for name, p in self.named_parameters():
            if p.dim() > 1 and "embed" not in name:
                nn.init.xavier_uniform_(p)
        for emb in (self.src_embed, self.tgt_embed):
            nn.init.normal_(emb.weight, std=self.d_model**-0.5)
            with torch.no_grad():
                emb.weight[self.pad_id].zero_()

    # ----------------------------------------------------------------------------------
    def src_mask(self, src: torch.Tensor, src_lengths: torch.Tensor | None = None) -> torch.Tensor:
        """Bool (B, S), True at real source tokens. ``src_lengths=None``: tokens != pad_id."""
        if src_lengths is None:
            return src != self.pad_id
        return padding_mask(src_lengths.to(src.device), src.shape[1])

    def _embed(self, tokens: torch.Tensor, embedding: nn.Embedding) -> torch.Tensor:
        """tokens (B, L) -> embedding * sqrt(D) + positions (B, L, D)."""
        if tokens.dim() != 2:
            raise ValueError(f"expected token ids of shape (B, L), got {tuple(tokens.shape)}")
        L = tokens.shape[1]
        if L > self.max_len:
            raise ValueError(f"sequence length {L} is longer than max_len={self.max_len}")
        x = embedding(tokens) * math.sqrt(self.d_model) + self.pe[:L].to(embedding.weight.dtype)
        return self.dropout(x)

    def encode(
        self, src: torch.Tensor, src_key_padding_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """src (B, S), src_key_padding_mask (B, S) bool (True = real) -> memory (B, S, D)."""
        x = self._embed(src, self.src_embed)
        for block in self.encoder:
            x = block(x, key_padding_mask=src_key_padding_mask)
        return self.encoder_norm(x)

    def decode(
        self,
        tgt_in: torch.Tensor,
        memory: torch.Tensor,
        memory_key_padding_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """tgt_in (B, T), memory (B, S, D), memory_key_padding_mask (B, S) -> logits (B, T, V)."""
        x = self._embed(tgt_in, self.tgt_embed)
        for block in self.decoder:
            x = block(x, memory, memory_key_padding_mask=memory_key_padding_mask, is_causal=True)
        return self.generator(self.decoder_norm(x))

    def forward(
        self,
        src: torch.Tensor,
        src_lengths: torch.Tensor | None,
        tgt_in: torch.Tensor,
        *,
        src_key_padding_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, None]:
        """Teacher forcing, all target positions at once (the decoder is causal).

        src (B, S), src_lengths (B,) (or ``src_key_padding_mask`` (B, S) bool, True = real;
        neither: tokens != pad_id), tgt_in (B, T) = [BOS, y_1, ..., y_{T-1}]
        -> (logits (B, T, V), None): the pair ``Seq2SeqRNN.forward`` returns, so one training
        loop serves both; the attention maps come from :meth:`cross_attention_maps`.
        """
        if src_key_padding_mask is None:
            src_key_padding_mask = self.src_mask(src, src_lengths)
        memory = self.encode(src, src_key_padding_mask)
        return self.decode(tgt_in, memory, src_key_padding_mask), None

    @torch.no_grad()
    def greedy_decode(
        self,
        src: torch.Tensor,
        src_lengths: torch.Tensor | None,
        max_len: int,
        *,
        src_key_padding_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, None]:
        """Encode once, then append the argmax token until every row has produced EOS.

        src (B, S), src_lengths (B,) -> (tokens (B, T') without BOS, T' <= max_len, each row
        up to and including its EOS and ``pad_id`` after it; None), the pair of
        ``Seq2SeqRNN.greedy_decode``. Each step re-runs the decoder on the whole prefix
        (simple; T' is small here). Inputs from the CPU move to
        the model's device; the results stay there.
        """
        device = model_device(self)  # a source from the CPU joins the model
        src = src.to(device)
        src_lengths = None if src_lengths is None else src_lengths.to(device)
        if src_key_padding_mask is not None:
            src_key_padding_mask = src_key_padding_mask.to(device)
        if src_key_padding_mask is None:
            src_key_padding_mask = self.src_mask(src, src_lengths)
        memory = self.encode(src, src_key_padding_mask)
        B = src.shape[0]
        ys = torch.full((B, 1), self.bos_id, dtype=torch.long, device=src.device)
        finished = torch.zeros(B, dtype=torch.bool, device=src.device)
        max_len = min(max_len, self.max_len)
        for _ in range(max_len):
            logits = self.decode(ys, memory, src_key_padding_mask)  # (B, t, V)
            token = logits[:, -1].argmax(dim=-1).masked_fill(finished, self.pad_id)  # (B,)
            ys = torch.cat([ys, token[:, None]], dim=1)
            finished |= token == self.eos_id
            if bool(finished.all()):
                break
        return ys[:, 1:], None

    def cross_attention_maps(
        self, src: torch.Tensor, src_lengths: torch.Tensor | None, tokens: torch.Tensor
    ) -> list[torch.Tensor]:
        """:func:`cross_attention_maps` of this model: one (B, n_heads, T', S) per decoder layer."""
        return cross_attention_maps(self, src, src_lengths, tokens)


@torch.no_grad()
def cross_attention_maps(
    model: nn.Module, src: torch.Tensor, src_lengths: torch.Tensor | None, tokens: torch.Tensor
) -> list[torch.Tensor]:
    """Cross-attention weights of every decoder layer of ``model`` while it produces
    ``tokens`` (B, T') (e.g. from ``greedy_decode``): one (B, n_heads, T', S) per layer; row t
    is the step that produced ``tokens[:, t]``. ``model`` is anything called as
    ``model(src, src_lengths, tgt_in)`` with a ``bos_id`` and ``decoder`` layers holding a
    ``cross_attn`` (an :class:`EncoderDecoderTransformer`, or notebook 10's own Transformer).
    The decoder is causal, so one teacher-forced pass over [BOS, tokens[:-1]] gives every
    step's maps. Eval mode, previous mode restored."""
    bos = torch.full_like(tokens[:, :1], model.bos_id)
    with eval_mode(model), record_attention(*(b.cross_attn for b in model.decoder)) as cross:
        model(src, src_lengths, torch.cat([bos, tokens[:, :-1]], dim=1))
    return cross
