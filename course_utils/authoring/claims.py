"""Claims bound to results: every sentence of the prose that depends on a run is asserted by it.

A notebook that says "attention stays flat with length" proves it in the cell beside the plot::

    claim("attention stays within 2 points of its best accuracy at every length", spread <= 2.0)

A claim is checked in the active profile: it prints ``✓ <statement>`` when it holds and raises
:class:`ClaimFailed` (which stops the notebook) when it does not, so stored outputs can only come
from a run where every claim held. ``course claims --profile cpu 03`` runs a solution notebook
and lists every claim with its outcome.

**True in every profile.** A student runs ``ci`` (the grader), ``cpu`` (a laptop) or ``gpu``,
and reads the same prose in each. A claim is therefore made in every profile by default, and
the test suite grades every solution in ``ci`` (``tests/test_notebooks.py``: a failed claim is a
raising cell, so the solution loses its full marks and the test fails). The ONLY way out is a
claim limited to some profiles (``profiles=("cpu", "gpu")``: e.g. the ``ci`` profile trains too
little for it), and such a claim must be *visibly scoped*: its statement starts with the exact
words :func:`scope` gives for its profiles, ``"In the `cpu` profile, "`` or ``"In the `cpu` and
`gpu` profiles, "`` (in the order of :data:`PROFILES`). :func:`claim` raises ``ValueError`` on a
limited claim without them, and ``tests/test_claims.py`` walks every solution notebook for the
same rule (and for claims hidden under an ``if`` on the profile), so a reader of any run sees
which profile a sentence is about. Where the claim is not
made, it prints a ``·`` line saying plainly that the sentence was not tested in this run, and why.
Prose that restates such a result must be scoped the same way (or rendered from the run's values
with ``display(Markdown(...))``).

**Who reads a failure.** In an author's run (``course claims``, ``course release --execute`` and
the test suite set ``COURSE_CLAIMS_AUTHOR=1``) a failed claim says to fix the prose or the
experiment. In a student's run (their own code, their machine) it says their run differs from the
course's, and names the exercises the result depends on (``exercises=("08.1",)``) and the
machine's load as what to check.

When ``COURSE_CLAIMS_LOG`` names a file, each claim also appends one JSON line to it
(``{"statement", "status", "profile", "profiles", "detail"}``); that is how ``course claims``
collects them from the kernel.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path

from course_utils.authoring.author_env import AUTHOR_ENV_VAR
from course_utils.runtime.profiles import PROFILES, profile_name, using_environment

LOG_ENV_VAR = "COURSE_CLAIMS_LOG"
KEEP_GOING_ENV_VAR = "COURSE_CLAIMS_KEEP_GOING"  # "1": a failed claim prints ✗ instead of raising
HELD, FAILED, SKIPPED = "held", "failed", "skipped"


class Held:
    """What :func:`claim` returns when the claim held: truthy, and invisible when it is the
    last expression of a cell (the ``✓`` line is the output; a bare ``True`` would be noise)."""

    def __bool__(self) -> bool:
        return True

    def __repr__(self) -> str:
        return "Held()"

    def _ipython_display_(self) -> None:
        """Show nothing: the claim already printed its line."""


class ClaimFailed(AssertionError):
    """A result-dependent sentence of the prose does not hold in this run."""


def _normalise_profiles(profiles: Iterable[str] | str) -> tuple[str, ...]:
    names = (profiles,) if isinstance(profiles, str) else tuple(profiles)
    unknown = [p for p in names if p not in PROFILES]
    if not names or unknown:
        raise ValueError(
            f"profiles must be a non-empty subset of {PROFILES}; got {names!r}"
            + (f" (unknown: {', '.join(unknown)})" if unknown else "")
        )
    return names


def scope(profiles: Iterable[str] | str) -> str:
    """The words a claim limited to ``profiles`` must start with; "" for every profile.

    ``scope(("cpu", "gpu")) == "In the `cpu` and `gpu` profiles, "``;
    ``scope("cpu") == "In the `cpu` profile, "``. Order follows :data:`PROFILES`.
    """
    names = _normalise_profiles(profiles)
    ordered = [p for p in PROFILES if p in names]
    if len(ordered) == len(PROFILES):
        return ""
    quoted = [f"`{p}`" for p in ordered]
    if len(quoted) == 1:
        return f"In the {quoted[0]} profile, "
    return f"In the {', '.join(quoted[:-1])} and {quoted[-1]} profiles, "


def author_mode() -> bool:
    """True in the authoring tools' runs (``COURSE_CLAIMS_AUTHOR=1``), False in a student's."""
    return os.environ.get(AUTHOR_ENV_VAR, "").strip() == "1"


def _log(record: dict) -> None:
    path = os.environ.get(LOG_ENV_VAR)
    if not path:
        return
    with Path(path).open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")


def _exercise_ids(exercises: Iterable[str] | str) -> tuple[str, ...]:
    ids = (exercises,) if isinstance(exercises, str) else tuple(exercises)
    bad = [e for e in ids if not (isinstance(e, str) and re.fullmatch(r"\d\d\.\d+", e))]
    if bad:
        raise ValueError(f"exercises are ids like '08.1'; got {bad!r}")
    return ids


def failure_message(
    statement: str, profile: str, detail: str = "", exercises: Iterable[str] | str = ()
) -> str:
    """What a failed claim says: to an author (:func:`author_mode`) or to a student."""
    extra = f" ({detail})" if detail else ""
    if author_mode():
        return (
            f"this claim of the prose does not hold in the '{profile}' profile: "
            f"{statement}{extra}. Fix the prose or the experiment before storing outputs."
        )
    ids = _exercise_ids(exercises)
    where = (
        f"check exercise {', '.join(ids)} (does its check cell say PASSED?)"
        if ids
        else "check your answers to the exercises above this cell (does each check cell say "
        "PASSED?)"
    )
    return (
        f"your run differs from the course's: {statement}{extra} — {where}, or your machine's "
        "load (a busy machine slows timings; close other programs and run the cell again). "
        f"This run used the '{profile}' profile; compare with the course's stored outputs."
    )


def claim(
    statement: str,
    holds: bool | Callable[[], bool],
    *,
    profiles: Iterable[str] | str = PROFILES,
    detail: str = "",
    exercises: Iterable[str] | str = (),
) -> Held | None:
    """Assert that ``statement`` holds in this run when the active profile is in ``profiles``.

    ``holds`` is the evidence: a bool (e.g. ``gap >= 25``) or a zero-argument callable, which is
    only called when the claim is checked (so an expensive test costs nothing where the claim is
    not made). A claim limited to some ``profiles`` must start with :func:`scope` of them
    (``"In the `cpu` profile, ..."``), else ``ValueError``. ``detail`` is shown with a failure
    (e.g. the measured values); ``exercises`` (ids such as ``"08.1"``) are the student's code the
    result depends on, named to a student whose run fails it. Returns a truthy :class:`Held`
    (displayed as nothing in a notebook) when the claim held, None when it was skipped; raises
    :class:`ClaimFailed` when it did not hold.
    """
    if not isinstance(statement, str) or not statement.strip():
        raise ValueError("a claim needs the sentence it checks, as a non-empty string")
    made_in = _normalise_profiles(profiles)
    prefix = scope(made_in)
    if not statement.startswith(prefix):
        raise ValueError(
            f"a claim made only in {', '.join(made_in)} must say so to the reader: start its "
            f"statement with {prefix!r} (and scope the prose it backs the same way); got "
            f"{statement!r}"
        )
    _exercise_ids(exercises)
    profile = profile_name()
    record = {"statement": statement, "profile": profile, "profiles": list(made_in)}
    if profile not in made_in:
        _log({**record, "status": SKIPPED, "detail": detail})
        names = " and ".join(f"`{p}`" for p in made_in)
        about = f"{names} profiles' runs" if len(made_in) > 1 else f"{names} profile's run"
        print(
            f"· not tested in this `{profile}` run (the sentence is about the {about}): {statement}"
        )
        return None
    value = holds() if callable(holds) else holds
    try:
        ok = bool(value)
    except Exception as exc:  # e.g. a multi-element tensor: ambiguous truth value
        raise TypeError(
            f"the evidence for the claim {statement!r} must be a bool, got {type(value).__name__}"
        ) from exc
    _log({**record, "status": HELD if ok else FAILED, "detail": detail})
    if not ok:
        if os.environ.get(KEEP_GOING_ENV_VAR) == "1":  # `course claims --keep-going`
            print(f"✗ {statement}" + (f" ({detail})" if detail else ""))
            return None
        raise ClaimFailed(failure_message(statement, profile, detail, exercises))
    print(f"✓ {statement}")
    return Held()


def read_log(path: str | Path) -> list[dict]:
    """The claims recorded in a ``COURSE_CLAIMS_LOG`` file, in the order they were made."""
    path = Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


# ------------------------------------------------------------------------ static check


def _literal_assignments(tree: ast.AST) -> dict[str, object]:
    """``name = <literal>`` assignments of a module (how a notebook names a profile tuple)."""
    found: dict[str, object] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                with contextlib.suppress(ValueError, TypeError, SyntaxError):
                    found[target.id] = ast.literal_eval(node.value)
    return found


def _leading_text(node: ast.AST) -> str | None:
    """The literal start of a statement argument: a string, or an f-string's first part."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        first = node.values[0] if node.values else None
        return first.value if isinstance(first, ast.Constant) else ""
    return None


