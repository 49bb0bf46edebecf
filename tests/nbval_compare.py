"""nbval's comparison of stored and fresh cell outputs, applied to a notebook executed elsewhere.

The test suite executes each solution notebook once, through the official grader (``course grade
--executed``); this module compares that run's outputs with the ones stored in the notebook using
nbval's own code (``coalesce_streams``, ``IPyNbCell.compare_outputs``, the sanitize patterns of
``tests/nbval_sanitize.cfg``), so "passes nbval" keeps nbval's meaning without a second execution:

- cells tagged ``nbval-ignore-output`` run but are not compared, ``nbval-skip`` cells are not
  compared either (the grader runs every cell);
- stream text (after folding ``\\r`` updates), every MIME type except images and widget views;
- figures are left out on both sides: the grader's kernel is headless (``MPLBACKEND=Agg``), so it
  shows no figure, and nbval compared only their ``<Figure size ...>`` placeholder anyway;
- check cells are not compared: the grader judges them (the test asks for full marks).
"""

from __future__ import annotations

import copy
from pathlib import Path
from types import SimpleNamespace

import nbformat
from nbval.plugin import IPyNbCell, coalesce_streams, get_sanitize_patterns, nocolors

SANITIZE = Path(__file__).with_name("nbval_sanitize.cfg")
NOT_COMPARED_TAGS = ("nbval-ignore-output", "nbval-skip", "check", "answer")
_IMAGES = ("image/png", "image/jpeg", "image/svg+xml")


# nbval's own list (IPyNbFile.__init__), with its default exclusion of images
SKIP_COMPARE = (
    "metadata",
    "traceback",
    "prompt_number",
    "output_type",
    "name",
    "execution_count",
    "application/vnd.jupyter.widget-view+json",
    "image/png",
    "image/jpeg",
)


def _is_figure(output) -> bool:
    return output.get("output_type") in ("display_data", "execute_result") and any(
        k in output.get("data", {}) for k in _IMAGES
    )


def _restored(output: dict) -> dict:
    """An executed output with the markup ``--executed`` keeps inert (``grader_inert``, never
    rendered) back in its data, so it is compared like the stored one."""
    inert = (output.get("metadata") or {}).get("grader_inert")
    if not inert:
        return output
    data = dict(output.get("data", {}))
    if data.get("text/plain") == "[markup output kept inert by the grader]":
        del data["text/plain"]  # the placeholder of an output that was markup only
    return dict(output, data={**data, **inert})


def _comparable(outputs) -> list:
    outputs = [_restored(o) for o in outputs]
    kept = [nbformat.from_dict(copy.deepcopy(o)) for o in outputs if not _is_figure(o)]
    return coalesce_streams(kept)


def _comparer(patterns, found: list[str]) -> SimpleNamespace:
    """The few attributes ``IPyNbCell.compare_outputs`` reads from ``self`` (nbval's own
    ``sanitize``); a mismatch is described into ``found``."""
    me = SimpleNamespace(
        parent=SimpleNamespace(skip_compare=SKIP_COMPARE, sanitize_patterns=patterns),
        colors=nocolors,
        comparison_traceback=[],
        format_output_compare=lambda key, left, right: found.append(_format(key, left, right)),
    )
    me.sanitize = lambda s: IPyNbCell.sanitize(me, s)
    return me


def _format(key, left, right) -> str:
    return f" mismatch {key!r}\n  stored:   {left!r}\n  executed: {right!r}"


def mismatches(stored: dict, executed: dict, sanitize: Path = SANITIZE) -> list[str]:
    """Every compared cell of ``stored`` whose outputs differ from ``executed``'s run of it.

    ``executed`` is a notebook written by ``course grade --executed`` (cells carry
    ``metadata.grader.cell``); a compared cell the grader did not run is a mismatch too.
    """
    patterns = dict(get_sanitize_patterns(sanitize.read_text(encoding="utf-8")))
    ran = {
        c["metadata"]["grader"]["cell"]: c
        for c in executed["cells"]
        if c.get("cell_type") == "code" and "grader" in c.get("metadata", {})
    }
    problems = []
    for i, cell in enumerate(stored["cells"]):
        tags = cell.get("metadata", {}).get("tags", [])
        if cell["cell_type"] != "code" or any(t in tags for t in NOT_COMPARED_TAGS):
            continue
        if i not in ran:
            problems.append(f"cell {i}: not executed by the grader")
            continue
        found: list[str] = []
        me = _comparer(patterns, found)
        same = IPyNbCell.compare_outputs(
            me, _comparable(ran[i].get("outputs", [])), _comparable(cell.get("outputs", []))
        )
        if not same:
            detail = "\n".join(found or [str(x) for x in me.comparison_traceback])
            source = "".join(cell["source"])[:200]
            problems.append(f"cell {i} ({source!r}):\n{detail}")
    return problems
