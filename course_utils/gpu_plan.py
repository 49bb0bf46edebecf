"""What the ``gpu`` profile assumes, and how long each notebook should take there.

The ``gpu`` profile is sized for one current data-centre GPU (A100 / H100 class: bf16, 40 GB
or more). The times below are ESTIMATES from each recipe's size (FLOPs per step x steps) and
nanoGPT's published A100 time for the same GPT (about 3 minutes for 5000 steps at 6x6x384),
not measurements: ``bash benchmarks/gpu.sh`` measures them on the card at hand and writes
``benchmarks/results/gpu.*``. ``course doctor`` prints this table; every notebook's first cell
(``profiles.describe``) prints its row in the ``gpu`` profile.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import torch

__all__ = ["Expectation", "EXPECTATIONS", "MIN_MEMORY_GB", "REFERENCE", "doctor_lines", "row"]

MIN_MEMORY_GB = (
    16  # the largest gpu-profile allocation (notebook 11's n = 16384 sweep) adapts below
)
REFERENCE = "one current data-centre GPU (A100 / H100 class, bf16, 40 GB or more)"


@dataclass(frozen=True)
class Expectation:
    """One notebook in the gpu profile: estimated minutes and peak GPU memory, and what runs."""

    minutes: float
    memory_gb: float
    what: str


EXPECTATIONS: dict[str, Expectation] = {
    "00": Expectation(0.2, 0.1, "environment report, softmax exercise"),
    "01": Expectation(2.0, 0.5, "GRU encoder-decoder at three widths"),
    "02": Expectation(1.5, 0.5, "Bahdanau attention on the same task"),
    "03": Expectation(0.3, 0.2, "scaled dot-product attention"),
    "04": Expectation(0.5, 0.2, "self / cross attention, positions"),
    "05": Expectation(0.3, 0.2, "masks"),
    "06": Expectation(1.0, 0.5, "multi-head lookup model, head ablation"),
    "07": Expectation(1.0, 1.0, "block timing vs n, depth and norm placement"),
    "08": Expectation(4.0, 6.0, "GPT 6x6x384, 5000 steps, bf16, fused AdamW (bar: val <= 1.47)"),
    "09": Expectation(20.0, 6.0, "ViT on CIFAR-10 (200 epochs, when cached) or digits"),
    "10": Expectation(2.0, 1.0, "Transformer vs RNNs on the translation task"),
    "11": Expectation(2.0, 12.0, "attention sweep to n = 16384 (adapts to memory), backends, DDP"),
}


def _gpu_memory_gb() -> float | None:
    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(0).total_memory / 1e9
    return None


def row(notebook: str) -> str:
    """One line for notebook ``"08"`` (or ``"08_gpt"``): its estimate in the gpu profile."""
    key = notebook[:2]
    if key not in EXPECTATIONS:
        raise KeyError(f"no gpu-profile estimate for notebook {notebook!r}")
    e = EXPECTATIONS[key]
    return f"{key}: about {e.minutes:g} min, up to {e.memory_gb:g} GB of GPU memory; {e.what}"


def doctor_lines() -> list[str]:
    """The section ``course doctor`` prints: the assumptions, the memory here, every row."""
    total = sum(e.minutes for e in EXPECTATIONS.values())
    lines = [
        f"assumes {REFERENCE}; at least {MIN_MEMORY_GB} GB (sizes adapt below that)",
        f"estimates (not yet measured; `bash benchmarks/gpu.sh` measures): {total:g} min in all",
    ]
    mem = _gpu_memory_gb()
    if mem is None:
        lines.append("this machine: no CUDA GPU (the gpu profile would run on the CPU)")
    else:
        verdict = "enough" if mem >= MIN_MEMORY_GB else f"below {MIN_MEMORY_GB} GB: sizes adapt"
        lines.append(f"this machine: {torch.cuda.get_device_name(0)}, {mem:.0f} GB ({verdict})")
    lines += [row(key) for key in EXPECTATIONS]
    return lines


def current_notebook() -> str | None:
    """The running notebook's number ("08"), when Jupyter names it (``JPY_SESSION_NAME``)."""
    name = os.path.basename(os.environ.get("JPY_SESSION_NAME", ""))
    m = re.match(r"(\d\d)_", name)
    return m.group(1) if m else None
