"""Validation of a solution notebook before anything is released.

Every problem is listed with the file and cell it is in (:class:`ReleaseError`); nothing is
modified. A notebook is invalid when: a cell has no id or two cells share one; an exercise or
check cell (by the one rule of :mod:`course_utils.authoring.cells`: ``course.role`` metadata,
else tag, else an ``ex-NN-k`` / ``check-NN-k`` cell id) does not state its role both as a tag
and as ``course`` metadata; markers are unbalanced, nested, malformed or outside an
``exercise`` cell; an exercise cell has no solution region; a code region is not inside a
function body (its stub would raise when the student runs the cell, and an untouched notebook
must run to the end); a check cell's id is not registered, its source is not exactly
``check("ID", function)``, or it has no exercise cell before it; an exercise's points differ
from the registry's; a registered exercise of this notebook has no exercise or check cell; an
answer cell names no registered question.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from course_utils.authoring import answers
from course_utils.authoring.cells import (
    ANSWER,
    CHECK,
    EXERCISE,
    ROLES,
    cell_role,
    cell_source,
    cell_tags,
    course_metadata,
    role_origin,
)
from course_utils.authoring.project import CourseSettings
from course_utils.authoring.regions import BEGIN, END, find_regions
from course_utils.authoring.stubs import stub_source

EXERCISE_TAG, CHECK_TAG = EXERCISE, CHECK  # the tags are the role names (authoring.cells)
ID_PATTERN = re.compile(r"^(\d\d)\.(\d+)$")


class ReleaseError(Exception):
    """Invalid solution notebooks: ``problems`` lists one message per problem found."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


@dataclass
class _Problems:
    notebook: str
    items: list[str] = field(default_factory=list)

    def add(self, message: str, cell: Any = None, index: int | None = None) -> None:
        where = self.notebook
        if cell is not None or index is not None:
            cid = cell.get("id") if isinstance(cell, Mapping) else None
            where += f": cell {cid!r}" if cid else ""
            where += f" (#{index})" if index is not None else ""
        self.items.append(f"{where}: {message}")


def load_registry() -> Mapping[str, Any]:
    try:
        from course_utils import checks
    except Exception as exc:  # a broken check module must not look like a broken notebook
        raise ReleaseError(
            [
                f"cannot load the exercise registry (course_utils.checks): "
                f"{type(exc).__name__}: {exc}"
            ]
        ) from exc
    return checks.REGISTRY


@dataclass(frozen=True)
class Context:
    """What every step may read: the file name, the exercise registry and the course's
    settings for the install cell (None: no install cell, e.g. a notebook outside a course)."""

    name: str
    registry: Mapping[str, Any]
    install: CourseSettings | None = None


@dataclass
class _Scan:
    """What :func:`validate` gathers while it walks the cells of one notebook."""

    name: str
    registry: Mapping[str, Any]
    probs: _Problems
    seen_ids: dict[str, int] = field(default_factory=dict)
    exercise_cells: dict[str, list[int]] = field(default_factory=dict)
    check_cells: dict[str, list[int]] = field(default_factory=dict)
    answer_cells: dict[str, list[int]] = field(default_factory=dict)


def validate(nb: Mapping[str, Any], ctx: Context) -> list[str]:
    """Every problem of solution notebook ``nb``, one message each (empty when it is valid).

    See the module docstring for the rules; nothing is modified.
    """
    return _scan(nb, ctx).probs.items


def _scan(nb: Mapping[str, Any], ctx: Context) -> _Scan:
    """Walk every cell of ``nb``: the problems found and where its exercise and check cells are."""
    scan = _Scan(ctx.name, ctx.registry, _Problems(ctx.name))
    if nb.get("nbformat") != 4 or int(nb.get("nbformat_minor", 0)) < 5:
        scan.probs.add(
            f"nbformat {nb.get('nbformat')}.{nb.get('nbformat_minor')} has no cell ids; "
            "save it as nbformat 4.5 (JupyterLab >= 3 does) so every cell has a stable id"
        )
    for index, cell in enumerate(nb.get("cells", [])):
        _validate_cell(scan, cell, index)
    _validate_coverage(scan)
    return scan


