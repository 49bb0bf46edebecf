"""The official grader, ``course grade``: planning, the harvest protocol, reports, and the
hostile submissions it must survive (real notebooks in ``tests/fixtures/grading``).

Fast tests run no kernel. Tests marked ``slow`` grade real notebooks in real kernels: one
batch run (``-j 2``) grades every fixture submission once and the tests read its reports.
"""

from __future__ import annotations

import argparse
import csv
import importlib
import json
import os
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from course_utils.checks import core
from course_utils.grading import cli as grade_cli
from course_utils.grading import harvest as hv
from course_utils.grading import plan as pl
from course_utils.grading import reports as rp
from course_utils.grading.grader import GradeOptions, apply_flag_policy, grade_submission
from course_utils.grading.kernel import OutputBudget, kernel_env

# one xdist worker runs this module (pyproject: --dist loadgroup), so the fixture batch is graded once
# instead of once per worker or with a worker waiting on the other
pytestmark = pytest.mark.xdist_group("grading-batch")

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "grading"
SUBS = FIXTURES / "submissions"
REFS = FIXTURES / "solutions"
CHECKS = FIXTURES / "grading_fixture_checks.py"
SOLUTION_CODE = ["return x * factor", "return x / x.sum(dim=-1, keepdim=True)"]


@pytest.fixture(scope="module")
def fx():
    """The fixture exercise module, importable in this process for the duration of a module."""
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(FIXTURES))
        module = importlib.import_module("grading_fixture_checks")
        table = pl.exercise_table(("grading_fixture_checks",))
        yield SimpleNamespace(
            module=module,
            table=table,
            assignment=pl.resolve_assignment("99_fixture.ipynb", None, dirs=[REFS], table=table),
        )


def _nb(name: str) -> dict:
    return pl.read_notebook(SUBS / f"{name}.ipynb")


def _step_sources(nb: dict, plan: pl.Plan) -> list[str]:
    return [
        f"CHECK {s.exercise_id}" if s.kind == "check" else nb["cells"][s.index]["id"]
        for s in plan.steps
    ]


# ----------------------------------------------------------------------------- fixtures


def test_fixture_notebooks_are_what_the_generator_writes():
    sys.path.insert(0, str(FIXTURES))
    try:
        make = importlib.import_module("make_fixtures")
    finally:
        sys.path.remove(str(FIXTURES))
    for path, text in make.write_all(FIXTURES).items():
        assert path.read_text(encoding="utf-8") == text, (
            f"{path.name} is stale: run make_fixtures.py"
        )


# ----------------------------------------------------------------------------- reading notebooks


def test_malformed_json_is_rejected_with_a_clear_message():
    with pytest.raises(pl.BadSubmission, match="not valid JSON.*damaged"):
        pl.read_notebook(SUBS / "malformed.ipynb")


def test_json_that_is_not_a_notebook_is_rejected(tmp_path):
    p = tmp_path / "x.ipynb"
    p.write_text('{"hello": 1}')
    with pytest.raises(pl.BadSubmission, match="not a Jupyter notebook"):
        pl.read_notebook(p)
    p.write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(pl.BadSubmission, match="not a text file"):
        pl.read_notebook(p)
    with pytest.raises(pl.BadSubmission, match="no such file"):
        pl.read_notebook(tmp_path / "missing.ipynb")


# ----------------------------------------------------------------------------- references


def test_assignment_found_by_name_then_by_exercise_ids(fx):
    by_name = pl.resolve_assignment(
        "99_fixture.ipynb", _nb("solution"), dirs=[REFS], table=fx.table
    )
    assert by_name.name == "99_fixture" and [g.id for g in by_name.exercises] == ["99.1", "99.2"]
    by_ids = pl.resolve_assignment("alice.ipynb", _nb("solution"), dirs=[REFS], table=fx.table)
    assert by_ids.name == "99_fixture"
    other = pl.resolve_assignment("bob.ipynb", _nb("other_assignment"), dirs=[REFS], table=fx.table)
    assert other.name == "98_other"


