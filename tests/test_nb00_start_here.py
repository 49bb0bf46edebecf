"""Notebook 00, as the newcomer review found it (issue 35, F14 and F15) and as its own text
describes the course: fast, no notebook is executed (the stored outputs are read)."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOLUTION = ROOT / "solutions" / "00_start_here.ipynb"
STUDENT = ROOT / "notebooks" / "00_start_here.ipynb"
NUMBERS = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen".split()


def cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def source(cell: dict) -> str:
    return "".join(cell["source"])


def role(cell: dict) -> str | None:
    return (cell.get("metadata", {}).get("course") or {}).get("role")


def course_notebooks() -> list[str]:
    return sorted(p.stem for p in (ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))


def test_the_welcome_counts_the_notebooks_that_follow_this_one():
    """It said "Over twelve notebooks" while the course has 00-13."""
    intro = " ".join(source(cells(SOLUTION)[0]).split())
    m = re.search(r"Over the (\w+) notebooks after this one", intro)
    assert m, intro[:300]
    assert NUMBERS.index(m.group(1)) == len(course_notebooks()) - 1


def test_the_course_table_has_a_row_for_every_notebook():
    table = next(
        source(c) for c in cells(SOLUTION) if "## How the course is organised" in source(c)
    )
    rows = re.findall(r"^\| (\d\d) \|[^|]+\|([^|]+)\|", table, re.MULTILINE)
    assert [n for n, _ in rows] == [name[:2] for name in course_notebooks()]
    from course_utils import lessons

    slides = {lesson.number: lesson.slides for lesson in lessons.discover()}
    for number, cited in rows[1:]:  # 00 cites the slides it discusses itself
        assert cited.strip() == slides[number], (number, cited)


def test_the_explanation_comes_before_the_claim_that_backs_the_answer():
    """F14: the claim right under 00.Q1's answer cell printed "the naive formula gives inf / inf
    = nan" on its own, before the collapsed "After you answer" explanation. A backing claim must
    print after the answer (tests/test_questions.py: above it, it would give the answer away);
    in 00 it now follows the explanation, so the answer cell is followed by the explanation."""
    for path in (SOLUTION, STUDENT):
        nb = cells(path)
        for i, cell in enumerate(nb):
            if role(cell) != "answer":
                continue
            j = i + 1
            while j < len(nb) and "<details><summary>After you answer" not in source(nb[j]):
                assert "claim(" not in source(nb[j]), f"{path.name}: cell {j + 1} claims first"
                j += 1
            assert j < len(nb), "the answer's explanation is missing"
            assert "claim(" in source(nb[j + 1]), "the backing claim follows the explanation"


def test_the_notebook_has_a_live_explorer_with_a_stored_picture():
    """F15: notebook 00 had no widget (the first was in 01/03)."""
    nb = cells(SOLUTION)
    explorers = [c for c in nb if c["cell_type"] == "code" and "slider_explorer(" in source(c)]
    assert len(explorers) == 1
    cell = explorers[0]
    assert "nbval-ignore-output" in cell["metadata"].get("tags", [])
    images = [o for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
    assert images, "the solution stores the explorer's static picture (course release --execute)"
    assert not any(
        "application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in cell["outputs"]
    )
    assert "✓ the naive formula is right at c = 86 and nan at c = 87" in "".join(
        "".join(o.get("text", "")) for o in cell["outputs"]
    )


def test_the_overflow_example_says_aligned_vectors_and_its_arithmetic_holds_C_00a():
    """Review C (turn 4), C-00a: "a dot product of two 512-dimensional vectors with entries
    around 1.5 already gives about 1000" holds only for aligned vectors; independent signs give
    the sqrt(d) size notebook 03 measures. The cell says "aligned" and both figures it prints
    are the arithmetic they claim to be."""
    text = next(source(c) for c in cells(SOLUTION) if c.get("id") == "overflow-md")
    flat = " ".join(text.split())
    assert "two *aligned* 512-dimensional vectors" in flat
    aligned = re.search(r"512 \\cdot 1\.5\^2 \\approx (\d+)", flat)
    independent = re.search(r"\\sqrt\{512\} \\cdot 1\.5\^2 \\approx (\d+)", flat)
    assert aligned and independent, flat
    assert abs(int(aligned.group(1)) - 512 * 1.5**2) / (512 * 1.5**2) < 0.01
    assert int(independent.group(1)) == round(512**0.5 * 1.5**2)
