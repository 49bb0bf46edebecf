"""Which notebook a submission answers, and what the grader executes for it.

**The reference.** A submission is matched to a reference notebook (``solutions/NN_name.ipynb``;
the released ``notebooks/`` version works as well, since only check cells, cell ids and
positions are read from it, never solution code): by ``--assignment``, else by file name,
else by the exercise ids in its cell metadata, else by which exercise functions it defines.
Without any reference folder the exercise registry alone (``Exercise.notebook``) is used.

**The execution plan.** The grader executes the submission's own cells, in the submission's
order, except check cells, which are all dropped (recognised by the schema's one rule,
:func:`course_utils.authoring.cells.cell_role`: metadata role ``check``, else tag ``check``, else
a ``check-`` cell id; or by matching a reference check cell by id or source). For
every exercise of the assignment one *check position* is inserted, where the trusted harvest
runs (see :mod:`course_utils.grading.harvest`); edited, moved or deleted check cells therefore
change nothing. The check position of exercise X is:

1. after the student's exercise cell ``E`` for X (the last cell carrying X's exercise metadata
   or cell id ``ex-NN-M``; failing both, the last code cell that defines X's function at top
   level), and after the run of cells that follows ``E`` up to the first *landmark*: a cell
   that the reference places after X's check cell (matched by cell id, course metadata, or
   identical source), or, without a reference, any cell marked as another exercise's; the
   student's own check cell for X, if it lies in that run, ends it too (only its *position*
   is used, never its source). So answers written in extra cells between the exercise cell
   and its check count, cells added below the check run after it, and later parts of the
   notebook (which may rebind the name, e.g. ``softmax = fallback(...)``) run after the check;
2. if ``E`` is missing: before the first landmark, else at the end of the notebook.

**The tail.** The cells after the last check position decide nothing: every exercise has been
judged by then, and questions are graded from the answer cells' source in the grader's own
process. The plan's ``tail`` counts its last steps that are the reference's own cells, unchanged
(same source as the reference cell they match), after the last check and after every cell the
student wrote or changed; the grader does not run them unless asked (``--all-cells``, or
``--executed``, whose notebook shows the whole run). In nb03 they are the key/value training
run and its plots: a fifth of the kernel's CPU. A cell the student wrote or changed, hostile or
not, always runs, and so does every cell above it.

Points, titles and function names always come from the registry (trusted), never from the
submission's metadata.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from course_utils.authoring.cells import cell_role, cell_source, exercise_id
from course_utils.checks.core import Exercise, item_key
from course_utils.checks.questions import Question

# The one size cap of a notebook the grader reads (submissions are also refused by
# grader.admit before parsing, with the same number): 32 MB, far above any notebook of the
# course with its outputs, far below what would cost the grader's memory (issue 29).
MAX_NOTEBOOK_BYTES = 32 << 20


class BadSubmission(ValueError):
    """The file is not a gradable notebook (missing, not JSON, not a notebook, too large)."""


class NoAssignment(ValueError):
    """The notebook belongs to no known assignment, or to another one than required."""


# -- exercises ------------------------------------------------------------------------------
@dataclass(frozen=True)
class GradedExercise:
    """An exercise as the grader uses it: the registry entry and where it came from."""

    exercise: Exercise
    module: str | None  # extra checks module (``--checks``) that defines it, else None

    @property
    def id(self) -> str:
        return self.exercise.id


def exercise_table(extra_modules: list[str] | tuple[str, ...] = ()) -> dict[str, GradedExercise]:
    """The course registry plus the exercises of ``extra_modules`` (importable module names
    exposing ``EXERCISES``, e.g. an instructor's own assignment), keyed by id."""
    import importlib

    from course_utils import checks

    table = {ex.id: GradedExercise(ex, None) for ex in checks.EXERCISES}
    for name in extra_modules:
        module = importlib.import_module(name)
        for ex in getattr(module, "EXERCISES", []):
            table[ex.id] = GradedExercise(ex, name)
    return table


def question_table() -> list[Question]:
    """The course's graded questions (:data:`course_utils.checks.QUESTIONS`)."""
    from course_utils import checks

    return list(checks.QUESTIONS)


def id_key(exercise_id: str) -> tuple:
    """Sort key for ids like ``"03.1"`` and ``"03.Q1"`` (exercises, then questions)."""
    return item_key(exercise_id)


# -- notebooks ------------------------------------------------------------------------------
def read_notebook(path: str | os.PathLike) -> dict[str, Any]:
    """Load a notebook as a plain dict (nbformat 4); :class:`BadSubmission` with a clear reason."""
    import nbformat

    p = Path(path)
    if not p.is_file():
        raise BadSubmission(f"{p}: no such file")
    size = p.stat().st_size
    if size > MAX_NOTEBOOK_BYTES:
        raise BadSubmission(
            f"{p.name}: {size >> 20} MB is too large for a notebook "
            f"(limit {MAX_NOTEBOOK_BYTES >> 20} MB); clear the outputs and save again"
        )
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise BadSubmission(
            f"{p.name}: not a text file (is it really a .ipynb notebook?)"
        ) from None
    try:
        raw = json.loads(text)
    except RecursionError:  # nested deeper than Python's parser goes: bad input, not a crash
        raise BadSubmission(
            f"{p.name}: its JSON is nested too deeply to be a notebook; restore it from a "
            "checkpoint and save again"
        ) from None
    except ValueError as exc:
        raise BadSubmission(
            f"{p.name}: not valid JSON ({exc}); the file is damaged — open it "
            f"in Jupyter, or restore it from a checkpoint, and save again"
        ) from None
    if not isinstance(raw, dict) or not isinstance(raw.get("cells", raw.get("worksheets")), list):
        raise BadSubmission(f"{p.name}: valid JSON but not a Jupyter notebook (no 'cells')")
    try:
        with warnings.catch_warnings():  # e.g. "missing cell ids": we cope, no need to shout
            warnings.simplefilter("ignore")
            nb = nbformat.reads(text, as_version=4)
    except Exception as exc:
        raise BadSubmission(
            f"{p.name}: not a readable notebook ({type(exc).__name__}: {exc})"
        ) from None
    cells = []
    for cell in nb.get("cells", []):
        if not isinstance(cell, dict):
            continue
        meta = cell.get("metadata", {}) if isinstance(cell.get("metadata"), dict) else {}
        cells.append(
            {
                "cell_type": str(cell.get("cell_type", "")),
                "id": str(cell.get("id") or ""),
                "source": cell_source(cell),
                "metadata": meta,
            }
        )
    return {"cells": cells, "metadata": nb.get("metadata", {})}


def course_meta(cell: dict[str, Any]) -> tuple[str | None, str | None]:
    """``(exercise id, role)`` of a cell: :func:`~course_utils.authoring.cells.exercise_id` and
    :func:`~course_utils.authoring.cells.cell_role` (``course`` metadata, then tag, then a
    ``ex-NN-k``/``check-NN-k`` cell id; the rule release and the student-work guard use)."""
    return exercise_id(cell), cell_role(cell)


def notebook_exercise_ids(nb: dict[str, Any]) -> list[str]:
    """Exercise ids mentioned in a notebook's course metadata, in order of appearance."""
    seen: list[str] = []
    for cell in nb["cells"]:
        ex_id, role = course_meta(cell)
        if ex_id and role in ("exercise", "check") and ex_id not in seen:
            seen.append(ex_id)
    return seen


def defined_names(source: str) -> set[str]:
    """Top-level names a code cell defines (functions, classes, assignments)."""
    try:
        tree = ast.parse(python_source(source))
    except (SyntaxError, ValueError):
        return set()
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


# IPython's TransformerManager re-tokenises the whole cell once per special line (up to 500
# times): a cell of 600 ``!true`` lines and 40,000 ``x = 1`` kept the trusted grader busy for
# 445 s (TOKBOMB). Cells past these bounds get the linear line-by-line reading below.
TRANSFORM_MAX_CHARS = 20_000
TRANSFORM_MAX_SPECIAL = 8
_SPECIAL = re.compile(r"^\s*[!%]|\?\s*$|^[^#\n]*=\s*[!%]", re.MULTILINE)
_ASSIGN_ESCAPE = re.compile(r"^(\s*[\w.,\s\[\]()*]+=\s*)[!%].*$")


def python_source(source: str) -> str:
    """A cell's source with IPython syntax (magics, ``!cmd``) turned into Python, in time
    linear in the cell's size (IPython's own transformer only for small cells)."""
    if (
        len(source) <= TRANSFORM_MAX_CHARS
        and len(_SPECIAL.findall(source)) <= TRANSFORM_MAX_SPECIAL
    ):
        return _small_python_source(source)
    return _python_lines(source)


@functools.lru_cache(maxsize=2048)  # small cells only: at most 2048 x 20,000 characters held
def _small_python_source(source: str) -> str:
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        return TransformerManager().transform_cell(source)
    except Exception:
        return _python_lines(source)


def _python_lines(source: str) -> str:
    """IPython syntax replaced line by line (``pass`` for a magic, a shell line or a help
    request; ``None`` for ``x = !cmd``), so indentation and every other line stay."""
    if source.lstrip().startswith("%%"):
        return ""  # a cell magic: the body is not Python (IPython hands it over as a string)
    out = []
    for line in source.splitlines():
        stripped = line.lstrip()
        indent = line[: len(line) - len(stripped)]
        if stripped.startswith(("%", "!")) or (stripped.endswith("?") and "#" not in stripped):
            out.append(indent + "pass")
        elif m := _ASSIGN_ESCAPE.match(line):
            out.append(m.group(1) + "None")
        else:
            out.append(line)
    return "\n".join(out)


# -- references -----------------------------------------------------------------------------
@dataclass
class Assignment:
    """The assignment a submission is graded against."""

    name: str  # notebook stem, e.g. "00_start_here"
    exercises: list[GradedExercise]
    reference: dict[str, Any] | None  # the reference notebook, if one was found
    reference_path: str | None = None
    problems: list[str] = field(default_factory=list)  # ids in the reference without a check
    questions: list[Question] = field(default_factory=list)  # graded from answer cells


def reference_dirs(explicit: str | None) -> list[Path]:
    """Folders searched for reference notebooks: ``--reference-dir`` if given, else
    ``./solutions``, ``./notebooks``, ``../solutions``, ``../notebooks`` (so ``course grade``
    finds the same references from the repository root and from ``notebooks/``, where
    JupyterLab's terminal starts) and the course checkout's ``solutions/``."""
    if explicit:
        return [Path(explicit)]
    candidates = [Path("solutions"), Path("notebooks")]
    candidates += [Path("..") / "solutions", Path("..") / "notebooks"]
    repo = Path(__file__).resolve().parents[2]
    candidates += [repo / "solutions", repo / "notebooks"]
    out: list[Path] = []
    for c in candidates:
        if c.is_dir() and c.resolve() not in [o.resolve() for o in out]:
            out.append(c)
    return out


def _reference_files(dirs: list[Path]) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for d in dirs:
        for p in sorted(d.glob("*.ipynb")):
            found.setdefault(p.stem, p)
    return found


def _assignment_from(
    name: str, ref_path: Path | None, table: dict[str, GradedExercise]
) -> Assignment:
    ref_nb = read_notebook(ref_path) if ref_path is not None else None
    ids: list[str] = notebook_exercise_ids(ref_nb) if ref_nb else []
    for g in table.values():
        if Path(g.exercise.notebook).stem == name and g.id not in ids:
            ids.append(g.id)
    ids.sort(key=id_key)
    exercises = [table[i] for i in ids if i in table]
    problems = [i for i in ids if i not in table]
    questions = [q for q in question_table() if Path(q.notebook).stem == name]
    return Assignment(
        name, exercises, ref_nb, str(ref_path) if ref_path else None, problems, questions
    )


def known_assignments(dirs: list[Path], table: dict[str, GradedExercise]) -> dict[str, Path | None]:
    """Assignment name -> reference path (``None``: known from the registry only)."""
    names: dict[str, Path | None] = {}
    for g in table.values():
        names.setdefault(Path(g.exercise.notebook).stem, None)
    for stem, path in _reference_files(dirs).items():
        names[stem] = path
    return names


def resolve_assignment(
    sub_path: str,
    sub_nb: dict[str, Any] | None,
    *,
    dirs: list[Path],
    table: dict[str, GradedExercise],
    forced: str | None = None,
) -> Assignment:
    """The assignment of a submission (see the module docstring); :class:`NoAssignment` when
    it matches none, or when ``forced`` is given and the notebook clearly is another one."""
    known = known_assignments(dirs, table)
    if forced:
        stem = Path(forced).stem
        if stem not in known:
            raise NoAssignment(
                f"unknown assignment {forced!r}; known: {', '.join(sorted(known)) or 'none'}"
            )
        assignment = _assignment_from(stem, known[stem], table)
        if sub_nb is not None:
            _check_same_assignment(sub_nb, assignment, known, table, sub_path)
        return assignment
    stem = Path(sub_path).stem
    if stem in known:
        assignment = _assignment_from(stem, known[stem], table)
        if sub_nb is not None:
            _check_same_assignment(sub_nb, assignment, known, table, sub_path)
        return assignment
    if sub_nb is None:
        raise NoAssignment(
            f"{Path(sub_path).name}: cannot tell which assignment this is "
            f"(name it like one of {', '.join(sorted(known))} or pass --assignment)"
        )
    ids = set(notebook_exercise_ids(sub_nb))
    best, best_score = None, 0
    for name in sorted(known):
        cand = _assignment_from(name, known[name], table)
        score = len(ids & {g.id for g in cand.exercises})
        if not score:  # metadata stripped? count the exercise functions it defines
            defined = (
                set().union(
                    *(
                        defined_names(c["source"])
                        for c in sub_nb["cells"]
                        if c["cell_type"] == "code"
                    )
                )
                if sub_nb["cells"]
                else set()
            )
            score = len({g.exercise.function for g in cand.exercises} & defined) * 0.5
        if score > best_score:
            best, best_score = cand, score
    if best is None:
        raise NoAssignment(
            f"{Path(sub_path).name} is not a notebook of this course: it has no "
            f"exercise of any assignment ({', '.join(sorted(known))})"
        )
    return best


def _check_same_assignment(sub_nb, assignment, known, table, sub_path) -> None:
    ids = set(notebook_exercise_ids(sub_nb))
    mine = {g.id for g in assignment.exercises}
    if not ids or ids & mine:
        return
    other = sorted({Path(table[i].exercise.notebook).stem for i in ids if i in table})
    which = (
        f"it is {', '.join(other)}"
        if other
        else "its exercises belong to no assignment of this course"
    )
    raise NoAssignment(
        f"{Path(sub_path).name} is not the '{assignment.name}' assignment: {which}. "
        f"Submit your '{assignment.name}.ipynb'."
    )


# -- the plan -------------------------------------------------------------------------------
@dataclass
class Step:
    """One thing to execute: a submission cell (``cell`` index) or a check position."""

    kind: str  # "cell" | "check"
    index: int = -1  # index into the submission's cells (kind == "cell")
    exercise_id: str = ""  # kind == "check"


@dataclass
class Plan:
    steps: list[Step]
    exercise_cells: dict[str, list[int]]  # exercise id -> submission cell indices
    notes: list[str]
    tail: int = 0  # the last steps that decide nothing (see "The tail" above)

    def graded_steps(self, all_cells: bool = False) -> list[Step]:
        """The steps to run: all of them with ``all_cells``, else all but the tail."""
        return self.steps if all_cells else self.steps[: len(self.steps) - self.tail]


def _norm(source: str) -> str:
    return "\n".join(line.rstrip() for line in source.strip().splitlines())


def _match_reference(sub_cells, ref_cells) -> list[int | None]:
    """For each submission cell, the index of the reference cell it is (or ``None``)."""
    by_id = {c["id"]: i for i, c in enumerate(ref_cells) if c["id"]}
    by_course: dict[tuple[str, str], int] = {}
    by_source: dict[str, list[int]] = {}
    for i, c in enumerate(ref_cells):
        ex_id, role = course_meta(c)
        if ex_id and role:
            by_course.setdefault((ex_id, role), i)
        if _norm(c["source"]):
            by_source.setdefault(_norm(c["source"]), []).append(i)
    used: set[int] = set()
    out: list[int | None] = []
    for cell in sub_cells:
        ex_id, role = course_meta(cell)
        j = by_course.get((ex_id, role)) if ex_id and role else None
        if j is None and cell["id"] in by_id:
            j = by_id[cell["id"]]
        if j is None:
            for k in by_source.get(_norm(cell["source"]), []):
                if k not in used:
                    j = k
                    break
        if j is not None:
            used.add(j)
        out.append(j)
    return out


def build_plan(sub_nb: dict[str, Any], assignment: Assignment) -> Plan:
    """The steps to execute for ``sub_nb`` (see the module docstring)."""
    cells = _MatchedCells.of(sub_nb, assignment)
    ids = [g.id for g in assignment.exercises]
    notes: list[str] = []
    own_checks = _own_check_cells(cells, ids, notes)
    exercise_cells = _exercise_cells(cells, assignment.exercises, notes)
    insert_before: dict[int, list[str]] = {}
    for x in ids:
        at = _check_position(cells, x, exercise_cells[x], own_checks[x])
        insert_before.setdefault(at, []).append(x)
    steps = _steps(cells, ids, insert_before)
    return Plan(steps, exercise_cells, notes, tail=_tail(cells, steps))


def _tail(cells: _MatchedCells, steps: list[Step]) -> int:
    """How many of the last ``steps`` are unchanged reference cells after the last check."""
    n = 0
    for step in reversed(steps):
        if step.kind != "cell" or not cells.unchanged(step.index):
            break
        n += 1
    return n


@dataclass
class _MatchedCells:
    """A submission's cells beside its reference's: what every part of the plan reads."""

    cells: list[dict[str, Any]]  # the submission's
    ref_cells: list[dict[str, Any]]  # the reference's (empty without a reference)
    match: list[int | None]  # submission cell -> the reference cell it is, or None
    ref_ex: dict[str, int]  # exercise id -> index of its exercise cell in the reference (last)
    ref_check: dict[str, int]  # exercise id -> index of its check cell in the reference (first)
    dropped: set[int]  # the submission's check cells: never executed

    @classmethod
    def of(cls, sub_nb: dict[str, Any], assignment: Assignment) -> _MatchedCells:
        cells = sub_nb["cells"]
        ref_cells = assignment.reference["cells"] if assignment.reference else []
        ref_ex: dict[str, int] = {}
        ref_check: dict[str, int] = {}
        for i, c in enumerate(ref_cells):
            ex_id, role = course_meta(c)
            if ex_id and role == "exercise":
                ref_ex[ex_id] = i
            elif ex_id and role == "check":
                ref_check.setdefault(ex_id, i)
        found = cls(cells, ref_cells, _match_reference(cells, ref_cells), ref_ex, ref_check, set())
        found.dropped = {
            i
            for i, c in enumerate(cells)
            if course_meta(c)[1] in ("check", "answer")
            or found.reference_meta(i)[1] in ("check", "answer")
        }
        return found

    def reference_meta(self, i: int) -> tuple[str | None, str | None]:
        """:func:`course_meta` of the reference cell submission cell ``i`` is, if any."""
        j = self.match[i]
        return course_meta(self.ref_cells[j]) if j is not None else (None, None)

    def unchanged(self, i: int) -> bool:
        """Whether submission cell ``i`` is the reference cell it matches, source unchanged."""
        j = self.match[i]
        return j is not None and _norm(self.cells[i]["source"]) == _norm(
            self.ref_cells[j]["source"]
        )

    def is_landmark(self, i: int, x: str) -> bool:
        """Whether submission cell ``i`` ends the run of cells exercise ``x``'s check follows:
        a cell the reference places after ``x``'s check (or exercise) cell, or, without a
        reference, a cell of another exercise (see the module docstring)."""
        if i in self.dropped:
            return False
        if self.ref_cells:
            after = self.ref_check.get(x, self.ref_ex.get(x))
            j = self.match[i]
            return j is not None and after is not None and j > after
        ex_id, role = course_meta(self.cells[i])
        return role in ("exercise", "check") and ex_id is not None and ex_id != x


def _own_check_cells(
    cells: _MatchedCells, ids: list[str], notes: list[str]
) -> dict[str, list[int]]:
    """Exercise id -> the submission's own (dropped) check cells for it; notes for the
    instructor when the student deleted or edited one."""
    own_checks: dict[str, list[int]] = {}
    for x in ids:
        theirs = sorted(
            i
            for i in cells.dropped
            if (course_meta(cells.cells[i])[0] or cells.reference_meta(i)[0]) == x
        )
        own_checks[x] = theirs
        ref_src = (
            _norm(cells.ref_cells[cells.ref_check[x]]["source"]) if x in cells.ref_check else None
        )
        if not theirs:
            notes.append(f"the check cell of {x} was deleted; it was restored from the reference")
        elif ref_src is not None and any(
            _norm(cells.cells[i]["source"]) != ref_src for i in theirs
        ):
            notes.append(f"the check cell of {x} was edited; the reference check was used")
    return own_checks


def _exercise_cells(
    cells: _MatchedCells, exercises: list[GradedExercise], notes: list[str]
) -> dict[str, list[int]]:
    """Exercise id -> the submission's code cells marked as its exercise cell (by their own
    metadata, or as the reference's exercise cell they match); failing both, the last code
    cell that defines the exercise's function, with a note."""
    found: dict[str, list[int]] = {g.id: [] for g in exercises}
    for i, c in enumerate(cells.cells):
        if i in cells.dropped or c["cell_type"] != "code":
            continue
        ex_id, role = course_meta(c)
        rid, rrole = cells.reference_meta(i)
        if rrole == "exercise":
            ex_id, role = rid, rrole
        if role == "exercise" and ex_id in found:
            found[ex_id].append(i)
    for g in exercises:
        if found[g.id]:
            continue
        fn = g.exercise.function
        defs = [
            i
            for i, c in enumerate(cells.cells)
            if c["cell_type"] == "code"
            and i not in cells.dropped
            and fn in defined_names(c["source"])
        ]
        if defs:
            found[g.id] = [defs[-1]]
            notes.append(
                f"exercise {g.id}: its exercise cell was not found by id or "
                f"metadata; graded after the cell that defines {fn}"
            )
    return found


def _check_position(cells: _MatchedCells, x: str, own: list[int], own_checks: list[int]) -> int:
    """The submission cell index exercise ``x``'s check runs before (``len(cells)``: at the
    end), from its exercise cells ``own`` and the student's check cells ``own_checks``."""
    n = len(cells.cells)
    if not own:
        return next((i for i in range(n) if cells.is_landmark(i, x)), n)
    # the student's own check cell, if it still sits in this window, marks the spot
    p = own[-1] + 1
    theirs = set(own_checks)  # a set: 20,000 check cells must not make this loop quadratic
    while p < n and not cells.is_landmark(p, x) and p not in theirs:
        p += 1
    return p


def _steps(cells: _MatchedCells, ids: list[str], insert_before: dict[int, list[str]]) -> list[Step]:
    """The submission's non-empty code cells that are not checks, in order, with each
    exercise's check step before the cell index ``insert_before`` gives it."""
    steps: list[Step] = []
    order = {x: k for k, x in enumerate(ids)}
    for i in range(len(cells.cells) + 1):
        for x in sorted(insert_before.get(i, []), key=order.__getitem__):
            steps.append(Step("check", exercise_id=x))
        if (
            i < len(cells.cells)
            and i not in cells.dropped
            and cells.cells[i]["cell_type"] == "code"
            and cells.cells[i]["source"].strip()
        ):
            steps.append(Step("cell", index=i))
    return steps
