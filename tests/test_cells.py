"""The notebook-cell schema (course_utils.authoring.cells): one rule for a cell's source, role and
exercise id, and release, the student-work guard and the grader all following it."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from course_utils.authoring import cells, release, student_work, validate
from course_utils.grading import plan

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "grading"


def cell(cid="c1", *, role=None, ex_id=None, tags=None, source="x = 1", cell_type="code"):
    meta: dict = {}
    course = {k: v for k, v in (("role", role), ("id", ex_id)) if v is not None}
    if course:
        meta["course"] = course
    if tags is not None:
        meta["tags"] = tags
    out = {"cell_type": cell_type, "metadata": meta, "source": source}
    if cid is not None:
        out["id"] = cid
    return out


# ---------------------------------------------------------------------------- the rule


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("a\nb", "a\nb"),
        (["a\n", "b"], "a\nb"),
        ([], ""),
        (None, ""),
    ],
)
def test_cell_source_joins_the_list_form_and_accepts_a_string(source, expected):
    assert cells.cell_source({"source": source}) == expected


def test_cell_source_of_a_cell_without_source_is_empty():
    assert cells.cell_source({"cell_type": "code"}) == ""


@pytest.mark.parametrize(
    ("kwargs", "role", "origin"),
    [
        # each way alone
        ({"role": "exercise"}, "exercise", "metadata"),
        ({"role": "check"}, "check", "metadata"),
        ({"tags": ["exercise"]}, "exercise", "tag"),
        ({"tags": ["nbval-ignore-output", "check"]}, "check", "tag"),
        ({"cid": "ex-03-1"}, "exercise", "cell id"),
        ({"cid": "check-03-1"}, "check", "cell id"),
        # precedence: metadata, then tag, then cell id
        ({"role": "check", "tags": ["exercise"]}, "check", "metadata"),
        ({"role": "exercise", "cid": "check-03-1"}, "exercise", "metadata"),
        ({"tags": ["check"], "cid": "ex-03-1"}, "check", "tag"),
        ({"tags": ["exercise", "check"]}, "check", "tag"),
        # an unknown role in the metadata counts as absent
        ({"role": "grade", "tags": ["exercise"]}, "exercise", "tag"),
        ({"role": "grade"}, None, None),
        # the answer cell of a graded question, each way; check wins over answer over exercise
        ({"role": "answer"}, "answer", "metadata"),
        ({"tags": ["answer"]}, "answer", "tag"),
        ({"cid": "answer-06-Q1"}, "answer", "cell id"),
        ({"tags": ["answer", "exercise"]}, "answer", "tag"),
        ({"tags": ["answer", "check"]}, "check", "tag"),
        ({"cid": "answer-06-1"}, None, None),
        # plain cells, ids that only look like course ids
        ({}, None, None),
        ({"tags": ["nbval-ignore-output"]}, None, None),
        ({"cid": "ex-03-1-md"}, None, None),
        ({"cid": "examples"}, None, None),
        ({"cid": None}, None, None),
    ],
)
def test_cell_role_follows_metadata_then_tag_then_cell_id(kwargs, role, origin):
    c = cell(**{"cid": "plain", **kwargs})
    assert cells.role_origin(c) == (role, origin)
    assert cells.cell_role(c) == role


def test_malformed_metadata_reads_as_a_plain_cell():
    for meta in (None, "course", {"course": "exercise", "tags": "exercise"}, {"course": []}):
        c = {"id": "plain", "cell_type": "code", "metadata": meta, "source": ""}
        assert cells.cell_role(c) is None and cells.exercise_id(c) is None
        assert cells.course_metadata(c) == {} and cells.cell_tags(c) == []


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"ex_id": "03.2", "cid": "ex-03-1"}, "03.2"),
        ({"ex_id": "03.2", "cid": "plain"}, "03.2"),
        ({"cid": "check-11-4"}, "11.4"),
        ({"ex_id": 3, "cid": "ex-03-1"}, "03.1"),  # not a string: the cell id decides
        ({"ex_id": 3, "cid": "plain"}, None),
        ({"cid": "plain", "tags": ["exercise"]}, None),
        ({"cid": "answer-06-Q2"}, "06.Q2"),
        ({"ex_id": "06.Q1", "cid": "answer-06-Q2"}, "06.Q1"),
    ],
)
def test_exercise_id_is_the_metadata_id_else_the_cell_ids(kwargs, expected):
    assert cells.exercise_id(cell(**kwargs)) == expected


def test_course_metadata_is_a_copy():
    c = cell(role="exercise", ex_id="03.1")
    cells.course_metadata(c)["role"] = "check"
    assert cells.cell_role(c) == "exercise"


# -------------------------------------------------- every user of the schema follows the rule


def _notebook_paths() -> list[Path]:
    paths = sorted((ROOT / "solutions").glob("*.ipynb")) + sorted(
        (ROOT / "notebooks").glob("*.ipynb")
    )
    paths += sorted(FIXTURES.rglob("*.ipynb"))
    return [p for p in paths if p.name != "malformed.ipynb"]  # not JSON, on purpose


def _load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def roles_seen_by_release(nb: dict) -> dict[int, str]:
    """Cell index -> role, for the cells release handled as exercise, check or answer cells."""
    scan = validate._scan(nb, validate.Context("00_x.ipynb", {}))
    out = {i: "exercise" for ids in scan.exercise_cells.values() for i in ids}
    out.update({i: "check" for ids in scan.check_cells.values() for i in ids})
    out.update({i: "answer" for ids in scan.answer_cells.values() for i in ids})
    return out


def exercises_seen_by_student_work(nb: dict) -> set[int]:
    """The cells whose edit the guard reports as an answer that a release would overwrite
    (exercise cells and the answer cells of graded questions)."""
    edited = copy.deepcopy(nb)
    for c in edited["cells"]:
        c["source"] = cells.cell_source(c) + "\n# edited"
    lost = student_work.work_at_risk(edited, nb)
    assert all(": your answer to " in line for line in lost), lost
    return {int(line.split()[1]) - 1 for line in lost}


def roles_seen_by_grader(nb: dict) -> tuple[dict[int, str], set[int]]:
    """The grader's role per cell of the notebook it reads, and the code cells its plan drops
    (check and answer cells) when the notebook is graded against itself."""
    roles = {i: plan.course_meta(c)[1] for i, c in enumerate(nb["cells"])}
    assignment = plan.Assignment("00_x", [], nb)
    steps = plan.build_plan(nb, assignment).steps
    ran = {s.index for s in steps if s.kind == "cell"}
    dropped = {
        i
        for i, c in enumerate(nb["cells"])
        if c["cell_type"] == "code" and c["source"].strip() and i not in ran
    }
    return {i: r for i, r in roles.items() if r}, dropped


def _expected(nb: dict) -> dict[int, str]:
    return {i: r for i, c in enumerate(nb["cells"]) if (r := cells.cell_role(c))}


PATHS = _notebook_paths()


def test_every_notebook_of_the_course_and_the_fixtures_is_read():
    names = {p.parent.name for p in PATHS}
    assert {"solutions", "notebooks", "submissions", "hostile"} <= names
    assert len([p for p in PATHS if p.parent.name == "solutions"]) >= 12


@pytest.mark.parametrize("path", PATHS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_release_student_work_and_grader_agree_on_every_cell(path):
    raw = _load(path)
    expected = _expected(raw)
    if path.name != "no_ids.ipynb":  # saved without ids or metadata: nothing to find
        assert "exercise" in expected.values() and "check" in expected.values()
    if raw.get("nbformat_minor", 0) >= 5 and all(c.get("id") for c in raw["cells"]):
        # (both match cells by id: a notebook saved without ids is the grader's alone)
        assert roles_seen_by_release(raw) == expected
        answered = {i for i, r in expected.items() if r in ("exercise", "answer")}
        assert exercises_seen_by_student_work(raw) == answered
    graded = plan.read_notebook(path)
    assert len(graded["cells"]) == len(raw["cells"])
    roles, dropped = roles_seen_by_grader(graded)
    assert roles == expected
    checks = {  # check cells and answer cells (graded from their source, never run)
        i
        for i, r in expected.items()
        if r in ("check", "answer") and raw["cells"][i]["cell_type"] == "code"
        if cells.cell_source(raw["cells"][i]).strip()
    }
    assert dropped == checks


def _strip(nb: dict, keep: str) -> dict:
    """``nb`` with each course cell marked one way only: ``"tag"`` or ``"cell id"``."""
    nb = copy.deepcopy(nb)
    for c in nb["cells"]:
        c["metadata"].pop("course", None)
        if keep == "cell id":
            c["metadata"].pop("tags", None)
    return nb


@pytest.mark.parametrize("keep", ["tag", "cell id"])
def test_a_notebook_marked_one_way_only_reads_the_same(keep):
    """Tools that drop custom metadata, or tags too, change nothing for the guard and the
    grader; release rejects such a solution, naming what is missing."""
    path = ROOT / "solutions" / "03_scaled_dot_product.ipynb"
    full = _load(path)
    nb = _strip(full, keep)
    expected = _expected(full)
    assert _expected(nb) == expected and len(expected) >= 4
    assert {i: cells.exercise_id(c) for i, c in enumerate(nb["cells"]) if i in expected} == {
        i: cells.exercise_id(full["cells"][i]) for i in expected
    }
    assert exercises_seen_by_student_work(nb) == {
        i for i, r in expected.items() if r in ("exercise", "answer")
    }
    graded = plan.read_notebook(path)
    graded["cells"] = [
        dict(g, metadata=c["metadata"]) for g, c in zip(graded["cells"], nb["cells"])
    ]
    assert roles_seen_by_grader(graded)[0] == expected
    problems = release.validate(nb, release.Context(path.name, {}))
    wanted = (
        "cell id 'ex-03-1' says role 'exercise' but the cell is not tagged 'exercise'"
        if keep == "cell id"
        else "cell tagged 'exercise' needs metadata \"course\": {\"role\": 'exercise'"
    )
    assert any(wanted in p for p in problems), problems
