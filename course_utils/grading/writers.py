"""The registry of report writers: one entry per ``course grade --<name>`` option.

Each writer turns the batch's reports (typed and cleaned by
:class:`course_utils.grading.report.Report`) into one file or one folder. ``course grade``
generates its report options from :data:`WRITERS`, and :func:`write_requested` runs every
requested writer independently: one that fails (a folder it cannot create, a bug) prints one
line and costs no other writer its file. Every file is written atomically (a temporary file,
then a rename).

To add an export: write ``course_utils/grading/exports/<lms>.py`` with a
``write(reports, path, context)`` function and register it below.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from course_utils.grading import reports as rp
from course_utils.grading.report import Report, as_reports


@dataclass
class WriteContext:
    """What a writer may need besides the reports: the CSV byte-order mark, the roster
    (student -> LMS identities), warnings a writer leaves for the terminal."""

    bom: bool = False
    roster: Any = None  # course_utils.grading.roster.Roster, or None
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Writer:
    """One report format: the ``--<name>`` option, its help, and the function writing it."""

    name: str
    help: str
    write: Callable[[list[Report], Path, WriteContext], Any]
    directory: bool = False

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")


def _json(reports, path, ctx):
    rp.write_json(reports, path)


def _junit(reports, path, ctx):
    rp.write_junit(reports, path)


def _csv(reports, path, ctx):
    rp.write_csv(reports, path, bom=ctx.bom)


def _classroom(reports, path, ctx):
    rp.write_classroom(reports, path)


def _feedback(reports, path, ctx):
    rp.write_feedback(reports, path)


def _report(reports, path, ctx):
    rp.write_instructor_report(reports, path)


def _lms(module: str) -> Callable[[list[Report], Path, WriteContext], Any]:
    def write(reports, path, ctx):
        import importlib

        importlib.import_module(f"course_utils.grading.exports.{module}").write(reports, path, ctx)

    return write


def _class_report(reports, path, ctx):
    from course_utils.grading.class_report import write_class_report

    write_class_report(reports, path)


WRITERS: dict[str, Writer] = {
    w.name: w
    for w in (
        Writer("json", "JSON report (an array for several submissions)", _json),
        Writer("junit", "JUnit XML, exercise ids as test names", _junit),
        Writer("csv", "CSV gradebook, one row per submission (--bom for Excel)", _csv),
        Writer(
            "classroom",
            "GitHub Classroom autograding result (JSON; base64 it into <RUNNER>_RESULTS "
            "for autograding-grading-reporter)",
            _classroom,
        ),
        Writer("feedback", "Markdown feedback, one file per student", _feedback, True),
        Writer("report", "the instructor's Markdown summary (scores, sandbox, problems)", _report),
        Writer("canvas", "Canvas gradebook import CSV (identities from --roster)", _lms("canvas")),
        Writer(
            "gradescope",
            "Gradescope offline-assignment score upload CSV (identities from --roster)",
            _lms("gradescope"),
        ),
        Writer(
            "moodle",
            "Moodle grade import CSV with feedback (identities from --roster)",
            _lms("moodle"),
        ),
        Writer(
            "class-report",
            "the class at a glance: an offline HTML page with plots (scores, pass rates, "
            "named mistakes, hardest cases)",
            _class_report,
            True,
        ),
    )
}


def add_writer_arguments(group) -> None:
    """``--<name> F`` (or ``DIR``) for every registered writer."""
    for w in WRITERS.values():
        group.add_argument(
            f"--{w.name}", dest=w.dest, metavar="DIR" if w.directory else "F", help=w.help
        )


def requested(args: argparse.Namespace) -> list[tuple[Writer, str]]:
    """The writers the command line asks for, with their targets."""
    return [(w, getattr(args, w.dest)) for w in WRITERS.values() if getattr(args, w.dest, None)]


def write_requested(
    args: argparse.Namespace, reports: list[Any], context: WriteContext | None = None
) -> bool:
    """Write every report the command line asks for, each independently; False (after one
    line per failure on stderr) when any could not be written."""
    context = context or WriteContext()
    typed = as_reports(reports)
    ok = True
    for writer, target in requested(args):
        try:
            path = Path(target)
            (path if writer.directory else path.parent).mkdir(parents=True, exist_ok=True)
            writer.write(typed, path, context)
        except Exception as exc:  # noqa: BLE001 - one writer's failure costs no other's file
            detail = rp.one_line(f"{type(exc).__name__}: {exc}")[:300]
            print(f"course grade: cannot write --{writer.name} {target}: {detail}", file=sys.stderr)
            ok = False
    for warning in dict.fromkeys(context.warnings):
        print(f"course grade: {warning}", file=sys.stderr)
    return ok
