"""Checks for notebook 10 (the full Transformer): 10.1 decoder layer, 10.2 greedy decoding.

10.1 is a class. The notebook gives ``__init__(self, d_model, n_heads, d_ff, norm_first=True)``
with the submodules of ``course_utils.layers.TransformerDecoderBlock``: ``self_attn`` and
``cross_attn`` (the course's MultiHeadAttention), ``norm1``, ``norm2``, ``norm3`` (LayerNorm)
and ``mlp`` (``fc1``, ReLU, ``fc2``); the student writes
``forward(self, x, memory, memory_key_padding_mask=None)`` (B, T, D), (B, S, D), (B, S) ->
(B, T, D):

    pre-norm  (norm_first=True):  x = x + self_attn(norm1(x), causal)
                                  x = x + cross_attn(norm2(x), memory, memory padding mask)
                                  x = x + mlp(norm3(x))
    post-norm (norm_first=False): x = norm1(x + self_attn(x, causal)), then norm2(...), norm3(...)

10.2 is a function ``greedy_decode(model, src, src_lengths, max_len)`` over an
``EncoderDecoderTransformer`` -> tokens (B, T'), T' <= max_len, without BOS, each row up to
and including its EOS and PAD after it. The check builds a small model with seeded weights
whose EOS bias is chosen so that rows end at different steps (and one may never end), and
compares token by token; a student who always runs ``max_len`` steps (PAD after EOS) passes.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from course_utils import layers
from course_utils.checks._common import (
    WEIGHT_PREFIX,
    as_tensor,
    build_module,
    case_device,
    close,
    distinct_sizes,
    lengths_mask,
    parameter_shapes,
    random_weights,
    size,
    weights_of,
)
from course_utils.checks.core import Case, Exercise, Mistake, generator, randn
from course_utils.models.transformer import EncoderDecoderTransformer

NOTEBOOK = "10_full_transformer.ipynb"

# ----------------------------------------------------------------------------- 10.1 decoder layer


def _layer_cases(seed: int) -> list[Case]:
    g = generator(seed)
    H, Dh = size(g, 2, 3), size(g, 2, 4)
    D = H * Dh
    F_ = size(g, 2, 3) * D

    def case(name: str, norm_first: bool, B: int, T: int, S: int, masked: bool) -> Case:
        mask = lengths_mask(g, B, S, min_len=1) if masked else None
        return Case(
            name,
            {
                "d_model": D,
                "n_heads": H,
                "d_ff": F_,
                "norm_first": norm_first,
                "x": randn(g, B, T, D),
                "memory": randn(g, B, S, D),
                "memory_key_padding_mask": mask,
                **random_weights(g, parameter_shapes(layers.TransformerDecoderBlock, D, H, F_)),
            },
        )

    T, S = distinct_sizes(g, 2, 3, 7)
    return [
        case("pre-norm, padded memory", True, 3, T, S, True),
        case("post-norm, padded memory", False, 3, T, S, True),
        case("pre-norm, no padding mask", True, 2, size(g, 2, 5), size(g, 2, 6), False),
        case("post-norm, one target token", False, 2, 1, S, True),
    ]


def _layer_call(candidate, case: Case) -> dict[str, Tensor]:
    i = case.inputs
    module = build_module(
        candidate,
        (i["d_model"], i["n_heads"], i["d_ff"]),
        {"norm_first": i["norm_first"]},
        i,
        "DecoderLayer",
    )
    with torch.no_grad():
        out = module(i["x"], i["memory"], memory_key_padding_mask=i["memory_key_padding_mask"])
    return {"output": as_tensor(out, "DecoderLayer(...)(x, memory)")}


class _Layer(nn.Module):
    """The notebook's __init__; the mistakes below write a wrong forward."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, norm_first: bool = True):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = layers.MultiHeadAttention(d_model, n_heads)
        self.cross_attn = layers.MultiHeadAttention(d_model, n_heads)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.mlp = layers.MLP(d_model, d_ff)


def _sa(m, h):
    return m.self_attn(h, is_causal=True)


def _ca(m, h, memory, mask):
    return m.cross_attn(h, memory, key_padding_mask=mask)


