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

``course release --check`` writes nothing: it exits 1 and names every notebook that differs
from what release would write (changed, missing or extra), and every solution line that
appears in a student notebook (the no-answer rule, :mod:`course_utils.leaks`). CI runs it.

Before anything is written, every solution is validated; problems are listed with the file and
cell they are in and the command exits 2. A notebook is invalid when: a cell has no id or two
cells share one; markers are unbalanced, nested, malformed or outside an ``exercise`` cell; an
exercise cell has no solution region; a code region is not inside a function body (its stub
would raise when the student runs the cell, and an untouched notebook must run to the end); a
check cell's id is not registered, its source is not exactly ``check("ID", function)``, or it
has no exercise cell before it; an exercise's points differ from the registry's; a registered
exercise of this notebook has no exercise or check cell.

Exit codes: 0 ok, 1 drift (``--check``), 2 invalid solutions or usage error.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
ANSWER_PLACEHOLDER = "YOUR ANSWER HERE"
SOLUTION_GLOB = "[0-9][0-9]_*.ipynb"
EXERCISE_TAG, CHECK_TAG = "exercise", "check"
ID_PATTERN = re.compile(r"^(\d\d)\.(\d+)$")

EXIT_OK, EXIT_DRIFT, EXIT_INVALID = 0, 1, 2

_MARKER_WORDS = re.compile(r"\b(BEGIN|END)\s+SOLUTION\b")
_DEF_OR_CLASS = re.compile(r"^(\s*)(?:async\s+)?(def|class)\s+([A-Za-z_]\w*)")
_VOLATILE_CELL_METADATA = ("execution",)
_VOLATILE_NB_METADATA = ("widgets",)


