"""Which mixed precision a GPU gets, and why: bfloat16 where the card has it, else float16 with
a gradient scaler.

The ``gpu`` profile's recipes ask for bfloat16 autocast (A100 / H100 class). The free GPUs
students have (Colab's and Kaggle's T4, compute capability 7.5) have no native bfloat16: there
autocast runs in float16, whose narrow exponent range underflows small gradients, so the loss
is scaled before ``backward`` and the gradients unscaled before the optimizer step
(``torch.amp.GradScaler``). :func:`choose` makes that decision from the device's capabilities
(``torch.cuda.is_bf16_supported`` without emulation, ``torch.cuda.get_device_properties``) and
says why; ``course doctor`` prints it. The CPU, MPS and ``meta`` run in float32 (the recipes'
CPU rows use no autocast).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["Precision", "choose", "resolve", "autocast_for", "bf16_native", "dtype_name"]


@dataclass(frozen=True)
class Precision:
    """The autocast dtype for a device (None: float32), whether a gradient scaler is needed,
    and the reason in words."""

    dtype: torch.dtype | None
    grad_scaler: bool
    reason: str

    @property
    def label(self) -> str:
        """``"bf16"``, ``"fp16 + GradScaler"`` or ``"fp32"``."""
        if self.dtype is None:
            return "fp32"
        name = {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(self.dtype, str(self.dtype))
        return f"{name} + GradScaler" if self.grad_scaler else name


def dtype_name(dtype: torch.dtype | None) -> str:
    """``"bf16"``, ``"fp16"`` or ``"fp32"`` (``None``: no autocast) for a recipe's autocast dtype."""
    return {torch.bfloat16: "bf16", torch.float16: "fp16", None: "fp32"}.get(dtype, str(dtype))


def bf16_native() -> bool:
    """Whether the current CUDA device computes in bfloat16 natively (not emulated)."""
    try:
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    except TypeError:  # an older torch without the keyword
        return bool(torch.cuda.is_bf16_supported())


def choose(device: torch.device | str | None = None) -> Precision:
    """The precision for ``device`` (default: the active profile's)."""
    if device is None:
        from course_utils.runtime.profiles import current

        device = current().device
    device = torch.device(device)
    if device.type != "cuda":
        return Precision(None, False, f"{device.type}: float32 (no autocast off CUDA)")
    index = device.index or 0
    props = torch.cuda.get_device_properties(index)
    card = f"{props.name}, compute capability {props.major}.{props.minor}"
    if bf16_native():
        return Precision(torch.bfloat16, False, f"{card}: bfloat16 is native, no scaler needed")
    return Precision(
        torch.float16,
        True,
        f"{card}: no native bfloat16 (needs 8.0+), so float16 autocast with a gradient scaler",
    )


def resolve(requested: torch.dtype | None, device: torch.device | str) -> Precision:
    """What a recipe that asks for ``requested`` autocast (its table's ``autocast_dtype``)
    gets on ``device``: None stays float32; on CUDA, bfloat16 where it is native, otherwise
    float16 with a gradient scaler (:func:`choose`); float16 always comes with the scaler.
    Off CUDA, float32."""
    device = torch.device(device)
    if requested is None:
        return Precision(None, False, "the recipe asks for float32")
    chosen = choose(device)
    if chosen.dtype is None:
        return chosen
    if requested == torch.float16:
        return Precision(torch.float16, True, f"{chosen.reason}; the recipe asks for float16")
    return chosen


def autocast_for(requested: torch.dtype | None, device: torch.device | str) -> torch.dtype | None:
    """The autocast dtype to use when a recipe asks for ``requested`` on ``device``: bfloat16
    on a CUDA card without native bfloat16 (a T4) becomes float16, which the training loop
    then runs with a gradient scaler (``training.gradient_scaler``); everything else is kept.
    ``devices.autocast`` and ``training.train`` both ask here."""
    device = torch.device(device)
    if requested == torch.bfloat16 and device.type == "cuda" and not bf16_native():
        return torch.float16
    return requested
