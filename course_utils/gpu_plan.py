"""What the ``gpu`` profile assumes, and how long each notebook should take there.

The ``gpu`` profile is sized for one current data-centre GPU (A100 / H100 class: bf16, 40 GB
or more). The times below are ESTIMATES from each recipe's size (FLOPs per step x steps) and
nanoGPT's published A100 time for the same GPT (about 3 minutes for notebook 08's gpu recipe),
not measurements: ``bash benchmarks/gpu.sh`` measures them on the card at hand and writes
``benchmarks/results/gpu.*``. ``course doctor`` prints this table, each row followed by what
runs (:mod:`course_utils.recipes.gpu_runs`, written from the recipes' tables); every notebook's
first cell (``profiles.describe``) prints its estimate in the ``gpu`` profile.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass

import torch

__all__ = ["Expectation", "EXPECTATIONS", "MIN_MEMORY_GB", "REFERENCE", "doctor_lines", "row"]

MIN_MEMORY_GB = 16  # the largest allocation (notebook 11's longest naive sweep) adapts below this
# a "16 GB" card reports a little less (a T4: 15.8e9 bytes); at or above this it is one
CARD_16GB = 15.0e9
REFERENCE = "one current data-centre GPU (A100 / H100 class, bf16, 40 GB or more)"


@dataclass(frozen=True)
class Expectation:
    """One notebook in the gpu profile: estimated minutes and peak GPU memory."""

    minutes: float
    memory_gb: float


# Estimates for the sizes in each recipe's gpu row (course_utils.recipes.gpu_runs says what runs;
# tests/test_gpu_check.py holds 08's time and 11's memory to the tables)
EXPECTATIONS: dict[str, Expectation] = {
    "00": Expectation(0.2, 0.1),
    "01": Expectation(2.0, 0.5),
    "02": Expectation(1.5, 0.5),
    "03": Expectation(0.3, 0.2),
    "04": Expectation(0.5, 0.2),
    "05": Expectation(0.3, 0.2),
    "06": Expectation(1.0, 0.5),
    "07": Expectation(1.0, 1.0),
    "08": Expectation(4.0, 6.0),
    "09": Expectation(20.0, 6.0),
    "10": Expectation(2.0, 1.0),
    "11": Expectation(6.0, 12.0),  # 2 min of attention, ~4 of scaling sweep
    "12": Expectation(3.0, 1.0),
}


def _gpu_memory_gb() -> float | None:
    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(0).total_memory / 1e9
    return None


def row(notebook: str, what: Callable[[str], str] | None = None) -> str:
    """One line for notebook ``"08"`` (or ``"08_gpt"``): its estimate in the gpu profile, and
    ``what(key)`` after it when given (``course_utils.recipes.gpu_runs.what``: what runs, from
    the recipe's table)."""
    key = notebook[:2]
    if key not in EXPECTATIONS:
        raise KeyError(f"no gpu-profile estimate for notebook {notebook!r}")
    e = EXPECTATIONS[key]
    line = f"{key}: about {e.minutes:g} min, up to {e.memory_gb:g} GB of GPU memory"
    return f"{line}; {what(key)}" if what else line


def doctor_lines(what: Callable[[str], str] | None = None) -> list[str]:
    """The section ``course doctor`` prints: the assumptions, the memory here, every row (with
    ``what(key)`` for each notebook when given)."""
    total = sum(e.minutes for e in EXPECTATIONS.values())
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
    lines += [row(key, what) for key in EXPECTATIONS]
    return lines


def current_notebook() -> str | None:
    """The running notebook's number ("08"), when Jupyter names it (``JPY_SESSION_NAME``)."""
    name = os.path.basename(os.environ.get("JPY_SESSION_NAME", ""))
    m = re.match(r"(\d\d)_", name)
    return m.group(1) if m else None