class ReleaseError(Exception):
    """Invalid solution notebooks: ``problems`` lists one message per problem found."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


@dataclass
class _Region:
    begin: int  # line index of the BEGIN marker
    end: int  # line index of the END marker
    indent: str


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


def _source(cell: Mapping[str, Any]) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def _tags(cell: Mapping[str, Any]) -> list[str]:
    tags = cell.get("metadata", {}).get("tags", [])
    return list(tags) if isinstance(tags, list) else []


def _course_meta(cell: Mapping[str, Any]) -> dict[str, Any]:
    meta = cell.get("metadata", {}).get("course")
    return dict(meta) if isinstance(meta, Mapping) else {}


def _role(cell: Mapping[str, Any]) -> str | None:
    """``"exercise"``, ``"check"`` or ``None``, from the tags (validated against metadata)."""
    tags = _tags(cell)
    if EXERCISE_TAG in tags:
        return "exercise"
    if CHECK_TAG in tags:
        return "check"
    return _course_meta(cell).get("role")


def find_regions(source: str) -> tuple[list[_Region], list[str]]:
    """The solution regions of a cell's source, and messages for malformed/unbalanced markers.

    Lines are counted from 1 in the messages.
    """
    regions: list[_Region] = []
    problems: list[str] = []
    open_at: int | None = None
    indent = ""
    for i, line in enumerate(source.split("\n")):
        stripped = line.strip()
        if stripped == BEGIN:
            if open_at is not None:
                problems.append(
                    f"line {i + 1}: '{BEGIN}' inside the region opened on line "
                    f"{open_at + 1} (regions cannot nest; close it with '{END}' first)"
                )
                continue
            open_at, indent = i, line[: len(line) - len(line.lstrip())]
        elif stripped == END:
            if open_at is None:
                problems.append(f"line {i + 1}: '{END}' without a '{BEGIN}' before it")
                continue
            regions.append(_Region(open_at, i, indent))
            open_at = None
        elif _MARKER_WORDS.search(line):
            problems.append(
                f"line {i + 1}: malformed solution marker {stripped!r}: write exactly "
                f"'{BEGIN}' or '{END}' on a line of its own"
            )
    if open_at is not None:
        problems.append(f"line {open_at + 1}: '{BEGIN}' has no '{END}' after it")
    return regions, problems


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


def release_notebook(
    nb: Mapping[str, Any], name: str, registry: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The student version of solution notebook ``nb`` (a parsed ``.ipynb`` dict).

    ``name`` is the file name (``"03_scaled_dot_product.ipynb"``), used in messages and to
    match the registry's ``Exercise.notebook``; ``registry`` maps exercise ids to exercises
    (default: ``course_utils.checks.REGISTRY``). Raises :class:`ReleaseError` listing every
    problem found. ``nb`` itself is not modified.
    """
    registry = _load_registry() if registry is None else registry
    probs = _Problems(name)
    nb = json.loads(json.dumps(nb))  # deep copy of plain data
    if nb.get("nbformat") != 4 or int(nb.get("nbformat_minor", 0)) < 5:
        probs.add(
            f"nbformat {nb.get('nbformat')}.{nb.get('nbformat_minor')} has no cell ids; "
            "save it as nbformat 4.5 (JupyterLab >= 3 does) so every cell has a stable id"
        )
    prefix = name[:2]
    cells = nb.get("cells", [])

    seen_ids: dict[str, int] = {}
    exercise_cells: dict[str, list[int]] = {}
    check_cells: dict[str, list[int]] = {}
    for index, cell in enumerate(cells):
        cid = cell.get("id")
        if not cid:
            probs.add("cell has no id (every cell needs a stable id)", cell, index)
        elif cid in seen_ids:
            probs.add(
                f"duplicate cell id {cid!r} (also cell #{seen_ids[cid]}); ids must be "
                "unique: the grader finds check cells by id",
                cell,
                index,
            )
        else:
            seen_ids[cid] = index

        tags, meta, source = _tags(cell), _course_meta(cell), _source(cell)
        if EXERCISE_TAG in tags and CHECK_TAG in tags:
            probs.add("cell is tagged both 'exercise' and 'check'", cell, index)
            continue
        role = _role(cell)
        regions, marker_problems = find_regions(source)
        for msg in marker_problems:
            probs.add(msg, cell, index)

        if role not in ("exercise", "check"):
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
            continue

        # exercise and check cells: tag, metadata and id
        tag = EXERCISE_TAG if role == "exercise" else CHECK_TAG
        if tag not in tags:
            probs.add(
                f"'course' metadata says role {role!r} but the cell is not tagged {tag!r}",
                cell,
                index,
            )
        if meta.get("role") != role:
            probs.add(
                f'cell tagged {tag!r} needs metadata "course": {{"role": {role!r}, '
                f"...}}, got role {meta.get('role')!r}",
                cell,
                index,
            )
        ex_id = meta.get("id")
        if not isinstance(ex_id, str) or not ID_PATTERN.match(ex_id):
            probs.add(
                f'cell tagged {tag!r} needs metadata "course": {{"id": "NN.k", ...}} '
                f'(e.g. "{prefix}.1"), got id {ex_id!r}',
                cell,
                index,
            )
            continue
        if ex_id[:2] != prefix:
            probs.add(f"exercise {ex_id} belongs to notebook {ex_id[:2]}, not {name}", cell, index)
        points = meta.get("points")
        if not isinstance(points, int) or isinstance(points, bool) or points < 0:
            probs.add(
                f"metadata course.points must be a whole number >= 0, got {points!r}", cell, index
            )
        exercise = registry.get(ex_id)
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
                    f"exercise {ex_id} is registered for notebook {exercise.notebook!r}, "
                    f"not {name!r}",
                    cell,
                    index,
                )

        if role == "check":
            check_cells.setdefault(ex_id, []).append(index)
            if regions:
                probs.add("solution markers in a check cell", cell, index)
            if exercise is None:
                probs.add(
                    f"check cell for exercise {ex_id}, which is not registered in "
                    f"course_utils.checks (known: {', '.join(registry) or 'none'})",
                    cell,
                    index,
                )
                continue
            expected = f'check("{ex_id}", {exercise.function})'
            if source.strip() != expected:
                probs.add(
                    f"check cell source must be exactly {expected!r}, got {source.strip()!r}",
                    cell,
                    index,
                )
            if ex_id not in exercise_cells:
                probs.add(
                    f"check cell for exercise {ex_id} has no exercise cell (tagged "
                    f"'exercise', course.id {ex_id!r}) before it",
                    cell,
                    index,
                )
            if len(check_cells[ex_id]) > 1:
                probs.add(
                    f"second check cell for exercise {ex_id} (first: cell "
                    f"#{check_cells[ex_id][0]})",
                    cell,
                    index,
                )
            continue

        # role == "exercise"
        exercise_cells.setdefault(ex_id, []).append(index)
        if not regions:
            if not marker_problems:
                probs.add(
                    f"exercise cell {ex_id} has no '{BEGIN}' ... '{END}' region: the "
                    "answer would be released to students",
                    cell,
                    index,
                )
            continue
        if marker_problems:
            continue
        new_source = _stub_source(cell, source, regions, ex_id, exercise, probs, index)
        if new_source is not None:
            cell["source"] = new_source

    for ex_id, ex in registry.items():
        if getattr(ex, "notebook", None) != name:
            continue
        if ex_id not in exercise_cells:
            probs.add(
                f"registered exercise {ex_id} ({ex.title}) has no exercise cell "
                f"(tag 'exercise', metadata course.id {ex_id!r})"
            )
        if ex_id not in check_cells:
            probs.add(
                f"registered exercise {ex_id} ({ex.title}) has no check cell "
                f"(tag 'check', source check(\"{ex_id}\", {ex.function}))"
            )

    if probs.items:
        raise ReleaseError(probs.items)

    for cell in cells:
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
        for key in _VOLATILE_CELL_METADATA:
            cell.get("metadata", {}).pop(key, None)
    for key in _VOLATILE_NB_METADATA:
        nb.get("metadata", {}).pop(key, None)
    nb["nbformat"], nb["nbformat_minor"] = 4, max(5, int(nb.get("nbformat_minor", 5)))
    return nb


