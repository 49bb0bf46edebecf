"""Every ``solutions/NN_*.ipynb`` (new notebooks are picked up automatically), executed ONCE per
test session, through the official grader:

(a) ``course grade`` on the solution under ``COURSE_PROFILE=ci`` (sandboxed kernel, the real
    harvest-and-judge path) gives full marks, no flags, and no cell raises (a failed ``claim``
    is a raising cell);
(b) the same run's outputs match the ones stored in the notebook, compared by nbval's own code
    (``tests/nbval_compare.py``: every cell not tagged ``nbval-ignore-output``; stream text after
    folding ``\\r`` updates and every MIME type except images and widget views;
    ``tests/nbval_sanitize.cfg`` masks memory addresses). Tag cells whose output varies with
    ``nbval-ignore-output``, or re-execute the solution.

The released student version (into a temporary folder: ``notebooks/`` may hold a student's
answers) is checked without a second execution of every notebook: each exercise's stub, run
through its check, is "not attempted" (a check that passes on a stub is vacuous), and every later
use of an exercise's function goes through ``fallback(...)``, so the untouched version runs to
the end. One notebook (``UNTOUCHED_NOTEBOOK``) is also graded end to end in its untouched
student version: zero points, every cell runs. ``tests/test_nbval_strict.py`` runs a student
notebook under nbval itself, with the strict check cells.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbval_compare import mismatches

from course_utils import checks
from course_utils.authoring import release
from course_utils.checks import core
from course_utils.grading.plan import course_meta, python_source

REPO = Path(__file__).resolve().parents[1]
SOLUTIONS = sorted((REPO / "solutions").glob("[0-9][0-9]_*.ipynb"))
# generous bounds for a loaded 2-core machine; the ci profile aims at <= 60 s per notebook
NOTEBOOK_TIMEOUT_S = int(os.environ.get("COURSE_NOTEBOOK_TIMEOUT", "300"))
CELL_TIMEOUT_S = 180
# one untouched student version graded end to end: fallbacks, several kinds of exercise
UNTOUCHED_NOTEBOOK = "05_masked_attention"


def _ids(path: Path) -> str:
    return path.stem


def _ci_env() -> dict[str, str]:
    env = dict(os.environ, COURSE_PROFILE="ci", PYTHONHASHSEED="0")
    env.pop("PYTEST_ADDOPTS", None)
    return env


def _grade(paths: list[Path], out: Path, executed: Path | None = None) -> list[dict]:
    """Grade ``paths`` with the official grader (ci profile), one report per notebook."""
    cmd = [sys.executable, "-m", "course_utils.cli", "grade", *map(str, paths), "-q"]
    cmd += ["--json", str(out), "--reference-dir", str(REPO / "solutions")]
    cmd += ["--cell-timeout", str(CELL_TIMEOUT_S), "--timeout", str(NOTEBOOK_TIMEOUT_S)]
    if executed is not None:  # keep every output: the comparison needs them whole
        cmd += ["--executed", str(executed), "--max-output-kb", "65536"]
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


@pytest.mark.slow
@pytest.mark.notebook
@pytest.mark.parametrize("solution", SOLUTIONS, ids=_ids)
def test_solution_gets_full_marks_and_reproduces_its_stored_outputs(solution: Path, tmp_path: Path):
    executed = tmp_path / "executed"
    (sol,) = _grade([solution], tmp_path / "grades.json", executed)
    assert sol["max"] > 0 and sol["total"] == sol["max"], (
        f"{solution.name} should get full marks:\n{_describe(sol)}"
    )
    assert all(e["status"] == "passed" and not e.get("flags") for e in sol["exercises"])
    assert sol["cells"]["errors"] == [], f"{solution.name}: cells raise:\n{_describe(sol)}"
    (run,) = executed.glob("*.ipynb")
    stored = nbformat.read(solution, as_version=4)
    problems = mismatches(stored, nbformat.read(run, as_version=4))
    assert not problems, (
        f"{solution.name}: the ci run's outputs differ from the stored ones. Tag cells whose "
        f"output varies with `nbval-ignore-output`, or re-execute the solution.\n"
        + "\n".join(problems)[-12000:]
    )


@pytest.mark.slow
@pytest.mark.notebook
def test_grader_gives_the_untouched_student_version_zero_and_runs_it_to_the_end(tmp_path: Path):
    (solution,) = [p for p in SOLUTIONS if p.stem == UNTOUCHED_NOTEBOOK]
    student = tmp_path / "student" / solution.name
    student.parent.mkdir()
    student.write_text(release.release_file(solution), encoding="utf-8")
    (stu,) = _grade([student], tmp_path / "grades.json")

    assert stu["max"] > 0, _describe(stu)
    assert stu["total"] == 0, f"{student.name} scores on stubs (vacuous check):\n{_describe(stu)}"
    assert all(e["status"] == "not_attempted" for e in stu["exercises"]), _describe(stu)
    assert stu["cells"]["errors"] == [], (
        f"{student.name}: cells fail on the untouched stubs:\n{_describe(stu)}"
    )


# ----------------------------------------------------------------------------- the student version,
# without a kernel


def _student(solution: Path) -> dict:
    return json.loads(release.release_file(solution))


def _code(cell: dict) -> str:
    return python_source("".join(cell["source"]))


def _loaded_names(source: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _exercise_cells(nb: dict) -> list[tuple[int, str]]:
    found = []
    for i, cell in enumerate(nb["cells"]):
        ex_id, role = course_meta(cell)
        if cell["cell_type"] == "code" and ex_id and role == "exercise":
            found.append((i, ex_id))
    return found


def _is_fallback(node: ast.stmt) -> bool:
    value = node.value if isinstance(node, ast.Assign) else None
    return isinstance(value, ast.Call) and getattr(value.func, "id", "") == "fallback"


def _definitions(cell: dict) -> list[str]:
    """What a cell defines without computing anything: its imports, functions, classes and
    ``x = fallback(...)`` assignments (no training, no data), one statement each."""
    kinds = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)
    body = ast.parse(_code(cell)).body
    return [ast.unparse(n) for n in body if isinstance(n, kinds) or _is_fallback(n)]


def _stub_verdicts(nb: dict, name: str) -> list[tuple[str, str, str]]:
    """``(exercise id, status, message)`` of each exercise's cell as it stands in ``nb``, run
    through its check in this process: the notebook's definitions (imports, functions, classes,
    fallbacks) in order, with each exercise cell whole."""
    namespace: dict = {}
    exercises = dict(_exercise_cells(nb))
    verdicts = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code" or course_meta(cell)[1] == "check":
            continue
        where = f"{name}:cell {i}"
        if i not in exercises:
            for statement in _definitions(cell):
                try:  # a default argument may name a computed value (e.g. cfg.steps): skip it
                    with contextlib.redirect_stdout(io.StringIO()):  # fallback(...) says its pick
                        exec(compile(statement, where, "exec"), namespace)
                except NameError:
                    pass
            continue
        exec(compile(_code(cell), where, "exec"), namespace)
        ex_id = exercises[i]
        function = checks.get(ex_id).function
        assert function in namespace, f"{name} cell {i} does not define {function}"
        result = checks.run(ex_id, namespace[function])
        verdicts.append((ex_id, result.status, result.message))
    return verdicts


def _uses_before_fallback(nb: dict) -> list[str]:
    """Cells that call an exercise's function after its exercise cell and before a cell that
    takes it from ``fallback(...)``: in the untouched version they stop at the stub."""
    problems = []
    for i, ex_id in _exercise_cells(nb):
        function = checks.get(ex_id).function
        for j in range(i + 1, len(nb["cells"])):
            cell = nb["cells"][j]
            if cell["cell_type"] != "code" or course_meta(cell)[1] == "check":
                continue
            source = _code(cell)
            if f'fallback("{ex_id}"' in source or f"fallback('{ex_id}'" in source:
                break  # from here on the name holds a working implementation
            if function in _loaded_names(source):
                problems.append(f"{ex_id}: cell {j} uses {function} before its fallback")
                break
    return problems


@pytest.mark.parametrize("solution", SOLUTIONS, ids=_ids)
def test_every_stub_of_the_student_version_is_not_attempted(solution: Path):
    verdicts = _stub_verdicts(_student(solution), solution.name)
    assert verdicts, f"{solution.name} has no exercise cell"
    wrong = [f"{i}: {status}\n{msg}" for i, status, msg in verdicts if status != core.NOT_ATTEMPTED]
    assert not wrong, (
        f"{solution.name}: untouched stubs must be 'not attempted' (a check that passes or fails "
        "on a stub is vacuous or confusing):\n" + "\n".join(wrong)
    )


@pytest.mark.parametrize("solution", SOLUTIONS, ids=_ids)
def test_the_student_version_uses_an_exercise_only_through_its_fallback(solution: Path):
    """ "Run All" on the untouched version must reach the end."""
    problems = _uses_before_fallback(_student(solution))
    assert not problems, f"{solution.name}:\n" + "\n".join(problems)


def _student_05() -> dict:
    (solution,) = [p for p in SOLUTIONS if p.stem == UNTOUCHED_NOTEBOOK]
    return _student(solution)


def test_the_stub_test_catches_a_stub_that_returns_something():
    nb = _student_05()
    i, ex_id = _exercise_cells(nb)[0]
    function = checks.get(ex_id).function
    nb["cells"][i]["source"] = f"def {function}(x):\n    return x\n"
    verdicts = dict((e, s) for e, s, _ in _stub_verdicts(nb, "edited"))
    assert verdicts[ex_id] == core.FAILED


def test_the_fallback_rule_catches_a_direct_use_after_the_check():
    nb = _student_05()
    assert _uses_before_fallback(nb) == []
    i, ex_id = _exercise_cells(nb)[0]
    function = checks.get(ex_id).function
    nb["cells"].insert(i + 2, nbformat.v4.new_code_cell(f"y = {function}(x)"))
    assert _uses_before_fallback(nb) == [
        f"{ex_id}: cell {i + 2} uses {function} before its fallback"
    ]


# ----------------------------------------- prose a student version can show (student-D, review-D)
_MINE = ("07_", "08_", "09_", "11_", "12_")


@pytest.mark.parametrize(
    "solution", [s for s in SOLUTIONS if s.name.startswith(_MINE)], ids=lambda p: p.stem
)
def test_prose_never_points_at_stored_outputs_the_student_version_does_not_have(solution: Path):
    """Student notebooks have no outputs: prose and printed text may not refer to 'the stored
    run', 'stored outputs' or 'the stored notebook' (student-D §10, items 8 to 10)."""
    nb = json.loads(solution.read_text())
    bad = [
        (cell.get("id"), line.strip())
        for cell in nb["cells"]
        for line in "".join(cell["source"]).splitlines()
        if any(
            w in line.lower()
            for w in (
                "stored run",
                "stored output",
                "stored notebook",
                "stored `cpu`",
                "stored <code>",
            )
        )
    ]
    assert bad == [], bad


def test_08_trains_on_the_bundled_text_and_its_prose_does_not_offer_the_offline_corpus():
    nb = json.loads((REPO / "solutions" / "08_gpt.ipynb").read_text())
    text = {c.get("id"): "".join(c["source"]) for c in nb["cells"]}
    assert "ships with `course_utils`" in text["data-md"]
    assert "offline corpus" not in text["data-md"].lower()
    # the stored cpu run loaded the bundled copy
    out = "".join(
        "".join(o.get("text", ""))
        for c in nb["cells"]
        if c.get("id") == "load-data"
        for o in c.get("outputs", [])
    )
    assert "tinyshakespeare.txt.xz (bundled)" in out
