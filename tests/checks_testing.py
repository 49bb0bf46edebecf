"""Shared helpers for the tests of the exercise checks (``tests/test_checks_*.py``).

Not a test module (pytest only collects ``test_*.py``); imported by name because ``tests/`` is
on ``sys.path`` under pytest's default import mode.
"""

from __future__ import annotations

from course_utils import checks

SEEDS = (0, 1, 2)  # every claim is checked on a few draws of the cases, not one


def assert_passes(exercise_id: str, candidate, seeds=SEEDS) -> None:
    """``candidate`` passes the check on every seed."""
    for seed in seeds:
        result = checks.run(exercise_id, candidate, seed=seed)
        assert result.status == "passed", f"seed {seed}: {result.message}"
        assert result.points == result.max_points


def assert_rejected(exercise_id: str, candidate, mistake: str, seeds=SEEDS) -> None:
    """``candidate`` fails on every seed, and the message names ``mistake``."""
    for seed in seeds:
        result = checks.run(exercise_id, candidate, seed=seed)
        assert result.status == "failed", f"seed {seed}: {result.status}: {result.message}"
        assert result.points == 0
        assert result.mistake == mistake, f"seed {seed}: {result.message}"
        assert f"Likely mistake: {mistake}." in result.message


def assert_registered_mistakes_named(exercise_id: str, seeds=SEEDS) -> None:
    """Every Mistake registered for the exercise is rejected under its own name."""
    exercise = checks.get(exercise_id)
    assert exercise.mistakes, f"{exercise_id} has no mistakes"
    for mistake in exercise.mistakes:
        assert_rejected(exercise_id, mistake.impl, mistake.name, seeds)


def mistake_names(exercise_id: str) -> set[str]:
    return {m.name for m in checks.get(exercise_id).mistakes}


def assert_no_hint_prints_a_solution_line(exercise_id: str) -> None:
    """Every hint a failure of ``exercise_id`` can show (each mistake's and the generic one)
    names the mistake and the idea, never a line of its notebook's solution (the no-answer
    rule's needles)."""
    import json
    from pathlib import Path

    from course_utils.authoring.leaks import _solution_lines, _squash, needles

    exercise = checks.get(exercise_id)
    path = Path(__file__).resolve().parents[1] / "solutions" / exercise.notebook
    cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    found = [_squash(n) for c in cells for line in _solution_lines(c)[0] for n in needles(line)]
    assert len(found) > 5  # the solutions were read
    for hint in [exercise.hint, *(m.hint for m in exercise.mistakes)]:
        leaked = [n for n in found if n in _squash(hint)]
        assert not leaked, f"{exercise_id}: {hint!r} prints {leaked}"


def assert_not_accepted(exercise_id: str, candidate, *needles: str, seeds=SEEDS) -> None:
    """``candidate`` earns nothing at every seed through what a check cell and the grader run
    (``own_work``: the course's implementations count as shortcuts), and the message says
    why (contains every one of ``needles``)."""
    for seed in seeds:
        result = checks.run(exercise_id, candidate, seed=seed, own_work=True)
        assert result.status != "passed" and result.points == 0, f"seed {seed}: passed"
        for needle in needles:
            assert needle in result.message, f"seed {seed}: {needle!r} not in {result.message!r}"


def assert_own_work_passes(exercise_id: str, candidate, seeds=SEEDS) -> None:
    """``candidate`` passes at every seed as a check cell runs it (``own_work``)."""
    for seed in seeds:
        result = checks.run(exercise_id, candidate, seed=seed, own_work=True)
        assert result.status == "passed", f"seed {seed}: {result.message}"
