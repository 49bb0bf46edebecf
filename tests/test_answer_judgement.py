"""One judgement of an answer cell in the notebook, nbval and ``course grade`` (student C,
"Notebook and grader disagree", reviews/turn4/student-C.md): the grader reads the answer from
the cell's source as a literal, so the notebook's ``answer()`` refuses what it refuses; messages
say how to write the answer without ever showing a right one."""

from __future__ import annotations

import linecache

import pytest

from course_utils import checks
from course_utils.authoring.answers import read_answer
from course_utils.checks.questions import check_answer
from course_utils.grading.questions import submitted_answer


def run_cell(source: str, name: str):
    """``source`` run as a notebook cell: module level, its text in linecache (as IPython
    keeps it); returns what its last ``answer(...)`` returned."""
    filename = f"<cell-{name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    scope = {"answer": checks.answer}
    exec(compile(f"result = {source}", filename, "exec"), scope)
    return scope["result"]


@pytest.mark.parametrize(
    "source",
    [
        'answer("06.Q2", 2 * 64)',
        'answer("06.Q2", -(-128))',
        'answer("04.Q1", "d" if True else "c")',
        'answer("06.Q2", float("nan"))',
    ],
)
def test_C_an_expression_in_an_answer_cell_is_refused_in_the_notebook_as_by_the_grader(
    source, capsys
):
    result = run_cell(source, "expr")
    qid = source.split('"')[1]
    _, problem = submitted_answer({"cells": [{"cell_type": "code", "source": source}]}, qid)
    assert problem and result.status == "error" and result.message == problem
    assert "ERROR (0/1 points)" in capsys.readouterr().out


def test_C_a_literal_answer_is_judged_the_same_in_the_notebook_and_the_grader():
    result = run_cell('answer("06.Q2", 128)', "literal")
    assert result.passed
    value, problem = submitted_answer(
        {"cells": [{"cell_type": "code", "source": 'answer("06.Q2", 128)'}]}, "06.Q2"
    )
    assert not problem and check_answer(checks.get_question("06.Q2"), value).passed


def test_an_answer_called_from_a_function_is_judged_on_its_value():
    def helper():
        return checks.answer("06.Q2", 2 * 64)

    assert helper().passed


def test_C_a_number_with_its_unit_is_told_to_leave_the_unit_out():
    q = checks.get_question("06.Q2")
    for value in ("128 tokens", "T=128", "T = 128"):
        result = check_answer(q, value)
        assert result.status == "failed" and "leave out the unit" in result.message, value
    assert "leave out" not in check_answer(q, "nan").message


def test_C_127_6_is_not_the_whole_number_06_Q2_asks_for():
    q = checks.get_question("06.Q2")
    assert not check_answer(q, 127.6).passed and not check_answer(q, 128.4).passed
    assert check_answer(q, 128).passed and check_answer(q, "128.").passed


@pytest.mark.parametrize("question", checks.QUESTIONS, ids=lambda q: q.id)
def test_C_no_format_message_shows_a_right_answer(question):
    """The invalid-input and plain-value messages use placeholders, never a letter or number
    (06.Q1's example letter was its right answer)."""
    problem = read_answer(f'answer("{question.id}", x)', question.id).problem
    message = check_answer(question, "zz").message if question.choices else ""
    for text in (problem, message):
        assert "<letter>" in text or "<number>" in text or not text
        if question.choices:
            assert f'answer("{question.id}", "{question.correct}")' not in text, text
