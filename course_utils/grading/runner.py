"""Run: one submission's kernel, cell by cell, under its limits, then torn down.

:func:`run_plan` makes the sandbox (:func:`make_sandbox`), copies the submission in, starts the
kernel (once more if a busy machine kept it from answering), executes the plan's steps (the
student's cells, and at each check position the judge, :mod:`~.judge`) within the per-cell and
total limits, and tears everything down, completing the report (never raises).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from course_utils.checks import core
from course_utils.checks.core import ERROR, TIMEOUT
from course_utils.grading import harvest as hv
from course_utils.grading.confine import BOX_PREFIX, remove_tree
from course_utils.grading.executed import write_executed
from course_utils.grading.intake import copy_submission_dir, review_submission
from course_utils.grading.judge import check_exercise, clip, new_entry
from course_utils.grading.kernel import GradingKernel, KernelStartError, OutputBudget, kernel_env
from course_utils.grading.plan import (
    Assignment,
    GradedExercise,
    build_plan,
)
from course_utils.grading.sandbox import (
    Limits,
    Sandbox,
    SandboxError,
    bwrap_problem,
    container_problem,
    resolve_backend,
)
from course_utils.grading.state import GradeOptions, Run


def _memory_error(ename: str, evalue: str) -> bool:
    text = f"{ename} {evalue}"
    return ename == "MemoryError" or any(
        s in text
        for s in (
            "can't allocate memory",
            "DefaultCPUAllocator",
            "Cannot allocate memory",
            "std::bad_alloc",
            "Unable to allocate",
            "out of memory",
        )
    )


def run_plan(
    nb: dict[str, Any],
    assignment: Assignment,
    report: dict[str, Any],
    opts: GradeOptions,
    seed: int,
    path: str,
) -> None:
    """Execute the plan of ``nb`` in a fresh sandboxed kernel and fill ``report``."""
    box = Path(tempfile.mkdtemp(prefix=BOX_PREFIX, dir=opts.box_parent))
    run = Run(nb, assignment, report, opts, seed, path, box)
    run.plan = build_plan(nb, assignment)
    report["notes"].extend(run.plan.notes)
    run.review = review_submission(nb, run.plan, assignment, path)
    run.budget = OutputBudget(opts.max_output_kb * 1024)
    try:
        if _start(run):
            _execute_plan(run)
    finally:
        _teardown(run)


def _start(run: Run) -> bool:
    """Sandbox, files, kernel (retried once), warm-up; False (with the reason) if any fails."""
    opts, report, box = run.opts, run.report, run.box
    try:
        run.sandbox = sandbox = make_sandbox(opts, box)
    except SandboxError as exc:
        report.update(error=str(exc), error_kind="grader")
        run.stop(ERROR, f"not graded: {exc}")
        return False
    report["sandbox"] = sandbox.describe()
    if not sandbox.isolated:
        report["notes"].append(NOT_SANDBOXED)
    # the submission's own folder, never a link's target (admit() refused links)
    copy_submission_dir(os.path.dirname(os.path.abspath(run.path)), sandbox.work)
    sandbox.hand_over()
    env = sandbox.kernel_env(
        kernel_env(
            profile=None,
            threads=opts.threads,
            hide_gpus=not opts.gpu,
            ipython_dir=str(box / "home" / ".ipython"),
        )
    )
    sandbox.env = env
    if not start_kernel(run, env):
        return False
    # Import the heavy modules before the clock starts: per-cell limits measure the
    # student's code, not torch's import time on a busy machine.
    warm = run.kernel.execute(_warmup_code(opts.checks_modules), opts.startup_timeout, silent=True)
    if warm.status != "ok":
        detail = (
            f"the kernel could not import the course ({warm.ename or warm.status}: "
            f"{clip(warm.evalue, 300)}); is course_utils installed in the kernel's Python?"
        )
        report.update(error=detail, error_kind="grader")
        run.stop(ERROR, f"not graded: {detail}", {"status": "not_started", "detail": detail})
        return False
    report["kernel"] = {"status": "ok", "detail": ""}
    return True


KERNEL_START_TRIES = 2


def start_kernel(run: Run, env: dict[str, str]) -> bool:
    """Start the kernel, once more if the first does not start (a busy machine); a kernel
    that never answers is ``error_kind = "busy"`` (not the student's fault, nothing of the
    notebook ran), one that cannot start at all is the grader's (``"grader"``)."""
    opts, sandbox = run.opts, run.sandbox
    exc: KernelStartError | None = None
    for _ in range(KERNEL_START_TRIES):
        kernel = GradingKernel(
            cwd=str(sandbox.work),
            workdir=str(run.box),
            sandbox=sandbox,
            memory_mb=0 if opts.gpu else opts.memory_mb,
            kernel_name=opts.kernel_name,
            env=env,
            output_budget=run.budget,
            startup_timeout=opts.startup_timeout,
            interrupt_grace=opts.interrupt_grace,
        )
        try:
            kernel.start()
            run.kernel = kernel
            return True
        except KernelStartError as err:
            exc = err
    slow = "didn't respond" in str(exc) or "timed out" in str(exc).lower()
    if slow:
        message = (
            f"not graded: the kernel did not start within {opts.startup_timeout:g} s, "
            f"{KERNEL_START_TRIES} times; the machine was too busy at that moment. Nothing "
            "in your notebook had run yet: this says nothing about your work, and the "
            "notebook must be graded again"
        )
        run.report.update(error=message, error_kind="busy")
    else:
        message = f"not graded: the grader could not start a kernel ({exc})"
        run.report.update(error=str(exc), error_kind="grader")
    run.stop(ERROR, message, {"status": "not_started", "detail": clip(str(exc))})
    return False


