"""Forbidden by concept, not by list: what does the whole job of each thing a student builds.

An exercise names the concepts it asks the student to build (``Exercise.concepts``); it then
inherits, without a list of its own,

- every **library op** doing that whole job (``CONCEPTS[c].ops``: torch functions by their
  qualified name, aten operators as ``"aten::..."``; ``nn`` modules are reached through the
  function or operator their ``forward`` runs, e.g. ``nn.MultiheadAttention`` through
  ``multi_head_attention_forward`` or ``aten::_native_multi_head_attention``), folded into
  ``Exercise.forbids``;
- every **course implementation** of it (``CONCEPTS[c].course``: ``"module:qualname"``), whose
  code the watch refuses while the candidate runs, as it refuses the exercise's reference
  (:func:`course_keys`, used by :func:`course_utils.checks.core.own_work_keys`).

Each op and implementation carries a **probe**: a tiny call of it, which the contract tests use
to prove that an answer calling it is rejected for every exercise naming the concept.
``tests/test_lessons.py`` also fails when an exercise's reference *is* (or directly calls) a
course implementation of a concept the exercise does not name.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from course_utils.checks import guard


def _t(*shape: int):
    import torch

    return torch.randn(*shape, dtype=torch.float64)


def _sdpa() -> Any:
    import torch.nn.functional as F

    return F.scaled_dot_product_attention(_t(1, 2, 3, 4), _t(1, 2, 3, 4), _t(1, 2, 3, 4))


def _mha_function() -> Any:
    import torch.nn.functional as F

    E, H = 4, 2
    x = _t(3, 1, E)
    return F.multi_head_attention_forward(
        x,
        x,
        x,
        E,
        H,
        _t(3 * E, E),
        None,
        None,
        None,
        False,
        0.0,
        _t(E, E),
        None,
        training=False,
        need_weights=False,
    )


def _mha_module() -> Any:
    from torch import nn

    m = nn.MultiheadAttention(4, 2, batch_first=True).double().eval()
    x = _t(1, 3, 4)
    return m(x, x, x)


def _transformer_layer() -> Any:
    from torch import nn

    layer = nn.TransformerDecoderLayer(4, 2, 8, dropout=0.0, batch_first=True).double().eval()
    return layer(_t(1, 3, 4), _t(1, 2, 4))


def _course_mha() -> Any:
    from course_utils.modeling import layers

    return layers.MultiHeadAttention(4, 2).double()(_t(1, 3, 4))


def _course_encoder_block() -> Any:
    from course_utils.modeling import layers

    return layers.TransformerBlock(4, 2, 8).double()(_t(1, 3, 4))


def _course_decoder_block() -> Any:
    from course_utils.modeling import layers

    return layers.TransformerDecoderBlock(4, 2, 8).double()(_t(1, 3, 4), _t(1, 2, 4))


def _course_beam() -> Any:
    import torch

    from course_utils.modeling import decoding

    def fn(prefixes):
        return torch.zeros(prefixes.shape[0], 4, dtype=torch.float64).log_softmax(-1)

    return decoding.beam_search(fn, 1, 2, 2, 3, 1.0)


def _course_rel_bias() -> Any:
    from course_utils.modeling.positional import RelativePositionBias

    return RelativePositionBias(2, 3)(4)


def _course_vit() -> Any:
    from course_utils.modeling.models.vit import ViT, ViTConfig

    cfg = ViTConfig(
        image_size=4,
        patch_size=2,
        in_channels=1,
        num_classes=3,
        d_model=4,
        n_layers=1,
        n_heads=2,
        d_ff=8,
    )
    return ViT(cfg).double()(_t(1, 1, 4, 4))


def _course_captioner() -> Any:
    import torch

    from course_utils.modeling.models.captioner import Captioner

    m = Captioner(
        7,
        image_size=4,
        patch_size=2,
        d_model=4,
        n_heads=2,
        enc_layers=1,
        dec_layers=1,
        d_ff=8,
        max_len=6,
    ).double()
    return m(_t(1, 1, 4, 4), torch.tensor([[1, 3, 4]]))


def _call(path: str, *args: Any) -> Callable[[], Any]:
    def probe() -> Any:
        return resolve(path)(*(a() if callable(a) else a for a in args))

    return probe


@dataclass(frozen=True)
class Concept:
    """One thing a student builds: the library ops and the course code doing its whole job,
    each with a probe (a tiny call that runs it)."""

    name: str
    ops: dict[str, Callable[[], Any]] = field(default_factory=dict)
    course: dict[str, Callable[[], Any]] = field(default_factory=dict)


def _softmax_probe(fn: str) -> Callable[[], Any]:
    def probe() -> Any:
        import torch
        import torch.nn.functional as F

        x = _t(2, 3)
        return {
            "torch": lambda: torch.softmax(x, -1),
            "F": lambda: F.softmax(x, -1),
            "Tensor": lambda: x.softmax(-1),
            "log": lambda: torch.log_softmax(x, -1),
            "lse": lambda: torch.logsumexp(x, -1),
            "safe": lambda: torch._safe_softmax(x, -1),
            "Tlse": lambda: x.logsumexp(-1),
        }[fn]()

    return probe


def _layer_norm_probe(fn: str) -> Callable[[], Any]:
    def probe() -> Any:
        import torch
        import torch.nn.functional as F

        x = _t(2, 4)
        if fn == "F":
            return F.layer_norm(x, (4,))
        if fn == "torch":
            return torch.layer_norm(x, (4,))
        return torch.nn.LayerNorm(4).double()(x)

    return probe


def _unfold_probe(kind: str) -> Callable[[], Any]:
    def probe() -> Any:
        import torch
        import torch.nn.functional as F

        x = _t(1, 1, 4, 4)
        return F.unfold(x, 2, stride=2) if kind == "F" else torch.nn.Unfold(2, stride=2)(x)

    return probe


_SDPA_ATEN = {
    "aten::_scaled_dot_product_attention_math": _sdpa,
    "aten::_scaled_dot_product_flash_attention": _sdpa,
    "aten::_scaled_dot_product_flash_attention_for_cpu": _sdpa,
    "aten::_scaled_dot_product_efficient_attention": _sdpa,
    "aten::_scaled_dot_product_cudnn_attention": _sdpa,
}
_MHA_OPS = {
    "torch.nn.functional.multi_head_attention_forward": _mha_function,
    "aten::_native_multi_head_attention": _mha_module,
}

CONCEPTS: dict[str, Concept] = {
    c.name: c
    for c in (
        Concept(
            "softmax",
            ops={
                "torch.softmax": _softmax_probe("torch"),
                "torch.nn.functional.softmax": _softmax_probe("F"),
                "torch.Tensor.softmax": _softmax_probe("Tensor"),
                "torch.log_softmax": _softmax_probe("log"),
                "aten::_softmax": _softmax_probe("torch"),
                "aten::_log_softmax": _softmax_probe("log"),
                "aten::_safe_softmax": _softmax_probe("safe"),
            },
            course={
                "course_utils.modeling.attention:softmax": _call(
                    "course_utils.modeling.attention:softmax", lambda: _t(2, 3)
                )
            },
        ),
        Concept(
            "log-sum-exp",
            ops={
                "torch.logsumexp": _softmax_probe("lse"),
                "torch.Tensor.logsumexp": _softmax_probe("Tlse"),
                "torch.log_softmax": _softmax_probe("log"),
                "aten::logsumexp": _softmax_probe("lse"),
                "aten::_log_softmax": _softmax_probe("log"),
            },
        ),
        Concept(
            "layer norm",
            ops={
                "torch.nn.functional.layer_norm": _layer_norm_probe("F"),
                "torch.layer_norm": _layer_norm_probe("torch"),
                "aten::native_layer_norm": _layer_norm_probe("module"),
                "aten::layer_norm": _layer_norm_probe("module"),
            },
        ),
        Concept(
            "scaled dot-product attention",
            ops={
                "torch.nn.functional.scaled_dot_product_attention": _sdpa,
                "aten::_safe_softmax": _softmax_probe("safe"),
                **_SDPA_ATEN,
                **_MHA_OPS,
            },
            course={
                "course_utils.modeling.attention:scaled_dot_product_attention": _call(
                    "course_utils.modeling.attention:scaled_dot_product_attention",
                    lambda: _t(1, 3, 4),
                    lambda: _t(1, 3, 4),
                    lambda: _t(1, 3, 4),
                )
            },
        ),
        Concept(
            "multi-head attention",
            ops=dict(_MHA_OPS),
            course={"course_utils.modeling.layers:MultiHeadAttention.forward": _course_mha},
        ),
        Concept(
            "Transformer decoder layer",
            ops={**_MHA_OPS, "aten::_transformer_encoder_layer_fwd": _transformer_layer},
            course={
                "course_utils.modeling.layers:TransformerDecoderBlock.forward": _course_decoder_block,
            },
        ),
        Concept(
            "Transformer encoder layer",
            ops={**_MHA_OPS, "aten::_transformer_encoder_layer_fwd": _transformer_layer},
            course={"course_utils.modeling.layers:TransformerBlock.forward": _course_encoder_block},
        ),
        Concept(
            "relative position bias",
            course={
                "course_utils.modeling.positional:RelativePositionBias.forward": _course_rel_bias,
            },
        ),
        Concept(
            "patch embedding",
            ops={"aten::im2col": _unfold_probe("F"), "aten::col2im": _unfold_probe("F")},
        ),
        Concept(
            "ViT forward",
            course={
                "course_utils.modeling.models.vit:ViT.forward": _course_vit,
                "course_utils.modeling.models.vit:ViT.forward_features": _course_vit,
            },
        ),
        Concept(
            "beam search",
            course={"course_utils.modeling.decoding:beam_search": _course_beam},
        ),
        Concept(
            "caption decoder",
            course={
                "course_utils.modeling.models.captioner:Captioner.decode": _course_captioner,
                "course_utils.modeling.models.captioner:Captioner.forward": _course_captioner,
            },
        ),
    )
}


def resolve(path: str) -> Any:
    """The object at ``"package.module:Qual.name"``."""
    module, _, qual = path.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj


def get(name: str) -> Concept:
    """The concept called ``name``; a KeyError listing the known ones otherwise."""
    try:
        return CONCEPTS[name]
    except KeyError:
        raise KeyError(f"no concept {name!r}; known: {', '.join(CONCEPTS)}") from None


def forbidden_ops(names: tuple[str, ...]) -> tuple[str, ...]:
    """Every library op of the concepts ``names``, in order, once."""
    return tuple(dict.fromkeys(op for n in names for op in get(n).ops))


def course_keys(names: tuple[str, ...]) -> list[tuple]:
    """:func:`~course_utils.checks.guard.code_key` of every course implementation of the
    concepts ``names`` (what the watch refuses to see run, like the exercise's reference)."""
    keys: set[tuple] = set()
    for n in names:
        for path in get(n).course:
            keys.update(guard.reference_keys(resolve(path)))
    return sorted(keys)


def off_limits(names: tuple[str, ...]) -> str:
    """The one line a prompt states: what is off-limits, in the student's words."""
    ops = [op for op in forbidden_ops(names) if "::" not in op]
    course = [p.split(":")[1] for n in names for p in get(n).course]
    return ", ".join([*ops, *course])
