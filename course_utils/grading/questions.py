"""Graded questions in a submission: read from the answer cells' source, judged here.

A question (:mod:`course_utils.checks.questions`) is graded without the kernel: the answer is
the literal of the last ``answer("NN.Qk", value)`` call in the submission's code cells (in the
answer cell, or wherever the student moved it), read by :mod:`course_utils.authoring.answers`
and judged by :func:`course_utils.checks.questions.check_answer` in the grader's own process.
So an answer cannot be forged from inside the notebook, a kernel that crashes or times out
loses no answer, and answer cells are not executed by the grader (the plan drops them, like
check cells).
"""

from __future__ import annotations

from typing import Any

from course_utils.authoring.answers import NO_ANSWER, read_answer
from course_utils.authoring.cells import cell_source
from course_utils.checks.core import ERROR, NOT_ATTEMPTED, CheckResult
from course_utils.checks.questions import Question, check_answer

__all__ = ["grade_questions", "question_entry", "submitted_answer"]


def submitted_answer(nb: dict[str, Any], question_id: str) -> tuple[Any, str]:
    """``(value, problem)``: the answer the notebook's code cells give to ``question_id``
    (the last call wins, as when the notebook runs); ``NO_ANSWER`` when none gives one."""
    value, problem = NO_ANSWER, ""
    for cell in nb.get("cells", []):
        source = cell_source(cell)
        if cell.get("cell_type") != "code" or question_id not in source:
            continue
        read = read_answer(source, question_id)
        if read.value is not NO_ANSWER or read.problem:
            value, problem = read.value, read.problem
    return value, problem


def question_entry(q: Question, status: str, message: str, points: float = 0) -> dict[str, Any]:
    """A question's line of a grading report (the same keys as an exercise's, plus ``kind``)."""
    return {
        "id": q.id,
        "title": q.title,
        "kind": "question",
        "points": points,
        "max_points": q.points,
        "status": status,
        "message": message,
        "flags": [],
        "runtime_s": 0.0,
    }


def _grade_one(nb: dict[str, Any], q: Question) -> CheckResult:
    value, problem = submitted_answer(nb, q.id)
    if problem:
        return CheckResult(q.id, q.title, ERROR, 0, q.points, problem)
    if value is NO_ANSWER:
        message = f'no answer cell for {q.id}: the cell answer("{q.id}", ...) was deleted'
        return CheckResult(q.id, q.title, NOT_ATTEMPTED, 0, q.points, message)
    try:
        return check_answer(q, value)
    except Exception as exc:  # a broken truth function is the course's fault, not the student's
        message = f"not graded: the question's check failed ({type(exc).__name__}: {exc})"
        return CheckResult(q.id, q.title, ERROR, 0, q.points, message)


def grade_questions(nb: dict[str, Any], questions: list[Question]) -> list[dict[str, Any]]:
    """One report entry per question of the assignment, judged from ``nb``'s source."""
    entries = []
    for q in questions:
        r = _grade_one(nb, q)
        entry = question_entry(q, r.status, r.message, r.points)
        if r.mistake:  # the misconception behind a wrong letter, for the class report
            entry["mistake"] = r.mistake
        entries.append(entry)
    return entries
