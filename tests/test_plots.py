"""course_utils.plots: every figure is titled with labelled axes.

Runs on matplotlib's Agg backend (no display needed).
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from course_utils import plots  # noqa: E402
from course_utils.runtime.training import History  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _assert_labelled(ax) -> None:
    assert ax.get_title(), "axes without a title"
    assert ax.get_xlabel() and ax.get_ylabel(), "axes without axis labels"


def test_show_heatmap_has_title_axis_labels_and_token_ticks():
    weights = torch.softmax(torch.randn(3, 4), dim=-1)
    ax = plots.show_heatmap(
        weights,
        ["the", "red", "car", "<eos>"],
        ["la", "voiture", "rouge"],
        title="cross-attention",
        xlabel="source",
        ylabel="target",
    )
    assert ax.get_title() == "cross-attention"
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("source", "target")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["the", "red", "car", "<eos>"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["la", "voiture", "rouge"]
    _assert_labelled(plots.show_heatmap(torch.eye(3), annotate=True))


def test_show_heatmap_rejects_mismatched_labels_and_shapes():
    with pytest.raises(ValueError, match="expected 4 x_labels"):
        plots.show_heatmap(torch.rand(3, 4), ["a", "b"])
    with pytest.raises(ValueError, match=r"\(T, S\)"):
        plots.show_heatmap(torch.rand(2, 3, 4))


def test_show_heatmaps_lays_out_a_grid_with_titles_and_outer_labels():
    fig = plots.show_heatmaps(
        torch.rand(2, 3, 4, 5),
        titles=[f"head {i}" for i in range(6)],
        suptitle="layers x heads",
        x_labels=list("abcde"),
    )
    assert isinstance(fig, Figure) and fig._suptitle.get_text() == "layers x heads"
    panels = [ax for ax in fig.axes if ax.get_images()]
    assert len(panels) == 6
    assert all(ax.get_title() for ax in panels)
    assert any(ax.get_xlabel() for ax in panels) and any(ax.get_ylabel() for ax in panels)
    fig2 = plots.show_heatmaps([torch.rand(2, 2)] * 5, ncols=2)  # 3 x 2 grid, one panel off
    assert len([ax for ax in fig2.axes if ax.get_images()]) == 5


def test_plot_curves_from_a_dict_of_series():
    fig = plots.plot_curves(
        {"train": [3.0, 2.0, 1.5], "val": ([0, 2], [3.1, 1.8])}, title="loss curves", smooth=2
    )
    (ax,) = fig.axes
    _assert_labelled(ax)
    assert {line.get_label() for line in ax.get_lines()} >= {"train", "val"}


def test_plot_curves_from_a_history_splits_losses_and_metrics():
    h = History(
        step=[0, 1, 2],
        train_loss=[2.0, 1.0, 0.5],
        lr=[1e-3] * 3,
        grad_norm=[1.0] * 3,
        time=[0.1, 0.2, 0.3],
        eval_step=[2],
        eval_time=[0.3],
        eval={"val_loss": [0.6], "accuracy": [0.9]},
    )
    fig = h.plot(title="run")
    assert len(fig.axes) == 2
    for ax in fig.axes:
        _assert_labelled(ax)
    assert {line.get_label() for line in fig.axes[1].get_lines()} == {"accuracy"}


def test_plot_accuracy_vs_length_numeric_and_bucketed():
    ax = plots.plot_accuracy_vs_length(
        {"GRU": {5: 0.9, 10: 0.6}, "GRU + attention": {5: 0.95, 10: 0.94}}
    )
    _assert_labelled(ax)
    assert len(ax.get_lines()) == 2
    ax2 = plots.plot_accuracy_vs_length({"model": {"1-5": 1.0, "6-10": 0.5}}, percent=True)
    assert [t.get_text() for t in ax2.get_xticklabels()] == ["1-5", "6-10"]
    assert ax2.get_ylabel().endswith("(%)")


def test_show_images_grid_with_titles():
    fig = plots.show_images(
        torch.rand(5, 1, 8, 8), titles=list("01234"), suptitle="digits", ncols=3
    )
    assert fig._suptitle.get_text() == "digits"
    assert [ax.get_title() for ax in fig.axes if ax.get_images()] == list("01234")
