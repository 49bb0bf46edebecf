"""Where tensors live: the model's device, moving inputs there, generators and autocast per device.

The course's rule (DESIGN.md, "Devices"): library and recipe functions create every tensor on
the model's (or the profile's) device and move their inputs there; notebook cells never name a
device. These helpers are the few lines that rule needs, in one place:

    dev = model_device(model)                      # where the parameters are (modeling's)
    prompt = to_model_device(model, prompt)        # a CPU prompt joins the model
    gen = generator(0, dev)                        # a seeded generator on that device
    with autocast(dev, torch.bfloat16): ...        # mixed precision where it exists

``meta`` (PyTorch's device without data, which the tests use as a stand-in accelerator) has no
random generator and no autocast: :func:`generator` returns ``None`` there (nothing to draw) and
:func:`autocast` does nothing.
"""

from __future__ import annotations

import contextlib
from dataclasses import is_dataclass
from typing import Any

import torch
import torch.nn as nn

from course_utils.modeling.module_state import model_device

__all__ = [
    "resolve",
    "model_device",
    "to_device",
    "to_model_device",
    "generator",
    "autocast",
    "synchronize",
    "memory_bytes",
    "free_memory_bytes",
]


def resolve(device: torch.device | str | None = None) -> torch.device:
    """``device`` as a :class:`torch.device`; ``None`` means the active profile's device."""
    if device is None:
        from course_utils.runtime.profiles import current

        return current().device
    return torch.device(device)


def to_device(batch: Any, device: torch.device | str) -> Any:
    """Move a tensor, or a tuple / list / dict of them (nested), to ``device``; a dataclass or
    module with a ``.to`` method moves itself; other values pass through unchanged."""
    device = torch.device(device)
    if isinstance(batch, torch.Tensor):
        return batch if batch.device == device else batch.to(device)
    if isinstance(batch, tuple):
        return tuple(to_device(b, device) for b in batch)
    if isinstance(batch, list):
        return [to_device(b, device) for b in batch]
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    if hasattr(batch, "to") and (is_dataclass(batch) or isinstance(batch, nn.Module)):
        return batch.to(device)
    return batch


def to_model_device(model: nn.Module, *tensors: Any) -> Any:
    """Move ``tensors`` (or nested tuples / lists / dicts of them) to ``model``'s device.

    One argument returns it moved; several return a tuple.
    >>> prompt = to_model_device(model, torch.tensor([[0]]))
    """
    device = model_device(model)
    moved = tuple(to_device(t, device) for t in tensors)
    return moved[0] if len(moved) == 1 else moved


def generator(
    seed: int, device: torch.device | str | nn.Module | None = None
) -> torch.Generator | None:
    """A ``torch.Generator`` on ``device`` (a device, a model: its device; ``None``: the profile's)
    seeded with ``seed``. Sampling on a GPU needs a generator on that GPU.

    On ``meta`` there is nothing to draw, so this returns ``None`` (unseeded sampling).
    """
    if isinstance(device, nn.Module):
        device = model_device(device)
    device = resolve(device)
    if device.type == "meta":
        return None
    return torch.Generator(device=device).manual_seed(seed)


def autocast(
    device: torch.device | str, dtype: torch.dtype | None
) -> contextlib.AbstractContextManager:
    """``torch.autocast`` to ``dtype`` on ``device``'s type; a no-op context when ``dtype`` is
    ``None`` or the device has no autocast (``meta``). bfloat16 on a CUDA card without it
    (a T4) runs in float16 (:func:`course_utils.runtime.precision.autocast_for`)."""
    from course_utils.runtime.precision import autocast_for

    device = torch.device(device)
    if dtype is None or device.type == "meta":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=autocast_for(dtype, device))


def synchronize(device: torch.device | str) -> None:
    """Wait for the device's queued work (CUDA, MPS) so that wall-clock times are honest."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def memory_bytes(device: torch.device | str) -> int | None:
    """Total memory of an accelerator in bytes (CUDA); ``None`` for the CPU or when unknown."""
    device = torch.device(device)
    if device.type == "cuda" and torch.cuda.is_available():
        return int(torch.cuda.get_device_properties(device).total_memory)
    return None


def free_memory_bytes(device: torch.device | str) -> int | None:
    """Free memory on a CUDA device right now (after emptying PyTorch's cache), else ``None``."""
    device = torch.device(device)
    if device.type == "cuda" and torch.cuda.is_available():
        torch.cuda.empty_cache()
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    return None
