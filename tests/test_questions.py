"""Graded questions: every registered question rejects a missing answer, nonsense and each of
its distractors (naming the misconception, never the answer), accepts the right answer written
several ways, is answered correctly by its solution's cpu run with its backing claims ticked,
and reaches the student notebook without its answer; the machinery around them (answer cells
read from source, release stubs, the grader's static grading, strict kernels)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from course_utils import checks, lessons
from course_utils.authoring import release, validate
from course_utils.authoring.cells import ANSWER, cell_role, cell_source, exercise_id
from course_utils.checks import CheckFailed, answers
from course_utils.checks.core import ERROR, FAILED, NOT_ATTEMPTED, PASSED
from course_utils.checks.questions import Misconception, Question, check_answer
from course_utils.grading.plan import id_key
from course_utils.grading.questions import grade_questions, submitted_answer

REPO = Path(__file__).resolve().parents[1]
QUESTIONS = checks.QUESTIONS
QIDS = [q.id for q in QUESTIONS]
NONSENSE = ["z", "banana", "ab", 7, -1.5, True, ["b"], {"b": 1}]


def _solution(q: Question) -> dict:
    return json.loads((REPO / "solutions" / q.notebook).read_text(encoding="utf-8"))


def _student(q: Question) -> dict:
    return json.loads(release.release_file(REPO / "solutions" / q.notebook))


def _answer_cells(nb: dict, qid: str) -> list[dict]:
    return [c for c in nb["cells"] if cell_role(c) == ANSWER and exercise_id(c) == qid]


def _printed(cell: dict) -> str:
    return "".join(
        "".join(o.get("text", "")) for o in cell.get("outputs", []) if o.get("name") == "stdout"
    )


# -- the course's questions ------------------------------------------------------------------------
def test_there_are_questions_in_every_lecture_notebook():
    """Issue 23: at least one graded question in each lesson that follows lecture slides (the
    registry's lessons; the capstone is graded by what its one cell builds), 15 in all."""
    lectures = {
        lesson.number
        for lesson in lessons.discover()
        if lesson.slides and not lesson.title.startswith("Capstone")
    }
    assert {"01", "11", "12"} <= lectures
    per_notebook = {q.id[:2] for q in QUESTIONS}
    missing = sorted(lectures - per_notebook)
    assert not missing, f"notebooks without a graded question: {missing}"
    assert len(QUESTIONS) >= 15, len(QUESTIONS)


@pytest.mark.parametrize("q", QUESTIONS, ids=QIDS)
def test_a_missing_answer_is_not_attempted(q: Question):
    for blank in (None, ..., "", "   "):
        assert check_answer(q, blank).status == NOT_ATTEMPTED


@pytest.mark.parametrize("q", QUESTIONS, ids=QIDS)
def test_nonsense_is_rejected_with_where_to_look(q: Question):
    for value in NONSENSE:
        if q.truth is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
            if abs(value - q.expected()) <= max(q.abs_tolerance, q.tolerance * abs(q.expected())):
                continue  # a number that happens to be right is not nonsense
        result = check_answer(q, value)
        assert result.status == FAILED, (value, result)
        assert result.points == 0


@pytest.mark.parametrize("q", QUESTIONS, ids=QIDS)
def test_the_right_answer_passes_however_it_is_written(q: Question):
    if q.choices is not None:
        for written in (q.correct, q.correct.upper(), f"({q.correct})", f" {q.correct} "):
            result = check_answer(q, written)
            assert result.status == PASSED and result.points == q.points, (written, result)
    else:
        truth = q.expected()
        for written in (truth, str(truth), round(truth, 3)):
            assert check_answer(q, written).status == PASSED, written


@pytest.mark.parametrize("q", [q for q in QUESTIONS if q.choices], ids=lambda q: q.id)
def test_every_distractor_is_rejected_naming_its_misconception_not_the_answer(q: Question):
    right = q.choices[q.correct]
    for m in q.misconceptions:
        result = check_answer(q, m.choice)
        assert result.status == FAILED and result.mistake == m.name, (m, result)
        assert m.name in result.message
        assert right.lower() not in result.message.lower(), (m.choice, result.message)
        assert f"({q.correct})" not in result.message, (m.choice, result.message)
        assert len(m.feedback) > 30, f"{q.id} ({m.choice}): feedback too thin to point anywhere"


@pytest.mark.parametrize("q", [q for q in QUESTIONS if q.truth], ids=lambda q: q.id)
def test_a_numeric_answer_outside_the_tolerance_fails(q: Question):
    truth = q.expected()
    allowed = max(q.abs_tolerance, q.tolerance * abs(truth))
    assert allowed > 0, f"{q.id}: a numeric question needs a tolerance"
    for wrong in (truth + 3 * allowed + 1e-9, truth - 3 * allowed - 1e-9):
        assert check_answer(q, wrong).status == FAILED


@pytest.mark.parametrize("q", QUESTIONS, ids=QIDS)
def test_the_solution_answers_in_one_cell_and_its_cpu_run_passed_it(q: Question):
    """The stored outputs come from a ``cpu`` run: the answer cell printed PASSED there, and
    every claim that makes the answer right was printed with a tick in that run."""
    nb = _solution(q)
    (cell,) = _answer_cells(nb, q.id)
    assert check_answer(q, answers.read_answer(cell_source(cell), q.id).value).passed
    assert re.search(rf"^\[{re.escape(q.id)}\] .*: PASSED \(", _printed(cell), re.M), (
        f"{q.notebook}: the stored run did not print {q.id}'s PASSED line; re-execute it"
    )
    assert cell["id"] == "answer-" + q.id.replace(".", "-") and "answer" in cell["metadata"]["tags"]
    assert cell["metadata"]["course"] == {"role": "answer", "id": q.id, "points": q.points}
    text = "\n".join(_printed(c) for c in nb["cells"] if c["cell_type"] == "code")
    assert "Running the 'cpu' profile" in text, f"{q.notebook}: stored outputs not from cpu"
    assert q.backed_by, f"{q.id}: name the claims that make its answer right"
    answer_at = nb["cells"].index(cell)
    for backing in q.backed_by:
        ticked = [i for i, c in enumerate(nb["cells"]) if f"✓ {backing}" in _printed(c)]
        assert ticked, f"{q.id}: backing claim not ticked in the stored run: {backing}"
        assert not backing.startswith("In the `"), (
            f"{q.id}: a backing claim must hold in every profile, not only some: {backing}"
        )
        if q.choices is not None:  # printed above the answer, it would give the answer away
            assert min(ticked) > answer_at, f"{q.id}: {backing!r} is printed above the answer"


@pytest.mark.parametrize("q", QUESTIONS, ids=QIDS)
def test_the_student_notebook_has_the_answer_cell_without_the_answer(q: Question):
    nb = _student(q)
    (cell,) = _answer_cells(nb, q.id)
    assert answers.read_answer(cell_source(cell), q.id).value is None
    assert check_answer(q, submitted_answer(nb, q.id)[0]).status == NOT_ATTEMPTED


@pytest.mark.parametrize("q", [q for q in QUESTIONS if q.choices], ids=lambda q: q.id)
def test_a_choice_question_lists_its_choices_in_the_notebook(q: Question):
    text = "\n".join(cell_source(c) for c in _solution(q)["cells"] if c["cell_type"] == "markdown")
    for letter in q.choices:
        assert f"({letter})" in text, f"{q.id}: choice ({letter}) is not shown to the student"


# -- machinery ---------------------------------------------------------------------------------------
def _toy(**kw) -> Question:
    base = dict(
        id="42.Q1",
        title="Toy",
        points=2,
        notebook="42_toy.ipynb",
        prompt="?",
        evidence="the table above",
        choices={"a": "yes", "b": "no"},
        correct="b",
        misconceptions=(Misconception("a", "wishful thinking", "Read the table above again."),),
    )
    base.update(kw)
    return Question(**base)


def test_a_question_states_choices_or_a_truth_and_names_every_distractor():
    with pytest.raises(ValueError, match="either choices or truth"):
        _toy(truth=lambda: 1.0)
    with pytest.raises(ValueError, match="misconception"):
        _toy(misconceptions=())
    with pytest.raises(ValueError, match="not a choice"):
        _toy(correct="c")
    with pytest.raises(ValueError, match="NN.Qk"):
        _toy(id="42.1")


def test_a_numeric_question_recomputes_its_truth_once():
    calls = []

    def truth():
        calls.append(1)
        return 8.0

    q = _toy(choices=None, correct=None, misconceptions=(), truth=truth, tolerance=0.1)
    assert check_answer(q, 8.5).status == PASSED
    assert check_answer(q, "7.3").status == PASSED
    assert check_answer(q, 9.0).status == FAILED
    assert "the table above" in check_answer(q, "eight").message
    assert len(calls) == 1


def test_answer_cells_are_read_from_source_as_literals():
    src = '# é\nanswer("06.Q1", "b")  # ü\nanswer("06.Q2", 3.5)\nx = answer("06.Q1",\n  "c")'
    assert answers.read_answer(src, "06.Q1").value == "c"  # the last call wins
    assert answers.read_answer(src, "06.Q2").value == 3.5
    assert answers.read_answer(src, "06.Q3").value is answers.NO_ANSWER
    expr = answers.read_answer('answer("06.Q1", my_letter)', "06.Q1")
    assert expr.value is answers.NO_ANSWER and "plain value" in expr.problem
    assert answers.read_answer("answer(", "06.Q1").problem
    stub = answers.stub_answer(src, "06.Q1")
    assert (
        stub
        == '# é\nanswer("06.Q1", None)  # ü\nanswer("06.Q2", 3.5)\nx = answer("06.Q1",\n  None)'
    )


def test_the_grader_grades_answers_from_the_source_wherever_the_cell_moved():
    q = _toy()
    nb = {
        "cells": [
            {"cell_type": "markdown", "source": 'answer("42.Q1", "b")'},  # not code: ignored
            {"cell_type": "code", "source": 'answer("42.Q1", "a")'},
            {"cell_type": "code", "source": 'print(1)\nanswer("42.Q1", "B")'},
        ]
    }
    (entry,) = grade_questions(nb, [q])
    assert entry["status"] == PASSED and entry["points"] == 2 and entry["kind"] == "question"
    nb["cells"][2]["source"] = "print(1)"
    (entry,) = grade_questions(nb, [q])
    assert entry["status"] == FAILED and "wishful thinking" in entry["message"]
    (entry,) = grade_questions({"cells": []}, [q])
    assert entry["status"] == NOT_ATTEMPTED and entry["max_points"] == 2
    (entry,) = grade_questions(
        {"cells": [{"cell_type": "code", "source": 'answer("42.Q1", x)'}]}, [q]
    )
    assert entry["status"] == ERROR and "plain value" in entry["message"]


def test_a_broken_truth_is_the_courses_error_not_the_students():
    def truth():
        raise RuntimeError("boom")

    q = _toy(choices=None, correct=None, misconceptions=(), truth=truth, tolerance=0.1)
    (entry,) = grade_questions(
        {"cells": [{"cell_type": "code", "source": 'answer("42.Q1", 1)'}]}, [q]
    )
    assert entry["status"] == ERROR and "boom" in entry["message"]


def test_ids_sort_by_notebook_then_exercises_before_questions():
    ids = ["06.Q1", "10.1", "06.2", "06.Q10", "06.Q2", "06.10", "00.Q1"]
    assert sorted(ids, key=id_key) == ["00.Q1", "06.2", "06.10", "06.Q1", "06.Q2", "06.Q10", "10.1"]


def test_answer_prints_a_verdict_and_raises_only_in_a_strict_kernel(monkeypatch, capsys):
    q = QUESTIONS[0]
    wrong = q.misconceptions[0].choice if q.choices else q.expected() * 10 + 100
    monkeypatch.delenv(checks.STRICT_ENV, raising=False)
    checks.predict(q.id, wrong)
    result = checks.answer(q.id, wrong)
    out = capsys.readouterr().out
    assert result.status == FAILED and f"[{q.id}]" in out and "FAILED" in out
    assert result.message in out
    monkeypatch.setenv(checks.STRICT_ENV, "1")
    with pytest.raises(CheckFailed):
        checks.answer(q.id, wrong)
    right = q.correct if q.choices else q.expected()
    assert checks.answer(q.id, right).passed
    checks.predict(q.id, None)


def test_release_rejects_a_wrong_or_missing_solution_answer(monkeypatch):
    q = _toy()
    monkeypatch.setattr(validate, "_questions", lambda: {q.id: q})
    nb = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {},
        "cells": [
            {
                "cell_type": "code",
                "id": "answer-42-Q1",
                "metadata": {
                    "course": {"role": "answer", "id": "42.Q1", "points": 2},
                    "tags": ["answer"],
                },
                "source": 'answer("42.Q1", "a")',
                "outputs": [],
                "execution_count": None,
            }
        ],
    }
    ctx = release.Context("42_toy.ipynb", {})
    (problem,) = release.validate(nb, ctx)
    assert "does not pass" in problem and "wishful thinking" in problem
    nb["cells"][0]["source"] = 'answer("42.Q1", "b")'
    assert release.validate(nb, ctx) == []
    student = release.release_notebook(nb, "42_toy.ipynb", registry={})
    assert student["cells"][0]["source"] == 'answer("42.Q1", None)'
    nb["cells"][0]["metadata"]["course"]["points"] = 1
    assert any("points" in p for p in release.validate(nb, ctx))
    nb["cells"] = []
    assert any("no answer cell" in p for p in release.validate(nb, ctx))


