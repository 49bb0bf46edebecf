"""Plots reused by every notebook (d2l style): attention heatmaps, curves, accuracy vs length.

Every function draws a titled figure with labelled axes and returns it (or its axes); none
calls ``plt.show()``, so Jupyter shows the figure once at the end of the cell and tests can
inspect it under the ``Agg`` backend.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

__all__ = ["show_heatmap", "show_heatmaps", "plot_curves", "plot_accuracy_vs_length", "show_images"]


def _numpy(x: Any) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=float)


def _label_axis(ax: Axes, labels: Sequence[str] | None, n: int, axis: str, rotate: bool) -> None:
    if labels is None:
        return
    labels = [str(s) for s in labels]
    if len(labels) != n:
        raise ValueError(
            f"expected {n} {axis}_labels (one per {'column' if axis == 'x' else 'row'}),"
            f" got {len(labels)}"
        )
    if axis == "x":
        ax.set_xticks(range(n))
        ax.set_xticklabels(labels, rotation=90 if rotate else 0)
    else:
        ax.set_yticks(range(n))
        ax.set_yticklabels(labels)


def show_heatmap(
    matrix: Any,
    x_labels: Sequence[str] | None = None,
    y_labels: Sequence[str] | None = None,
    title: str = "attention weights",
    xlabel: str = "keys (source positions)",
    ylabel: str = "queries (target positions)",
    ax: Axes | None = None,
    *,
    cmap: str = "Reds",
    colorbar: bool = True,
    vmin: float | None = None,
    vmax: float | None = None,
    annotate: bool = False,
) -> Axes:
    """One heatmap of a (T, S) matrix, e.g. attention weights with token labels on the axes.

    Rows are queries (y axis, ``y_labels``), columns keys (x axis, ``x_labels``).
    ``annotate`` writes each value in its cell (for small matrices). Returns the axes.
    """
    m = _numpy(matrix)
    if m.ndim != 2:
        raise ValueError(f"expected a matrix of shape (T, S), got shape {m.shape}")
    if ax is None:
        t, s = m.shape
        _, ax = plt.subplots(
            figsize=(min(12, 1.5 + 0.35 * s), min(12, 1.2 + 0.35 * t)), constrained_layout=True
        )
    im = ax.imshow(m, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto", interpolation="nearest")
    _label_axis(ax, x_labels, m.shape[1], "x", rotate=True)
    _label_axis(ax, y_labels, m.shape[0], "y", rotate=False)
    if annotate:
        for i in range(m.shape[0]):
            for j in range(m.shape[1]):
                ax.text(j, i, f"{m[i, j]:.2f}", ha="center", va="center", fontsize=7)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if colorbar:
        ax.figure.colorbar(im, ax=ax, shrink=0.8)
    return ax


def show_heatmaps(
    matrices: Any,
    x_labels: Sequence[str] | None = None,
    y_labels: Sequence[str] | None = None,
    titles: Sequence[str] | None = None,
    suptitle: str = "attention weights",
    xlabel: str = "keys",
    ylabel: str = "queries",
    *,
    ncols: int | None = None,
    cmap: str = "Reds",
    figsize: tuple[float, float] | None = None,
    share_scale: bool = True,
) -> Figure:
    """A grid of heatmaps (d2l's ``show_heatmaps``).

    ``matrices``: (R, C, T, S) laid out as R rows by C columns (e.g. layers x heads), or
    (N, T, S) / a list of (T, S) laid out in ``ncols`` columns. Labels are shared by all panels
    (ticks on the outer panels only); ``titles`` name the panels in reading order.
    ``share_scale``: one colour scale (and one colour bar) for every panel.
    """
    mats, (rows, cols) = _panel_grid(matrices, ncols)
    if titles is not None and len(titles) != len(mats):
        raise ValueError(f"expected {len(mats)} titles, got {len(titles)}")
    t, s = mats[0].shape
    if figsize is None:
        w = min(16, 1.0 + cols * (0.8 + 0.25 * s))
        h = min(16, 1.0 + rows * (0.8 + 0.25 * t))
        figsize = (w, h)
    fig, axes = plt.subplots(rows, cols, figsize=figsize, squeeze=False, constrained_layout=True)
    vmin = min(float(m.min()) for m in mats) if share_scale else None
    vmax = max(float(m.max()) for m in mats) if share_scale else None
    im = None
    for k, ax in enumerate(axes.flat):
        if k >= len(mats):
            ax.axis("off")
            continue
        r, c = divmod(k, cols)
        im = ax.imshow(
            mats[k], cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto", interpolation="nearest"
        )
        ax.set_title(titles[k] if titles is not None else f"{k + 1}", fontsize=9)
        last_row = r == rows - 1 or k + cols >= len(mats)
        if last_row:
            ax.set_xlabel(xlabel)
            _label_axis(ax, x_labels, mats[k].shape[1], "x", rotate=True)
        else:
            ax.set_xticks([])
        if c == 0:
            ax.set_ylabel(ylabel)
            _label_axis(ax, y_labels, mats[k].shape[0], "y", rotate=False)
        else:
            ax.set_yticks([])
    fig.suptitle(suptitle)
    if share_scale and im is not None:
        fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.6)
    return fig


def _panel_grid(matrices: Any, ncols: int | None) -> tuple[list[Any], tuple[int, int]]:
    """The 2-D panels of ``show_heatmaps`` in reading order and their (rows, cols) grid:
    (R, C, T, S) is R x C; (N, T, S), (T, S) or a list of (T, S) fill ``ncols`` columns."""
    grid = None
    if isinstance(matrices, (list, tuple)):
        mats = [_numpy(m) for m in matrices]
    else:
        arr = _numpy(matrices)
        if arr.ndim not in (2, 3, 4):
            raise ValueError(
                f"expected matrices of shape (R, C, T, S) or (N, T, S), got {arr.shape}"
            )
        if arr.ndim == 4:
            grid = arr.shape[:2]
        mats = list(arr.reshape(-1, *arr.shape[-2:]))
    if not mats:
        raise ValueError("expected at least one matrix")
    for m in mats:
        if m.ndim != 2:
            raise ValueError(f"expected every matrix to be 2-D (T, S), got shape {m.shape}")
    if grid is None:
        cols = ncols or min(len(mats), 4)
        grid = (math.ceil(len(mats) / cols), cols)
    return mats, grid


def _as_series(curves: Any) -> dict[str, tuple[list[float], list[float]]]:
    if hasattr(curves, "series") and callable(curves.series):  # a training History
        return curves.series()
    if not isinstance(curves, Mapping):
        raise TypeError(f"expected a History or a dict of series, got {type(curves).__name__}")
    out = {}
    for name, s in curves.items():
        if isinstance(s, Mapping):
            xs, ys = list(s.keys()), list(s.values())
        elif isinstance(s, tuple) and len(s) == 2 and np.ndim(s[0]) == 1:
            xs, ys = list(s[0]), list(s[1])
        else:
            ys = list(_numpy(s).reshape(-1))
            xs = list(range(len(ys)))
        if len(xs) != len(ys):
            raise ValueError(f"series {name!r}: {len(xs)} x values but {len(ys)} y values")
        out[str(name)] = (xs, [float(y) for y in ys])
    return out


def plot_curves(
    curves: Any,
    title: str = "training curves",
    xlabel: str = "step",
    ylabel: str = "loss",
    ax: Axes | None = None,
    *,
    logy: bool = False,
    smooth: int | None = None,
    split_metrics: bool = True,
) -> Figure:
    """Line plot of several series: a :class:`~course_utils.runtime.training.History` or a dict.

    Dict values: a list/1-D tensor of y (x = 0, 1, ...), a ``(xs, ys)`` pair, or a dict
    ``x -> y``. ``smooth=k`` adds a moving average over ``k`` points. With a History (or
    ``split_metrics``), series whose name does not contain "loss" (accuracies...) go to a
    second panel on the right, so losses and accuracies keep their own scales.
    Returns the figure.
    """
    series = _as_series(curves)
    losses = {k: v for k, v in series.items() if "loss" in k or not split_metrics}
    others = {k: v for k, v in series.items() if k not in losses}
    if not losses:
        losses, others = others, {}
    if ax is not None:
        panels = [(ax, {**losses, **others}, ylabel)]
        fig = ax.figure
    elif others:
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.8), constrained_layout=True)
        panels = [(a1, losses, ylabel), (a2, others, "metric")]
    else:
        fig, a1 = plt.subplots(figsize=(6.5, 3.8), constrained_layout=True)
        panels = [(a1, losses, ylabel)]
    for axis, group, label in panels:
        for name, (xs, ys) in group.items():
            (line,) = axis.plot(
                xs,
                ys,
                label=name,
                alpha=0.45 if smooth else 1.0,
                marker="o" if len(ys) <= 30 else None,
                markersize=3,
            )
            if smooth and len(ys) >= smooth > 1:
                kernel = np.ones(smooth) / smooth
                axis.plot(
                    xs[smooth - 1 :],
                    np.convolve(ys, kernel, mode="valid"),
                    color=line.get_color(),
                    label=f"{name} (avg {smooth})",
                )
        if logy:
            axis.set_yscale("log")
        axis.set_xlabel(xlabel)
        axis.set_ylabel(label)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    if len(panels) == 1:
        panels[0][0].set_title(title)
    else:
        panels[0][0].set_title(f"{title}: losses")
        panels[1][0].set_title(f"{title}: metrics")
    return fig


def plot_accuracy_vs_length(
    results: Mapping[str, Mapping[Any, float]],
    title: str = "exact-match accuracy vs input length",
    xlabel: str = "source length (tokens)",
    ylabel: str = "accuracy",
    ax: Axes | None = None,
    *,
    percent: bool = False,
) -> Axes:
    """One line per model: ``results[name] = {length or bucket label: accuracy}``.

    Numeric keys are placed on a numeric x axis; string bucket labels (from
    :func:`course_utils.data.tasks.accuracy_by_length` with buckets) are placed in order.
    Returns the axes.
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 3.8), constrained_layout=True)
    keys = [k for r in results.values() for k in r]
    numeric = all(isinstance(k, (int, float, np.integer, np.floating)) for k in keys)
    order: list[Any] = []
    if not numeric:
        for r in results.values():
            for k in r:
                if k not in order:
                    order.append(k)
    scale = 100.0 if percent else 1.0
    for name, r in results.items():
        xs = list(r.keys()) if numeric else [order.index(k) for k in r]
        ax.plot(xs, [scale * float(v) for v in r.values()], marker="o", label=name)
    if not numeric:
        ax.set_xticks(range(len(order)))
        ax.set_xticklabels([str(k) for k in order])
    ax.set_ylim(-0.02 * scale, 1.02 * scale)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel + (" (%)" if percent else ""))
    ax.grid(alpha=0.3)
    if results:
        ax.legend(fontsize=8)
    return ax


