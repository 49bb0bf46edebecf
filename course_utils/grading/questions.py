"""Graded questions in a submission: read from the answer cells' source, judged here.

A question (:mod:`course_utils.checks.questions`) is graded without the kernel: the answer is
the literal of the last ``answer("NN.Qk", value)`` call in the submission's code cells (in the
answer cell, or wherever the student moved it), read by :mod:`course_utils.checks.answers`
and judged by :func:`course_utils.checks.questions.check_answer` in the grader's own process.
So an answer cannot be forged from inside the notebook, a kernel that crashes or times out
loses no answer, and answer cells are not executed by the grader (the plan drops them, like
check cells).

Sealed questions (a graded class's package, :mod:`course_utils.authoring.seal`) carry no key:
``course grade --keys CHECKOUT`` loads the real ones from the instructor's checkout
(:func:`load_keys`), and without them a sealed question is reported as not graded (``error``),
never guessed. A ``personal`` question is judged for the student's seed: the identity is the
submission's folder name in a batch, or ``--student ID``
(:func:`course_utils.checks.questions.student_seed`).
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from typing import Any

from course_utils.authoring.cells import cell_source
from course_utils.checks.answers import NO_ANSWER, read_answer
from course_utils.checks.core import ERROR, NOT_ATTEMPTED, CheckResult
from course_utils.checks.questions import Question, check_answer, student_seed

__all__ = ["grade_questions", "load_keys", "question_entry", "submitted_answer"]


@functools.cache
def load_keys(checkout: str) -> dict[str, Question]:
    """The questions, with their keys, of the course checkout at ``checkout`` (a folder holding
    ``course_utils/lessons/nbNN_*/questions.py``): each file is run here, in the grader's
    process, under a private module name (its imports resolve in the installed package)."""
    root = Path(checkout).expanduser().resolve()
    files = sorted((root / "course_utils" / "lessons").glob("nb*/questions.py"))
    if not files:
        raise FileNotFoundError(
            f"{root}: no course_utils/lessons/nb*/questions.py (not a checkout?)"
        )
    keys: dict[str, Question] = {}
    for path in files:
        name = f"_course_keys_{abs(hash(str(root)))}.{path.parent.name}"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        for q in getattr(module, "QUESTIONS", []):
            if q.sealed:
                raise ValueError(
                    f"{path}: {q.id} is sealed; --keys needs the instructor's checkout"
                )
            keys[q.id] = q
    return keys


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


def _grade_one(nb: dict[str, Any], q: Question, seed: int) -> CheckResult:
    value, problem = submitted_answer(nb, q.id)
    if problem:
        return CheckResult(q.id, q.title, ERROR, 0, q.points, problem)
    if value is NO_ANSWER:
        message = f'no answer cell for {q.id}: the cell answer("{q.id}", ...) was deleted'
        return CheckResult(q.id, q.title, NOT_ATTEMPTED, 0, q.points, message)
    if q.sealed:
        message = (
            "not graded: this installation's questions are sealed (no keys); the instructor "
            "grades with `course grade --keys <instructor checkout>`"
        )
        return CheckResult(q.id, q.title, ERROR, 0, q.points, message)
    try:
        return check_answer(q, value, seed=seed)
    except Exception as exc:  # a broken truth function is the course's fault, not the student's
        message = f"not graded: the question's check failed ({type(exc).__name__}: {exc})"
        return CheckResult(q.id, q.title, ERROR, 0, q.points, message)


def grade_questions(
    nb: dict[str, Any],
    questions: list[Question],
    *,
    keys: str | None = None,
    student: str | None = None,
) -> list[dict[str, Any]]:
    """One report entry per question of the assignment, judged from ``nb``'s source; with
    ``keys`` (an instructor checkout) against that checkout's keys; ``personal`` questions for
    ``student``'s seed (the default seed without one, and the entry says so)."""
    try:
        table = load_keys(str(keys)) if keys else {}
    except Exception as exc:  # the instructor's setup, not the student's fault
        why = f"not graded: the keys in {keys} could not be loaded ({type(exc).__name__}: {exc})"
        return [question_entry(q, ERROR, why) for q in questions]
    seed = student_seed(student)
    entries = []
    for q in questions:
        q = table.get(q.id, q)
        r = _grade_one(nb, q, seed)
        message = r.message
        if q.personal and student is None and not q.sealed:
            message += " (graded for the default seed: no student identity was given)"
        entry = question_entry(q, r.status, message, r.points)
        if r.mistake:  # the misconception behind a wrong letter, for the class report
            entry["mistake"] = r.mistake
        entries.append(entry)
    return entries