def _is_claim(node: ast.AST) -> bool:
    func = getattr(node, "func", None)
    return isinstance(node, ast.Call) and getattr(func, "id", getattr(func, "attr", "")) == "claim"


def _claims_under_a_profile_test(tree: ast.AST, source: str) -> list[str]:
    """Claims inside an ``if`` (or conditional expression) whose test names the profile: a way
    round the rule (the claim would silently not be made in ``ci``); ``profiles=`` says it."""
    problems = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.If, ast.IfExp, ast.While)):
            continue
        test = ast.get_source_segment(source, node.test) or ""
        if "profile" not in test.lower():
            continue
        for inner in ast.walk(node):
            if _is_claim(inner):
                problems.append(
                    f"line {inner.lineno}: a claim under `{test}`: limit it with profiles= and "
                    "scope its statement instead"
                )
    return problems


def unscoped_claims(source: str) -> list[str]:
    """The profile-limited ``claim(...)`` calls of ``source`` (Python code, e.g. a notebook's
    code cells joined) whose statement does not start with :func:`scope` of their profiles.

    The rule, checked without running anything: a call to ``claim`` with a ``profiles=``
    argument naming fewer than all of :data:`PROFILES` (a literal, or a name bound to one in
    ``source``) must have as its first argument a string or f-string starting with exactly
    ``scope(profiles)``. A statement that is not a literal, or profiles that cannot be read,
    are reported too (the reader must be able to see the scope in the source), and so is a claim
    inside an ``if`` whose condition names the profile (a claim skipped that way would escape
    both the rule and the ``ci`` grading of every solution).
    """
    tree = ast.parse(source)
    names = _literal_assignments(tree)
    problems = _claims_under_a_profile_test(tree, source)
    for node in ast.walk(tree):
        if not _is_claim(node):
            continue
        given = {k.arg: k.value for k in node.keywords}
        if "profiles" not in given:
            continue
        where = f"line {node.lineno}: claim({ast.get_source_segment(source, node.args[0]) if node.args else ''}"
        arg = given["profiles"]
        try:
            value = names[arg.id] if isinstance(arg, ast.Name) else ast.literal_eval(arg)
            prefix = scope(value)
        except (KeyError, ValueError, TypeError, SyntaxError):
            problems.append(f"{where}: profiles= is not a literal subset of {PROFILES}")
            continue
        text = _leading_text(node.args[0]) if node.args else None
        if prefix and (text is None or not text.startswith(prefix)):
            problems.append(f"{where}: the statement must start with {prefix!r}")
    return problems


