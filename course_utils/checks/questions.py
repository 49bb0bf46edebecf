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

**Sealed or self-check.** In the course repository a question carries its key (``correct``,
``truth``, the misconceptions), so ``answer()`` says PASSED or FAILED at once: a *self-check*,
for self-study, that anyone can brute-force by trying every letter. The package an instructor
gives a graded class is *sealed* (``course release --seal``, :mod:`course_utils.authoring.seal`):
its questions keep their prompts and choices but carry no key, no truth and no misconception
text (which would reveal the right letter by elimination), and ``answer()`` only checks that the
answer is well-formed and prints the same "recorded" line for every choice. ``course grade
--keys CHECKOUT`` grades it with the keys of the instructor's checkout, and the feedback file
then names the misconception. ``COURSE_SEALED=1`` makes ``answer()`` behave sealed even where
the keys are installed.

**Personal numbers.** A numeric question whose run depends on a seed is ``personal``: the seed
comes from the student's identity (:func:`student_seed`: ``COURSE_STUDENT`` in the notebook;
the submission's folder name in a batch, or ``--student ID``, in ``course grade``), and
``truth(seed)`` recomputes the number for that student, so a neighbour's number does not pass.
Without an identity the default seed (0) is used, and the question says so. The solution
notebooks answer for the default seed, so graded in a batch (where the folder's name is the
identity) a solution fails its personal questions by design; ``--student "(default)"``
(:data:`DEFAULT_STUDENT`) grades one for the default seed, with full marks.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from course_utils.checks.core import FAILED, NOT_ATTEMPTED, PASSED, CheckResult

__all__ = [
    "QUESTION",
    "RECORDED_LINE",
    "SEALED_ENV",
    "STUDENT_ENV",
    "DEFAULT_STUDENT",
    "Misconception",
    "Question",
    "check_answer",
    "normalise_choice",
    "question_id_parts",
    "is_question_id",
    "record_prediction",
    "prediction_of",
    "is_sealed",
    "recorded_answer",
    "student_identity",
    "student_seed",
]

QUESTION = "question"
SEALED_ENV = "COURSE_SEALED"  # "1": answer() records without judging, even with the keys here
STUDENT_ENV = "COURSE_STUDENT"  # the student's identity in the notebook (their folder's name)
DEFAULT_SEED = 0  # the seed of a personal question when no identity is given
# the identity whose seed is the default one: what the solution notebooks answer for (no GitHub
# login can be it: logins have no parentheses)
DEFAULT_STUDENT = "(default)"
# What answer() prints for every well-formed answer to a sealed question (whatever the letter)
RECORDED_LINE = (
    "[{id}] {title}: answer recorded ({points:g} points, graded by the instructor with "
    "`course grade`; the feedback comes with your grade)"
)


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
    # the truth depends on a seed derived from the student's identity: ``truth(seed)``
    personal: bool = False
    # a sealed copy (``course release --seal``): prompt and choices only, no key of any kind
    sealed: bool = False

    def __post_init__(self) -> None:
        if not is_question_id(self.id):
            raise ValueError(f"question id {self.id!r} is not of the form 'NN.Qk'")
        self._truth_cache: dict[int, tuple[float, ...]] = {}
        if self.sealed:
            if self.correct is not None or self.truth is not None or self.misconceptions:
                raise ValueError(f"question {self.id}: a sealed question carries no key")
            return
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

    @property
    def function(self) -> str:
        """What the answer cell calls (the grader's reports name it like an exercise's)."""
        return "answer"

    def expected(self, seed: int = DEFAULT_SEED) -> Any:
        """The right answer: the letter, or the number recomputed from the seeds (cached; the
        first one when the run can legitimately show several, see :meth:`truths`)."""
        if self.sealed:
            raise LookupError(f"{self.id} is sealed: its key is in the instructor's checkout")
        if self.choices is not None:
            return self.correct
        return self.truths(seed)[0]

    def truths(self, seed: int = DEFAULT_SEED) -> tuple[float, ...]:
        """Every number a correct run can show (cached per seed). ``truth`` returns one number,
        or a tuple of them when the student's run depends on something the grader cannot see
        (e.g. which corpus the machine had: notebook 08 trains on tiny-shakespeare or, without
        it, on the offline corpus). A ``personal`` question's truth is ``truth(seed)``; the
        others ignore ``seed``."""
        if self.truth is None:
            raise LookupError(f"{self.id} has no numeric truth here (sealed or multiple choice)")
        key = seed if self.personal else DEFAULT_SEED
        if key not in self._truth_cache:
            value = self.truth(key) if self.personal else self.truth()
            values = value if isinstance(value, (tuple, list)) else (value,)
            self._truth_cache[key] = tuple(float(v) for v in values)
        return self._truth_cache[key]

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


