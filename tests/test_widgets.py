"""course_utils.widgets: one output per explorer (the live widget where a widget manager runs,
the static PNG everywhere else), controls that fit their values, a live image that every change
replaces, and the explorers of notebooks 01 and 04. No kernel or display needed."""

from __future__ import annotations

import base64
import math
from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")

import ipywidgets  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from IPython.core.formatters import DisplayFormatter  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from course_utils import plots, widgets  # noqa: E402
from course_utils.modeling.positional import sinusoidal_positional_encoding  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _render(item):
    return plots.show_heatmap(item, title=f"sum {float(item.sum()):.0f}").figure


def _line(scale, size):
    fig, ax = plt.subplots()
    ax.plot(range(size), [scale * i for i in range(size)])
    ax.set_title(f"scale={scale} size={size}")
    return fig


def _images(explorer) -> list:
    return [w for w in explorer.widget.children if isinstance(w, ipywidgets.Image)]


# ------------------------------------------------------------------------- one output


def test_an_explorer_is_one_output_with_the_widget_view_and_the_static_png():
    explorer = widgets.slider_explorer(_line, scale=(0.5, 4.0, 0.5), size=[4, 8, 16])
    bundle, _ = DisplayFormatter().format(explorer)
    assert bundle[widgets.WIDGET_VIEW]["model_id"] == explorer.widget.model_id
    png = base64.b64decode(bundle["image/png"])
    assert png.startswith(PNG_MAGIC) and png == widgets.png_bytes(explorer.figure)
    assert bundle["text/plain"] == explorer.note and "static preview" in explorer.note
    # no second output: no _ipython_display_ that would show a figure and then the widget
    assert not hasattr(explorer, "_ipython_display_")


def test_without_a_widget_the_bundle_is_the_static_image_only():
    explorer = widgets.Explorer(figure=_line(1, 4), note="(static)")
    bundle = explorer._repr_mimebundle_()
    assert set(bundle) == {"image/png", "text/plain"}


def test_the_live_image_starts_as_the_static_preview_and_each_change_replaces_it():
    explorer = widgets.slider_explorer(_line, scale=(0.5, 4.0, 0.5), size=[4, 8, 16])
    (image,) = _images(explorer)
    assert image is explorer.image and image.value == widgets.png_bytes(explorer.figure)
    first = image.value
    explorer.controls["size"].value = 16
    (image_after,) = _images(explorer)  # still exactly one picture
    assert image_after is image and image.value != first
    assert image.value == widgets.png_bytes(_line(0.5, 16))


def test_a_render_error_is_shown_and_the_last_image_kept():
    def render(n):
        if n == 3:
            raise ValueError("n = 3 is not drawable")
        return _line(1, n)

    explorer = widgets.slider_explorer(render, n=(2, 5))
    before = explorer.image.value
    explorer.controls["n"].value = 3
    assert "ValueError: n = 3 is not drawable" in explorer.status.value
    assert explorer.image.value == before
    explorer.controls["n"].value = 4
    assert explorer.status.value == "" and explorer.image.value != before


# ------------------------------------------------------------------------------ controls


def test_controls_fit_their_values():
    many = [f"option {i}" for i in range(6)]
    explorer = widgets.slider_explorer(
        lambda a, b, c, d, e, f: _line(1, 4),
        a=(1, 5),
        b=(0.1, 2.0),
        c=[4, 16, 64],
        d=["none", "1/sqrt(d)", "1/d"],
        e=many,
        f=widgets.Ordered(["short", "long"]),
    )
    kinds = {name: type(c).__name__ for name, c in explorer.controls.items()}
    assert kinds == {
        "a": "IntSlider",
        "b": "FloatSlider",
        "c": "SelectionSlider",
        "d": "ToggleButtons",
        "e": "Dropdown",
        "f": "SelectionSlider",
    }
    assert all(not getattr(c, "continuous_update", False) for c in explorer.controls.values())


@pytest.mark.parametrize("spec", [(3, 3), [], "abc", (1, "x")])
def test_a_bad_control_spec_is_a_clear_error(spec):
    with pytest.raises(ValueError, match="control 'x'"):
        widgets.slider_explorer(lambda x: _line(1, 4), x=spec)


