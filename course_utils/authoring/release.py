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
notebook, :mod:`course_utils.authoring.leaks`) and exits 1 naming each problem. CI runs it
on the committed tree; the test suite does not, since in a student's checkout ``notebooks/`` holds their answers.

A student's work is never overwritten: ``course release`` keeps every notebook whose exercise
cells differ from the released stubs or that has cells its student added
(:mod:`course_utils.authoring.student_work`), lists those cells and exits 1; ``--force`` replaces them.
Notebooks without a solution are kept (``--force`` removes those named ``NN_*.ipynb``).

The release itself is a chain of small steps, in the spirit of nbgrader's preprocessors:
:func:`~course_utils.authoring.validate.validate`, then :data:`STEPS` (:func:`strip_solutions`, :func:`clear_outputs`,
:func:`drop_volatile_metadata`, :func:`add_install_cell`), :func:`render` and :func:`write`.

The first cell of every student notebook of a course project (a ``pyproject.toml`` beside
``solutions/``) installs the course where ``course_utils`` is missing, from the repository set
once in ``[tool.course]`` (:mod:`course_utils.authoring.install_cell`); elsewhere it does
nothing.

Before anything is written, every solution is validated (:mod:`course_utils.authoring.validate`:
problems are listed with the file and cell they are in, and the command exits 2); the stubs
come from :mod:`course_utils.authoring.stubs`. Files are written through a temporary file made
with ``O_EXCL | O_NOFOLLOW`` in ``notebooks/``, then renamed; a notebook that is a symbolic link
is refused (a committed link would make the release write outside the checkout). The command
line is :mod:`course_utils.authoring.release_cli`; ``--execute`` is
:func:`course_utils.authoring.execute.execute_solution`.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat

from course_utils.authoring import answers, install_cell, student_work
from course_utils.authoring.cells import ANSWER, EXERCISE, cell_role, cell_source, exercise_id
from course_utils.authoring.leaks import Leak, find_leaks
from course_utils.authoring.project import CourseSettings, read_settings
from course_utils.authoring.regions import find_regions
from course_utils.authoring.stubs import stub_source
from course_utils.authoring.validate import Context, ReleaseError, load_registry, validate

SOLUTION_GLOB = "[0-9][0-9]_*.ipynb"
VOLATILE_CELL_METADATA = ("execution",)
_VOLATILE_NB_METADATA = ("widgets",)

# Like nbgrader's preprocessors, a release is a chain of small steps over a copy of the
# notebook: ``validate`` (every problem at once, nothing changed), then each of
# :data:`STEPS` (``strip_solutions``, ``clear_outputs``, ``drop_volatile_metadata``,
# ``add_install_cell``), then ``render`` and ``write``. A step takes and returns the notebook
# (plain dicts) and a :class:`~course_utils.authoring.validate.Context`; it may assume the
# notebook is valid.


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
        new_source, _ = stub_source(cell, source, regions, ex_id, ctx.registry.get(ex_id))
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
        for key in VOLATILE_CELL_METADATA:
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
    ctx = Context(name, load_registry() if registry is None else registry, install)
    problems = validate(nb, ctx)
    if problems:
        raise ReleaseError(problems)
    student = json.loads(json.dumps(nb))  # deep copy of plain data
    for step in STEPS:
        student = step(student, ctx)
    return student


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
    registry = load_registry() if registry is None else registry
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
    links = [str(nb_dir / n) for n in expected if (nb_dir / n).is_symlink()]
    if links:
        raise ReleaseError([f"{p}: a symbolic link, not a notebook; remove it" for p in links])
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
        replace_file(target, data)
        result.log.append(f"wrote     {target}")
    for extra in sorted(p for p in nb_dir.glob("*.ipynb") if p.name not in expected):
        if force and extra.match(SOLUTION_GLOB):
            extra.unlink()
            result.log.append(f"removed   {extra} (no {Path(solutions) / extra.name})")
        else:
            result.log.append(f"kept      {extra} (no {Path(solutions) / extra.name})")
    return result


def replace_file(target: Path, data: bytes) -> None:
    """Put ``data`` at ``target`` whole (a reader never sees half a file): written into a new
    temporary file beside it, created with ``O_EXCL | O_NOFOLLOW`` (an existing file or a
    planted link of that name is never written through), then renamed over ``target``."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, flags, 0o644)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


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