def _ff(m, h):
    return m.mlp(h)


def _compose(
    sa=_sa, ca=_ca, ff=_ff, *, norms=(1, 2, 3), residual=(True, True, True), pre=None, post=None
):
    """A layer class whose forward chains the three sublayers ``sa``, ``ca``, ``ff`` with the
    given norms (indices into norm1..3) and residuals, in pre- or post-norm order. ``pre`` /
    ``post`` override the order used when norm_first is True / False ("pre" or "post")."""

    class Variant(_Layer):
        def forward(self, x, memory, memory_key_padding_mask=None):
            order = "pre" if self.norm_first else "post"
            order = {"pre": pre or "pre", "post": post or "post"}[order]
            subs = (
                lambda h: sa(self, h),
                lambda h: ca(self, h, memory, memory_key_padding_mask),
                lambda h: ff(self, h),
            )
            for sub, k, res in zip(subs, norms, residual, strict=True):
                norm = getattr(self, f"norm{k}")
                if order == "pre":
                    x = x + sub(norm(x)) if res else sub(norm(x))
                else:
                    x = norm(x + sub(x)) if res else norm(sub(x))
            return x

    return Variant


def _no_causal(m, h):
    return m.self_attn(h)


def _cross_on_x(m, h, memory, mask):
    return m.cross_attn(h)


def _cross_mask_ignored(m, h, memory, mask):
    return m.cross_attn(h, memory)


def _cross_mask_inverted(m, h, memory, mask):
    return m.cross_attn(h, memory, key_padding_mask=None if mask is None else ~mask)


def _cross_causal(m, h, memory, mask):
    return m.cross_attn(h, memory, key_padding_mask=mask, is_causal=True)


def _attn_swapped_sa(m, h):
    return m.cross_attn(h, is_causal=True)


def _attn_swapped_ca(m, h, memory, mask):
    return m.self_attn(h, memory, key_padding_mask=mask)


class _NormInside(_Layer):
    """LayerNorm on the sublayer's output before the residual: x + norm(sub(x))."""

    def forward(self, x, memory, memory_key_padding_mask=None):
        x = x + self.norm1(self.self_attn(x, is_causal=True))
        x = x + self.norm2(self.cross_attn(x, memory, key_padding_mask=memory_key_padding_mask))
        return x + self.norm3(self.mlp(x))


def _pre_residual_normalised():
    """Pre-norm with the residual taken from the normalised input: h = norm(x); h + sub(h)."""
    right = _compose()

    class Variant(_Layer):
        def forward(self, x, memory, memory_key_padding_mask=None):
            if not self.norm_first:
                return right.forward(self, x, memory, memory_key_padding_mask)
            h = self.norm1(x)
            x = h + self.self_attn(h, is_causal=True)
            h = self.norm2(x)
            x = h + self.cross_attn(h, memory, key_padding_mask=memory_key_padding_mask)
            h = self.norm3(x)
            return h + self.mlp(h)

    return Variant


