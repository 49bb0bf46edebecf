"""nbval grades: under ``pytest --nbval-lax`` (the course's pytest plugin marks the kernels it
starts as strict) the check cell of every unsolved or wrong exercise fails, and only those
cells; in an ordinary kernel the same notebook runs to the end.

A small notebook with two real exercises (00.1 softmax, 03.1 attention) keeps most runs to a few
seconds; notebook 00 itself (student and solution versions) is run once each, ci profile.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from course_utils.authoring import nbval_strict, release

REPO = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slow, pytest.mark.notebook]

SOFTMAX = {
    "stub": 'def softmax(x):\n    raise NotImplementedError("Exercise 00.1: implement softmax")',
    "right": (
        "def softmax(x):\n"
        "    e = torch.exp(x - x.amax(dim=-1, keepdim=True))\n"
        "    return e / e.sum(dim=-1, keepdim=True)"
    ),
    "wrong": "def softmax(x):\n    e = torch.exp(x)\n    return e / e.sum(dim=-1, keepdim=True)",
}
SDPA = {
    "stub": (
        "def scaled_dot_product_attention(q, k, v, attn_mask=None):\n"
        '    raise NotImplementedError("Exercise 03.1: implement scaled_dot_product_attention")'
    ),
    "right": (
        "def scaled_dot_product_attention(q, k, v, attn_mask=None):\n"
        "    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])\n"
        "    if attn_mask is not None:\n"
        '        s = s.masked_fill(~attn_mask, float("-inf"))\n'
        "    w = torch.softmax(s, dim=-1).nan_to_num(0.0)\n"
        "    return w @ v, w"
    ),
}


def two_exercise_notebook(softmax: str, sdpa: str) -> nbformat.NotebookNode:
    """Imports, two exercise/check/fallback triples, and a last cell that uses both."""
    cells = [
        (
            "imports",
            "import math\n\nimport torch\n\nfrom course_utils.checks import check, fallback",
        ),
        ("ex-00-1", SOFTMAX[softmax]),
        ("check-00-1", 'check("00.1", softmax)'),
        ("fallback-00-1", 'softmax_ = fallback("00.1", softmax)'),
        ("ex-03-1", SDPA[sdpa]),
        ("check-03-1", 'check("03.1", scaled_dot_product_attention)'),
        ("fallback-03-1", 'sdpa = fallback("03.1", scaled_dot_product_attention)'),
        (
            "uses-both",
            "out, w = sdpa(torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6))\n"
            "print(tuple(out.shape), softmax_(torch.tensor([1000.0, 1001.0])))",
        ),
    ]
    return new_notebook(cells=[new_code_cell(src, id=cid) for cid, src in cells])


def run_nbval(notebook: Path, *, strict: str | None = None) -> tuple[set[str], int, str]:
    """``pytest --nbval-lax`` on ``notebook`` (ci profile, a fresh kernel of this interpreter)
    with the course plugin; returns (ids of the failing cells, number passed, the report).

    ``strict`` sets ``COURSE_STRICT_CHECKS`` explicitly (default: unset, the plugin decides).
    """
    env = dict(os.environ, COURSE_PROFILE="ci", PYTHONHASHSEED="0")
    env.pop("PYTEST_ADDOPTS", None)
    for var in ("CI", "BUILD_NUMBER"):  # pytest prints longer reports under CI: count the same
        env.pop(var, None)
    env.pop(nbval_strict.STRICT_ENV, None)
    if strict is not None:
        env[nbval_strict.STRICT_ENV] = strict
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "--nbval-lax",
        "--nbval-current-env",
        "-p",
        "course_utils.authoring.nbval_strict",  # what the package's pytest11 entry point loads
        "-p",
        "no:cacheprovider",
        "-q",
        "-rfE",
        "--color=no",
        "--rootdir",
        str(notebook.parent),
        str(notebook),
    ]
    proc = subprocess.run(
        cmd, cwd=notebook.parent, env=env, capture_output=True, text=True, timeout=300
    )
    report = re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout + proc.stderr)
    code_ids = [c.id for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "code"]
    failed = {code_ids[int(n)] for n in re.findall(r"^FAILED \S+::Cell (\d+)", report, re.M)}
    m = re.search(r"(\d+) passed", report)
    return failed, int(m.group(1)) if m else 0, report


def _write(tmp_path: Path, nb: nbformat.NotebookNode, name: str = "two.ipynb") -> Path:
    path = tmp_path / name
    nbformat.write(nb, path)
    return path


def test_untouched_notebook_fails_exactly_one_cell_per_exercise(tmp_path):
    path = _write(tmp_path, two_exercise_notebook("stub", "stub"))
    failed, passed, report = run_nbval(path)
    assert failed == {"check-00-1", "check-03-1"}, report
    assert passed == 6, report  # the fallbacks took over: the last cell ran
    assert report.count("not attempted (0/") == 2, report


def test_solved_notebook_passes_every_cell(tmp_path):
    path = _write(tmp_path, two_exercise_notebook("right", "right"))
    failed, passed, report = run_nbval(path)
    assert failed == set() and passed == 8, report


def test_one_wrong_answer_fails_exactly_its_check_with_the_hint(tmp_path):
    path = _write(tmp_path, two_exercise_notebook("wrong", "right"))
    failed, passed, report = run_nbval(path)
    assert failed == {"check-00-1"}, report
    assert passed == 7, report
    assert "[00.1] Numerically stable softmax: FAILED" in report


def test_an_ordinary_kernel_runs_a_wrong_answer_to_the_end(tmp_path):
    """COURSE_STRICT_CHECKS=0 is what JupyterLab's kernels see: nothing raises."""
    path = _write(tmp_path, two_exercise_notebook("wrong", "stub"))
    failed, passed, report = run_nbval(path, strict="0")
    assert failed == set() and passed == 8, report


