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


# ----------------------------------------------------------------------------- contracts, concepts
# The machinery holds every exercise to its declared Contract and concepts without code of its
# own (course_utils.checks.core.Contract, course_utils.checks.concepts): proven here on each.

import dis  # noqa: E402
import types  # noqa: E402

import torch  # noqa: E402

from course_utils.checks import concepts as concept_table  # noqa: E402
from course_utils.checks import guard  # noqa: E402

# Exercises whose outputs are not the candidate's floating tensors (Python numbers, ids,
# verdicts, a search's score): no float dtype to get wrong. Each with its reason.
# Several checks that judge one answer by its properties (the capstone's six checks of one
# make_model): one brief, and the answer is a model, not a tensor a cast or a detach would change
# (its logits' shape, finiteness and gradients are what those checks test themselves).
PROPERTY_GRADED = {
    e.id
    for e in checks.EXERCISES
    if sum(o.function == e.function and o.notebook == e.notebook for o in checks.EXERCISES) > 1
}

# The dtype contract applies where the reference returns floating tensors: found by running it
# (a bool mask, token ids, a count or a Python number is exempt by itself, so a new exercise
# needs no entry here). The one exception: a float the prompt allows as a Python number.
DTYPE_FREE = {"12.2": "token ids and a score (a Python number is allowed)"}


def _has_float(value) -> bool:
    if isinstance(value, torch.Tensor):
        return value.is_floating_point()
    if isinstance(value, (tuple, list)):
        return any(_has_float(v) for v in value)
    return False


def returns_floats(exercise_id: str) -> bool:
    """Whether the exercise's reference returns a floating tensor (run through its check)."""
    ex, seen = checks.get(exercise_id), []

    def record(result):
        seen.append(_has_float(result))
        return result

    checks.run(exercise_id, _wrapped(ex.reference, after=record))
    return any(seen)


def _map_tensors(value, fn):
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, (tuple, list)):
        return type(value)(_map_tensors(v, fn) for v in value)
    return value


def _wrapped(reference, after=None, before=None):
    """An answer that runs ``before()``, then the reference, and returns ``after(result)``:
    a function for a function, a subclass overriding ``forward`` for a class."""
    after = after or (lambda r: r)
    if isinstance(reference, type):

        def forward(self, *args, **kwargs):
            if before:
                before()
            return after(reference.forward(self, *args, **kwargs))

        return type("Variant" + reference.__name__, (reference,), {"forward": forward})

    def variant(*args, **kwargs):
        if before:
            before()
        return after(reference(*args, **kwargs))

    return variant


def _other_float(t: torch.Tensor) -> torch.Tensor:
    if not t.is_floating_point():
        return t
    return t.to(torch.float32 if t.dtype == torch.float64 else torch.float64)


@pytest.mark.parametrize("exercise_id", EXERCISE_IDS)
def test_the_contract_machinery_rejects_each_broken_promise(exercise_id):
    """For every exercise: the reference passes; the reference's answer cast to the other float
    dtype fails; a detached answer fails where the contract makes it differentiable; a tensor
    where a Python bool/int is promised fails."""
    ex = checks.get(exercise_id)
    assert checks.run(exercise_id, ex.reference).passed
    if exercise_id in PROPERTY_GRADED:
        return  # a model, not a tensor: see PROPERTY_GRADED
    if exercise_id not in DTYPE_FREE and returns_floats(exercise_id):
        cast = _wrapped(ex.reference, after=lambda r: _map_tensors(r, _other_float))
        result = checks.run(exercise_id, cast)
        assert not result.passed, "an answer in the other float dtype passes"
        assert "dtype" in result.message or result.status != "failed", result.message
    if ex.contract.differentiable:
        detached = _wrapped(ex.reference, after=lambda r: _map_tensors(r, torch.Tensor.detach))
        result = checks.run(exercise_id, detached)
        assert not result.passed and "not differentiable" in result.message, result.message
    if ex.contract.returns is not None:
        as_tensor = _wrapped(ex.reference, after=torch.tensor)
        result = checks.run(exercise_id, as_tensor)
        assert not result.passed and "Python" in result.message, result.message


def _probes(exercise):
    for name in exercise.concepts:
        concept = concept_table.get(name)
        for op, probe in concept.ops.items():
            yield name, op, probe, False
        for path, probe in concept.course.items():
            yield name, path.replace(":", "."), probe, True