def _stub_source(
    cell: Mapping[str, Any],
    source: str,
    regions: list[_Region],
    ex_id: str,
    exercise: Any,
    probs: _Problems,
    index: int,
) -> str | None:
    lines = source.split("\n")
    is_code = cell.get("cell_type") == "code"
    out: list[str] = []
    pos = 0
    ok = True
    for region in regions:
        out.extend(lines[pos : region.begin])
        if is_code:
            inner, outer = _enclosing_function(lines, region.begin)
            if inner != "def":
                ok = False
                probs.add(
                    f"the solution region on line {region.begin + 1} is not inside a "
                    "function body: its stub would raise as soon as the student runs the "
                    "cell (an untouched notebook must run to the end); put the answer "
                    "inside a def",
                    cell,
                    index,
                )
            name = exercise.function if exercise is not None else outer
            out.append(region.indent + stub_line(ex_id, name))
        else:
            out.append(region.indent + ANSWER_PLACEHOLDER)
        pos = region.end + 1
    out.extend(lines[pos:])
    new_source = "\n".join(out)
    if ok and is_code and _parses(source) and not _parses(new_source):
        probs.add(
            "the student version of this cell is not valid Python: indent the "
            f"'{BEGIN}' marker like the code it replaces",
            cell,
            index,
        )
        ok = False
    return new_source if ok else None


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


