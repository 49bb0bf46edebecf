"""`course release`: student notebooks from solutions — stubs, cleared outputs, stable ids,
determinism, drift detection and validation messages."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from course_utils import cli
from course_utils.authoring import execute, install_cell, release
from course_utils.authoring.project import CourseSettings, read_settings

REPO = Path(__file__).resolve().parents[1]
NAME = "42_toy.ipynb"


@dataclass
class FakeExercise:
    id: str
    title: str
    points: int
    notebook: str
    function: str


REGISTRY = {
    "42.1": FakeExercise("42.1", "Toy softmax", 2, NAME, "softmax"),
    "42.2": FakeExercise("42.2", "Toy layer", 3, NAME, "ToyLayer"),
}

SOFTMAX_SOLUTION = '''def softmax(x):
    """x: (..., D) -> (..., D)."""
    ### BEGIN SOLUTION
    shifted = x - x.amax(dim=-1, keepdim=True)
    return shifted.exp() / shifted.exp().sum(dim=-1, keepdim=True)
    ### END SOLUTION'''

LAYER_SOLUTION = """class ToyLayer:
    def __init__(self, d):
        ### BEGIN SOLUTION
        self.d = d
        ### END SOLUTION

    def forward(self, x):
        if x is None:
            ### BEGIN SOLUTION
            return 0
            ### END SOLUTION
        return x"""


def _exercise(cid, ex_id, source, points, cell=new_code_cell):
    c = cell(source, id=cid)
    c.metadata["tags"] = ["exercise"]
    c.metadata["course"] = {"id": ex_id, "role": "exercise", "points": points}
    return c


def _check(cid, ex_id, function, points):
    c = new_code_cell(f'check("{ex_id}", {function})', id=cid)
    c.metadata["tags"] = ["check"]
    c.metadata["course"] = {"id": ex_id, "role": "check", "points": points}
    c.outputs = [new_output("stream", name="stdout", text=f"[{ex_id}] Toy: PASSED\n")]
    c.execution_count = 4
    return c


def toy_notebook() -> nbformat.NotebookNode:
    """A valid solution notebook for the fake registry, with outputs everywhere."""
    intro = new_markdown_cell("# Toy\nprose with $x^2$", id="intro")
    imports = new_code_cell("from course_utils.checks import check, fallback", id="imports")
    imports.execution_count = 1
    ex1 = _exercise("ex-42-1", "42.1", SOFTMAX_SOLUTION, 2)
    ex1.execution_count = 2
    ex1.metadata["execution"] = {"iopub.execute_input": "2024-01-01T00:00:00Z"}
    ex1.metadata["collapsed"] = False
    demo = new_code_cell("softmax(torch.tensor([1.0, 2.0]))", id="demo")
    demo.metadata["tags"] = ["nbval-ignore-output"]
    demo.execution_count = 3
    demo.outputs = [
        new_output(
            "execute_result", data={"text/plain": "tensor([0.2689, 0.7311])"}, execution_count=3
        ),
        new_output("display_data", data={"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"}),
    ]
    ex2 = _exercise("ex-42-2", "42.2", LAYER_SOLUTION, 3)
    answer = _exercise(
        "ex-42-3",
        "42.3",
        "Why?\n\n### BEGIN SOLUTION\nBecause.\n### END SOLUTION\n",
        1,
        cell=new_markdown_cell,
    )
    nb = new_notebook(
        cells=[
            intro,
            imports,
            ex1,
            _check("check-42-1", "42.1", "softmax", 2),
            demo,
            ex2,
            _check("check-42-2", "42.2", "ToyLayer", 3),
            answer,
        ]
    )
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    return nb


def released(nb=None) -> dict:
    return release.release_notebook(nb if nb is not None else toy_notebook(), NAME, REGISTRY)


def cell(nb, cid) -> dict:
    return next(c for c in nb["cells"] if c["id"] == cid)


def write_nb(path: Path, nb) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    # plain json: nbformat.writes would silently "repair" duplicate or missing ids
    path.write_text(json.dumps(nb, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def dirs(tmp_path, monkeypatch):
    """A solutions/ folder holding the toy notebook, and an empty notebooks/ path; the fake
    registry stands in for course_utils.checks."""
    monkeypatch.setattr(release, "load_registry", lambda: REGISTRY)
    write_nb(tmp_path / "solutions" / NAME, toy_notebook())
    (tmp_path / "solutions" / "scratch.ipynb").write_text("not a course notebook")
    return tmp_path / "solutions", tmp_path / "notebooks"


def run_cli(*argv) -> int:
    return cli.main(["release", *map(str, argv)])


# ------------------------------------------------------------------------------ stubs


def test_code_region_becomes_stub_at_marker_indentation_naming_exercise_and_function():
    src = cell(released(), "ex-42-1")["source"]
    assert src == (
        'def softmax(x):\n    """x: (..., D) -> (..., D)."""\n'
        '    raise NotImplementedError("Exercise 42.1: implement softmax")'
    )


def test_every_region_of_a_cell_is_stubbed_at_its_own_indentation():
    src = cell(released(), "ex-42-2")["source"]
    stub = 'raise NotImplementedError("Exercise 42.2: implement ToyLayer")'
    assert f"    def __init__(self, d):\n        {stub}\n" in src
    assert f"        if x is None:\n            {stub}\n        return x" in src
    assert "self.d = d" not in src and "return 0" not in src


def test_unregistered_exercise_is_named_after_outermost_enclosing_def_or_class():
    nb = toy_notebook()
    nb.cells.insert(
        5,
        _exercise(
            "ex-42-9",
            "42.9",
            "class Extra:\n    def go(self):\n"
            "        ### BEGIN SOLUTION\n        pass\n"
            "        ### END SOLUTION",
            0,
        ),
    )
    src = cell(released(nb), "ex-42-9")["source"]
    assert src.endswith('        raise NotImplementedError("Exercise 42.9: implement Extra")')


def test_markdown_region_becomes_answer_placeholder():
    src = cell(released(), "ex-42-3")["source"]
    assert src == "Why?\n\nYOUR ANSWER HERE\n"


def test_student_version_holds_no_solution_text_and_no_markers():
    text = release.render(released())
    for secret in (
        "x.amax(dim=-1",
        "self.d = d",
        "Because.",
        "BEGIN SOLUTION",
        "END SOLUTION",
        "PASSED",
        "0.7311",
        "iVBORw0KGgo",
    ):
        assert secret not in text


def test_outputs_and_execution_counts_are_cleared_in_every_cell():
    nb = released()
    code_cells = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code_cells and all(
        c["outputs"] == [] and c["execution_count"] is None for c in code_cells
    )


def test_cell_ids_tags_and_course_metadata_are_kept_and_volatile_metadata_dropped():
    source_nb, nb = toy_notebook(), released()
    assert [c["id"] for c in nb["cells"]] == [c["id"] for c in source_nb.cells]
    for before, after in zip(source_nb.cells, nb["cells"]):
        assert after["metadata"].get("tags") == before.metadata.get("tags")
        assert after["metadata"].get("course") == before.metadata.get("course")
    assert "execution" not in cell(nb, "ex-42-1")["metadata"]
    assert cell(nb, "ex-42-1")["metadata"]["collapsed"] is False
    assert "widgets" not in nb["metadata"] and nb["metadata"]["kernelspec"]["name"] == "python3"


def test_release_does_not_modify_its_input():
    nb = toy_notebook()
    before = json.dumps(nb, sort_keys=True)
    released(nb)
    assert json.dumps(nb, sort_keys=True) == before


# ---------------------------------------------------------------------- determinism


def test_release_is_byte_identical_on_rerun_sorted_nbformat_4_5_with_trailing_newline(dirs):
    solutions, notebooks = dirs
    assert run_cli("--solutions", solutions, "--notebooks", notebooks) == 0
    first = (notebooks / NAME).read_bytes()
    assert run_cli("--solutions", solutions, "--notebooks", notebooks) == 0
    assert (notebooks / NAME).read_bytes() == first
    text = first.decode("utf-8")
    data = json.loads(text)
    assert text.endswith("}\n") and (data["nbformat"], data["nbformat_minor"]) == (4, 5)
    assert text == nbformat.writes(nbformat.from_dict(data)) + "\n"  # as Jupyter saves it
    assert list(data) == sorted(data) and list(data["cells"][0]) == sorted(data["cells"][0])
    assert sorted(p.name for p in notebooks.iterdir()) == [NAME]


def test_rerunning_release_on_a_student_notebook_changes_nothing():
    # releasing twice is stable: stubs have no markers, so a second pass would fail validation,
    # but rendering the released notebook again gives the same bytes
    nb = released()
    assert release.render(json.loads(release.render(nb))) == release.render(nb)


# ------------------------------------------------------------------------- --check


def test_check_passes_when_notebooks_match(dirs, capsys):
    solutions, notebooks = dirs
    run_cli("--solutions", solutions, "--notebooks", notebooks)
    assert run_cli("--solutions", solutions, "--notebooks", notebooks, "--check") == 0
    assert "up to date" in capsys.readouterr().out


def test_check_fails_and_names_a_changed_notebook(dirs, capsys):
    solutions, notebooks = dirs
    run_cli("--solutions", solutions, "--notebooks", notebooks)
    nb = toy_notebook()
    nb.cells[0].source = "# Toy, edited"
    write_nb(solutions / NAME, nb)
    assert run_cli("--solutions", solutions, "--notebooks", notebooks, "--check") == 1
    err = capsys.readouterr().err
    assert f"{notebooks / NAME}: differs" in err and "course release" in err


def test_check_fails_on_a_hand_edited_student_notebook(dirs, capsys):
    solutions, notebooks = dirs
    run_cli("--solutions", solutions, "--notebooks", notebooks)
    target = notebooks / NAME
    target.write_text(target.read_text().replace("YOUR ANSWER HERE", "my answer"))
    assert run_cli("--solutions", solutions, "--notebooks", notebooks, "--check") == 1
    assert NAME in capsys.readouterr().err


def test_check_fails_on_missing_and_extra_notebooks(dirs, capsys):
    solutions, notebooks = dirs
    notebooks.mkdir()
    (notebooks / "07_gone.ipynb").write_text("{}")
    assert run_cli("--solutions", solutions, "--notebooks", notebooks, "--check") == 1
    err = capsys.readouterr().err
    assert f"{notebooks / NAME}: missing" in err
    assert f"{notebooks / '07_gone.ipynb'}: extra" in err
    assert not (notebooks / NAME).exists()  # --check writes nothing


def test_check_message_is_for_instructors(dirs, capsys):
    solutions, notebooks = dirs
    run_cli("--solutions", solutions, "--notebooks", notebooks)
    target = notebooks / NAME
    target.write_text(target.read_text().replace("YOUR ANSWER HERE", "my answer"))
    assert run_cli("--solutions", solutions, "--notebooks", notebooks, "--check") == 1
    assert "instructors: run `course release`" in capsys.readouterr().err


def test_check_runs_every_registered_rule(dirs, capsys, monkeypatch):
    solutions, notebooks = dirs
    run_cli("--solutions", solutions, "--notebooks", notebooks)
    seen = []

    def leak_rule(texts, sol_dir, nb_dir):
        seen.append((sorted(texts), sol_dir, nb_dir))
        return [f"{nb_dir / NAME}: a solution line leaked"]

    monkeypatch.setattr(release, "CHECKS", [*release.CHECKS, leak_rule])
    assert run_cli("--solutions", solutions, "--notebooks", notebooks, "--check") == 1
    assert seen == [([NAME], solutions, notebooks)]
    assert "a solution line leaked" in capsys.readouterr().err


# ------------------------------------------------------------ a student's work is kept


def _student_edit(notebooks: Path, mutate) -> bytes:
    target = notebooks / NAME
    nb = json.loads(target.read_text())
    mutate(nb)
    target.write_text(json.dumps(nb, indent=1))
    return target.read_bytes()


def _answer(nb):
    c = cell(nb, "ex-42-1")
    c["source"] = "".join(c["source"]).replace(
        'raise NotImplementedError("Exercise 42.1: implement softmax")', "return x.softmax(-1)"
    )


def _changed_solution(solutions: Path) -> None:
    nb = toy_notebook()
    nb.cells[0].source = "# Toy, new prose"
    write_nb(solutions / NAME, nb)


def test_release_keeps_a_notebook_with_an_answer_and_names_the_cell(dirs, capsys):
    solutions, notebooks = dirs
    run_cli("--solutions", solutions, "--notebooks", notebooks)
    mine = _student_edit(notebooks, _answer)
    _changed_solution(solutions)
    assert run_cli("--solutions", solutions, "--notebooks", notebooks) == 1
    assert (notebooks / NAME).read_bytes() == mine  # not a byte lost
    captured = capsys.readouterr()
    assert f"kept      {notebooks / NAME}" in captured.out
    assert "cell 3 ('ex-42-1'): your answer to exercise 42.1" in captured.err
    assert "--force" in captured.err


def test_release_keeps_a_notebook_with_a_cell_the_student_added(dirs, capsys):
    solutions, notebooks = dirs
    run_cli("--solutions", solutions, "--notebooks", notebooks)

    def add(nb):
        nb["cells"].insert(3, {**cell(nb, "demo"), "id": "mine", "source": "my_note = 42"})

    mine = _student_edit(notebooks, add)
    _changed_solution(solutions)
    assert run_cli("--solutions", solutions, "--notebooks", notebooks) == 1
    assert (notebooks / NAME).read_bytes() == mine
    assert "cell 4 ('mine'): a cell you added: 'my_note = 42'" in capsys.readouterr().err


def test_release_force_overwrites_a_students_answer(dirs, capsys):
    solutions, notebooks = dirs
    run_cli("--solutions", solutions, "--notebooks", notebooks)
    _student_edit(notebooks, _answer)
    assert run_cli("--solutions", solutions, "--notebooks", notebooks, "--force") == 0
    assert (notebooks / NAME).read_text() == release.render(released())


def test_RELEASE_TMP_a_planted_temporary_link_is_never_written_through(dirs, capsys):
    """Red-team v3 RELEASE-TMP: a committed ``notebooks/.NAME.tmp`` link to a file outside
    the checkout; release wrote the notebook into the link's target, then renamed the link over
    the notebook. The temporary file is now created with O_EXCL|O_NOFOLLOW under a fresh name."""
    solutions, notebooks = dirs
    notebooks.mkdir()
    canary = solutions.parent / "canary.txt"
    canary.write_text("canary")
    (notebooks / f".{NAME}.tmp").symlink_to(canary)
    assert run_cli("--solutions", solutions, "--notebooks", notebooks) == 0
    assert canary.read_text() == "canary"
    assert not (notebooks / NAME).is_symlink()
    assert (notebooks / NAME).read_text() == release.render(released())
    assert (notebooks / f".{NAME}.tmp").is_symlink()  # left alone, never followed
    assert [p.name for p in notebooks.glob(".*.tmp") if not p.is_symlink()] == []


def test_RELEASE_TMP_a_symlinked_notebook_is_refused_and_its_target_untouched(dirs, capsys):
    solutions, notebooks = dirs
    notebooks.mkdir()
    canary = solutions.parent / "canary.txt"
    canary.write_text("canary")
    (notebooks / NAME).symlink_to(canary)
    assert run_cli("--solutions", solutions, "--notebooks", notebooks, "--force") == 2
    assert canary.read_text() == "canary"
    assert "a symbolic link, not a notebook" in capsys.readouterr().err


def test_RELEASE_TMP_an_existing_temporary_file_is_never_reused(tmp_path):
    """``replace_file`` refuses to open any existing path (O_EXCL): each write gets its own."""
    target = tmp_path / "n.ipynb"
    release.replace_file(target, b"one")
    release.replace_file(target, b"two")
    assert target.read_bytes() == b"two"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["n.ipynb"]


def test_release_replaces_a_notebook_that_was_only_run(dirs, capsys):
    """Outputs and the course's own prose are not the student's work: no --force needed."""
    solutions, notebooks = dirs
    run_cli("--solutions", solutions, "--notebooks", notebooks)

    def run_it(nb):
        cell(nb, "demo")["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "hi"}]
        cell(nb, "demo")["execution_count"] = 7

    _student_edit(notebooks, run_it)
    _changed_solution(solutions)
    assert run_cli("--solutions", solutions, "--notebooks", notebooks) == 0
    assert "# Toy, new prose" in (notebooks / NAME).read_text()


def test_release_keeps_an_unreadable_notebook(dirs, capsys):
    solutions, notebooks = dirs
    notebooks.mkdir()
    (notebooks / NAME).write_text('{"cells": [ half-saved')
    assert run_cli("--solutions", solutions, "--notebooks", notebooks) == 1
    assert (notebooks / NAME).read_text() == '{"cells": [ half-saved'
    assert "not a readable notebook" in capsys.readouterr().err


def test_release_keeps_notebooks_without_a_solution_unless_forced(dirs, capsys):
    solutions, notebooks = dirs
    notebooks.mkdir()
    (notebooks / "07_gone.ipynb").write_text("{}")
    (notebooks / "my_notes.ipynb").write_text("{}")
    assert run_cli("--solutions", solutions, "--notebooks", notebooks) == 0
    assert sorted(p.name for p in notebooks.iterdir()) == ["07_gone.ipynb", NAME, "my_notes.ipynb"]
    assert run_cli("--solutions", solutions, "--notebooks", notebooks, "--force") == 0
    # a course notebook whose solution is gone goes; the student's own notebook never does
    assert sorted(p.name for p in notebooks.iterdir()) == [NAME, "my_notes.ipynb"]
    assert "removed" in capsys.readouterr().out


def test_force_and_check_cannot_be_combined(dirs, capsys):
    solutions, notebooks = dirs
    assert run_cli("--solutions", solutions, "--notebooks", notebooks, "--check", "--force") == 2


def test_empty_solutions_folder_is_a_clear_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(release, "load_registry", lambda: REGISTRY)
    (tmp_path / "solutions").mkdir()
    assert run_cli("--solutions", tmp_path / "solutions", "--notebooks", tmp_path / "nb") == 2
    assert "no solution notebooks" in capsys.readouterr().err


# ---------------------------------------------------------------------- validation


def _set_source(cid, source):
    def mutate(nb):
        next(c for c in nb.cells if c.id == cid).source = source

    return mutate


def _set_meta(cid, key, value):
    def mutate(nb):
        next(c for c in nb.cells if c.id == cid).metadata["course"][key] = value

    return mutate


def _drop_cell(cid):
    def mutate(nb):
        nb.cells = [c for c in nb.cells if c.id != cid]

    return mutate


def _set_id(old, new):
    def mutate(nb):
        next(c for c in nb.cells if c.id == old).id = new

    return mutate


def _add_cell(index, new_cell):
    def mutate(nb):
        nb.cells.insert(index, new_cell)

    return mutate


def _move_check_first(nb):
    chk = next(c for c in nb.cells if c.id == "check-42-1")
    nb.cells.remove(chk)
    nb.cells.insert(0, chk)


def _untag(cid):
    def mutate(nb):
        next(c for c in nb.cells if c.id == cid).metadata["tags"] = []

    return mutate


INVALID = {
    "begin_without_end": (
        _set_source("ex-42-1", "def softmax(x):\n    ### BEGIN SOLUTION\n    return x"),
        "ex-42-1",
        "'### BEGIN SOLUTION' has no '### END SOLUTION'",
    ),
    "end_without_begin": (
        _set_source("ex-42-1", "def softmax(x):\n    return x\n    ### END SOLUTION"),
        "ex-42-1",
        "'### END SOLUTION' without a '### BEGIN SOLUTION'",
    ),
    "nested_regions": (
        _set_source(
            "ex-42-1",
            "def softmax(x):\n    ### BEGIN SOLUTION\n"
            "    ### BEGIN SOLUTION\n    return x\n    ### END SOLUTION",
        ),
        "ex-42-1",
        "cannot nest",
    ),
    "malformed_marker": (
        _set_source(
            "ex-42-1", "def softmax(x):\n    # BEGIN SOLUTION\n    return x\n    ### END SOLUTION"
        ),
        "ex-42-1",
        "malformed solution marker",
    ),
    "exercise_without_markers": (
        _set_source("ex-42-1", "def softmax(x):\n    return x"),
        "ex-42-1",
        "has no '### BEGIN SOLUTION'",
    ),
    "region_at_top_level": (
        _set_source("ex-42-1", "### BEGIN SOLUTION\nsoftmax = None\n### END SOLUTION"),
        "ex-42-1",
        "not inside a function body",
    ),
    "region_in_class_body": (
        _set_source(
            "ex-42-2", "class ToyLayer:\n    ### BEGIN SOLUTION\n    d = 3\n    ### END SOLUTION"
        ),
        "ex-42-2",
        "not inside a function body",
    ),
    "stub_not_valid_python": (
        _set_source(
            "ex-42-1",
            "def softmax(x):\n    y = 1\n"
            "        ### BEGIN SOLUTION\n    return x\n"
            "        ### END SOLUTION",
        ),
        "ex-42-1",
        "not valid Python: indent the",
    ),
    "markers_outside_exercise_cell": (
        _set_source("demo", "def f():\n    ### BEGIN SOLUTION\n    pass\n    ### END SOLUTION"),
        "demo",
        "not tagged 'exercise'",
    ),
    "check_not_registered": (
        _add_cell(4, _check("check-42-7", "42.7", "softmax", 2)),
        "check-42-7",
        "42.7, which is not registered",
    ),
    "duplicate_cell_ids": (_set_id("demo", "ex-42-1"), "ex-42-1", "duplicate cell id 'ex-42-1'"),
    "missing_cell_id": (_set_id("demo", ""), None, "has no id"),
    "check_without_exercise": (
        _drop_cell("ex-42-1"),
        "check-42-1",
        "check cell for exercise 42.1 has no exercise cell",
    ),
    "check_before_exercise": (_move_check_first, "check-42-1", "has no exercise cell"),
    "exercise_points_differ": (
        _set_meta("ex-42-1", "points", 5),
        "ex-42-1",
        "course.points is 5 but the registry",
    ),
    "check_points_differ": (
        _set_meta("check-42-2", "points", 1),
        "check-42-2",
        "course.points is 1 but the registry",
    ),
    "check_source_edited": (
        _set_source("check-42-1", 'check("42.1", naive_softmax)'),
        "check-42-1",
        "must be exactly 'check(\"42.1\", softmax)'",
    ),
    "registered_exercise_missing": (
        _drop_cell("check-42-2"),
        None,
        "registered exercise 42.2 (Toy layer) has no check cell",
    ),
    "tag_without_metadata_role": (
        _set_meta("ex-42-1", "role", "check"),
        "ex-42-1",
        'needs metadata "course": {"role": \'exercise\'',
    ),
    "metadata_without_tag": (_untag("ex-42-1"), "ex-42-1", "is not tagged 'exercise'"),
    "bad_exercise_id": (_set_meta("ex-42-3", "id", "42-3"), "ex-42-3", "got id '42-3'"),
    "id_of_another_notebook": (
        _set_meta("ex-42-3", "id", "43.1"),
        "ex-42-3",
        "belongs to notebook 43",
    ),
}


@pytest.mark.parametrize("case", list(INVALID))
def test_invalid_solution_gives_exit_2_naming_file_cell_and_problem(case, dirs, capsys):
    mutate, cid, fragment = INVALID[case]
    solutions, notebooks = dirs
    nb = toy_notebook()
    mutate(nb)
    write_nb(solutions / NAME, nb)
    assert run_cli("--solutions", solutions, "--notebooks", notebooks) == 2
    err = capsys.readouterr().err
    line = next((ln for ln in err.splitlines() if fragment in ln), None)
    assert line is not None, err
    assert NAME in line
    if cid:
        assert f"cell {cid!r}" in line
    assert not notebooks.exists()  # nothing written


def test_validation_reports_every_problem_of_every_notebook_at_once(dirs, capsys):
    solutions, notebooks = dirs
    nb = toy_notebook()
    _drop_cell("ex-42-1")(nb)
    _set_meta("check-42-2", "points", 1)(nb)
    write_nb(solutions / NAME, nb)
    other = toy_notebook()
    _set_source("ex-42-2", "class ToyLayer:\n    pass")(other)
    write_nb(solutions / "43_other.ipynb", other)
    assert run_cli("--solutions", solutions, "--notebooks", notebooks, "--check") == 2
    err = capsys.readouterr().err
    assert "has no exercise cell" in err and "course.points is 1" in err
    assert "43_other.ipynb: cell 'ex-42-2'" in err


def test_malformed_json_is_a_clear_error(dirs, capsys):
    solutions, notebooks = dirs
    (solutions / NAME).write_text('{"cells": [')
    assert run_cli("--solutions", solutions, "--notebooks", notebooks) == 2
    assert f"{NAME}: cannot read the notebook" in capsys.readouterr().err


def test_notebook_without_cell_ids_is_rejected():
    nb = json.loads(nbformat.writes(toy_notebook()))
    nb["nbformat_minor"] = 4
    for c in nb["cells"]:
        del c["id"]
    with pytest.raises(release.ReleaseError, match="nbformat 4.4 has no cell ids"):
        release.release_notebook(nb, NAME, REGISTRY)


# ----------------------------------------------------------- the committed notebooks


def test_ci_runs_the_drift_check_not_the_test_suite():
    """A student's answers in notebooks/ differ from the release by design, so the drift check
    runs in CI (`course release --check` on the committed tree), never in `pytest`."""
    ci = (REPO / ".ci" / "run").read_text()
    assert re.search(r"^course release --check\b", ci, re.M), ci


def test_no_compared_solution_cell_relies_on_a_trailing_semicolon():
    """nbval executes cells with ``store_history=False``, so IPython ignores a trailing ``;``
    and prints the last expression (e.g. ``Text(0.5, 0.98, 'title')``) that the stored run hid:
    a cell whose output nbval compares must end with ``plt.show()`` or a statement instead."""
    offenders = []
    for path in sorted((REPO / "solutions").glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            tags = cell.metadata.get("tags", [])
            if (
                cell.cell_type == "code"
                and cell.source.rstrip().endswith(";")
                and "nbval-ignore-output" not in tags
                and "nbval-skip" not in tags
            ):
                offenders.append(f"{path.name}: cell {cell.get('id')}")
    assert not offenders, offenders


@pytest.mark.slow
def test_execute_solution_stores_outputs_in_the_profile_asked_for(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_PROFILE", "cpu")
    nb = new_notebook(
        cells=[
            new_markdown_cell("# a solution", id="title"),
            new_code_cell(
                "import os, pathlib\nprint(os.environ['COURSE_PROFILE'])\n"
                "print(pathlib.Path.cwd().name)",
                id="where",
            ),
            new_code_cell("21 * 2", id="answer"),
        ]
    )
    path = tmp_path / "sol" / "00_x.ipynb"
    path.parent.mkdir()
    nbformat.write(nb, path)
    execute.execute_solution(path, profile="ci")
    cells = nbformat.read(path, as_version=4).cells
    assert cells[1].outputs[0].text == "ci\nsol\n"  # the profile given, the notebook's folder
    assert cells[2].outputs[0].data["text/plain"] == "42"
    assert all("execution" not in c.metadata for c in cells)  # no timings stored
    assert os.environ["COURSE_PROFILE"] == "cpu"  # restored


# ---------------------------------------------------------------- the release's steps


def test_validate_lists_problems_without_raising_or_changing_the_notebook():
    nb = toy_notebook()
    cell(nb, "check-42-1").source = "check('42.1', softmax)"
    before = json.dumps(nb, sort_keys=True)
    problems = release.validate(nb, release.Context(NAME, REGISTRY))
    assert len(problems) == 1 and "check cell source must be exactly" in problems[0]
    assert json.dumps(nb, sort_keys=True) == before
    assert release.validate(toy_notebook(), release.Context(NAME, REGISTRY)) == []


def test_each_step_does_one_job():
    ctx = release.Context(NAME, REGISTRY)
    plain = json.loads(json.dumps(toy_notebook()))
    stripped = release.strip_solutions(json.loads(json.dumps(plain)), ctx)
    assert "BEGIN SOLUTION" not in json.dumps(stripped["cells"])
    assert cell(stripped, "demo")["outputs"] == cell(plain, "demo")["outputs"]  # outputs kept
    cleared = release.clear_outputs(json.loads(json.dumps(plain)), ctx)
    assert all(c.get("outputs", []) == [] for c in cleared["cells"])
    assert cell(cleared, "ex-42-1")["source"] == cell(plain, "ex-42-1")["source"]
    tidy = release.drop_volatile_metadata(json.loads(json.dumps(plain)), ctx)
    assert "widgets" not in tidy["metadata"]
    assert "execution" not in cell(tidy, "ex-42-1")["metadata"]
    assert release.STEPS == (
        release.strip_solutions,
        release.clear_outputs,
        release.drop_volatile_metadata,
        release.add_install_cell,
    )


def test_stored_solution_outputs_keep_the_static_image_not_the_widget_view():
    view = {"model_id": "abc", "version_major": 2, "version_minor": 0}
    nb = new_notebook(
        cells=[
            new_code_cell("explorer", id="explorer"),
            new_code_cell("old_style", id="old"),
        ]
    )
    nb.cells[0].outputs = [
        new_output(
            "display_data",
            data={execute.WIDGET_VIEW: view, "image/png": "iVBOR", "text/plain": "(static)"},
        )
    ]
    nb.cells[1].outputs = [
        new_output("stream", name="stdout", text="note\n"),
        new_output("display_data", data={execute.WIDGET_VIEW: view, "text/plain": "VBox(...)"}),
    ]
    nb.metadata["widgets"] = {"state": {}}
    execute.strip_widget_views(nb)
    assert nb.cells[0].outputs[0]["data"] == {"image/png": "iVBOR", "text/plain": "(static)"}
    assert [o["output_type"] for o in nb.cells[1].outputs] == ["stream"]  # a text repr only: gone
    assert "widgets" not in nb.metadata


# ------------------------------------------------------------------- the install cell
# (Colab, Kaggle, any machine without the package: the first cell installs the course)


def _install_cell_runs(source: str) -> str:
    """Run an install cell's source as a notebook would; returns what it printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(source, "install-cell", "exec"), {})
    return out.getvalue()


