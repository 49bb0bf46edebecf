"""Hint ladders teach instead of translate (issue 32): no notebook's collapsed hints are its
solution in pseudo-code, i.e. lines that map one to one onto the solution's statements
(:func:`course_utils.authoring.leaks.translating_ladders`, the no-answer rule generalised from
verbatim lines to paraphrased ones). The last hint ends with the idea and a way to check it."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from course_utils.authoring.leaks import hint_ladders, translating_ladders

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "solutions").glob("[0-9][0-9]_*.ipynb"))


def _load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_hint_ladder_is_the_solution_in_pseudo_code(path: Path):
    bad = translating_ladders(_load(path), path.name)
    assert not bad, "\n".join(
        f"{path.name} {ex} ({m.hint}): {m.hint_line!r} ~ {m.statement!r}"
        for ex, found in bad.items()
        for m in found
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_last_hint_ends_with_how_to_check_it(path: Path):
    ladders: dict[str, list[tuple[str, str]]] = {}
    for ex, summary, text in hint_ladders(_load(path)):
        ladders.setdefault(ex, []).append((summary, text))
    if path.stem.startswith("13_capstone"):
        assert not ladders, f"{path.name}: the capstone gives no hints (issue 33)"
        return
    assert ladders, f"{path.name}: no hint ladder found"
    for ex, hints in ladders.items():
        summary, text = hints[-1]
        if len(hints) < 3:
            continue  # a short ladder (e.g. one hint) has no pseudo-code rung to replace
        assert "how to check it" in text.lower(), f"{path.name} {ex}: {summary!r} gives no check"
        assert not re.search(r"```|<-|←", text), f"{path.name} {ex}: {summary!r} is pseudo-code"


PSEUDO_03_1 = """<details><summary>Hint 3 (pseudo-code)</summary>

```text
scores  <- q times k-transposed (last two dims), divided by sqrt(Dk)     # (..., T, S)
if a mask is given: scores <- -inf where the mask is False
weights <- softmax of scores over the last dim; NaN (fully masked row) -> 0
return (weights times v, weights)                                       # (..., T, Dv), (..., T, S)
```
</details>"""

PROSE_03_1 = """<details><summary>Hint 3 (the idea, and how to check it)</summary>

Take T = 1 and S = 2 with a query equal to the first key and compute the answer on paper first;
print the shapes with Dk != Dv so that a wrong transpose fails loudly.
</details>"""


def _with_hint(nb: dict, hint: str) -> dict:
    nb = copy.deepcopy(nb)
    for cell in nb["cells"]:
        if cell.get("id") == "exercise-03-1-md":
            source = "".join(cell["source"])
            cell["source"] = re.sub(
                r"<details><summary>Hint 3.*?</details>", hint, source, flags=re.S
            )
            return nb
    raise AssertionError("03.1's prompt cell is gone")


def test_the_detector_catches_a_pseudo_code_ladder_and_passes_a_teaching_one():
    nb = _load(REPO / "solutions" / "03_scaled_dot_product.ipynb")
    bad = translating_ladders(_with_hint(nb, PSEUDO_03_1))
    assert "03.1" in bad and len(bad["03.1"]) >= 3, bad
    assert "03.1" not in translating_ladders(_with_hint(nb, PROSE_03_1))
