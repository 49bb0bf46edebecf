"""Where one graded submission's time goes: ``python -m course_utils.bench.grading_phases``.

Grades one copy of ``solutions/03_scaled_dot_product.ipynb`` (or the notebook given) as a
batch's grading process does (the fork server's imports done first, so they do not count) and
prints each phase: the sandbox, the kernel's start, each request the kernel runs (the warm-up
imports, every cell, every check's harvest), the trusted side's judging, the questions and the
teardown. For each: wall seconds and CPU seconds, the grader's own (``time.process_time``, its
watchdog thread included) or the submission's (all its processes, sampled from the sandbox's
process table before and after the request: 10 ms ticks). ``--all-cells`` also runs the
plan's tail. Timers only, no profiler: what it costs is a few table reads per request.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

NOTEBOOK = "solutions/03_scaled_dot_product.ipynb"


def _timed(log: list[dict[str, Any]], obj: Any, name: str, label: str) -> None:
    """Wrap ``obj.name`` so that each call adds a row (wall, the grader's CPU) to ``log``."""
    inner = getattr(obj, name)

    def wrapper(*args, **kwargs):
        t, c = time.monotonic(), time.process_time()
        try:
            return inner(*args, **kwargs)
        finally:
            log.append(
                {
                    "phase": label,
                    "wall_s": time.monotonic() - t,
                    "grader_cpu_s": time.process_time() - c,
                    "kernel_cpu_s": 0.0,
                }
            )

    setattr(obj, name, wrapper)


def _kernel_cpu(kernel) -> float:
    """The submission's CPU so far (all its processes; the sandbox keeps the largest seen)."""
    try:
        kernel.sandbox.sample(disk=False)
    except Exception:  # noqa: BLE001 - a measurement, never a reason to fail grading
        pass
    return kernel.sandbox.usage.cpu_s


def _label(code: str, silent: bool) -> str:
    first = next((ln for ln in code.strip().splitlines() if ln.strip()), "")
    if silent and code.startswith("exec(") and "import numpy" in code[:20]:
        return "kernel: warm-up imports (numpy, torch, the checks)"
    if silent:
        return "kernel: a check's harvest"
    return "cell: " + first[:60]


def measure(path: str, *, sandbox: str = "auto", all_cells: bool = False) -> list[dict]:
    """Grade ``path`` once with every phase timed; the rows, a ``total`` row last."""
    import course_utils.grading.preload  # noqa: F401 - the fork server's imports, done first
    from course_utils.grading import grader, judge, runner
    from course_utils.grading import kernel as kmod
    from course_utils.grading.grader import GradeOptions, grade_submission

    log: list[dict[str, Any]] = []
    _timed(log, runner, "make_sandbox", "grader: sandbox (box, cgroups, uid)")
    _timed(log, runner, "review_submission", "grader: plan and review of the source")
    _timed(log, judge, "_judge_check", "grader: judging a check")
    _timed(log, grader, "_grade_questions", "grader: the questions")
    _timed(log, runner, "_teardown", "grader: teardown")
    start = kmod.GradingKernel.start
    execute = kmod.GradingKernel.execute

    def timed_start(self):
        t, c = time.monotonic(), time.process_time()
        start(self)
        row = {"phase": "kernel: start (ipykernel)", "wall_s": time.monotonic() - t}
        row.update(grader_cpu_s=time.process_time() - c, kernel_cpu_s=_kernel_cpu(self))
        log.append(row)

    def timed_execute(self, code, timeout, **kw):
        before = _kernel_cpu(self)
        t, c = time.monotonic(), time.process_time()
        result = execute(self, code, timeout, **kw)
        wall, cpu = time.monotonic() - t, time.process_time() - c
        after = _kernel_cpu(self)
        row = {"phase": _label(code, kw.get("silent", False)), "wall_s": wall}
        row.update(grader_cpu_s=cpu, kernel_cpu_s=max(0.0, after - before))
        log.append(row)
        return result

    kmod.GradingKernel.start, kmod.GradingKernel.execute = timed_start, timed_execute
    root = Path(tempfile.mkdtemp(prefix="course-grading-phases-"))
    try:
        (root / "student").mkdir()
        copy = root / "student" / Path(path).name
        shutil.copyfile(path, copy)
        problem, backend = runner.make_sandbox_check(sandbox)
        if problem:
            raise SystemExit(f"--sandbox {sandbox}: {problem}")
        opts = GradeOptions(sandbox=backend, threads=1, seed=1234, all_cells=all_cells)
        t, c = time.monotonic(), time.process_time()
        report = grade_submission(copy, opts)
        wall, cpu = time.monotonic() - t, time.process_time() - c
    finally:
        kmod.GradingKernel.start, kmod.GradingKernel.execute = start, execute
        shutil.rmtree(root, ignore_errors=True)
    kernel_cpu = float((report.get("sandbox") or {}).get("cpu_s") or 0.0)
    log.append(
        {
            "phase": f"total ({report['total']}/{report['max']} points, "
            f"{report['cells']['not_run']} cells not run)",
            "wall_s": wall,
            "grader_cpu_s": cpu,
            "kernel_cpu_s": kernel_cpu,
        }
    )
    return log


def main(argv: list[str] | None = None) -> int:
    from course_utils.bench.common import table

    parser = argparse.ArgumentParser(prog="python -m course_utils.bench.grading_phases")
    parser.add_argument("notebook", nargs="?", default=NOTEBOOK)
    parser.add_argument("--sandbox", default="auto")
    parser.add_argument("--all-cells", action="store_true", help="also run the plan's tail")
    parser.add_argument("--min-s", type=float, default=0.05, help="hide faster phases")
    args = parser.parse_args(argv)
    rows = measure(args.notebook, sandbox=args.sandbox, all_cells=args.all_cells)
    shown = [r for r in rows[:-1] if max(r["wall_s"], r["kernel_cpu_s"]) >= args.min_s]
    hidden = len(rows) - 1 - len(shown)
    if hidden:
        rest = [r for r in rows[:-1] if r not in shown]
        shown.append(
            {
                "phase": f"{hidden} faster phases",
                **{k: sum(r[k] for r in rest) for k in ("wall_s", "grader_cpu_s", "kernel_cpu_s")},
            }
        )
    shown.append(rows[-1])
    print(table(shown, ["phase", "wall_s", "grader_cpu_s", "kernel_cpu_s"]))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"  load average: {load:.1f} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