def release_file(path: str | Path, registry: Mapping[str, Any] | None = None) -> str:
    """The text of the student version of the solution notebook at ``path``."""
    path = Path(path)
    nb = _read(path)
    student = release_notebook(nb, path.name, registry)
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
    changed, missing from ``notebooks`` or extra in it. Empty when in sync."""
    expected = plan(solutions, registry)
    nb_dir = Path(notebooks)
    present = {p.name for p in nb_dir.glob("*.ipynb")} if nb_dir.is_dir() else set()
    messages = []
    for name, text in expected.items():
        target = nb_dir / name
        if name not in present:
            messages.append(f"{target}: missing (run `course release`)")
        elif target.read_bytes() != text.encode("utf-8"):
            messages.append(
                f"{target}: differs from what `course release` writes from {Path(solutions) / name}"
            )
    for name in sorted(present - set(expected)):
        messages.append(f"{nb_dir / name}: extra (no {Path(solutions) / name})")
    return messages


def write(
    solutions: str | Path, notebooks: str | Path, registry: Mapping[str, Any] | None = None
) -> list[str]:
    """Write every student notebook into ``notebooks`` (created if needed), remove student
    notebooks whose solution is gone, and return one line per file saying what happened."""
    expected = plan(solutions, registry)
    nb_dir = Path(notebooks)
    nb_dir.mkdir(parents=True, exist_ok=True)
    log = []
    for name, text in expected.items():
        target = nb_dir / name
        data = text.encode("utf-8")
        if target.exists() and target.read_bytes() == data:
            log.append(f"unchanged {target}")
            continue
        tmp = target.with_name(f".{name}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, target)
        log.append(f"wrote     {target}")
    for stale in sorted(p for p in nb_dir.glob("*.ipynb") if p.name not in expected):
        stale.unlink()
        log.append(f"removed   {stale} (no {Path(solutions) / stale.name})")
    return log


def execute_solution(path: str | Path, *, profile: str | None = None, timeout: int = 600) -> None:
    """Run a solution notebook top to bottom in a fresh kernel and store its outputs in place.

    ``profile`` sets ``COURSE_PROFILE`` for the run (default: the current environment's).
    Cell timings are not recorded, so re-running changes only what the code prints. The kernel
    is this interpreter's (as ``pytest --nbval-current-env``) and runs in the notebook's
    folder, as under nbval and in JupyterLab.
    """
    from course_utils.execute import run_notebook

    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    run_notebook(nb, folder=path.parent, profile=profile, timeout=timeout)
    for cell in nb.cells:
        for key in _VOLATILE_CELL_METADATA:
            cell.metadata.pop(key, None)
    path.write_text(render(nb), encoding="utf-8")


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
        "--execute",
        nargs="+",
        default=[],
        metavar="NOTEBOOK",
        help="first run these solution notebooks in place (fresh kernel, outputs "
        "stored, no timings), then release",
    )
    parser.add_argument(
        "--profile",
        choices=("ci", "cpu", "gpu"),
        default=None,
        help="COURSE_PROFILE for --execute (default: the environment's)",
    )
    parser.epilog = (
        "Exit codes: 0 ok; 1 notebooks/ out of date (--check); 2 invalid solution notebooks."
    )


def _no_answer_rule(solutions: str | Path) -> bool:
    """The no-answer rule of :mod:`course_utils.leaks` for ``--check``: print every solution
    line found in a student notebook; True when there is one."""
    from course_utils.leaks import leak_messages

    leaks = leak_messages(solutions)
    if leaks:
        print(
            f"{len(leaks)} solution line(s) appear in the student notebooks (no-answer rule: "
            "reword the prose or use the student's function):",
            file=sys.stderr,
        )
        for m in leaks:
            print(f"  {m}", file=sys.stderr)
    return bool(leaks)


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
        if args.check:
            messages = drift(args.solutions, args.notebooks)
            if messages:
                print(
                    f"{len(messages)} student notebook(s) out of date; run `course release`:",
                    file=sys.stderr,
                )
                for m in messages:
                    print(f"  {m}", file=sys.stderr)
            else:
                print(f"{args.notebooks}/ is up to date with {args.solutions}/")
            leaked = _no_answer_rule(args.solutions)
            return EXIT_DRIFT if messages or leaked else EXIT_OK
        for line in write(args.solutions, args.notebooks):
            print(line)
        return EXIT_OK
    except ReleaseError as exc:
        print(
            f"course release: {len(exc.problems)} problem(s) in the solution notebooks:",
            file=sys.stderr,
        )
        for p in exc.problems:
            print(f"  {p}", file=sys.stderr)
        return EXIT_INVALID
