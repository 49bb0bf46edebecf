"""Locks that mark a grader's folders in use, and removal of the boxes, batch folders and
cgroups a grader killed from outside left behind.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import time
from pathlib import Path

from course_utils.grading.confine.cgroups import own_cgroup
from course_utils.grading.confine.safefs import is_mount, remove_tree, unmount

BOX_PREFIX, BATCH_PREFIX = "cg-", "cgb-"
LOCK_NAME = ".course-grade.lock"


def hold_lock(folder: str | os.PathLike):
    """Create and hold (flock) the lock that marks ``folder`` as in use by this process."""
    fd = os.open(
        os.path.join(folder, LOCK_NAME),
        os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0),
        0o600,
    )
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def _stale(folder: Path, min_age_s: float) -> bool:
    """A grader's folder no running grader holds (its lock is free, or it has none and is old)."""
    lock = folder / LOCK_NAME
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        try:
            return time.time() - folder.lstat().st_mtime > min_age_s
        except OSError:
            return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def remove_stale(parent: str | os.PathLike | None = None, min_age_s: float = 3600.0) -> list[str]:
    """Remove the boxes (``cg-*``), batch folders (``cgb-*``) and cgroups
    (``course-grade-cg-*``) that a grader killed from outside left behind; only this grader's
    own prefixes, only folders no running grader holds. Returns what was removed."""
    parent = Path(parent or tempfile.gettempdir())
    removed: list[str] = []
    try:
        candidates = sorted(parent.iterdir())
    except OSError:
        return removed
    for folder in candidates:
        name = folder.name
        if not name.startswith((BOX_PREFIX, BATCH_PREFIX)) or folder.is_symlink():
            continue
        if not folder.is_dir() or folder.stat().st_uid != os.geteuid():
            continue
        if not _stale(folder, min_age_s):
            continue
        boxes = [folder] if name.startswith(BOX_PREFIX) else sorted(folder.glob(BOX_PREFIX + "*"))
        for box in boxes:
            if is_mount(box):
                unmount(box)
        remove_tree(folder)
        removed.append(str(folder))
    removed += remove_stale_cgroups()
    return removed


def remove_stale_cgroups() -> list[str]:
    """Empty cgroups named ``course-grade-cg-*`` whose box no longer exists (rmdir refuses a
    cgroup with processes in it)."""
    removed: list[str] = []
    roots = [Path("/sys/fs/cgroup") / c for c in ("memory", "pids", "cpu")]
    roots += [Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup")]
    for root in roots:
        base = own_cgroup(root.name if root.name in ("memory", "pids", "cpu") else "")
        if base is None:
            continue
        try:
            groups = list((root / base.lstrip("/")).glob("course-grade-cg-*"))
        except OSError:
            continue
        for group in groups:
            if _box_alive(group.name[len("course-grade-") :]) or _young(group):
                continue
            try:
                if not (group / "cgroup.procs").read_text().strip():
                    group.rmdir()
                    removed.append(str(group))
            except OSError:
                continue
    return removed


def _young(group: Path, min_age_s: float = 3600.0) -> bool:
    """Whether a cgroup was made in the last ``min_age_s`` seconds: a grader whose box lives
    outside the default temporary folder may have just made it (never stale, then)."""
    try:
        return time.time() - group.stat().st_mtime < min_age_s
    except OSError:
        return True


def _box_alive(box_name: str) -> bool:
    """Whether a box of this (lower-cased, dash-for-underscore) name is held by a grader."""
    tmp = Path(tempfile.gettempdir())
    for cand in list(tmp.glob(BOX_PREFIX + "*")) + list(
        tmp.glob(BATCH_PREFIX + "*/" + BOX_PREFIX + "*")
    ):
        if cand.name.replace("_", "-").lower() == box_name and not _stale(cand, 3600.0):
            return True
    return False