def test_student_notebook_00_fails_only_its_check_and_the_solution_passes(tmp_path):
    # copies: nbval runs the kernel in the notebook's folder, and the repository stays clean
    student = tmp_path / "student" / "00_start_here.ipynb"
    solution = tmp_path / "solution" / "00_start_here.ipynb"
    for path in (student, solution):
        path.parent.mkdir()
    # the untouched student version as released (notebooks/ may hold a student's answers)
    student.write_text(release.release_file(REPO / "solutions" / student.name), encoding="utf-8")
    solution.write_bytes((REPO / "solutions" / solution.name).read_bytes())
    checks = {
        c.id
        for c in nbformat.read(student, as_version=4).cells
        if {"check", "answer"} & set(c.metadata.get("tags", []))
    }
    assert len(checks) >= 3  # 00.1 softmax, 00.2 logsumexp, question 00.Q1
    failed, _, report = run_nbval(student)
    # exactly one failure per exercise, at its check cell, and per question, at its answer cell
    assert failed == checks, report
    failed, passed, report = run_nbval(solution)
    code_cells = sum(c.cell_type == "code" for c in nbformat.read(solution, as_version=4).cells)
    assert failed == set() and passed == code_cells, report


# Red team H1: strictness flipped from inside the notebook. The plugin reads each check cell's
# verdict from its output in pytest's process, so an unsolved notebook still fails.
STRICTNESS_OFF = {
    "env_off": "import os\nos.environ['COURSE_STRICT_CHECKS'] = '0'",
    "patched_checks": (
        "import course_utils.checks as _c\n"
        "_c.is_strict = lambda: False\n"
        "_c.check = lambda *a, **k: None  # and the name the check cells call\n"
        "check = _c.check"
    ),
}


@pytest.mark.parametrize("attack", sorted(STRICTNESS_OFF))
def test_strictness_switched_off_inside_the_notebook_does_not_pass_it(tmp_path, attack):
    nb = two_exercise_notebook("stub", "stub")
    imports = nb.cells[0]
    imports.source += "\n" + STRICTNESS_OFF[attack]  # the first cell, before any check
    path = _write(tmp_path, nb)
    failed, passed, report = run_nbval(path)
    assert failed == {"check-00-1", "check-03-1"}, report
    assert "did not print PASSED" in report
