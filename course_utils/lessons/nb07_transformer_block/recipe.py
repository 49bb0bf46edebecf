"""Notebook 07 (the Transformer block): experiment sizes per profile and helpers.

* :func:`config` — every size the notebook uses, from the active profile.
* RNN vs CNN vs self attention, measured: :func:`sequence_models` builds the four contenders
  for a length ``n`` (a GRU, one conv layer, a conv stack deep enough to cover ``n``, one
  self-attention layer); :func:`time_vs_length` times them with ``torch.utils.benchmark``;
  :func:`fit_exponent` reads the growth rate off a log-log fit; :func:`influence` and
  :func:`conv_layers_needed` measure which inputs can reach the last output.
* The block: :func:`copy_from_torch` loads an ``nn.TransformerEncoderLayer``'s weights into a
  block with the course's parameter names.
* Depth: :class:`VariantBlock` (residual on/off, LayerNorm pre/post/none) and
  :func:`gradient_norms_by_layer` for the deep-stack gradient experiment.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from course_utils.modeling.layers import MLP, MultiHeadAttention
from course_utils.runtime import devices
from course_utils.runtime.profiles import ProfileTable
from course_utils.scaling import fit_exponent

__all__ = [
    "Config",
    "config",
    "ConvStack",
    "conv_layers_to_cover",
    "sequence_models",
    "time_vs_length",
    "fit_exponent",
    "influence",
    "conv_layers_needed",
    "multiply_adds",
    "copy_from_torch",
    "VariantBlock",
    "VARIANTS",
    "gradient_norms_by_layer",
]


@dataclass(frozen=True, kw_only=True)
class Config:
    """Sizes of notebook 07's experiments (the fields no row of :data:`SIZES` sets keep these
    defaults)."""

    # RNN vs CNN vs self attention
    lengths: tuple[int, ...]  # sequence lengths n timed
    d_model: int  # feature width D of every contender
    time_batch: int
    kernel: int = 3  # convolution kernel size k
    n_heads: int = 4
    min_run_time: float  # seconds per torch.utils.benchmark measurement
    influence_len: int = 32  # n of the "who can reach the last output" picture
    # the deep stack
    depth: int
    stack_d_model: int
    stack_n_heads: int = 4
    stack_d_ff: int
    stack_len: int
    stack_batch: int


SIZES = ProfileTable(
    ci=Config(
        lengths=(16, 32, 64, 128, 256),
        d_model=32,
        time_batch=2,
        min_run_time=0.02,
        depth=24,
        stack_d_model=32,
        stack_d_ff=64,
        stack_len=16,
        stack_batch=8,
    ),
    cpu=Config(
        lengths=(16, 32, 64, 128, 256, 512, 1024),
        d_model=64,
        time_batch=4,
        min_run_time=0.2,
        depth=48,
        stack_d_model=64,
        stack_d_ff=256,
        stack_len=32,
        stack_batch=16,
    ),
    gpu=Config(
        lengths=(16, 32, 64, 128, 256, 512, 1024),
        d_model=64,
        time_batch=4,
        min_run_time=0.2,
        depth=48,
        stack_d_model=64,
        stack_d_ff=256,
        stack_len=32,
        stack_batch=16,
    ),
)


def config(profile: str | None = None) -> Config:
    """The sizes of the active profile (or of ``profile``: "ci", "cpu" or "gpu"): that row of
    :data:`SIZES`."""
    return SIZES.for_profile(profile)


# ----------------------------------------------------------------------------- contenders


class ConvStack(nn.Module):
    """``n_layers`` causal 1-D convolutions of width D and kernel k, ReLU between:
    x (B, T, D) -> (B, T, D). Output t sees inputs t - k + 1 .. t of the layer below (left
    padding, like the GRU it is compared with), so the stack sees ``1 + n_layers * (k - 1)``
    positions back.

    ``init="he"`` (default) draws every kernel with He's ``kaiming_normal_`` for ReLU and zero
    biases, which keeps the signal's scale from layer to layer; ``init="default"`` keeps
    PyTorch's ``Conv1d`` initialisation, whose variance shrinks the signal at every layer, so a
    deep stack's gradients are tiny for *every* input, near or far (notebook 07 prints both)."""

    def __init__(self, d_model: int, n_layers: int, kernel: int = 3, init: str = "he"):
        super().__init__()
        if kernel < 2:
            raise ValueError(f"expected a kernel size >= 2, got {kernel}")
        if init not in ("he", "default"):
            raise ValueError(f"expected init 'he' or 'default', got {init!r}")
        self.kernel = kernel
        self.convs = nn.ModuleList(nn.Conv1d(d_model, d_model, kernel) for _ in range(n_layers))
        if init == "he":
            for conv in self.convs:
                nn.init.kaiming_normal_(conv.weight, nonlinearity="relu")
                nn.init.zeros_(conv.bias)

    def forward(self, x: Tensor) -> Tensor:
        """x (B, T, D) -> (B, T, D)."""
        h = x.transpose(1, 2)  # (B, D, T): Conv1d wants channels first
        for i, conv in enumerate(self.convs):
            h = conv(F.pad(h, (self.kernel - 1, 0)))  # pad on the left only: causal
            if i < len(self.convs) - 1:
                h = torch.relu(h)
        return h.transpose(1, 2)


