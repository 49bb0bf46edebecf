"""GRU encoder-decoder (Sutskever et al. 2014; Cho et al. 2014), with or without Bahdanau
attention (Bahdanau et al. 2015) -- notebooks 01 and 02, slides 4-15.

Encoder: a GRU reads the (padded) source; packed sequences keep padding out of its states.
    h_1..h_S = GRU(embed(x_1..x_S)),   c = h_{len}   (the context vector: the last real state)

Decoder, one step (both variants have the same shapes, only the context differs):
    context   without attention: the fixed c, the same at every step (the bottleneck)
              with attention:    c_t = sum_j a_tj h_j,  a_t = softmax_j(v^T tanh(W_q s_{t-1} + W_k h_j))
                                 (padding positions masked out)
    state     s_t = GRUCell([embed(y_{t-1}); context], s_{t-1}),   s_0 = c
    output    logits_t = Linear([s_t; context])

Feeding c at every step (Cho et al.; also the lecture's slide 4 decoder) rather than only as
the initial state makes "attention replaces the fixed c by a fresh c_t each step" literal.
"""

from __future__ import annotations

import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from course_utils.modeling.attention import AdditiveAttention, padding_mask
from course_utils.modeling.module_state import model_device

__all__ = ["Seq2SeqRNN"]


