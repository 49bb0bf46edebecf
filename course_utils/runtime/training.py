"""One small training loop, used by every notebook.

    history = train(model, batches(data.train, 64, g), loss_fn=my_loss, steps=2000, lr=3e-3,
                    warmup=100, eval_fn=evaluate, eval_every=200)
    history.plot()

What it does, in order, every step (as nanoGPT's ``train.py``): set the learning rate (linear
warmup then cosine decay to ``min_lr``), draw a batch (from an iterable of batches, or from a
function ``step -> batch``), move it to the model's device, (under data parallelism) keep this
process's shard, compute ``loss_fn(model, batch)`` (under autocast if asked), backpropagate,
clip the gradient norm and take an AdamW step -- through a ``torch.amp.GradScaler`` when the
autocast dtype is float16, which scales the loss up so that small float16 gradients do not
underflow and skips a step whose gradients overflowed. Then the hooks: record the loss every
``log_every`` steps (``on_log``), evaluate every ``eval_every`` steps (``eval_fn``), and
``on_step(step, model)``. It shows a progress bar (``tqdm.auto``: a widget in Jupyter, text
elsewhere) and returns a :class:`History` for plotting. The options live in a
:class:`TrainConfig`; ``train(model, data, steps=..., lr=...)`` builds one from keywords.

Data parallelism: when ``torch.distributed`` is initialised with more than one process (under
``torchrun``, or :func:`course_utils.runtime.distributed.spawn_data_parallel`), ``train`` wraps the
model in ``DistributedDataParallel`` and each process trains on its own slice of every batch;
the gradients are averaged across processes, so the result equals single-process training on
the full batch.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from tqdm.auto import tqdm

from course_utils.modeling.module_state import eval_mode
from course_utils.runtime import devices, distributed, precision
from course_utils.runtime.devices import to_device
from course_utils.runtime.profiles import cap_steps, seed_everything

__all__ = [
    "History",
    "TrainConfig",
    "gradient_scaler",
    "lr_schedule",
    "train",
    "default_loss",
    "sequence_cross_entropy",
    "make_optimizer",
    "param_groups",
    "no_weight_decay_names",
    "to_device",
    "evaluate_loss",
]


# --------------------------------------------------------------------------------------------
# History
# --------------------------------------------------------------------------------------------
@dataclass
class History:
    """What happened during :func:`train`, as plain lists (one entry per logged step).

    ``step``, ``train_loss`` (mean over the steps since the previous entry), ``lr``,
    ``grad_norm`` (before clipping; NaN when not clipping), ``time`` (seconds since the start);
    evaluations: ``eval_step``, ``eval_time`` and ``eval`` (metric name -> list of values).
    The run: ``steps_done``, ``stopped_by`` ("steps" or "time budget"), ``wall_seconds``
    (evaluations included) and ``eval_seconds`` (spent in ``eval_fn``).
    """

    step: list[int] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    grad_norm: list[float] = field(default_factory=list)
    time: list[float] = field(default_factory=list)
    eval_step: list[int] = field(default_factory=list)
    eval_time: list[float] = field(default_factory=list)
    eval: dict[str, list[float]] = field(default_factory=dict)
    steps_done: int = 0
    stopped_by: str = "steps"
    wall_seconds: float = 0.0
    eval_seconds: float = 0.0

    @property
    def train_seconds(self) -> float:
        """Seconds spent in training steps (the wall time less the evaluations)."""
        return self.wall_seconds - self.eval_seconds

    @property
    def total_time(self) -> float:
        """Wall-clock seconds of the whole run (including evaluations)."""
        return max(self.time[-1:] + self.eval_time[-1:], default=0.0)

    def last(self, key: str = "train_loss") -> float:
        """The latest value of ``train_loss``, ``lr``, ``grad_norm`` or an eval metric."""
        series = self.eval.get(key) if key in self.eval else getattr(self, key, None)
        if not series:
            known = ["train_loss", "lr", "grad_norm", *self.eval]
            raise KeyError(f"no recorded values for {key!r}; recorded: {known}")
        return series[-1]

    def best(self, key: str, mode: str = "min") -> float:
        """The smallest (``mode="min"``) or largest (``"max"``) value of an eval metric."""
        if key not in self.eval:
            raise KeyError(f"no eval metric {key!r}; recorded: {list(self.eval)}")
        return min(self.eval[key]) if mode == "min" else max(self.eval[key])

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (JSON-serialisable)."""
        return asdict(self)

    def series(self) -> dict[str, tuple[list[int], list[float]]]:
        """Every curve as ``name -> (steps, values)``: ``train_loss`` and each eval metric."""
        out = {"train_loss": (list(self.step), list(self.train_loss))}
        for key, values in self.eval.items():
            out[key] = (list(self.eval_step), list(values))
        return out

    def plot(self, title: str = "training curves", **kwargs: Any):
        """Plot the curves (see :func:`course_utils.plots.plot_curves`); returns the figure."""
        from course_utils.plots import plot_curves

        return plot_curves(self, title=title, **kwargs)

    def __repr__(self) -> str:
        if not self.step:
            return "History(empty)"
        parts = [
            f"{len(self.step)} logged steps up to {self.step[-1]}",
            f"train_loss {self.train_loss[0]:.4g} -> {self.train_loss[-1]:.4g}",
        ]
        parts += [f"{k} {v[-1]:.4g}" for k, v in self.eval.items() if v]
        parts.append(f"{self.total_time:.1f} s")
        return "History(" + ", ".join(parts) + ")"


