"""Notebooks benchmark: wall time of every solution notebook in the ``ci`` profile.

The ci budget is 60 s a notebook and 8 minutes for the whole curriculum (DESIGN.md). Each
notebook runs in a fresh kernel with ``COURSE_PROFILE=ci``, as CI's nbval run does.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import nbformat

from course_utils.authoring.execute import run_notebook
from course_utils.bench.common import table

PER_NOTEBOOK_S = 60.0
TOTAL_S = 480.0


def time_notebook(path: Path, timeout: int = 600, profile: str = "ci") -> tuple[float, str]:
    """Seconds to execute ``path`` top to bottom in ``profile`` (default ci), and "ok" or the
    error. The kernel is this interpreter's (as under nbval) and inherits this process's
    environment (e.g. ``COURSE_MAX_STEPS``)."""
    nb = nbformat.read(path, as_version=4)
    t0 = time.perf_counter()
    try:
        run_notebook(nb, folder=path.parent, profile=profile, timeout=timeout)
        status = "ok"
    except Exception as exc:  # a failing notebook is a row in the table, not a crash
        status = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:80]}"
    return time.perf_counter() - t0, status


def run(opts: argparse.Namespace) -> dict:
    """Time each solution notebook (only the first with --quick) and the total."""
    paths = sorted(Path(opts.solutions).glob("[0-9][0-9]_*.ipynb"))
    if not paths:
        raise SystemExit(f"no solution notebooks found in {opts.solutions!r}")
    if opts.quick:
        paths = paths[:1]
    rows = []
    for path in paths:
        seconds, status = time_notebook(path)
        rows.append(
            {
                "notebook": path.stem,
                "ci_s": seconds,
                "budget": "ok" if seconds <= PER_NOTEBOOK_S else "OVER",
                "status": status,
            }
        )
        print(f"  {path.stem}: {seconds:.1f} s ({status})", flush=True)
    total = sum(r["ci_s"] for r in rows)
    rows.append(
        {
            "notebook": "TOTAL",
            "ci_s": total,
            "budget": "ok" if total <= TOTAL_S else "OVER",
            "status": "",
        }
    )
    print(table(rows, ["notebook", "ci_s", "budget", "status"]))
    return {
        "rows": rows,
        "summary": {
            "total_s": total,
            "per_notebook_budget_s": PER_NOTEBOOK_S,
            "total_budget_s": TOTAL_S,
            "all_ok": all(r["status"] in ("ok", "") for r in rows),
        },
    }
