"""The exercise-check machinery: exercises, cases, mistakes, results.

An exercise is checked in three steps that can run in different processes:

1. ``cases = exercise.make_cases(seed)`` — seeded random inputs (a list of :class:`Case`),
   drawn at grade time so no answer can be hard-coded.
2. ``outputs = exercise.call(candidate, case)`` — runs the student's function or class on one
   case and returns plain data: a ``dict[str, torch.Tensor]``. In the official grader this is
   the only step that runs inside the student's kernel; the tensors are written without pickle.
3. ``judge(exercise, cases, outputs)`` — in a trusted process: computes the reference outputs
   with ``exercise.call(exercise.reference, case)``, compares, and on a mismatch runs every
   known :class:`Mistake` through the same ``call`` to name the likely error in the hint.

``run(exercise_id, candidate)`` does all three in-process: that is what check cells use.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

Outputs = dict[str, torch.Tensor]

PASSED, FAILED, NOT_ATTEMPTED, ERROR, TIMEOUT = (
    "passed",
    "failed",
    "not_attempted",
    "error",
    "timeout",
)
STATUSES = (PASSED, FAILED, NOT_ATTEMPTED, ERROR, TIMEOUT)


@dataclass
class Case:
    """One seeded input to an exercise: a name for messages and the arguments (plain data)."""

    name: str
    inputs: dict[str, Any]


@dataclass(frozen=True)
class Mistake:
    """A classic wrong answer, written as code with the student's signature, and its hint."""

    name: str  # e.g. "missing 1/sqrt(d) scaling"
    hint: str  # what to fix, in the words a student understands
    impl: Callable[..., Any]


def allclose_compare(
    case: Case, got: Outputs, expected: Outputs, *, rtol: float = 1e-5, atol: float = 1e-6
) -> str | None:
    """Default comparison: same keys, shapes and dtypes, values within tolerance.

    Returns ``None`` when they agree, else a message saying what differs (first key only).
    """
    for key, exp in expected.items():
        if key not in got:
            return f"case '{case.name}': no output '{key}'"
        g = got[key]
        if not isinstance(g, torch.Tensor):
            return f"case '{case.name}': '{key}' should be a torch.Tensor, got {type(g).__name__}"
        if tuple(g.shape) != tuple(exp.shape):
            return (
                f"case '{case.name}': '{key}' has shape {tuple(g.shape)}, "
                f"expected {tuple(exp.shape)}"
            )
        if g.dtype != exp.dtype and not (g.is_floating_point() and exp.is_floating_point()):
            return f"case '{case.name}': '{key}' has dtype {g.dtype}, expected {exp.dtype}"
        if exp.dtype == torch.bool or not exp.is_floating_point():
            if not torch.equal(g.to(exp.dtype), exp):
                return f"case '{case.name}': '{key}' differs from the expected values"
            continue
        g64, e64 = g.detach().double().cpu(), exp.detach().double().cpu()
        if torch.isnan(g64).any() and not torch.isnan(e64).any():
            return f"case '{case.name}': '{key}' contains NaN"
        if not torch.allclose(g64, e64, rtol=rtol, atol=atol, equal_nan=True):
            err = (g64 - e64).abs().nan_to_num(float("inf")).max().item()
            return f"case '{case.name}': '{key}' differs from the expected values (max error {err:.3g})"
    return None


@dataclass
class Exercise:
    """A graded exercise.

    ``function`` is the name the student defines in the notebook (a function or a class);
    ``reference`` is the verified implementation with the same signature; ``call`` runs a
    candidate (student's, reference or mistake) on one case and returns plain tensors.
    """

    id: str
    title: str
    points: int
    notebook: str  # file name in solutions/, e.g. "03_scaled_dot_product.ipynb"
    function: str
    reference: Callable[..., Any]
    make_cases: Callable[[int], list[Case]]
    call: Callable[[Any, Case], Outputs]
    mistakes: Sequence[Mistake] = field(default_factory=tuple)
    compare: Callable[[Case, Outputs, Outputs], str | None] = allclose_compare
    hint: str = ""  # generic hint when no known mistake matches
    # Torch functions and aten operators the exercise asks the student to write instead of
    # calling (see :mod:`course_utils.checks.guard`): "torch.softmax", "aten::_softmax", ...
    forbids: tuple[str, ...] = ()

    def __repr__(self) -> str:
        return f"Exercise({self.id!r}, {self.title!r}, points={self.points}, function={self.function!r})"