# --------------------------------------------------------------------------------------------
# Learning rate, optimizer, losses
# --------------------------------------------------------------------------------------------
def lr_schedule(
    step: int,
    *,
    lr: float,
    steps: int,
    warmup: int = 0,
    min_lr: float | None = None,
    schedule: str = "cosine",
    time_fraction: float = 0.0,
) -> float:
    """Learning rate at ``step`` (0-based): linear warmup to ``lr``, then decay to ``min_lr``.

    Warmup: ``lr * (step + 1) / warmup`` for ``step < warmup``. Then ``schedule``:
    ``"cosine"`` (half a cosine from ``lr`` at ``warmup`` to ``min_lr`` at ``steps``),
    ``"linear"`` or ``"constant"``. ``min_lr`` defaults to ``lr / 10`` (as nanoGPT).
    ``time_fraction``: the share of a time budget used so far; the decay follows the larger
    of it and the share of steps done, so a run stopped by time still ends its decay.
    """
    if steps < 1 or warmup < 0:
        raise ValueError(f"expected steps >= 1 and warmup >= 0, got steps={steps}, warmup={warmup}")
    if schedule not in ("cosine", "linear", "constant"):
        raise ValueError(f"expected schedule 'cosine', 'linear' or 'constant', got {schedule!r}")
    min_lr = lr / 10 if min_lr is None else min_lr
    if step < warmup:
        return lr * (step + 1) / warmup
    if schedule == "constant":
        return lr
    ratio = min(1.0, max(0.0, (step - warmup) / max(1, steps - warmup), time_fraction))
    if schedule == "linear":
        return lr + ratio * (min_lr - lr)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


def no_weight_decay_names(model: nn.Module) -> set[str]:
    """Names of the parameters that a module exempts from weight decay (timm's convention: a
    ``no_weight_decay()`` method returning names relative to that module, e.g. a ViT's
    ``{"pos_embed", "cls_token"}``), collected over ``model`` and its submodules."""
    names: set[str] = set()
    for prefix, module in model.named_modules():
        method = getattr(module, "no_weight_decay", None)
        if callable(method):
            names |= {f"{prefix}.{n}" if prefix else n for n in method()}
    return names


