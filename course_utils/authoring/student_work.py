"""A student's work in a notebook, found before anything overwrites it.

``course release`` writes ``notebooks/`` from ``solutions/``; a student works in the very same
files. Before a notebook is replaced, :func:`work_at_risk` compares the file on disk with the
version about to be written and names every cell whose content would be lost:

* an exercise cell (by the one rule of :mod:`course_utils.authoring.cells`: ``course.role``
  metadata, else tag, else ``ex-NN-k`` cell id) whose source differs from the released stub:
  the student's answer;
* an answer cell of a graded question (``answer("06.Q1", ...)``) whose source differs from the
  released one: the student's answer to it;
* a cell whose id the release does not have, with any source: a cell the student added (an
  answer split over extra cells, notes, experiments).

Outputs, execution counts and edits of the course's own prose or demo cells are not counted:
running a notebook or an instructor's update of its text must not block a release. A file
that cannot be read as a notebook is reported as at risk too: nobody can tell what it holds.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from course_utils.authoring.cells import ANSWER, EXERCISE, cell_role, cell_source, exercise_id

__all__ = ["work_at_risk", "describe"]


def _first_line(source: str, width: int = 60) -> str:
    line = next((x.strip() for x in source.splitlines() if x.strip()), "")
    return line if len(line) <= width else line[: width - 1] + "…"


def work_at_risk(current: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """One line per cell of notebook ``current`` whose content replacing it by ``new`` would
    lose (both parsed ``.ipynb`` dicts); empty when nothing of the student's is lost."""
    new_cells = {c.get("id"): c for c in new.get("cells", []) if isinstance(c, Mapping)}
    lost: list[str] = []
    for index, cell in enumerate(current.get("cells", [])):
        if not isinstance(cell, Mapping):
            continue
        cid, source = cell.get("id"), cell_source(cell)
        released = new_cells.get(cid) if cid else None
        label = f"cell {index + 1}" + (f" ({cid!r})" if cid else "")
        if released is None:
            if source.strip():
                lost.append(f"{label}: a cell you added: {_first_line(source)!r}")
        elif cell_role(cell) in (EXERCISE, ANSWER) and source != cell_source(released):
            ex_id = exercise_id(cell)
            kind = "question" if cell_role(cell) == ANSWER else "exercise"
            what = f"{kind} {ex_id}" if ex_id else f"an {kind} cell"
            lost.append(f"{label}: your answer to {what}")
    return lost


def describe(path: str | Path, new_text: str) -> list[str]:
    """:func:`work_at_risk` for the notebook file at ``path`` against the text about to replace
    it; a file that is not a readable notebook is reported as at risk."""
    path = Path(path)
    try:
        current = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(current, dict) or not isinstance(current.get("cells"), list):
            raise ValueError("no 'cells' list")
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return [f"the file is not a readable notebook ({exc}); it may hold your work"]
    return work_at_risk(current, json.loads(new_text))