def _execute_plan(run: Run) -> None:
    """Each step of the plan in order (a cell, or a check), until a step stops the run."""
    opts = run.opts
    deadline = time.monotonic() + opts.timeout
    trusted = {"collect_outputs": hv.fingerprint(core.collect_outputs)}
    by_id = {g.id: g for g in run.assignment.exercises}
    steps = run.plan.graded_steps(opts.runs_tail)
    run.report["cells"]["not_run"] = len(run.plan.steps) - len(steps)
    for step in steps:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            message = (
                "not graded: the notebook ran past the total time limit "
                f"of {opts.timeout:g} s before this exercise's check"
            )
            run.stop(TIMEOUT, message, {"status": "timeout", "detail": message})
            return
        limit = min(opts.cell_timeout, remaining)
        total_bound = remaining < opts.cell_timeout
        if step.kind == "cell":
            stopped = _run_cell(run, step, limit, total_bound)
        else:
            stopped = _run_check(run, by_id[step.exercise_id], step, limit, trusted, total_bound)
        if stopped:
            return


def _total_timeout(run: Run) -> None:
    message = f"not graded: the notebook ran past the total time limit of {run.opts.timeout:g} s"
    run.stop(TIMEOUT, message, {"status": "timeout", "detail": message})


def _kernel_lost(run: Run, r, where: str) -> None:
    status, message = _lost(r, where, run.opts)
    run.stop(status, message, {"status": r.status, "exit_code": r.exit_code, "detail": message})


def _run_cell(run: Run, step, limit: float, total_bound: bool) -> bool:
    """Execute one of the student's cells; True when the run must stop."""
    opts, report = run.opts, run.report
    r = run.kernel.execute(run.nb["cells"][step.index]["source"], limit)
    report["cells"]["executed"] += 1
    run.executed.append((step, r))
    if r.status in ("error", "timeout", "hung", "died"):
        ename, evalue = r.ename or r.status, r.evalue
        run.cell_errors[step.index] = (ename, evalue)
        report["cells"]["errors"].append(
            {"cell": step.index, "ename": ename, "evalue": clip(evalue, 500)}
        )
        if _memory_error(ename, evalue):
            report["notes"].append(
                f"cell {step.index + 1} ran out of memory (limit {opts.memory_mb} MB): {ename}"
            )
    if r.status == "timeout":
        if total_bound:
            _total_timeout(run)
            return True
        report["notes"].append(
            f"cell {step.index + 1} ran past the per-cell limit of "
            f"{opts.cell_timeout:g} s and was interrupted"
        )
    if r.kernel_lost:
        _kernel_lost(run, r, f"cell {step.index + 1}")
        return True
    return False


def _run_check(run: Run, g: GradedExercise, step, limit, trusted, total_bound: bool) -> bool:
    """Run the check of exercise ``g`` at its position; True when the run must stop."""
    entry, r = check_exercise(run, g, limit, trusted, total_bound)
    run.entries[g.id] = entry
    run.executed.append((step, entry))
    if r is not None and r.kernel_lost:
        _kernel_lost(run, r, f"the check of {g.id}")
        return True
    if r is not None and r.status == "timeout" and total_bound:
        _total_timeout(run)
        return True
    return False


