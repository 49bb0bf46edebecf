"""Judge: harvest -> verdict -> flags -> entry, for one exercise.

At a check position :func:`check_exercise` sends the harvest (:mod:`~.harvest`) to the
kernel, reads what it wrote (validated, never trusted), redraws the cases here and judges the
outputs with the check cell's own function (:func:`course_utils.checks.core.judge`); flags
come from the trusted side's review of the source (:mod:`~.policy`), from the grader's static
look at the exercise cell, and from the kernel's findings by kind only (:func:`trusted_flags`);
:func:`apply_flag_policy` applies ``--zero-flagged``. The result is the exercise's entry.
"""

from __future__ import annotations

import ast
import importlib
import os
import secrets
import time
from pathlib import Path
from typing import Any

from course_utils.checks import core
from course_utils.checks.core import ERROR, FAILED, NOT_ATTEMPTED, PASSED, TIMEOUT
from course_utils.grading import harvest as hv
from course_utils.grading import measure, policy
from course_utils.grading.plan import (
    GradedExercise,
    python_source,
)
from course_utils.grading.state import GradeOptions, Run

MAX_MESSAGE = 2000


def clip(text: str, n: int = MAX_MESSAGE) -> str:
    text = str(text)
    return text if len(text) <= n else text[: n - 20] + " [... truncated]"


def new_entry(g: GradedExercise, status: str, message: str, points: float = 0) -> dict[str, Any]:
    ex = g.exercise
    return {
        "id": ex.id,
        "title": ex.title,
        "points": points,
        "max_points": ex.points,
        "status": status,
        "message": clip(message),
        "flags": [],
        "runtime_s": 0.0,
    }


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


def check_exercise(
    run: Run, g: GradedExercise, limit: float, trusted: dict[str, str], total_bound: bool
):
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
    entry = new_entry(g, ERROR, "")
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


def _judge_check(run: Run, g: GradedExercise, r, out_dir: Path, trusted, entry) -> None:
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
            f"({r.ename}: {clip(r.evalue, 300)}); did the notebook redefine a Python "
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
            entry["message"] = clip(
                f"{entry['message']} (note: your exercise cell raised "
                f"{own_error[0]}: {clip(own_error[1], 200)})"
            )
    apply_flag_policy(entry, zero_flagged=opts.zero_flagged)


def _verdict(entry, ex: core.Exercise, cases, h, opts: GradeOptions, own_cells, own_error) -> None:
    """Status, points and message of ``entry`` from the validated harvest ``h``."""
    fn = ex.function
    if h.status == "passed":
        try:  # the check cell's own step 3 (core.check -> core.verdict -> core.judge)
            verdict = core.verdict(ex, cases, PASSED, h.outputs, "")
            entry.update(status=verdict.status, points=verdict.points, message=verdict.message)
            if verdict.mistake:
                entry["mistake"] = verdict.mistake
        except Exception as exc:
            entry.update(
                status=ERROR,
                message="the grader could not compare your outputs "
                f"({type(exc).__name__}: {clip(str(exc), 300)})",
            )
    elif h.status == "not_attempted":
        entry.update(status=NOT_ATTEMPTED, message=h.message or "not attempted")
    elif h.status == "error":
        message = h.message
        if ("MemoryError" in message or "allocate" in message) and opts.memory_mb and not opts.gpu:
            message += f"\n(the kernel's memory limit is {opts.memory_mb} MB)"
        # a shortcut the kernel's watch saw is "failed" in the check cell (core.verdict): the
        # same status here (no points either way)
        shortcut = any(str(f).startswith("shortcut:") for f in h.flags)
        entry.update(status=FAILED if shortcut else ERROR, message=message)
    elif h.status == "missing":
        if own_error is not None:
            entry.update(
                status=ERROR,
                message=f"your exercise cell raised {own_error[0]}: "
                f"{clip(own_error[1], 300)} — so {fn} is not defined",
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
        entry["message"] = clip(f"{entry['message']}. Flagged for review: {detail}")
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
