"""The nbval contract, for every ``solutions/NN_*.ipynb`` (new notebooks are picked up
automatically):

(a) ``pytest --nbval`` passes on the solution under ``COURSE_PROFILE=ci``: every cell runs and
    every output not tagged ``nbval-ignore-output`` matches the stored one;
(b) the untouched student version in ``notebooks/`` runs top to bottom: no non-check cell
    raises, and every check cell prints "not attempted" (a check that passes on a stub is
    vacuous and fails the suite).

Each notebook is executed once per test. What nbval compares (nbval 0.11): stream text
(stdout and stderr, after folding ``\\r`` progress-bar updates) and every output MIME type
except ``image/png`` / ``image/jpeg`` (so a figure's ``text/plain`` "<Figure size ... with 1
Axes>" is compared, its pixels are not); markdown cells and unexecuted cells are not compared.
Tags: ``nbval-ignore-output`` runs a cell without comparing it (timings, training logs,
profile-dependent numbers), ``nbval-skip`` does not run it, ``raises-exception`` expects an
error. ``tests/nbval_sanitize.cfg`` masks memory addresses before comparing.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

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
    cmd = [sys.executable, "-m", "pytest", "--nbval", "--nbval-current-env",
           "--nbval-sanitize-with", str(SANITIZE), "--nbval-cell-timeout", str(CELL_TIMEOUT_S),
           "-p", "no:cacheprovider", "-q", "--tb=short", "--color=no",
           str(solution.relative_to(REPO))]
    try:
        proc = subprocess.run(cmd, cwd=REPO, env=_ci_env(), capture_output=True, text=True,
                              timeout=NOTEBOOK_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        pytest.fail(f"nbval on {solution.name} ran past {NOTEBOOK_TIMEOUT_S} s "
                    f"(COURSE_NOTEBOOK_TIMEOUT)\n{out[-6000:]}")
    report = _ANSI.sub("", proc.stdout + proc.stderr)
    assert proc.returncode == 0, (
        f"`COURSE_PROFILE=ci {' '.join(cmd[2:])}` failed on {solution.name}. Tag cells whose "
        f"output varies with `nbval-ignore-output`, or re-execute the solution.\n"
        f"{report[-12000:]}")


def _text(outputs) -> str:
    parts = []
    for out in outputs:
        if out.get("output_type") == "stream":
            parts.append(out.get("text", ""))
        elif "data" in out:
            parts.append(out["data"].get("text/plain", ""))
    return "".join(parts)


def _execute_student(path: Path) -> nbformat.NotebookNode:
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient
    from nbval.kernel import CURRENT_ENV_KERNEL_NAME, NbvalKernelspecManager

    nb = nbformat.read(path, as_version=4)
    km = KernelManager(kernel_name=CURRENT_ENV_KERNEL_NAME,
                       kernel_spec_manager=NbvalKernelspecManager())
    client = NotebookClient(nb, km=km, timeout=CELL_TIMEOUT_S, allow_errors=True,
                            record_timing=False,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute(env=_ci_env())
    return nb


@pytest.mark.parametrize("solution", SOLUTIONS, ids=_ids)
def test_untouched_student_notebook_runs_and_every_check_is_not_attempted(solution: Path):
    student = REPO / "notebooks" / solution.name
    assert student.exists(), f"{student} is missing: run `course release`"
    nb = _execute_student(student)

    problems = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        where = f"cell {cell.get('id')!r} (#{index})"
        errors = [o for o in cell.outputs if o.get("output_type") == "error"]
        is_check = "check" in cell.metadata.get("tags", [])
        if errors:
            err = errors[0]
            tb = _ANSI.sub("", "\n".join(err.get("traceback", [])))[-3000:]
            what = "check cell raised" if is_check else "cell raised"
            problems.append(f"{where}: {what} {err.get('ename')}: {err.get('evalue')}\n{tb}")
            continue
        if is_check:
            text = _text(cell.outputs)
            if "PASSED" in text:
                problems.append(f"{where}: check passes on the untouched stub (vacuous): {text!r}")
            elif "not attempted" not in text:
                problems.append(f"{where}: check cell should print 'not attempted', printed "
                                f"{text!r}")
    assert not problems, f"{student.name}:\n" + "\n\n".join(problems)
