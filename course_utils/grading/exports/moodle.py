"""Moodle: the gradebook's CSV import (Grade administration > Import > CSV file).

Format, from MoodleDocs and Moodle's own export (read for this module):

- https://docs.moodle.org/311/en/Grade_import : "the import file format is the same as the
  corresponding export format"; after the upload the teacher maps one identity column
  ("Map from" a column, "Map to" ``useremail``, ``useridnumber``, ``username`` or ``userid``)
  and each grade column to a grade item; importing an item's feedback overwrites its grades,
  so a feedback column must come with its grade column (Note 3 there).
- https://github.com/moodle/moodle/blob/main/grade/export/lib.php (``format_column_name``)
  and ``grade/export/txt/grade_export_txt.php``: the plain-text export writes the user's
  profile fields (``First name``, ``Last name``, ``ID number``, ..., ``Email address``),
  then per item ``<Module>: <item> (Real)`` and, with feedback, ``<Module>: <item>
  (Feedback)`` (the ``gradeexportcolumntype`` string, ``{name} ({extra})``).

The columns written here are those: ``First name``, ``Last name``, ``ID number``,
``Username``, ``Email address``, ``Assignment: NAME (Real)``, ``Assignment: NAME
(Feedback)``. ``tests/test_lms_formats.py`` reads the file back with those rules.

Two rules of the importer (``grade/import/csv/classes/load_data.php``,
``prepare_import_grade_data``) decide which rows are written: a row whose mapped identity
cell is blank keeps the *previous* row's student (the importer does not reset it between
rows), and a first row without one, or an identity Moodle does not know, aborts the whole
import. So a student without any identity in the roster is left out of the file (and named
in a warning), and the warning names the identity columns every written row fills: map
"Identify user by" to one of those. A blank grade is imported as "no grade".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from course_utils.grading.exports import (
    assignment_name,
    identity,
    score,
    warn_unmatched,
    write_rows,
)
from course_utils.grading.report import Report

IDENTITY = ["First name", "Last name", "ID number", "Username", "Email address"]


def feedback_line(rep: Report) -> str:
    """The short feedback Moodle shows beside the grade: points per item, and any problem."""
    parts = [f"{e.id} {e.points:g}/{e.max_points:g}" for e in rep.exercises]
    if rep.error:
        parts.insert(0, "not graded: " + " ".join(rep.error.split())[:200])
    return "; ".join(parts)


# roster column -> the header of the column it fills, in the order "Identify user by" offers
IDENTITIES = {"email": "Email address", "id_number": "ID number", "username": "Username"}


def write(reports: list[Report], path: Path, context: Any) -> None:
    name = assignment_name(reports)
    known = [r for r in reports if any(identity(context, r, c) for c in IDENTITIES)]
    warn_unmatched(context, reports, tuple(IDENTITIES), "moodle")
    rows = []
    for rep in known:
        full = identity(context, rep, "name", rep.student)
        first, _, last = full.partition(" ")
        rows.append(
            [
                first,
                last,
                identity(context, rep, "id_number"),
                identity(context, rep, "username"),
                identity(context, rep, "email"),
                score(rep),
                feedback_line(rep),
            ]
        )
    filled = {h: sum(bool(identity(context, r, c)) for r in known) for c, h in IDENTITIES.items()}
    everyone = [h for h, n in filled.items() if n == len(known)]
    partial = [h for h, n in filled.items() if 0 < n < len(known)]
    if known and context is not None and (partial or not everyone):
        context.warnings.append(
            f"--moodle: {', '.join(partial) or 'no identity column'} is blank in some rows, and "
            "Moodle gives such a row the previous row's student: "
            + (
                f"identify users by {' or '.join(everyone)} (every row has it)"
                if everyone
                else "complete the roster"
            )
        )
    header = [*IDENTITY, f"Assignment: {name} (Real)", f"Assignment: {name} (Feedback)"]
    write_rows(path, header, rows, bom=getattr(context, "bom", False))
