"""Graded questions: the student predicts, runs, reads their own result and answers.

An exercise asks for code; a :class:`Question` asks what the student's run showed. Its answer
is a literal in an *answer cell* (``answer("06.Q1", "b")``, ``answer("03.Q1", 8.0)``), checked
like an exercise (one verdict line: ``PASSED``, ``FAILED`` with feedback, ``not attempted``),
graded by ``course grade`` (statically, from the cell's source, in the trusted process: no
kernel can forge it) and by nbval, and released by ``course release`` with the answer replaced
by ``None``.

Two forms:

* **multiple choice** (``choices``): the right letter is a statement every profile's run
  supports (the notebook's claims assert it in ``ci``, ``cpu`` and ``gpu``); every other letter
  is a :class:`Misconception`, named like an exercise's mistakes, whose feedback points back at
  the evidence ("look at the 18-20-word bucket of the table above"), never at the answer;
* **a number read from the run** (``truth``): the grader recomputes it in its own process from
  the same seeds with the course's verified code, and accepts an answer within ``tolerance``
  (relative) or ``abs_tolerance``. Only quantities that the notebook computes the same way in
  every profile are asked this way, so the right answer is the one the student's run shows.

*Predictions* (:func:`record_prediction`) are written before an experiment and shown back next
to the answer after it; they are never graded.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from course_utils.checks.core import FAILED, NOT_ATTEMPTED, PASSED, CheckResult

__all__ = [
    "QUESTION",
    "Misconception",
    "Question",
    "check_answer",
    "normalise_choice",
    "question_id_parts",
    "is_question_id",
    "record_prediction",
    "prediction_of",
]

QUESTION = "question"


@dataclass(frozen=True)
class Misconception:
    """A wrong choice of a multiple-choice question: the belief behind it and feedback that
    sends the student back to the evidence (never to the right letter)."""

    choice: str  # the distractor's letter, e.g. "a"
    name: str  # the misconception, e.g. "more heads means more parameters"
    feedback: str


@dataclass
class Question:
    """A graded question about the student's own run (see the module docstring).

    Exactly one of ``choices`` (with ``correct`` and one :class:`Misconception` per other
    letter) or ``truth`` (a number recomputed by the grader) is given.
    """

    id: str  # "NN.Qk", e.g. "06.Q1"
    title: str
    points: int
    notebook: str  # file name in solutions/, e.g. "06_multi_head.ipynb"
    prompt: str  # the question, as the notebook asks it
    evidence: str  # where the answer can be read ("the table printed by the cell above")
    choices: Mapping[str, str] | None = None  # letter -> statement
    correct: str | None = None
    misconceptions: Sequence[Misconception] = field(default_factory=tuple)
    truth: Callable[[], float | tuple[float, ...]] | None = None
    tolerance: float = 0.0  # relative, for numeric answers
    abs_tolerance: float = 0.0
    unit: str = ""  # e.g. "nats", shown in messages
    # The claims (their text, as passed to ``claim``) that the notebook asserts in every profile
    # and that make the right choice right: tests find each one printed with a tick in the
    # stored (``cpu``) run and the ``ci`` run asserts it.
    backed_by: tuple[str, ...] = ()
    kind: str = QUESTION

    def __post_init__(self) -> None:
        if not is_question_id(self.id):
            raise ValueError(f"question id {self.id!r} is not of the form 'NN.Qk'")
        if (self.choices is None) == (self.truth is None):
            raise ValueError(f"question {self.id}: give either choices or truth, not both/neither")
        if self.choices is not None:
            wrong = set(self.choices) - {self.correct}
            named = {m.choice for m in self.misconceptions}
            if self.correct not in self.choices:
                raise ValueError(f"question {self.id}: correct {self.correct!r} is not a choice")
            if named != wrong:
                raise ValueError(
                    f"question {self.id}: every wrong choice needs exactly one misconception "
                    f"(wrong: {sorted(wrong)}, named: {sorted(named)})"
                )
        self._truth_cache: tuple[float, ...] | None = None

    @property
    def function(self) -> str:
        """What the answer cell calls (the grader's reports name it like an exercise's)."""
        return "answer"

    def expected(self) -> Any:
        """The right answer: the letter, or the number recomputed from the seeds (cached; the
        first one when the run can legitimately show several, see :meth:`truths`)."""
        if self.choices is not None:
            return self.correct
        return self.truths()[0]

    def truths(self) -> tuple[float, ...]:
        """Every number a correct run can show (cached). ``truth`` returns one number, or a
        tuple of them when the student's run depends on something the grader cannot see (e.g.
        which corpus the machine had: notebook 08 trains on tiny-shakespeare or, without it,
        on the offline corpus)."""
        if self._truth_cache is None:
            value = self.truth()
            values = value if isinstance(value, (tuple, list)) else (value,)
            self._truth_cache = tuple(float(v) for v in values)
        return self._truth_cache

    def misconception(self, choice: str) -> Misconception | None:
        """The misconception behind a wrong letter, if it is one of the choices."""
        return next((m for m in self.misconceptions if m.choice == choice), None)

    def __repr__(self) -> str:
        return f"Question({self.id!r}, {self.title!r}, points={self.points})"


def question_id_parts(qid: str) -> tuple[int, int] | None:
    """``(notebook, k)`` of an id ``"NN.Qk"``; ``None`` when it is not a question id."""
    nb, _, rest = qid.partition(".")
    if nb.isdigit() and rest[:1] == "Q" and rest[1:].isdigit():
        return int(nb), int(rest[1:])
    return None


def is_question_id(qid: Any) -> bool:
    """True for ids like ``"04.Q1"``."""
    return isinstance(qid, str) and question_id_parts(qid) is not None


def _result(q: Question, status: str, message: str) -> CheckResult:
    points = q.points if status == PASSED else 0
    return CheckResult(q.id, q.title, status, points, q.points, message)


def _blank(value: Any) -> bool:
    return value is None or value is Ellipsis or (isinstance(value, str) and not value.strip())


def check_answer(q: Question, value: Any) -> CheckResult:
    """Grade one answer: ``not attempted`` for ``None``/``...``/``""``; ``FAILED`` with the
    misconception's feedback, or with where to look for a nonsense value; else ``PASSED``."""
    if _blank(value):
        return _result(q, NOT_ATTEMPTED, "not answered yet: replace None with your answer")
    if q.choices is not None:
        return _check_choice(q, value)
    return _check_number(q, value)


