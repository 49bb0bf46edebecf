"""The lesson registry and the contracts every lesson meets, derived from it (no hand list).

A lesson is a folder ``course_utils/lessons/nbNN_name/`` (``LESSON`` in its ``__init__``, its
``exercises``, ``questions`` and ``recipe``), a solution notebook ``solutions/NN_name.ipynb``
and one test file ``tests/test_checks_nbNN.py``. Everything here is parametrized over
``lessons.discover()``, so a new lesson or a new exercise is held to every contract the day it
lands, and fails here when a piece the registry expects is missing.
"""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest
from checks_testing import assert_rejected

from course_utils import checks, gpu_plan, lessons
from course_utils.authoring.site import readme_table
from course_utils.checks.core import Exercise
from course_utils.checks.questions import Question

ROOT = Path(__file__).resolve().parents[1]
LESSONS = lessons.discover()
NUMBERS = [lesson.number for lesson in LESSONS]
EXERCISE_IDS = [e.id for e in checks.EXERCISES]
QUESTION_IDS = [q.id for q in checks.QUESTIONS]


def lesson_test_files(lesson: lessons.Lesson) -> list[Path]:
    """The test files of one lesson: every ``tests/test_*nbNN*.py``."""
    return sorted(ROOT.glob(f"tests/test_*nb{lesson.number}*.py"))


def test_the_lessons_folder_is_the_table_of_contents():
    """One folder per solution notebook, in order, and nothing else that looks like a lesson."""
    stems = sorted(p.stem for p in (ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))
    assert [lesson.notebook for lesson in LESSONS] == stems
    folders = sorted(
        p.name for p in (ROOT / "course_utils" / "lessons").iterdir() if p.name.startswith("nb")
    )
    assert folders == [f"nb{stem}" for stem in stems]


def test_the_registry_refuses_a_folder_whose_lesson_names_another_notebook(monkeypatch):
    from course_utils.lessons import lesson as lesson_module

    real = importlib.import_module("course_utils.lessons.nb05_masked_attention")
    wrong = lesson_module.Lesson(**{**real.LESSON.__dict__, "notebook": "05_other"})
    monkeypatch.setattr(real, "LESSON", wrong)
    lessons.discover.cache_clear()
    try:
        with pytest.raises(RuntimeError, match="nb05_masked_attention: LESSON names notebook"):
            lessons.discover()
    finally:
        monkeypatch.undo()
        lessons.discover.cache_clear()


@pytest.mark.parametrize("number", NUMBERS)
def test_every_lesson_has_its_pieces(number):
    """Exercises, questions and a test file always; a recipe when the notebook sizes anything;
    its gpu-profile estimate and what runs there; a student version released from it."""
    lesson = lessons.get(number)
    assert lesson.has("exercises"), f"{lesson.package} has no exercises.py"
    assert lesson.has("questions"), f"{lesson.package} has no questions.py"
    assert isinstance(lesson.gpu, lessons.GpuEstimate) and lesson.gpu.minutes > 0
    assert lesson.what_on_gpu(), "nothing says what runs in the gpu profile"
    assert lesson.has("recipe") != bool(lesson.gpu_runs), "a recipe, or gpu_runs in words"
    assert (ROOT / "solutions" / lesson.filename).is_file(), f"no solutions/{lesson.filename}"
    assert (ROOT / "notebooks" / lesson.filename).is_file(), (
        f"no notebooks/{lesson.filename}: run `course release` (it writes the student version)"
    )
    assert lesson_test_files(lesson), f"no tests/test_checks_nb{number}.py"
    assert gpu_plan.estimates()[number] == lesson.gpu


@pytest.mark.parametrize("number", NUMBERS)
def test_the_readme_row_of_each_lesson_is_its_registry_entry(number):
    """README's notebook table (which the site reads too) says what LESSON says."""
    lesson = lessons.get(number)
    table = readme_table((ROOT / "README.md").read_text())
    assert lesson.notebook in table, (
        f"README's notebook table has no row for `{lesson.notebook}`: add "
        f"| {lesson.number} | `{lesson.notebook}` | {lesson.slides or '–'} | {lesson.builds} |"
    )
    row = table[lesson.notebook]
    assert row["number"] == lesson.number
    assert row["slides"] == (lesson.slides or "–")
    assert row["summary"] == lesson.builds