def test_assignment_found_by_defined_functions_when_metadata_is_gone(fx):
    found = pl.resolve_assignment("carol.ipynb", _nb("no_ids"), dirs=[REFS], table=fx.table)
    assert found.name == "99_fixture"


def test_notebook_of_another_assignment_is_named_when_one_is_required(fx):
    with pytest.raises(pl.NoAssignment, match="not the '99_fixture' assignment: it is 98_other"):
        pl.resolve_assignment(
            "x.ipynb", _nb("other_assignment"), dirs=[REFS], table=fx.table, forced="99_fixture"
        )


def test_notebook_of_no_known_assignment_is_rejected(fx, tmp_path):
    nb = {"cells": [{"cell_type": "code", "id": "a", "source": "print(1)", "metadata": {}}]}
    with pytest.raises(pl.NoAssignment, match="not a notebook of this course"):
        pl.resolve_assignment("essay.ipynb", nb, dirs=[REFS], table=fx.table)
    with pytest.raises(pl.NoAssignment, match="unknown assignment"):
        pl.resolve_assignment("essay.ipynb", nb, dirs=[REFS], table=fx.table, forced="42_nope")


def test_reference_exercise_without_a_registered_check_is_a_grader_problem(fx, tmp_path):
    nb = json.loads((REFS / "98_other.ipynb").read_text())
    for cell in nb["cells"]:
        if "course" in cell["metadata"]:
            cell["metadata"]["course"]["id"] = "97.1"
    (tmp_path / "97_orphan.ipynb").write_text(json.dumps(nb))
    found = pl.resolve_assignment("97_orphan.ipynb", None, dirs=[tmp_path], table=fx.table)
    assert found.exercises == [] and found.problems == ["97.1"]


# ----------------------------------------------------------------------------- the plan


def test_plan_drops_check_cells_and_checks_right_after_each_exercise(fx):
    nb = _nb("solution")
    plan = pl.build_plan(nb, fx.assignment)
    assert _step_sources(nb, plan) == [
        "setup",
        "ex-99-1",
        "CHECK 99.1",
        "ex-99-2",
        "CHECK 99.2",
        "after",
    ]
    assert plan.notes == []


def test_plan_restores_edited_moved_and_deleted_check_cells(fx):
    nb = _nb("edited_checks")
    plan = pl.build_plan(nb, fx.assignment)
    # the edited check (moved to the top) is not executed; the deleted one comes back; the
    # answer written in an extra cell below the exercise cell runs before the check
    assert _step_sources(nb, plan) == [
        "setup",
        "ex-99-1",
        "my-answer",
        "CHECK 99.1",
        "ex-99-2",
        "CHECK 99.2",
        "after",
    ]
    assert any("99.1 was edited" in n for n in plan.notes)
    assert any("99.2 was deleted" in n for n in plan.notes)


def test_plan_runs_cells_added_below_the_students_check_after_the_check(fx):
    nb = _nb("solution")
    at = next(i for i, c in enumerate(nb["cells"]) if c["id"] == "check-99-1")
    nb["cells"].insert(
        at + 1,
        {
            "cell_type": "code",
            "id": "experiment",
            "metadata": {},
            "source": "def scale(x, factor):\n    return 0",
        },
    )
    order = _step_sources(nb, pl.build_plan(nb, fx.assignment))
    assert order[:4] == ["setup", "ex-99-1", "CHECK 99.1", "experiment"]


def test_plan_runs_later_parts_of_the_notebook_after_the_check(fx):
    nb = _nb("exit_midway")  # os._exit sits under the "Part 2" heading, after check 99.1
    plan = pl.build_plan(nb, fx.assignment)
    order = _step_sources(nb, plan)
    assert order.index("CHECK 99.1") < order.index("bye") < order.index("CHECK 99.2")


def test_plan_matches_cells_by_source_when_ids_and_metadata_are_gone(fx):
    nb = _nb("no_ids")
    plan = pl.build_plan(nb, fx.assignment)
    kinds = [("check:" + s.exercise_id) if s.kind == "check" else s.index for s in plan.steps]
    assert kinds == [1, 3, "check:99.1", 6, "check:99.2", 8]