def param_groups(model: nn.Module, weight_decay: float = 0.0) -> list[dict[str, Any]]:
    """AdamW parameter groups (nanoGPT's rule): weight decay on matrices only (dim >= 2:
    Linear weights, embeddings), never on biases, norms or scalars, nor on the parameters the
    model names in ``no_weight_decay()`` (timm's convention: a ViT's position embedding and
    class token). Tied parameters appear once, empty groups are left out; with
    ``weight_decay == 0`` one group holds everything."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if not named:
        raise ValueError("the model has no trainable parameters")
    if not weight_decay:
        return [{"params": [p for _, p in named], "weight_decay": 0.0}]
    exempt = no_weight_decay_names(model)
    decay = [p for n, p in named if p.dim() >= 2 and n not in exempt]
    keep = [p for n, p in named if p.dim() < 2 or n in exempt]
    groups = [
        {"params": decay, "weight_decay": weight_decay},
        {"params": keep, "weight_decay": 0.0},
    ]
    return [g for g in groups if g["params"]]


def make_optimizer(
    model: nn.Module,
    lr: float,
    weight_decay: float = 0.0,
    betas: tuple[float, float] = (0.9, 0.999),
    fused: bool = False,
) -> torch.optim.Optimizer:
    """AdamW over :func:`param_groups` (weight decay on matrices only); ``fused``: PyTorch's
    single-kernel implementation (faster on CPU and CUDA, rounding may differ slightly)."""
    return torch.optim.AdamW(param_groups(model, weight_decay), lr=lr, betas=betas, fused=fused)


def sequence_cross_entropy(
    logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = 0
) -> torch.Tensor:
    """Mean cross-entropy over non-ignored tokens: logits (B, T, V), targets (B, T) -> scalar.

    ``ignore_index`` defaults to PAD (0), so padding never counts.
    """
    if logits.dim() != 3 or logits.shape[:2] != targets.shape:
        raise ValueError(
            f"expected logits (B, T, V) and targets (B, T), got {tuple(logits.shape)} and "
            f"{tuple(targets.shape)}"
        )
    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=ignore_index
    )


def default_loss(model: nn.Module, batch: Any) -> torch.Tensor:
    """Call the model on the batch and return its loss.

    ``model(*batch)`` for a tuple/list, ``model(**batch)`` for a dict, else ``model(batch)``.
    The model must return a scalar loss, or a tuple whose last item is one (nanoGPT's
    ``logits, loss``). Anything else: pass ``loss_fn=`` to :func:`train`.
    """
    if isinstance(batch, (tuple, list)):
        out = model(*batch)
    elif isinstance(batch, dict):
        out = model(**batch)
    else:
        out = model(batch)
    if isinstance(out, (tuple, list)) and out and isinstance(out[-1], torch.Tensor):
        out = out[-1]
    if not (isinstance(out, torch.Tensor) and out.dim() == 0):
        raise TypeError(
            "the model did not return a scalar loss (or a tuple ending with one); pass "
            "loss_fn=lambda model, batch: ... to train() to say how to compute the loss"
        )
    return out


@torch.no_grad()
def evaluate_loss(
    model: nn.Module,
    data: Iterable[Any],
    loss_fn: Callable[[nn.Module, Any], torch.Tensor] = default_loss,
    *,
    max_batches: int | None = None,
    device: torch.device | str | None = None,
) -> float:
    """Mean of ``loss_fn(model, batch)`` over (at most ``max_batches``) batches, in eval mode."""
    dev = torch.device(device) if device is not None else devices.model_device(model)
    total, count = 0.0, 0
    with eval_mode(model):
        for i, batch in enumerate(data):
            if max_batches is not None and i >= max_batches:
                break
            total += float(loss_fn(model, to_device(batch, dev)))
            count += 1
    if count == 0:
        raise ValueError("evaluate_loss got no batches")
    return total / count


# --------------------------------------------------------------------------------------------
# The loop
# --------------------------------------------------------------------------------------------
@dataclass
class TrainConfig:
    """Every option of :func:`train` except the model, the data and the hooks.

    ``steps``: optimizer steps (capped by ``COURSE_MAX_STEPS``, see
    :func:`~course_utils.runtime.profiles.cap_steps`). ``lr``, ``warmup``, ``min_lr``,
    ``schedule``: the learning rate (:func:`lr_schedule`). ``weight_decay``, ``betas``,
    ``fused``: AdamW's (:func:`make_optimizer`; ignored when ``train`` gets an ``optimizer``).
    ``grad_clip``: clip the global gradient norm to this (None or 0: no clipping).
    ``autocast_dtype``: run the forward pass under autocast to this dtype; ``torch.float16``
    also scales the loss with a ``torch.amp.GradScaler`` (bfloat16 needs no scaling).
    ``eval_every``: evaluate every this many steps (None: only at the end) and, with
    ``eval_at_end``, after the last step. ``log_every``: record the mean training loss every
    this many steps. ``time_budget_s``: stop before a step that would start after this many
    seconds (evaluations count, as in nanoGPT); the learning-rate decay then follows the time
    used. ``seed``: :func:`~course_utils.runtime.profiles.seed_everything` first.
    ``data_parallel``: wrap in DDP and shard batches by rank (default: when
    ``torch.distributed`` runs more than one process). ``progress``: show a ``tqdm.auto`` bar
    (``"auto"``: only when interactive), labelled ``desc``.
    """

    steps: int
    lr: float = 1e-3
    warmup: int = 0
    min_lr: float | None = None
    schedule: str = "cosine"
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    fused: bool = False
    grad_clip: float | None = 1.0
    autocast_dtype: torch.dtype | None = None
    eval_every: int | None = None
    eval_at_end: bool = True
    log_every: int = 1
    time_budget_s: float | None = None
    seed: int | None = None
    data_parallel: bool | None = None
    progress: bool | str = True
    desc: str = "training"

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ValueError(f"expected steps >= 1, got {self.steps}")
        if self.log_every < 1 or (self.eval_every is not None and self.eval_every < 1):
            raise ValueError(
                f"expected log_every >= 1 and eval_every >= 1, got {self.log_every}, "
                f"{self.eval_every}"
            )

    def lr_at(self, step: int, steps: int, time_fraction: float) -> float:
        """The scheduled learning rate at ``step`` of ``steps`` (:func:`lr_schedule`)."""
        return lr_schedule(
            step,
            lr=self.lr,
            steps=steps,
            warmup=self.warmup,
            min_lr=self.min_lr,
            schedule=self.schedule,
            time_fraction=time_fraction,
        )


def gradient_scaler(
    device: torch.device | str, autocast_dtype: torch.dtype | None
) -> torch.amp.GradScaler:
    """A ``torch.amp.GradScaler`` for ``device``, enabled only for float16 autocast (as
    nanoGPT): float16's narrow range underflows small gradients unless the loss is scaled up
    first; bfloat16 and float32 keep float32's range. Disabled, every call passes through."""
    device = torch.device(device)
    enabled = autocast_dtype == torch.float16 and device.type != "meta"
    return torch.amp.GradScaler(device.type if enabled else "cpu", enabled=enabled)