@pytest.mark.parametrize("exercise_id", [e.id for e in checks.EXERCISES if e.concepts])
def test_every_op_and_course_implementation_of_an_exercises_concepts_is_refused(exercise_id):
    """An answer that runs any op or course implementation doing the whole job of one of the
    exercise's concepts (each with its probe, a tiny call) earns nothing, with a message that
    says so, as a check cell and the grader run it."""
    ex = checks.get(exercise_id)
    for concept, what, probe, course in _probes(ex):
        variant = _wrapped(ex.reference, before=probe)
        result = checks.run(exercise_id, variant, own_work=course)
        assert not result.passed, f"{concept}: {what} is not refused"
        if course:
            assert what in result.message, (what, result.message)
        else:
            assert "not allowed here" in result.message, (what, result.message)


def _delegates_only(code: types.CodeType) -> bool:
    """Whether a code object only passes its arguments on to one call and returns the result
    (a wrapper: the work is the callee's)."""
    plain = {"RESUME", "LOAD_FAST", "LOAD_GLOBAL", "LOAD_DEREF", "LOAD_ATTR", "PUSH_NULL",
             "PRECALL", "CALL", "KW_NAMES", "RETURN_VALUE", "CACHE", "NOP", "COPY_FREE_VARS",
             "CALL_FUNCTION", "CALL_FUNCTION_KW", "LOAD_METHOD", "CALL_METHOD"}  # fmt: skip
    return all(ins.opname in plain for ins in dis.get_instructions(code))


def _builds(reference, path: str) -> bool:
    """The reference is the course implementation at ``path``, or a wrapper that only
    delegates to it."""
    impl = concept_table.resolve(path)
    if set(guard.reference_keys(reference)) & set(guard.reference_keys(impl)):
        return True
    code = getattr(reference, "__code__", None)
    if code is None or not _delegates_only(code):
        return False
    return any(reference.__globals__.get(n) is impl for n in code.co_names)


@pytest.mark.parametrize("exercise_id", EXERCISE_IDS)
def test_an_exercise_names_every_concept_its_reference_builds(exercise_id):
    """A reference that is (or only wraps) a course implementation of a concept builds that
    concept: the exercise must name it, so its ops and implementations are refused. (The
    capstone's reference is the course's whole GPT on purpose: running any of its classes is
    the course's implementation, refused by the watch; its library ops are its forbids.)"""
    ex = checks.get(exercise_id)
    if exercise_id in PROPERTY_GRADED:
        assert ex.forbids, f"{exercise_id} forbids nothing"
        return
    for name, concept in concept_table.CONCEPTS.items():
        for path in concept.course:
            if _builds(ex.reference, path):
                assert name in ex.concepts, f"{exercise_id} builds {name!r} ({path})"


