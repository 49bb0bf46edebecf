"""One small training loop, used by every notebook.

    history = train(model, batches(data.train, 64, g), loss_fn=my_loss, steps=2000, lr=3e-3,
                    warmup=100, eval_fn=evaluate, eval_every=200)
    history.plot()

What it does, in order, every step: draw a batch (from an iterable of batches, or from a
function ``step -> batch``), move it to the model's device, (under data parallelism) keep this
process's shard, compute ``loss_fn(model, batch)``, backpropagate, clip the gradient norm, set
the learning rate (linear warmup then cosine decay to ``min_lr``) and take an AdamW step. It
shows a progress bar (``tqdm.auto``: a widget in Jupyter, text elsewhere), evaluates every
``eval_every`` steps and returns a :class:`History` for plotting.

Data parallelism: when ``torch.distributed`` is initialised with more than one process (under
``torchrun``, or :func:`course_utils.runtime.distributed.spawn_data_parallel`), ``train`` wraps the
model in ``DistributedDataParallel`` and each process trains on its own slice of every batch;
the gradients are averaged across processes, so the result equals single-process training on
the full batch.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field, is_dataclass
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = [
    "History",
    "lr_schedule",
    "train",
    "default_loss",
    "sequence_cross_entropy",
    "make_optimizer",
    "param_groups",
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


def param_groups(model: nn.Module, weight_decay: float = 0.0) -> list[dict[str, Any]]:
    """AdamW parameter groups (nanoGPT's rule): weight decay on matrices only (dim >= 2:
    Linear weights, embeddings), never on biases, norms or scalars. Tied parameters appear
    once, empty groups are left out; with ``weight_decay == 0`` one group holds everything."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("the model has no trainable parameters")
    if not weight_decay:
        return [{"params": params, "weight_decay": 0.0}]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
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