def _interactive() -> bool:
    """In IPython / Jupyter (already imported there) or at a terminal."""
    ipython = sys.modules.get("IPython")
    if ipython is not None and ipython.get_ipython() is not None:
        return True
    return bool(getattr(sys.stderr, "isatty", lambda: False)())


class _BatchSource:
    """Batches from a callable ``step -> batch`` or an iterable (re-iterated for a new epoch)."""

    def __init__(self, data: Any) -> None:
        self.fn: Callable[[int], Any] | None = None
        self.it: Iterator[Any] | None = None
        if callable(data) and not hasattr(data, "__iter__"):
            self.fn = data
        elif hasattr(data, "__iter__"):
            self.data = data
            self.one_shot = iter(data) is data  # a generator cannot start a new epoch
            self.it = iter(data)
        else:
            raise TypeError(
                f"expected an iterable of batches or a function step -> batch, got {type(data).__name__}"
            )

    def get(self, step: int) -> Any:
        if self.fn is not None:
            return self.fn(step)
        assert self.it is not None
        try:
            return next(self.it)
        except StopIteration:
            if self.one_shot:
                raise ValueError(
                    f"the batch iterator ran out after {step} steps; pass a re-iterable "
                    "(course_utils.data.batches(...), a list) or a function step -> batch"
                ) from None
            self.it = iter(self.data)
            try:
                return next(self.it)
            except StopIteration:
                raise ValueError("the batch iterable is empty") from None


class _Parallel:
    """Data parallelism: the network to call (``model`` or its DDP wrapper) and this rank's
    share of a batch; with one process both are the identity."""

    def __init__(self, model: nn.Module, device: torch.device, enabled: bool | None) -> None:
        if enabled is None:
            enabled = distributed.world_size() > 1
        self.rank, self.world = (
            (distributed.rank(), distributed.world_size()) if enabled else (0, 1)
        )
        self.net: nn.Module = model
        if self.world > 1:
            ids = [device.index] if device.type == "cuda" else None
            self.net = DistributedDataParallel(model, device_ids=ids)

    def shard(self, batch: Any) -> Any:
        return distributed.shard(batch, self.rank, self.world) if self.world > 1 else batch

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        return distributed.all_reduce_mean(x) if self.world > 1 else x


