"""Moodle: the gradebook's CSV import (Grade administration > Import > CSV file).

Format, as Moodle documents it (MoodleDocs, "Import grades", and the "Plain text file"
grade export whose header it reads back): a header row; the importer maps one identity
column ("Identify user by": ``Email address``, ``ID number`` or ``Username``) and each grade
column to a grade item ("Grade item mappings"); a column ``<item> (Feedback)`` maps to that
item's feedback. The columns written here are those of Moodle's own export: ``First name``,
``Last name``, ``ID number``, ``Username``, ``Email address``, ``Assignment: NAME (Real)``
and ``Assignment: NAME (Feedback)``. A blank grade is skipped by the import.
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


def write(reports: list[Report], path: Path, context: Any) -> None:
    name = assignment_name(reports)
    rows = []
    for rep in reports:
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
    warn_unmatched(context, reports, ("email", "id_number", "username"), "moodle")
    header = [*IDENTITY, f"Assignment: {name} (Real)", f"Assignment: {name} (Feedback)"]
    write_rows(path, header, rows, bom=getattr(context, "bom", False))