def test_plan_without_the_exercise_cell_still_checks_before_the_next_part(fx):
    nb = _nb("solution")
    nb["cells"] = [c for c in nb["cells"] if c["id"] != "ex-99-1"]
    plan = pl.build_plan(nb, fx.assignment)
    assert _step_sources(nb, plan)[:2] == ["setup", "CHECK 99.1"]
    assert plan.exercise_cells["99.1"] == []


def test_points_come_from_the_registry_not_from_the_notebook(fx, tmp_path):
    nb = json.loads((SUBS / "solution.ipynb").read_text())
    for cell in nb["cells"]:
        if "course" in cell["metadata"]:
            cell["metadata"]["course"]["points"] = 1000
    path = tmp_path / "99_fixture.ipynb"
    path.write_text(json.dumps(nb))
    assignment = pl.resolve_assignment(
        str(path), pl.read_notebook(path), dirs=[REFS], table=fx.table
    )
    assert [g.exercise.points for g in assignment.exercises] == [1, 2]


# ----------------------------------------------------------------------------- harvest protocol


def _harvest_in_process(tmp_path, user_ns, exercise_id="99.1", function="scale", seed=7):
    code = hv.harvest_code(
        exercise_id=exercise_id,
        function=function,
        seed=seed,
        out_dir=str(tmp_path),
        module="grading_fixture_checks",
    )
    exec(code, user_ns)  # what the kernel does, here in this process
    ex = {e.id: e for e in sys.modules["grading_fixture_checks"].EXERCISES}[exercise_id]
    cases = ex.make_cases(seed)
    return ex, cases, hv.load_harvest(str(tmp_path), len(cases))


def test_harvest_round_trip_judged_outside(fx, tmp_path):
    ns = {"scale": lambda x, factor: factor * x}
    ex, cases, h = _harvest_in_process(tmp_path, ns)
    assert h.status == "passed" and h.flags == []
    assert h.fingerprints["collect_outputs"] == hv.fingerprint(core.collect_outputs)
    assert core.judge(ex, cases, h.outputs).passed
    assert set(ns) == {"scale", "__builtins__"}  # the harvest leaves no names behind


def test_harvest_reports_missing_and_not_attempted(fx, tmp_path):
    def stub(x, factor):
        raise NotImplementedError

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert _harvest_in_process(tmp_path / "a", {})[2].status == "missing"
    assert _harvest_in_process(tmp_path / "b", {"scale": stub})[2].status == "not_attempted"


def test_harvest_keeps_dtypes_and_never_unpickles(fx, tmp_path):
    outputs = [
        {
            "f": torch.ones(2, dtype=torch.bfloat16),
            "i": torch.arange(3),
            "b": torch.tensor([True, False]),
            "n": 3,
            "s": "text",
        }
    ]
    arrays, entries = hv.trusted_namespace()["_encode"](outputs, torch)
    np.savez(tmp_path / "outputs.npz", **arrays)
    (tmp_path / "result.json").write_text(json.dumps({"status": "passed", "outputs": entries}))
    h = hv.load_harvest(str(tmp_path), 1)
    got = h.outputs[0]
    assert got["f"].dtype == torch.bfloat16 and got["i"].dtype == torch.int64
    assert got["b"].dtype == torch.bool and got["n"] == 3
    assert type(got["s"]).__name__ == "str" and not isinstance(got["s"], str)  # a stand-in
    np.savez(tmp_path / "outputs.npz", a0=np.array([object()], dtype=object))
    (tmp_path / "result.json").write_text(
        json.dumps({"status": "passed", "outputs": [{"case": 0, "key": "y", "array": "a0"}]})
    )
    assert hv.load_harvest(str(tmp_path), 1).status == "malformed"


