"""``course release``: write the student notebooks (``notebooks/``) from ``solutions/``.

``solutions/NN_name.ipynb`` is the single source of truth. For every one of them the student
version ``notebooks/NN_name.ipynb`` is derived, and nothing else is in it:

* each ``### BEGIN SOLUTION`` ... ``### END SOLUTION`` region of a code cell becomes one line,
  indented like the ``BEGIN`` marker::

      raise NotImplementedError("Exercise 03.1: implement scaled_dot_product_attention")

  (the exercise id comes from the cell's ``course.id`` metadata, the name from the registry
  ``course_utils.checks.get(id).function``, or, for an exercise without a check, from the
  outermost ``def``/``class`` around the region); a region in a markdown cell becomes
  ``YOUR ANSWER HERE``;
* **no outputs at all**: every output is cleared and every execution count reset. Outputs of a
  solution notebook are produced by solution code (a printed parameter count, a plot of a model
  trained with the answer, a check's PASSED line), so the only rule that never reveals an
  answer is to ship none; students see the figures when they run the notebook;
* cell ids, tags, cell metadata and notebook metadata are kept (minus the volatile
  ``metadata.execution`` timings nbclient records and the saved ``widgets`` state);
* the file is written the way Jupyter writes it (nbformat 4.5, sorted keys, one-space indent)
  plus a trailing newline, so the same solutions always give byte-identical notebooks.

``course release --check`` writes nothing: it runs every rule of :data:`CHECKS` (first the
drift check: every notebook that differs from what release would write, changed, missing or
extra; then the no-answer rule: every solution line that appears elsewhere in a student
notebook, :mod:`course_utils.authoring.leaks`) and exits 1 naming each problem. CI runs it on the committed tree; the test suite does
not, since in a student's checkout ``notebooks/`` holds their answers.

A student's work is never overwritten: ``course release`` keeps every notebook whose exercise
cells differ from the released stubs or that has cells its student added
(:mod:`course_utils.authoring.student_work`), lists those cells and exits 1; ``--force`` replaces them.
Notebooks without a solution are kept (``--force`` removes those named ``NN_*.ipynb``).

The release itself is a chain of small steps, in the spirit of nbgrader's preprocessors:
:func:`validate`, then :data:`STEPS` (:func:`strip_solutions`, :func:`clear_outputs`,
:func:`drop_volatile_metadata`, :func:`add_install_cell`), :func:`render` and :func:`write`.

The first cell of every student notebook of a course project (a ``pyproject.toml`` beside
``solutions/``) installs the course where ``course_utils`` is missing, from the repository set
once in ``[tool.course]`` (:mod:`course_utils.authoring.install_cell`); elsewhere it does
nothing.

Before anything is written, every solution is validated; problems are listed with the file and
cell they are in and the command exits 2. A notebook is invalid when: a cell has no id or two
cells share one; an exercise or check cell (by the one rule of
:mod:`course_utils.authoring.cells`: ``course.role`` metadata, else tag, else an ``ex-NN-k`` /
``check-NN-k`` cell id) does not state its role both as a tag and as ``course`` metadata;
markers are unbalanced, nested, malformed or outside an ``exercise`` cell; an exercise cell has
no solution region; a code region is not inside a function body (its stub would raise when the
student runs the cell, and an untouched notebook must run to the end); a check cell's id is not
registered, its source is not exactly ``check("ID", function)``, or it has no exercise cell
before it; an exercise's points differ from the registry's; a registered exercise of this
notebook has no exercise or check cell.

Exit codes: 0 ok, 1 drift (``--check``) or notebooks kept because they hold a student's work,
2 invalid solutions or usage error.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat

from course_utils.authoring import answers, install_cell, student_work
from course_utils.authoring.cells import (
    ANSWER,
    CHECK,
    EXERCISE,
    ROLES,
    cell_role,
    cell_source,
    cell_tags,
    course_metadata,
    exercise_id,
    role_origin,
)
from course_utils.authoring.leaks import Leak, find_leaks
from course_utils.authoring.project import CourseSettings, read_settings
from course_utils.authoring.regions import BEGIN, END, Region, find_regions

ANSWER_PLACEHOLDER = "YOUR ANSWER HERE"
SOLUTION_GLOB = "[0-9][0-9]_*.ipynb"
EXERCISE_TAG, CHECK_TAG = EXERCISE, CHECK  # the tags are the role names (authoring.cells)
ID_PATTERN = re.compile(r"^(\d\d)\.(\d+)$")

EXIT_OK, EXIT_DRIFT, EXIT_INVALID = 0, 1, 2

_DEF_OR_CLASS = re.compile(r"^(\s*)(?:async\s+)?(def|class)\s+([A-Za-z_]\w*)")
_VOLATILE_CELL_METADATA = ("execution",)
_VOLATILE_NB_METADATA = ("widgets",)


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


# ---------------------------------------------------------------------------- helpers


def _enclosing_function(lines: list[str], begin: int) -> tuple[str | None, str | None]:
    """For a region starting at ``lines[begin]``: the kind (``"def"``/``"class"``) of the
    innermost enclosing ``def``/``class`` (``if``/``for``/``with`` blocks are looked through),
    and the name of the outermost one; found by indentation (``None`` when there is none)."""
    marker = lines[begin]
    limit = len(marker) - len(marker.lstrip())
    innermost: str | None = None
    outermost: str | None = None
    for line in reversed(lines[:begin]):
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        m = _DEF_OR_CLASS.match(line)
        opens_block = m is not None or line.split("#")[0].rstrip().endswith(":")
        if indent >= limit or not opens_block:
            continue
        limit = indent
        if m:
            innermost = innermost or m.group(2)
            outermost = m.group(3)
        if indent == 0:
            break
    return innermost, outermost


def stub_line(exercise_id: str, name: str | None) -> str:
    """The line that replaces a code solution region (without indentation)."""
    what = f"implement {name}" if name else "write your answer here"
    return f'raise NotImplementedError("Exercise {exercise_id}: {what}")'


def _parses(source: str) -> bool:
    try:
        ast.parse(source)
    except SyntaxError:
        return False
    return True


def _load_registry() -> Mapping[str, Any]:
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


# ------------------------------------------------------------------------- the release
#
# Like nbgrader's preprocessors, a release is a chain of small steps over a copy of the
# notebook: ``validate`` (every problem at once, nothing changed), then each of
# :data:`STEPS` (``strip_solutions``, ``clear_outputs``, ``drop_volatile_metadata``,
# ``add_install_cell``), then ``render`` and ``write``. A step takes and returns the notebook (plain dicts) and a
# :class:`Context`; it may assume the notebook is valid.


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
        for msg in _stub_source(cell, source, regions, ex_id, exercise)[1]:
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
    except Exception:  # reported by _load_registry already
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


def strip_solutions(nb: dict[str, Any], ctx: Context) -> dict[str, Any]:
    """Step 1: every solution region of an exercise cell becomes its stub line (code) or
    ``YOUR ANSWER HERE`` (markdown); the answer of every answer cell becomes ``None``."""
    for cell in nb.get("cells", []):
        if cell_role(cell) == ANSWER:
            cell["source"] = answers.stub_answer(cell_source(cell), exercise_id(cell) or "")
            continue
        if cell_role(cell) != EXERCISE:
            continue
        source = cell_source(cell)
        regions, _ = find_regions(source)
        ex_id = exercise_id(cell)
        new_source, _ = _stub_source(cell, source, regions, ex_id, ctx.registry.get(ex_id))
        cell["source"] = new_source
    return nb


def clear_outputs(nb: dict[str, Any], ctx: Context) -> dict[str, Any]:
    """Step 2: no outputs and no execution counts (outputs come from solution code)."""
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
    return nb


def drop_volatile_metadata(nb: dict[str, Any], ctx: Context) -> dict[str, Any]:
    """Step 3: drop timings and saved widget state; write nbformat 4.5 (stable cell ids)."""
    for cell in nb.get("cells", []):
        for key in _VOLATILE_CELL_METADATA:
            cell.get("metadata", {}).pop(key, None)
    for key in _VOLATILE_NB_METADATA:
        nb.get("metadata", {}).pop(key, None)
    nb["nbformat"], nb["nbformat_minor"] = 4, max(5, int(nb.get("nbformat_minor", 5)))
    return nb


def add_install_cell(nb: dict[str, Any], ctx: Context) -> dict[str, Any]:
    """Step 4: put the install cell (:mod:`course_utils.authoring.install_cell`) first, so a
    notebook opened on Colab or anywhere without the package installs the course from the
    configured repository; where ``course_utils`` imports it does nothing. Skipped when
    ``ctx.install`` is None."""
    if ctx.install is None:
        return nb
    cells = [c for c in nb.get("cells", []) if c.get("id") != install_cell.CELL_ID]
    nb["cells"] = [install_cell.install_cell(ctx.install), *cells]
    return nb


STEPS = (strip_solutions, clear_outputs, drop_volatile_metadata, add_install_cell)


def release_notebook(
    nb: Mapping[str, Any],
    name: str,
    registry: Mapping[str, Any] | None = None,
    install: CourseSettings | None = None,
) -> dict[str, Any]:
    """The student version of solution notebook ``nb`` (a parsed ``.ipynb`` dict).

    ``name`` is the file name (``"03_scaled_dot_product.ipynb"``), used in messages and to
    match the registry's ``Exercise.notebook``; ``registry`` maps exercise ids to exercises
    (default: ``course_utils.checks.REGISTRY``); ``install``, the course's settings, adds the
    install cell (None: none). Runs :func:`validate` (raises :class:`ReleaseError` listing
    every problem found), then each of :data:`STEPS`. ``nb`` itself is not modified.
    """
    ctx = Context(name, _load_registry() if registry is None else registry, install)
    problems = validate(nb, ctx)
    if problems:
        raise ReleaseError(problems)
    student = json.loads(json.dumps(nb))  # deep copy of plain data
    for step in STEPS:
        student = step(student, ctx)
    return student


def _stub_source(
    cell: Mapping[str, Any],
    source: str,
    regions: list[Region],
    ex_id: str,
    exercise: Any,
) -> tuple[str, list[str]]:
    """The cell's source with each region replaced by its stub, and the problems found
    (a code region outside a function body, a stub that does not parse)."""
    lines = source.split("\n")
    is_code = cell.get("cell_type") == "code"
    out: list[str] = []
    problems: list[str] = []
    pos = 0
    for region in regions:
        out.extend(lines[pos : region.begin])
        if is_code:
            inner, outer = _enclosing_function(lines, region.begin)
            if inner != "def":
                problems.append(
                    f"the solution region on line {region.begin + 1} is not inside a "
                    "function body: its stub would raise as soon as the student runs the "
                    "cell (an untouched notebook must run to the end); put the answer "
                    "inside a def"
                )
            name = exercise.function if exercise is not None else outer
            out.append(region.indent + stub_line(ex_id, name))
        else:
            out.append(region.indent + ANSWER_PLACEHOLDER)
        pos = region.end + 1
    out.extend(lines[pos:])
    new_source = "\n".join(out)
    if not problems and is_code and _parses(source) and not _parses(new_source):
        problems.append(
            "the student version of this cell is not valid Python: indent the "
            f"'{BEGIN}' marker like the code it replaces"
        )
    return new_source, problems


def render(nb: Mapping[str, Any]) -> str:
    """``nb`` serialised the way Jupyter saves it (nbformat 4.5), plus a trailing newline."""
    node = nbformat.from_dict(json.loads(json.dumps(nb)))
    text = nbformat.writes(node, version=4)
    return text if text.endswith("\n") else text + "\n"


def _read(path: Path) -> dict[str, Any]:
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ReleaseError([f"{path.name}: cannot read the notebook: {exc}"]) from None
    if (
        not isinstance(nb, dict)
        or not isinstance(nb.get("cells"), list)
        or not all(isinstance(c, dict) for c in nb["cells"])
    ):
        raise ReleaseError([f"{path.name}: not a Jupyter notebook (no 'cells' list)"])
    return nb


def course_settings(path: str | Path) -> CourseSettings | None:
    """The settings of the course a solution notebook belongs to: ``[tool.course]`` of the
    ``pyproject.toml`` beside its ``solutions/`` folder; None when there is none (a notebook
    outside a course project gets no install cell: there is no package to install)."""
    root = Path(path).resolve().parent.parent
    if not (root / "pyproject.toml").is_file():
        return None
    try:
        return read_settings(root)
    except (ValueError, OSError) as exc:
        raise ReleaseError([str(exc)]) from None


def release_file(path: str | Path, registry: Mapping[str, Any] | None = None) -> str:
    """The text of the student version of the solution notebook at ``path`` (with the install
    cell when it belongs to a course project, :func:`course_settings`)."""
    path = Path(path)
    nb = _read(path)
    student = release_notebook(nb, path.name, registry, course_settings(path))
    try:
        nbformat.validate(nbformat.from_dict(json.loads(json.dumps(student))))
    except nbformat.ValidationError as exc:
        first = str(exc).strip().splitlines()[0]
        raise ReleaseError([f"{path.name}: not a valid nbformat 4.5 notebook: {first}"]) from None
    return render(student)


def solution_paths(solutions: str | Path) -> list[Path]:
    """Every ``solutions/NN_*.ipynb``, sorted by name."""
    return sorted(Path(solutions).glob(SOLUTION_GLOB))


def plan(solutions: str | Path, registry: Mapping[str, Any] | None = None) -> dict[str, str]:
    """File name -> text of every student notebook, for all solutions in ``solutions``.

    Validates every notebook first and raises one :class:`ReleaseError` with all problems.
    """
    paths = solution_paths(solutions)
    if not paths:
        raise ReleaseError([f"no solution notebooks ({SOLUTION_GLOB}) in {solutions}"])
    registry = _load_registry() if registry is None else registry
    texts: dict[str, str] = {}
    problems: list[str] = []
    for path in paths:
        try:
            texts[path.name] = release_file(path, registry)
        except ReleaseError as exc:
            problems.extend(exc.problems)
    if problems:
        raise ReleaseError(problems)
    return texts


def drift(
    solutions: str | Path, notebooks: str | Path, registry: Mapping[str, Any] | None = None
) -> list[str]:
    """Messages naming every student notebook that differs from what release would write:
    changed, missing from ``notebooks`` or extra in it. Empty when in sync.

    Only ``course release --check`` (CI, on the committed tree) runs this: in a student's
    checkout ``notebooks/`` holds their answers and differs by design.
    """
    expected = plan(solutions, registry)
    return drift_messages(expected, Path(solutions), Path(notebooks))


def drift_messages(expected: Mapping[str, str], solutions: Path, notebooks: Path) -> list[str]:
    """:func:`drift` for texts already planned (``name -> text``)."""
    present = {p.name for p in notebooks.glob("*.ipynb")} if notebooks.is_dir() else set()
    messages = []
    for name, text in expected.items():
        target = notebooks / name
        if name not in present:
            messages.append(f"{target}: missing")
        elif target.read_bytes() != text.encode("utf-8"):
            messages.append(f"{target}: differs from what release writes from {solutions / name}")
    for name in sorted(present - set(expected)):
        messages.append(f"{notebooks / name}: extra (no {solutions / name})")
    return messages


# What ``course release --check`` runs, in order: each takes the planned texts
# (``name -> text``), the solutions folder and the notebooks folder and returns one message per
# problem. Another rule (e.g. "no solution line leaked into a student notebook") is one more
# function appended here.
def notebook_leaks(path: str | Path, registry: Mapping[str, Any] | None = None) -> list[Leak]:
    """The no-answer rule's findings for one solution notebook at ``path``: its solution lines
    found in the student version ``course release`` would write (computed in memory)."""
    path = Path(path)
    nb = json.loads(path.read_text(encoding="utf-8"))
    return find_leaks(nb, release_notebook(nb, path.name, registry), path.name)


def leaks_per_notebook(
    solutions: str | Path = "solutions", registry: Mapping[str, Any] | None = None
) -> dict[str, list[Leak]]:
    """Solution file name -> its leaks (an empty list when it keeps the rule), for every
    ``solutions/NN_*.ipynb``. Invalid notebooks raise ``ReleaseError``."""
    return {p.name: notebook_leaks(p, registry) for p in solution_paths(solutions)}


def no_answer_messages(expected: Mapping[str, str], solutions: Path, notebooks: Path) -> list[str]:
    """The no-answer rule (:mod:`course_utils.authoring.leaks`): one message per solution line found
    elsewhere in a student notebook of ``solutions``' release, markdown included."""
    return [
        f"no-answer rule: {leak.message()}"
        for leaks in leaks_per_notebook(solutions).values()
        for leak in leaks
    ]