def test_slider_explorer_uses_the_first_or_the_given_values_for_the_static_figure():
    explorer = widgets.slider_explorer(_line, scale=(0.5, 4.0, 0.5), size=[4, 8, 16])
    assert explorer.figure.axes[0].get_title() == "scale=0.5 size=4"
    assert explorer.update(size=16).axes[0].get_title() == "scale=0.5 size=16"
    custom = widgets.slider_explorer(_line, static_values={"size": 8}, scale=(1, 3), size=[4, 8])
    assert custom.figure.axes[0].get_title() == "scale=1 size=8"
    assert custom.controls["size"].value == 8
    with pytest.raises(ValueError, match="unknown controls"):
        widgets.slider_explorer(_line, static_values={"nope": 1}, scale=(1, 3), size=[4])


def test_attention_browser_has_a_dropdown_and_redraws_the_chosen_item():
    items = [torch.eye(3), 2 * torch.eye(3)]
    explorer = widgets.attention_browser(items, _render, labels=["one", "two"])
    assert isinstance(explorer.figure, Figure)
    assert explorer.figure.axes[0].get_title() == "sum 3"  # the first item
    dropdown = explorer.controls["choice"]
    assert isinstance(dropdown, ipywidgets.Dropdown)
    assert [label for label, _ in dropdown.options] == ["one", "two"]
    dropdown.value = 1
    assert explorer.image.value == widgets.png_bytes(_render(items[1]))
    assert explorer.update("two").axes[0].get_title() == "sum 6"


# --------------------------------------------------------------------- notebook 01


def _sweep():
    """What hidden_size_sweep returns, reduced to the reports: accuracy per length bucket."""
    exact = {16: [0.9, 0.4, 0.1], 64: [1.0, 0.8, 0.3], 256: [1.0, 0.95, 0.5]}
    buckets = [(3, 5), (6, 8), (9, 9)]
    return {
        h: SimpleNamespace(
            report=SimpleNamespace(
                exact=dict(zip(buckets, acc)),
                token={b: min(1.0, a + 0.2) for b, a in zip(buckets, acc)},
            )
        )
        for h, acc in exact.items()
    }


def test_bottleneck_explorer_shows_accuracy_by_length_and_hidden_size():
    explorer = widgets.bottleneck_explorer(_sweep())
    kinds = {n: type(c).__name__ for n, c in explorer.controls.items()}
    assert kinds == {"H": "SelectionSlider", "length": "SelectionSlider", "metric": "ToggleButtons"}
    assert list(explorer.controls["H"].options) == [16, 64, 256]
    assert list(explorer.controls["length"].options) == ["3-5", "6-8", "9"]
    # static preview: the largest H on the longest sources
    left, right = explorer.figure.axes
    assert "H = 256" in left.get_title() and "9-word sources" in right.get_title()
    xs, ys = right.lines[0].get_data()
    assert list(xs) == [16, 64, 256] and [round(y) for y in ys] == [10, 30, 50]
    # H = 16, token accuracy, middle bucket
    fig = explorer.update(H=16, length="6-8", metric="token acc.")
    left, right = fig.axes
    assert "token acc." in left.get_title() and "H = 16" in left.get_title()
    marker_x, marker_y = right.lines[1].get_data()
    assert list(marker_x) == [16] and marker_y[0] == pytest.approx(60.0)


def test_bottleneck_explorer_needs_a_sweep():
    with pytest.raises(ValueError, match="at least one hidden size"):
        widgets.bottleneck_explorer({})


# --------------------------------------------------------------------- notebook 04


def test_positional_encoding_explorer_shows_one_frequency_pair_and_distance_similarity():
    T, D = 32, 16
    explorer = widgets.positional_encoding_explorer(T, D, position=5, pair=2)
    kinds = {n: type(c).__name__ for n, c in explorer.controls.items()}
    assert kinds == {"pos": "IntSlider", "i": "IntSlider"}
    assert (explorer.controls["pos"].max, explorer.controls["i"].max) == (T - 1, D // 2 - 1)
    fig = explorer.update(pos=7, i=3)
    heat, pair, sim = fig.axes[:3]
    freq = 10000.0 ** (-2 * 3 / D)
    _, sin = pair.lines[0].get_data()
    assert sin == pytest.approx([math.sin(p * freq) for p in range(T)])
    _, dots = sim.lines[0].get_data()
    pe = sinusoidal_positional_encoding(T, D, dtype=torch.float64)
    assert dots == pytest.approx((pe @ pe[7]).tolist())
    assert int(torch.tensor(dots).argmax()) == 7  # an encoding is most like itself
    assert heat.get_images()[0].get_array().shape == (T, D)
    assert "i = 3" in pair.get_title() and "PE[7]" in sim.get_title()


def test_positional_encoding_explorer_rejects_tiny_sizes():
    with pytest.raises(ValueError, match="T >= 2 and D >= 2"):
        widgets.positional_encoding_explorer(1, 8)
