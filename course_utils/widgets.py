"""Small ipywidgets explorers for the notebooks, each with a static fallback figure.

A stored notebook cannot replay a live widget, so every explorer also draws a static figure
(the first item, or the initial slider values) that stays in the saved output. In a live
kernel the widget below it redraws on every change.

    attention_browser(examples, lambda ex: show_heatmap(ex.weights, ...).figure)
    slider_explorer(plot_softmax, temperature=(0.1, 5.0, 0.1), d=[16, 64, 256])

``render_fn`` returns a matplotlib Figure (or Axes, or draws on the current figure and
returns None). Importing this module needs no display and no running kernel.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

__all__ = ["Explorer", "attention_browser", "slider_explorer"]


def _figure_of(result: Any) -> Figure:
    if isinstance(result, Figure):
        return result
    if hasattr(result, "figure") and isinstance(result.figure, Figure):  # an Axes
        return result.figure
    return plt.gcf()


def _render(render_fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Figure:
    fig = _figure_of(render_fn(*args, **kwargs))
    plt.close(fig)  # keep pyplot from showing it a second time at the end of the cell
    return fig


@dataclass
class Explorer:
    """An interactive explorer: ``widget`` (ipywidgets, or None without ipywidgets), the static
    ``figure`` shown in stored outputs, and ``update(**values)`` to redraw by hand.

    Displaying it (the last line of a cell, or ``display(explorer)``) shows the static figure
    then the live widget.
    """

    figure: Figure
    widget: Any = None
    note: str = ""
    _update: Callable[..., Figure] | None = field(default=None, repr=False)

    def update(self, *args: Any, **kwargs: Any) -> Figure:
        """Redraw for new values (what the widget calls); returns the new figure."""
        if self._update is None:
            raise RuntimeError("this explorer has no update function")
        return self._update(*args, **kwargs)

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.figure)
        if self.note:
            print(self.note)
        if self.widget is not None:
            display(self.widget)


def _ipywidgets():
    try:
        import ipywidgets

        return ipywidgets
    except ImportError:  # pragma: no cover - ipywidgets is a core dependency
        return None


def attention_browser(
    items: Sequence[Any] | Mapping[str, Any],
    render_fn: Callable[[Any], Any],
    *,
    description: str = "example",
    labels: Sequence[str] | None = None,
) -> Explorer:
    """Browse ``items`` (e.g. examples with their attention maps) with a dropdown.

    ``render_fn(item)`` draws one item and returns its figure. The static fallback figure is
    the first item. ``items`` may be a dict ``label -> item``; otherwise ``labels`` (or
    ``"1", "2", ...``) name the choices.
    """
    if isinstance(items, Mapping):
        labels, values = [str(k) for k in items], list(items.values())
    else:
        values = list(items)
        labels = (
            [str(s) for s in labels]
            if labels is not None
            else [f"{i + 1}" for i in range(len(values))]
        )
    if not values:
        raise ValueError("attention_browser needs at least one item")
    if len(labels) != len(values):
        raise ValueError(f"expected {len(values)} labels, got {len(labels)}")

    def update(choice: int | str = 0) -> Figure:
        index = labels.index(choice) if isinstance(choice, str) else int(choice)
        return _render(render_fn, values[index])

    static = update(0)
    note = (
        f"(static preview: {description} {labels[0]} of {len(values)}; "
        "run the cell in a live kernel to browse the others)"
    )
    widgets = _ipywidgets()
    widget = None
    if widgets is not None:
        dropdown = widgets.Dropdown(
            options=list(zip(labels, range(len(values)))), value=0, description=description
        )
        out = widgets.Output()

        def on_change(change: Mapping[str, Any]) -> None:
            with out:
                from IPython.display import clear_output, display

                clear_output(wait=True)
                display(update(change["new"]))

        dropdown.observe(on_change, names="value")
        widget = widgets.VBox([dropdown, out])
    return Explorer(figure=static, widget=widget, note=note, _update=update)


def _control(widgets: Any, name: str, spec: Any) -> Any:
    """A widget for one slider spec: (min, max, step) -> float/int slider; a list -> choices."""
    if isinstance(spec, tuple) and len(spec) in (2, 3):
        lo, hi = spec[0], spec[1]
        step = spec[2] if len(spec) == 3 else None
        if all(isinstance(v, int) for v in (lo, hi, step or 1)):
            return widgets.IntSlider(
                min=lo, max=hi, step=step or 1, value=lo, description=name, continuous_update=False
            )
        return widgets.FloatSlider(
            min=lo,
            max=hi,
            step=step or (hi - lo) / 100,
            value=lo,
            description=name,
            continuous_update=False,
        )
    if isinstance(spec, (list, range)):
        options = list(spec)
        return widgets.SelectionSlider(
            options=options, value=options[0], description=name, continuous_update=False
        )
    raise ValueError(
        f"slider {name!r}: expected (min, max[, step]) or a list of choices, got {spec!r}"
    )


def _initial(spec: Any) -> Any:
    if isinstance(spec, tuple):
        return spec[0]
    return list(spec)[0]


def slider_explorer(
    render_fn: Callable[..., Any], static_values: Mapping[str, Any] | None = None, **sliders: Any
) -> Explorer:
    """Explore ``render_fn(**values)`` with one slider per keyword.

    Each keyword is ``(min, max)`` / ``(min, max, step)`` (an int or float slider) or a list
    of choices. The static fallback figure uses ``static_values`` (default: each slider's
    first value), which also set the sliders' starting positions.
    """
    if not sliders:
        raise ValueError("slider_explorer needs at least one slider, e.g. temperature=(0.1, 5.0)")
    values = {name: _initial(spec) for name, spec in sliders.items()}
    if static_values:
        unknown = set(static_values) - set(sliders)
        if unknown:
            raise ValueError(f"static_values names unknown sliders: {sorted(unknown)}")
        values.update(static_values)

    def update(**changes: Any) -> Figure:
        values.update(changes)
        return _render(render_fn, **values)

    static = update()
    shown = ", ".join(f"{k}={v}" for k, v in values.items())
    note = f"(static preview at {shown}; run the cell in a live kernel to move the sliders)"
    widgets = _ipywidgets()
    widget = None
    if widgets is not None:
        controls = {}
        for name, spec in sliders.items():
            control = _control(widgets, name, spec)
            control.value = values[name]
            controls[name] = control
        out = widgets.Output()

        def on_change(_: Any) -> None:
            with out:
                from IPython.display import clear_output, display

                clear_output(wait=True)
                display(update(**{n: c.value for n, c in controls.items()}))

        for control in controls.values():
            control.observe(on_change, names="value")
        widget = widgets.VBox([*controls.values(), out])
    return Explorer(figure=static, widget=widget, note=note, _update=update)
