"""Lesson 09's runs: the ViT trained by the course's one loop on epochs of shuffled,
augmented batches (with a weight average), the CNN and SVC baselines beside it, and the
spectrogram ViT.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from course_utils.data.images import (
    ImageSplit,
    load_digits_split,
)
from course_utils.lessons.nb09_vit.data import augment_batch, load_images, spectrogram_split
from course_utils.lessons.nb09_vit.sizes import (
    CNNConfig,
    Config,
    SpectrogramConfig,
    TrainConfig,
    config,
)
from course_utils.modeling.layers import record_attention
from course_utils.modeling.models.vit import ViT, ViTConfig
from course_utils.modeling.module_state import eval_mode
from course_utils.runtime import devices
from course_utils.runtime.profiles import current
from course_utils.runtime.training import History, train


@dataclass
class ImageRun:
    """One trained classifier: its ``model`` and what the notebook prints about it.

    ``wall_s``: seconds of wall-clock time for training (evaluations during training
    included); ``cpu_s``: CPU seconds this process used meanwhile (all its threads: on a busy
    machine it stays close to what an idle one would take, wall time does not).
    """

    name: str
    model: Any
    accuracy: float  # on the test split, in [0, 1]
    wall_s: float
    cpu_s: float
    n_params: int
    steps: int = 0
    history: History | None = None

    def summary(self) -> str:
        """One line: name, test accuracy, parameters, wall and CPU time."""
        return (
            f"{self.name:<22} test accuracy {100 * self.accuracy:6.2f}%  "
            f"{self.n_params:>9,} parameters  {self.wall_s:6.1f} s wall  "
            f"{self.cpu_s:6.1f} s CPU"
        )


def accuracy(
    model: nn.Module,
    x: Tensor,
    y: Tensor,
    *,
    batch_size: int = 1024,
    autocast_dtype: torch.dtype | None = None,
) -> float:
    """Fraction of ``x`` (N, C, H, W) that ``model`` classifies as ``y`` (N,), in eval mode."""
    logits = run_model(model, x, batch_size=batch_size, autocast_dtype=autocast_dtype)
    return int((logits.argmax(dim=-1) == y).sum()) / len(x)


@torch.no_grad()
def run_model(
    model: nn.Module,
    images: Tensor,
    *,
    forward: Any = None,
    batch_size: int = 500,
    autocast_dtype: torch.dtype | None = None,
) -> Tensor:
    """Run ``model`` (or ``forward(model, batch)``) on ``images`` (N, C, H, W) in eval mode,
    in batches on the model's device (under autocast to ``autocast_dtype`` when given);
    returns the logits (N, K) on the CPU in float32.
    """
    device = devices.model_device(model)
    logits = []
    with eval_mode(model):
        for i in range(0, len(images), batch_size):
            xb = images[i : i + batch_size].to(device)
            with devices.autocast(device, autocast_dtype):
                out = forward(model, xb) if forward is not None else model(xb)
            logits.append(out.float().cpu())
    if not logits:
        raise ValueError("run_model got no images")
    return torch.cat(logits)


def run_model_with_attention(
    model: nn.Module, images: Tensor, *, batch_size: int = 500
) -> tuple[Tensor, list[Tensor]]:
    """:func:`run_model` while recording attention: ``(logits (N, K), weights)`` where
    ``weights`` has one (N, H, L, L) tensor per layer (a :class:`ViT`'s attention maps)."""
    batches: list[list[Tensor]] = []

    def forward(net: nn.Module, xb: Tensor) -> Tensor:
        with record_attention(net) as maps:
            out = net(xb)
        batches.append([w.float().cpu() for w in maps])
        return out

    logits = run_model(model, images, forward=forward, batch_size=batch_size)
    return logits, [torch.cat(per_layer) for per_layer in zip(*batches, strict=True)]


LONG_RUN_STEPS = 10_000  # runs this long print their expected time first


def long_run_notice(name: str, steps: int, epochs: int, device: torch.device) -> str:
    """The line printed before a long run: its length and the gpu profile's time estimate for
    notebook 09 (``course_utils.gpu_plan``); the progress bar then shows the measured rate."""
    from course_utils import gpu_plan

    est = gpu_plan.estimates()["09"].minutes
    return (
        f"{name}: {steps:,} optimizer steps ({epochs} epochs) on {device}; expected about "
        f"{est:g} min on {gpu_plan.REFERENCE} (an estimate; the bar below shows the real rate), "
        "much longer on a CPU"
    )


class WeightAverage:
    """An exponential moving average of a model's weights (its buffers copied as they are),
    updated by ``train``'s step hook after every optimizer step; the average is the model kept.
    """

    def __init__(self, model: nn.Module, decay: float):
        self.decay = decay
        self.source = model
        self.model = copy.deepcopy(model)

    def __call__(self, step: int, net: nn.Module) -> None:
        """The step hook: ``average <- decay * average + (1 - decay) * weights``."""
        with torch.no_grad():
            pairs = zip(self.model.parameters(), self.source.parameters(), strict=True)
            for a, p in pairs:
                a.lerp_(p, 1.0 - self.decay)
            for a, b in zip(self.model.buffers(), self.source.buffers(), strict=True):
                a.copy_(b)


def shuffled_batches(
    data: ImageSplit, tc: TrainConfig, gen: torch.Generator, device: torch.device
) -> Callable[[int], tuple[Tensor, Tensor]]:
    """``step -> (images, labels)``: epochs of shuffled mini-batches of ``tc.batch_size``
    training images (a new permutation each epoch), each batch augmented by ``tc.augment``."""
    x_train, y_train = data.x_train.to(device), data.y_train.to(device)
    n = len(x_train)
    per_epoch = math.ceil(n / tc.batch_size)
    order: dict[str, Tensor] = {}

    def batch(step: int) -> tuple[Tensor, Tensor]:
        epoch, i = divmod(step, per_epoch)
        if i == 0 or "perm" not in order:  # a new shuffle every epoch
            order["perm"] = torch.randperm(n, generator=gen).to(device)
        idx = order["perm"][i * tc.batch_size : (i + 1) * tc.batch_size]
        return augment_batch(x_train[idx], tc.augment, gen), y_train[idx]

    return batch


def _fit(
    name: str,
    model: nn.Module,
    data: ImageSplit,
    tc: TrainConfig,
    *,
    seed: int,
    device: torch.device | str | None,
    progress: bool | str,
) -> ImageRun:
    """Train ``model`` on ``data`` with ``tc``: epochs of shuffled, augmented mini-batches."""
    device = torch.device(device) if device is not None else current().device
    model.to(device)
    gen = torch.Generator().manual_seed(seed)
    batch = shuffled_batches(data, tc, gen, device)
    per_epoch = math.ceil(len(data.x_train) / tc.batch_size)
    steps = tc.epochs * per_epoch
    ema = WeightAverage(model, tc.ema) if tc.ema else None
    average = ema.model if ema is not None else None

    def loss_fn(net: nn.Module, b: tuple[Tensor, Tensor]) -> Tensor:
        return F.cross_entropy(net(b[0]), b[1], label_smoothing=tc.label_smoothing)

    def evaluate(net: nn.Module) -> dict[str, float]:
        net = average if average is not None else net
        return {
            "test accuracy": accuracy(
                net, data.x_test, data.y_test, autocast_dtype=tc.autocast_dtype
            )
        }

    if steps >= LONG_RUN_STEPS:  # the CIFAR-10 recipe: say how long before starting
        print(long_run_notice(name, steps, tc.epochs, device), flush=True)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    history = train(
        model,
        batch,
        steps=steps,
        lr=tc.lr,
        min_lr=tc.min_lr,
        loss_fn=loss_fn,
        warmup=round(tc.warmup_epochs * per_epoch),
        schedule="cosine",
        weight_decay=tc.weight_decay,
        grad_clip=tc.grad_clip,
        eval_fn=evaluate,
        eval_every=tc.eval_every_epochs * per_epoch,
        log_every=per_epoch,
        seed=seed,
        autocast_dtype=tc.autocast_dtype,
        on_step=ema,
        progress=progress,
        desc=f"training {name}",
    )
    if average is not None:  # the average (with the last step) is the model we keep
        history.eval["test accuracy"][-1] = evaluate(average)["test accuracy"]
        model = average.eval()
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    return ImageRun(
        name=name,
        model=model,
        accuracy=history.last("test accuracy"),
        wall_s=wall,
        cpu_s=cpu,
        n_params=sum(p.numel() for p in model.parameters()),
        steps=steps,
        history=history,
    )


def train_vit(
    cfg: Config | None = None,
    data: ImageSplit | None = None,
    *,
    seed: int = 0,
    vit: ViTConfig | None = None,
    train_cfg: TrainConfig | None = None,
    device: torch.device | str | None = None,
    progress: bool | str = "auto",
    name: str = "ViT",
    xavier_init: bool = True,
) -> ImageRun:
    """Train a course :class:`ViT` (its own Xavier init, :meth:`ViT.reset_parameters`) on ``data``.

    ``cfg`` defaults to :func:`config`, ``data`` to :func:`load_images`; ``vit`` and
    ``train_cfg`` override the config's parts; ``xavier_init=False`` uses timm's initialisation
    instead (``ViTConfig(init="timm")``: every weight from N(0, 0.02^2)). Deterministic for a given ``seed`` on the
    CPU; the model starts as :func:`initial_vit` with the same arguments. Returns an
    :class:`ImageRun` (accuracy on ``data.x_test``).
    """
    cfg = cfg or config()
    data = data if data is not None else load_images(cfg)
    model = initial_vit(vit or cfg.vit, seed=seed, xavier_init=xavier_init)
    return _fit(
        name, model, data, train_cfg or cfg.train, seed=seed, device=device, progress=progress
    )


def initial_vit(vit: ViTConfig, *, seed: int = 0, xavier_init: bool = True) -> ViT:
    """The untrained ViT that :func:`train_vit` starts from for this ``seed``."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return ViT(vit if xavier_init else replace(vit, init="timm"))


def train_vit_digits(
    cfg: Config | None = None, *, seed: int = 0, split_seed: int = 0, progress: bool | str = "auto"
) -> ImageRun:
    """The tuned digits run: :func:`train_vit` on ``load_digits_split(split_seed)``.

    ``cfg`` defaults to the active profile's digits recipe (``config(dataset="digits")``).
    """
    cfg = cfg or config(dataset="digits")
    return train_vit(cfg, load_digits_split(seed=split_seed), seed=seed, progress=progress)


class SmallCNN(nn.Module):
    """The CNN baseline: images (B, C, H, W) -> logits (B, num_classes).

    conv3x3(C, w) -> ReLU -> conv3x3(w, 2w) -> ReLU -> maxpool 2 -> conv3x3(2w, 2w) -> ReLU ->
    global average pool -> Linear(2w, num_classes), with ``w = d_model`` channels. Locality
    and translation equivariance are built in: the priors a ViT has to learn from data.
    """

    def __init__(self, in_channels: int = 1, num_classes: int = 10, d_model: int = 32):
        super().__init__()
        w = d_model
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, w, 3, padding=1),
            nn.BatchNorm2d(w),
            nn.ReLU(),
            nn.Conv2d(w, 2 * w, 3, padding=1),
            nn.BatchNorm2d(2 * w),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(2 * w, 2 * w, 3, padding=1),
            nn.BatchNorm2d(2 * w),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        self.head = nn.Linear(2 * w, num_classes)

    def forward(self, images: Tensor) -> Tensor:
        """images (B, C, H, W) -> logits (B, num_classes)."""
        return self.head(self.features(images))


def train_small_cnn(
    data: ImageSplit | None = None,
    cnn: CNNConfig | None = None,
    *,
    seed: int = 0,
    device: torch.device | str | None = None,
    progress: bool | str = "auto",
) -> ImageRun:
    """Train the :class:`SmallCNN` baseline (``cnn`` defaults to ``config().cnn``)."""
    cnn = cnn or config().cnn
    data = data if data is not None else load_digits_split(seed=0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = SmallCNN(data.x_train.shape[1], len(data.classes), cnn.d_model)
    return _fit("small CNN", model, data, cnn.train, seed=seed, device=device, progress=progress)


def fit_svc(
    data: ImageSplit | None = None,
    *,
    gamma: float | str = 0.256,
    C: float = 1.0,
    max_train: int | None = None,
    seed: int = 0,
) -> ImageRun:
    """An RBF support-vector classifier on the raw pixels (scikit-learn's ``SVC``).

    The defaults are the classic digits setting (``gamma=0.001`` on pixel values 0..16, i.e.
    0.256 on [0, 1]). ``max_train``: fit on a random subset (an SVC's cost grows with the
    square of the training set: CIFAR-10's 50,000 images would take hours).
    """
    from sklearn.svm import SVC

    data = data if data is not None else load_digits_split(seed=0)
    x, y = data.x_train, data.y_train
    if max_train is not None and len(x) > max_train:
        idx = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))[:max_train]
        x, y = x[idx], y[idx]
    cpu0, wall0 = time.process_time(), time.perf_counter()
    model = SVC(gamma=gamma, C=C).fit(x.reshape(len(x), -1).numpy(), y.numpy())
    acc = float(model.score(data.x_test.reshape(len(data.x_test), -1).numpy(), data.y_test.numpy()))
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    return ImageRun(
        name="SVC (RBF kernel)",
        model=model,
        accuracy=acc,
        wall_s=wall,
        cpu_s=cpu,
        n_params=int(model.support_vectors_.size + model.dual_coef_.size),
    )


def train_vit_spectrograms(
    cfg: SpectrogramConfig | None = None,
    data: ImageSplit | None = None,
    *,
    seed: int = 0,
    progress: bool | str = "auto",
    device: torch.device | str | None = None,
) -> ImageRun:
    """The same ViT (blocks, patches, class token) on spectrogram patches."""
    cfg = cfg or config().spectrogram
    data = data if data is not None else spectrogram_split(cfg, seed=seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = ViT(cfg.vit)
    return _fit(
        "ViT on spectrograms", model, data, cfg.train, seed=seed, device=device, progress=progress
    )