def to_device(batch: Any, device: torch.device) -> Any:
    """Move a batch (tensor, tuple/list/dict of tensors, or an object with ``.to``) to ``device``."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, tuple):
        return tuple(to_device(b, device) for b in batch)
    if isinstance(batch, list):
        return [to_device(b, device) for b in batch]
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    if hasattr(batch, "to") and (is_dataclass(batch) or isinstance(batch, nn.Module)):
        return batch.to(device)
    return batch


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
    was_training = model.training
    model.eval()
    dev = torch.device(device) if device is not None else _model_device(model)
    total, count = 0.0, 0
    try:
        for i, batch in enumerate(data):
            if max_batches is not None and i >= max_batches:
                break
            total += float(loss_fn(model, to_device(batch, dev)))
            count += 1
    finally:
        model.train(was_training)
    if count == 0:
        raise ValueError("evaluate_loss got no batches")
    return total / count


# --------------------------------------------------------------------------------------------
# The loop
# --------------------------------------------------------------------------------------------
def _model_device(model: nn.Module) -> torch.device:
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


def _interactive() -> bool:
    try:
        from IPython import get_ipython

        if get_ipython() is not None:
            return True
    except ImportError:
        pass
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


def _eval(model: nn.Module, eval_fn: Callable[[nn.Module], Any]) -> dict[str, float]:
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            result = eval_fn(model)
    finally:
        model.train(was_training)
    if isinstance(result, dict):
        return {str(k): float(v) for k, v in result.items()}
    return {"eval": float(result)}


def train(  # noqa: C901 -- the taught loop: one branch per documented option
    model: nn.Module,
    data: Any,
    *,
    steps: int,
    lr: float = 1e-3,
    loss_fn: Callable[[nn.Module, Any], torch.Tensor] | None = None,
    weight_decay: float = 0.0,
    betas: tuple[float, float] = (0.9, 0.999),
    warmup: int = 0,
    min_lr: float | None = None,
    schedule: str = "cosine",
    grad_clip: float | None = 1.0,
    optimizer: torch.optim.Optimizer | None = None,
    fused: bool = False,
    eval_fn: Callable[[nn.Module], float | dict[str, float]] | None = None,
    eval_every: int | None = None,
    eval_at_end: bool = True,
    log_every: int = 1,
    time_budget_s: float | None = None,
    seed: int | None = None,
    device: torch.device | str | None = None,
    autocast_dtype: torch.dtype | None = None,
    data_parallel: bool | None = None,
    progress: bool | str = True,
    desc: str = "training",
) -> History:
    """Train ``model`` for ``steps`` optimizer steps (or until ``time_budget_s``); returns a
    :class:`History`.

    Args:
        model: any ``nn.Module``; trained in place (moved to ``device`` if given).
        data: an iterable of batches (re-iterated when it runs out, e.g.
            ``course_utils.data.batches(...)``) or a function ``step -> batch``
            (e.g. ``lambda step: ds.get_batch("train", 64, 12, g)``).
        loss_fn: ``loss_fn(model, batch) -> scalar``; default :func:`default_loss`.
        lr, warmup, min_lr, schedule: see :func:`lr_schedule` (AdamW peak learning rate).
        weight_decay, betas, fused: AdamW's (:func:`make_optimizer`); ignored with ``optimizer``.
        grad_clip: clip the global gradient norm to this (None or 0: no clipping).
        eval_fn: ``eval_fn(model) -> float | dict`` run in eval mode without gradients every
            ``eval_every`` steps (None: only at the end) and, with ``eval_at_end``, after the
            last step (a caller with its own, larger final evaluation turns it off).
        log_every: record the mean training loss every this many steps.
        time_budget_s: stop before a step that would start after this many seconds (the
            evaluations count, as in nanoGPT); the learning-rate decay then follows the time
            used (``lr_schedule(time_fraction=...)``) so it still ends on time.
        seed: if given, :func:`course_utils.runtime.profiles.seed_everything` first (dropout, sampling).
        autocast_dtype: e.g. ``torch.bfloat16`` to run forward passes under autocast.
        data_parallel: wrap in DDP and shard batches by rank; default: when
            ``torch.distributed`` is initialised with more than one process.
        progress: show a ``tqdm.auto`` bar; ``"auto"``: only when interactive.

    The model is left in eval mode, ready to be evaluated.
    """
    if steps < 1:
        raise ValueError(f"expected steps >= 1, got {steps}")
    from course_utils.runtime.profiles import cap_steps

    steps = cap_steps(steps)  # COURSE_MAX_STEPS (the GPU check's smoke runs)
    if log_every < 1 or (eval_every is not None and eval_every < 1):
        raise ValueError(
            f"expected log_every >= 1 and eval_every >= 1, got {log_every}, {eval_every}"
        )
    if seed is not None:
        from course_utils.runtime.profiles import seed_everything

        seed_everything(seed)
    if device is not None:
        model.to(device)
    dev = _model_device(model)
    loss_fn = loss_fn or default_loss

    from course_utils.runtime import distributed

    if data_parallel is None:
        data_parallel = distributed.world_size() > 1
    rank, world = (distributed.rank(), distributed.world_size()) if data_parallel else (0, 1)
    net: nn.Module = model
    if data_parallel and world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP

        net = DDP(model, device_ids=[dev.index] if dev.type == "cuda" else None)

    opt = optimizer or make_optimizer(model, lr, weight_decay, betas, fused=fused)
    params = [p for g in opt.param_groups for p in g["params"]]
    source = _BatchSource(data)
    history = History()
    show = _interactive() if progress == "auto" else bool(progress)
    from tqdm.auto import tqdm

    bar = tqdm(
        total=steps,
        desc=desc,
        disable=not show or rank != 0,
        mininterval=0.5,
        dynamic_ncols=True,
        leave=True,
    )
    autocast = (
        torch.autocast(device_type=dev.type, dtype=autocast_dtype)
        if autocast_dtype is not None
        else contextlib.nullcontext()
    )
    running: torch.Tensor | None = None  # sum of the losses since the last log, on the device
    n_running = 0
    norm: torch.Tensor | float = float("nan")
    current_lr: float | None = None
    start = time.perf_counter()

    def log(step: int) -> None:
        """Record the mean loss of the steps since the last log, ending at ``step``."""
        nonlocal running, n_running
        assert running is not None
        if data_parallel and world > 1:
            running = distributed.all_reduce_mean(running)
        mean_loss = running.item() / n_running
        if not math.isfinite(mean_loss):
            raise FloatingPointError(
                f"the training loss became {mean_loss} at step {step}; try a smaller lr "
                f"(now {current_lr if current_lr is not None else 'set by the optimizer'}), "
                "warmup, or grad_clip"
            )
        history.step.append(step)
        history.train_loss.append(mean_loss)
        history.lr.append(float(opt.param_groups[0]["lr"]))
        history.grad_norm.append(float(norm) if grad_clip else float("nan"))
        history.time.append(time.perf_counter() - start)
        running, n_running = None, 0
        bar.set_postfix(loss=f"{mean_loss:.4f}", lr=f"{history.lr[-1]:.2e}", refresh=False)

    def evaluate(step: int) -> None:
        t0 = time.perf_counter()
        metrics = _eval(model, eval_fn)
        history.eval_seconds += time.perf_counter() - t0
        history.eval_step.append(step)
        history.eval_time.append(time.perf_counter() - start)
        for k, v in metrics.items():
            history.eval.setdefault(k, []).append(v)
        train_loss = f"{history.train_loss[-1]:.4f}" if history.train_loss else ""
        bar.set_postfix(
            {"loss": train_loss, **{k: f"{v:.4f}" for k, v in metrics.items()}}, refresh=False
        )

    model.train()
    try:
        for step in range(steps):
            elapsed = time.perf_counter() - start
            if time_budget_s is not None and elapsed >= time_budget_s:
                history.stopped_by = "time budget"
                break
            if optimizer is None:
                used = elapsed / time_budget_s if time_budget_s else 0.0
                current_lr = lr_schedule(
                    step,
                    lr=lr,
                    steps=steps,
                    warmup=warmup,
                    min_lr=min_lr,
                    schedule=schedule,
                    time_fraction=used,
                )
                for group in opt.param_groups:
                    group["lr"] = current_lr
            batch = to_device(source.get(step), dev)
            if data_parallel and world > 1:
                batch = distributed.shard(batch, rank, world)
            with autocast:
                loss = loss_fn(net, batch)
            if not (isinstance(loss, torch.Tensor) and loss.dim() == 0):
                raise TypeError(f"loss_fn must return a scalar tensor, got {loss!r:.80}")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if grad_clip:
                norm = torch.nn.utils.clip_grad_norm_(params, grad_clip)
            opt.step()
            detached = loss.detach()
            if detached.dtype in (torch.float16, torch.bfloat16):
                detached = detached.float()
            running = detached if running is None else running + detached
            n_running += 1
            history.steps_done = step + 1

            last = step == steps - 1
            if (step + 1) % log_every == 0 or last:
                log(step)
            periodic = eval_every and (step + 1) % eval_every == 0 and not last
            if eval_fn is not None and (periodic or (last and eval_at_end)):
                evaluate(step)
            bar.update(1)
        stopped_early = history.stopped_by != "steps" and history.steps_done > 0
        if stopped_early and n_running:
            log(history.steps_done - 1)
        if stopped_early and eval_fn is not None and eval_at_end:
            if not history.eval_step or history.eval_step[-1] != history.steps_done - 1:
                evaluate(history.steps_done - 1)
    finally:
        bar.close()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    history.wall_seconds = time.perf_counter() - start
    model.eval()
    return history