def conv_layers_to_cover(n: int, kernel: int = 3) -> int:
    """Layers a stack of kernel-``k`` convolutions needs so that position ``n - 1`` sees
    position 0: ``ceil((n - 1) / (k - 1))`` (each layer widens the view by ``k - 1``)."""
    return max(1, math.ceil((n - 1) / (kernel - 1)))


class _GRU(nn.Module):
    """nn.GRU that returns only its outputs: x (B, T, D) -> (B, T, D)."""

    def __init__(self, d_model: int):
        super().__init__()
        self.gru = nn.GRU(d_model, d_model, batch_first=True)

    def forward(self, x: Tensor) -> Tensor:
        return self.gru(x)[0]


def sequence_models(n: int, cfg: Config | None = None) -> dict[str, nn.Module]:
    """The four contenders for sequences of length ``n``, each x (B, n, D) -> (B, n, D)."""
    cfg = cfg or config()
    D, k = cfg.d_model, cfg.kernel
    return {
        "RNN (GRU, 1 layer)": _GRU(D),
        f"CNN (1 layer, k={k})": ConvStack(D, 1, k),
        f"CNN ({conv_layers_to_cover(n, k)} layers: covers n)": ConvStack(
            D, conv_layers_to_cover(n, k), k
        ),
        "self-attention (1 layer)": MultiHeadAttention(D, cfg.n_heads),
    }


def multiply_adds(n: int, d_model: int, kernel: int = 3) -> dict[str, int]:
    """Multiply-adds of one forward pass per sequence of length ``n`` (the weights' products
    only: gates, softmax and biases are left out), keyed like :func:`time_vs_length`:

    * GRU: 3 gates x (input and hidden matrices) = ``6 n D^2``;
    * one convolution: ``k n D^2``; the covering stack: that times its layers;
    * multi-head self attention: fused Q, K, V and the output projection ``4 n D^2``, plus
      ``Q K^T`` and ``A V``, ``2 n^2 D``.
    """
    D, k = d_model, kernel
    return {
        "RNN (GRU, 1 layer)": 6 * n * D * D,
        f"CNN (1 layer, k={k})": k * n * D * D,
        "CNN (enough layers to cover n)": conv_layers_to_cover(n, k) * k * n * D * D,
        "self-attention (1 layer)": 4 * n * D * D + 2 * n * n * D,
    }


def _kind(name: str) -> str:
    """A stable label: the CNN stack's name carries its depth, which changes with n."""
    return "CNN (enough layers to cover n)" if "covers n" in name else name


_CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}