@pytest.mark.parametrize("number", NUMBERS)
def test_each_lessons_title_is_its_notebooks_first_heading(number):
    lesson = lessons.get(number)
    nb = json.loads((ROOT / "solutions" / lesson.filename).read_text())
    headings = [
        line[2:].strip()
        for c in nb["cells"]
        if c["cell_type"] == "markdown"
        for line in "".join(c["source"]).splitlines()
        if line.startswith("# ")
    ]
    assert headings and headings[0].endswith(lesson.title), headings[:1]


@pytest.mark.parametrize("exercise_id", EXERCISE_IDS)
def test_every_exercise_belongs_to_its_lesson_and_has_a_test_that_names_it(exercise_id):
    """An exercise is registered by its lesson's module, points at its lesson's notebook, and
    its lesson's test file names it (a new exercise cannot pass the suite untested)."""
    exercise = checks.get(exercise_id)
    lesson = lessons.get(exercise_id[:2])
    assert isinstance(exercise, Exercise) and exercise.notebook == lesson.filename
    assert exercise in lesson.module("exercises").EXERCISES
    text = "\n".join(p.read_text() for p in lesson_test_files(lesson))
    assert re.search(rf"[\"']{re.escape(exercise_id)}[\"']", text), (
        f"no test of {lesson.number} names {exercise_id!r}"
    )


@pytest.mark.parametrize("exercise_id", EXERCISE_IDS)
def test_every_registered_mistake_is_rejected_under_its_own_name(exercise_id):
    """Not opt-in: every exercise has named mistakes, and each is caught and named (one seed
    here; the lesson's own test runs more)."""
    exercise = checks.get(exercise_id)
    assert exercise.mistakes, f"{exercise_id} registers no classic mistake"
    for mistake in exercise.mistakes:
        assert_rejected(exercise_id, mistake.impl, mistake.name, seeds=(0,))


@pytest.mark.parametrize("question_id", QUESTION_IDS)
def test_every_question_belongs_to_its_lesson_and_is_built_right(question_id):
    question = checks.get_question(question_id)
    lesson = lessons.get(question_id[:2])
    assert isinstance(question, Question) and question.notebook == lesson.filename
    assert question in lesson.module("questions").QUESTIONS
    assert question.points > 0 and question.prompt and question.evidence
    # every question's contract (an answer cell in its notebook that passes, a misconception per
    # wrong letter, a truth recomputed by the grader) is tests/test_questions.py's, over the
    # same registry


def test_a_lesson_piece_outside_the_pattern_is_refused():
    with pytest.raises(KeyError, match="no lesson piece 'checks'"):
        lessons.get("05").module("checks")
    with pytest.raises(KeyError, match="no lesson for notebook '99'"):
        lessons.get("99")


@pytest.mark.parametrize("number", NUMBERS)
def test_each_solution_is_stored_executed_every_check_passing(number):
    """The solution notebook holds the run it is compared with: every check and answer cell
    printed its PASSED line (a new exercise's cells are re-executed, not left empty)."""
    lesson = lessons.get(number)
    nb = json.loads((ROOT / "solutions" / lesson.filename).read_text())
    for cell in nb["cells"]:
        course = cell.get("metadata", {}).get("course", {})
        if course.get("role") not in ("check", "answer"):
            continue
        printed = "".join("".join(o.get("text", "")) for o in cell.get("outputs", []))
        assert f"[{course['id']}]" in printed and "PASSED" in printed, (
            f"{lesson.filename}, cell {cell.get('id')!r}: no stored PASSED line for "
            f"{course['id']}; re-execute the solution (`course release --execute "
            f"solutions/{lesson.filename} --profile cpu`)"
        )


def test_no_student_version_gives_a_solution_line_away():
    """The no-answer rule on the repository's notebooks, in the quick tier (not only in
    ``course release --check``): no solution line appears in what ``course release`` writes."""
    from course_utils.authoring import release

    leaks = release.leaks_per_notebook(ROOT / "solutions")
    found = {name: [str(leak) for leak in found] for name, found in leaks.items() if found}
    assert found == {}, found
