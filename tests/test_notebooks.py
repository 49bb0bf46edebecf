"""The nbval contract and the official grader, for every ``solutions/NN_*.ipynb`` (new notebooks
are picked up automatically). Each notebook is executed twice per test session, no more:

(a) ``pytest --nbval`` passes on the solution under ``COURSE_PROFILE=ci``: every cell runs and
    every output not tagged ``nbval-ignore-output`` matches the stored one (the check cells'
    verdict lines included, so every exercise of the solution passes its check);
(b) the official grader, end to end, on the untouched student version (released from the
    solution into a temporary folder: ``notebooks/`` may hold a student's answers, and
    ``course release --check`` compares it with the release): it runs top to bottom, no
    non-check cell raises, and every check is "not attempted" (a check that passes on a stub
    is vacuous and fails the suite).
Full marks for a solution through the grader are tested end to end on one notebook
(``FULL_MARKS_NOTEBOOK``, several kinds of exercise); for every exercise of every notebook the
grader's harvest-and-judge path is tested without a kernel in ``test_checks_all.py``.

What nbval compares (nbval 0.11): stream text
(stdout and stderr, after folding ``\\r`` progress-bar updates) and every output MIME type
except ``image/png`` / ``image/jpeg`` (so a figure's ``text/plain`` "<Figure size ... with 1
Axes>" is compared, its pixels are not); markdown cells and unexecuted cells are not compared.
Tags: ``nbval-ignore-output`` runs a cell without comparing it (timings, training logs,
profile-dependent numbers), ``nbval-skip`` does not run it, ``raises-exception`` expects an
error. ``tests/nbval_sanitize.cfg`` masks memory addresses before comparing.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from course_utils import release

REPO = Path(__file__).resolve().parents[1]
SOLUTIONS = sorted((REPO / "solutions").glob("[0-9][0-9]_*.ipynb"))
SANITIZE = Path(__file__).with_name("nbval_sanitize.cfg")
# generous bounds for a loaded 2-core machine; the ci profile aims at <= 60 s per notebook
NOTEBOOK_TIMEOUT_S = int(os.environ.get("COURSE_NOTEBOOK_TIMEOUT", "300"))
CELL_TIMEOUT_S = 180

pytestmark = [pytest.mark.slow, pytest.mark.notebook]

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _ids(path: Path) -> str:
    return path.stem


def _ci_env() -> dict[str, str]:
    env = dict(os.environ, COURSE_PROFILE="ci", PYTHONHASHSEED="0")
    env.pop("PYTEST_ADDOPTS", None)  # the outer run's options (e.g. -n 2) are not nbval's
    return env


@pytest.mark.parametrize("solution", SOLUTIONS, ids=_ids)
def test_solution_notebook_passes_nbval_under_ci_profile(solution: Path):
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "--nbval",
        "--nbval-current-env",
        "--nbval-sanitize-with",
        str(SANITIZE),
        "--nbval-cell-timeout",
        str(CELL_TIMEOUT_S),
        "-p",
        "no:cacheprovider",
        "-q",
        "--tb=short",
        "--color=no",
        str(solution.relative_to(REPO)),
    ]
    try:
        proc = subprocess.run(
            cmd, cwd=REPO, env=_ci_env(), capture_output=True, text=True, timeout=NOTEBOOK_TIMEOUT_S
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        pytest.fail(
            f"nbval on {solution.name} ran past {NOTEBOOK_TIMEOUT_S} s "
            f"(COURSE_NOTEBOOK_TIMEOUT)\n{out[-6000:]}"
        )
    report = _ANSI.sub("", proc.stdout + proc.stderr)
    assert proc.returncode == 0, (
        f"`COURSE_PROFILE=ci {' '.join(cmd[2:])}` failed on {solution.name}. Tag cells whose "
        f"output varies with `nbval-ignore-output`, or re-execute the solution.\n"
        f"{report[-12000:]}"
    )


def _grade(paths: list[Path], out: Path) -> list[dict]:
    """Grade ``paths`` with the official grader (ci profile), one report per notebook."""
    cmd = [
        sys.executable,
        "-m",
        "course_utils.cli",
        "grade",
        *map(str, paths),
        "-q",
        "--json",
        str(out),
        "--reference-dir",
        str(REPO / "solutions"),
        "--cell-timeout",
        str(CELL_TIMEOUT_S),
        "--timeout",
        str(NOTEBOOK_TIMEOUT_S),
    ]
    proc = subprocess.run(
        cmd,
        cwd=REPO,
        env=_ci_env(),
        capture_output=True,
        text=True,
        timeout=2 * NOTEBOOK_TIMEOUT_S + 60,
    )
    assert out.exists(), (
        f"course grade wrote no report (exit {proc.returncode}):\n"
        f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    )
    reports = json.loads(out.read_text())
    return reports if isinstance(reports, list) else [reports]


def _describe(report: dict) -> str:
    lines = [
        f"{e['id']}: {e['status']} {e['points']}/{e['max_points']} {e['message'][:300]}"
        for e in report.get("exercises", [])
    ]
    errors = report.get("cells", {}).get("errors", [])
    lines += [
        f"cell #{e.get('cell')}: {e.get('ename')}: {str(e.get('evalue'))[:300]}" for e in errors
    ]
    if report.get("error"):
        lines.append(f"error: {report['error']}")
    return "\n".join(lines)


@pytest.mark.parametrize("solution", SOLUTIONS, ids=_ids)
def test_grader_gives_the_untouched_student_version_zero_and_runs_it_to_the_end(
    solution: Path, tmp_path: Path
):
    student = tmp_path / "student" / solution.name
    student.parent.mkdir()
    student.write_text(release.release_file(solution), encoding="utf-8")
    (stu,) = _grade([student], tmp_path / "grades.json")

    assert stu["max"] > 0, _describe(stu)
    # the untouched student version runs top to bottom: no non-check cell raises, and every
    # check says "not attempted" (one that passes on a stub would be vacuous)
    assert stu["total"] == 0, f"{student.name} scores on stubs (vacuous check):\n{_describe(stu)}"
    assert all(e["status"] == "not_attempted" for e in stu["exercises"]), _describe(stu)
    assert stu["cells"]["errors"] == [], (
        f"{student.name}: cells fail on the untouched stubs:\n{_describe(stu)}"
    )


FULL_MARKS_NOTEBOOK = "03_scaled_dot_product"


def test_grader_gives_a_solution_full_marks_end_to_end(tmp_path: Path):
    (solution,) = [p for p in SOLUTIONS if p.stem == FULL_MARKS_NOTEBOOK]
    (sol,) = _grade([solution], tmp_path / "grades.json")
    assert sol["max"] > 0 and sol["total"] == sol["max"], (
        f"{solution.name} should get full marks:\n{_describe(sol)}"
    )
    assert all(e["status"] == "passed" and not e.get("flags") for e in sol["exercises"])
