"""Notebook 09 (the Vision Transformer): sizes per profile, training, baselines, pictures' maths.

    cfg = config()                                  # the active profile's recipe
    data = load_images(cfg)                         # digits, or MNIST / CIFAR-10 from the cache
    vit = train_vit(cfg, data)                      # an ImageRun: model, accuracy, wall and CPU time
    cnn = train_small_cnn(data, cfg.cnn)            # the baselines, trained beside it
    svc = fit_svc(data, **cfg.svc)

``train_vit_digits(cfg)`` is the tuned digits run on its own (what ``course bench vit`` calls).

The ``cpu`` recipe meets the course's bar, digits (stratified 80/20) test accuracy >= 98% in
<= 30 s on a 2-core CPU, with three things that matter on 1,437 training images of 8x8 pixels
(each measured in the notebook's closing note):

* **initialisation**: Xavier-uniform linear layers (the original ViT's), not the tiny
  ``std=0.02`` normal that large ViTs use -- at this scale it trains several times faster;
* **augmentation**: a small random affine map per image (rotation, zoom, sub-pixel shift,
  bilinear), the prior a CNN has built in and a ViT must be shown;
* **schedule**: AdamW at a high peak rate (3e-3) with a short warmup and cosine decay,
  weight decay 0.1.

The second-modality demo (section 7 of the notebook) generates audio-like spectrograms
(:func:`make_spectrograms`) and trains the same ViT on them; :func:`attention_rollout` and
:func:`position_similarity` are the maths behind two of the notebook's pictures.

The lesson's one entry point (``from course_utils.lessons.nb09_vit import recipe as nb09``):
the pieces live beside it, one layer each --

- :mod:`.sizes`: the configs and the per-profile tables (``config()``, the quality bars,
  ``gpu_summary()``);
- :mod:`.data`: the images, their augmentation and the synthetic spectrograms;
- :mod:`.train`: the ViT's training run and the CNN and SVC baselines;
- :mod:`.analysis`: attention rollout and position-embedding similarity.
"""

from __future__ import annotations

from course_utils.lessons.nb09_vit.analysis import (
    attention_rollout,
    grid_distance,
    position_distance_correlation,
    position_similarity,
    similarity_by_distance,
)
from course_utils.lessons.nb09_vit.data import (
    augment_affine,
    augment_batch,
    dataset_description,
    load_images,
    make_spectrograms,
    spectrogram_split,
)
from course_utils.lessons.nb09_vit.sizes import (
    CPU_ACC_BAR,
    CPU_SECONDS_BAR,
    DATASET_PREFERENCE,
    DATASETS,
    GPU_CIFAR10_ACC_BAR,
    SIZES,
    SPECTROGRAM_CLASSES,
    Augment,
    CNNConfig,
    Config,
    Sizes,
    SpectrogramConfig,
    TrainConfig,
    config,
    default_dataset,
    gpu_summary,
)
from course_utils.lessons.nb09_vit.train import (
    LONG_RUN_STEPS,
    ImageRun,
    SmallCNN,
    WeightAverage,
    accuracy,
    fit_svc,
    initial_vit,
    long_run_notice,
    run_model,
    run_model_with_attention,
    shuffled_batches,
    train_small_cnn,
    train_vit,
    train_vit_digits,
    train_vit_spectrograms,
)

__all__ = [
    "DATASETS",
    "SPECTROGRAM_CLASSES",
    "Augment",
    "TrainConfig",
    "CNNConfig",
    "SpectrogramConfig",
    "Config",
    "CPU_ACC_BAR",
    "CPU_SECONDS_BAR",
    "GPU_CIFAR10_ACC_BAR",
    "Sizes",
    "SIZES",
    "DATASET_PREFERENCE",
    "default_dataset",
    "config",
    "gpu_summary",
    "load_images",
    "dataset_description",
    "augment_affine",
    "augment_batch",
    "make_spectrograms",
    "spectrogram_split",
    "ImageRun",
    "accuracy",
    "run_model",
    "run_model_with_attention",
    "LONG_RUN_STEPS",
    "long_run_notice",
    "WeightAverage",
    "shuffled_batches",
    "train_vit",
    "initial_vit",
    "train_vit_digits",
    "SmallCNN",
    "train_small_cnn",
    "fit_svc",
    "train_vit_spectrograms",
    "attention_rollout",
    "position_similarity",
    "grid_distance",
    "position_distance_correlation",
    "similarity_by_distance",
]
