"""The course's models, each in one readable file.

- :class:`Seq2SeqRNN` -- GRU encoder-decoder, with or without Bahdanau attention (01, 02, 10)
- :class:`EncoderDecoderTransformer` -- the full Transformer with cross-attention (10)
- :class:`GPT`, :class:`GPTConfig` -- a decoder-only language model with a KV cache (08)
- :class:`ViT`, :class:`ViTConfig`, :func:`patchify` -- the Vision Transformer (09)
"""

from course_utils.modeling.models.gpt import GPT, GPTConfig, sample_next_token
from course_utils.modeling.models.seq2seq_rnn import Seq2SeqRNN
from course_utils.modeling.models.transformer import EncoderDecoderTransformer
from course_utils.modeling.models.vit import (
    PatchEmbed,
    ViT,
    ViTConfig,
    patchify,
    unpatchify,
)

__all__ = [
    "EncoderDecoderTransformer",
    "GPT",
    "GPTConfig",
    "PatchEmbed",
    "Seq2SeqRNN",
    "ViT",
    "ViTConfig",
    "patchify",
    "sample_next_token",
    "unpatchify",
]
