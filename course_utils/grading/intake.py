"""Intake: what the grader admits, reads and copies of a submission, before anything runs.

:func:`admit` refuses what is not a notebook file (links, devices, FIFOs, sockets, a file past
the size cap or with too many JSON strings) before anything parses it;
:func:`copy_submission_dir` copies the submission's own folder into its sandbox through
handles that follow no link; :func:`review_submission` hands the source to the trusted side's
review (:mod:`course_utils.grading.policy`).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from course_utils.grading import policy
from course_utils.grading.confine import open_dir
from course_utils.grading.plan import (
    MAX_NOTEBOOK_BYTES,
    Assignment,
)
from course_utils.grading.reports import one_line as terminal_name

COPY_MAX_FILE = 10 << 20
COPY_MAX_TOTAL = 100 << 20
COPY_MAX_FILES = 2000


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


def copy_submission_dir(src: str | os.PathLike, dst: Path) -> None:
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