@dataclass
class CheckResult:
    """The verdict on one exercise: ``status`` is one of :data:`STATUSES`."""

    exercise_id: str
    title: str
    status: str
    points: float
    max_points: float
    message: str
    mistake: str | None = None  # name of the matched Mistake, if any

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def _ipython_display_(self) -> None:
        """Show nothing when a check cell's last line returns this: the verdict is printed."""

    def verdict_line(self) -> str:
        """The one deterministic line a check cell prints."""
        label = {
            PASSED: "PASSED",
            FAILED: "FAILED",
            NOT_ATTEMPTED: "not attempted",
            ERROR: "ERROR",
            TIMEOUT: "TIMEOUT",
        }[self.status]
        pts = f"{self.points:g}/{self.max_points:g} points"
        return f"[{self.exercise_id}] {self.title}: {label} ({pts})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.exercise_id,
            "title": self.title,
            "points": self.points,
            "max_points": self.max_points,
            "status": self.status,
            "message": self.message,
        }


def collect_outputs(
    exercise: Exercise, candidate: Any, cases: Sequence[Case], watch: Any = None
) -> tuple[str, list[Outputs], str]:
    """Run ``candidate`` on every case (step 2). Returns ``(status, outputs, message)``.

    ``status`` is ``passed`` when every case ran (correctness is judged later),
    ``not_attempted`` when the stub still raises ``NotImplementedError``, ``error`` with
    the exception (last frames of the traceback), and ``failed`` (with the outputs of every
    case, so the values can still be judged) when the candidate took a shortcut: it modified
    its inputs in place, called a torch function the exercise forbids, or ran the course's own
    implementation. ``watch`` makes the :class:`~course_utils.checks.guard.Watch` of one case
    (default: :func:`make_watch` without the reference rule, i.e. the exercise's ``forbids``).
    """
    if watch is None:
        watch = make_watch(exercise, candidate, reference=False)
    outputs: list[Outputs] = []
    violation = ""
    for case in cases:
        # A copy: an in-place edit of its inputs by the candidate must not reach the
        # reference, which runs on the same case afterwards (judge) in this process.
        given = _clone(case.inputs)
        try:
            with watch() as seen:
                out = exercise.call(candidate, Case(case.name, given))
                seen.made_tensors(out)
        except NotImplementedError:
            return (
                NOT_ATTEMPTED,
                outputs,
                "not attempted yet: the stub still raises NotImplementedError",
            )
        except Exception as exc:  # the student's code may raise anything
            return (
                ERROR,
                outputs,
                (
                    f"case '{case.name}': your code raised "
                    f"{type(exc).__name__}: {exc}\n" + _student_frames(exc)
                ).rstrip(),
            )
        violation = violation or seen.problem(exercise.function, exercise.id) or ""
        changed = changed_inputs(case.inputs, given)
        if changed and not violation:
            violation = (
                f"case '{case.name}': your {exercise.function} changed its input "
                f"{', '.join(repr(c) for c in changed)} in place (e.g. `x += ...` or `x[...] = ...` "
                "on an argument): the caller's tensor is modified, which breaks every later use "
                "of it. Compute into a new tensor instead (`y = x + ...`)."
            )
        outputs.append(
            {k: (v.detach().cpu() if isinstance(v, torch.Tensor) else v) for k, v in out.items()}
        )
    if violation:
        return FAILED, outputs, violation
    return PASSED, outputs, ""


def make_watch(exercise: Exercise, candidate: Any, *, reference: bool = True) -> Callable:
    """A factory of :class:`~course_utils.checks.guard.Watch` for ``exercise``: its
    ``forbids``, and with ``reference`` also the course's own implementation (the exercise's
    reference, called or copied into another cell). Check cells and the grader use it with
    ``reference=True``; :func:`course_utils.checks.run` (tests, authoring) without."""
    from course_utils.checks import guard

    keys = guard.reference_keys(exercise.reference) if reference else []
    shapes = guard.reference_shapes(exercise.reference) if reference else []
    own = guard.own_codes_of(candidate) if reference else []
    ref = exercise.reference
    where = f"{getattr(ref, '__module__', '')}.{getattr(ref, '__qualname__', '')}"
    # The course's reference is trusted code (it may use what the student may not): without
    # the reference rule, running it is not held against it.
    forbids = () if candidate is ref and not reference else exercise.forbids

    def factory() -> guard.Watch:
        return guard.Watch(forbids, keys, shapes, own, where=where.strip("."), profile=reference)

    return factory


