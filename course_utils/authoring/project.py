"""The course's own settings, configured once in ``pyproject.toml``::

    [tool.course]
    repository = "https://github.com/OWNER/REPO"   # where students get the course
    branch = "main"                                 # optional; default "main"
    keys_repository = "https://github.com/OWNER/KEYS"  # optional: the instructor's private checkout
    assignment_prefix = "attention-"                # optional: Classroom's repository prefix

Read by ``course site`` (the "Open in Colab" links) and ``course release`` (the install cell of
every student notebook, :mod:`course_utils.authoring.install_cell`). Nothing is invented: with
no ``repository`` both say so and leave the links and the install command out.
``keys_repository`` and ``assignment_prefix`` fill the Classroom workflow of ``course release
--template`` (:mod:`course_utils.authoring.template`): where the grader of a sealed course gets
the keys, and how a student's repository name gives their login (personal numbers).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

try:  # Python >= 3.11
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10: the one table, read by hand
    tomllib = None

DEFAULT_BRANCH = "main"
_GITHUB = re.compile(r"^https://github\.com/([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+?)(?:\.git)?/?$")


@dataclass(frozen=True)
class CourseSettings:
    """``[tool.course]`` of a course's ``pyproject.toml`` (``repository`` None when unset)."""

    repository: str | None = None
    branch: str = DEFAULT_BRANCH
    keys_repository: str = ""  # the instructor's private checkout with the keys (sealed questions)
    assignment_prefix: str = ""  # GitHub Classroom names a student's repository <prefix><login>

    def github(self) -> tuple[str, str] | None:
        """``(owner, repo)`` when ``repository`` is a GitHub URL (Colab opens only those)."""
        m = _GITHUB.match(self.repository or "")
        return (m.group(1), m.group(2)) if m else None


def _tool_course_310(text: str) -> dict[str, str]:
    """``[tool.course]``'s plain ``key = "string"`` lines, for Python 3.10 (no tomllib)."""
    table = re.search(r"^\[tool\.course\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
    if not table:
        return {}
    pairs = re.findall(r'^\s*([A-Za-z_]+)\s*=\s*"([^"]*)"', table.group(1), re.M)
    return dict(pairs)


def read_settings(root: str | Path) -> CourseSettings:
    """The settings in ``root/pyproject.toml`` (defaults when the file or table is missing).

    Raises ``ValueError`` for a ``repository`` that is not an ``https://`` URL.
    """
    path = Path(root) / "pyproject.toml"
    if not path.is_file():
        return CourseSettings()
    text = path.read_text(encoding="utf-8")
    if tomllib is not None:
        table = tomllib.loads(text).get("tool", {}).get("course", {})
    else:  # pragma: no cover
        table = _tool_course_310(text)
    repository = table.get("repository") or None
    if repository is not None and not str(repository).startswith("https://"):
        raise ValueError(
            f"{path}: [tool.course] repository must be an https:// URL, got {repository!r}"
        )
    keys = str(table.get("keys_repository") or "")
    if keys and not keys.startswith("https://"):
        raise ValueError(
            f"{path}: [tool.course] keys_repository must be an https:// URL, got {keys!r}"
        )
    return CourseSettings(
        repository,
        str(table.get("branch") or DEFAULT_BRANCH),
        keys,
        str(table.get("assignment_prefix") or ""),
    )
