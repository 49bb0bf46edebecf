"""Grade one submission: plan, execute in a sandboxed kernel, harvest, judge, report.

:func:`grade_submission` never raises for anything a submission can do; it returns the report
(a JSON-ready dict, see :mod:`course_utils.grading`). Problems of the grading machine itself
(no kernel can start, a reference without a registered check) are reported with
``error_kind = "grader"`` so the CLI can tell them apart from bad submissions.
"""

from __future__ import annotations

import os
import secrets
import sys
import time
from pathlib import Path
from typing import Any

from course_utils.checks.core import ERROR
from course_utils.grading.executed import ACTIVE_MIMES, inert, write_executed
from course_utils.grading.intake import (
    COPY_MAX_FILE,
    COPY_MAX_FILES,
    COPY_MAX_TOTAL,
    MAX_FOLDER_ENTRIES,
    MAX_JSON_STRINGS,
    MAX_SUBMISSION_BYTES,
    admit,
    copy_submission_dir,
    review_submission,
)
from course_utils.grading.judge import (
    KERNEL_FLAGS,
    MAX_MESSAGE,
    apply_flag_policy,
    check_exercise,
    clip,
    new_entry,
    trusted_flags,
)
from course_utils.grading.kernel import GradingKernel, KernelStartError, OutputBudget
from course_utils.grading.plan import (
    Assignment,
    BadSubmission,
    NoAssignment,
    exercise_table,
    id_key,
    read_notebook,
    reference_dirs,
    resolve_assignment,
)
from course_utils.grading.questions import grade_questions, question_entry
from course_utils.grading.reports import one_line as terminal_name
from course_utils.grading.runner import (
    NOT_SANDBOXED,
    make_sandbox,
    make_sandbox_check,
    start_kernel,
)
from course_utils.grading.runner import run_plan as _run
from course_utils.grading.state import GradeOptions, Run

# Re-exported: the grader's pieces by their old names (tests, the sandbox's own probes).
_copy_submission_dir = copy_submission_dir
_Run, _inert, _start_kernel, _clip, _entry = Run, inert, start_kernel, clip, new_entry
__all__ = [
    "ACTIVE_MIMES",
    "COPY_MAX_FILE",
    "COPY_MAX_FILES",
    "COPY_MAX_TOTAL",
    "KERNEL_FLAGS",
    "MAX_FOLDER_ENTRIES",
    "MAX_JSON_STRINGS",
    "MAX_MESSAGE",
    "MAX_SUBMISSION_BYTES",
    "NOT_SANDBOXED",
    "GradeOptions",
    "GradingKernel",
    "KernelStartError",
    "OutputBudget",
    "Run",
    "_Run",
    "_inert",
    "_start_kernel",
    "_clip",
    "_entry",
    "_copy_submission_dir",
    "inert",
    "start_kernel",
    "write_executed",
    "admit",
    "apply_flag_policy",
    "check_exercise",
    "clean_text",
    "grade_submission",
    "lost_report",
    "make_sandbox",
    "make_sandbox_check",
    "read_notebook",
    "review_submission",
    "terminal_name",
    "trusted_flags",
]

GRADER_VERSION = 1


