"""What each notebook runs in the ``gpu`` profile, in words, written from the ``gpu`` row of its
recipe's table (so ``course doctor``'s line changes when the table does; nothing is copied).

    what("08")   # 'GPT 6x6x384, 5000 steps, bf16, fused AdamW (bar: val <= 1.47)'

The time and memory estimates are :mod:`course_utils.gpu_plan`'s (the runtime layer prints
them in every notebook, so they cannot import the recipes).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = ["WHAT", "what"]


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
    from course_utils.recipes.nb09 import DATASET_PREFERENCE, config

    names = {"cifar10": "CIFAR-10", "mnist": "MNIST", "digits": "digits"}
    runs = [
        f"{names[d]} ({config('gpu', dataset=d).train.epochs} epochs)"
        for d in DATASET_PREFERENCE.gpu
    ]
    return "ViT on " + " when cached, else ".join(runs)


def _nb10() -> str:
    from course_utils.recipes.nb10 import SIZES

    s = SIZES.gpu
    return (
        f"Transformer vs RNNs on the translation task, {s.steps} steps each, "
        f"{len(s.seeds)} Transformer seeds"
    )


def _nb11() -> str:
    from course_utils.recipes.nb11 import SIZES
    from course_utils.recipes.scaling_sweep import SIZES as SWEEPS

    s, sweep = SIZES.gpu, SWEEPS.gpu
    big = sweep.sizes[-1]
    return (
        f"attention sweep to n = {max(s.lengths)} (adapts to memory), backends up to "
        f"n = {max(s.backend_lengths)}, KV cache ({s.gen_tokens} tokens), DDP; scaling sweep of "
        f"{len(sweep.sizes)} GPTs up to {big[0]}x{big[1]} on {sweep.tokens / 1e6:g}M tokens each"
    )


def _nb12() -> str:
    from course_utils.recipes.nb12 import SIZES

    s = SIZES.gpu
    return (
        f"captioners (cross attention and pooled vector) on {s.n_train:,} digit scenes, "
        f"{s.steps} steps each"
    )


def _nb00() -> str:
    return "environment report, softmax exercise (nothing sized)"


WHAT: dict[str, Callable[[], str]] = {
    "00": _nb00,
    "01": _nb01,
    "02": _nb02,
    "03": _nb03,
    "04": _nb04,
    "05": _nb05,
    "06": _nb06,
    "07": _nb07,
    "08": _nb08,
    "09": _nb09,
    "10": _nb10,
    "11": _nb11,
    "12": _nb12,
}


def what(notebook: str) -> str:
    """What notebook ``"08"`` (or ``"08_gpt"``) runs in the gpu profile, from its recipe's table."""
    key = notebook[:2]
    if key not in WHAT:
        raise KeyError(f"no gpu-profile description for notebook {notebook!r}")
    return WHAT[key]()