def _teardown(run: Run) -> None:
    """Stop everything, complete the report, then remove the box (never raises)."""
    report, opts, budget = run.report, run.opts, run.budget
    try:
        if run.kernel is not None:
            run.kernel.shutdown()
        if run.sandbox is not None:
            run.sandbox.close()
            report["sandbox"] = run.sandbox.describe()
            if run.sandbox.kill_reason:
                report["notes"].append(f"the submission was stopped: {run.sandbox.kill_reason}")
    except Exception as exc:  # the report is written whatever clean-up does
        report["notes"].append(f"clean-up of the sandbox failed: {type(exc).__name__}")
    for g in run.assignment.exercises:
        if g.id not in run.entries:
            status, message = run.stop_reason or (ERROR, "not graded")
            run.entries[g.id] = new_entry(g, status, message)
    report["exercises"] = [run.entries[g.id] for g in run.assignment.exercises]
    report["output"] = {
        "bytes_seen": budget.seen,
        "bytes_kept": budget.kept,
        "truncated": budget.truncated,
    }
    if budget.truncated:
        report["notes"].append(
            f"the notebook printed {budget.seen / 1e6:.1f} MB of output; "
            f"the grader kept {budget.kept // 1024} KB"
        )
    if opts.executed_dir:
        try:
            write_executed(run.nb, run.executed, run.assignment, opts.executed_dir, run.path)
        except Exception as exc:  # an artifact, never a reason to fail grading
            report["notes"].append(f"could not write the executed notebook: {exc}")
    _remove_box(run)


def _remove_box(run: Run) -> None:
    try:
        if run.sandbox is not None:
            run.sandbox.remove_box()
        else:
            remove_tree(run.box)
    except BaseException:  # noqa: BLE001 - clean-up never costs a report
        pass


NOT_SANDBOXED = (
    "not sandboxed (--sandbox none): the notebook ran as the grader's own user with its view "
    "of the files and processes; fine for checking your own work, not for grading others'"
)


def _module_files(modules: tuple[str, ...]) -> list[str]:
    """The files of the ``--checks`` modules, shown read-only inside the sandbox."""
    import importlib.util

    out = []
    for name in modules:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        origin = getattr(spec, "origin", None)
        if origin and os.path.isfile(origin) and "site-packages" not in origin:
            out.append(origin)
    return out


_PROBLEMS: dict[str, str | None] = {}


def make_sandbox_check(name: str) -> tuple[str | None, str]:
    """``(problem or None, resolved backend)`` for ``--sandbox name`` on this machine."""
    try:
        backend = resolve_backend(name)
    except SandboxError as exc:
        return str(exc), name
    if backend not in _PROBLEMS:
        if backend == "bwrap":
            _PROBLEMS[backend] = bwrap_problem()
        elif backend in ("docker", "podman"):
            _PROBLEMS[backend] = container_problem(backend)
        else:
            _PROBLEMS[backend] = None
    return _PROBLEMS[backend], backend


def make_sandbox(opts: GradeOptions, box: Path) -> Sandbox:
    """The sandbox of one submission (``opts.sandbox``), prepared; :class:`SandboxError` when
    the chosen backend cannot run on this machine."""
    problem, backend = make_sandbox_check(opts.sandbox)
    if problem:
        raise SandboxError(f"--sandbox {backend}: {problem}")
    memory = 0 if opts.gpu else opts.memory_mb
    sandbox = Sandbox(
        backend,
        box,
        limits=Limits(
            memory_mb=memory, max_procs=opts.max_procs, disk_mb=opts.disk_mb, cpu_s=opts.cpu_s
        ),
        read_only=_module_files(opts.checks_modules),
        image=opts.image,
        cpus=opts.threads,
    )
    sandbox.prepare()
    return sandbox


def _warmup_code(modules: tuple[str, ...]) -> str:
    lines = ["import numpy", "import torch", "import course_utils.checks"]
    lines += [f"import {m}" for m in modules if m.replace(".", "").replace("_", "").isalnum()]
    # run in a private namespace: the student's namespace starts empty, as in Jupyter
    return f"exec({chr(10).join(lines)!r}, {{}})"


def _lost(r, where: str, opts: GradeOptions) -> tuple[str, str]:
    if r.status == "hung":
        return (
            TIMEOUT,
            f"not graded: the kernel hung in {where} (past the per-cell limit of "
            f"{opts.cell_timeout:g} s, ignoring interrupts) and was killed",
        )
    why = r.evalue or "the kernel died"
    hint = ""
    if r.exit_code is not None and r.exit_code < 0:
        hint = f"; the memory limit is {opts.memory_mb} MB" if opts.memory_mb else ""
    return (ERROR, f"not graded: {why} during {where}{hint}")