@torch.no_grad()
def time_vs_length(
    cfg: Config | None = None,
    seed: int = 0,
    clock: str = "cpu",
    device: torch.device | str | None = None,
    repeats: int = 1,
) -> dict[str, dict[int, float]]:
    """Seconds per forward pass, ``{contender: {n: seconds}}``, on x (B, n, D).

    ``clock="cpu"`` (default) measures the CPU time this process used, with torch on **one
    thread**: unlike wall-clock time it does not count the time other programs ran, and on one
    thread it does not count the time torch's worker threads spin while they wait for each
    other (which grows with the machine's load), so it stays stable on a busy machine.
    ``clock="wall"`` measures elapsed time with all of torch's threads (always on a GPU,
    where the benchmark waits for the device). Each value is the median of
    ``torch.utils.benchmark``'s repeats; with ``repeats > 1`` the whole sweep runs that many
    times, one after the other, and each value is the median over the sweeps, so that a burst
    of load from other programs during one sweep moves no point far. ``device``: default the
    profile's.
    """
    from torch.utils import benchmark

    cfg = cfg or config()
    device = devices.resolve(device)
    if device.type != "cpu":
        clock = "wall"  # CPU time says nothing about work done on an accelerator
    if repeats < 1:
        raise ValueError(f"expected repeats >= 1, got {repeats}")
    torch.manual_seed(seed)
    contenders = {
        n: (torch.randn(cfg.time_batch, n, cfg.d_model).to(device), sequence_models(n, cfg))
        for n in cfg.lengths
    }
    sweeps: dict[str, dict[int, list[float]]] = {}
    for _ in range(repeats):
        for n, (x, models) in contenders.items():
            for name, model in models.items():
                model.to(device).eval()
                timer = benchmark.Timer(
                    stmt="model(x)",
                    globals={"model": model, "x": x},
                    num_threads=1 if clock == "cpu" else torch.get_num_threads(),
                    timer=_CLOCKS[clock],
                )
                measurement = timer.blocked_autorange(min_run_time=cfg.min_run_time)
                sweeps.setdefault(_kind(name), {}).setdefault(n, []).append(measurement.median)
    return {
        name: {n: statistics.median(values) for n, values in curve.items()}
        for name, curve in sweeps.items()
    }


def influence(model: nn.Module, n: int, d_model: int, seed: int = 0) -> Tensor:
    """How much each input position can change the **last** output: (n,) tensor of
    ``|d y[n-1] / d x[j]|`` (gradient norm over features), computed in float64 so that
    exact zeros mean "no path" rather than "rounded away"."""
    gen = torch.Generator().manual_seed(seed)
    model = model.double()
    x = torch.randn(1, n, d_model, generator=gen, dtype=torch.float64, requires_grad=True)
    y = model(x)  # (1, n, D)
    direction = torch.randn(d_model, generator=gen, dtype=torch.float64)
    (y[0, -1] @ direction).backward()
    return x.grad[0].norm(dim=-1).detach()


def conv_layers_needed(n: int, d_model: int, kernel: int = 3, seed: int = 0) -> int:
    """Measured: the fewest conv layers for which input 0 influences output ``n - 1``."""
    layers = 1
    while True:
        torch.manual_seed(seed)
        if influence(ConvStack(d_model, layers, kernel), n, d_model, seed)[0] > 0:
            return layers
        layers += 1


# ----------------------------------------------------------------------------- the block


def copy_from_torch(block: nn.Module, layer: nn.TransformerEncoderLayer) -> nn.Module:
    """Copy ``layer``'s weights into ``block`` (parameters ``attn.qkv``, ``attn.out``,
    ``norm1``, ``norm2``, ``mlp.fc1``, ``mlp.fc2``); returns ``block``."""
    sa = layer.self_attn
    pairs = {
        "attn.qkv.weight": sa.in_proj_weight,
        "attn.qkv.bias": sa.in_proj_bias,
        "attn.out.weight": sa.out_proj.weight,
        "attn.out.bias": sa.out_proj.bias,
        "norm1.weight": layer.norm1.weight,
        "norm1.bias": layer.norm1.bias,
        "norm2.weight": layer.norm2.weight,
        "norm2.bias": layer.norm2.bias,
        "mlp.fc1.weight": layer.linear1.weight,
        "mlp.fc1.bias": layer.linear1.bias,
        "mlp.fc2.weight": layer.linear2.weight,
        "mlp.fc2.bias": layer.linear2.bias,
    }
    with torch.no_grad():
        for name, value in pairs.items():
            block.get_parameter(name).copy_(value)
    return block


# ----------------------------------------------------------------------------- depth


