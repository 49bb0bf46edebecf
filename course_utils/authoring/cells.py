"""The notebook-cell schema, read in one place: a cell's source, role and exercise id.

Every tool that asks "is this cell an exercise or a check, and of which exercise?" asks here:
``course release`` (:mod:`course_utils.authoring.release`), the student-work guard
(:mod:`course_utils.authoring.student_work`) and the grader (:mod:`course_utils.grading.plan`).
So a cell release treats as an exercise is one the grader grades and the guard protects.

A course cell carries its role three ways; the first one present decides:

1. **metadata** ``"course": {"role": "exercise" | "check" | "answer", "id": "NN.k", "points": p}``
   -- the schema itself; it names the exercise (or the question, ``"NN.Qk"``) and its points;
2. **tag** ``exercise``, ``check`` or ``answer`` (visible in JupyterLab's property inspector, as
   in nbgrader); a cell tagged ``check`` and another role is a check cell (its code must never
   run as an answer), one tagged ``answer`` and ``exercise`` an answer cell;
3. **cell id** ``ex-NN-k``, ``check-NN-k`` or ``answer-NN-Qk``, the ids ``course release``
   keeps: they survive tools that drop custom metadata and tags.

An *answer* cell holds the student's answer to a graded question
(:mod:`course_utils.checks.questions`): ``answer("06.Q1", "b")``.

A ``course.role`` that is none of these counts as absent (release reports it). The exercise id
is ``course.id`` when it is a string, else the one in the cell id (``ex-03-1`` -> ``"03.1"``,
``answer-06-Q1`` -> ``"06.Q1"``), else ``None``, whatever the role. Solutions state all three ways
and ``course release`` rejects any disagreement between metadata and tags, so the precedence
only matters for a notebook someone else edited or saved with another tool.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

__all__ = [
    "EXERCISE",
    "CHECK",
    "ANSWER",
    "ROLES",
    "cell_source",
    "cell_tags",
    "course_metadata",
    "cell_role",
    "role_origin",
    "exercise_id",
]

EXERCISE: Literal["exercise"] = "exercise"
CHECK: Literal["check"] = "check"
ANSWER: Literal["answer"] = "answer"
ROLES = (EXERCISE, CHECK, ANSWER)
Role = Literal["exercise", "check", "answer"]

_LEGACY_ID = re.compile(r"(ex|check)-(\d+)-(\d+)|(answer)-(\d+)-(Q\d+)")
_LEGACY_ROLE = {"ex": EXERCISE, "check": CHECK, "answer": ANSWER}


def cell_source(cell: Mapping[str, Any]) -> str:
    """A cell's source as one string (nbformat stores it as a string or a list of lines)."""
    src = cell.get("source", "")
    if isinstance(src, list):
        return "".join(str(line) for line in src)
    return "" if src is None else str(src)


def _metadata(cell: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = cell.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def cell_tags(cell: Mapping[str, Any]) -> list[str]:
    """The cell's ``metadata.tags`` (empty when missing or malformed)."""
    tags = _metadata(cell).get("tags")
    return [t for t in tags if isinstance(t, str)] if isinstance(tags, list) else []


def course_metadata(cell: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the cell's ``metadata.course`` mapping (empty when missing or malformed)."""
    course = _metadata(cell).get("course")
    return dict(course) if isinstance(course, Mapping) else {}


def _legacy_id(cell: Mapping[str, Any]) -> re.Match[str] | None:
    cid = cell.get("id")
    return _LEGACY_ID.fullmatch(cid) if isinstance(cid, str) else None


def role_origin(cell: Mapping[str, Any]) -> tuple[Role | None, str | None]:
    """``(role, what decided it)``: the role as :func:`cell_role` gives it and
    ``"metadata"``, ``"tag"`` or ``"cell id"`` (``(None, None)`` for a plain cell)."""
    role = course_metadata(cell).get("role")
    if role in ROLES:
        return role, "metadata"
    tags = cell_tags(cell)
    if CHECK in tags:
        return CHECK, "tag"
    if ANSWER in tags:
        return ANSWER, "tag"
    if EXERCISE in tags:
        return EXERCISE, "tag"
    legacy = _legacy_id(cell)
    if legacy:
        return _LEGACY_ROLE[legacy.group(1) or legacy.group(4)], "cell id"
    return None, None


def cell_role(cell: Mapping[str, Any]) -> Role | None:
    """``"exercise"``, ``"check"``, ``"answer"`` or ``None`` (a plain cell), by the module's
    precedence: ``course.role`` metadata, then the ``check``/``answer``/``exercise`` tag, then
    the cell id."""
    return role_origin(cell)[0]


def exercise_id(cell: Mapping[str, Any]) -> str | None:
    """The exercise (or question) a cell belongs to: ``course.id`` if a string, else from an
    ``ex-NN-k`` / ``check-NN-k`` / ``answer-NN-Qk`` cell id (``"NN.k"``, ``"NN.Qk"``), else
    ``None``."""
    ex_id = course_metadata(cell).get("id")
    if isinstance(ex_id, str):
        return ex_id
    legacy = _legacy_id(cell)
    if legacy is None:
        return None
    if legacy.group(4):
        return f"{legacy.group(5)}.{legacy.group(6)}"
    return f"{legacy.group(2)}.{legacy.group(3)}"
