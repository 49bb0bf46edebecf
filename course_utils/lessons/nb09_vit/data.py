"""Lesson 09's images: the data set a :class:`~course_utils.lessons.nb09_vit.sizes.Config`
trains on, its random affine augmentation, and the synthetic audio-like spectrograms of the
second-modality demo.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from course_utils.data.images import (
    CIFAR10_MEAN,
    CIFAR10_STD,
    ImageSplit,
    augment_crop_flip,
    load_cifar10,
    load_digits_split,
    load_mnist,
)
from course_utils.lessons.nb09_vit.sizes import (
    SPECTROGRAM_CLASSES,
    Augment,
    Config,
    SpectrogramConfig,
    config,
)


def load_images(cfg: Config | None = None) -> ImageSplit:
    """The data set ``cfg`` trains on, as float images (the first ``cfg.n_train`` and
    ``cfg.n_test`` images when those are set).

    digits: x (N, 1, 8, 8) in [0, 1] (stratified 80/20 split, seed 0). MNIST: x (N, 1, 28, 28)
    in [0, 1], its own train/test split. CIFAR-10: x (N, 3, 32, 32) standardised per channel.
    MNIST and CIFAR-10 come from the cache (a FileNotFoundError saying how to get them
    otherwise).
    """
    cfg = cfg or config()
    if cfg.dataset == "digits":
        split = load_digits_split(seed=0)
    elif cfg.dataset == "mnist":
        raw = load_mnist()
        split = ImageSplit(
            raw.x_train.float() / 255.0,
            raw.y_train,
            raw.x_test.float() / 255.0,
            raw.y_test,
            raw.classes,
        )
    else:
        raw = load_cifar10()
        mean = torch.tensor(CIFAR10_MEAN).view(1, 3, 1, 1)
        std = torch.tensor(CIFAR10_STD).view(1, 3, 1, 1)

        def prep(x: Tensor) -> Tensor:
            return (x.float() / 255.0 - mean) / std

        split = ImageSplit(
            prep(raw.x_train), raw.y_train, prep(raw.x_test), raw.y_test, raw.classes
        )
    tr, te = slice(cfg.n_train), slice(cfg.n_test)
    return ImageSplit(
        split.x_train[tr], split.y_train[tr], split.x_test[te], split.y_test[te], split.classes
    )


def dataset_description(cfg: Config, data: ImageSplit) -> str:
    """One sentence (markdown) on the data set in use, from ``data`` itself."""
    C, H, W = data.x_train.shape[1:]
    n_tr, n_te = len(data.x_train), len(data.x_test)
    p = cfg.vit.patch_size
    gh, gw = cfg.vit.grid_size
    names = {
        "digits": "scikit-learn's handwritten digits, split 80/20 with every digit keeping its "
        "share in both halves (stratified)",
        "mnist": "MNIST handwritten digits from the data cache",
        "cifar10": "CIFAR-10 colour photos from the data cache",
    }
    kind = "grey" if C == 1 else "colour"
    return (
        f"Our images are {names[cfg.dataset]}: {n_tr:,} training and {n_te:,} test {kind} "
        f"images of ${H} \\times {W}$ pixels, so one test error costs "
        f"{100 / n_te:.2g} points of accuracy. With $p = {p}$ an image becomes a "
        f"${gh} \\times {gw}$ grid of $N = {gh * gw}$ patches of "
        f"$C p^2 = {C * p * p}$ numbers each."
    )


def augment_affine(
    x: Tensor,
    generator: torch.Generator | None = None,
    *,
    rotate: float = 10.0,
    zoom: float = 0.1,
    shift: float = 0.5,
) -> Tensor:
    """A random small affine map per image: (B, C, H, W) -> (B, C, H, W).

    Rotation uniform in +-``rotate`` degrees, scale in 1 +- ``zoom``, translation in +-``shift``
    pixels; bilinear sampling, zeros outside the image. ``generator`` lives on the CPU.
    """
    if x.dim() != 4:
        raise ValueError(f"expected images (B, C, H, W), got {tuple(x.shape)}")
    B, _, H, W = x.shape

    def uniform(*shape: int) -> Tensor:
        return torch.rand(*shape, generator=generator) * 2 - 1  # U(-1, 1)

    angle = uniform(B) * math.radians(rotate)
    scale = 1 + uniform(B) * zoom
    move = uniform(B, 2) * shift * 2 / torch.tensor([W, H])  # pixels -> [-1, 1] units
    cos, sin = torch.cos(angle) / scale, torch.sin(angle) / scale
    theta = torch.stack(
        [torch.stack([cos, -sin, move[:, 0]], -1), torch.stack([sin, cos, move[:, 1]], -1)], 1
    )  # (B, 2, 3)
    grid = F.affine_grid(theta.to(x.device, x.dtype), list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


def augment_batch(x: Tensor, aug: Augment, generator: torch.Generator) -> Tensor:
    """Apply the training augmentation ``aug`` to a batch (B, C, H, W) -> (B, C, H, W).

    ``generator`` is a CPU generator (CIFAR's crop-and-flip on a GPU draws from the device's
    default generator instead).
    """
    gen = generator
    if aug.kind == "affine":
        return augment_affine(x, gen, rotate=aug.rotate, zoom=aug.zoom, shift=aug.shift)
    if aug.kind == "crop_flip":
        dev_gen = gen if x.device.type == "cpu" else None
        return augment_crop_flip(x, aug.pad, dev_gen)
    if aug.kind == "none":
        return x
    raise ValueError(f"expected augment kind 'affine', 'crop_flip' or 'none', got {aug.kind!r}")


def make_spectrograms(
    n: int, *, n_freq: int = 16, n_time: int = 24, noise: float = 0.25, seed: int = 0
) -> tuple[Tensor, Tensor]:
    """Audio-like magnitude spectrograms of six kinds of sound, with noise.

    Returns x (n, 1, n_freq, n_time) float (row 0 = the lowest frequency) and y (n,) long, an
    index into :data:`SPECTROGRAM_CLASSES`: a steady tone, a rising or a falling chirp (a line
    whose frequency changes over time), two simultaneous tones, a pulsed tone (on-off), a click
    train (broadband vertical lines). Frequencies, slopes, onsets, widths, loudness and pulse
    rates are random, so only the *pattern* tells the classes apart -- and the chirps differ
    only in the order of their frames: a model without positions cannot separate them.
    """
    g = torch.Generator().manual_seed(seed)
    F_, T = n_freq, n_time

    def u(lo: float, hi: float, *shape: int) -> Tensor:
        return lo + (hi - lo) * torch.rand(*(shape or (n,)), generator=g)

    y = torch.randint(0, len(SPECTROGRAM_CLASSES), (n,), generator=g)
    f = torch.arange(F_, dtype=torch.float32).view(1, F_, 1)  # (1, F, 1)
    t = torch.arange(T, dtype=torch.float32).view(1, 1, T)  # (1, 1, T)
    onset = u(0, T * 0.25).floor()
    length = u(T * 0.55, T * 0.75).floor()
    on = ((t >= onset.view(-1, 1, 1)) & (t < (onset + length).view(-1, 1, 1))).float()
    width = u(0.6, 1.0).view(-1, 1, 1)
    f0 = u(2, F_ - 3).view(-1, 1, 1)
    slope = u(0.35, 0.6).view(-1, 1, 1) * (F_ - 6) / (T * 0.65)
    lo_start = u(1, 4).view(-1, 1, 1)  # chirps start near an edge and sweep across
    rel_t = (t - onset.view(-1, 1, 1)).clamp(min=0)
    rising = lo_start + slope * rel_t
    falling = (F_ - 1 - lo_start) - slope * rel_t
    gap = u(3, 6).view(-1, 1, 1)
    f_second = torch.where(f0 + gap <= F_ - 2, f0 + gap, f0 - gap)
    period = torch.randint(4, 7, (n,), generator=g).view(-1, 1, 1).float()
    pulses = (((t - onset.view(-1, 1, 1)) % period) < period / 2).float()

    def line(freq: Tensor) -> Tensor:  # a Gaussian ridge around freq(t): (n, F, T)
        return torch.exp(-0.5 * ((f - freq) / width) ** 2)

    clicks = (((t - onset.view(-1, 1, 1)) % period) < 1).float() * torch.ones(n, F_, T)
    clicks = clicks * torch.exp(-0.5 * ((f - f0) / u(3, 6).view(-1, 1, 1)) ** 2).clamp(min=0.3)
    shapes = torch.stack(
        [
            line(f0).expand(n, F_, T),
            line(rising),
            line(falling),
            torch.maximum(line(f0).expand(n, F_, T), line(f_second).expand(n, F_, T)),
            line(f0).expand(n, F_, T) * pulses,
            clicks,
        ],
        dim=1,
    )  # (n, 6, F, T)
    signal = shapes[torch.arange(n), y] * on * u(0.7, 1.2).view(-1, 1, 1)
    background = noise * torch.randn(n, F_, T, generator=g).abs()
    return (signal + background).unsqueeze(1), y


def spectrogram_split(cfg: SpectrogramConfig | None = None, *, seed: int = 0) -> ImageSplit:
    """Train and test spectrograms (independent draws) as an :class:`ImageSplit`."""
    cfg = cfg or config().spectrogram
    kw = {"n_freq": cfg.n_freq, "n_time": cfg.n_time, "noise": cfg.noise}
    x_tr, y_tr = make_spectrograms(cfg.n_train, seed=seed, **kw)
    x_te, y_te = make_spectrograms(cfg.n_test, seed=seed + 10_000, **kw)
    return ImageSplit(x_tr, y_tr, x_te, y_te, list(SPECTROGRAM_CLASSES))
