"""Claims bound to results: every sentence of the prose that depends on a run is asserted by it.

A notebook that says "attention stays flat with length" proves it in the cell beside the plot::

    claim("attention stays within 2 points of its best accuracy at every length",
          spread <= 2.0, profiles=("cpu", "gpu"))

A claim made in the active profile is checked: it prints ``✓ <statement>`` when it holds and
raises :class:`ClaimFailed` (which stops the notebook) when it does not, so stored outputs can
only come from a run where every claim held. A claim made only in other profiles (the ``ci``
profile trains too little for most of them) is not checked; it prints that it was skipped, so
a reader of a ``ci`` run knows the sentence was not tested there. ``course claims --profile cpu
03`` runs a solution notebook and lists every claim with its outcome.

When ``COURSE_CLAIMS_LOG`` names a file, each claim also appends one JSON line to it
(``{"statement", "status", "profile", "profiles", "detail"}``); that is how ``course claims``
collects them from the kernel.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path

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


def _log(record: dict) -> None:
    path = os.environ.get(LOG_ENV_VAR)
    if not path:
        return
    with Path(path).open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")


def claim(
    statement: str,
    holds: bool | Callable[[], bool],
    *,
    profiles: Iterable[str] | str = PROFILES,
    detail: str = "",
) -> Held | None:
    """Assert that ``statement`` holds in this run when the active profile is in ``profiles``.

    ``holds`` is the evidence: a bool (e.g. ``gap >= 25``) or a zero-argument callable, which is
    only called when the claim is checked (so an expensive test costs nothing where the claim is
    not made). ``detail`` is shown with a failure (e.g. the measured values). Returns a truthy
    :class:`Held` (displayed as nothing in a notebook) when the claim held, None when it was
    skipped; raises :class:`ClaimFailed` when it did not hold.
    """
    if not isinstance(statement, str) or not statement.strip():
        raise ValueError("a claim needs the sentence it checks, as a non-empty string")
    made_in = _normalise_profiles(profiles)
    profile = profile_name()
    record = {"statement": statement, "profile": profile, "profiles": list(made_in)}
    if profile not in made_in:
        _log({**record, "status": SKIPPED, "detail": detail})
        print(
            f"· not checked in the '{profile}' profile (made for {', '.join(made_in)}): {statement}"
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
        extra = f" ({detail})" if detail else ""
        if os.environ.get(KEEP_GOING_ENV_VAR) == "1":  # `course claims --keep-going`
            print(f"✗ {statement}{extra}")
            return None
        raise ClaimFailed(
            f"this claim of the prose does not hold in the '{profile}' profile: "
            f"{statement}{extra}. Fix the prose or the experiment before storing outputs."
        )
    print(f"✓ {statement}")
    return Held()


def read_log(path: str | Path) -> list[dict]:
    """The claims recorded in a ``COURSE_CLAIMS_LOG`` file, in the order they were made."""
    path = Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


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
        settings = {LOG_ENV_VAR: str(log), KEEP_GOING_ENV_VAR: "1" if keep_going else "0"}
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
    parser.add_argument("--solutions", default="solutions", metavar="DIR")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per cell")


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