def show_images(
    images: Any,
    titles: Sequence[str] | None = None,
    suptitle: str = "images",
    *,
    ncols: int = 8,
    cmap: str = "gray",
    scale: float = 1.4,
) -> Figure:
    """A grid of images: (N, C, H, W) or (N, H, W), uint8 or float (min-max scaled per image)."""
    arr = _numpy(images)
    if arr.ndim == 4:
        arr = arr.transpose(0, 2, 3, 1)
        if arr.shape[-1] == 1:
            arr = arr[..., 0]
    elif arr.ndim != 3:
        raise ValueError(f"expected images of shape (N, C, H, W) or (N, H, W), got {arr.shape}")
    n = arr.shape[0]
    if titles is not None and len(titles) != n:
        raise ValueError(f"expected {n} titles, got {len(titles)}")
    cols = min(ncols, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(
        rows,
        cols,
        figsize=(scale * cols, scale * rows + 0.4),
        squeeze=False,
        constrained_layout=True,
    )
    for k, ax in enumerate(axes.flat):
        ax.set_xticks([])
        ax.set_yticks([])
        if k >= n:
            ax.axis("off")
            continue
        img = arr[k]
        lo, hi = float(img.min()), float(img.max())
        img = (img - lo) / (hi - lo) if hi > lo else img * 0
        ax.imshow(img, cmap=cmap if img.ndim == 2 else None, interpolation="nearest")
        if titles is not None:
            ax.set_title(str(titles[k]), fontsize=8)
    fig.suptitle(suptitle)
    return fig
