"""The first cell of every student notebook: install the course where it is missing.

A notebook opened on Colab or Kaggle (or on any machine without the package) has no
``course_utils``; its first cell installs the course from the repository the instructor set
once in ``pyproject.toml`` (``[tool.course] repository``, :mod:`course_utils.authoring.project`),
with ``pip install git+REPOSITORY@BRANCH``, and says so. Where ``course_utils`` imports (a
local install, the grader, the tests) the cell does nothing and prints nothing. With no
repository configured no URL is invented: where the package is missing, the cell stops with
how to install the course by hand.

``course release`` puts the cell first in every student notebook
(:func:`course_utils.authoring.release.add_install_cell`); ``solutions/`` never holds it.
"""

from __future__ import annotations

from typing import Any

from course_utils.authoring.project import CourseSettings

CELL_ID = "course-install"
TAG = "course-install"


def pip_requirement(settings: CourseSettings) -> str | None:
    """What pip installs: ``git+REPOSITORY@BRANCH`` (None without a repository)."""
    if not settings.repository:
        return None
    return f"git+{settings.repository.rstrip('/')}@{settings.branch}"


def pip_command(settings: CourseSettings, python: str = "python") -> list[str] | None:
    """The install command the cell runs (``python`` is ``sys.executable`` in the cell), or
    None without a repository: ``[python, "-m", "pip", "install", "--quiet", requirement]``."""
    requirement = pip_requirement(settings)
    if requirement is None:
        return None
    return [python, "-m", "pip", "install", "--quiet", requirement]


_HEADER = """\
# Colab, Kaggle or any machine without the course package: this cell installs it.
# Where the course is installed (pip install -e . in a clone), it does nothing.
try:
    import course_utils  # noqa: F401
except ModuleNotFoundError:
"""

_INSTALL = """\
    import importlib
    import subprocess
    import sys

    print({message!r}, flush=True)
    subprocess.run({command}, check=True)
    importlib.invalidate_caches()
    import course_utils  # noqa: F401

    print("course_utils installed: the notebook runs as in a local clone.")"""

_NO_REPOSITORY = """\
    raise ModuleNotFoundError(
        "course_utils is not installed, and this course names no repository to install it "
        "from: clone the course and run `pip install -e .` in it (README: Quick start)"
    ) from None"""


def cell_source(settings: CourseSettings) -> str:
    """The Python source of the install cell for ``settings``."""
    command = pip_command(settings, python="PYTHON")
    if command is None:
        return _HEADER + _NO_REPOSITORY
    literal = "[" + ", ".join("sys.executable" if a == "PYTHON" else repr(a) for a in command) + "]"
    message = (
        f"course_utils is not installed here: installing the course from {settings.repository} "
        f"(branch {settings.branch}; about a minute) ..."
    )
    return _HEADER + _INSTALL.format(message=message, command=literal)


def install_cell(settings: CourseSettings) -> dict[str, Any]:
    """The install cell as an nbformat 4.5 code cell (plain dict, no outputs)."""
    return {
        "cell_type": "code",
        "execution_count": None,
        "id": CELL_ID,
        "metadata": {"tags": [TAG]},
        "outputs": [],
        "source": cell_source(settings),
    }
