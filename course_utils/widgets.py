"""Small ipywidgets explorers for the notebooks: live in a kernel, a static image when stored.

An explorer is displayed as **one** output holding two representations of the same figure:

* ``application/vnd.jupyter.widget-view+json``: the live widget (controls above one image).
  JupyterLab prefers it, so in a live kernel the student sees the controls and exactly one
  figure, which every change replaces (never a stale preview above a live one);
* ``image/png`` (and a one-line ``text/plain`` note): the static preview at the starting
  values. A stored notebook cannot replay a widget, so GitHub, nbviewer, an untrusted
  notebook and every text-only reader show this image. ``course release --execute`` drops
  the widget view from stored solution outputs (:func:`course_utils.authoring.execute.execute_solution`),
  so a reopened solution shows the image, not "model not found" or a widget's text repr.

Controls follow the values they choose from: ``(min, max[, step])`` is an int or float
slider, a list of numbers (or of names in an order, :class:`Ordered`) a selection slider, a
few named options (strings) toggle buttons, and a longer list of names a dropdown::

    slider_explorer(render, d=[16, 64, 256], scale=["none", "1/sqrt(d)"])   # slider + toggles
    attention_browser(examples, lambda ex: show_heatmap(ex.weights).figure)  # a dropdown
    bottleneck_explorer(sweep)                # notebook 01: accuracy by length and hidden size
    positional_encoding_explorer(T=64, D=64)  # notebook 04: sinusoids by position and frequency

``render_fn`` returns a matplotlib Figure (or Axes, or draws on the current figure and
returns None). Importing this module needs no display and no running kernel.
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

__all__ = [
    "Explorer",
    "Ordered",
    "attention_browser",
    "slider_explorer",
    "bottleneck_explorer",
    "positional_encoding_explorer",
    "WIDGET_VIEW",
]

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
MAX_TOGGLE_OPTIONS = 4  # more named options than this get a dropdown
MAX_TOGGLE_LABEL = 12


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


def png_bytes(fig: Figure) -> bytes:
    """``fig`` as PNG bytes, cropped like Jupyter's inline figures (``bbox_inches="tight"``)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return buf.getvalue()


@dataclass
class Explorer:
    """An interactive explorer: ``widget`` (ipywidgets, or None without ipywidgets), the static
    ``figure`` (the starting values), ``image`` (the widget's live picture), ``controls``
    (name -> control widget), and ``update(**values)`` to redraw by hand.

    Displaying it (the last line of a cell, or ``display(explorer)``) gives one output: the
    live widget where a widget manager runs, the static PNG everywhere else.
    """

    figure: Figure
    widget: Any = None
    note: str = ""
    image: Any = None
    controls: dict[str, Any] = field(default_factory=dict)
    status: Any = None
    _update: Callable[..., Figure] | None = field(default=None, repr=False)

    def update(self, *args: Any, **kwargs: Any) -> Figure:
        """Redraw for new values (what the widget calls); returns the new figure."""
        if self._update is None:
            raise RuntimeError("this explorer has no update function")
        return self._update(*args, **kwargs)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        data: dict[str, Any] = {
            "image/png": base64.b64encode(png_bytes(self.figure)).decode("ascii"),
            "text/plain": self.note or "<static preview>",
        }
        if self.widget is not None:
            data[WIDGET_VIEW] = {
                "version_major": 2,
                "version_minor": 0,
                "model_id": self.widget.model_id,
            }
        return data


def _ipywidgets():
    try:
        import ipywidgets

        return ipywidgets
    except ImportError:  # pragma: no cover - ipywidgets is a core dependency
        return None


class Ordered(list):
    """Choices with an order (lengths, sizes): a selection slider even when they are names,
    e.g. ``slider_explorer(render, length=Ordered(["3-5", "6-8", "9-11"]))``."""


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _control(widgets: Any, name: str, spec: Any) -> Any:
    """A control for one spec: ``(min, max[, step])`` -> int/float slider; a list of numbers
    -> selection slider; a few short names -> toggle buttons; more names -> dropdown."""
    if isinstance(spec, tuple) and len(spec) in (2, 3) and all(map(_is_number, spec)):
        lo, hi = spec[0], spec[1]
        step = spec[2] if len(spec) == 3 else None
        if lo >= hi:
            raise ValueError(f"control {name!r}: min {lo!r} must be below max {hi!r}")
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
    if isinstance(spec, (list, range)) and len(spec) > 0:
        options = list(spec)
        if isinstance(spec, Ordered) or all(map(_is_number, options)):
            return widgets.SelectionSlider(
                options=options, value=options[0], description=name, continuous_update=False
            )
        labels = [str(o) for o in options]
        if len(options) <= MAX_TOGGLE_OPTIONS and max(map(len, labels)) <= MAX_TOGGLE_LABEL:
            return widgets.ToggleButtons(
                options=list(zip(labels, options)), value=options[0], description=name
            )
        return widgets.Dropdown(
            options=list(zip(labels, options)), value=options[0], description=name
        )
    raise ValueError(
        f"control {name!r}: expected (min, max[, step]) or a non-empty list of choices, "
        f"got {spec!r}"
    )