class _Recorder:
    """Writes the :class:`History`: the clock, the running training loss between two log
    entries, the evaluations, and the progress bar that shows them."""

    def __init__(self, cfg: TrainConfig, steps: int, parallel: _Parallel) -> None:
        self.history = History()
        self.parallel = parallel
        show = _interactive() if cfg.progress == "auto" else bool(cfg.progress)
        self.bar = tqdm(
            total=steps,
            desc=cfg.desc,
            disable=not show or parallel.rank != 0,
            mininterval=0.5,
            dynamic_ncols=True,
            leave=True,
        )
        self.running: torch.Tensor | None = None  # sum of the losses since the last log
        self.n_running = 0
        self.start = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def add(self, loss: torch.Tensor, step: int) -> None:
        """Count one step's loss (kept on the device: no synchronisation per step)."""
        detached = loss.detach()
        if detached.dtype in (torch.float16, torch.bfloat16):
            detached = detached.float()
        self.running = detached if self.running is None else self.running + detached
        self.n_running += 1
        self.history.steps_done = step + 1

    def log(self, step: int, lr: float, grad_norm: torch.Tensor | float) -> None:
        """Record the mean loss of the steps since the last log, ending at ``step``."""
        assert self.running is not None
        mean_loss = self.parallel.mean(self.running).item() / self.n_running
        if not math.isfinite(mean_loss):
            raise FloatingPointError(
                f"the training loss became {mean_loss} at step {step}; try a smaller lr "
                f"(now {lr:.3g}), warmup, or grad_clip"
            )
        h = self.history
        h.step.append(step)
        h.train_loss.append(mean_loss)
        h.lr.append(lr)
        h.grad_norm.append(float(grad_norm))
        h.time.append(self.elapsed())
        self.running, self.n_running = None, 0
        self.bar.set_postfix(loss=f"{mean_loss:.4f}", lr=f"{lr:.2e}", refresh=False)

    def evaluate(self, step: int, model: nn.Module, eval_fn: Callable[[nn.Module], Any]) -> None:
        """Run ``eval_fn(model)`` in eval mode without gradients; record its metrics."""
        t0 = time.perf_counter()
        with eval_mode(model), torch.no_grad():
            result = eval_fn(model)
        metrics = (
            {str(k): float(v) for k, v in result.items()}
            if isinstance(result, dict)
            else {"eval": float(result)}
        )
        h = self.history
        h.eval_seconds += time.perf_counter() - t0
        h.eval_step.append(step)
        h.eval_time.append(self.elapsed())
        for k, v in metrics.items():
            h.eval.setdefault(k, []).append(v)
        train_loss = f"{h.train_loss[-1]:.4f}" if h.train_loss else ""
        self.bar.set_postfix(
            {"loss": train_loss, **{k: f"{v:.4f}" for k, v in metrics.items()}}, refresh=False
        )


def _check_scalar(loss: Any) -> None:
    if not (isinstance(loss, torch.Tensor) and loss.dim() == 0):
        raise TypeError(f"loss_fn must return a scalar tensor, got {loss!r:.80}")


def set_learning_rate(opt: torch.optim.Optimizer, lr: float) -> None:
    """Give every parameter group of ``opt`` the learning rate ``lr`` (what the schedule says)."""
    for group in opt.param_groups:
        group["lr"] = lr


def optimizer_step(
    loss: torch.Tensor,
    opt: torch.optim.Optimizer,
    scaler: Any,
    params: list[torch.Tensor],
    grad_clip: float | None,
    norm: torch.Tensor | float,
) -> torch.Tensor | float:
    """One update: clear the gradients, backward (scaled when float16 autocast needs it),
    clip the global gradient norm to ``grad_clip`` (on the true, unscaled gradients), step.

    Returns the gradient norm before clipping (``norm`` unchanged when there is no clipping).
    """
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    if grad_clip:
        scaler.unscale_(opt)  # clip the true gradients, not the scaled ones
        norm = torch.nn.utils.clip_grad_norm_(params, grad_clip)
    scaler.step(opt)  # skipped when a float16 gradient overflowed
    scaler.update()
    return norm


