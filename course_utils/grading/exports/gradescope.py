"""Gradescope: the score upload of an offline assignment.

Format, from what Gradescope documents and writes (read for this module):

- https://help.gradescope.com/article/w59nl02vyt-instructor-course-add-members (the course
  roster, which score uploads are matched against): a member is a name (one full-name
  column, or first and last) and an email, unique per member; an SID column is optional.
- Gradescope's own score export names its columns ``Name``, ``SID``, ``Email`` and
  ``Total Score`` (scripts that read it rely on exactly these, e.g.
  https://gist.github.com/havron/554d0ffaec20a466a7f8ecca4d76c5da).
- Gradescope Help, "Uploading scores for an offline assignment" (by name: its page was not
  among what could be retrieved for this check).

So one row per student with ``Name``, ``SID``, ``Email``, ``Total Score``: matched by
``Email`` (unique on the roster), else ``SID``; a blank ``Total Score`` leaves the student
without a score. ``tests/test_lms_formats.py`` reads the file back with those rules.
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