LAYER_MISTAKES = [
    Mistake(
        "no causal mask in the masked self-attention",
        "target position i must not see positions after i: call "
        "self.self_attn(h, is_causal=True) (or pass attn_mask=causal_mask(T))",
        _compose(sa=_no_causal),
    ),
    Mistake(
        "cross attention takes its keys and values from x instead of memory",
        "in cross attention the queries come from the decoder (x) and the keys and values "
        "from the encoder output: self.cross_attn(h, memory, key_padding_mask=...)",
        _compose(ca=_cross_on_x),
    ),
    Mistake(
        "memory padding mask ignored",
        "pass key_padding_mask=memory_key_padding_mask to the cross attention, so no "
        "target token attends to source padding",
        _compose(ca=_cross_mask_ignored),
    ),
    Mistake(
        "memory padding mask inverted",
        "the course's masks are True at real tokens (PyTorch's key_padding_mask is the "
        "opposite): pass memory_key_padding_mask as it is, without ~",
        _compose(ca=_cross_mask_inverted),
    ),
    Mistake(
        "causal mask in the cross attention",
        "only the self-attention is causal; every target position may look at the whole "
        "source, so the cross attention takes no causal mask",
        _compose(ca=_cross_causal),
    ),
    Mistake(
        "self_attn and cross_attn swapped",
        "use self.self_attn for the masked self-attention and self.cross_attn for the "
        "attention over memory (their weights differ)",
        _compose(sa=_attn_swapped_sa, ca=_attn_swapped_ca),
    ),
    Mistake(
        "missing residual around the self-attention",
        "add the sublayer's input back: x + self_attn(...), not self_attn(...) alone",
        _compose(residual=(False, True, True)),
    ),
    Mistake(
        "missing residual around the cross attention",
        "add the sublayer's input back: x + cross_attn(...), not cross_attn(...) alone",
        _compose(residual=(True, False, True)),
    ),
    Mistake(
        "missing residual around the MLP",
        "add the sublayer's input back: x + mlp(...), not mlp(...) alone",
        _compose(residual=(True, True, False)),
    ),
    Mistake(
        "LayerNorm in the wrong place (pre-norm and post-norm swapped)",
        "norm_first=True (pre-norm): x = x + sublayer(norm(x)); norm_first=False "
        "(post-norm): x = norm(x + sublayer(x))",
        _compose(pre="post", post="pre"),
    ),
    Mistake(
        "LayerNorm applied to the sublayer output before the residual",
        "normalise the sublayer's input (pre-norm) or the sum (post-norm), not the "
        "sublayer's output: x + norm(sublayer(x)) is neither",
        _NormInside,
    ),
    Mistake(
        "pre-norm residual taken from the normalised input",
        "in pre-norm the residual stream stays unnormalised: x = x + sublayer(norm(x)), "
        "not h = norm(x); x = h + sublayer(h)",
        _pre_residual_normalised(),
    ),
    Mistake(
        "norms used in the wrong order",
        "norm1 belongs to the self-attention, norm2 to the cross attention, norm3 to the MLP",
        _compose(norms=(2, 1, 3)),
    ),
    Mistake(
        "norms used in the wrong order",
        "norm1 belongs to the self-attention, norm2 to the cross attention, norm3 to the MLP",
        _compose(norms=(1, 3, 2)),
    ),
    Mistake(
        "norms used in the wrong order",
        "norm1 belongs to the self-attention, norm2 to the cross attention, norm3 to the MLP",
        _compose(norms=(3, 2, 1)),
    ),
]

DECODER_LAYER = Exercise(
    id="10.1",
    title="decoder layer (masked self-attention + cross attention)",
    points=4,
    notebook=NOTEBOOK,
    function="DecoderLayer",
    reference=layers.TransformerDecoderBlock,
    make_cases=_layer_cases,
    call=_layer_call,
    mistakes=LAYER_MISTAKES,
    compare=close(),
    hint="pre-norm: x = x + self_attn(norm1(x), is_causal=True); "
    "x = x + cross_attn(norm2(x), memory, key_padding_mask=memory_key_padding_mask); "
    "x = x + mlp(norm3(x)). Post-norm: x = norm1(x + self_attn(x, is_causal=True)), ...",
)

# ----------------------------------------------------------------------------- 10.2 greedy decoding

_MODEL_KEYS = ("src_vocab", "tgt_vocab", "d_model", "n_heads", "n_layers", "d_ff", "max_len")


def _build_model(inputs: dict) -> EncoderDecoderTransformer:
    """A float64 eval-mode model with the case's weights (built under a forked RNG)."""
    with torch.random.fork_rng(devices=[]):
        model = EncoderDecoderTransformer(
            *(int(inputs[k]) for k in _MODEL_KEYS[:2]),
            **{k: int(inputs[k]) for k in _MODEL_KEYS[2:]},
        )
    model = model.double().to(case_device(inputs)).eval()
    with torch.no_grad():
        for key, value in inputs.items():
            if key.startswith(WEIGHT_PREFIX):
                model.get_parameter(key[len(WEIGHT_PREFIX) :]).copy_(value)
    return model


