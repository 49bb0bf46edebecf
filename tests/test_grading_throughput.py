"""Grading throughput (issue 30, "A class of 1,000"): what each graded submission's kernel
pays, and what the grader may skip because no verdict depends on it. One test per lever."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))
# authoring-only packages: a notebook's kernel never needs them (about 1.1 s of CPU in all)
AUTHORING_ONLY = ("nbformat", "jsonschema", "nbclient", "rfc3987_syntax")


def _course_imports(path: Path) -> list[str]:
    """The ``course_utils`` import statements of a notebook's code cells."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    found = []
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        try:
            tree = ast.parse(source)
        except SyntaxError:  # IPython magics
            continue
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = (
                    [node.module or ""]
                    if isinstance(node, ast.ImportFrom)
                    else [a.name for a in node.names]
                )
                if any(n.startswith("course_utils") for n in names):
                    found.append(ast.unparse(node))
    return found


def test_KERNEL_IMPORTS_no_notebook_pulls_in_the_authoring_tools():
    """Every notebook's first cell imports ``course_utils.authoring.claims``; it took one
    constant from ``authoring.execute``, which imported nbformat and jsonschema (and
    rfc3987_syntax's grammar): 1.15 s of CPU in every kernel, a fifth of an nb03 grading.
    The course imports of all solution notebooks together import none of them."""
    lines = sorted({line for path in SOLUTIONS for line in _course_imports(path)})
    assert len(lines) > 20, lines  # the notebooks' imports were found
    code = "\n".join(lines) + (
        f"\nimport sys\nprint([m for m in {AUTHORING_ONLY!r} if m in sys.modules])"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout[-2000:]


# ------------------------------------------------------------------------------- the tail
NB03 = "03_scaled_dot_product.ipynb"
FIXTURES = ROOT / "tests" / "fixtures" / "grading"


def _plan(path: Path, nb: dict | None = None, **kw):
    from course_utils.grading import plan as pl

    nb = nb if nb is not None else pl.read_notebook(path)
    table = pl.exercise_table(kw.pop("checks", ()))
    assignment = pl.resolve_assignment(
        str(path), nb, dirs=pl.reference_dirs(kw.pop("refs", None)), table=table, forced=None
    )
    return nb, pl.build_plan(nb, assignment)


def test_TAIL_is_the_unchanged_reference_cells_after_the_last_check():
    """nb03's tail is the key/value training run and its plots: after both checks, every cell
    the reference's own. A changed cell in it runs, with every cell above it; a cell the
    student added at the end leaves no tail at all; ``all_cells`` runs everything."""
    import copy

    for path in (ROOT / "solutions" / NB03, ROOT / "notebooks" / NB03):
        nb, plan = _plan(path)
        steps = plan.graded_steps()
        tail = plan.steps[len(steps) :]
        assert plan.tail == len(tail) == 7, (path, plan.tail)
        assert steps[-1].kind == "check" and all(s.kind == "cell" for s in tail)
        assert plan.graded_steps(all_cells=True) == plan.steps
        sources = ["".join(nb["cells"][s.index]["source"]) for s in tail]
        assert any("def train_lookup" in s for s in sources)  # the training run is skipped

        changed = copy.deepcopy(nb)
        third = tail[2].index
        changed["cells"][third]["source"] += "\nprint('mine')"
        _, plan2 = _plan(path, changed)
        assert plan2.tail == len(tail) - 3  # the changed cell and the two above it run

        added = copy.deepcopy(nb)
        added["cells"].append(
            {"cell_type": "code", "id": "mine", "metadata": {}, "source": "import os"}
        )
        added["cells"][-1]["outputs"], added["cells"][-1]["execution_count"] = [], None
        _, plan3 = _plan(path, added)
        assert plan3.tail == 0 and len(plan3.steps) == len(plan.steps) + 1


def test_TAIL_hostile_fixtures_keep_every_cell_they_wrote():
    """In every red-team and bad-submission fixture the tail holds only the reference's
    closing ``print("done")``: each attack cell is the student's and runs."""
    sys.path.insert(0, str(FIXTURES))
    try:
        for path in sorted(FIXTURES.glob("*/*.ipynb")):
            if path.parent.name == "solutions" or path.stem == "malformed":
                continue
            nb, plan = _plan(path, checks=("grading_fixture_checks",), refs=FIXTURES / "solutions")
            tail = [s.index for s in plan.steps[len(plan.steps) - plan.tail :]]
            assert all("".join(nb["cells"][i]["source"]) == 'print("done")' for i in tail), (
                path.name,
                tail,
            )
    finally:
        sys.path.remove(str(FIXTURES))


def _verdicts(reports: list[dict]) -> dict[str, tuple]:
    """What decides a grade, per submission: every entry's id, status, points, message and
    flags, the total, and the error."""
    out = {}
    for r in reports:
        entries = [
            (e["id"], e["status"], e["points"], e["message"], tuple(e["flags"]))
            for e in r["exercises"]
        ]
        out[Path(r["notebook"]).parent.name + "/" + Path(r["notebook"]).stem] = (
            r["total"],
            r["max"],
            r["error"],
            r["error_kind"],
            entries,
        )
    return out


def _copies(tmp_path: Path, sources: list[Path]) -> list[str]:
    """Each source in a folder of its own (one student each), as a batch collects them."""
    import shutil

    paths = []
    for k, src in enumerate(sources):
        folder = tmp_path / f"s{k:02d}-{src.parent.name}"
        folder.mkdir()
        shutil.copyfile(src, folder / src.name)
        paths.append(str(folder / src.name))
    return paths


@pytest.mark.slow
def test_TAIL_same_grades_with_and_without_it_nb03(tmp_path):
    """nb03's solution and untouched student version, sandboxed, graded with the tail skipped
    (the default) and with ``all_cells``: every verdict, point, message and flag the same."""
    from course_utils.grading.cli import grade_all
    from course_utils.grading.grader import GradeOptions

    paths = _copies(tmp_path, [ROOT / "solutions" / NB03, ROOT / "notebooks" / NB03])
    runs = {}
    for all_cells in (False, True):
        opts = GradeOptions(seed=1234, all_cells=all_cells, student="(default)")
        runs[all_cells] = grade_all(paths, opts, jobs=2, progress=False)
    assert _verdicts(runs[False]) == _verdicts(runs[True])
    solution, stub = runs[False]
    assert solution["total"] == solution["max"] == 9 and stub["total"] == 0
    assert solution["cells"]["not_run"] == stub["cells"]["not_run"] == 7
    assert runs[True][0]["cells"]["not_run"] == 0
    assert runs[True][0]["cells"]["executed"] == solution["cells"]["executed"] + 7


@pytest.mark.slow
def test_TAIL_same_grades_with_and_without_it_red_team_fixtures(tmp_path, monkeypatch):
    """Every hostile and bad-submission fixture (the sandbox's and the first red teams'),
    graded with the tail skipped and with ``all_cells``: the same verdicts."""
    from course_utils.grading.cli import grade_all
    from course_utils.grading.grader import GradeOptions

    monkeypatch.syspath_prepend(str(FIXTURES))
    sources = sorted(FIXTURES.glob("hostile/*.ipynb")) + sorted(
        p for p in FIXTURES.glob("submissions/*.ipynb") if p.stem not in ("hung", "memory_bomb")
    )
    paths = _copies(tmp_path, sources)
    runs = {}
    for all_cells in (False, True):
        opts = GradeOptions(
            reference_dir=str(FIXTURES / "solutions"),
            checks_modules=("grading_fixture_checks",),
            assignment="99_fixture",
            cell_timeout=5,
            memory_mb=2048,
            seed=1234,
            all_cells=all_cells,
        )
        runs[all_cells] = grade_all(paths, opts, jobs=2, progress=False)
    skipped, full = _verdicts(runs[False]), _verdicts(runs[True])
    assert skipped.keys() == full.keys() and len(skipped) == len(sources)
    # 'neighbour' drives a ZMQ client inside its own kernel, which can abort that kernel
    # (SIGABRT) at random, before or after its stubs are reached (seen once in the slow tier
    # under load): its verdicts may differ run to run, with or without the tail, its points
    # may not (0 either way)
    shaky = {k for k in skipped if k.endswith("/neighbour")}
    assert shaky and all(skipped[k][:2] == full[k][:2] == (0, 3) for k in shaky)
    different = {
        k: (skipped[k], full[k]) for k in skipped if k not in shaky and skipped[k] != full[k]
    }
    assert not different, different
    assert sum(r["cells"]["not_run"] for r in runs[False]) >= len(sources) // 2