def test_harvest_result_is_validated(tmp_path):
    (tmp_path / "result.json").write_text(json.dumps({"status": "passed!!"}))
    assert hv.load_harvest(str(tmp_path), 1).status == "malformed"
    (tmp_path / "result.json").write_text("[1, 2")
    assert hv.load_harvest(str(tmp_path), 1).status == "malformed"
    (tmp_path / "result.json").write_text(
        json.dumps(
            {"status": "passed", "outputs": [{"case": 5, "key": "y", "python": "int", "value": 1}]}
        )
    )
    np.savez(tmp_path / "outputs.npz")
    assert hv.load_harvest(str(tmp_path), 1).status == "malformed"
    assert hv.load_harvest(str(tmp_path / "nothing"), 1).status == "malformed"


def test_fingerprint_tells_a_replaced_function_apart():
    def collect_outputs(exercise, candidate, cases):
        return core.collect_outputs(exercise, exercise.reference, cases)

    assert hv.fingerprint(core.collect_outputs) == hv.fingerprint(core.collect_outputs)
    assert hv.fingerprint(collect_outputs) != hv.fingerprint(core.collect_outputs)


def test_reexport_flags_name_every_way_of_returning_the_reference(fx):
    flags = hv.trusted_namespace()["reexport_flags"]
    ref = fx.module.reference_normalize
    mod = fx.module

    def own(x):
        return x / x.sum(dim=-1, keepdim=True)

    def via_module(x):
        return mod.reference_normalize(x)

    def via_name(x):
        return ref(x)

    class Sub(torch.nn.Module):
        def forward(self, x):
            return ref(x)

    assert flags(own, ref, "normalize") == []
    assert flags(ref, ref, "normalize")[0].startswith("is_reference")
    assert flags(via_module, ref, "normalize")[0].startswith("calls_reference")
    assert flags(via_name, ref, "normalize")[0].startswith("calls_reference")
    assert any(f.startswith("calls_reference") for f in flags(Sub, ref, "normalize"))
    import functools

    assert any(f.startswith("wraps_reference") for f in flags(functools.partial(ref), ref, "n"))
    # using another exercise's reference (what fallback() returns) is fine
    assert flags(lambda x, f: fx.module.reference_scale(x, f), ref, "normalize") == []


def test_flag_policy_keeps_points_unless_told_otherwise():
    entry = {
        "status": "passed",
        "points": 2,
        "max_points": 2,
        "message": "ok",
        "flags": [
            "is_reference: softmax is the course's own course_utils.modeling.attention.softmax"
        ],
    }
    kept = apply_flag_policy(dict(entry))
    assert kept["points"] == 2 and "Flagged for review" in kept["message"]
    zeroed = apply_flag_policy(dict(entry), zero_flagged=True)
    assert zeroed["status"] == "failed" and zeroed["points"] == 0


# ----------------------------------------------------------------------------- kernel pieces


def test_output_budget_keeps_a_prefix_and_counts_the_rest():
    budget = OutputBudget(10)
    assert budget.take("12345") == "12345"
    assert budget.take("abcdefgh").startswith("abcde")
    assert budget.take("more") is None
    assert budget.seen == 17 and budget.kept == 10 and budget.truncated


def test_kernel_environment_passes_no_secrets():
    env = kernel_env(
        profile=None,
        threads=2,
        hide_gpus=True,
        ipython_dir="/tmp/ipy",
        base={
            "PATH": "/bin",
            "GITHUB_TOKEN": "x",
            "AWS_SECRET_ACCESS_KEY": "y",
            "COURSE_DATA_DIR": "/data",
            "HOME": "/home/s",
        },
    )
    assert "GITHUB_TOKEN" not in env and "AWS_SECRET_ACCESS_KEY" not in env
    assert env["COURSE_PROFILE"] == "ci" and env["COURSE_DATA_DIR"] == "/data"
    assert env["CUDA_VISIBLE_DEVICES"] == "" and env["OMP_NUM_THREADS"] == "2"
    assert (
        kernel_env(
            profile=None,
            threads=1,
            hide_gpus=False,
            ipython_dir="/x",
            base={"COURSE_PROFILE": "cpu"},
        )["COURSE_PROFILE"]
        == "cpu"
    )


# ----------------------------------------------------------------------------- reports


