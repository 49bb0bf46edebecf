"""What the ``gpu`` profile assumes, and how long each notebook should take there.

The ``gpu`` profile is sized for one current data-centre GPU (A100 / H100 class: bf16, 40 GB
or more). The times below are ESTIMATES from each recipe's size (FLOPs per step x steps) and
nanoGPT's published A100 time for the same GPT (about 3 minutes for notebook 08's gpu recipe),
not measurements: ``bash benchmarks/gpu.sh`` measures them on the card at hand and writes
``benchmarks/results/gpu.*``. ``course doctor`` prints this table; every notebook's first cell
(``profiles.describe``) prints its row in the ``gpu`` profile.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass

import torch

__all__ = ["Expectation", "EXPECTATIONS", "MIN_MEMORY_GB", "REFERENCE", "doctor_lines", "row"]

MIN_MEMORY_GB = 16  # the largest allocation (notebook 11's longest naive sweep) adapts below this
REFERENCE = "one current data-centre GPU (A100 / H100 class, bf16, 40 GB or more)"


@dataclass(frozen=True)
class Expectation:
    """One notebook in the gpu profile: estimated minutes and peak GPU memory, and what runs.

    ``describe`` writes "what runs" from the ``gpu`` row of the notebook's recipe table
    (``course_utils.recipes.nbXX``), so the line changes when the table does.
    """

    minutes: float
    memory_gb: float
    describe: Callable[[], str]

    @property
    def what(self) -> str:
        """What runs in the gpu profile, in words, from the recipe's table."""
        return self.describe()


def _dtype(dtype: torch.dtype | None) -> str:
    return {torch.bfloat16: "bf16", torch.float16: "fp16", None: "fp32"}.get(dtype, str(dtype))


def _nb01() -> str:
    from course_utils.recipes.nb01 import RECIPES

    r = RECIPES.gpu
    widths = f"{len(r.hidden_sizes)} widths ({r.hidden_sizes[0]} to {r.hidden_sizes[-1]})"
    return f"GRU encoder-decoder at {widths}, {r.budget}, sentences of up to {r.max_len} words"


def _nb02() -> str:
    from course_utils.recipes.nb01 import RECIPES
    from course_utils.recipes.nb02 import TRAIN_MAX_LEN

    r = RECIPES.gpu
    return (
        f"Bahdanau attention on the same task ({r.budget}), trained on up to "
        f"{TRAIN_MAX_LEN.gpu} words, tested on up to {r.max_len}"
    )


def _nb03() -> str:
    from course_utils.recipes.nb03 import SIZES

    s = SIZES.gpu
    return (
        f"scaled dot-product attention: {len(s.dims)} widths up to d = {s.dims[-1]}, "
        f"recall task {s.recall_steps} steps x {s.recall_batch}"
    )


def _nb04() -> str:
    from course_utils.recipes.nb04 import SIZES

    return f"self / cross attention, positions: lag task, {SIZES.gpu.steps} steps per encoding"


def _nb05() -> str:
    from course_utils.recipes.nb05 import SIZES

    return f"masks: one-layer character model, {SIZES.gpu.steps} steps with and without the mask"


def _nb06() -> str:
    from course_utils.recipes.nb06 import SIZES

    s = SIZES.gpu
    return (
        f"multi-head lookup model ({s.steps} steps), head ablation, loop vs batched heads "
        f"up to H = {max(s.time_heads)} at d = {s.time_d_model}, n = {s.time_len}"
    )


def _nb07() -> str:
    from course_utils.recipes.nb07 import SIZES

    s = SIZES.gpu
    return (
        f"block timing vs n up to {max(s.lengths)}, a {s.depth}-layer stack: depth and norm "
        "placement"
    )


def _nb08() -> str:
    from course_utils.recipes.nb08 import GPU_VAL_BAR, RECIPES

    c = RECIPES.gpu
    m = c.model
    return (
        f"GPT {m.n_layers}x{m.n_heads}x{m.d_model}, {c.steps} steps, {_dtype(c.autocast_dtype)}, "
        f"fused AdamW (bar: val <= {GPU_VAL_BAR})"
    )


def _nb09() -> str:
    from course_utils.recipes.nb09 import config

    cifar, mnist, digits = (config("gpu", dataset=d) for d in ("cifar10", "mnist", "digits"))
    return (
        f"ViT on CIFAR-10 ({cifar.train.epochs} epochs) when cached, else MNIST "
        f"({mnist.train.epochs} epochs) when cached, else digits ({digits.train.epochs} epochs)"
    )


def _nb10() -> str:
    from course_utils.recipes.nb10 import SIZES

    s = SIZES.gpu
    return (
        f"Transformer vs RNNs on the translation task, {s.steps} steps each, "
        f"{len(s.seeds)} Transformer seeds"
    )


def _nb11() -> str:
    from course_utils.recipes.nb11 import SIZES

    s = SIZES.gpu
    return (
        f"attention sweep to n = {max(s.lengths)} (adapts to memory), backends up to "
        f"n = {max(s.backend_lengths)}, KV cache ({s.gen_tokens} tokens), DDP"
    )


# the estimates (minutes, GB) sit next to the description each is an estimate for
EXPECTATIONS: dict[str, Expectation] = {
    "00": Expectation(0.2, 0.1, lambda: "environment report, softmax exercise (nothing sized)"),
    "01": Expectation(2.0, 0.5, _nb01),
    "02": Expectation(1.5, 0.5, _nb02),
    "03": Expectation(0.3, 0.2, _nb03),
    "04": Expectation(0.5, 0.2, _nb04),
    "05": Expectation(0.3, 0.2, _nb05),
    "06": Expectation(1.0, 0.5, _nb06),
    "07": Expectation(1.0, 1.0, _nb07),
    "08": Expectation(4.0, 6.0, _nb08),
    "09": Expectation(20.0, 6.0, _nb09),
    "10": Expectation(2.0, 1.0, _nb10),
    "11": Expectation(2.0, 12.0, _nb11),
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
