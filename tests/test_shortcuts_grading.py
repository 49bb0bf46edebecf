"""End to end: the red team's "points not earned" notebooks (issue 21, A1-A7), graded by
``course grade`` as an instructor would. Each attack is written by the test into a copy of the
solution notebook (one folder per student); the control is the solution itself.

Before the run-time watch, A2-A5 and A6/A7 kept full marks."""

from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path

import pytest

from course_utils.grading import plan as pl

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions"

SDPA_SIG = "def scaled_dot_product_attention(q, k, v, attn_mask=None):\n"

ATTACKS_03 = {
    # id -> (cell inserted above the exercise cell or None, new exercise cell source)
    "a1_direct": (
        None,
        "from course_utils.modeling.attention import scaled_dot_product_attention\n",
    ),
    "a2_obfuscated": (
        None,
        "import importlib\n"
        "_m = importlib.import_module('course_utils.modeling.' + 'attention')\n"
        + SDPA_SIG
        + "    return getattr(_m, 'scaled_dot_product' + '_attention')(q, k, v, attn_mask)\n",
    ),
    "a3_fallback": (
        None,
        "from course_utils.checks import fallback\n"
        "_R = {'f': fallback('03.1', None)}\n"
        + SDPA_SIG
        + "    return _R['f'](q, k, v, attn_mask)\n",
    ),
    "a4_import_elsewhere": (
        "from dataclasses import replace\n"
        "import course_utils.checks as _C\n"
        "from course_utils.modeling.attention import scaled_dot_product_attention as _ref1\n"
        "_C.REGISTRY['03.1'] = replace(_C.REGISTRY['03.1'], reference=lambda *a, **k: None)\n",
        SDPA_SIG + "    return _ref1(q, k, v, attn_mask)\n",
    ),
}
# A5: the solution pasted into another cell. Its shape is the solution's, as an honest helper's
# can be (HELPER-FP): judged as the check cell judges it, flagged for review, never zeroed.
ATTACK_A5 = (
    "<solution renamed _impl1>",
    SDPA_SIG + "    return _impl1(q, k, v, attn_mask)\n",
)
ATTACKS_00 = {
    # A6/A7 on notebook 00: softmax hidden from torch functions, logsumexp called directly
    "a7_hidden_softmax": {
        "00.1": "import torch\n"
        "def softmax(x):\n"
        "    with torch._C.DisableTorchFunction():\n"
        "        return torch.softmax(x, -1)\n",
        "00.2": "def logsumexp(x):\n    return torch.logsumexp(x, dim=-1)\n",
    },
}


def _exercise_cell(nb: dict, ex_id: str) -> int:
    return next(i for i, c in enumerate(nb["cells"]) if pl.course_meta(c) == (ex_id, "exercise"))


def _code_cell(source: str, n: int) -> dict:
    return {
        "cell_type": "code",
        "execution_count": None,
        "id": f"attack-{n}",
        "metadata": {},
        "outputs": [],
        "source": source,
    }


def _write(base: Path, student: str, nb: dict, name: str) -> str:
    folder = base / student
    folder.mkdir(parents=True)
    path = folder / name
    path.write_text(json.dumps(nb), encoding="utf-8")
    return str(path)