# --------------------------------------------------------------------------------- CLI


def _find_solution(name: str, solutions: Path) -> Path:
    """``03``, ``03_scaled_dot_product`` or a path -> the solution notebook's path."""
    path = Path(name)
    if path.suffix == ".ipynb":
        if not path.exists():
            raise FileNotFoundError(f"no notebook {path}")
        return path
    found = sorted(solutions.glob(f"{name}*.ipynb"))
    if len(found) != 1:
        known = ", ".join(p.stem for p in sorted(solutions.glob("[0-9][0-9]_*.ipynb")))
        raise FileNotFoundError(
            f"{name!r} names {len(found)} notebooks in {solutions}/; known: {known}"
        )
    return found[0]


def check_notebook(
    path: str | Path, *, profile: str, timeout: int = 1800, keep_going: bool = False
) -> tuple[list[dict], str]:
    """Run the notebook at ``path`` in ``profile`` (its stored file is not changed) and return
    (the claims it made, the error that stopped it or ""). ``keep_going``: a failed claim is
    recorded and the run goes on, so one run reports every claim."""
    import tempfile

    import nbformat
    from nbclient.exceptions import CellExecutionError

    from course_utils.authoring.execute import run_notebook

    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "claims.jsonl"
        settings = {
            LOG_ENV_VAR: str(log),
            KEEP_GOING_ENV_VAR: "1" if keep_going else "0",
            AUTHOR_ENV_VAR: "1",
        }
        error = ""
        try:
            with using_environment(settings):
                run_notebook(nb, folder=path.parent, profile=profile, timeout=timeout)
        except CellExecutionError as exc:
            lines = [ln for ln in str(exc).splitlines() if ln.strip()]
            error = lines[-1] if lines else type(exc).__name__
        except Exception as exc:  # a dead kernel, a timeout: say so, never a traceback
            error = f"{type(exc).__name__}: {exc}"
        return read_log(log), error


