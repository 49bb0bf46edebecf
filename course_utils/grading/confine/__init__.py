"""Confining a process tree on Linux: what :class:`course_utils.grading.sandbox.Sandbox`
builds its limits from, one module per subject.

- :mod:`.cgroups`: memory, pids and CPU cgroups where this machine lets the grader make them;
- :mod:`.procs`: the host's process table (process trees, resident memory, CPU time) and the
  size of a folder, for the watchdog;
- :mod:`.uids`: a uid of its own for each running submission when the grader is root;
- :mod:`.safefs`: files by directory handle (never by name inside what the sandbox writes) and
  the box's tmpfs;
- :mod:`.seccomp`: the system-call filter, built by libseccomp;
- :mod:`.leftovers`: the locks that mark folders in use, and removal of what a killed grader
  left behind.
"""

from course_utils.grading.confine.cgroups import Cgroups
from course_utils.grading.confine.leftovers import (
    BATCH_PREFIX,
    BOX_PREFIX,
    LOCK_NAME,
    hold_lock,
    remove_stale,
    remove_stale_cgroups,
)
from course_utils.grading.confine.procs import proc_table, process_tree, tree_size
from course_utils.grading.confine.safefs import (
    chown_tree,
    is_mount,
    make_owned_dir,
    mount_tmpfs,
    open_dir,
    remove_tree,
    unmount,
)
from course_utils.grading.confine.seccomp import seccomp_filter
from course_utils.grading.confine.uids import UID_BASE, UID_COUNT, ConfineError, UidLease

__all__ = [
    "BATCH_PREFIX",
    "BOX_PREFIX",
    "LOCK_NAME",
    "UID_BASE",
    "UID_COUNT",
    "Cgroups",
    "ConfineError",
    "UidLease",
    "chown_tree",
    "hold_lock",
    "is_mount",
    "make_owned_dir",
    "mount_tmpfs",
    "open_dir",
    "proc_table",
    "process_tree",
    "remove_stale",
    "remove_stale_cgroups",
    "remove_tree",
    "seccomp_filter",
    "tree_size",
    "unmount",
]