def test_the_student_work_guard_protects_an_answered_question():
    from course_utils.authoring.student_work import work_at_risk

    meta = {"course": {"role": "answer", "id": "42.Q1", "points": 2}, "tags": ["answer"]}
    released = {
        "cells": [{"id": "answer-42-Q1", "metadata": meta, "source": 'answer("42.Q1", None)'}]
    }
    mine = {"cells": [{"id": "answer-42-Q1", "metadata": meta, "source": 'answer("42.Q1", "b")'}]}
    assert work_at_risk(mine, released) == [
        "cell 1 ('answer-42-Q1'): your answer to question 42.Q1"
    ]
    assert work_at_risk(released, released) == []


# -- sealed questions (issue 32) ---------------------------------------------------------------------
def _sealed_questions(tmp_path) -> dict[str, Question]:
    """The questions of a package sealed by ``course release --seal``, imported from its files."""
    import importlib.util

    from course_utils.authoring.seal import seal_package

    found: dict[str, Question] = {}
    for i, path in enumerate(seal_package(tmp_path / "sealed")):
        spec = importlib.util.spec_from_file_location(f"_sealed_test_{i}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        found.update({q.id: q for q in module.QUESTIONS})
    return found


def test_the_sealed_package_holds_no_key_and_no_feedback(tmp_path):
    """`course release --seal`: a search of every file of the student package finds no right
    letter, no truth function, no misconception text and no backing claim."""
    from course_utils.authoring.seal import SEALED_MARKER, key_texts

    sealed = _sealed_questions(tmp_path)
    assert set(sealed) == set(QIDS)
    root = tmp_path / "sealed" / "course_utils"
    assert (root / SEALED_MARKER).is_file()
    files = [p for p in root.rglob("*") if p.is_file()]
    texts = {p: p.read_text(encoding="utf-8", errors="ignore") for p in files}
    assert any("nb03_scaled_dot_product" in str(p) for p in texts)  # the whole package is there
    for q in QUESTIONS:
        s = sealed[q.id]
        assert s.sealed and s.correct is None and s.truth is None and not s.misconceptions
        assert s.prompt == q.prompt and s.choices == q.choices and s.personal == q.personal
        with pytest.raises(LookupError):
            s.expected()
        for secret in key_texts(q):
            where = [str(p) for p, t in texts.items() if secret in t]
            assert not where, f"{q.id}: {secret[:50]!r} is in the sealed package: {where}"
        if q.truth is not None:
            assert not [p for p, t in texts.items() if f"def {q.truth.__name__}(" in t], q.id
    for p, t in texts.items():
        if p.name == "questions.py" and "lessons" in p.parts:
            assert "correct=" not in t and "truth=" not in t and "Misconception(" not in t, p


@pytest.mark.parametrize("q", QUESTIONS, ids=QIDS)
def test_sealed_answer_prints_the_same_recorded_line_for_every_answer(
    q, tmp_path, monkeypatch, capsys
):
    """Sealed, answer() judges nothing: every choice (or number) prints the one 'recorded'
    line, so trying every letter reveals nothing; in a strict kernel it does not raise."""
    sealed = _sealed_questions(tmp_path)[q.id]
    monkeypatch.setattr(checks, "get_question", lambda qid: sealed)
    monkeypatch.setenv(checks.STRICT_ENV, "1")
    tries = list(q.choices) if q.choices else [q.expected(), q.expected() + 1000, -3.5]
    lines = set()
    for value in tries:
        assert checks.answer(q.id, value) is None
        out = capsys.readouterr().out
        assert "recorded" in out and "PASSED" not in out and "FAILED" not in out, out
        lines.add(out)
    assert len(lines) == 1, lines
    # the same with the keys installed, under COURSE_SEALED=1
    monkeypatch.undo()
    monkeypatch.setenv("COURSE_SEALED", "1")
    for value in tries:
        checks.answer(q.id, value)
        lines.add(capsys.readouterr().out)
    assert len(lines) == 1, lines
    # a malformed answer is still told how to write it (this needs no key)
    checks.answer(q.id, "not an answer")
    assert "well-formed" in capsys.readouterr().out


def _grade_cli(tmp_path, monkeypatch, sealed, answers_by_id, extra=()):
    """Run `course grade` on a notebook holding ``answers_by_id``'s answer cells, the installed
    questions being ``sealed`` (no kernel: only the questions are graded here)."""
    from course_utils import cli
    from course_utils.grading import grader, plan

    monkeypatch.setattr(plan, "question_table", lambda: list(sealed.values()))
    monkeypatch.setattr(grader, "_run", lambda *a, **k: None)  # exercises: not under test
    folder = tmp_path / "alice"
    folder.mkdir(exist_ok=True)
    nb = json.loads(release.release_file(REPO / "solutions" / "03_scaled_dot_product.ipynb"))
    for qid, value in answers_by_id.items():
        (cell,) = _answer_cells(nb, qid)
        cell["source"] = f'answer("{qid}", {value!r})'
    sub = folder / "03_scaled_dot_product.ipynb"
    sub.write_text(json.dumps(nb), encoding="utf-8")
    out = tmp_path / "out"
    argv = ["grade", str(sub), "--reference-dir", str(REPO / "solutions"), "--sandbox", "none"]
    argv += ["--json", str(out / "grades.json"), "--feedback", str(out / "fb"), "-q", *extra]
    cli.main(argv)
    report = json.loads((out / "grades.json").read_text(encoding="utf-8"))
    report = report[0] if isinstance(report, list) else report
    feedback = "\n".join(p.read_text(encoding="utf-8") for p in (out / "fb").glob("*"))
    return {e["id"]: e for e in report["exercises"]}, feedback


def test_course_grade_with_the_instructors_keys_grades_a_sealed_submission(tmp_path, monkeypatch):
    sealed = _sealed_questions(tmp_path)
    q2 = checks.get_question("03.Q2")
    wrong = q2.misconceptions[0]
    truth = checks.get_question("03.Q1").expected()
    entries, feedback = _grade_cli(
        tmp_path,
        monkeypatch,
        sealed,
        {"03.Q1": round(truth, 2), "03.Q2": wrong.choice},
        ["--keys", str(REPO)],
    )
    assert entries["03.Q1"]["status"] == PASSED and entries["03.Q1"]["points"] == 1
    assert entries["03.Q2"]["status"] == FAILED and entries["03.Q2"]["points"] == 0
    assert wrong.name in feedback and wrong.feedback[:40] in feedback  # the feedback, after grading
    entries, _ = _grade_cli(
        tmp_path,
        monkeypatch,
        sealed,
        {"03.Q1": round(truth, 2) + 1, "03.Q2": q2.correct},
        ["--keys", str(REPO)],
    )
    assert entries["03.Q1"]["status"] == FAILED and entries["03.Q2"]["status"] == PASSED
    # without the keys a sealed question is never guessed: not graded, and says why
    entries, _ = _grade_cli(tmp_path, monkeypatch, sealed, {"03.Q2": q2.correct})
    assert entries["03.Q2"]["status"] == ERROR and "--keys" in entries["03.Q2"]["message"]
    entries, _ = _grade_cli(
        tmp_path, monkeypatch, sealed, {"03.Q2": q2.correct}, ["--keys", str(tmp_path / "nope")]
    )
    assert entries["03.Q2"]["status"] == ERROR and "keys" in entries["03.Q2"]["message"]


# -- personal numbers (issue 32) ---------------------------------------------------------------------
PERSONAL = [q for q in QUESTIONS if q.personal]


def test_some_question_is_personal():
    assert PERSONAL, "no question's number depends on the student's seed"


@pytest.mark.parametrize("q", PERSONAL, ids=lambda q: q.id)
def test_a_personal_number_passes_for_its_student_only(q: Question):
    from course_utils.checks.questions import student_seed

    alice, bob = student_seed("alice"), student_seed("bob")
    assert student_seed(None) == 0 and alice != bob and alice == student_seed(" alice ")
    mine, theirs = q.expected(alice), q.expected(bob)
    allowed = max(q.abs_tolerance, q.tolerance * abs(mine))
    assert abs(mine - theirs) > 2 * allowed, (mine, theirs)

    def nb(value):
        return {"cells": [{"cell_type": "code", "source": f'answer("{q.id}", {round(value, 2)})'}]}

    for student, own, other in (("alice", mine, theirs), ("bob", theirs, mine)):
        (ok,) = grade_questions(nb(own), [q], student=student)
        (ko,) = grade_questions(nb(other), [q], student=student)
        assert ok["status"] == PASSED and ko["status"] == FAILED, (student, ok, ko)
    (default,) = grade_questions(nb(q.expected()), [q])
    assert default["status"] == PASSED and "default seed" in default["message"]


@pytest.mark.parametrize("q", PERSONAL, ids=lambda q: q.id)
def test_a_solution_fails_its_personal_numbers_in_a_batch_by_design_and_passes_as_default(
    q: Question,
):
    """The solution answers for the default seed: graded under a folder's name (a batch) its
    personal question fails, as a neighbour's number would; ``--student "(default)"`` grades it
    for the default seed, and it passes (the README's grading section says so)."""
    from course_utils.checks.questions import DEFAULT_STUDENT, student_seed

    assert student_seed(DEFAULT_STUDENT) == student_seed(None) == 0
    nb = _solution(q)
    (in_batch,) = grade_questions(nb, [q], student="control")
    (as_default,) = grade_questions(nb, [q], student=DEFAULT_STUDENT)
    assert in_batch["status"] == FAILED and in_batch["points"] == 0, in_batch
    assert as_default["status"] == PASSED and as_default["points"] == q.points, as_default
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert '--student "(default)"' in readme and "by design" in readme


def test_in_a_batch_the_identity_is_the_submissions_folder(tmp_path, monkeypatch):
    from course_utils.grading import grader

    seen = []
    monkeypatch.setattr(grader, "grade_questions", lambda nb, qs, **kw: seen.append(kw) or [])
    assignment = type("A", (), {"questions": []})()
    path = str(tmp_path / "bob" / "03_scaled_dot_product.ipynb")
    grader._grade_questions({}, assignment, grader.GradeOptions(student_by_folder=True), path)
    grader._grade_questions({}, assignment, grader.GradeOptions(student="carol"), path)
    grader._grade_questions({}, assignment, grader.GradeOptions(), path)
    assert [kw["student"] for kw in seen] == ["bob", "carol", None]


def test_answer_in_the_notebook_judges_for_course_student(monkeypatch, capsys):
    q = PERSONAL[0]
    from course_utils.checks.questions import student_seed

    monkeypatch.setenv("COURSE_STUDENT", "alice")
    assert checks.personal_seed() == student_seed("alice")
    assert checks.answer(q.id, q.expected(student_seed("alice"))).passed
    assert checks.answer(q.id, q.expected(student_seed("bob"))).status == FAILED
    monkeypatch.delenv("COURSE_STUDENT")
    assert checks.personal_seed() == 0 and "default seed" in capsys.readouterr().out


def test_a_prediction_that_is_not_a_choice_is_not_recorded(capsys):
    from course_utils.checks.questions import prediction_of

    q = next(q for q in QUESTIONS if q.choices)
    checks.predict(q.id, None)
    checks.predict(q.id, "z")
    assert prediction_of(q.id) is None and "not one of the choices" in capsys.readouterr().out
    checks.predict(q.id, sorted(q.choices)[0])
    assert prediction_of(q.id) == sorted(q.choices)[0]
    checks.predict(q.id, None)


def test_a_batch_names_students_by_folder_only_with_one_folder_each(tmp_path, capsys):
    from argparse import Namespace

    from course_utils.grading import cli as grade_cli
    from course_utils.grading.grader import GradeOptions

    args = Namespace(keys=None, student=None)
    apart = [str(tmp_path / who / "03_scaled_dot_product.ipynb") for who in ("alice", "bob")]
    options = GradeOptions()
    grade_cli._question_options(args, options, apart)
    assert options.student_by_folder and options.student is None
    together = [str(tmp_path / f"{who}.ipynb") for who in ("alice", "bob")]
    options = GradeOptions()
    grade_cli._question_options(args, options, together)
    assert not options.student_by_folder and "default seed" in capsys.readouterr().err


@pytest.mark.parametrize("student", [None, "alice", "bob"])
def test_13_q1_what_reasoning_about_ln_v_gives_fails(student):
    """Question audit, 13.Q1: it was a choice a reader who knows cross-entropy answers without
    running anything (ln V is the uniform guess). Now what such a reader can produce, for any
    student, misses the band: a start at ln V (0), the course's own start (k = 1), log2 V or
    the unigram entropy against ln V, and the estimate s²/2 even with the probe's logit spread
    s measured; only the probe's own number passes."""
    import math

    import torch

    from course_utils.checks.questions import student_seed
    from course_utils.lessons.nb13_capstone_gpt import recipe as nb13

    (q,) = [q for q in QUESTIONS if q.id == "13.Q1"]
    seed = student_seed(student)
    data = nb13.load_dataset()
    V = data.vocab_size
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(seed)
        cap = nb13.capstone("ci")
        model = nb13.course_model(V, cap.block_size, "ci").eval()
        x, _ = data.get_batch("train", cap.block_size, 16, torch.Generator().manual_seed(seed))
        spread = (nb13.logit_factor(seed) * model(x)).std().item()
    reasoned = {
        "a start at ln V": 0.0,
        "the course's own start": nb13.confident_start_loss(data, seed, 1.0) - math.log(V),
        "log2 V": math.log2(V) - math.log(V),
        "the unigram entropy": nb13.unigram_entropy(data.train_data, V) - math.log(V),
        "s^2 / 2": spread**2 / 2,
    }
    for name, value in reasoned.items():
        assert check_answer(q, round(value, 3), seed=seed).status == FAILED, (name, value)
    assert check_answer(q, round(q.expected(seed), 3), seed=seed).status == PASSED