def _initial(name: str, spec: Any) -> Any:
    """The starting value of a control spec; a ``ValueError`` naming the control if the spec
    is neither ``(min, max[, step])`` with min < max nor a non-empty list of choices."""
    if isinstance(spec, tuple) and len(spec) in (2, 3) and all(map(_is_number, spec)):
        if spec[0] < spec[1]:
            return spec[0]
    elif isinstance(spec, (list, range)) and len(spec) > 0:
        return list(spec)[0]
    raise ValueError(
        f"control {name!r}: expected (min, max[, step]) with min < max, or a non-empty list "
        f"of choices, got {spec!r}"
    )


def _live(
    update: Callable[..., Figure],
    static: Figure,
    controls: dict[str, Any],
    widgets: Any,
) -> tuple[Any, Any, Any]:
    """The live widget: the controls above one image, which each change replaces; a render
    error shows as a line of text under the controls (a callback's exception would vanish)."""
    image = widgets.Image(value=png_bytes(static), format="png")
    status = widgets.HTML(value="")

    def on_change(_: Any) -> None:
        try:
            fig = update(**{n: c.value for n, c in controls.items()})
        except Exception as exc:  # the student's render function may raise anything
            status.value = f"<pre>could not redraw: {type(exc).__name__}: {exc}</pre>"
            return
        status.value = ""
        image.value = png_bytes(fig)

    for control in controls.values():
        control.observe(on_change, names="value")
    return widgets.VBox([*controls.values(), status, image]), image, status