def _finish_steps(tokens: Tensor, max_len: int, eos: int) -> list[int]:
    """Per row, the 1-based step at which EOS came out (max_len + 1 when it never did)."""
    out = []
    for row in tokens.tolist():
        out.append(row.index(eos) + 1 if eos in row else max_len + 1)
    return out


def _decode_cases(seed: int) -> list[Case]:
    g = generator(seed)

    def case(name: str, B: int, V_tgt: int, max_len: int) -> Case:
        V_src = size(g, 6, 9)
        cfg = {
            "src_vocab": V_src,
            "tgt_vocab": V_tgt,
            "d_model": 8,
            "n_heads": 2,
            "n_layers": 1,
            "d_ff": 16,
            "max_len": 32,
        }
        S = size(g, 4, 7)
        lengths = torch.randint(2, S + 1, (B,), generator=g)
        lengths[0] = S
        src = torch.randint(3, V_src, (B, S), generator=g)
        src = src.masked_fill(torch.arange(S)[None, :] >= lengths[:, None], 0)
        # A model (seeded weights) and an EOS bias under which rows end at different steps:
        # some early, some late, ideally one never. Try a few models until one qualifies.
        best_score, best_model = -1, None
        for _ in range(8):
            model_seed = int(torch.randint(0, 2**31 - 1, (1,), generator=g))
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(model_seed)
                model = EncoderDecoderTransformer(
                    V_src, V_tgt, **{k: cfg[k] for k in _MODEL_KEYS[2:]}
                )
            model = model.double().eval()
            with torch.no_grad():
                model.generator.weight.mul_(3.0)  # confident argmax: no near-ties
                model.generator.bias[[model.pad_id, model.bos_id]] = -20.0  # never predicted
                base = model.generator.bias.clone()
            for bias in torch.arange(-3.0, 3.01, 0.5).tolist():
                with torch.no_grad():
                    model.generator.bias.copy_(base)
                    model.generator.bias[model.eos_id] += bias
                steps = _finish_steps(
                    model.greedy_decode(src, lengths, max_len)[0], max_len, model.eos_id
                )
                if min(steps) > max_len:
                    continue
                score = len(set(steps)) + (min(steps) > 1) + (max(steps) > max_len)
                if score > best_score:
                    best_score, best_model = score, weights_of(model)
            if best_score >= min(B, 4):
                break
        if best_model is None:  # no EOS anywhere: still a valid (if easier) case
            best_model = weights_of(model)
        return Case(
            name,
            {**cfg, "src": src, "src_lengths": lengths, "max_len_decode": max_len, **best_model},
        )

    # Case 1 has B == tgt_vocab, so an argmax over the batch dimension runs (and is named).
    return [
        case("batch of 6, rows ending at different steps", 6, 6, 8),
        case("batch of 4, larger vocabulary", 4, 9, 10),
        case("one sentence", 1, 7, 6),
    ]


def _decode_call(candidate, case: Case) -> dict[str, Tensor]:
    i = case.inputs
    model = _build_model(i)
    src, lengths, max_len = i["src"], i["src_lengths"], int(i["max_len_decode"])
    with torch.no_grad():
        out = candidate(model, src, lengths, max_len)
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        out = out[0]  # (tokens, extra) like the models' own greedy_decode
    tokens = as_tensor(out, "greedy_decode(...)")
    B = src.shape[0]
    if tokens.ndim != 2 or tokens.shape[0] != B:
        raise ValueError(
            f"greedy_decode should return token ids of shape (B, T') = ({B}, T'), "
            f"got {tuple(tokens.shape)}"
        )
    if tokens.shape[1] > max_len:
        raise ValueError(
            f"greedy_decode returned {tokens.shape[1]} tokens per row, more than "
            f"max_len={max_len} (return the generated tokens without the leading BOS, and "
            f"stop after max_len steps)"
        )
    if tokens.is_floating_point():
        raise TypeError(f"greedy_decode should return integer token ids, got {tokens.dtype}")
    # Normalise: PAD up to max_len (stopping early and running all max_len steps both pass).
    padded = torch.full((B, max_len), model.pad_id, dtype=torch.long)
    padded[:, : tokens.shape[1]] = tokens.long()
    return {"tokens": padded}