def check_answer(q: Question, value: Any, seed: int = DEFAULT_SEED) -> CheckResult:
    """Grade one answer: ``not attempted`` for ``None``/``...``/``""``; ``FAILED`` with the
    misconception's feedback, or with where to look for a nonsense value; else ``PASSED``.
    ``seed`` is the student's (:func:`student_seed`), used by ``personal`` questions only."""
    if q.sealed:
        raise LookupError(f"{q.id} is sealed: grade it with `course grade --keys CHECKOUT`")
    if _blank(value):
        return _result(q, NOT_ATTEMPTED, "not answered yet: replace None with your answer")
    if q.choices is not None:
        return _check_choice(q, value)
    return _check_number(q, value, seed)


def is_sealed(q: Question) -> bool:
    """True when ``answer()`` must record without judging: a sealed question, or
    ``COURSE_SEALED=1`` in the environment."""
    flag = os.environ.get(SEALED_ENV, "").strip().lower() in ("1", "true", "yes", "on")
    return q.sealed or flag


def recorded_answer(q: Question, value: Any) -> tuple[CheckResult | None, str]:
    """What ``answer()`` says for a sealed question: ``(result, line)``. A blank answer is
    ``not attempted``; a malformed one (not a letter of the choices, not a number) fails with
    how to write it (this needs no key); every well-formed answer gets the same
    :data:`RECORDED_LINE`, whatever it is, and ``result`` ``None`` (not judged)."""
    if _blank(value):
        r = _result(q, NOT_ATTEMPTED, "not answered yet: replace None with your answer")
        return r, r.verdict_line()
    if q.choices is not None:
        ok = isinstance(value, str) and normalise_choice(value) in q.choices
        how = "one letter of the choices, as a string"
    else:
        ok = math.isfinite(_as_number(value))
        how = "a plain number"
    if not ok:
        r = _result(q, FAILED, f"{value!r} is not a well-formed answer: write {how}")
        return r, r.verdict_line()
    return None, RECORDED_LINE.format(id=q.id, title=q.title, points=q.points)


def student_identity() -> str | None:
    """The student's identity in a notebook (``COURSE_STUDENT``), or ``None``."""
    who = os.environ.get(STUDENT_ENV, "").strip()
    return who or None


def student_seed(identity: str | None = None) -> int:
    """The seed of ``identity``'s personal numbers: ``0`` without an identity (or for
    :data:`DEFAULT_STUDENT`), else a number from its SHA-256 (stable across machines and Python
    versions, never 0)."""
    if identity is None or str(identity).strip() in ("", DEFAULT_STUDENT):
        return DEFAULT_SEED
    # a folder name that is not UTF-8 arrives with surrogates (os.fsdecode): its own bytes
    digest = hashlib.sha256(str(identity).strip().encode("utf-8", "surrogateescape")).digest()
    return 1 + int.from_bytes(digest[:4], "big") % (2**31 - 2)


def _check_choice(q: Question, value: Any) -> CheckResult:
    letters = ", ".join(f'"{c}"' for c in sorted(q.choices))
    choice = normalise_choice(value) if isinstance(value, str) else None
    if choice not in q.choices:
        return _result(
            q,
            FAILED,
            f"{value!r} is not one of the choices: answer with one letter ({letters}), "
            f'written answer("{q.id}", "<letter>"). Look at {q.evidence}.',
        )
    if choice == q.correct:
        return _result(q, PASSED, f"({choice}) is what the run shows")
    m = q.misconception(choice)
    message = f"({choice}) is a common misconception — {m.name}. {m.feedback}"
    return CheckResult(q.id, q.title, FAILED, 0, q.points, message, m.name)


def normalise_choice(value: Any) -> str:
    """A written choice as its letter: ``" (B) "`` -> ``"b"``."""
    return str(value).strip().lower().strip("()")


# a number with words around it: "128 tokens", "T=128", "about 128"
_WITH_WORDS = re.compile(
    r"^\s*(?:[A-Za-z_][\w ]*[=:]?\s*)?[-+]?\d[\d_.]*(?:e[-+]?\d+)?\s*[A-Za-z%]*\s*$"
)


def _as_number(value: Any) -> float:
    """``value`` as a float (``nan`` when it is not a number; a bool is not one)."""
    if isinstance(value, bool):
        return math.nan
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(str(value).strip())
    except ValueError:
        return math.nan


def _check_number(q: Question, value: Any, seed: int = DEFAULT_SEED) -> CheckResult:
    number = _as_number(value)
    if not math.isfinite(number):
        extra = ""
        if isinstance(value, str) and _WITH_WORDS.match(value):
            extra = (
                " alone: leave out the unit and any name (a number, not 'T = ...' or '... tokens')"
            )
        return _result(
            q,
            FAILED,
            f"{value!r} is not a number: answer with the number you read in {q.evidence}{extra}",
        )
    for truth in q.truths(seed):
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