def clean_text(value: Any) -> Any:
    """``value`` (a report, or any part of one) with every string made encodable as UTF-8.

    Student text reaches a report from exception messages, outputs and file names; a lone
    surrogate in any of them (``ValueError("\\ud800")``, a folder named ``b"bob\\xff"``)
    would make a writer's ``encode("utf-8")`` raise and cost the whole batch its gradebook
    (SURROGATE). Such characters become visible ``\\udXXX`` escapes; keys are cleaned too.
    """
    if isinstance(value, str):
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {clean_text(k): clean_text(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_text(v) for v in value]
    return value


def _skeleton(path: str, seed: int | None) -> dict[str, Any]:
    return {
        "notebook": str(path),
        "student": terminal_name(Path(path).stem),
        "assignment": None,
        "total": 0,
        "max": 0,
        "percent": 0.0,
        "exercises": [],
        "flags": [],
        "notes": [],
        "error": None,
        "error_kind": None,
        "kernel": {"status": "not_started", "detail": ""},
        "cells": {"executed": 0, "errors": [], "not_run": 0},
        "output": {"bytes_seen": 0, "bytes_kept": 0, "truncated": False},
        "seed": seed,
        "runtime_s": 0.0,
        "reference": None,
        "sandbox": None,
        "grader_version": GRADER_VERSION,
    }


def _peak_rss_mb() -> float:
    """This grading process's own peak resident memory (MiB)."""
    try:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return round(peak / (2**20 if sys.platform == "darwin" else 1024), 1)
    except (ImportError, OSError):
        return 0.0


def _finish(report: dict[str, Any], t0: float) -> dict[str, Any]:
    report["total"] = _num(sum(e["points"] for e in report["exercises"]))
    report["max"] = _num(sum(e["max_points"] for e in report["exercises"]))
    report["percent"] = round(100.0 * report["total"] / report["max"], 2) if report["max"] else 0.0
    report["flags"] = [f"{e['id']}: {f}" for e in report["exercises"] for f in e["flags"]]
    report["runtime_s"] = round(time.monotonic() - t0, 3)
    report["grader_peak_rss_mb"] = _peak_rss_mb()
    # every report leaves the grader encodable (the path stays as given: --similarity rereads it)
    return {k: v if k == "notebook" else clean_text(v) for k, v in report.items()}


def _num(x: float) -> float | int:
    return int(x) if float(x).is_integer() else round(float(x), 4)


def grade_submission(
    path: str | os.PathLike, options: GradeOptions | None = None
) -> dict[str, Any]:
    """Grade ``path`` and return its report (never raises for a bad submission)."""
    opts = options or GradeOptions()
    t0 = time.monotonic()
    path = str(path)
    seed = opts.seed if opts.seed is not None else secrets.randbits(32)
    report = _skeleton(path, seed)
    try:
        table = exercise_table(opts.checks_modules)
    except Exception as exc:
        report.update(
            error=f"could not load the exercise checks: {type(exc).__name__}: {exc}",
            error_kind="grader",
        )
        return _finish(report, t0)

    nb: dict[str, Any] | None = None
    bad: str | None = None
    try:
        bad = admit(path)
        nb = read_notebook(path) if bad is None else None
    except BadSubmission as exc:
        bad = str(exc)
    try:
        assignment = resolve_assignment(
            path, nb, dirs=reference_dirs(opts.reference_dir), table=table, forced=opts.assignment
        )
    except NoAssignment as exc:
        _no_assignment(report, path, opts, table, bad or str(exc))
        return _finish(report, t0)
    except BadSubmission as exc:  # the reference notebook itself is unreadable
        report.update(error=f"reference notebook: {exc}", error_kind="grader")
        return _finish(report, t0)

    report["assignment"] = assignment.name
    report["reference"] = assignment.reference_path
    if bad is not None or nb is None:
        report.update(error=bad, error_kind="bad_input")
        report["exercises"] = [
            new_entry(g, ERROR, bad or "unreadable") for g in assignment.exercises
        ]
        report["exercises"] += _question_errors(assignment, bad or "unreadable")
        return _finish(report, t0)
    if assignment.problems:
        report["notes"].append(
            "no check is registered for exercise(s) "
            + ", ".join(assignment.problems)
            + ": not graded"
        )
        report["error_kind"] = "grader"
        report["error"] = "the course installation lacks checks for " + ", ".join(
            assignment.problems
        )

    _run(nb, assignment, report, opts, seed, path)
    report["exercises"].extend(_grade_questions(nb, assignment, opts, path))
    for ex_id in assignment.problems:  # count them, so the maximum stays honest
        report["exercises"].append(
            {
                "id": ex_id,
                "title": "(no check registered)",
                "points": 0,
                "max_points": _reference_points(assignment, ex_id),
                "status": ERROR,
                "message": "not graded: the installed course has no check for this exercise "
                "(a problem of the grading setup, not of your notebook)",
                "flags": [],
                "runtime_s": 0.0,
            }
        )
    report["exercises"].sort(key=lambda e: id_key(e["id"]))
    return _finish(report, t0)


def _grade_questions(nb, assignment: Assignment, opts: GradeOptions, path: str) -> list:
    """The questions' entries: with the instructor's keys (``opts.keys``), for the student's
    identity (``opts.student``, or the submission's folder name in a batch)."""
    folder = Path(path).resolve().parent.name if opts.student_by_folder else None
    student = opts.student or folder
    return grade_questions(nb, assignment.questions, keys=opts.keys, student=student)


def _question_errors(assignment: Assignment, message: str) -> list[dict[str, Any]]:
    """The assignment's questions, ungraded (the submission could not be read)."""
    return [question_entry(q, ERROR, clip(message)) for q in assignment.questions]


def _no_assignment(report, path: str, opts: GradeOptions, table, error: str) -> None:
    """A submission of no known assignment: bad input; with ``--assignment``, zero for every
    exercise of the required one."""
    report.update(error=error, error_kind="bad_input")
    if not opts.assignment:
        return
    try:
        forced = resolve_assignment(
            path, None, dirs=reference_dirs(opts.reference_dir), table=table, forced=opts.assignment
        )
        report["assignment"] = forced.name
        report["exercises"] = [new_entry(g, ERROR, report["error"]) for g in forced.exercises]
        report["exercises"] += _question_errors(forced, report["error"])
    except NoAssignment:
        report["error_kind"] = "usage"


def _reference_points(assignment: Assignment, ex_id: str) -> float:
    for cell in (assignment.reference or {}).get("cells", []):
        course = cell.get("metadata", {}).get("course")
        if isinstance(course, dict) and course.get("id") == ex_id:
            points = course.get("points")
            if isinstance(points, (int, float)) and points >= 0:
                return points
    return 0


def lost_report(path: str | os.PathLike, options: GradeOptions | None, why: str) -> dict[str, Any]:
    """The report of a submission whose grading process died: zero for every exercise of its
    assignment (when it can still be told), ``error_kind = "grader"``."""
    opts = options or GradeOptions()
    report = _skeleton(str(path), None)
    message = (
        f"not graded: the grading process of this submission died ({why}); was it "
        f"killed by the submission itself?"
    )
    report.update(error=message, error_kind="grader")
    try:
        table = exercise_table(opts.checks_modules)
        try:
            nb = read_notebook(path) if admit(path) is None else None
        except BadSubmission:
            nb = None
        assignment = resolve_assignment(
            str(path),
            nb,
            dirs=reference_dirs(opts.reference_dir),
            table=table,
            forced=opts.assignment,
        )
        report["assignment"] = assignment.name
        report["exercises"] = [new_entry(g, ERROR, message) for g in assignment.exercises]
        # the answers are in the notebook's source: the lost process cost none of them
        report["exercises"] += (
            _grade_questions(nb, assignment, opts, str(path))
            if nb is not None
            else _question_errors(assignment, message)
        )
    except Exception:
        pass
    return _finish(report, time.monotonic())
