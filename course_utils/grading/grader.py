"""Grade one submission: plan, execute in a sandboxed kernel, harvest, judge, report.

:func:`grade_submission` never raises for anything a submission can do; it returns the report
(a JSON-ready dict, see :mod:`course_utils.grading`). Problems of the grading machine itself
(no kernel can start, a reference without a registered check) are reported with
``error_kind = "grader"`` so the CLI can tell them apart from bad submissions.
"""

from __future__ import annotations

import ast
import importlib
import os
import secrets
import stat
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from course_utils.checks import core
from course_utils.checks.core import ERROR, FAILED, NOT_ATTEMPTED, PASSED, TIMEOUT
from course_utils.grading import harvest as hv
from course_utils.grading import measure, policy
from course_utils.grading.confine import BOX_PREFIX, open_dir, remove_tree
from course_utils.grading.kernel import GradingKernel, KernelStartError, OutputBudget, kernel_env
from course_utils.grading.plan import (
    MAX_NOTEBOOK_BYTES,
    Assignment,
    BadSubmission,
    GradedExercise,
    NoAssignment,
    build_plan,
    exercise_table,
    id_key,
    python_source,
    read_notebook,
    reference_dirs,
    resolve_assignment,
)
from course_utils.grading.questions import grade_questions, question_entry
from course_utils.grading.reports import one_line as terminal_name
from course_utils.grading.sandbox import (
    DOCKER_IMAGE,
    Limits,
    Sandbox,
    SandboxError,
    bwrap_problem,
    container_problem,
    resolve_backend,
)

GRADER_VERSION = 1
MAX_MESSAGE = 2000
COPY_MAX_FILE = 10 << 20
COPY_MAX_TOTAL = 100 << 20
COPY_MAX_FILES = 2000


@dataclass
class GradeOptions:
    """Limits and choices for grading (the CLI's options; defaults are the CLI's)."""

    reference_dir: str | None = None
    assignment: str | None = None
    checks_modules: tuple[str, ...] = ()
    cell_timeout: float = 120.0
    timeout: float = 900.0
    memory_mb: int = 6144
    max_output_kb: int = 1024
    seed: int | None = None
    threads: int = 1
    gpu: bool = False
    zero_flagged: bool = False
    executed_dir: str | None = None
    kernel_name: str = "python3"
    startup_timeout: float = 120.0
    interrupt_grace: float = 5.0
    sandbox: str = "auto"
    max_procs: int = 256
    disk_mb: int = 1024
    cpu_s: float = 0.0
    image: str = DOCKER_IMAGE
    box_parent: str | None = None  # where the sandboxes' folders go (default: the temp dir)
    keys: str | None = None  # an instructor checkout whose questions' keys grade sealed ones
    student: str | None = None  # the student's identity (personal numbers), for one submission
    student_by_folder: bool = False  # in a batch: the identity is the submission's folder name
    extra: dict[str, Any] = field(default_factory=dict)