def _validate_cell(scan: _Scan, cell: Mapping[str, Any], index: int) -> None:
    """One cell: its id, then by role (plain, exercise or check) what it must hold."""
    probs = scan.probs
    cid = cell.get("id")
    if not cid:
        probs.add("cell has no id (every cell needs a stable id)", cell, index)
    elif cid in scan.seen_ids:
        probs.add(
            f"duplicate cell id {cid!r} (also cell #{scan.seen_ids[cid]}); ids must be "
            "unique: the grader finds check cells by id",
            cell,
            index,
        )
    else:
        scan.seen_ids[cid] = index
    tags, meta, source = cell_tags(cell), course_metadata(cell), cell_source(cell)
    if EXERCISE_TAG in tags and CHECK_TAG in tags:
        probs.add("cell is tagged both 'exercise' and 'check'", cell, index)
        return
    role = cell_role(cell)
    regions, marker_problems = find_regions(source)
    for msg in marker_problems:
        probs.add(msg, cell, index)
    if role is None:
        if regions and not marker_problems:
            probs.add(
                "solution markers in a cell not tagged 'exercise' (tag it and give it "
                "'course' metadata, or the answer has no exercise id)",
                cell,
                index,
            )
        if meta:
            probs.add(
                f"'course' metadata {meta} on a cell tagged neither 'exercise' nor 'check'",
                cell,
                index,
            )
        return
    if role == ANSWER:
        _validate_answer_cell(scan, cell, index, source, regions)
        return
    found = _validate_course_metadata(scan, cell, index)
    if found is None:
        return
    ex_id, exercise = found
    if role == CHECK:
        _validate_check_cell(scan, cell, index, ex_id, exercise, source, regions)
        return
    scan.exercise_cells.setdefault(ex_id, []).append(index)
    if not regions:
        if not marker_problems:
            probs.add(
                f"exercise cell {ex_id} has no '{BEGIN}' ... '{END}' region: the "
                "answer would be released to students",
                cell,
                index,
            )
        return
    if not marker_problems:
        for msg in stub_source(cell, source, regions, ex_id, exercise)[1]:
            probs.add(msg, cell, index)


def _validate_role_marks(probs: _Problems, cell: Mapping[str, Any], index: int) -> str:
    """A solution states a course cell's role all three ways (:mod:`course_utils.authoring.cells`):
    the tag and the ``course.role`` metadata must both say the role the rule gives. Returns how
    the cell is named in messages (``"cell tagged 'exercise'"``)."""
    role, origin = role_origin(cell)
    tags, meta_role = cell_tags(cell), course_metadata(cell).get("role")
    tag_role = next((t for t in ROLES if t in tags), None)
    if tag_role is None:
        said = "'course' metadata" if origin == "metadata" else f"cell id {cell.get('id')!r}"
        probs.add(f"{said} says role {role!r} but the cell is not tagged {role!r}", cell, index)
    expected = tag_role or role
    what = f"cell tagged {tag_role!r}" if tag_role else f"{role} cell"
    if meta_role != expected:
        probs.add(
            f'{what} needs metadata "course": {{"role": {expected!r}, ...}}, got role '
            f"{meta_role!r}",
            cell,
            index,
        )
    return what


def _validate_course_metadata(
    scan: _Scan, cell: Mapping[str, Any], index: int
) -> tuple[str, Any] | None:
    """Tag, role, id and points of an exercise or check cell, against the registry.
    Returns ``(exercise id, registered exercise or None)``, or None without a usable id."""
    probs, name, prefix = scan.probs, scan.name, scan.name[:2]
    what = _validate_role_marks(probs, cell, index)
    meta = course_metadata(cell)
    ex_id = meta.get("id")
    if not isinstance(ex_id, str) or not ID_PATTERN.match(ex_id):
        probs.add(
            f'{what} needs metadata "course": {{"id": "NN.k", ...}} '
            f'(e.g. "{prefix}.1"), got id {ex_id!r}',
            cell,
            index,
        )
        return None
    if ex_id[:2] != prefix:
        probs.add(f"exercise {ex_id} belongs to notebook {ex_id[:2]}, not {name}", cell, index)
    points = meta.get("points")
    if not isinstance(points, int) or isinstance(points, bool) or points < 0:
        probs.add(
            f"metadata course.points must be a whole number >= 0, got {points!r}", cell, index
        )
    exercise = scan.registry.get(ex_id)
    if exercise is not None:
        if isinstance(points, int) and points != exercise.points:
            probs.add(
                f"exercise {ex_id}: metadata course.points is {points} but the registry "
                f"(course_utils.checks) gives {exercise.points}",
                cell,
                index,
            )
        if exercise.notebook != name:
            probs.add(
                f"exercise {ex_id} is registered for notebook {exercise.notebook!r}, not {name!r}",
                cell,
                index,
            )
    return ex_id, exercise