def _report(**over) -> dict:
    rep = {
        "notebook": "subs/alice.ipynb",
        "student": "alice",
        "assignment": "99_fixture",
        "total": 1,
        "max": 3,
        "percent": 33.33,
        "flags": [],
        "notes": ["a note"],
        "error": None,
        "error_kind": None,
        "kernel": {"status": "ok"},
        "cells": {"executed": 3, "errors": [{"cell": 4, "ename": "ValueError", "evalue": "x"}]},
        "runtime_s": 1.5,
        "seed": 1,
        "exercises": [
            {
                "id": "99.1",
                "title": "Scale",
                "points": 1,
                "max_points": 1,
                "status": "passed",
                "message": "ok",
                "flags": [],
                "runtime_s": 0.1,
            },
            {
                "id": "99.2",
                "title": "Normalise",
                "points": 0,
                "max_points": 2,
                "status": "timeout",
                "message": "slow\x00\x1b[31m loop",
                "flags": [],
                "runtime_s": 5.0,
            },
        ],
    }
    rep.update(over)
    return rep


def test_junit_names_tests_by_exercise_id_and_survives_control_characters(tmp_path):
    bad = _report(
        student="bob",
        notebook="b.ipynb",
        exercises=[],
        error="not valid JSON",
        error_kind="bad_input",
        total=0,
        max=0,
    )
    rp.write_junit([_report(), bad], tmp_path / "r.xml")
    root = ET.parse(tmp_path / "r.xml").getroot()
    cases = root.findall(".//testcase")
    assert [c.get("name") for c in cases] == ["99.1", "99.2", "notebook"]
    assert cases[1].find("error").get("type") == "timeout"
    assert root.get("tests") == "3" and root.get("errors") == "2"


def test_csv_gradebook_has_a_column_per_exercise(tmp_path):
    rp.write_csv([_report(), _report(student="bob", total=3, percent=100.0)], tmp_path / "g.csv")
    rows = list(csv.DictReader(open(tmp_path / "g.csv", encoding="utf-8")))
    assert [r["student"] for r in rows] == ["alice", "bob"]
    assert rows[0]["99.1"] == "1" and rows[0]["99.2"] == "0" and rows[1]["total"] == "3"


def test_feedback_is_markdown_with_scores_hints_and_notes(tmp_path):
    paths = rp.write_feedback([_report(), _report()], tmp_path)
    assert [p.name for p in paths] == ["alice.md", "alice-2.md"]
    text = paths[0].read_text()
    assert "**Score:** 1 / 3 points" in text and "| 99.2 | Normalise |" in text
    assert "cell 5 (ValueError)" in text and "a note" in text  # counted from 1


def test_exit_codes_follow_the_documented_order():
    ok, low = _report(percent=100.0), _report(percent=20.0)
    assert grade_cli.exit_code([ok], None) == 0
    assert grade_cli.exit_code([ok, low], 50) == 1
    assert grade_cli.exit_code([low, _report(error_kind="bad_input")], 50) == 2
    assert (
        grade_cli.exit_code([_report(error_kind="grader"), _report(error_kind="bad_input")], None)
        == 3
    )


def test_help_documents_the_options_and_exit_codes():
    parser = argparse.ArgumentParser(prog="course grade")
    grade_cli.add_arguments(parser)
    text = parser.format_help()
    for option in (
        "--json",
        "--junit",
        "--feedback",
        "--csv",
        "--classroom",
        "-j",
        "--reference-dir",
        "--cell-timeout",
        "--timeout",
        "--memory-mb",
        "--max-output-kb",
        "--fail-under",
        "--seed",
        "--assignment",
        "--checks",
        "--zero-flagged",
    ):
        assert option in text
    assert "exit codes" in text and "3  the grading machine failed" in text
    assert "2  usage error or bad input" in text and "1  a submission scored below" in text


def test_usage_errors_exit_2_before_grading(capsys):
    from course_utils import cli as course_cli

    assert course_cli.main(["grade", "x.ipynb", "--cell-timeout", "0"]) == 2
    assert course_cli.main(["grade", "x.ipynb", "--reference-dir", "/no/such/dir"]) == 2
    assert course_cli.main(["grade", "x.ipynb", "--checks", "/no/such/checks.py"]) == 2
    assert "no such" in capsys.readouterr().err
    assert course_cli.main(["grade", "x.ipynb", "--assignment", "42_nope"]) == 2
    assert "42_nope: unknown" in capsys.readouterr().err