def train(
    model: nn.Module,
    data: Any,
    config: TrainConfig | None = None,
    *,
    loss_fn: Callable[[nn.Module, Any], torch.Tensor] | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    eval_fn: Callable[[nn.Module], float | dict[str, float]] | None = None,
    on_step: Callable[[int, nn.Module], None] | None = None,
    on_log: Callable[[int, History], None] | None = None,
    device: torch.device | str | None = None,
    **options: Any,
) -> History:
    """Train ``model`` for ``config.steps`` steps (or ``config.time_budget_s``) -> :class:`History`.
    ``train(model, data, steps=100)`` is short for ``train(model, data, TrainConfig(steps=100))``.

    Args:
        model: any ``nn.Module``; trained in place (moved to ``device`` if given).
        data: an iterable of batches (re-iterated when it runs out) or a function
            ``step -> batch`` (e.g. ``lambda step: ds.get_batch("train", 64, 12, g)``).
        config, options: a :class:`TrainConfig` and / or its fields as keywords.
        loss_fn: ``loss_fn(model, batch) -> scalar``; default :func:`default_loss`.
        optimizer: use this one (its own learning rate) instead of AdamW with the schedule.
        eval_fn: ``eval_fn(model) -> float | dict``, in eval mode without gradients every
            ``eval_every`` steps and after the last (``eval_at_end``).
        on_step: ``on_step(step, model)`` at the end of every step (e.g. a weight average).
        on_log: ``on_log(step, history)`` after each log entry.
    The model is left in eval mode, ready to be evaluated.
    """
    cfg = replace(config, **options) if config is not None else TrainConfig(**options)
    steps = cap_steps(cfg.steps)  # COURSE_MAX_STEPS (the GPU check's smoke runs)
    if cfg.seed is not None:
        seed_everything(cfg.seed)
    if device is not None:
        model.to(device)
    dev = devices.model_device(model)
    loss_fn = loss_fn or default_loss
    parallel = _Parallel(model, dev, cfg.data_parallel)
    opt = optimizer or make_optimizer(model, cfg.lr, cfg.weight_decay, cfg.betas, cfg.fused)
    params = [p for g in opt.param_groups for p in g["params"]]
    amp_dtype = precision.autocast_for(cfg.autocast_dtype, dev)  # bf16 -> fp16 on a T4
    scaler = gradient_scaler(dev, amp_dtype)
    source = _BatchSource(data)
    rec = _Recorder(cfg, steps, parallel)
    norm: torch.Tensor | float = float("nan")  # the gradient norm before clipping
    model.train()
    try:
        for step in range(steps):
            elapsed = rec.elapsed()
            if cfg.time_budget_s is not None and elapsed >= cfg.time_budget_s:
                rec.history.stopped_by = "time budget"
                break
            if optimizer is None:  # the schedule sets the learning rate
                used = elapsed / cfg.time_budget_s if cfg.time_budget_s else 0.0
                set_learning_rate(opt, cfg.lr_at(step, steps, time_fraction=used))
            batch = parallel.shard(to_device(source.get(step), dev))
            with devices.autocast(dev, amp_dtype):
                loss = loss_fn(parallel.net, batch)
            _check_scalar(loss)
            norm = optimizer_step(loss, opt, scaler, params, cfg.grad_clip, norm)
            rec.add(loss, step)

            last = step == steps - 1
            if (step + 1) % cfg.log_every == 0 or last:
                rec.log(step, float(opt.param_groups[0]["lr"]), norm)
                if on_log is not None:
                    on_log(step, rec.history)
            periodic = cfg.eval_every and (step + 1) % cfg.eval_every == 0 and not last
            if eval_fn is not None and (periodic or (last and cfg.eval_at_end)):
                rec.evaluate(step, model, eval_fn)
            if on_step is not None:
                on_step(step, model)
            rec.bar.update(1)
        _finish_early(rec, model, eval_fn if cfg.eval_at_end else None, opt, norm, on_log)
    finally:
        rec.bar.close()
    devices.synchronize(dev)
    rec.history.wall_seconds = rec.elapsed()
    model.eval()
    return rec.history


def _finish_early(
    rec: _Recorder,
    model: nn.Module,
    eval_fn: Callable[[nn.Module], Any] | None,
    opt: torch.optim.Optimizer,
    norm: torch.Tensor | float,
    on_log: Callable[[int, History], None] | None,
) -> None:
    """After a run stopped by its time budget: log the steps since the last log entry and
    evaluate the last step (unless that just happened)."""
    h = rec.history
    if h.stopped_by == "steps" or h.steps_done == 0:
        return
    last = h.steps_done - 1
    if rec.n_running:
        rec.log(last, float(opt.param_groups[0]["lr"]), norm)
        if on_log is not None:
            on_log(last, h)
    if eval_fn is not None and (not h.eval_step or h.eval_step[-1] != last):
        rec.evaluate(last, model, eval_fn)