def _validate_check_cell(
    scan: _Scan,
    cell: Mapping[str, Any],
    index: int,
    ex_id: str,
    exercise: Any,
    source: str,
    regions: list,
) -> None:
    """A check cell: registered, exactly ``check("NN.k", function)``, after its exercise, once."""
    probs = scan.probs
    scan.check_cells.setdefault(ex_id, []).append(index)
    if regions:
        probs.add("solution markers in a check cell", cell, index)
    if exercise is None:
        probs.add(
            f"check cell for exercise {ex_id}, which is not registered in "
            f"course_utils.checks (known: {', '.join(scan.registry) or 'none'})",
            cell,
            index,
        )
        return
    expected = f'check("{ex_id}", {exercise.function})'
    if source.strip() != expected:
        probs.add(
            f"check cell source must be exactly {expected!r}, got {source.strip()!r}", cell, index
        )
    if not _has_exercise_cell(scan, ex_id):
        probs.add(
            f"check cell for exercise {ex_id} has no exercise cell (tagged "
            f"'exercise', course.id {ex_id!r}) before it",
            cell,
            index,
        )
    if len(scan.check_cells[ex_id]) > 1:
        probs.add(
            f"second check cell for exercise {ex_id} (first: cell #{scan.check_cells[ex_id][0]})",
            cell,
            index,
        )


def _questions() -> Mapping[str, Any]:
    try:
        from course_utils import checks
    except Exception:  # reported by load_registry already
        return {}
    return checks.QUESTION_REGISTRY


def _validate_answer_cell(
    scan: _Scan, cell: Mapping[str, Any], index: int, source: str, regions: list
) -> None:
    """An answer cell: a registered question of this notebook, its points, and exactly one
    ``answer("NN.Qk", literal)`` whose literal the question accepts (the solution's answer
    must be right)."""
    from course_utils.checks.questions import check_answer

    probs = scan.probs
    what = _validate_role_marks(probs, cell, index)
    meta = course_metadata(cell)
    qid = meta.get("id")
    question = _questions().get(qid) if isinstance(qid, str) else None
    if question is None:
        probs.add(f"{what} needs the id of a registered question, got {qid!r}", cell, index)
        return
    scan.answer_cells.setdefault(qid, []).append(index)
    if regions:
        probs.add("solution markers in an answer cell", cell, index)
    if question.notebook != scan.name:
        probs.add(f"question {qid} is registered for {question.notebook!r}", cell, index)
    if meta.get("points") != question.points:
        probs.add(
            f"question {qid}: metadata course.points is {meta.get('points')!r} but the "
            f"registry gives {question.points}",
            cell,
            index,
        )
    calls = [c for c in answers.answer_calls(source) if c[0] == qid]
    read = answers.read_answer(source, qid)
    if len(calls) != 1 or read.problem or read.value is answers.NO_ANSWER:
        probs.add(
            f'an answer cell holds exactly one answer("{qid}", <literal>) '
            f"({read.problem or f'found {len(calls)}'})",
            cell,
            index,
        )
        return
    result = check_answer(question, read.value)
    if not result.passed:
        probs.add(f"the solution's answer to {qid} does not pass: {result.message}", cell, index)


def _has_exercise_cell(scan: _Scan, ex_id: str) -> bool:
    """Whether exercise ``ex_id`` has an exercise cell: its own, or (several checks of one
    answer, as notebook 13's six checks of one ``make_model``) the cell of an exercise of the
    same notebook that asks for the same function."""
    if ex_id in scan.exercise_cells:
        return True
    ex = scan.registry.get(ex_id)
    function = getattr(ex, "function", None)
    return function is not None and any(
        getattr(scan.registry.get(other), "function", None) == function
        and getattr(scan.registry.get(other), "notebook", None) == getattr(ex, "notebook", "")
        for other in scan.exercise_cells
    )


def _validate_coverage(scan: _Scan) -> None:
    """Every exercise registered for this notebook has an exercise cell and a check cell,
    every question an answer cell."""
    for qid, question in _questions().items():
        if question.notebook == scan.name and qid not in scan.answer_cells:
            scan.probs.add(
                f"registered question {qid} ({question.title}) has no answer cell "
                f"(tag 'answer', metadata course.id {qid!r}, source answer(\"{qid}\", ...))"
            )
        elif len(scan.answer_cells.get(qid, [])) > 1:
            scan.probs.add(f"question {qid} has more than one answer cell")
    for ex_id, ex in scan.registry.items():
        if getattr(ex, "notebook", None) != scan.name:
            continue
        if not _has_exercise_cell(scan, ex_id):
            scan.probs.add(
                f"registered exercise {ex_id} ({ex.title}) has no exercise cell "
                f"(tag 'exercise', metadata course.id {ex_id!r})"
            )
        if ex_id not in scan.check_cells:
            scan.probs.add(
                f"registered exercise {ex_id} ({ex.title}) has no check cell "
                f"(tag 'check', source check(\"{ex_id}\", {ex.function}))"
            )