def _check_choice(q: Question, value: Any) -> CheckResult:
    letters = ", ".join(f'"{c}"' for c in sorted(q.choices))
    choice = normalise_choice(value) if isinstance(value, str) else None
    if choice not in q.choices:
        return _result(
            q,
            FAILED,
            f"{value!r} is not one of the choices: answer with one letter ({letters}), "
            f'e.g. answer("{q.id}", "{min(q.choices)}"). Look at {q.evidence}.',
        )
    if choice == q.correct:
        return _result(q, PASSED, f"({choice}) is what the run shows")
    m = q.misconception(choice)
    message = f"({choice}) is a common misconception — {m.name}. {m.feedback}"
    return CheckResult(q.id, q.title, FAILED, 0, q.points, message, m.name)


def normalise_choice(value: Any) -> str:
    """A written choice as its letter: ``" (B) "`` -> ``"b"``."""
    return str(value).strip().lower().strip("()")


def _check_number(q: Question, value: Any) -> CheckResult:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            number = float(str(value).strip())
        except ValueError:
            number = math.nan
    else:
        number = float(value)
    if not math.isfinite(number):
        return _result(
            q, FAILED, f"{value!r} is not a number: answer with the number you read in {q.evidence}"
        )
    for truth in q.truths():
        if abs(number - truth) <= max(q.abs_tolerance, q.tolerance * abs(truth)):
            return _result(q, PASSED, f"{number:g} agrees with the run")
    unit = f" {q.unit}" if q.unit else ""
    return _result(
        q,
        FAILED,
        f"{number:g}{unit} is not what this run shows: read it again in {q.evidence}",
    )


# -- predictions (never graded) ----------------------------------------------------------------
_PREDICTIONS: dict[str, Any] = {}


def record_prediction(qid: str, value: Any) -> None:
    """Remember the student's prediction for question ``qid`` (this kernel only)."""
    if _blank(value):
        _PREDICTIONS.pop(qid, None)
    else:
        _PREDICTIONS[qid] = value


def prediction_of(qid: str) -> Any:
    """The prediction recorded for ``qid`` in this kernel, or ``None``."""
    return _PREDICTIONS.get(qid)
