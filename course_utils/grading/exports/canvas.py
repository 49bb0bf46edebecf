"""Canvas: the gradebook import CSV (Grades > Import).

Format, as Canvas documents it (Canvas Instructor Guide, "How do I import grades in the
Gradebook?", and the gradebook export it mirrors): the header row is ``Student``, ``ID``,
``SIS User ID``, ``SIS Login ID``, ``Section``, then one column per assignment. An
assignment column named ``Name (123)`` updates assignment 123; a column whose name has no
id creates a new assignment on import. Canvas matches rows by ``ID`` (the Canvas user id),
else ``SIS User ID`` / ``SIS Login ID``. A second row whose ``Student`` cell is
``Points Possible`` gives each assignment's maximum (the export writes it; the import reads
it). Blank cells leave a grade unchanged. UTF-8, with or without a byte-order mark.

The assignment column is the assignment's name, plus `` (id)`` when the roster has a
``canvas_assignment_id`` column holding one value (then Canvas updates that assignment).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from course_utils.grading.exports import (
    assignment_name,
    identity,
    max_points,
    score,
    warn_unmatched,
    write_rows,
)
from course_utils.grading.report import Report

HEADER = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]


def column_name(reports: list[Report], context: Any) -> str:
    name = assignment_name(reports)
    roster = getattr(context, "roster", None)
    ids = {r.get("canvas_assignment_id", "") for r in (roster.rows.values() if roster else [])}
    ids.discard("")
    return f"{name} ({ids.pop()})" if len(ids) == 1 else name


def write(reports: list[Report], path: Path, context: Any) -> None:
    rows: list[list[Any]] = [["Points Possible", "", "", "", "", max_points(reports)]]
    for rep in reports:
        rows.append(
            [
                identity(context, rep, "name", rep.student),
                identity(context, rep, "canvas_id"),
                identity(context, rep, "sis_user_id"),
                identity(context, rep, "sis_login_id"),
                identity(context, rep, "section"),
                score(rep),
            ]
        )
    warn_unmatched(context, reports, ("canvas_id", "sis_user_id", "sis_login_id"), "canvas")
    write_rows(
        path, [*HEADER, column_name(reports, context)], rows, bom=getattr(context, "bom", False)
    )