def _attack_03(sol: dict, above: str | None, cell: str) -> dict:
    nb = copy.deepcopy(sol)
    i = _exercise_cell(nb, "03.1")
    if above == "<solution renamed _impl1>":
        above = "".join(nb["cells"][i]["source"]).replace(
            "def scaled_dot_product_attention", "def _impl1"
        )
    nb["cells"][i]["source"] = cell
    if above is not None:
        nb["cells"].insert(i, _code_cell(above, i))
    return nb


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    base = tmp_path_factory.mktemp("shortcuts")
    name03, name00 = "03_scaled_dot_product.ipynb", "00_start_here.ipynb"
    sol03 = json.loads((SOLUTIONS / name03).read_text(encoding="utf-8"))
    sol00 = json.loads((SOLUTIONS / name00).read_text(encoding="utf-8"))
    paths = [_write(base, "control", sol03, name03)]
    for student, (above, cell) in {**ATTACKS_03, "a5_copy_elsewhere": ATTACK_A5}.items():
        paths.append(_write(base, student, _attack_03(sol03, above, cell), name03))
    for student, cells in ATTACKS_00.items():
        nb = copy.deepcopy(sol00)
        for ex_id, src in cells.items():
            nb["cells"][_exercise_cell(nb, ex_id)]["source"] = src
        paths.append(_write(base, student, nb, name00))
    out = base / "grades.json"
    from course_utils import cli as course_cli

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "path", list(sys.path))
        mp.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
        mp.setenv("COURSE_PROFILE", "ci")
        code = course_cli.main(
            ["grade", *paths, "--sandbox", "none", "-j", "2", "-q", "--json", str(out)]
        )
    reports = json.loads(out.read_text(encoding="utf-8"))
    return code, {Path(r["notebook"]).parent.name: r for r in reports}


def _ex(report: dict, ex_id: str) -> dict:
    return next(e for e in report["exercises"] if e["id"] == ex_id)


@pytest.mark.slow
def test_the_solution_keeps_full_marks(graded):
    """Every exercise point. Its personal question 03.Q1 fails by design: in a batch it is
    graded for the folder's identity, "control", while the solution answered for the default
    seed, a neighbour's number (``--student "(default)"`` gives it the point: the next test)."""
    _, by = graded
    items = by["control"]["exercises"]
    exercises = [e for e in items if e.get("kind") != "question"]
    assert exercises and all(e["points"] == e["max_points"] for e in exercises), items
    q1 = next(e for e in items if e["id"] == "03.Q1")
    assert q1["points"] == 0 and q1["status"] == "failed", q1


@pytest.mark.slow
def test_the_solution_graded_for_the_default_identity_gets_full_marks(tmp_path):
    """Issue 32: alone, with ``--student "(default)"`` (the default seed, the one the solution
    answers for), the solution notebook gets every point, its personal 03.Q1 included."""
    from course_utils import cli as course_cli

    name = "03_scaled_dot_product.ipynb"
    sol = json.loads((SOLUTIONS / name).read_text(encoding="utf-8"))
    path = _write(tmp_path, "control", sol, name)
    out = tmp_path / "grade.json"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "path", list(sys.path))
        mp.setenv("COURSE_PROFILE", "ci")
        course_cli.main(
            ["grade", path, "--student", "(default)", "--sandbox", "none", "-q", "--json", str(out)]
        )
    report = json.loads(out.read_text(encoding="utf-8"))  # one submission: one report
    items = report["exercises"]
    assert any(e["id"] == "03.Q1" for e in items)
    assert all(e["points"] == e["max_points"] for e in items), items


@pytest.mark.slow
@pytest.mark.parametrize("student", sorted(ATTACKS_03))
def test_the_course_implementation_earns_nothing_however_it_is_reached(graded, student):
    _, by = graded
    ex = _ex(by[student], "03.1")
    assert ex["points"] == 0, ex
    assert "not accepted" in ex["message"] and "course's own" in ex["message"], ex["message"]
    if student != "a4_import_elsewhere":  # (a4's patched registry breaks its own fallback)
        assert _ex(by[student], "03.2")["status"] == "passed"  # only that exercise


@pytest.mark.slow
def test_a_copy_of_the_solution_elsewhere_is_flagged_for_review_not_zeroed(graded):
    _, by = graded
    ex = _ex(by["a5_copy_elsewhere"], "03.1")
    assert ex["status"] == "passed" and ex["points"] == ex["max_points"], ex
    assert any(f.startswith("review: solution_shape") for f in ex["flags"]), ex


@pytest.mark.slow
def test_forbidden_ops_earn_nothing_even_hidden(graded):
    _, by = graded
    soft, lse = _ex(by["a7_hidden_softmax"], "00.1"), _ex(by["a7_hidden_softmax"], "00.2")
    assert soft["points"] == 0 and "aten::_softmax" in soft["message"], soft
    assert lse["points"] == 0 and "torch.logsumexp" in lse["message"], lse
