"""Confining a process tree on Linux: cgroups, the process table, a uid per submission.

The pieces :class:`course_utils.grading.sandbox.Sandbox` builds its limits from: a memory and
a pids cgroup where this machine lets the grader make them (:class:`Cgroups`), the host's
process table read from ``/proc`` (:func:`process_tree`, resident memory and CPU time per
process), the size of a folder (:func:`tree_size`) and a uid of its own for each running
submission when the grader is root (:class:`UidLease`).
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

UID_BASE, UID_COUNT = 200_000, 1000  # per-submission uids when the grader is root


class ConfineError(RuntimeError):
    """No uid is free for a new submission."""


# ----------------------------------------------------------------------------- cgroups


def _own_cgroup(controller: str) -> str | None:
    """This process's cgroup path for a v1 controller ('' for v2), from /proc/self/cgroup."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3 and controller in parts[1].split(","):
            return parts[2]
    return None


class Cgroups:
    """Memory and pids cgroups for one submission, where this machine lets us make them."""

    def __init__(self, name: str, memory_mb: int, max_procs: int) -> None:
        self.dirs: dict[str, Path] = {}
        self.notes: list[str] = []
        for controller, setting, value in (
            ("memory", "memory.limit_in_bytes", memory_mb << 20),
            ("pids", "pids.max", max_procs),
        ):
            if not value:
                continue
            base = _own_cgroup(controller)
            root = Path("/sys/fs/cgroup") / controller
            if base is None or not (root / "cgroup.procs").exists():
                continue
            path = root / base.lstrip("/") / name
            try:
                path.mkdir()
                (path / setting).write_text(str(value))
                if controller == "memory" and (path / "memory.memsw.limit_in_bytes").exists():
                    try:
                        (path / "memory.memsw.limit_in_bytes").write_text(str(value))
                    except OSError:
                        pass
                self.dirs[controller] = path
            except OSError as exc:
                self.notes.append(f"no {controller} cgroup ({exc.strerror or exc})")
                try:
                    path.rmdir()
                except OSError:
                    pass
        if "memory" not in self.dirs:
            self._try_v2(name, memory_mb, max_procs)

    def _try_v2(self, name: str, memory_mb: int, max_procs: int) -> None:
        base = _own_cgroup("")
        root = Path("/sys/fs/cgroup")
        if (root / "unified").is_dir():
            root = root / "unified"
        if base is None:
            return
        parent = root / base.lstrip("/")
        try:
            controllers = (parent / "cgroup.subtree_control").read_text().split()
        except OSError:
            return
        if "memory" not in controllers:
            return
        path = parent / name
        try:
            path.mkdir()
            (path / "memory.max").write_text(str(memory_mb << 20))
            if "pids" in controllers and max_procs:
                (path / "pids.max").write_text(str(max_procs))
                self.dirs["pids"] = path
            self.dirs["memory"] = path
            self.dirs["v2"] = path
        except OSError:
            try:
                path.rmdir()
            except OSError:
                pass

    @property
    def procs_files(self) -> list[str]:
        return sorted({str(p / "cgroup.procs") for p in self.dirs.values()})

    def pids(self) -> set[int]:
        out: set[int] = set()
        for f in self.procs_files:
            try:
                out |= {int(x) for x in Path(f).read_text().split()}
            except (OSError, ValueError):
                pass
        return out

    def memory_bytes(self) -> tuple[int, int] | None:
        """(current, peak) bytes of the memory cgroup."""
        path = self.dirs.get("memory")
        if path is None:
            return None
        try:
            if "v2" in self.dirs:
                cur = int((path / "memory.current").read_text())
                peak_file = path / "memory.peak"
                peak = int(peak_file.read_text()) if peak_file.exists() else cur
            else:
                cur = int((path / "memory.usage_in_bytes").read_text())
                peak = int((path / "memory.max_usage_in_bytes").read_text())
            return cur, peak
        except (OSError, ValueError):
            return None

    def oom_killed(self) -> bool:
        path = self.dirs.get("memory")
        if path is None:
            return False
        try:
            name = "memory.events" if "v2" in self.dirs else "memory.oom_control"
            for line in (path / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill" and int(value) > 0:
                    return True
            if "v2" not in self.dirs:
                return int((path / "memory.failcnt").read_text()) > 0
        except (OSError, ValueError):
            pass
        return False

    def kill_all(self) -> None:
        for _ in range(50):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.02)

    def remove(self) -> None:
        self.kill_all()
        for path in set(self.dirs.values()):
            for _ in range(50):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


# ----------------------------------------------------------------------------- process trees


def proc_table() -> dict[int, tuple[int, int, float]]:
    """pid -> (ppid, rss bytes, cpu seconds incl. reaped children) for every process."""
    table: dict[int, tuple[int, int, float]] = {}
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                raw = fh.read(4096).decode("ascii", "replace")
        except OSError:
            continue
        rest = raw[raw.rfind(")") + 2 :].split()
        try:
            ppid = int(rest[1])
            cpu = sum(int(x) for x in rest[11:15]) / tick
            rss = int(rest[21]) * page
        except (IndexError, ValueError):
            continue
        table[int(name)] = (ppid, rss, cpu)
    return table


def process_tree(root: int, table: dict[int, tuple[int, int, float]] | None = None) -> set[int]:
    """``root`` and all its descendants (host pids)."""
    table = proc_table() if table is None else table
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, stack = set(), [root]
    while stack:
        pid = stack.pop()
        if pid in out or (pid != root and pid not in table):
            continue
        out.add(pid)
        stack.extend(children.get(pid, []))
    return out & (set(table) | {root})


def tree_size(path: Path, cap_entries: int = 200_000) -> tuple[int, int]:
    """(bytes on disk, entries) under ``path``, never following symlinks."""
    total, count = 0, 0
    stack = [str(path)]
    while stack and count < cap_entries:
        top = stack.pop()
        try:
            with os.scandir(top) as it:
                for entry in it:
                    count += 1
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    total += getattr(st, "st_blocks", 0) * 512 or st.st_size
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
        except OSError:
            continue
    return total, count


# ----------------------------------------------------------------------------- uids


class UidLease:
    """A uid of its own for one running submission (root only), held by a file lock."""

    def __init__(self) -> None:
        lock_dir = Path(tempfile.gettempdir()) / "course-grade-uids"
        lock_dir.mkdir(mode=0o700, exist_ok=True)
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
        launcher = str(Path(__file__).with_name("launch.py"))
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