def add_arguments(parser) -> None:
    """Options of ``course claims``."""
    parser.add_argument(
        "notebooks",
        nargs="+",
        metavar="NOTEBOOK",
        help="solution notebooks by number (03), name (03_scaled_dot_product) or path",
    )
    parser.add_argument(
        "--profile",
        choices=PROFILES,
        default=None,
        help="run in this profile (default: the active one, see `course doctor`)",
    )
    parser.add_argument(
        "--keep-going",
        action="store_true",
        help="report every claim of a run instead of stopping at the first that fails "
        "(outputs of such a run are never stored)",
    )
    parser.add_argument(
        "--solutions",
        default="solutions",
        metavar="DIR",
        help="the folder a notebook number or name is looked up in (default: solutions)",
    )
    parser.add_argument(
        "--timeout",
        type=int,
        default=1800,
        metavar="S",
        help="seconds per cell (default 1800)",
    )
    parser.epilog = (
        "The stored notebook is never changed (course release --execute stores outputs). "
        "Example: course claims --profile cpu --keep-going 03. "
        "Exit codes: 0 every claim held; 1 a claim failed or a cell raised; "
        "2 a notebook not found or usage error."
    )


def main(args) -> int:
    """Run each notebook, print every claim with its outcome; exit 1 if any failed or a cell
    raised, 2 if a notebook cannot be found."""
    profile = args.profile or profile_name()
    try:
        paths = [_find_solution(n, Path(args.solutions)) for n in args.notebooks]
    except FileNotFoundError as exc:
        print(f"course claims: {exc}")
        return 2
    bad = 0
    for path in paths:
        records, error = check_notebook(
            path, profile=profile, timeout=args.timeout, keep_going=args.keep_going
        )
        counts = {s: sum(r["status"] == s for r in records) for s in (HELD, FAILED, SKIPPED)}
        print(
            f"{path.stem} ({profile}): {counts[HELD]} held, {counts[FAILED]} failed, "
            f"{counts[SKIPPED]} not made in this profile"
        )
        for r in records:
            mark = {HELD: "✓", FAILED: "✗", SKIPPED: "·"}[r["status"]]
            print(f"  {mark} {r['statement']}" + (f"  [{r['detail']}]" if r.get("detail") else ""))
        if error:
            print(f"  stopped: {error}")
        bad += counts[FAILED] > 0 or bool(error)
    return 1 if bad else 0
