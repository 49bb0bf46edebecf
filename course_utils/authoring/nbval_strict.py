"""pytest plugin: under nbval, check cells of unsolved or wrong exercises fail.

In JupyterLab a check cell never raises: it prints its verdict (and the hint) and the notebook
goes on, so "Run All" reaches the end. An instructor's ``pytest --nbval-lax notebooks/03_*.ipynb``
must grade, though: there the check cell of every exercise that is not ``PASSED`` has to fail,
and only those cells. This plugin (registered through the ``pytest11`` entry point of the
package, so a plain ``pytest --nbval`` / ``--nbval-lax`` loads it) sets
``COURSE_STRICT_CHECKS=1`` in pytest's environment when nbval is on; the kernels nbval starts
inherit it, and :func:`course_utils.checks.check` raises there. A value the user set
explicitly (``COURSE_STRICT_CHECKS=0 pytest --nbval-lax ...``) is kept.

This module imports nothing heavy: pytest loads it in every run.
"""

from __future__ import annotations

import os

STRICT_ENV = "COURSE_STRICT_CHECKS"

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


def pytest_unconfigure(config) -> None:
    """Leave the environment as it was (pytest may run in-process, e.g. ``pytest.main``)."""
    if getattr(config, _SET_BY_US, False):
        os.environ.pop(STRICT_ENV, None)


def pytest_report_header(config) -> str | None:
    """One header line, so a reader of the log knows why check cells fail."""
    if nbval_active(config):
        value = os.environ.get(STRICT_ENV, "")
        return f"course: check cells strict under nbval ({STRICT_ENV}={value or 'unset'})"
    return None
