"""The same verdict at every seed: run an exercise's wrong and correct variants over many seeds.

Not a test module; :mod:`tests/test_same_verdict_every_seed` uses it. A verdict here is exactly
``checks.run(exercise_id, candidate, seed=seed)`` (:func:`course_utils.checks.core.check`:
``collect_outputs`` then ``verdict``), with one saving that does not change it: within one seed
the reference's and each registered mistake's outputs on a case are computed once and shared by
every variant's judgement (``judge`` and ``diagnose`` compute them again for each variant).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from course_utils.checks import core
from course_utils.checks.core import Case, Exercise


@dataclass(frozen=True)
class Disagreement:
    """A variant whose verdict at ``seed`` is not the one it must have."""

    exercise: str
    variant: str
    seed: int
    got: str  # the status, and the mistake named (if any)
    message: str

    def __str__(self) -> str:
        return f"{self.exercise} {self.variant!r} at seed {self.seed}: {self.got}: {self.message[:300]}"


class _SharedCalls:
    """``exercise.call`` computing the reference's and the mistakes' outputs on one of ``cases``
    once (by identity: the candidates' own runs are on copies and are never shared)."""

    def __init__(self, exercise: Exercise, cases: list[Case]) -> None:
        self.exercise, self.call, self.cases = exercise, exercise.call, cases
        self.shared = {id(exercise.reference), *(id(m.impl) for m in exercise.mistakes)}
        self.memo: dict[tuple[int, int], core.Outputs] = {}

    def __call__(self, candidate, case: Case) -> core.Outputs:
        index = next((k for k, c in enumerate(self.cases) if c is case), None)
        if index is None or id(candidate) not in self.shared:
            return self.call(candidate, case)
        key = (id(candidate), index)
        if key not in self.memo:
            self.memo[key] = self.call(candidate, case)
        return self.memo[key]


def verdicts(exercise: Exercise, candidates: Mapping[str, object], seed: int) -> dict:
    """``{name: CheckResult}``: each candidate checked at ``seed`` as ``checks.run`` does."""
    cases = exercise.make_cases(seed)
    shared = _SharedCalls(exercise, cases)
    exercise.call = shared
    try:
        out = {}
        for name, candidate in candidates.items():
            watch = core.make_watch(exercise, candidate, reference=False)
            status, outputs, message = core.collect_outputs(exercise, candidate, cases, watch)
            out[name] = core.verdict(exercise, cases, status, outputs, message)
        return out
    finally:
        exercise.call = shared.call


def sweep(
    exercise: Exercise,
    seeds: Iterable[int],
    correct: Mapping[str, object],
    wrong: Iterable[tuple[str, str, Callable]],
) -> list[Disagreement]:
    """Every seed's disagreements: a ``correct`` variant (``{label: candidate}``) not passing, a
    ``wrong`` one (``(label, mistake name, candidate)``) not failing under that mistake's name."""
    found = []
    wrong = list(wrong)
    everything = {**{f"correct: {k}": v for k, v in correct.items()}}
    everything.update({label: fn for label, _, fn in wrong})
    expected = {label: name for label, name, _ in wrong}
    for seed in seeds:
        for label, result in verdicts(exercise, everything, seed).items():
            if label in expected:
                ok = result.status == core.FAILED and result.mistake == expected[label]
            else:
                ok = result.status == core.PASSED
            if not ok:
                got = f"{result.status} ({result.mistake})"
                found.append(Disagreement(exercise.id, label, seed, got, result.message))
    return found


def lesson_variants(number: str) -> tuple[dict, dict]:
    """``(SWEEP_CORRECT, SWEEP_WRONG)`` of ``tests/test_checks_nb{number}.py``: by exercise id,
    the suite's correct answers written differently (a list of candidates, or ``{label:
    candidate}``) and its wrong answers written independently of the check module (``{mistake
    name: candidate}``)."""
    module = importlib.import_module(f"test_checks_nb{number}")
    return getattr(module, "SWEEP_CORRECT", {}), getattr(module, "SWEEP_WRONG", {})


def variants_of(exercise: Exercise) -> tuple[dict, list[tuple[str, str, Callable]]]:
    """The variants an exercise is swept with: correct, its reference and the lesson's correct
    answers; wrong, each registered mistake's ``impl`` (``ex.mistakes``) and the lesson's
    independent wrong answers, each with the name of the mistake it must be failed under."""
    correct_by_id, wrong_by_id = lesson_variants(exercise.id[:2])
    correct = {"reference": exercise.reference}
    candidates = correct_by_id.get(exercise.id, ())
    if isinstance(candidates, Mapping):
        correct.update(candidates)
    else:
        correct.update(
            {f"{k}: {getattr(c, '__qualname__', c)}": c for k, c in enumerate(candidates)}
        )
    wrong = [(f"registered {k}: {m.name}", m.name, m.impl) for k, m in enumerate(exercise.mistakes)]
    wrong += [(f"independent: {n}", n, fn) for n, fn in wrong_by_id.get(exercise.id, {}).items()]
    return correct, wrong
