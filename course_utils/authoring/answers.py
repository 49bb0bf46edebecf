"""Answer cells of graded questions, read from their source without running them.

An answer cell holds one call ``answer("06.Q1", "b")`` (:func:`course_utils.checks.answer`);
its answer is a Python literal. The same reading serves three tools, so they agree:

* ``course release`` validates the solution's answer cell (one call, the cell's own question,
  a literal the question accepts) and writes the student's with the answer replaced by
  ``None`` (:func:`stub_answer`), so no answer reaches the student notebook;
* the grader reads a submission's answer here (:func:`read_answer`), in its own process: a
  notebook cannot forge it, and a kernel that crashed loses no answer;
* the student-work guard (:mod:`course_utils.authoring.student_work`) counts an answer cell
  that differs from its stub as the student's work.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

__all__ = ["AnswerRead", "answer_calls", "read_answer", "stub_answer", "NO_ANSWER"]

NO_ANSWER = object()  # read_answer: the cell has no answer("ID", ...) call for this question


@dataclass(frozen=True)
class AnswerRead:
    """What an answer cell says for one question: ``value`` (``NO_ANSWER`` when the cell has
    no call for it) and ``problem`` (why the value could not be read, else ``""``)."""

    value: Any
    problem: str = ""


def _parse(source: str) -> ast.Module | None:
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError):
        return None


def answer_calls(source: str) -> list[tuple[str, ast.expr | None, ast.Call]]:
    """Every ``answer("ID", value)`` call of a cell, arguments given by position or keyword
    (``answer(question_id="ID", value=...)``): ``(id, value node, call)`` (``value`` is
    ``None`` when the call gives no value)."""
    tree = _parse(source)
    if tree is None:
        return []
    calls = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        if node.func.id != "answer":
            continue
        # positional or by keyword, as Python binds ``answer(question_id, value)``
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        first = node.args[0] if node.args else keywords.get("question_id")
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            value = node.args[1] if len(node.args) > 1 else keywords.get("value")
            calls.append((first.value, value, node))
    return calls


def read_answer(source: str, question_id: str) -> AnswerRead:
    """The answer a cell gives to ``question_id`` (the last call for it wins, as when run)."""
    found = [c for c in answer_calls(source) if c[0] == question_id]
    if not found:
        if _parse(source) is None:
            return AnswerRead(NO_ANSWER, "the answer cell is not valid Python")
        return AnswerRead(NO_ANSWER)
    _, node, _ = found[-1]
    if node is None:
        return AnswerRead(None)
    try:
        return AnswerRead(ast.literal_eval(node))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return AnswerRead(
            NO_ANSWER,
            f'write your answer as a plain value, answer("{question_id}", "<letter>") or '
            f'answer("{question_id}", <number>) with the letter or number itself, not an '
            "expression or a name (the grader reads the cell, not the kernel)",
        )


def stub_answer(source: str, question_id: str) -> str:
    """``source`` with the value of every ``answer(question_id, value)`` call replaced by
    ``None``: the student version of an answer cell."""
    lines = source.split("\n")
    edits = []
    for qid, node, _call in answer_calls(source):
        if qid != question_id or node is None:
            continue
        edits.append((node.lineno, node.col_offset, node.end_lineno, node.end_col_offset))
    for start_line, start_col, end_line, end_col in sorted(edits, reverse=True):
        # ast's column offsets count UTF-8 bytes, not characters
        head = lines[start_line - 1].encode()[:start_col].decode()
        tail = lines[end_line - 1].encode()[end_col:].decode()
        lines[start_line - 1 : end_line] = [head + "None" + tail]
    return "\n".join(lines)
