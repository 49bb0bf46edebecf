"""A uid of its own for each running submission when the grader is root, leased by a file
lock in one host-wide folder.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

UID_BASE, UID_COUNT = 200_000, 1000  # per-submission uids when the grader is root


class ConfineError(RuntimeError):
    """No uid is free for a new submission."""


class UidLease:
    """A uid of its own for one running submission (root only), held by a file lock."""

    # one fixed, host-wide folder (root only), never under $TMPDIR: two graders with different
    # TMPDIRs on one host would otherwise lease the same uid and kill each other's sandboxes
    LOCK_DIR = "/run/course-grade-uids"

    def __init__(self, lock_dir: str | os.PathLike | None = None) -> None:
        lock_dir = Path(lock_dir or self.LOCK_DIR)
        lock_dir.mkdir(mode=0o700, exist_ok=True)
        if lock_dir.is_symlink() or not lock_dir.is_dir():
            raise ConfineError(f"{lock_dir}: not a folder of the grader's own")
        self.fh = None
        self.uid = None
        start = (os.getpid() * 7919) % UID_COUNT
        for k in range(UID_COUNT):
            uid = UID_BASE + (start + k) % UID_COUNT
            fh = open(lock_dir / str(uid), "w")  # noqa: SIM115 - held until release()
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                fh.close()
                continue
            self.fh, self.uid = fh, uid
            return
        raise ConfineError("no free sandbox uid (more than 1000 submissions graded at once?)")

    def kill_all(self) -> None:
        """SIGKILL every process of this uid (a helper that becomes the uid: no fork of this
        multi-threaded process)."""
        if self.uid is None:
            return
        launcher = str(Path(__file__).parent.parent / "launch.py")
        try:
            subprocess.run(
                [sys.executable, "-I", "-S", launcher, "--kill-uid", str(self.uid)],
                timeout=30,
                capture_output=True,
            )
        except (OSError, subprocess.SubprocessError):
            pass

    def release(self) -> None:
        if self.fh is not None:
            self.fh.close()
            self.fh = None
