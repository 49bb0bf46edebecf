"""Exercise registry and checks: ``EXERCISES``, ``run(exercise_id, candidate)``.

Each notebook's exercises live in its lesson folder, ``course_utils/lessons/nbNN_*/exercises.py``
(``EXERCISES: list[Exercise]``), and its graded questions beside them (``questions.py``,
``QUESTIONS``); this package holds the machinery and collects them all, in notebook order.
See :mod:`course_utils.checks.core` for how a check works.
"""

from __future__ import annotations

import functools

from course_utils.checks.core import (
    ERROR,
    FAILED,
    NOT_ATTEMPTED,
    PASSED,
    STATUSES,
    TIMEOUT,
    Case,
    CheckResult,
    Exercise,
    Mistake,
    collect_outputs,
    item_key,
    judge,
)
from course_utils.checks.core import (
    check as _check_impl,
)
from course_utils.checks.questions import (
    STUDENT_ENV,
    Misconception,
    Question,
    check_answer,
    is_sealed,
    normalise_choice,
    prediction_of,
    record_prediction,
    recorded_answer,
    student_identity,
    student_seed,
)
from course_utils.strict_checks import STRICT_ENV, is_strict


class CheckFailed(AssertionError):
    """Raised by a check cell in a strict kernel when the exercise is not solved."""


def _discover(piece: str, attribute: str) -> dict:
    """Every ``attribute`` (``EXERCISES`` or ``QUESTIONS``) of the lessons' ``piece`` modules
    (``exercises``, ``questions``), by id, in notebook order."""
    from course_utils import lessons

    found: dict = {}
    for lesson in lessons.discover():
        if not lesson.has(piece):
            continue
        module = lesson.module(piece)
        for item in getattr(module, attribute):
            if item.id in found:
                raise RuntimeError(f"id {item.id} registered twice ({module.__name__})")
            if item.id.split(".")[0] != lesson.number:
                raise RuntimeError(
                    f"{module.__name__} registers {item.id}, not lesson {lesson.number}'s"
                )
            found[item.id] = item
    return dict(sorted(found.items(), key=lambda kv: item_key(kv[0])))


@functools.cache
def _registries() -> dict[str, dict]:
    """The exercise and question registries, built on first use (so a lesson's ``exercises``
    module may import this package's machinery before the registry exists)."""
    return {
        "REGISTRY": _discover("exercises", "EXERCISES"),
        "QUESTION_REGISTRY": _discover("questions", "QUESTIONS"),
    }


def __getattr__(name: str):
    """``REGISTRY``/``EXERCISES`` and ``QUESTION_REGISTRY``/``QUESTIONS``, from the lessons."""
    if name in ("REGISTRY", "QUESTION_REGISTRY"):
        return _registries()[name]
    if name == "EXERCISES":
        return list(_registries()["REGISTRY"].values())
    if name == "QUESTIONS":
        return list(_registries()["QUESTION_REGISTRY"].values())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get(exercise_id: str) -> Exercise:
    """The exercise with this id; a ``KeyError`` listing the known ids otherwise."""
    try:
        return _registries()["REGISTRY"][exercise_id]
    except KeyError:
        raise KeyError(
            f"no exercise {exercise_id!r}; known: {', '.join(_registries()['REGISTRY'])}"
        ) from None


def get_question(question_id: str) -> Question:
    """The graded question with this id; a ``KeyError`` listing the known ids otherwise."""
    try:
        return _registries()["QUESTION_REGISTRY"][question_id]
    except KeyError:
        known = ", ".join(_registries()["QUESTION_REGISTRY"]) or "none"
        raise KeyError(f"no question {question_id!r}; known: {known}") from None


def run(exercise_id: str, candidate, seed: int = 0, *, own_work: bool = False) -> CheckResult:
    """Check ``candidate`` (the student's function or class) against exercise ``exercise_id``.

    The exercise's forbidden calls and in-place edits of the inputs always fail it; with
    ``own_work`` (what check cells and the grader use) so does running the course's own
    implementation. Off by default: tests and authoring tools pass the reference itself.
    """
    return _check_impl(get(exercise_id), candidate, seed=seed, own_work=own_work)


def check(exercise_id: str, candidate, seed: int = 0) -> CheckResult:
    """What a check cell calls: print the verdict line (and, unless passed, what to fix).

    In an interactive kernel a check never raises: a wrong answer prints its verdict and the
    full hint, and the notebook goes on (the ``fallback`` cell after it swaps in the verified
    implementation), so "Run All" always reaches the end. In a *strict* kernel (environment
    variable ``COURSE_STRICT_CHECKS=1``, set by the course's pytest plugin for the kernels
    nbval starts, see :mod:`course_utils.authoring.nbval_strict`) every verdict but ``PASSED`` raises
    ``AssertionError``, so ``pytest --nbval-lax`` fails exactly the check cells of unsolved or
    wrong exercises. The official grader decides outside the kernel and ignores both.
    """
    result = run(exercise_id, candidate, seed=seed, own_work=True)
    print(result.verdict_line())
    return _settle(
        result,
        "(fix it and run this cell again; until then `fallback` gives the later cells "
        f"the course's verified {get(exercise_id).function})",
    )


