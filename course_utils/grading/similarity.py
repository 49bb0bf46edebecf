"""``course grade --similarity``: how much of each exercise's code is also somewhere else.

The in-kernel re-export flags (:mod:`course_utils.grading.inkernel`) catch an answer that *is*
or *calls* the course's implementation; they are a best-effort signal, easy to evade (names
built at run time, ``importlib``, ``exec``, reading the solutions from disk). What courses
use instead is a similarity report, MOSS-style: the code of each exercise (the student's
exercise cell and the cells added below it, as the grader's plan finds them) is tokenised,
identifiers and literals normalised, fingerprinted by winnowing (``copydetect``, Stanford
MOSS's algorithm) with the starter code removed as boilerplate, and compared with

- *course*: the course's own implementation (``inspect.getsource`` of the exercise's
  reference) and the solution notebook's exercise cell;
- *peer*: the same exercise in every other submission of the batch.

Each number is the share of the student's code (tokens) found in the other text: 1.0 means
everything the student wrote is there. It is a reason to read two pieces of code side by
side, never a verdict: a four-line exercise has few ways to be written.
"""

from __future__ import annotations

import inspect
import io
import re
from typing import Any

from course_utils.authoring.cells import cell_source
from course_utils.grading import plan as pl

NOISE = 12  # k-gram length in normalised characters: shorter matches are ignored
WINDOW = 1  # winnowing window (guarantee threshold = NOISE + WINDOW - 1)
MAX_CODE = 100_000  # characters of one exercise's code that are compared

_SOLUTION = re.compile(r"^[ \t]*### BEGIN SOLUTION.*?^[ \t]*### END SOLUTION[^\n]*\n?", re.M | re.S)


def _fingerprint(code: str, boilerplate=None):
    from copydetect import CodeFingerprint

    return CodeFingerprint(
        "exercise.py",
        NOISE,
        WINDOW,
        boilerplate=boilerplate if boilerplate is not None else [],
        language="python",
        fp=io.StringIO(code[:MAX_CODE]),
    )


def share(a, b) -> float:
    """The share of ``a``'s fingerprinted code also found in ``b`` (0..1)."""
    from copydetect import compare_files

    if not a.hashes or not b.hashes:
        return 0.0
    _, (sim_a, _), _ = compare_files(a, b)
    return float(min(1.0, max(0.0, sim_a)))


def _cells_of(nb: dict[str, Any], ex_id: str) -> list[str]:
    return [cell_source(c) for c in nb.get("cells", []) if pl.course_meta(c) == (ex_id, "exercise")]


def _code(sources: list[str]) -> str:
    parts = []
    for src in sources:
        try:
            parts.append(pl.python_source(src))
        except Exception:
            parts.append(src)
    return "\n\n".join(parts)


def add_similarity(reports: list[dict[str, Any]], options) -> None:
    """Add ``report["similarity"] = {exercise id: {"course", "peer", "peer_with"}}`` to every
    graded report (ImportError when copydetect is missing)."""
    import copydetect  # noqa: F401 - fail early and clearly

    table = pl.exercise_table(options.checks_modules)
    dirs = pl.reference_dirs(options.reference_dir)
    codes: dict[tuple[str, str], dict[int, Any]] = {}  # (assignment, ex id) -> {report: fp}
    course: dict[tuple[str, str], list[Any]] = {}
    for k, rep in enumerate(reports):
        if not rep.get("assignment") or rep.get("missing") or rep.get("error_kind") == "bad_input":
            continue
        try:
            nb = pl.read_notebook(rep["notebook"])
            assignment = pl.resolve_assignment(
                rep["notebook"], nb, dirs=dirs, table=table, forced=rep["assignment"]
            )
            plan = pl.build_plan(nb, assignment)
        except Exception:
            continue
        for g in assignment.exercises:
            key = (assignment.name, g.id)
            if key not in course:
                course[key] = _course_fingerprints(g, assignment)
            cells = plan.exercise_cells.get(g.id, [])
            code = _code([cell_source(nb["cells"][i]) for i in cells])
            stub = _stub(assignment, g.id)
            boiler = list(_fingerprint(stub).hashes) if stub.strip() else None
            codes.setdefault(key, {})[k] = _fingerprint(code, boiler)
    for key, by_report in codes.items():
        for k, fp in by_report.items():
            best_peer, peer_with = 0.0, None
            for j, other in by_report.items():
                if j == k:
                    continue
                value = share(fp, other)
                if value > best_peer:
                    best_peer, peer_with = value, reports[j].get("student")
            value_course = max((share(fp, ref) for ref in course[key]), default=0.0)
            reports[k].setdefault("similarity", {})[key[1]] = {
                "course": round(value_course, 3),
                "peer": round(best_peer, 3),
                "peer_with": peer_with,
            }


def _stub(assignment: pl.Assignment, ex_id: str) -> str:
    """The starter code students get: the solution cell without its solution block."""
    return _SOLUTION.sub("", _code(_cells_of(assignment.reference or {}, ex_id)))


def _course_fingerprints(g: pl.GradedExercise, assignment: pl.Assignment) -> list[Any]:
    texts = []
    try:
        texts.append(inspect.getsource(g.exercise.reference))
    except (OSError, TypeError):
        pass
    solution = _code(_cells_of(assignment.reference or {}, g.id))
    if solution.strip():
        texts.append(solution.replace("### BEGIN SOLUTION", "").replace("### END SOLUTION", ""))
    return [_fingerprint(t) for t in texts if t.strip()]