def test_pip_command_installs_the_configured_repository_and_branch():
    settings = CourseSettings("https://github.com/ann/course/", "spring")
    assert install_cell.pip_command(settings, python="/py") == [
        "/py", "-m", "pip", "install", "--quiet", "git+https://github.com/ann/course@spring",
    ]  # fmt: skip
    assert install_cell.pip_command(CourseSettings("https://gitlab.com/a/b.git")) == [
        "python", "-m", "pip", "install", "--quiet", "git+https://gitlab.com/a/b.git@main",
    ]  # fmt: skip
    assert install_cell.pip_command(CourseSettings()) is None


def test_install_cell_does_nothing_where_course_utils_imports(monkeypatch):
    def no_pip(*args, **kwargs):
        raise AssertionError(f"pip ran: {args}")

    monkeypatch.setattr(subprocess, "run", no_pip)
    for settings in (CourseSettings("https://github.com/ann/course"), CourseSettings()):
        assert _install_cell_runs(install_cell.cell_source(settings)) == ""


def test_install_cell_runs_pip_with_the_configured_url_where_course_utils_is_missing(monkeypatch):
    settings = CourseSettings("https://github.com/ann/course", "main")
    ran = []

    def fake_pip(command, check):
        ran.append(command)
        assert check is True
        sys.modules.pop("course_utils")  # "installed": the real package imports again

    monkeypatch.setattr(subprocess, "run", fake_pip)
    monkeypatch.setitem(sys.modules, "course_utils", None)  # import course_utils now fails
    printed = _install_cell_runs(install_cell.cell_source(settings))
    assert ran == [install_cell.pip_command(settings, python=sys.executable)]
    assert "installing the course from https://github.com/ann/course (branch main" in printed
    assert "course_utils installed" in printed


