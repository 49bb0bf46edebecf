"""Gradescope: the score upload of an offline assignment.

Format, as Gradescope documents it (Gradescope Help, "Uploading scores for an offline
assignment" / the CSV template it offers there): one row per student with ``Name``,
``SID``, ``Email`` and ``Total Score``; Gradescope matches a row to a roster member by
``Email`` (else ``SID``), and a blank ``Total Score`` leaves the student without a score.
Students not on the Gradescope roster are reported by Gradescope and skipped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from course_utils.grading.exports import identity, score, warn_unmatched, write_rows
from course_utils.grading.report import Report

HEADER = ["Name", "SID", "Email", "Total Score"]


def write(reports: list[Report], path: Path, context: Any) -> None:
    rows = [
        [
            identity(context, rep, "name", rep.student),
            identity(context, rep, "sid"),
            identity(context, rep, "email"),
            score(rep),
        ]
        for rep in reports
    ]
    warn_unmatched(context, reports, ("email", "sid"), "gradescope")
    write_rows(path, HEADER, rows, bom=getattr(context, "bom", False))
