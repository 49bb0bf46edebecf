"""Gradebook exports an LMS imports as it is: one module per LMS, each with
``write(reports, path, context)`` (registered in :mod:`course_utils.grading.writers`).

Shared rules: one row per student; identities from the ``--roster`` (see
:mod:`course_utils.grading.roster`), the student's name where the roster has none; a
submission whose notebook never ran has a blank score, not 0 (a notebook that never ran is
not a zero; where the LMS already holds a grade for that student, its import preview shows
the change); every text cell goes through :func:`reports.csv_safe`.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from course_utils.grading import reports as rp
from course_utils.grading.report import Report


def score(rep: Report) -> str:
    """The total as the LMS should read it: blank when the notebook never ran."""
    return f"{rep.total:g}" if rep.graded else ""


def assignment_name(reports: list[Report]) -> str:
    """The assignment these reports share (the first one's; the notebook's stem without)."""
    for rep in reports:
        if rep.assignment:
            return rep.assignment
    return Path(reports[0].notebook).stem if reports else "assignment"


def max_points(reports: list[Report]) -> str:
    best = max((r.max for r in reports), default=0)
    return f"{best:g}"


def identity(context: Any, rep: Report, column: str, default: str = "") -> str:
    roster = getattr(context, "roster", None)
    value = roster.get(rep.student, column) if roster is not None else ""
    return value or default


def write_rows(path: Path, header: list[str], rows: list[list[Any]], bom: bool = False) -> None:
    """A CSV (RFC 4180, CRLF) with formula-like cells neutralised, written atomically."""
    buf = io.StringIO(newline="")
    writer = csv.writer(buf)
    writer.writerow(header)
    for row in rows:
        writer.writerow([rp.csv_safe(v) for v in row])
    rp.write_atomic(path, ("\ufeff" if bom else "") + buf.getvalue())


def warn_unmatched(context: Any, reports: list[Report], columns: tuple[str, ...], lms: str) -> None:
    """A warning for every student the LMS could not match (no identity column filled)."""
    missing = [r.student for r in reports if not any(identity(context, r, c) for c in columns)]
    if missing and context is not None:
        shown = ", ".join(missing[:5]) + (
            f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        )
        context.warnings.append(
            f"--{lms}: no {' / '.join(columns)} in --roster for {shown}: {lms} cannot match "
            "those rows to students"
        )