def test_bad_inputs_get_reports_without_starting_a_kernel(fx, tmp_path):
    opts = GradeOptions(
        reference_dir=str(REFS), checks_modules=("grading_fixture_checks",), assignment="99_fixture"
    )
    missing = grade_submission(tmp_path / "gone.ipynb", opts)
    assert missing["error_kind"] == "bad_input" and "no such file" in missing["error"]
    assert missing["max"] == 3 and missing["total"] == 0
    assert missing["kernel"]["status"] == "not_started"


# ----------------------------------------------------------------------------- real kernels


def _once(tmp_path_factory, name: str, run) -> tuple[int, Path]:
    """Run ``run(out_dir) -> exit code`` once per test session, even under pytest-xdist
    (workers share the result through a locked folder instead of grading twice)."""
    import fcntl

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    out = root / f"grading-{name}"
    out.mkdir(exist_ok=True)
    with open(out / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = out / "exit-code"
        if not done.exists():
            done.write_text(str(run(out)))
        return int(done.read_text()), out


def _course(argv: list[str]) -> int:
    from course_utils import cli as course_cli

    with pytest.MonkeyPatch.context() as mp:  # --checks edits sys.path and PYTHONPATH
        mp.setattr(sys, "path", list(sys.path))
        mp.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
        return course_cli.main(argv)


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    """Grade every fixture submission once, as an instructor would: one command, -j 2."""
    paths = sorted(str(p) for p in SUBS.glob("*.ipynb"))

    def run(out: Path) -> int:
        return _course(
            [
                "grade",
                *paths,
                "--checks",
                str(CHECKS),
                "--reference-dir",
                str(REFS),
                "--assignment",
                "99_fixture",
                "--cell-timeout",
                "5",
                "--memory-mb",
                "2048",
                "-j",
                "2",
                "-q",
                "--json",
                str(out / "grades.json"),
                "--junit",
                str(out / "grades.xml"),
                "--csv",
                str(out / "grades.csv"),
                "--feedback",
                str(out / "feedback"),
                "--classroom",
                str(out / "classroom.json"),
                "--executed",
                str(out / "executed"),
            ]
        )

    code, out = _once(tmp_path_factory, "batch", run)
    reports = json.loads((out / "grades.json").read_text())
    by_name = {Path(r["notebook"]).stem: r for r in reports}
    return SimpleNamespace(code=code, reports=reports, by=by_name, out=out, paths=paths)


def _ex(rep: dict, ex_id: str) -> dict:
    return next(e for e in rep["exercises"] if e["id"] == ex_id)


@pytest.mark.slow
def test_solution_gets_full_marks(batch):
    rep = batch.by["solution"]
    assert (rep["total"], rep["max"]) == (3, 3)
    assert [e["status"] for e in rep["exercises"]] == ["passed", "passed"]
    assert rep["flags"] == [] and rep["error"] is None and rep["cells"]["errors"] == []


@pytest.mark.slow
def test_exercise_cell_that_does_not_parse_costs_only_its_points(batch):
    rep = batch.by["syntax_error"]
    ex = _ex(rep, "99.1")
    assert ex["status"] == "error" and "SyntaxError" in ex["message"]
    assert "scale is not defined" in ex["message"]
    assert _ex(rep, "99.2")["status"] == "passed" and rep["total"] == 2


@pytest.mark.slow
def test_monkeypatching_checks_allclose_and_showtraceback_gains_nothing(batch):
    rep = batch.by["monkeypatch"]
    assert rep["total"] == 0
    assert [e["status"] for e in rep["exercises"]] == ["failed", "failed"]
    assert "added instead of multiplied" in _ex(rep, "99.1")["message"]
    assert "wrong dimension" in _ex(rep, "99.2")["message"]
    # the hidden traceback still counts: failures come from the execute reply's status
    assert any(e["ename"] == "RuntimeError" for e in rep["cells"]["errors"])


@pytest.mark.slow
def test_replacing_the_harvest_machinery_is_detected(batch):
    rep = batch.by["tamper"]
    assert rep["total"] == 0
    for ex in rep["exercises"]:
        assert ex["status"] == "error"
        assert any(f.startswith("tampered") for f in ex["flags"])
        assert "collect_outputs was replaced" in ex["message"]


@pytest.mark.slow
def test_kernel_exit_keeps_the_points_already_graded(batch):
    rep = batch.by["exit_midway"]
    assert _ex(rep, "99.1")["status"] == "passed" and rep["total"] == 1
    later = _ex(rep, "99.2")
    assert later["status"] == "error" and "exited with code 1" in later["message"]
    assert rep["kernel"]["status"] == "died"


@pytest.mark.slow
def test_infinite_loops_are_interrupted_and_the_notebook_goes_on(batch):
    rep = batch.by["infinite_loop"]
    assert _ex(rep, "99.1")["status"] == "passed"
    looping = _ex(rep, "99.2")
    assert looping["status"] == "timeout" and "did not finish within 5 s" in looping["message"]
    assert rep["kernel"]["status"] == "ok"  # interrupted, not killed
    assert any("per-cell limit" in n for n in rep["notes"])
    assert rep["cells"]["executed"] == 5  # every cell ran, including the one after the loops


@pytest.mark.slow
def test_kernel_that_ignores_interrupts_is_killed(batch):
    rep = batch.by["hung"]
    assert _ex(rep, "99.1")["status"] == "passed"
    assert _ex(rep, "99.2")["status"] == "timeout"
    assert "ignoring interrupts" in _ex(rep, "99.2")["message"]
    assert rep["kernel"]["status"] == "hung"


@pytest.mark.slow
def test_memory_bombs_hit_the_memory_limit_not_the_machine(batch):
    rep = batch.by["memory_bomb"]
    assert _ex(rep, "99.1")["status"] == "passed"
    bomb = _ex(rep, "99.2")
    assert bomb["status"] == "error" and "MemoryError" in bomb["message"]
    assert "memory limit is 2048 MB" in bomb["message"]
    assert any("ran out of memory" in n for n in rep["notes"])  # the 1 TB cell at the end


@pytest.mark.slow
def test_100_mb_of_output_is_counted_not_stored(batch):
    rep = batch.by["big_output"]
    assert rep["total"] == 3
    assert rep["output"]["bytes_seen"] >= 100 * 2**20
    assert rep["output"]["bytes_kept"] <= 1024 * 1024 and rep["output"]["truncated"]
    assert (batch.out / "grades.json").stat().st_size < 200_000
    assert (batch.out / "executed" / "submissions__big_output.ipynb").stat().st_size < 2 * 2**20


@pytest.mark.slow
def test_malformed_notebook_gets_zero_and_a_clear_message(batch):
    rep = batch.by["malformed"]
    assert rep["error_kind"] == "bad_input" and "not valid JSON" in rep["error"]
    assert (rep["total"], rep["max"]) == (0, 3)
    assert all(e["status"] == "error" for e in rep["exercises"])


@pytest.mark.slow
def test_notebook_of_another_assignment_gets_zero_and_a_clear_message(batch):
    rep = batch.by["other_assignment"]
    assert rep["error_kind"] == "bad_input" and "it is 98_other" in rep["error"]
    assert (rep["total"], rep["max"]) == (0, 3)


@pytest.mark.slow
def test_edited_moved_and_deleted_check_cells_change_nothing(batch):
    rep = batch.by["edited_checks"]
    assert _ex(rep, "99.1")["status"] == "passed"  # the answer in an extra cell counts
    assert _ex(rep, "99.2")["status"] == "failed"  # the deleted check is restored
    assert any("edited" in n for n in rep["notes"]) and any("deleted" in n for n in rep["notes"])


@pytest.mark.slow
def test_reexported_reference_is_flagged_but_keeps_its_points(batch):
    rep = batch.by["reexport"]
    assert rep["total"] == 3
    scale, normalize = _ex(rep, "99.1"), _ex(rep, "99.2")
    assert any(f.startswith("is_reference") for f in scale["flags"])
    assert any(f.startswith("imports_reference") for f in scale["flags"])
    assert any(f.startswith("calls_reference") for f in normalize["flags"])
    assert "Flagged for review" in scale["message"]
    assert len(rep["flags"]) >= 3


def _sandboxed(batch) -> bool:
    return all((r.get("sandbox") or {}).get("isolated") for r in batch.reports if r["sandbox"])


@pytest.mark.slow
def test_submission_killing_its_grading_process_costs_only_its_own_report(batch):
    rep = batch.by["kill_grader"]
    if _sandboxed(batch):  # its parent is the sandbox's init: the signal reaches nothing
        assert (rep["total"], rep["max"]) == (3, 3) and rep["error"] is None
    else:
        assert (rep["total"], rep["max"]) == (0, 3)
        assert "grading process of this submission died" in rep["error"]
        assert all(e["status"] == "error" for e in rep["exercises"])
    assert batch.by["solution"]["total"] == 3  # graded in parallel, untouched


@pytest.mark.slow
def test_notebook_without_ids_or_metadata_is_graded(batch):
    assert batch.by["no_ids"]["total"] == 3


@pytest.mark.slow
def test_batch_exit_code_is_the_worst_problem_and_every_submission_is_reported(batch):
    # bad input (malformed, other_assignment) is 2; unsandboxed, kill_grader's dead grading
    # process makes it 3
    assert batch.code == (2 if _sandboxed(batch) else 3)
    assert len(batch.reports) == len(batch.paths)
    assert len({r["seed"] for r in batch.reports if r["seed"] is not None}) > 1  # fresh seeds


@pytest.mark.slow
def test_batch_writes_gradebook_junit_feedback_and_classroom(batch):
    rows = list(csv.DictReader(open(batch.out / "grades.csv", encoding="utf-8")))
    assert len(rows) == len(batch.paths) and {"99.1", "99.2"} <= set(rows[0])
    names = {c.get("name") for c in ET.parse(batch.out / "grades.xml").getroot().iter("testcase")}
    assert names == {"99.1", "99.2"}
    feedback = sorted((batch.out / "feedback").glob("*.md"))
    assert len(feedback) == len(batch.paths)
    classroom = json.loads((batch.out / "classroom.json").read_text())
    assert classroom["version"] == 1 and classroom["status"] == "error"
    assert classroom["max_score"] == 3 * len(batch.paths)


@pytest.mark.slow
def test_reports_never_reveal_solution_code(batch):
    texts = [p.read_text() for p in (batch.out / "feedback").glob("*.md")]
    texts += [(batch.out / n).read_text() for n in ("grades.json", "grades.xml", "classroom.json")]
    for text in texts:
        for line in SOLUTION_CODE:
            assert line not in text


@pytest.mark.slow
def test_executed_notebook_shows_the_restored_checks(batch):
    import nbformat

    nb = nbformat.read(batch.out / "executed" / "submissions__edited_checks.ipynb", as_version=4)
    checks = [c for c in nb.cells if "check" in c.metadata.get("tags", [])]
    assert [c.source for c in checks] == ['check("99.1", scale)', 'check("99.2", normalize)']
    assert "PASSED (1/1 points)" in checks[0].outputs[0]["text"]


@pytest.mark.slow
def test_total_time_limit_stops_grading_and_keeps_earlier_points(fx):
    opts = GradeOptions(
        reference_dir=str(REFS),
        checks_modules=("grading_fixture_checks",),
        cell_timeout=60,
        timeout=6,
        memory_mb=2048,
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", os.pathsep.join([str(FIXTURES), os.environ.get("PYTHONPATH", "")]))
        rep = grade_submission(SUBS / "infinite_loop.ipynb", opts)
    assert _ex(rep, "99.1")["status"] == "passed"
    late = _ex(rep, "99.2")
    assert late["status"] == "timeout" and "total time limit of 6 s" in late["message"]
    assert rep["kernel"]["status"] == "timeout"


# ----------------------------------------------------------------------------- the course's 00