class VariantBlock(nn.Module):
    """A Transformer block with the residuals and LayerNorms switchable: x (B, T, D) -> same.

    ``norm``: "post" (x = norm(x + f(x))), "pre" (x = x + f(norm(x))) or None;
    ``residual=False`` drops the ``x +``.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        *,
        residual: bool = True,
        norm: str | None = "post",
    ):
        super().__init__()
        if norm not in ("pre", "post", None):
            raise ValueError(f"expected norm 'pre', 'post' or None, got {norm!r}")
        self.residual, self.norm = residual, norm
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.mlp = MLP(d_model, d_ff)
        self.norm1 = nn.LayerNorm(d_model) if norm else nn.Identity()
        self.norm2 = nn.LayerNorm(d_model) if norm else nn.Identity()

    def _sublayer(self, x: Tensor, f: Callable[[Tensor], Tensor], norm: nn.Module) -> Tensor:
        if self.norm == "pre":
            y = f(norm(x))
            return x + y if self.residual else y
        y = f(x)
        y = x + y if self.residual else y
        return norm(y)  # post-norm, or Identity when norm is None

    def forward(self, x: Tensor) -> Tensor:
        x = self._sublayer(x, self.attn, self.norm1)
        return self._sublayer(x, self.mlp, self.norm2)


VARIANTS: dict[str, dict] = {
    "post-norm (2017 paper)": {"residual": True, "norm": "post"},
    "pre-norm (GPT-2 onwards)": {"residual": True, "norm": "pre"},
    "residual, no LayerNorm": {"residual": True, "norm": None},
    "LayerNorm (post), no residual": {"residual": False, "norm": "post"},
    "neither": {"residual": False, "norm": None},
}


def gradient_norms_by_layer(
    variant: dict,
    cfg: Config | None = None,
    seed: int = 0,
    device: torch.device | str | None = None,
    make_block: Callable[[], nn.Module] | None = None,
) -> tuple[Tensor, Tensor]:
    """Build a ``cfg.depth``-block stack of :class:`VariantBlock` (``variant`` = its kwargs),
    run one batch through it at initialisation and backpropagate a loss.

    ``make_block``: builds one block instead (e.g. the notebook's ``TransformerBlock`` of
    width ``cfg.stack_d_model``); ``variant`` is then only a label and not used.

    Returns ``(grad_norms, output_std)``: the norm of the gradient of the loss with respect to
    each block's parameters, (depth,) from the input side to the output side, and the standard
    deviation of each block's output, (depth,). Computed in float64, so that a vanishing
    gradient shows its size instead of underflowing to 0. The loss is the mean squared error against
    random targets, read out through a final LayerNorm and linear layer (as a model's head).
    Runs on ``device`` (default the profile's); the results come back on the CPU.
    """
    cfg = cfg or config()
    device = devices.resolve(device)
    torch.manual_seed(seed)
    D = cfg.stack_d_model
    if make_block is None:

        def make_block() -> nn.Module:
            return VariantBlock(D, cfg.stack_n_heads, cfg.stack_d_ff, **variant)

    blocks = nn.ModuleList(
        make_block() for _ in range(cfg.depth)
    ).double()  # float64: tiny norms stay > 0
    head = nn.Sequential(nn.LayerNorm(D), nn.Linear(D, D)).double()
    blocks.to(device)
    head.to(device)
    x = torch.randn(cfg.stack_batch, cfg.stack_len, D, dtype=torch.float64).to(device)
    target = torch.randn(cfg.stack_batch, cfg.stack_len, D, dtype=torch.float64).to(device)
    stds = []
    h = x
    for block in blocks:
        h = block(h)
        stds.append(h.detach().std())
    loss = F.mse_loss(head(h), target)
    loss.backward()
    norms = torch.stack(
        [
            torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in block.parameters()]))
            for block in blocks
        ]
    )
    return norms.cpu(), torch.stack(stds).cpu()


def gpu_summary() -> str:
    """What this notebook runs in the ``gpu`` profile, in words, from the gpu row of its table
    (``course doctor`` prints it beside the estimate)."""

    s = SIZES.gpu
    return (
        f"block timing vs n up to {max(s.lengths)}, a {s.depth}-layer stack: depth and norm "
        "placement"
    )
