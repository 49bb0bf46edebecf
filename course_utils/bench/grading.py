"""Grading benchmark: throughput of ``course grade`` over a batch, sandboxed, ``-j 2``.

N copies of a correct submission (``solutions/03_scaled_dot_product.ipynb``), one folder per
student as an instructor collects them, are graded in one ``course grade -j 2 --sandbox
bwrap`` run (each in its own process and sandbox). Reported: submissions per minute, the
batch's wall time, the median per-submission grading time, and next to it the unsandboxed time
of one grading of the same notebook. Target: 100 submissions in at most 4 minutes on an idle
2-core machine (25 per minute). Every copy must get full marks, or the figure means nothing.
Each grading skips its plan's tail (the reference's own cells after the last check, which decide
no verdict: :mod:`course_utils.grading.plan`), as ``course grade`` does by default.
``python -m course_utils.bench.grading_phases`` shows where one grading's time goes.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from course_utils.bench.common import table

TARGET_PER_MIN = 25.0  # 100 in 4 minutes
NOTEBOOK = "03_scaled_dot_product.ipynb"


def batch(copies: int, jobs: int = 2, sandbox: str = "bwrap", solutions: str = "solutions"):
    """Grade ``copies`` copies of the nb03 solution in one batch; (wall s, reports)."""
    from course_utils.grading.cli import grade_all
    from course_utils.grading.grader import GradeOptions, make_sandbox_check

    src = Path(solutions) / NOTEBOOK
    if not src.is_file():
        raise SystemExit(f"no {NOTEBOOK} in {solutions!r}")
    problem, backend = make_sandbox_check(sandbox)
    if problem:
        raise SystemExit(f"--sandbox {sandbox}: {problem}")
    root = Path(tempfile.mkdtemp(prefix="course-bench-grading-"))
    try:
        paths = []
        for i in range(copies):
            folder = root / f"student{i:03d}"
            folder.mkdir()
            shutil.copyfile(src, folder / NOTEBOOK)
            paths.append(str(folder / NOTEBOOK))
        opts = GradeOptions(sandbox=backend, threads=1, seed=1234)
        t0 = time.perf_counter()
        reports = grade_all(paths, opts, jobs=jobs, progress=False)
        return time.perf_counter() - t0, reports
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run(opts: argparse.Namespace) -> dict:
    """Grade N copies sandboxed with -j 2 (N = 2 with --quick, else 10) and one unsandboxed."""
    import os

    copies = 2 if opts.quick else int(os.environ.get("COURSE_BENCH_GRADING_N", "10"))
    solutions = getattr(opts, "solutions", "solutions")
    wall, reports = batch(copies, jobs=2, solutions=solutions)
    per = [r["runtime_s"] for r in reports]
    # the submission's own CPU (all its processes, from the sandbox): what -j cores share
    kernel_cpu = [float((r.get("sandbox") or {}).get("cpu_s") or 0.0) for r in reports]
    full = sum(1 for r in reports if r["max"] and r["total"] == r["max"] and not r["error"])
    not_run = statistics.median([(r.get("cells") or {}).get("not_run", 0) for r in reports])
    none_wall, none_reports = batch(1, jobs=1, sandbox="none", solutions=solutions)
    per_min = 60.0 * copies / wall
    rows = [
        {
            "run": f"bwrap -j 2, {copies} copies",
            "wall_s": wall,
            "per_minute": per_min,
            "median_s": statistics.median(per),
            "kernel_cpu_s": statistics.median(kernel_cpu),
            "full_marks": f"{full}/{copies}",
        },
        {
            "run": "none, 1 copy",
            "wall_s": none_wall,
            "per_minute": 60.0 / none_wall,
            "median_s": none_reports[0]["runtime_s"],
            "kernel_cpu_s": float((none_reports[0].get("sandbox") or {}).get("cpu_s") or 0.0),
            "full_marks": f"{int(none_reports[0]['total'] == none_reports[0]['max'])}/1",
        },
    ]
    print(table(rows, list(rows[0])), flush=True)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"  load average during the run: {load:.1f} on {os.cpu_count()} cores")
    hundred = 100.0 / per_min
    met = per_min >= TARGET_PER_MIN and full == copies
    print(
        f"  100 submissions at this rate: {hundred:.1f} min (target: at most "
        f"{100.0 / TARGET_PER_MIN:g} min on an idle 2-core machine): "
        + ("met" if met else "NOT met")
        + f"; each skipped {not_run:g} cells after its last check (--all-cells runs them)"
    )
    return {
        "rows": rows,
        "summary": {
            "per_minute": per_min,
            "target": f">= {TARGET_PER_MIN:g} submissions/minute (100 in 4 min, idle 2 cores)",
            "meets_target": met,
            "minutes_per_100": hundred,
            "load_average": load,
        },
    }