def _reference_decode(model, src, src_lengths, max_len):
    """The verified greedy decoder: ``model.greedy_decode``'s tokens (B, T')."""
    return model.greedy_decode(src, src_lengths, max_len)[0]


def _greedy(
    model,
    src,
    src_lengths,
    max_len,
    *,
    start=None,
    feed_back=True,
    pad_after=True,
    stop="all",
    argmax_dim=-1,
    keep_bos=False,
    use_mask=True,
):
    """A greedy decoder with switches for the classic mistakes (defaults: correct)."""
    mask = model.src_mask(src, src_lengths) if use_mask else None
    memory = model.encode(src, mask)
    B = src.shape[0]
    first = model.bos_id if start is None else start
    ys = torch.full((B, 1), first, dtype=torch.long)
    finished = torch.zeros(B, dtype=torch.bool)
    for _ in range(max_len):
        inp = ys if feed_back else ys[:, :1]
        logits = model.decode(inp, memory, mask)[:, -1]  # (B, V)
        token = logits.argmax(dim=argmax_dim)
        if pad_after:
            token = token.masked_fill(finished, model.pad_id)
        ys = torch.cat([ys, token[:, None]], dim=1)
        finished |= token == model.eos_id
        if stop == "all" and bool(finished.all()):
            break
        if stop == "any" and bool(finished.any()):
            break
    return ys if keep_bos else ys[:, 1:]


def _with(**switches):
    def decode(model, src, src_lengths, max_len):
        return _greedy(model, src, src_lengths, max_len, **switches)

    return decode


def _bos_counted(model, src, src_lengths, max_len):
    return _greedy(model, src, src_lengths, max_len - 1, keep_bos=True)


DECODE_MISTAKES = [
    Mistake(
        "predicted token not fed back",
        "append each step's argmax token to the decoder input (ys = torch.cat([ys, "
        "token[:, None]], dim=1)) and decode the whole prefix next step",
        _with(feed_back=False),
    ),
    Mistake(
        "tokens after EOS not replaced by PAD",
        "once a row has produced EOS it is finished: keep a `finished` mask and write "
        "model.pad_id in its later positions (token.masked_fill(finished, model.pad_id))",
        _with(pad_after=False),
    ),
    Mistake(
        "stops when the first row ends",
        "stop only when every row has produced EOS (finished.all()), not the first one",
        _with(stop="any"),
    ),
    Mistake(
        "argmax over the wrong dimension",
        "the next token is the argmax over the vocabulary: logits[:, -1].argmax(dim=-1) "
        "(B, V) -> (B,)",
        _with(argmax_dim=0),
    ),
    Mistake(
        "decoding does not start from BOS",
        "the first decoder input is model.bos_id for every row: "
        "ys = torch.full((B, 1), model.bos_id)",
        _with(start=0),
    ),
    Mistake(
        "decoding does not start from BOS",
        "the first decoder input is model.bos_id for every row: "
        "ys = torch.full((B, 1), model.bos_id)",
        _with(start=2),
    ),
    Mistake(
        "BOS left in the returned tokens",
        "return the generated tokens without the leading BOS: ys[:, 1:]",
        _bos_counted,
    ),
    Mistake(
        "source padding mask ignored",
        "pass the source padding mask (model.src_mask(src, src_lengths)) to model.encode "
        "and to every model.decode call",
        _with(use_mask=False),
    ),
]

GREEDY = Exercise(
    id="10.2",
    title="greedy decoding with the encoder-decoder Transformer",
    points=3,
    notebook=NOTEBOOK,
    function="greedy_decode",
    reference=_reference_decode,
    make_cases=_decode_cases,
    call=_decode_call,
    mistakes=DECODE_MISTAKES,
    compare=close(),
    hint="encode once; ys = [[BOS]] * B; each step decode ys, take the argmax of the last "
    "position over the vocabulary, PAD it where the row has finished, append it; stop "
    "when every row has produced EOS or after max_len steps; return ys[:, 1:]",
)

EXERCISES = [DECODER_LAYER, GREEDY]