def changed_inputs(original: dict[str, Any], given: dict[str, Any]) -> list[str]:
    """Names of the case inputs that differ between ``original`` and the copy ``given`` to a
    candidate (values, shape or dtype): what the candidate modified in place."""
    return [k for k, v in original.items() if k in given and not _same(v, given[k])]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        if not isinstance(b, torch.Tensor) or a.shape != b.shape or a.dtype != b.dtype:
            return False
        a, b = a.detach(), b.detach()
        if a.is_floating_point() or a.is_complex():
            return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
        return torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return (
            isinstance(b, (list, tuple))
            and len(a) == len(b)
            and all(_same(x, y) for x, y in zip(a, b, strict=True))
        )
    return True  # numbers and other values are passed by value or are not compared


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _student_frames(exc: BaseException, limit: int = 3) -> str:
    """The last ``limit`` traceback frames of ``exc`` outside ``course_utils`` (the student's
    code and the libraries it called), formatted; the check machinery's own frames say
    nothing to a student."""
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if not os.path.abspath(f.filename).startswith(_PACKAGE_DIR + os.sep)
    ]
    return "".join(traceback.format_list(frames[-limit:]))


def _clone(value: Any) -> Any:
    """A copy of a case's inputs: tensors cloned, containers rebuilt, anything else shared."""
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_clone(v) for v in value)
    return value


def judge(exercise: Exercise, cases: Sequence[Case], outputs: Sequence[Outputs]) -> CheckResult:
    """Compare a candidate's outputs with the reference (step 3) and name the likely mistake."""
    for case, got in zip(cases, outputs, strict=True):
        expected = exercise.call(exercise.reference, case)
        problem = exercise.compare(case, got, expected)
        if problem is None:
            continue
        mistake = diagnose(exercise, case, got)
        if mistake is not None:
            message = f"{problem}. Likely mistake: {mistake.name}. Hint: {mistake.hint}"
        else:
            message = problem + (f". Hint: {exercise.hint}" if exercise.hint else "")
        return CheckResult(
            exercise.id,
            exercise.title,
            FAILED,
            0,
            exercise.points,
            message,
            mistake.name if mistake else None,
        )
    return CheckResult(
        exercise.id,
        exercise.title,
        PASSED,
        exercise.points,
        exercise.points,
        f"all {len(cases)} cases agree with the reference",
    )


def diagnose(exercise: Exercise, case: Case, got: Outputs) -> Mistake | None:
    """The first known mistake whose output on ``case`` matches ``got``, or ``None``."""
    for mistake in exercise.mistakes:
        try:
            wrong = exercise.call(mistake.impl, case)
        except Exception:
            continue
        if exercise.compare(case, got, wrong) is None:
            return mistake
    return None


def check(
    exercise: Exercise, candidate: Any, seed: int = 0, *, own_work: bool = False
) -> CheckResult:
    """Steps 1-3 in this process: the self-check students run from a check cell.

    A wrong value is reported first (with its likely mistake); an answer whose values are right
    but which took a shortcut (see :func:`collect_outputs`) fails with what it did. With
    ``own_work`` the course's own implementation counts as a shortcut too (check cells and the
    grader; off for :func:`course_utils.checks.run`, which tests call with the reference).
    """
    cases = exercise.make_cases(seed)
    watch = make_watch(exercise, candidate, reference=own_work)
    status, outputs, message = collect_outputs(exercise, candidate, cases, watch)
    if status == PASSED:
        return judge(exercise, cases, outputs)
    if outputs:  # cases are judged in order: a wrong value before the raising case comes first
        earlier = judge(exercise, cases[: len(outputs)], outputs)
        if earlier.status == FAILED:
            return earlier
    return CheckResult(exercise.id, exercise.title, status, 0, exercise.points, message)


def item_key(item_id: str) -> tuple:
    """Sort key of an exercise id ``"03.2"`` or a question id ``"03.Q1"``: by notebook, then
    exercises before questions, then number."""
    nb, _, rest = item_id.partition(".")
    if rest.startswith("Q") and rest[1:].isdigit():
        return (int(nb) if nb.isdigit() else nb, 1, int(rest[1:]))
    return (int(nb) if nb.isdigit() else nb, 0, int(rest) if rest.isdigit() else rest)


def generator(seed: int) -> torch.Generator:
    """A CPU generator for drawing a check's random inputs."""
    return torch.Generator().manual_seed(int(seed))


def randn(gen: torch.Generator, *shape: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Seeded standard-normal tensor (float64 by default: checks compare in double precision)."""
    return torch.randn(*shape, generator=gen, dtype=dtype)
