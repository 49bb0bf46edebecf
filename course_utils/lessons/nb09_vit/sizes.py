"""Lesson 09's sizes and settings per profile: one :class:`Config` per profile and data set
(the ViT, its training schedule and augmentation, the CNN and SVC baselines, the spectrogram
demo), the quality bars, and what the ``gpu`` profile runs (:func:`gpu_summary`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from course_utils.data.images import (
    find_cifar10,
    find_mnist,
)
from course_utils.modeling.models.vit import ViTConfig
from course_utils.runtime.profiles import ProfileTable, current

DATASETS = ("digits", "mnist", "cifar10")
# the classes of the synthetic spectrograms (data.make_spectrograms), one sound each
SPECTROGRAM_CLASSES = [
    "steady tone",
    "rising chirp",
    "falling chirp",
    "two tones",
    "pulsed tone",
    "click train",
]


# --------------------------------------------------------------------------------------------
# Configs
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Augment:
    """Training-time augmentation.

    ``kind="affine"``: a random affine map per image, rotation in +-``rotate`` degrees, zoom in
    1 +- ``zoom``, shift in +-``shift`` pixels (bilinear, zeros outside) -- for digits.
    ``kind="crop_flip"``: random crop after ``pad`` pixels of zero padding and a random
    horizontal flip -- for CIFAR-10. ``kind="none"``: the images as they are.
    """

    kind: str = "affine"
    rotate: float = 10.0
    zoom: float = 0.1
    shift: float = 0.5
    pad: int = 4


@dataclass(frozen=True)
class TrainConfig:
    """How to train one classifier (AdamW, linear warmup then cosine decay)."""

    epochs: int
    batch_size: int
    lr: float  # peak learning rate
    min_lr: float  # at the end of the cosine
    warmup_epochs: float
    weight_decay: float  # on matrices only
    label_smoothing: float = 0.0
    augment: Augment = field(default_factory=Augment)
    grad_clip: float | None = 1.0
    ema: float | None = None  # keep an exponential moving average of the weights (decay/step)
    eval_every_epochs: int = 10  # test accuracy during training (and always at the end)
    autocast_dtype: torch.dtype | None = None  # torch.bfloat16 on a GPU


@dataclass(frozen=True)
class CNNConfig:
    """The small CNN baseline: three 3x3 conv layers of ``d_model``, ``2*d_model``,
    ``2*d_model`` channels (a 2x2 max-pool after the second), global average pooling, a linear
    head. (``d_model``, the course's name for a model's width, counts channels here.)"""

    d_model: int
    train: TrainConfig


@dataclass(frozen=True)
class SpectrogramConfig:
    """The second-modality demo: generated spectrograms (frequency x time) and their ViT."""

    n_train: int
    n_test: int
    n_freq: int
    n_time: int
    noise: float  # standard deviation of the background noise (signal peaks are about 1)
    vit: ViTConfig
    train: TrainConfig


@dataclass(frozen=True)
class Config:
    """Everything notebook 09 sizes by profile."""

    profile: str
    dataset: str  # "digits", "mnist" or "cifar10"
    vit: ViTConfig
    train: TrainConfig
    cnn: CNNConfig
    svc: dict[str, Any]  # keyword arguments of fit_svc
    spectrogram: SpectrogramConfig
    seed: int = 0
    n_train: int | None = None  # train on the first n_train images only (None: all)
    n_test: int | None = None  # test on the first n_test images only (None: all)


# The quality bars: the cpu recipe on digits (stratified 80/20), the gpu recipe on CIFAR-10
CPU_ACC_BAR, CPU_SECONDS_BAR = 0.98, 30.0  # test accuracy, within this wall time on 2 cores
GPU_CIFAR10_ACC_BAR = 0.85  # test accuracy, from scratch

_DIGITS_AUG = Augment(kind="affine", rotate=10.0, zoom=0.1, shift=0.5)
_NO_AUG = Augment(kind="none")


@dataclass(frozen=True)
class Sizes:
    """What notebook 09 sizes by profile (one row of :data:`SIZES`). The CIFAR-10 recipe is the
    same in every profile (it is meant for a GPU); the rest of :class:`Config` is fixed."""

    digits_layers: int  # the digits ViT's depth
    digits_train: TrainConfig  # how the digits ViT trains
    digits_cnn_epochs: int
    mnist_d_model: int  # the MNIST ViT's width ...
    mnist_layers: int  # ... depth
    mnist_d_ff: int  # ... and feed-forward width
    mnist_epochs: int
    mnist_cnn_epochs: int
    mnist_n_train: int | None  # the first n MNIST training images (None: all 60,000)
    mnist_n_test: int | None  # the first n test images (None: all 10,000)
    mnist_autocast: torch.dtype | None
    spectrogram_n_train: int
    spectrogram_epochs: int
    spectrogram_batch: int


SIZES = ProfileTable(
    ci=Sizes(
        digits_layers=2,
        # seconds on 2 cores, >= 93%: too short a run for augmentation to pay off
        digits_train=TrainConfig(
            epochs=6,
            batch_size=64,
            lr=3e-3,
            min_lr=3e-5,
            warmup_epochs=0.5,
            weight_decay=0.1,
            augment=_NO_AUG,
            eval_every_epochs=3,
        ),
        digits_cnn_epochs=3,
        mnist_d_model=64,
        mnist_layers=2,
        mnist_d_ff=128,
        mnist_epochs=10,
        mnist_cnn_epochs=5,
        mnist_n_train=12_000,
        mnist_n_test=2_000,
        mnist_autocast=None,
        spectrogram_n_train=450,
        spectrogram_epochs=12,
        spectrogram_batch=32,
    ),
    cpu=Sizes(
        digits_layers=2,
        # the quality bar: CPU_ACC_BAR in CPU_SECONDS_BAR on 2 cores (see the module docstring)
        digits_train=TrainConfig(
            epochs=30,
            batch_size=64,
            lr=3e-3,
            min_lr=3e-5,
            warmup_epochs=1.5,
            weight_decay=0.1,
            augment=_DIGITS_AUG,
            eval_every_epochs=10,
        ),
        digits_cnn_epochs=15,
        mnist_d_model=64,
        mnist_layers=2,
        mnist_d_ff=128,
        mnist_epochs=10,
        mnist_cnn_epochs=5,
        mnist_n_train=12_000,
        mnist_n_test=2_000,
        mnist_autocast=None,
        spectrogram_n_train=1500,
        spectrogram_epochs=15,
        spectrogram_batch=64,
    ),
    gpu=Sizes(
        digits_layers=4,
        # digits on a GPU (when CIFAR-10 is absent): bigger and longer, still seconds
        digits_train=TrainConfig(
            epochs=60,
            batch_size=128,
            lr=2e-3,
            min_lr=2e-5,
            warmup_epochs=3,
            weight_decay=0.1,
            augment=_DIGITS_AUG,
            eval_every_epochs=20,
        ),
        digits_cnn_epochs=30,
        mnist_d_model=128,
        mnist_layers=6,
        mnist_d_ff=256,
        mnist_epochs=30,
        mnist_cnn_epochs=15,
        mnist_n_train=None,
        mnist_n_test=None,
        mnist_autocast=torch.bfloat16,
        spectrogram_n_train=3000,
        spectrogram_epochs=30,
        spectrogram_batch=64,
    ),
)


def _digits_vit(profile: str) -> ViTConfig:
    """8x8 digits in 2x2 patches: 16 patch tokens and a class token."""
    return ViTConfig(
        image_size=8,
        patch_size=2,
        in_channels=1,
        num_classes=10,
        d_model=64,
        n_layers=SIZES.for_profile(profile).digits_layers,
        n_heads=4,
        d_ff=128,
        pool="cls",
        activation="gelu",
    )


def _spectrogram(profile: str) -> SpectrogramConfig:
    """16 frequency bins x 24 frames in 4x4 patches: 24 tokens and a class token."""
    return SpectrogramConfig(
        n_train=SIZES.for_profile(profile).spectrogram_n_train,
        n_test=600,
        n_freq=16,
        n_time=24,
        noise=0.25,
        vit=ViTConfig(
            image_size=(16, 24),
            patch_size=4,
            in_channels=1,
            num_classes=len(SPECTROGRAM_CLASSES),
            d_model=48,
            n_layers=2,
            n_heads=4,
            d_ff=96,
            pool="cls",
        ),
        train=TrainConfig(
            epochs=SIZES.for_profile(profile).spectrogram_epochs,
            batch_size=SIZES.for_profile(profile).spectrogram_batch,
            lr=3e-3,
            min_lr=3e-5,
            warmup_epochs=0.5,
            weight_decay=0.1,
            augment=Augment(kind="none"),
            eval_every_epochs=100,
        ),
    )


# The data sets each profile tries, in order: the first one in the cache is used (digits ships
# with scikit-learn, so it is always there)
DATASET_PREFERENCE = ProfileTable(
    ci=("digits",),
    cpu=("mnist", "digits"),
    gpu=("cifar10", "mnist", "digits"),
)


def default_dataset(profile: str) -> str:
    """The data set a profile uses when none is named (:data:`DATASET_PREFERENCE`): ``ci``
    always trains on digits (no data files needed); ``cpu`` on MNIST when it is in the cache;
    ``gpu`` on CIFAR-10, else MNIST, when cached; digits otherwise. Nothing is downloaded."""
    for dataset in DATASET_PREFERENCE.for_profile(profile):
        found = {"cifar10": find_cifar10, "mnist": find_mnist}.get(dataset)
        if found is None or found() is not None:
            return dataset
    raise AssertionError(f"no data set for profile {profile!r}")  # digits is always last


def config(profile: str | None = None, dataset: str | None = None) -> Config:
    """The recipe of the active profile (or of ``profile``: "ci", "cpu" or "gpu").

    ``dataset`` ("digits", "mnist" or "cifar10") defaults to :func:`default_dataset`: real
    images when they are in the cache (:func:`course_utils.data.images.find_mnist`,
    :func:`~course_utils.data.images.find_cifar10`), scikit-learn's 8x8 digits otherwise.
    """
    name = profile or current().name
    if name not in ("ci", "cpu", "gpu"):
        raise ValueError(f"expected profile 'ci', 'cpu' or 'gpu', got {name!r}")
    if dataset is None:
        dataset = default_dataset(name)
    if dataset not in DATASETS:
        raise ValueError(f"expected dataset 'digits', 'mnist' or 'cifar10', got {dataset!r}")
    if dataset == "cifar10":
        return _cifar10_config(name)
    if dataset == "mnist":
        return _mnist_config(name)

    sizes = SIZES.for_profile(name)
    cnn = CNNConfig(
        d_model=32,
        train=TrainConfig(
            epochs=sizes.digits_cnn_epochs,
            batch_size=64,
            lr=3e-3,
            min_lr=3e-5,
            warmup_epochs=0.5,
            weight_decay=0.01,
            augment=_DIGITS_AUG,
            eval_every_epochs=100,
        ),
    )
    return Config(
        profile=name,
        dataset="digits",
        vit=_digits_vit(name),
        train=sizes.digits_train,
        cnn=cnn,
        svc={"gamma": 0.256, "C": 1.0},
        spectrogram=_spectrogram(name),
    )


def _mnist_config(name: str) -> Config:
    """MNIST from the cache: 28x28 digits in 4x4 patches, a 7x7 grid of 49 tokens.

    The cpu profile trains on the first 12,000 training images for a run of minutes on a
    laptop CPU (not measured on the machine the course was built on, which has no MNIST).
    """
    aug = Augment(kind="affine", rotate=10.0, zoom=0.1, shift=1.0)
    sizes = SIZES.for_profile(name)
    vit = ViTConfig(
        image_size=28,
        patch_size=4,
        in_channels=1,
        num_classes=10,
        d_model=sizes.mnist_d_model,
        n_layers=sizes.mnist_layers,
        n_heads=4,
        d_ff=sizes.mnist_d_ff,
        pool="cls",
        activation="gelu",
    )

    def schedule(epochs: int, weight_decay: float) -> TrainConfig:
        return TrainConfig(
            epochs=epochs,
            batch_size=128,
            lr=2e-3,
            min_lr=2e-5,
            warmup_epochs=1,
            weight_decay=weight_decay,
            augment=aug,
            eval_every_epochs=5,
            autocast_dtype=sizes.mnist_autocast,
        )

    return Config(
        profile=name,
        dataset="mnist",
        vit=vit,
        train=schedule(sizes.mnist_epochs, 0.1),
        cnn=CNNConfig(d_model=32, train=schedule(sizes.mnist_cnn_epochs, 0.01)),
        svc={"gamma": "scale", "C": 10.0, "max_train": 5000},
        spectrogram=_spectrogram(name),
        n_train=sizes.mnist_n_train,
        n_test=sizes.mnist_n_test,
    )


def _cifar10_config(name: str) -> Config:
    """CIFAR-10 from scratch, for a GPU (not verified on the machine the course was built on).

    A ViT-Lite-7/4-sized model (Hassani et al. 2021: 7 layers, 256 wide, patches of 4 -> 64
    tokens + class token) with crop-and-flip augmentation, label smoothing and 200 epochs, the
    regime in which small ViTs trained from scratch reach the mid-to-high 80s on CIFAR-10.
    """
    crop_flip = Augment(kind="crop_flip", pad=4)
    vit = ViTConfig(
        image_size=32,
        patch_size=4,
        in_channels=3,
        num_classes=10,
        d_model=256,
        n_layers=7,
        n_heads=4,
        d_ff=512,
        pool="cls",
        dropout=0.0,
    )
    train_cfg = TrainConfig(
        epochs=200,
        batch_size=256,
        lr=1e-3,
        min_lr=1e-5,
        warmup_epochs=10,
        weight_decay=0.05,
        label_smoothing=0.1,
        augment=crop_flip,
        eval_every_epochs=10,
        autocast_dtype=torch.bfloat16,
    )
    cnn = CNNConfig(
        d_model=64,
        train=TrainConfig(
            epochs=40,
            batch_size=256,
            lr=2e-3,
            min_lr=2e-5,
            warmup_epochs=2,
            weight_decay=0.05,
            label_smoothing=0.1,
            augment=crop_flip,
            eval_every_epochs=10,
            autocast_dtype=torch.bfloat16,
        ),
    )
    return Config(
        profile=name,
        dataset="cifar10",
        vit=vit,
        train=train_cfg,
        cnn=cnn,
        svc={"gamma": "scale", "C": 10.0, "max_train": 5000},
        spectrogram=_spectrogram(name),
    )


def gpu_summary() -> str:
    """What this notebook runs in the ``gpu`` profile, in words, from the gpu row of its table
    (``course doctor`` prints it beside the estimate)."""

    names = {"cifar10": "CIFAR-10", "mnist": "MNIST", "digits": "digits"}
    runs = [
        f"{names[d]} ({config('gpu', dataset=d).train.epochs} epochs)"
        for d in DATASET_PREFERENCE.gpu
    ]
    return "ViT on " + " when cached, else ".join(runs)
