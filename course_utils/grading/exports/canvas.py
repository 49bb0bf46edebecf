"""Canvas: the gradebook import CSV (Grades > Import).

Format, from Canvas's own importer and a Canvas guide (read for this module):

- https://github.com/instructure/canvas-lms/blob/master/app/models/gradebook_importer.rb
  (the code that reads the file): the header must start ``Student``, ``ID``, then
  ``SIS User ID``, ``SIS Login ID`` (optional, in that order), and the student columns must
  end with ``Section``; every later column is an assignment, ``Name (123)`` updating
  assignment 123 and a name without an id creating a new assignment; a row whose first cell
  contains ``Points Possible`` sets each assignment's maximum; a student is found by ``ID``
  (the Canvas user id), else by ``SIS User ID`` / ``SIS Login ID``, else by the ``Student``
  cell equal to their name or sortable name; each grade is compared with the one Canvas
  has, so a blank cell for a student without a grade is no change. ``,`` or ``;`` separated; a UTF-8 byte-order mark does not break the header (it is matched, not compared).
- https://teaching.resources.osu.edu/toolsets/carmencanvas/guides/calculating-final-grades/import-csv-file-carmen-grades
  (a university's guide to the same import): Student Name, ID, SIS User ID, SIS Login ID,
  Section, then one column per assignment; a new assignment column creates an assignment.
- Canvas Instructor Guide, "How do I import grades in the Gradebook?" (by name: its page was
  not among what could be retrieved for this check).

``tests/test_lms_formats.py`` reads what this module writes the way the importer above does.
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