def test_install_cell_without_a_repository_stops_with_how_to_install(monkeypatch):
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("pip ran"))
    monkeypatch.setitem(sys.modules, "course_utils", None)
    with pytest.raises(ModuleNotFoundError, match="names no repository.*pip install -e"):
        _install_cell_runs(install_cell.cell_source(CourseSettings()))


def test_release_in_a_course_project_puts_the_install_cell_first(dirs):
    solutions, notebooks = dirs
    (solutions.parent / "pyproject.toml").write_text(
        '[tool.course]\nrepository = "https://github.com/ann/course"\n'
    )
    assert run_cli("--solutions", solutions, "--notebooks", notebooks) == 0
    nb = json.loads((notebooks / NAME).read_text())
    first = nb["cells"][0]
    assert first["id"] == install_cell.CELL_ID and first["cell_type"] == "code"
    assert "".join(first["source"]) == install_cell.cell_source(
        CourseSettings("https://github.com/ann/course")
    )
    assert [c["id"] for c in nb["cells"][1:]] == [c.id for c in toy_notebook().cells]
    assert install_cell.CELL_ID not in (solutions / NAME).read_text()  # solutions untouched
    assert run_cli("--solutions", solutions, "--notebooks", notebooks, "--check") == 0
    # a changed repository is drift: the committed notebooks must be released again
    (solutions.parent / "pyproject.toml").write_text(
        '[tool.course]\nrepository = "https://github.com/bob/course"\n'
    )
    assert run_cli("--solutions", solutions, "--notebooks", notebooks, "--check") == 1


def test_every_released_course_notebook_starts_with_the_install_cell():
    expected = install_cell.cell_source(read_settings(REPO))
    # (the committed notebooks/ are held to this by `course release --check` in CI; a test
    # never reads notebooks/, which in a student's checkout holds their answers)
    for path in release.solution_paths(REPO / "solutions"):
        first = json.loads(release.release_file(path))["cells"][0]
        assert first["id"] == install_cell.CELL_ID, path.name
        assert "".join(first["source"]) == expected, path.name
        assert install_cell.CELL_ID not in path.read_text(encoding="utf-8"), path.name