CHECKS: list[Callable[[Mapping[str, str], Path, Path], list[str]]] = [
    drift_messages,
    no_answer_messages,
]


@dataclass
class WriteResult:
    """What :func:`write` did: one log line per file, and the notebooks it kept because
    writing them would lose a student's work (name -> the cells that would be lost)."""

    log: list[str] = field(default_factory=list)
    kept: dict[str, list[str]] = field(default_factory=dict)


def write(
    solutions: str | Path,
    notebooks: str | Path,
    registry: Mapping[str, Any] | None = None,
    *,
    force: bool = False,
) -> WriteResult:
    """Write every student notebook into ``notebooks`` (created if needed).

    A notebook on disk that holds a student's work (:mod:`course_utils.authoring.student_work`: an
    exercise cell that is not the released stub, a cell the student added) is never
    overwritten unless ``force``; it is kept and listed in ``WriteResult.kept`` with the
    cells that would be lost. Notebooks in ``notebooks`` without a solution are kept too;
    with ``force``, those named like course notebooks (``NN_*.ipynb``) are removed.
    """
    expected = plan(solutions, registry)
    nb_dir = Path(notebooks)
    nb_dir.mkdir(parents=True, exist_ok=True)
    result = WriteResult()
    for name, text in expected.items():
        target = nb_dir / name
        data = text.encode("utf-8")
        if target.exists():
            if target.read_bytes() == data:
                result.log.append(f"unchanged {target}")
                continue
            at_risk = student_work.describe(target, text)
            if at_risk and not force:
                result.kept[name] = at_risk
                result.log.append(f"kept      {target} (holds your work; see below)")
                continue
        tmp = target.with_name(f".{name}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, target)
        result.log.append(f"wrote     {target}")
    for extra in sorted(p for p in nb_dir.glob("*.ipynb") if p.name not in expected):
        if force and extra.match(SOLUTION_GLOB):
            extra.unlink()
            result.log.append(f"removed   {extra} (no {Path(solutions) / extra.name})")
        else:
            result.log.append(f"kept      {extra} (no {Path(solutions) / extra.name})")
    return result


def write_template(
    solutions: str | Path,
    template: str | Path,
    notebook: str | None = None,
    *,
    settings: CourseSettings | None = None,
    force: bool = False,
) -> list[Path]:
    """One assignment's GitHub Classroom template repository in ``template``
    (:mod:`course_utils.authoring.template`); ``settings`` default to ``[tool.course]`` of
    the course beside ``solutions``. Never ``solutions/``. Returns the files written."""
    from course_utils.authoring import template as tpl

    settings = settings or tpl.settings_for(solutions)
    return tpl.write_assignment_template(plan(solutions), template, notebook, settings, force=force)


def execute_solution(path: str | Path, *, profile: str | None = None, timeout: int = 600) -> None:
    """Run a solution notebook top to bottom in a fresh kernel and store its outputs in place.

    ``profile`` sets ``COURSE_PROFILE`` for the run (default: the current environment's).
    Cell timings are not recorded, so re-running changes only what the code prints. The kernel
    is this interpreter's (as ``pytest --nbval-current-env``) and runs in the notebook's
    folder, as under nbval and in JupyterLab.
    """
    from course_utils.authoring.execute import run_notebook

    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    run_notebook(nb, folder=path.parent, profile=profile, timeout=timeout)
    for cell in nb.cells:
        for key in _VOLATILE_CELL_METADATA:
            cell.metadata.pop(key, None)
    strip_widget_views(nb)
    path.write_text(render(nb), encoding="utf-8")


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def strip_widget_views(nb: Mapping[str, Any]) -> Mapping[str, Any]:
    """Drop live-widget views from stored outputs (in place; returns ``nb``).

    A stored widget cannot be replayed: JupyterLab would show "model not found" and other
    readers the widget's text repr. An output that also holds a static picture (every
    :mod:`course_utils.widgets` explorer does) keeps the picture and its note; one that holds
    nothing else is removed. The saved widget state goes too.
    """
    for cell in nb.get("cells", []):
        kept = []
        for out in cell.get("outputs", []) or []:
            data = out.get("data")
            if isinstance(data, Mapping) and WIDGET_VIEW in data:
                rest = {k: v for k, v in data.items() if k != WIDGET_VIEW}
                if not any(k.startswith("image/") for k in rest):
                    continue
                out["data"] = rest
            kept.append(out)
        if "outputs" in cell:
            cell["outputs"] = kept
    nb.get("metadata", {}).pop("widgets", None)
    return nb


# --------------------------------------------------------------------------------- CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``course release``."""
    parser.add_argument(
        "--solutions",
        default="solutions",
        metavar="DIR",
        help="folder of the solution notebooks NN_*.ipynb (default: solutions)",
    )
    parser.add_argument(
        "--notebooks",
        default="notebooks",
        metavar="DIR",
        help="folder the student notebooks are written to (default: notebooks)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 naming every student notebook that is out of date, "
        "missing or extra, and every solution line found in a student notebook",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="overwrite student notebooks even where exercise cells hold answers or cells "
        "were added (they are lost), and remove NN_*.ipynb notebooks without a solution",
    )
    parser.add_argument(
        "--execute",
        nargs="+",
        default=[],
        metavar="NOTEBOOK",
        help="first run these solution notebooks in place (fresh kernel, outputs "
        "stored, no timings), then release",
    )
    parser.add_argument(
        "--template",
        default=None,
        metavar="DIR",
        help="instead, write the GitHub Classroom template repository of one assignment "
        "(--notebook) into DIR: its student notebook, a student README.md and the workflow "
        "(.github/workflows/classroom.yml) filled from [tool.course]; no solutions/",
    )
    parser.add_argument(
        "--notebook",
        default=None,
        metavar="NN",
        help="the assignment of --template (e.g. 03 or 03_scaled_dot_product)",
    )
    parser.add_argument(
        "--public",
        default=None,
        metavar="DIR",
        help="instead, write the public student copy of the course into DIR (every file git "
        "tracks except solutions/): what the workflow's COURSE_REPO should point at",
    )
    _seal_arguments(parser)
    parser.add_argument(
        "--profile",
        choices=("ci", "cpu", "gpu"),
        default=None,
        help="COURSE_PROFILE for --execute (default: the environment's)",
    )
    parser.epilog = (
        "A notebook holding a student's answers is never overwritten without --force. "
        "Exit codes: 0 ok; 1 notebooks/ out of date (--check) or notebooks kept because they "
        "hold a student's work; 2 invalid solution notebooks or usage error."
    )


# -- sealing (issue 32; separate from --template) ----------------------------------------------
def _seal_arguments(parser: argparse.ArgumentParser) -> None:
    """``--seal DIR``: the student package of a graded class (:mod:`course_utils.authoring.seal`)."""
    parser.add_argument(
        "--seal",
        default=None,
        metavar="DIR",
        help="instead, write DIR/course_utils: the package for a graded class, its questions "
        "sealed (prompts and choices, no keys, no feedback); grade it with "
        "`course grade --keys <this checkout>`",
    )


def _seal(args: argparse.Namespace) -> int:
    """``course release --seal DIR``: write the sealed package, list what was sealed."""
    from course_utils.authoring.seal import seal_package

    for path in seal_package(args.seal):
        print(f"sealed    {path}")
    print(f"wrote     {Path(args.seal) / 'course_utils'} (graded questions sealed)")
    return EXIT_OK


def _check(args: argparse.Namespace) -> int:
    """``course release --check``: run every rule of :data:`CHECKS`, write nothing."""
    solutions, notebooks = Path(args.solutions), Path(args.notebooks)
    expected = plan(solutions)
    messages = [m for rule in CHECKS for m in rule(expected, solutions, notebooks)]
    if messages:
        print(
            f"{len(messages)} problem(s) with {notebooks}/ and {solutions}/ (instructors: run "
            "`course release`, then commit; reword an exercise whose prose gives a line away):",
            file=sys.stderr,
        )
        for m in messages:
            print(f"  {m}", file=sys.stderr)
        return EXIT_DRIFT
    print(f"{notebooks}/ is up to date with {solutions}/")
    return EXIT_OK


def _classroom(args: argparse.Namespace) -> int:
    """``--template DIR --notebook NN`` or ``--public DIR``."""
    from course_utils.authoring import template as tpl

    try:
        if args.public:
            root = Path(args.solutions).resolve().parent
            written = tpl.write_public_copy(root, args.public, force=args.force)
            print(f"wrote     {len(written)} files into {args.public} (no solutions/)")
            return EXIT_OK
        for path in write_template(args.solutions, args.template, args.notebook, force=args.force):
            print(f"wrote     {path}")
    except tpl.TemplateError as exc:
        print(f"course release: {exc}", file=sys.stderr)
        return EXIT_INVALID
    return EXIT_OK


def main(args: argparse.Namespace) -> int:
    """Run ``course release``; returns the exit code."""
    try:
        if args.execute and args.check:
            print("course release: --execute and --check cannot be combined", file=sys.stderr)
            return EXIT_INVALID
        for nb_path in args.execute:
            print(f"executing {nb_path} ...", flush=True)
            try:
                execute_solution(nb_path, profile=args.profile)
            except Exception as exc:  # CellExecutionError, a dead kernel, a missing file
                print(f"course release: {nb_path} failed to run: {exc}", file=sys.stderr)
                return EXIT_INVALID
        if getattr(args, "seal", None):
            return _seal(args)
        if getattr(args, "template", None) or getattr(args, "public", None):
            return _classroom(args)
        if args.check:
            if args.force:
                print("course release: --force and --check cannot be combined", file=sys.stderr)
                return EXIT_INVALID
            return _check(args)
        result = write(args.solutions, args.notebooks, force=args.force)
        for line in result.log:
            print(line)
        if result.kept:
            print(
                f"\n{len(result.kept)} notebook(s) kept: replacing them would lose your work.",
                file=sys.stderr,
            )
            for name, cells in result.kept.items():
                print(f"  {Path(args.notebooks) / name}:", file=sys.stderr)
                for c in cells:
                    print(f"    {c}", file=sys.stderr)
            print(
                "To replace them anyway, copy them somewhere safe, then run "
                "`course release --force`.",
                file=sys.stderr,
            )
            return EXIT_DRIFT
        return EXIT_OK
    except ReleaseError as exc:
        print(
            f"course release: {len(exc.problems)} problem(s) in the solution notebooks:",
            file=sys.stderr,
        )
        for p in exc.problems:
            print(f"  {p}", file=sys.stderr)
        return EXIT_INVALID
