"""What GPT and ViT share about their configs: ``Model(config, **overrides)``."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, TypeVar

C = TypeVar("C")


def resolve_config(config_cls: type[C], config: C | None, overrides: dict[str, Any]) -> C:
    """``config_cls(**overrides)`` without a config, else ``config`` with ``overrides`` applied.

    A ``d_ff`` that followed the 4 x ``d_model`` rule follows it for a new width too (so
    ``GPT(config, d_model=256)`` gets ``d_ff = 1024``), unless ``d_ff`` is overridden itself.
    """
    if config is None:
        return config_cls(**overrides)
    if not overrides:
        return config
    overrides = dict(overrides)
    if "d_ff" not in overrides and config.d_ff == 4 * config.d_model:
        overrides["d_ff"] = None  # __post_init__ applies the rule to the new d_model
    return replace(config, **overrides)
