"""What the student reads is what the grader asks (issue 32): every choice listing in a notebook
is the question's own choices (same letters, same statements modulo Markdown), and nothing above
the answer cell gives the right answer away: not the claims that back it, not the right
statement's own words outside the listings.

Derived from the registry (``checks.QUESTIONS``) and the solution notebooks: a listing is a
run of Markdown list items ``(a) ...`` in a cell that names its question (``01.Q1``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from course_utils import checks
from course_utils.authoring.cells import ANSWER, cell_role, cell_source, exercise_id
from course_utils.checks.questions import Question

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "solutions").glob("[0-9][0-9]_*.ipynb"))
BY_ID = {q.id: q for q in checks.QUESTIONS}
CHOICE_QUESTIONS = [q for q in checks.QUESTIONS if q.choices]
QUESTION_ID = re.compile(r"\b\d\d\.Q\d+\b")
# a list item "(a) text", "- (a) text", "- **(a)** text"; continuation lines are indented
ITEM = re.compile(r"^\s*(?:[-*+]\s+)?(?:\*\*)?\(([a-z])\)(?:\*\*)?\s+(.*)$")
SHINGLE = 6  # words: a run this long of the right statement, outside the listings, gives it away


def _load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def listings(text: str) -> list[dict[str, str]]:
    """Each run of choice items in a Markdown text, as ``{letter: statement}``."""
    found: list[dict[str, str]] = []
    current: dict[str, str] | None = None
    letter = None
    for line in text.splitlines():
        item = ITEM.match(line)
        if item:
            current = {} if current is None else current
            letter = item.group(1)
            current[letter] = item.group(2).strip()
        elif current is not None and line.strip() and line[:1] in (" ", "\t"):
            current[letter] += " " + line.strip()
        else:
            if current:
                found.append(current)
            current, letter = None, None
    if current:
        found.append(current)
    return found


def without_listings(text: str) -> str:
    """``text`` with its choice items (and their continuation lines) removed."""
    kept, in_item = [], False
    for line in text.splitlines():
        if ITEM.match(line):
            in_item = True
        elif in_item and line.strip() and line[:1] in (" ", "\t"):
            continue
        else:
            in_item = False
            kept.append(line)
            continue
    return "\n".join(kept)


def plain(text: str) -> str:
    """A statement modulo Markdown: emphasis, code and math markers dropped, the little LaTeX
    the notebooks use written as the registry writes it (``\\sqrt{d}`` as ``√d``, ``T \\times
    T`` as ``T x T``, ``x_{n-1}`` as ``x[n-1]``), spaces collapsed, the closing ``.``/``;``
    and the first letter's case ignored (a listing may be one sentence of items)."""
    s = text.replace("**", "").replace("`", "").replace("$", "")
    s = re.sub(r"\\sqrt\{([^}]*)\}", r"√\1", s)
    s = s.replace("\\times", "x").replace("\\cdot", "·").replace("\\", "")
    s = re.sub(r"_\{([^}]*)\}", r"[\1]", s)
    s = re.sub(r"(?<=\w)_(\w)", r"[\1]", s)
    s = re.sub(r"\s+", " ", s).strip().rstrip(".;,")
    return s[:1].lower() + s[1:]


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9√]+(?:['’][a-z]+)?", plain(text).lower())


def _shingles(text: str, n: int = SHINGLE) -> set[tuple[str, ...]]:
    w = _words(text)
    return {tuple(w[i : i + n]) for i in range(len(w) - n + 1)}


def choice_listings() -> list[tuple[str, int, str, dict[str, str]]]:
    """``(notebook, cell index, question id, listing)`` for every listing of every notebook."""
    out = []
    for path in NOTEBOOKS:
        for i, cell in enumerate(_load(path)["cells"]):
            if cell["cell_type"] != "markdown":
                continue
            source = cell_source(cell)
            for listing in listings(source):
                named = sorted(set(QUESTION_ID.findall(source)))
                out.append((path.name, i, ",".join(named), listing))
    return out


LISTINGS = choice_listings()


def _answer_index(nb: dict, q: Question) -> int:
    (index,) = [
        i for i, c in enumerate(nb["cells"]) if cell_role(c) == ANSWER and exercise_id(c) == q.id
    ]
    return index


def _text_above(nb: dict, q: Question) -> list[tuple[int, str]]:
    """What a student reads above ``q``'s answer cell: the Markdown (choice listings removed)
    and every text a code cell printed or rendered."""
    out = []
    for i, cell in enumerate(nb["cells"][: _answer_index(nb, q)]):
        if cell["cell_type"] == "markdown":
            out.append((i, without_listings(cell_source(cell))))
            continue
        for o in cell.get("outputs", []):
            data = o.get("data", {})
            for text in (
                o.get("text", ""),
                data.get("text/markdown", ""),
                data.get("text/plain", ""),
            ):
                out.append((i, "".join(text) if isinstance(text, list) else text))
    return out


# -- the listings are the questions' choices ----------------------------------------------------
def test_the_notebooks_list_choices():
    assert len(LISTINGS) >= len(CHOICE_QUESTIONS), LISTINGS


@pytest.mark.parametrize(
    "notebook,index,qid,listing", LISTINGS, ids=[f"{n[:2]}-cell{i}" for n, i, _, _ in LISTINGS]
)
def test_a_choice_listing_is_its_questions_choices(notebook, index, qid, listing):
    assert qid in BY_ID, f"{notebook} cell {index}: a choice listing must name its question"
    q = BY_ID[qid]
    assert q.notebook == notebook, f"{notebook} cell {index}: {qid} belongs to {q.notebook}"
    assert q.choices, f"{notebook} cell {index}: {qid} is not a multiple-choice question"
    assert sorted(listing) == sorted(q.choices), (notebook, index, sorted(listing))
    for letter, shown in listing.items():
        assert plain(shown) == plain(q.choices[letter]), (
            f"{notebook} cell {index}, {qid} ({letter}):\n  notebook: {plain(shown)}\n"
            f"  registry: {plain(q.choices[letter])}"
        )


@pytest.mark.parametrize("q", CHOICE_QUESTIONS, ids=lambda q: q.id)
def test_the_student_reads_the_choices_above_the_answer_cell(q: Question):
    nb = _load(REPO / "solutions" / q.notebook)
    answer_at = _answer_index(nb, q)
    above = [i for n, i, qid, _ in LISTINGS if n == q.notebook and qid == q.id and i < answer_at]
    assert above, f"{q.id}: no listing of its choices above the answer cell"


# -- nothing above the answer cell states the answer ------------------------------------------------
@pytest.mark.parametrize("q", checks.QUESTIONS, ids=lambda q: q.id)
def test_no_backing_claim_is_stated_above_the_answer_cell(q: Question):
    """The claims that make the answer right are asserted below it, never in the prose, the
    printed lines or the rendered notes above it (for a numeric question: nor the instructions
    that would let a reader compute it without the run; its claims back the run, not the
    number, so only choice questions are held to this)."""
    if q.choices is None:
        return
    nb = _load(REPO / "solutions" / q.notebook)
    for backing in q.backed_by:
        needle = plain(backing).lower()
        for i, text in _text_above(nb, q):
            assert needle not in plain(text).lower(), f"{q.id}: cell {i} states {backing!r}"


@pytest.mark.parametrize("q", CHOICE_QUESTIONS, ids=lambda q: q.id)
def test_the_right_statement_is_not_echoed_above_the_answer_cell(q: Question):
    """A run of the right statement's words that no wrong statement shares, found in the text
    above the answer cell outside the listings, lets a reader match it without the run."""
    own = _shingles(q.choices[q.correct])
    for letter, statement in q.choices.items():
        if letter != q.correct:
            own -= _shingles(statement)
    nb = _load(REPO / "solutions" / q.notebook)
    for i, text in _text_above(nb, q):
        echoed = own & _shingles(text)
        assert not echoed, (
            f"{q.id}: cell {i} echoes the right statement: {[' '.join(s) for s in echoed]}"
        )


def test_10_t2_the_target_shift_mechanism_is_stated_only_below_10q1s_answer_cell():
    """Review D, 10-T2: "the very word it must predict" is 10.Q1's mechanism; stated above the
    answer cell (it once was, in the exercise 10.4 prompt) it rules out (a) and (d) unread.
    It belongs in the collapsed reading below the answer."""
    nb = _load(REPO / "solutions" / BY_ID["10.Q1"].notebook)
    answer_at = _answer_index(nb, BY_ID["10.Q1"])
    mechanism = re.compile(r"very word|reads \$?y_t\$?|sees the word it", re.I)
    above = [i for i, text in _text_above(nb, BY_ID["10.Q1"]) if mechanism.search(text)]
    below = [
        i
        for i, cell in enumerate(nb["cells"][answer_at + 1 :], answer_at + 1)
        if cell["cell_type"] == "markdown" and mechanism.search(cell_source(cell))
    ]
    assert not above, f"cells {above} state the target shift's mechanism above 10.Q1's answer"
    assert below, "the mechanism's explanation is gone from below 10.Q1's answer cell"


# -- the audit ---------------------------------------------------------------------------------------
AUDIT = REPO / "course_utils" / "lessons" / "question-audit.md"


def test_the_audit_has_a_row_for_every_question():
    """``question-audit.md`` says, per question, what a reader who runs nothing can infer."""
    rows = re.findall(r"^\| (\d\d\.Q\d+) ", AUDIT.read_text(encoding="utf-8"), re.M)
    assert sorted(rows) == sorted(q.id for q in checks.QUESTIONS), "add or remove audit rows"


# -- the parser itself ----------------------------------------------------------------------------
def test_listings_read_plain_bold_and_wrapped_items():
    text = "Intro\n\n- **(a)** first\n  continued\n- (b) second\n\nafter\n(c) alone"
    assert listings(text) == [{"a": "first continued", "b": "second"}, {"c": "alone"}]
    assert "continued" not in without_listings(text) and "after" in without_listings(text)


def test_plain_ignores_markdown_and_the_notebooks_latex():
    assert plain("Only $1/\\sqrt{d}$ keeps **it**;") == plain("only 1/√d keeps it")
    assert plain("$x_{n-1}$'s and $x_0$") == plain("x[n-1]'s and x[0]")
    assert plain("$T \\times T$ scores.") == plain("T x T scores")
    assert plain("one statement") != plain("another statement")


def test_an_echo_of_the_right_statement_is_found():
    q = BY_ID["10.Q1"]
    right = q.choices[q.correct]
    assert _shingles(right) & _shingles(f"As the notes say: {right.lower()}")
