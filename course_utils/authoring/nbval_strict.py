"""pytest plugin: under nbval, check cells of unsolved or wrong exercises fail.

In JupyterLab a check cell never raises: it prints its verdict (and the hint) and the notebook
goes on, so "Run All" reaches the end. An instructor's ``pytest --nbval-lax notebooks/03_*.ipynb``
must grade, though: there the check cell of every exercise that is not ``PASSED`` has to fail,
and only those cells. This plugin (registered through the ``pytest11`` entry point of the
package, so a plain ``pytest --nbval`` / ``--nbval-lax`` loads it) sets
``COURSE_STRICT_CHECKS=1`` in pytest's environment when nbval is on; the kernels nbval starts
inherit it, and :func:`course_utils.checks.check` raises there. A value the user set
explicitly (``COURSE_STRICT_CHECKS=0 pytest --nbval-lax ...``) is kept.

The kernel's raising gives the hint in pytest's report, but it is not what decides: code in the
notebook can change the kernel's environment (``os.environ[...] = "0"``) or patch
``course_utils.checks``. So the verdict is also read *here*, outside the kernel, from what each
check cell printed in this run: a check cell (``check("NN.M", ...)``) passes only when its
output has that exercise's ``PASSED`` verdict line; otherwise this plugin fails it, whatever the
kernel did. An answer cell of a graded question (``answer("06.Q1", "b")``) is held to the same
rule. Only ``COURSE_STRICT_CHECKS`` in pytest's own environment turns that off.

This is for checking one's own work: nbval runs the notebook unsandboxed, as the user, and a
notebook can still print a forged verdict line. Grade others' work with ``course grade``.

This module imports nothing heavy: pytest loads it in every run.
"""

from __future__ import annotations

import os
import re

from course_utils.strict_checks import STRICT_ENV, is_strict

_SET_BY_US = "_course_strict_set"


def nbval_active(config) -> bool:
    """True when this pytest run collects notebooks with nbval (``--nbval`` or ``--nbval-lax``)."""
    option = config.option
    return bool(getattr(option, "nbval", False) or getattr(option, "nbval_lax", False))


def pytest_configure(config) -> None:
    """Mark the kernels nbval will start as strict (they inherit this process's environment)."""
    if nbval_active(config) and STRICT_ENV not in os.environ:
        os.environ[STRICT_ENV] = "1"
        setattr(config, _SET_BY_US, True)
    if nbval_active(config) and hasattr(config, "pluginmanager"):
        config.pluginmanager.register(_verdict_plugin(), "course-verdicts-from-outputs")


def pytest_unconfigure(config) -> None:
    """Leave the environment as it was (pytest may run in-process, e.g. ``pytest.main``)."""
    if getattr(config, _SET_BY_US, False):
        os.environ.pop(STRICT_ENV, None)


_CHECK_CALL = re.compile(r"""^\s*(?:check|answer)\(\s*["'](\d+\.(?:\d+|Q\d+))["']""", re.M)


def check_ids(source: str) -> list[str]:
    """Exercise and question ids whose check a cell's source calls (``check("03.1", fn)``,
    ``answer("06.Q1", "b")``)."""
    return _CHECK_CALL.findall(source or "")


def printed_text(outputs) -> str:
    """The text a cell printed (stream outputs and text/plain results) in this run."""
    parts = []
    for out in outputs or []:
        if not hasattr(out, "get"):
            continue
        if out.get("output_type") == "stream":
            parts.append(str(out.get("text", "")))
        elif out.get("output_type") in ("execute_result", "display_data"):
            parts.append(str((out.get("data") or {}).get("text/plain", "")))
    return "".join(parts)


def missing_verdicts(source: str, outputs) -> list[str]:
    """The exercises a check cell calls whose ``PASSED`` verdict line it did not print."""
    text = printed_text(outputs)
    return [
        ex_id
        for ex_id in check_ids(source)
        if not re.search(rf"^\[{re.escape(ex_id)}\] .*: PASSED \(", text, re.M)
    ]


def _verdict_plugin():
    """The hook that fails check cells from their outputs (built here: importing pytest at
    module level would load it in every kernel that imports ``course_utils.checks``)."""
    import pytest

    class VerdictsFromOutputs:
        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_makereport(self, item, call):
            outcome = yield
            report = outcome.get_result()
            if call.when != "call" or not report.passed or not is_strict():
                return
            cell = getattr(item, "cell", None)
            if cell is None or not hasattr(item, "test_outputs"):
                return
            missing = missing_verdicts(cell.get("source", ""), item.test_outputs)
            if missing:
                report.outcome = "failed"
                report.longrepr = (
                    f"[course] the check of exercise {', '.join(missing)} did not print PASSED "
                    "in this run (decided by the course's pytest plugin from the cell's output, "
                    "not by the kernel's COURSE_STRICT_CHECKS)"
                )

    return VerdictsFromOutputs()


def pytest_report_header(config) -> str | None:
    """One header line, so a reader of the log knows why check cells fail."""
    if nbval_active(config):
        value = os.environ.get(STRICT_ENV, "")
        return f"course: check cells strict under nbval ({STRICT_ENV}={value or 'unset'})"
    return None
