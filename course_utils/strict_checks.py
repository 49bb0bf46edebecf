"""Strict check cells: the one switch both sides read, with no dependency between them.

``COURSE_STRICT_CHECKS=1`` makes a check cell fail on anything but ``PASSED`` (the notebook
tests run with it). :mod:`course_utils.checks` reads it in the kernel;
:mod:`course_utils.authoring.nbval_strict` (a pytest plugin) sets it for the kernels nbval
starts and reads it in the pytest process. Standard library only, so neither imports the other.
"""

from __future__ import annotations

import os

STRICT_ENV = "COURSE_STRICT_CHECKS"


def is_strict() -> bool:
    """True when check cells must fail on anything but ``PASSED`` (``COURSE_STRICT_CHECKS``)."""
    return os.environ.get(STRICT_ENV, "").strip().lower() in ("1", "true", "yes", "on")