def attention_browser(
    items: Sequence[Any] | Mapping[str, Any],
    render_fn: Callable[[Any], Any],
    *,
    description: str = "example",
    labels: Sequence[str] | None = None,
) -> Explorer:
    """Browse ``items`` (e.g. examples with their attention maps) with a dropdown.

    ``render_fn(item)`` draws one item and returns its figure. The static preview is the
    first item. ``items`` may be a dict ``label -> item``; otherwise ``labels`` (or
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
    if widgets is None:
        return Explorer(figure=static, note=note, _update=update)
    dropdown = widgets.Dropdown(
        options=list(zip(labels, range(len(values)))), value=0, description=description
    )
    controls = {"choice": dropdown}
    widget, image, status = _live(update, static, controls, widgets)
    return Explorer(static, widget, note, image, controls, status, update)


def slider_explorer(
    render_fn: Callable[..., Any], static_values: Mapping[str, Any] | None = None, **controls: Any
) -> Explorer:
    """Explore ``render_fn(**values)`` with one control per keyword.

    Each keyword is ``(min, max)`` / ``(min, max, step)`` (an int or float slider), a list of
    numbers (a selection slider) or a list of named options (toggle buttons, or a dropdown
    when there are many). The static preview uses ``static_values`` (default: each control's
    first value), which also set the controls' starting positions.
    """
    if not controls:
        raise ValueError("slider_explorer needs at least one control, e.g. temperature=(0.1, 5.0)")
    values = {name: _initial(name, spec) for name, spec in controls.items()}
    if static_values:
        unknown = set(static_values) - set(controls)
        if unknown:
            raise ValueError(f"static_values names unknown controls: {sorted(unknown)}")
        values.update(static_values)

    def update(**changes: Any) -> Figure:
        values.update(changes)
        return _render(render_fn, **values)

    widgets = _ipywidgets()
    built = {}
    if widgets is not None:  # built first: a bad spec fails before anything is drawn
        for name, spec in controls.items():
            built[name] = _control(widgets, name, spec)
            built[name].value = values[name]
    static = update()
    shown = ", ".join(f"{k}={v}" for k, v in values.items())
    note = f"(static preview at {shown}; run the cell in a live kernel to change it)"
    if widgets is None:
        return Explorer(figure=static, note=note, _update=update)
    widget, image, status = _live(update, static, built, widgets)
    return Explorer(static, widget, note, image, built, status, update)


# ------------------------------------------------------------------ notebook explorers


def bottleneck_explorer(sweep: Mapping[int, Any], *, hidden: int | None = None) -> Explorer:
    """Notebook 01: the bottleneck by source length and hidden size.

    ``sweep`` maps each hidden size H to a result with ``.report.exact`` and ``.report.token``
    (``bucket -> accuracy``, as :func:`course_utils.lessons.nb01_rnn_bottleneck.recipe.hidden_size_sweep` returns).
    Controls: H (a slider over the sizes trained), the length bucket, and the metric. Left:
    accuracy vs source length, the chosen H in bold over the others; right: accuracy vs H at
    the chosen length. A bigger context vector c helps short sentences first: the long ones
    stay out of reach at every size.
    """
    if not sweep:
        raise ValueError("bottleneck_explorer needs a sweep with at least one hidden size")
    sizes = sorted(sweep)
    buckets = list(sweep[sizes[0]].report.exact)
    names = [_bucket_name(b) for b in buckets]
    metrics = {"exact match": "exact", "token acc.": "token"}

    def series(h: int, metric: str) -> list[float]:
        return [100 * v for v in getattr(sweep[h].report, metrics[metric]).values()]

    def render(H: int, length: str, metric: str) -> Figure:
        j = names.index(length)
        fig, (left, right) = plt.subplots(1, 2, figsize=(10.5, 3.6), constrained_layout=True)
        for h in sizes:
            chosen = h == H
            left.plot(
                range(len(buckets)),
                series(h, metric),
                marker="o" if chosen else None,
                lw=2.5 if chosen else 1,
                alpha=1 if chosen else 0.3,
                color="tab:red" if chosen else "tab:gray",
                label=f"H = {h}" if chosen else None,
            )
        left.axvline(j, color="tab:blue", ls=":", lw=1)
        left.set_xticks(range(len(buckets)), names)
        left.set(
            xlabel="source length (words)",
            ylabel=f"{metric} (%)",
            ylim=(0, 102),
            title=f"{metric} vs length (H = {H} in red, other sizes grey)",
        )
        at_length = [series(h, metric)[j] for h in sizes]
        right.plot(sizes, at_length, marker="o", color="tab:blue")
        right.plot([H], [series(H, metric)[j]], marker="o", ms=11, color="tab:red")
        right.set_xscale("log", base=2)
        right.set_xticks(sizes, [str(h) for h in sizes])
        right.set(
            xlabel="hidden size H (the size of c)",
            ylabel=f"{metric} (%)",
            ylim=(0, 102),
            title=f"{metric} on {length}-word sources vs H",
        )
        return fig

    return slider_explorer(
        render,
        static_values={"H": hidden if hidden is not None else sizes[-1], "length": names[-1]},
        H=sizes,
        length=Ordered(names),
        metric=list(metrics),
    )


def _bucket_name(bucket: Any) -> str:
    if isinstance(bucket, tuple) and len(bucket) == 2:
        lo, hi = bucket
        return str(lo) if lo == hi else f"{lo}-{hi}"
    return str(bucket)


def positional_encoding_explorer(
    T: int = 64, D: int = 64, *, base: float = 10000.0, position: int = 10, pair: int = 4
) -> Explorer:
    """Notebook 04: sinusoidal positional encodings by position and frequency.

    Controls: the position ``pos`` (0 .. T-1) and the frequency pair ``i`` (0 .. D/2-1, the
    dimensions 2i and 2i+1, angular frequency ``base^(-2i/D)``). Left: the (T, D) encoding
    matrix with the chosen row and columns marked; middle: sin and cos of pair i over all
    positions (fast wiggles for small i, nearly flat for large i), the chosen position marked;
    right: the dot product of position pos's encoding with every other position's, which
    depends only on the distance and peaks at pos itself.
    """
    import torch

    from course_utils.modeling.positional import sinusoidal_positional_encoding

    if T < 2 or D < 2:
        raise ValueError(f"expected T >= 2 and D >= 2, got T={T}, D={D}")
    pe = sinusoidal_positional_encoding(T, D, base, dtype=torch.float64)
    sims = pe @ pe.T  # (T, T)

    def render(pos: int, i: int) -> Figure:
        fig, (ax0, ax1, ax2) = plt.subplots(1, 3, figsize=(13, 3.5), constrained_layout=True)
        ax0.imshow(pe.numpy(), aspect="auto", cmap="RdBu", vmin=-1, vmax=1)
        ax0.axhline(pos, color="black", lw=1)
        for col in (2 * i, 2 * i + 1):
            if col < D:
                ax0.axvline(col, color="gold", lw=1)
        ax0.set(xlabel="dimension", ylabel="position", title=f"encodings ({T} x {D})")
        freq = base ** (-2 * i / D)
        positions = range(T)
        ax1.plot(positions, pe[:, 2 * i].numpy(), label=f"sin (dim {2 * i})")
        if 2 * i + 1 < D:
            ax1.plot(positions, pe[:, 2 * i + 1].numpy(), label=f"cos (dim {2 * i + 1})")
        ax1.axvline(pos, color="black", lw=1, ls=":")
        period = 2 * math.pi / freq
        ax1.set(
            xlabel="position",
            ylim=(-1.1, 1.1),
            title=f"pair i = {i}: frequency {freq:.3g}, period {period:,.0f} positions",
        )
        ax1.legend(loc="lower left", fontsize=8)
        ax2.plot(positions, sims[pos].numpy(), color="tab:purple")
        ax2.axvline(pos, color="black", lw=1, ls=":")
        ax2.set(
            xlabel="position",
            ylabel="dot product",
            title=f"PE[{pos}] · PE[p]: peaks at p = {pos}",
        )
        return fig

    position = min(max(position, 0), T - 1)
    pair = min(max(pair, 0), (D + 1) // 2 - 1)
    return slider_explorer(
        render, static_values={"pos": position, "i": pair}, pos=(0, T - 1), i=(0, (D + 1) // 2 - 1)
    )