def exercise_prompt(exercise) -> str:
    """The exercise's prompt: the markdown cell of its notebook headed "Exercise NN.K" (for
    checks that judge one answer by its properties, the lesson's "The brief"), with its
    whitespace collapsed."""
    nb = json.loads((ROOT / "solutions" / exercise.notebook).read_text())
    title = "The brief" if exercise.id in PROPERTY_GRADED else f"Exercise {exercise.id}"
    heading = re.compile(rf"^#+ .*{re.escape(title)}\b", re.M)
    for cell in nb["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown" and heading.search(source):
            return " ".join(source.split())
    raise AssertionError(f"no markdown cell headed 'Exercise {exercise.id}' in {exercise.notebook}")


def _float32_is_checked(ex) -> bool:
    cases = ex.make_cases(0)
    inputs = [v for c in cases for v in c.inputs.values() if isinstance(v, torch.Tensor)]
    if any(v.dtype == torch.float32 for v in inputs):
        return True
    out = ex.call(ex.reference, cases[0])
    return any(isinstance(v, torch.Tensor) and v.dtype == torch.float32 for v in out.values())


def _fully_masked_row_is_checked(ex) -> bool:
    for case in ex.make_cases(0):
        for value in case.inputs.values():
            if isinstance(value, torch.Tensor) and value.dtype == torch.bool and value.ndim >= 1:
                if (~value).all(dim=-1).any():
                    return True
    return False


@pytest.mark.parametrize("exercise_id", EXERCISE_IDS)
def test_each_prompt_and_its_declared_contract_agree(exercise_id):
    """What the prompt promises is what the check holds, and the other way round: "float32"
    in the prompt needs a float32 case; "Python bool"/"Python number" a Contract.returns;
    "differentiable" a Contract.differentiable; "fully masked" a case with a fully masked row;
    concepts an "Off-limits:" line; a Contract.masked row the output it must give."""
    ex = checks.get(exercise_id)
    text = exercise_prompt(ex)
    low = text.lower().replace("`", "")
    returns = ex.contract.returns
    returns = returns if isinstance(returns, tuple) else (returns,)
    if "float32" in low:
        assert _float32_is_checked(ex), "the prompt names float32, no case tries it"
    if "python bool" in low:
        assert bool in returns, "the prompt asks for a Python bool, the contract does not"
    if "python number" in low:
        assert float in returns, "the prompt asks for a Python number, the contract does not"
    if "differentiable" in low:
        assert ex.contract.differentiable, "the prompt says differentiable, the contract does not"
    if "fully masked" in low:
        assert _fully_masked_row_is_checked(ex), "the prompt names fully masked rows, no case"
    if ex.concepts:
        assert "off-limits:" in low, "the exercise forbids by concept; the prompt does not say"
    if ex.contract.masked:
        assert "fully masked row" in low and "never nan" in low
    if ex.contract.returns is not None:
        assert any(f"python {t.__name__}" in low for t in returns) or "python number" in low


def test_the_prompt_agreement_test_fails_when_a_promise_is_not_checked(monkeypatch):
    """Without its float32 contract 04.4 has no float32 case, while its prompt names one."""
    from course_utils.checks.core import Contract

    ex = checks.get("04.4")
    assert "float32" in exercise_prompt(ex) and _float32_is_checked(ex)
    monkeypatch.setattr(ex, "contract", Contract())
    assert not _float32_is_checked(ex)


# Every generic hint teaches (students C and D read the old ones as the full solution outline);
# the capstone has no fallback hint by design (PROPERTY_GRADED).
TEACHING_HINTS = [e.id for e in checks.EXERCISES if e.id not in PROPERTY_GRADED]


@pytest.mark.parametrize("exercise_id", TEACHING_HINTS)
def test_a_generic_hint_asks_the_student_to_look_it_does_not_outline_the_solution(exercise_id):
    """The hint shown when no named mistake matches sends the student to look at something
    (it asks), and it is not the last hint's outline in other words: no chain of steps."""
    hint = checks.get(exercise_id).hint
    assert "?" in hint, hint
    assert hint.count(";") <= 1 and hint.lower().count(" then ") <= 2, hint


# One of the generic hints before issue 31 (08.3's): the schedule's formulas, clause by clause.
OUTLINE_HINT_08_3 = (
    "warmup: max_lr * (step + 1) / warmup; then progress p = (step - warmup) / (steps - warmup), "
    "capped at 1; min_lr + 0.5 * (1 + cos(pi p)) * (max_lr - min_lr)"
)


def reference_statements(exercise) -> tuple[list[list[str]], set[str]]:
    """The statements of an exercise's reference, one list per implementation (its solution
    region in the notebook, the source of its reference function or class), and the reference's
    parameter names (leaks.reference_statement_groups)."""
    from course_utils.authoring.leaks import reference_statement_groups

    nb = json.loads((ROOT / "solutions" / exercise.notebook).read_text())
    return reference_statement_groups(exercise, nb)


@pytest.mark.parametrize("exercise_id", TEACHING_HINTS)
def test_a_generic_hint_does_not_map_onto_the_references_statements(exercise_id):
    """The no-answer rule of the hint ladders (leaks.translating_ladders), for the one hint a
    failure without a named mistake shows: its clauses do not map onto the reference's
    statements one by one."""
    from course_utils.authoring.leaks import hint_outline

    exercise = checks.get(exercise_id)
    statements, parameters = reference_statements(exercise)
    assert statements, f"{exercise_id}: no reference statement read"
    mapped = hint_outline(exercise.hint, statements, parameters)
    assert not mapped, mapped


def test_the_outline_detector_catches_a_generic_hint_of_before_issue_31():
    """08.3's old generic hint gave the schedule formula by formula: the detector names the
    statements it maps onto (the warmup, the progress, the cosine); today's hint maps onto none."""
    from course_utils.authoring.leaks import hint_outline

    statements, parameters = reference_statements(checks.get("08.3"))
    mapped = {stmt for _, stmt in hint_outline(OUTLINE_HINT_08_3, statements, parameters)}
    assert len(mapped) >= 3 and any("warmup" in m for m in mapped), mapped
    assert not hint_outline(checks.get("08.3").hint, statements, parameters)
