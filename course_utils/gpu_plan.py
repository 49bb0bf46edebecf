"""What the ``gpu`` profile assumes, and how long each notebook should take there.

The ``gpu`` profile is sized for one current data-centre GPU (A100 / H100 class: bf16, 40 GB
or more). The times below are ESTIMATES from each recipe's size (FLOPs per step x steps) and
nanoGPT's published A100 time for the same GPT (about 3 minutes for notebook 08's gpu recipe),
not measurements: ``bash benchmarks/gpu.sh`` measures them on the card at hand and writes
``benchmarks/results/gpu.*``. ``course doctor`` prints this table, each row followed by what
runs (each lesson's ``recipe.gpu_summary()``, written from its recipe's table); every notebook's
first cell (``profiles.describe``) prints its estimate in the ``gpu`` profile.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

import torch

from course_utils import lessons
from course_utils.lessons import GpuEstimate

__all__ = ["GpuEstimate", "MIN_MEMORY_GB", "REFERENCE", "doctor_lines", "estimates", "row"]

MIN_MEMORY_GB = 16  # the largest allocation (notebook 11's longest naive sweep) adapts below this
# a "16 GB" card reports a little less (a T4: 15.8e9 bytes); at or above this it is one
CARD_16GB = 15.0e9
REFERENCE = "one current data-centre GPU (A100 / H100 class, bf16, 40 GB or more)"


def estimates() -> dict[str, GpuEstimate]:
    """Each lesson's estimate in the gpu profile, by notebook number (``"08"``), from the
    lesson registry (each lesson folder's ``LESSON.gpu``; nothing is listed here)."""
    return {lesson.number: lesson.gpu for lesson in lessons.discover()}


def _gpu_memory_gb() -> float | None:
    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(0).total_memory / 1e9
    return None


def row(notebook: str, what: Callable[[str], str] | None = None) -> str:
    """One line for notebook ``"08"`` (or ``"08_gpt"``): its estimate in the gpu profile, and
    ``what(key)`` after it when given (``Lesson.what_on_gpu``: what runs, from
    the recipe's table)."""
    key = notebook[:2]
    table = estimates()
    if key not in table:
        raise KeyError(f"no gpu-profile estimate for notebook {notebook!r}")
    e = table[key]
    line = f"{key}: about {e.minutes:g} min, up to {e.memory_gb:g} GB of GPU memory"
    return f"{line}; {what(key)}" if what else line


def doctor_lines(what: Callable[[str], str] | None = None) -> list[str]:
    """The section ``course doctor`` prints: the assumptions, the memory here, every row (with
    ``what(key)`` for each notebook when given)."""
    total = sum(e.minutes for e in estimates().values())
    lines = [
        f"assumes {REFERENCE}; at least {MIN_MEMORY_GB} GB (sizes adapt below that)",
        f"estimates (not yet measured; `bash benchmarks/gpu.sh` measures): {total:g} min in all",
    ]
    mem = _gpu_memory_gb()
    if mem is None:
        lines.append("this machine: no CUDA GPU (the gpu profile would run on the CPU)")
    else:
        enough = mem * 1e9 >= CARD_16GB
        verdict = "enough" if enough else f"below {MIN_MEMORY_GB} GB: sizes adapt"
        lines.append(f"this machine: {torch.cuda.get_device_name(0)}, {mem:.0f} GB ({verdict})")
    lines += [row(key, what) for key in estimates()]
    return lines


def current_notebook() -> str | None:
    """The running notebook's number ("08"), when Jupyter names it (``JPY_SESSION_NAME``)."""
    name = os.path.basename(os.environ.get("JPY_SESSION_NAME", ""))
    m = re.match(r"(\d\d)_", name)
    return m.group(1) if m else None