class Seq2SeqRNN(nn.Module):
    """GRU encoder-decoder; ``attention=True`` adds Bahdanau attention.

    Submodules: ``src_embed``, ``encoder`` (nn.GRU), ``tgt_embed``, ``decoder_cell``
    (nn.GRUCell, input emb_dim + hidden_dim), ``attention`` (AdditiveAttention or None),
    ``out`` (Linear 2*hidden_dim -> tgt_vocab), ``dropout``.
    """

    def __init__(
        self,
        src_vocab: int,
        tgt_vocab: int,
        emb_dim: int,
        hidden_dim: int,
        *,
        attention: bool,
        pad_id: int = 0,
        bos_id: int = 1,
        eos_id: int = 2,
        attn_dim: int | None = None,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self.hidden_dim = hidden_dim
        self.src_embed = nn.Embedding(src_vocab, emb_dim, padding_idx=pad_id)
        self.encoder = nn.GRU(emb_dim, hidden_dim, batch_first=True)
        self.tgt_embed = nn.Embedding(tgt_vocab, emb_dim, padding_idx=pad_id)
        self.decoder_cell = nn.GRUCell(emb_dim + hidden_dim, hidden_dim)
        self.attention = (
            AdditiveAttention(hidden_dim, hidden_dim, attn_dim or hidden_dim) if attention else None
        )
        self.out = nn.Linear(2 * hidden_dim, tgt_vocab)
        self.dropout = nn.Dropout(dropout)

    @property
    def uses_attention(self) -> bool:
        return self.attention is not None

    # ----------------------------------------------------------------------------------
    def src_mask(self, src: torch.Tensor, src_lengths: torch.Tensor | None) -> torch.Tensor:
        """Bool (B, S), True at real source tokens. ``src_lengths=None``: tokens != pad_id."""
        if src_lengths is None:
            return src != self.pad_id
        return padding_mask(src_lengths.to(src.device), src.shape[1])

    def encode(
        self, src: torch.Tensor, src_lengths: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """src (B, S) ids, src_lengths (B,) -> (enc_states (B, S, H), final (B, H)).

        ``final`` is the state after the last *real* token of each row (the context vector c);
        ``enc_states`` is zero at padding positions. ``src_lengths=None`` counts non-pad tokens.
        """
        if src.dim() != 2:
            raise ValueError(f"expected src of shape (B, S), got {tuple(src.shape)}")
        if src_lengths is None:
            src_lengths = (src != self.pad_id).sum(dim=1)
        if src_lengths.shape != (src.shape[0],):
            raise ValueError(
                f"expected src_lengths of shape (B,) = ({src.shape[0]},), "
                f"got {tuple(src_lengths.shape)}"
            )
        if int(src_lengths.min()) < 1:
            raise ValueError("expected every source sequence to have at least one token")
        emb = self.dropout(self.src_embed(src))  # (B, S, E)
        packed = pack_padded_sequence(
            emb, src_lengths.cpu(), batch_first=True, enforce_sorted=False
        )
        # h_n (directions, B, H / directions): each direction's state after its last real token
        packed_states, h_n = self.encoder(packed)
        enc_states, _ = pad_packed_sequence(
            packed_states, batch_first=True, total_length=src.shape[1]
        )  # (B, S, H), zeros at padding
        return enc_states, torch.cat(list(h_n), dim=-1)  # (B, H); bidirectional: [fwd; bwd]

    def decode_step(
        self,
        prev_token: torch.Tensor,
        state: torch.Tensor,
        enc_states: torch.Tensor,
        src_mask: torch.Tensor,
        context: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """One decoder step.

        prev_token (B,) ids, state s_{t-1} (B, H), enc_states (B, S, H), src_mask (B, S) bool
        -> (logits (B, V), new state s_t (B, H), attention weights (B, S) or None).

        Without attention, ``context`` must be the fixed context vector c (B, H) (the
        encoder's ``final``); with attention it is ignored and c_t is computed from s_{t-1}.
        """
        if self.attention is not None:
            context, weights = self.attention(state, enc_states, mask=src_mask)  # (B,H), (B,S)
        else:
            if context is None:
                raise ValueError(
                    "without attention, decode_step needs context=c, the encoder's final "
                    "state of shape (B, H)"
                )
            weights = None
        emb = self.dropout(self.tgt_embed(prev_token))  # (B, E)
        state = self.decoder_cell(torch.cat([emb, context], dim=-1), state)  # (B, H)
        logits = self.out(self.dropout(torch.cat([state, context], dim=-1)))  # (B, V)
        return logits, state, weights

    def forward(
        self, src: torch.Tensor, src_lengths: torch.Tensor | None, tgt_in: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Teacher forcing: the decoder reads the true previous tokens.

        src (B, S), src_lengths (B,), tgt_in (B, T) = [BOS, y_1, ..., y_{T-1}]
        -> (logits (B, T, V) predicting y_1..y_T, attention (B, T, S) or None).
        """
        enc_states, c = self.encode(src, src_lengths)
        mask = self.src_mask(src, src_lengths)
        state = c  # s_0 = c
        logits, weights = [], []
        for t in range(tgt_in.shape[1]):
            step_logits, state, w = self.decode_step(tgt_in[:, t], state, enc_states, mask, c)
            logits.append(step_logits)
            weights.append(w)
        attn = torch.stack(weights, dim=1) if self.attention is not None else None
        return torch.stack(logits, dim=1), attn

    @torch.no_grad()
    def greedy_decode(
        self, src: torch.Tensor, src_lengths: torch.Tensor | None, max_len: int
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Feed back the argmax token until every row has produced EOS (or ``max_len``).

        src (B, S), src_lengths (B,) -> (tokens (B, T') without BOS, T' <= max_len, each row
        up to and including its EOS and ``pad_id`` after it; attention (B, T', S) or None).
        Inputs from the CPU move to the model's device; the results stay there.
        """
        device = model_device(self)  # a source from the CPU joins the model
        src = src.to(device)
        src_lengths = None if src_lengths is None else src_lengths.to(device)
        enc_states, c = self.encode(src, src_lengths)
        mask = self.src_mask(src, src_lengths)
        B = src.shape[0]
        state = c
        token = torch.full((B,), self.bos_id, dtype=torch.long, device=src.device)
        finished = torch.zeros(B, dtype=torch.bool, device=src.device)
        tokens, weights = [], []
        for _ in range(max_len):
            logits, state, w = self.decode_step(token, state, enc_states, mask, c)
            token = logits.argmax(dim=-1)  # (B,)
            token = token.masked_fill(finished, self.pad_id)
            tokens.append(token)
            weights.append(w)
            finished |= token == self.eos_id
            if bool(finished.all()):
                break
        out = torch.stack(tokens, dim=1)
        attn = torch.stack(weights, dim=1) if self.attention is not None else None
        return out, attn