def _settle(result: CheckResult, advice: str = "") -> CheckResult:
    """After a verdict line: nothing more when passed; in a strict kernel raise
    :class:`CheckFailed`; else print what went wrong (and ``advice``) unless not attempted."""
    if result.passed:
        return result
    if is_strict():
        raise CheckFailed(f"{result.verdict_line()}\n{result.message}")
    if result.status != NOT_ATTEMPTED:
        print(result.message)
        if advice:
            print(advice)
    return result


def fallback(exercise_id: str, candidate):
    """``candidate`` if it passes exercise ``exercise_id``'s check, else the verified reference.

    Later cells use what this returns, so a notebook with an exercise unsolved still runs to
    the end; it prints which one it chose.
    """
    ex = get(exercise_id)
    result = _check_impl(ex, candidate, own_work=True)
    if result.passed:
        print(f"[{ex.id}] using your {ex.function}")
        return candidate
    why = _FALLBACK_REASON.get(result.status, f"did not pass its check ({result.status})")
    print(f"[{ex.id}] your {ex.function} {why}: using the verified course_utils implementation")
    return ex.reference


def answer(question_id: str, value):
    """What an answer cell calls: grade ``value`` for question ``question_id`` and print the
    verdict line (with the feedback unless passed, and the prediction recorded before the run).

    Like :func:`check`, it never raises in an interactive kernel and raises
    :class:`CheckFailed` in a strict one (nbval) unless the answer passed. The official grader
    reads the answer from the cell's source instead, outside the kernel.

    Unsealed (the course repository, self-study) this is a self-check: it says PASSED or
    FAILED at once. Sealed (the package of a graded class, or ``COURSE_SEALED=1``) it judges
    nothing: every well-formed answer prints the same "answer recorded" line, and the grade
    and its feedback come from ``course grade`` with the instructor's keys. A ``personal``
    question is judged for the seed of ``COURSE_STUDENT`` (the default seed without it).
    """
    q = get_question(question_id)
    problem = _source_problem(question_id)
    if problem:  # the grader reads the cell's source and refuses it: say so here too
        result = CheckResult(q.id, q.title, ERROR, 0, q.points, problem)
        print(result.verdict_line())
        return _settle(result)
    if is_sealed(q):
        result, line = recorded_answer(q, value)
        print(line)
        if result is not None and result.status != NOT_ATTEMPTED:
            print(result.message)
        return result
    result = check_answer(q, value, seed=student_seed(student_identity()))
    print(result.verdict_line())
    predicted = prediction_of(question_id)
    if predicted is not None and q.choices is not None:
        shown = normalise_choice(predicted)
        print(f"Your prediction before the run: ({shown}) {q.choices.get(shown, '')}".rstrip())
    return _settle(result)


def _source_problem(question_id: str, depth: int = 2) -> str:
    """What the grader would refuse in the answer cell that called :func:`answer` (it reads the
    value from the cell's source, as a literal: ``2 * 64`` or a variable is refused there), so
    the notebook gives the same judgement; "" when the call is a literal or its cell's source
    cannot be read (a call from a function, a test)."""
    import linecache
    import sys

    from course_utils.authoring.answers import read_answer

    frame = sys._getframe(depth)
    if frame.f_code.co_name != "<module>":
        return ""
    source = "".join(linecache.getlines(frame.f_code.co_filename))
    return read_answer(source, question_id).problem if source else ""


def personal_seed() -> int:
    """The seed of this notebook's personal numbers (see ``course_utils.checks.questions``):
    from ``COURSE_STUDENT``, else the default seed 0; prints which."""
    who = student_identity()
    seed = student_seed(who)
    if who is None:
        print(
            f"No {STUDENT_ENV} set: the default seed {seed} is used, so your numbers are "
            "everyone's. For a graded class set it to your submission folder's name first "
            f"(e.g. %env {STUDENT_ENV}=alice), then run the notebook from the top."
        )
    else:
        print(f"{STUDENT_ENV} = {who!r}: your personal seed is {seed}")
    return seed


def predict(question_id: str, value) -> None:
    """What a prediction cell calls: remember the student's guess before the experiment runs;
    :func:`answer` shows it next to the result. Never graded."""
    q = get_question(question_id)
    if q.choices is not None and isinstance(value, str) and value.strip():
        if normalise_choice(value) not in q.choices:
            letters = ", ".join(f'"{c}"' for c in sorted(q.choices))
            print(f"[{q.id}] {value!r} is not one of the choices ({letters}): nothing recorded")
            return
    record_prediction(question_id, value)
    if value is None or value is Ellipsis:
        print(f"[{q.id}] no prediction recorded (replace None with your guess, then run the cell)")
    else:
        print(f"[{q.id}] prediction recorded: {value!r}. Now run the experiment below.")


_FALLBACK_REASON = {
    NOT_ATTEMPTED: "is not attempted yet",
    FAILED: "failed its check",
    ERROR: "raised an error in its check",
    TIMEOUT: "ran out of time in its check",
}


__all__ = [
    "EXERCISES",
    "REGISTRY",
    "QUESTIONS",
    "QUESTION_REGISTRY",
    "get",
    "get_question",
    "item_key",
    "answer",
    "personal_seed",
    "predict",
    "Question",
    "Misconception",
    "run",
    "check",
    "fallback",
    "is_strict",
    "CheckFailed",
    "STRICT_ENV",
    "collect_outputs",
    "judge",
    "Case",
    "CheckResult",
    "Exercise",
    "Mistake",
    "PASSED",
    "FAILED",
    "NOT_ATTEMPTED",
    "ERROR",
    "TIMEOUT",
    "STATUSES",
]