def clean_text(value: Any) -> Any:
    """``value`` (a report, or any part of one) with every string made encodable as UTF-8.

    Student text reaches a report from exception messages, outputs and file names; a lone
    surrogate in any of them (``ValueError("\\ud800")``, a folder named ``b"bob\\xff"``)
    would make a writer's ``encode("utf-8")`` raise and cost the whole batch its gradebook
    (SURROGATE). Such characters become visible ``\\udXXX`` escapes; keys are cleaned too.
    """
    if isinstance(value, str):
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {clean_text(k): clean_text(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_text(v) for v in value]
    return value


def _clip(text: str, n: int = MAX_MESSAGE) -> str:
    text = str(text)
    return text if len(text) <= n else text[: n - 20] + " [... truncated]"


def _entry(g: GradedExercise, status: str, message: str, points: float = 0) -> dict[str, Any]:
    ex = g.exercise
    return {
        "id": ex.id,
        "title": ex.title,
        "points": points,
        "max_points": ex.points,
        "status": status,
        "message": _clip(message),
        "flags": [],
        "runtime_s": 0.0,
    }


def _skeleton(path: str, seed: int | None) -> dict[str, Any]:
    return {
        "notebook": str(path),
        "student": terminal_name(Path(path).stem),
        "assignment": None,
        "total": 0,
        "max": 0,
        "percent": 0.0,
        "exercises": [],
        "flags": [],
        "notes": [],
        "error": None,
        "error_kind": None,
        "kernel": {"status": "not_started", "detail": ""},
        "cells": {"executed": 0, "errors": []},
        "output": {"bytes_seen": 0, "bytes_kept": 0, "truncated": False},
        "seed": seed,
        "runtime_s": 0.0,
        "reference": None,
        "sandbox": None,
        "grader_version": GRADER_VERSION,
    }


def _peak_rss_mb() -> float:
    """This grading process's own peak resident memory (MiB)."""
    try:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return round(peak / (2**20 if sys.platform == "darwin" else 1024), 1)
    except (ImportError, OSError):
        return 0.0


def _finish(report: dict[str, Any], t0: float) -> dict[str, Any]:
    report["total"] = _num(sum(e["points"] for e in report["exercises"]))
    report["max"] = _num(sum(e["max_points"] for e in report["exercises"]))
    report["percent"] = round(100.0 * report["total"] / report["max"], 2) if report["max"] else 0.0
    report["flags"] = [f"{e['id']}: {f}" for e in report["exercises"] for f in e["flags"]]
    report["runtime_s"] = round(time.monotonic() - t0, 3)
    report["grader_peak_rss_mb"] = _peak_rss_mb()
    # every report leaves the grader encodable (the path stays as given: --similarity rereads it)
    return {k: v if k == "notebook" else clean_text(v) for k, v in report.items()}


def _num(x: float) -> float | int:
    return int(x) if float(x).is_integer() else round(float(x), 4)


def grade_submission(
    path: str | os.PathLike, options: GradeOptions | None = None
) -> dict[str, Any]:
    """Grade ``path`` and return its report (never raises for a bad submission)."""
    opts = options or GradeOptions()
    t0 = time.monotonic()
    path = str(path)
    seed = opts.seed if opts.seed is not None else secrets.randbits(32)
    report = _skeleton(path, seed)
    try:
        table = exercise_table(opts.checks_modules)
    except Exception as exc:
        report.update(
            error=f"could not load the exercise checks: {type(exc).__name__}: {exc}",
            error_kind="grader",
        )
        return _finish(report, t0)

    nb: dict[str, Any] | None = None
    bad: str | None = None
    try:
        bad = admit(path)
        nb = read_notebook(path) if bad is None else None
    except BadSubmission as exc:
        bad = str(exc)
    try:
        assignment = resolve_assignment(
            path, nb, dirs=reference_dirs(opts.reference_dir), table=table, forced=opts.assignment
        )
    except NoAssignment as exc:
        _no_assignment(report, path, opts, table, bad or str(exc))
        return _finish(report, t0)
    except BadSubmission as exc:  # the reference notebook itself is unreadable
        report.update(error=f"reference notebook: {exc}", error_kind="grader")
        return _finish(report, t0)

    report["assignment"] = assignment.name
    report["reference"] = assignment.reference_path
    if bad is not None or nb is None:
        report.update(error=bad, error_kind="bad_input")
        report["exercises"] = [_entry(g, ERROR, bad or "unreadable") for g in assignment.exercises]
        report["exercises"] += _question_errors(assignment, bad or "unreadable")
        return _finish(report, t0)
    if assignment.problems:
        report["notes"].append(
            "no check is registered for exercise(s) "
            + ", ".join(assignment.problems)
            + ": not graded"
        )
        report["error_kind"] = "grader"
        report["error"] = "the course installation lacks checks for " + ", ".join(
            assignment.problems
        )

    _run(nb, assignment, report, opts, seed, path)
    report["exercises"].extend(_grade_questions(nb, assignment, opts, path))
    for ex_id in assignment.problems:  # count them, so the maximum stays honest
        report["exercises"].append(
            {
                "id": ex_id,
                "title": "(no check registered)",
                "points": 0,
                "max_points": _reference_points(assignment, ex_id),
                "status": ERROR,
                "message": "not graded: the installed course has no check for this exercise "
                "(a problem of the grading setup, not of your notebook)",
                "flags": [],
                "runtime_s": 0.0,
            }
        )
    report["exercises"].sort(key=lambda e: id_key(e["id"]))
    return _finish(report, t0)


def _grade_questions(nb, assignment: Assignment, opts: GradeOptions, path: str) -> list:
    """The questions' entries: with the instructor's keys (``opts.keys``), for the student's
    identity (``opts.student``, or the submission's folder name in a batch)."""
    folder = Path(path).resolve().parent.name if opts.student_by_folder else None
    student = opts.student or folder
    return grade_questions(nb, assignment.questions, keys=opts.keys, student=student)


def _question_errors(assignment: Assignment, message: str) -> list[dict[str, Any]]:
    """The assignment's questions, ungraded (the submission could not be read)."""
    return [question_entry(q, ERROR, _clip(message)) for q in assignment.questions]


def _no_assignment(report, path: str, opts: GradeOptions, table, error: str) -> None:
    """A submission of no known assignment: bad input; with ``--assignment``, zero for every
    exercise of the required one."""
    report.update(error=error, error_kind="bad_input")
    if not opts.assignment:
        return
    try:
        forced = resolve_assignment(
            path, None, dirs=reference_dirs(opts.reference_dir), table=table, forced=opts.assignment
        )
        report["assignment"] = forced.name
        report["exercises"] = [_entry(g, ERROR, report["error"]) for g in forced.exercises]
        report["exercises"] += _question_errors(forced, report["error"])
    except NoAssignment:
        report["error_kind"] = "usage"


def _reference_points(assignment: Assignment, ex_id: str) -> float:
    for cell in (assignment.reference or {}).get("cells", []):
        course = cell.get("metadata", {}).get("course")
        if isinstance(course, dict) and course.get("id") == ex_id:
            points = course.get("points")
            if isinstance(points, (int, float)) and points >= 0:
                return points
    return 0


def lost_report(path: str | os.PathLike, options: GradeOptions | None, why: str) -> dict[str, Any]:
    """The report of a submission whose grading process died: zero for every exercise of its
    assignment (when it can still be told), ``error_kind = "grader"``."""
    opts = options or GradeOptions()
    report = _skeleton(str(path), None)
    message = (
        f"not graded: the grading process of this submission died ({why}); was it "
        f"killed by the submission itself?"
    )
    report.update(error=message, error_kind="grader")
    try:
        table = exercise_table(opts.checks_modules)
        try:
            nb = read_notebook(path) if admit(path) is None else None
        except BadSubmission:
            nb = None
        assignment = resolve_assignment(
            str(path),
            nb,
            dirs=reference_dirs(opts.reference_dir),
            table=table,
            forced=opts.assignment,
        )
        report["assignment"] = assignment.name
        report["exercises"] = [_entry(g, ERROR, message) for g in assignment.exercises]
        # the answers are in the notebook's source: the lost process cost none of them
        report["exercises"] += (
            _grade_questions(nb, assignment, opts, str(path))
            if nb is not None
            else _question_errors(assignment, message)
        )
    except Exception:
        pass
    return _finish(report, time.monotonic())


MAX_SUBMISSION_BYTES = MAX_NOTEBOOK_BYTES  # one cap: admit() refuses past it before parsing
MAX_JSON_STRINGS = 1_000_000  # ... and one with more JSON strings (bounds the parse's memory)


def admit(path: str | os.PathLike) -> str | None:
    """Why ``path`` cannot be graded before anything parses it (``None``: it can).

    A submission must be a regular file in a real folder: a symbolic link (to ``solutions/``,
    another student's notebook, ``/etc/shadow``), a device, a FIFO or a socket is refused, and
    so is a notebook larger than ``MAX_SUBMISSION_BYTES`` or with more than
    ``MAX_JSON_STRINGS`` strings (so the trusted grader's memory for parsing stays bounded).
    Read through one handle opened without following links, never past the cap.
    """
    p = os.path.abspath(os.fspath(path))
    name = terminal_name(os.path.basename(p))
    try:
        st = os.lstat(p)
    except OSError:
        return None  # read_notebook says "no such file"
    if stat.S_ISLNK(st.st_mode):
        return f"{name}: a symbolic link, not a notebook file; submit the file itself"
    if not stat.S_ISREG(st.st_mode):
        return f"{name}: not a regular file (a folder, device, FIFO or socket)"
    if os.path.islink(os.path.dirname(p)):
        return f"{name}: its folder is a symbolic link; submit a real folder"
    if st.st_size > MAX_SUBMISSION_BYTES:
        return (
            f"{name}: {st.st_size >> 20} MB is too large for a notebook (limit "
            f"{MAX_SUBMISSION_BYTES >> 20} MB); clear the outputs and save again"
        )
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        return f"{name}: cannot be read ({exc.strerror})"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return f"{name}: not a regular file"
        quotes = 0
        while chunk := os.read(fd, 1 << 20):
            quotes += chunk.count(b'"')
            if quotes > 2 * MAX_JSON_STRINGS:
                return (
                    f"{name}: more than {MAX_JSON_STRINGS} strings (a million cells?); "
                    "not a notebook the grader will parse"
                )
    finally:
        os.close(fd)
    return None


def _copy_submission_dir(src: str | os.PathLike, dst: Path) -> None:
    """Copy the submission's own folder (``src``, never a link's target): regular files only
    (checked on the open handle), no notebooks, no hidden entries, at most 4 levels, each
    file read through a handle opened without following links and never past its cap."""
    dst.mkdir(parents=True, exist_ok=True)
    budget = {"total": 0, "count": 0}
    try:
        top = open_dir(src)
    except OSError:
        return
    stack: list[tuple[int, Path, int]] = [(top, dst, 0)]
    while stack:
        fd, target, depth = stack.pop()
        try:
            for entry in os.scandir(fd):
                name = entry.name
                if name.startswith(".") or name in ("__pycache__", "node_modules"):
                    continue
                if entry.is_dir(follow_symlinks=False):
                    if depth < 3:
                        try:
                            stack.append((open_dir(name, dir_fd=fd), target / name, depth + 1))
                        except OSError:
                            continue
                elif entry.is_file(follow_symlinks=False) and not name.endswith(".ipynb"):
                    _copy_one(fd, name, target, budget)
        except OSError:
            pass
        finally:
            os.close(fd)


def _copy_one(dir_fd: int, name: str, target: Path, budget: dict[str, int]) -> None:
    """Copy the regular file ``name`` of ``dir_fd`` into ``target`` within the budget."""
    if budget["count"] >= COPY_MAX_FILES:
        return
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return
    try:
        st = os.fstat(fd)
        size = st.st_size
        if not stat.S_ISREG(st.st_mode) or size > COPY_MAX_FILE:
            return
        if budget["total"] + size > COPY_MAX_TOTAL:
            return
        target.mkdir(parents=True, exist_ok=True)
        left = size
        with open(target / name, "wb") as out:
            while left > 0 and (chunk := os.read(fd, min(1 << 20, left))):
                out.write(chunk)
                left -= len(chunk)
        budget["total"] += size
        budget["count"] += 1
    except OSError:
        return
    finally:
        os.close(fd)


def _static_flags(sources: list[str], ex: core.Exercise) -> list[str]:
    """Flags from the exercise cell's source: it imports the course's reference."""
    ref = ex.reference
    ref_name = getattr(ref, "__name__", "")
    ref_mod = getattr(ref, "__module__", "") or ""
    where = f"{ref_mod}.{ref_name}"
    flags: list[str] = []

    def resolves(module: str, attr: str) -> bool:
        if not (module == ref_mod or module.startswith("course_utils")):
            return False  # never import arbitrary modules named by a submission
        try:
            return getattr(importlib.import_module(module), attr, None) is ref
        except Exception:
            return False

    for src in sources:
        try:
            tree = ast.parse(python_source(src))
        except (SyntaxError, ValueError):
            continue
        attrs = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    if resolves(node.module, alias.name):
                        flags.append(f"imports_reference: the exercise cell imports {where}")
                    elif ref_name in attrs and (node.module + "." + alias.name) == ref_mod:
                        flags.append(f"uses_reference: the exercise cell uses {where}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if ref_name in attrs and resolves(alias.name, ref_name):
                        flags.append(f"uses_reference: the exercise cell uses {where}")
    return sorted(set(flags))


MAX_FOLDER_ENTRIES = 5000


def review_submission(nb, plan, assignment: Assignment, path: str) -> policy.Review:
    """The trusted side's review of the submission's source (:mod:`.policy`): its cells, and
    the module names its folder provides (``mine.py`` next to the notebook)."""
    names: list[str] = []
    try:
        with os.scandir(os.path.dirname(os.path.abspath(path))) as entries:
            for k, entry in enumerate(entries):
                if k >= MAX_FOLDER_ENTRIES:
                    break
                names.append(entry.name + ("/" if entry.is_dir(follow_symlinks=False) else ""))
    except OSError:
        pass
    return policy.review(
        nb,
        plan.exercise_cells,
        assignment.reference,
        policy.local_module_names(n + "__init__.py" if n.endswith("/") else n for n in names),
    )


# The kinds of flag the in-kernel harvest may report, and the grader's own words for each: the
# kernel's text is never copied into a report (v2 I1), only the kind it names.
KERNEL_FLAGS = {
    "is_reference": "{fn} is the course's own implementation",
    "wraps_reference": "{fn} wraps the course's own implementation",
    "subclass_of_reference": "{fn} subclasses the course's own implementation",
    "course_module": "{fn} is defined in the course's package, not in the notebook",
    "calls_reference": "{fn} calls the course's own implementation",
    "shortcut": "the run-time watch saw a shortcut while {fn} ran (see the message)",
}


def trusted_flags(reported: list[str], ex: core.Exercise) -> list[str]:
    """The kernel's flags as the grader words them: known kinds only, fixed text (v2 I1)."""
    out = set()
    for flag in reported:
        kind = str(flag).split(":", 1)[0].strip()
        if kind in KERNEL_FLAGS:
            out.add(f"{kind}: " + KERNEL_FLAGS[kind].format(fn=ex.function))
    return sorted(out)


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


@dataclass
class _Run:
    """The state of one grading run, shared by the steps of :func:`_run`."""

    nb: dict[str, Any]
    assignment: Assignment
    report: dict[str, Any]
    opts: GradeOptions
    seed: int
    path: str
    box: Path
    plan: Any = None
    review: policy.Review = field(default_factory=policy.Review)
    budget: OutputBudget | None = None
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    cell_errors: dict[int, tuple[str, str]] = field(default_factory=dict)
    executed: list[tuple[Any, Any]] = field(default_factory=list)  # (step, result or entry)
    kernel: GradingKernel | None = None
    sandbox: Sandbox | None = None
    stop_reason: tuple[str, str] | None = None  # (status for the rest, message)

    def stop(self, status: str, message: str, kernel: dict[str, Any] | None = None) -> None:
        self.stop_reason = (status, message)
        if kernel is not None:
            self.report["kernel"] = kernel


def _run(
    nb: dict[str, Any],
    assignment: Assignment,
    report: dict[str, Any],
    opts: GradeOptions,
    seed: int,
    path: str,
) -> None:
    """Execute the plan of ``nb`` in a fresh sandboxed kernel and fill ``report``."""
    box = Path(tempfile.mkdtemp(prefix=BOX_PREFIX, dir=opts.box_parent))
    run = _Run(nb, assignment, report, opts, seed, path, box)
    run.plan = build_plan(nb, assignment)
    report["notes"].extend(run.plan.notes)
    run.review = review_submission(nb, run.plan, assignment, path)
    run.budget = OutputBudget(opts.max_output_kb * 1024)
    try:
        if _start(run):
            _execute_plan(run)
    finally:
        _teardown(run)


def _start(run: _Run) -> bool:
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
    _copy_submission_dir(os.path.dirname(os.path.abspath(run.path)), sandbox.work)
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
    if not _start_kernel(run, env):
        return False
    # Import the heavy modules before the clock starts: per-cell limits measure the
    # student's code, not torch's import time on a busy machine.
    warm = run.kernel.execute(_warmup_code(opts.checks_modules), opts.startup_timeout, silent=True)
    if warm.status != "ok":
        detail = (
            f"the kernel could not import the course ({warm.ename or warm.status}: "
            f"{_clip(warm.evalue, 300)}); is course_utils installed in the kernel's Python?"
        )
        report.update(error=detail, error_kind="grader")
        run.stop(ERROR, f"not graded: {detail}", {"status": "not_started", "detail": detail})
        return False
    report["kernel"] = {"status": "ok", "detail": ""}
    return True


KERNEL_START_TRIES = 2


def _start_kernel(run: _Run, env: dict[str, str]) -> bool:
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
    run.stop(ERROR, message, {"status": "not_started", "detail": _clip(str(exc))})
    return False


def _execute_plan(run: _Run) -> None:
    """Each step of the plan in order (a cell, or a check), until a step stops the run."""
    opts = run.opts
    deadline = time.monotonic() + opts.timeout
    trusted = {"collect_outputs": hv.fingerprint(core.collect_outputs)}
    by_id = {g.id: g for g in run.assignment.exercises}
    for step in run.plan.steps:
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


def _total_timeout(run: _Run) -> None:
    message = f"not graded: the notebook ran past the total time limit of {run.opts.timeout:g} s"
    run.stop(TIMEOUT, message, {"status": "timeout", "detail": message})


def _kernel_lost(run: _Run, r, where: str) -> None:
    status, message = _lost(r, where, run.opts)
    run.stop(status, message, {"status": r.status, "exit_code": r.exit_code, "detail": message})


def _run_cell(run: _Run, step, limit: float, total_bound: bool) -> bool:
    """Execute one of the student's cells; True when the run must stop."""
    opts, report = run.opts, run.report
    r = run.kernel.execute(run.nb["cells"][step.index]["source"], limit)
    report["cells"]["executed"] += 1
    run.executed.append((step, r))
    if r.status in ("error", "timeout", "hung", "died"):
        ename, evalue = r.ename or r.status, r.evalue
        run.cell_errors[step.index] = (ename, evalue)
        report["cells"]["errors"].append(
            {"cell": step.index, "ename": ename, "evalue": _clip(evalue, 500)}
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


def _run_check(run: _Run, g: GradedExercise, step, limit, trusted, total_bound: bool) -> bool:
    """Run the check of exercise ``g`` at its position; True when the run must stop."""
    entry, r = _check(run, g, limit, trusted, total_bound)
    run.entries[g.id] = entry
    run.executed.append((step, entry))
    if r is not None and r.kernel_lost:
        _kernel_lost(run, r, f"the check of {g.id}")
        return True
    if r is not None and r.status == "timeout" and total_bound:
        _total_timeout(run)
        return True
    return False


def _teardown(run: _Run) -> None:
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
            run.entries[g.id] = _entry(g, status, message)
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
            _write_executed(run.nb, run.executed, run.assignment, opts.executed_dir, run.path)
        except Exception as exc:  # an artifact, never a reason to fail grading
            report["notes"].append(f"could not write the executed notebook: {exc}")
    _remove_box(run)


def _remove_box(run: _Run) -> None:
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


def _check(run: _Run, g: GradedExercise, limit: float, trusted: dict[str, str], total_bound: bool):
    """Harvest exercise ``g``'s outputs in the kernel and judge them here: (entry, result)."""
    ex, opts, sandbox = g.exercise, run.opts, run.sandbox
    t0 = time.monotonic()
    out_dir = sandbox.result_dir(f"{ex.id}-{secrets.token_hex(8)}")
    code = hv.harvest_code(
        exercise_id=ex.id,
        function=ex.function,
        seed=run.seed,
        out_dir=sandbox.inside(out_dir),
        module=g.module,
    )
    r = run.kernel.execute(code, limit, silent=True, keep_outputs=False)
    entry = _entry(g, ERROR, "")
    try:
        problem = _run_problem(r, ex.function, opts, total_bound)
        if problem is not None:
            entry.update(status=TIMEOUT if r.status != "died" else ERROR, message=problem)
            return entry, r
        _judge_check(run, g, r, out_dir, trusted, entry)
        probed = measure.run_probe(run, g, entry, limit)  # 11.1's memory, by the cgroup
        return entry, (probed if probed is not None and probed.kernel_lost else r)
    finally:
        entry["runtime_s"] = round(time.monotonic() - t0, 3)


def _run_problem(r, fn: str, opts: GradeOptions, total_bound: bool) -> str | None:
    """The message when the check's own request timed out, hung or lost the kernel."""
    if r.status == "timeout":
        if total_bound:
            return (
                "not graded: the notebook ran past the total "
                f"time limit of {opts.timeout:g} s during this check"
            )
        return (
            f"your {fn} did not finish within {opts.cell_timeout:g} s on the check's "
            "inputs (an infinite loop?)"
        )
    if r.status == "hung":
        return (
            f"your {fn} did not finish within {opts.cell_timeout:g} s and ignored the "
            "interrupt; the kernel was killed"
        )
    if r.status == "died":
        return f"the kernel died while the check ran your {fn}: {r.evalue}"
    return None


def _judge_check(run: _Run, g: GradedExercise, r, out_dir: Path, trusted, entry) -> None:
    """Read the harvest in ``out_dir``, check it was not tampered with, judge it."""
    ex, opts = g.exercise, run.opts
    try:
        cases = ex.make_cases(run.seed)
    except Exception as exc:
        entry.update(status=ERROR, message=f"grader error: could not draw the cases ({exc})")
        return
    h = hv.load_harvest(str(out_dir), len(cases))
    if h.status == "malformed" and r.status == "error":
        entry.update(
            status=ERROR,
            message="the check could not run in your kernel "
            f"({r.ename}: {_clip(r.evalue, 300)}); did the notebook redefine a Python "
            "builtin such as exec, compile or globals?",
        )
        return
    same = run.sandbox.backend in ("bwrap", "none")
    tampered = _tampering(h, ex, trusted, same_files=same)
    if tampered:
        entry.update(
            status=ERROR,
            message="cannot grade: the grading code inside your kernel "
            f"was modified or shadowed ({'; '.join(tampered)}). Restart the kernel "
            "without patching course_utils, torch or numpy.",
        )
        entry["flags"] = [f"tampered: {t}" for t in tampered]
        return
    own_cells = run.plan.exercise_cells.get(ex.id, [])
    static = _static_flags([run.nb["cells"][i]["source"] for i in own_cells], ex)
    entry["flags"] = sorted(
        set(static) | set(trusted_flags(h.flags, ex)) | set(run.review.flags_for(ex.id))
    )
    own_error = next(
        (run.cell_errors[i] for i in reversed(own_cells) if i in run.cell_errors), None
    )
    _verdict(entry, ex, cases, h, opts, own_cells, own_error)
    if own_error is not None and entry["status"] in (NOT_ATTEMPTED, ERROR, FAILED):
        if h.status != "missing":
            entry["message"] = _clip(
                f"{entry['message']} (note: your exercise cell raised "
                f"{own_error[0]}: {_clip(own_error[1], 200)})"
            )
    apply_flag_policy(entry, zero_flagged=opts.zero_flagged)


def _verdict(entry, ex: core.Exercise, cases, h, opts: GradeOptions, own_cells, own_error) -> None:
    """Status, points and message of ``entry`` from the validated harvest ``h``."""
    fn = ex.function
    if h.status == "passed":
        try:
            verdict = core.judge(ex, cases, h.outputs)
            entry.update(status=verdict.status, points=verdict.points, message=verdict.message)
            if verdict.mistake:
                entry["mistake"] = verdict.mistake
        except Exception as exc:
            entry.update(
                status=ERROR,
                message="the grader could not compare your outputs "
                f"({type(exc).__name__}: {_clip(str(exc), 300)})",
            )
    elif h.status == "not_attempted":
        entry.update(status=NOT_ATTEMPTED, message=h.message or "not attempted")
    elif h.status == "error":
        message = h.message
        if ("MemoryError" in message or "allocate" in message) and opts.memory_mb and not opts.gpu:
            message += f"\n(the kernel's memory limit is {opts.memory_mb} MB)"
        entry.update(status=ERROR, message=message)
    elif h.status == "missing":
        if own_error is not None:
            entry.update(
                status=ERROR,
                message=f"your exercise cell raised {own_error[0]}: "
                f"{_clip(own_error[1], 300)} — so {fn} is not defined",
            )
        elif not own_cells:
            entry.update(
                status=NOT_ATTEMPTED,
                message=f"{fn} is not defined: the exercise cell is missing from the notebook",
            )
        else:
            entry.update(status=NOT_ATTEMPTED, message=f"{fn} is not defined")
    else:  # harness_error / malformed
        entry.update(status=ERROR, message=f"the check could not run in your kernel: {h.message}")


def apply_flag_policy(entry: dict[str, Any], *, zero_flagged: bool = False) -> dict[str, Any]:
    """Flags: by default keep status and points and say so in the message; with
    ``zero_flagged`` a flagged pass becomes a failure with zero points (``review:`` flags, a
    shape shared with the solution, never zero: an honest helper can have it, HELPER-FP)."""
    if not entry.get("flags"):
        return entry
    detail = "; ".join(f.split(": ", 1)[-1] for f in entry["flags"])
    zeroing = [f for f in entry["flags"] if not f.startswith(policy.REVIEW_ONLY + ":")]
    if zero_flagged and zeroing and entry["status"] == PASSED:
        entry.update(
            status=FAILED,
            points=0,
            message=f"not accepted: {detail}. Write your own implementation.",
        )
    else:
        entry["message"] = _clip(f"{entry['message']}. Flagged for review: {detail}")
    return entry


def _tampering(
    h: hv.Harvest, ex: core.Exercise, trusted: dict[str, str], same_files: bool = True
) -> list[str]:
    """What in the kernel's grading code differs from the grader's (``same_files``: the
    kernel sees the grader's own files, so module paths must match too; not in a container
    image, where the course is installed elsewhere)."""
    problems: list[str] = []
    expected = dict(trusted)
    expected["call"] = hv.fingerprint(ex.call)
    expected["make_cases"] = hv.fingerprint(ex.make_cases)
    names = {
        "collect_outputs": "course_utils.checks.core.collect_outputs",
        "call": f"the check's call() of exercise {ex.id}",
        "make_cases": f"the check's make_cases() of exercise {ex.id}",
    }
    if h.fingerprints:
        for key, value in expected.items():
            if h.fingerprints.get(key) != value:
                problems.append(f"{names[key]} was replaced")
    import numpy
    import torch

    import course_utils

    mine = {
        "course_utils": course_utils.__file__,
        "course_utils.checks.core": core.__file__,
        "numpy": numpy.__file__,
        "torch": torch.__file__,
    }
    if not same_files:  # a container: the modules must not come from the writable folders
        from course_utils.grading.sandbox import INSIDE_HOME, INSIDE_RUN, INSIDE_WORK

        writable = (INSIDE_WORK, INSIDE_HOME, INSIDE_RUN, "/tmp")
        for name, theirs in h.modules.items():
            if theirs.startswith(writable):
                problems.append(f"the kernel imported {name} from {theirs}")
    for name, theirs in h.modules.items() if same_files else ():
        if name in mine and theirs and os.path.realpath(theirs) != os.path.realpath(mine[name]):
            problems.append(f"the kernel imported {name} from {theirs}")
    return problems


# Outputs a viewer renders as markup (nbconvert's HTML export, JupyterLab): a student's
# <script> would run in the instructor's browser. --executed keeps them, inert, as text in the
# output's metadata (``grader_inert``), where no viewer renders them.
ACTIVE_MIMES = ("text/html", "text/markdown", "image/svg+xml", "application/javascript")


def _inert(output: dict[str, Any]) -> dict[str, Any]:
    """``output`` without renderable markup (moved to ``metadata.grader_inert``)."""
    data = output.get("data")
    if not isinstance(data, dict) or not any(m in data for m in ACTIVE_MIMES):
        return output
    out = dict(output)
    out["data"] = {k: v for k, v in data.items() if k not in ACTIVE_MIMES}
    if not out["data"]:
        out["data"] = {"text/plain": "[markup output kept inert by the grader]"}
    meta = dict(output.get("metadata") or {})
    meta["grader_inert"] = {k: v for k, v in data.items() if k in ACTIVE_MIMES}
    out["metadata"] = meta
    return out


def _write_executed(nb, executed, assignment: Assignment, out_dir: str, path: str) -> None:
    """The notebook as the grader ran it (capped outputs; check positions show verdicts).

    Each executed cell records its index in the submission (``metadata.grader.cell``), so the
    outputs can be compared with the submission's stored ones (the test suite does, nbval-style).
    """
    import nbformat

    out = nbformat.v4.new_notebook()
    out.metadata = {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
    }
    by_id = {g.id: g for g in assignment.exercises}
    for step, result in executed:
        if step.kind == "cell":
            cell = nbformat.v4.new_code_cell(nb["cells"][step.index]["source"])
            cell.metadata["grader"] = {"cell": step.index}  # its index in the submission
            cell.outputs = [nbformat.from_dict(_inert(o)) for o in result.outputs]
            if result.status in ("timeout", "hung", "died"):
                cell.outputs.append(
                    nbformat.v4.new_output(
                        "stream", name="stderr", text=f"[grader] {result.status}: {result.evalue}\n"
                    )
                )
        else:
            g = by_id[step.exercise_id]
            verdict = core.CheckResult(
                g.id,
                g.exercise.title,
                result["status"],
                result["points"],
                result["max_points"],
                result["message"],
            )
            cell = nbformat.v4.new_code_cell(f'check("{g.id}", {g.exercise.function})')
            cell.metadata["tags"] = ["check"]
            cell.outputs = [
                nbformat.v4.new_output(
                    "stream",
                    name="stdout",
                    text=verdict.verdict_line() + "\n" + result["message"] + "\n",
                )
            ]
        out.cells.append(cell)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    parts = [p for p in Path(path).with_suffix("").parts[-2:] if p not in ("", ".", "/")]
    name = "__".join(parts) or "submission"
    nbformat.write(out, str(Path(out_dir) / f"{name}.ipynb"))
