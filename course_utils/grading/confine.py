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
    """Memory, pids and CPU cgroups for one submission, where this machine lets us make them.

    CPU: every submission gets the same share (v1 ``cpu.shares``, v2 ``cpu.weight``) and a
    quota of ``cpus`` CPUs (v1 ``cpu.cfs_quota_us``, v2 ``cpu.max``), so in a ``-j N`` batch a
    submission running hundreds of busy processes slows only itself.
    """

    PERIOD_US = 100_000

    def __init__(self, name: str, memory_mb: int, max_procs: int, cpus: float = 0) -> None:
        self.dirs: dict[str, Path] = {}
        self.notes: list[str] = []
        quota = int(cpus * self.PERIOD_US) if cpus else 0
        for controller, settings in (
            ("memory", [("memory.limit_in_bytes", memory_mb << 20)] if memory_mb else []),
            ("pids", [("pids.max", max_procs)] if max_procs else []),
            ("cpu", [("cpu.shares", 1024), ("cpu.cfs_period_us", self.PERIOD_US),
                     ("cpu.cfs_quota_us", quota)] if quota else []),
        ):  # fmt: skip
            if settings:
                self._make_v1(name, controller, settings)
        if "memory" not in self.dirs:
            self._try_v2(name, memory_mb, max_procs, quota)

    def _make_v1(self, name: str, controller: str, settings: list[tuple[str, int]]) -> None:
        base = _own_cgroup(controller)
        root = Path("/sys/fs/cgroup") / controller
        if base is None or not (root / "cgroup.procs").exists():
            return
        path = root / base.lstrip("/") / name
        try:
            path.mkdir()
            for setting, value in settings:
                (path / setting).write_text(str(value))
            if controller == "memory" and (path / "memory.memsw.limit_in_bytes").exists():
                try:
                    (path / "memory.memsw.limit_in_bytes").write_text(str(settings[0][1]))
                except OSError:
                    pass
            self.dirs[controller] = path
        except OSError as exc:
            self.notes.append(f"no {controller} cgroup ({exc.strerror or exc})")
            try:
                path.rmdir()
            except OSError:
                pass

    def _try_v2(self, name: str, memory_mb: int, max_procs: int, quota: int = 0) -> None:
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
            if "cpu" in controllers and quota:
                (path / "cpu.weight").write_text("100")
                (path / "cpu.max").write_text(f"{quota} {self.PERIOD_US}")
                self.dirs["cpu"] = path
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


# ----------------------------------------------------------------------------- files by handle
#
# The sandbox can rename, replace and symlink anything inside the folders it may write. The
# grader (often root) therefore never walks, chowns, creates or removes paths inside them by
# name: it opens a folder it owns, then works through directory handles, never following a link.

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def open_dir(path: str | os.PathLike, dir_fd: int | None = None) -> int:
    """A handle on the folder ``path`` (relative to ``dir_fd`` when given), never a link."""
    return os.open(path, _DIR_FLAGS, dir_fd=dir_fd)


def make_owned_dir(parent_fd: int, name: str, uid: int | None, gid: int | None) -> None:
    """Create ``name`` in the folder ``parent_fd`` and give it to ``uid``:``gid`` through its
    own handle (``mkdirat`` + ``fchown``): a link planted anywhere cannot redirect either."""
    os.mkdir(name, 0o700, dir_fd=parent_fd)
    fd = open_dir(name, dir_fd=parent_fd)
    try:
        if uid is not None:
            os.fchown(fd, uid, gid if gid is not None else uid)
    finally:
        os.close(fd)


def chown_tree(top_fd: int, uid: int, gid: int) -> None:
    """``chown -R`` of the folder ``top_fd`` through handles only (links are not followed:
    a link itself is re-owned with ``lchown`` semantics); iterative, any depth."""
    os.fchown(top_fd, uid, gid)
    stack = [os.dup(top_fd)]
    while stack:
        fd = stack.pop()
        try:
            for entry in os.scandir(fd):
                try:
                    os.chown(entry.name, uid, gid, dir_fd=fd, follow_symlinks=False)
                    if entry.is_dir(follow_symlinks=False):
                        child = open_dir(entry.name, dir_fd=fd)
                        stack.append(child)
                except OSError:
                    continue
        finally:
            os.close(fd)


def remove_tree(path: str | os.PathLike) -> None:
    """Remove the folder ``path`` and everything in it; never raises.

    Iterative and through handles: every sub-folder found below the top is first moved up to
    the top (``renameat``), so the tree is flattened as it is removed and no depth (a
    1,500-level chain) costs recursion or open files; links are removed, never followed.
    """
    try:
        parent, name = os.path.split(os.path.abspath(os.fspath(path)))
        pfd = open_dir(parent)
    except OSError:
        return
    try:
        try:
            top = open_dir(name, dir_fd=pfd)
        except OSError:
            try:
                os.unlink(name, dir_fd=pfd)  # a file or a link where the folder was
            except OSError:
                pass
            return
        try:
            _empty_flat(top)
        finally:
            os.close(top)
        try:
            os.rmdir(name, dir_fd=pfd)
        except OSError:
            pass
    except Exception:  # clean-up never ends a batch
        pass
    finally:
        os.close(pfd)


def _empty_flat(top: int, rounds: int = 1_000_000) -> None:
    """Empty the folder ``top``: files unlinked, sub-sub-folders moved up, folders removed."""
    serial = 0
    for _ in range(rounds):
        try:
            os.fchmod(top, 0o700)
        except OSError:
            pass
        entries = list(os.scandir(top))
        if not entries:
            return
        for entry in entries:
            if not entry.is_dir(follow_symlinks=False):
                _unlink(entry.name, top)
                continue
            try:
                sub = open_dir(entry.name, dir_fd=top)
            except OSError:
                _unlink(entry.name, top)
                continue
            try:
                os.fchmod(sub, 0o700)
                for inner in os.scandir(sub):
                    if inner.is_dir(follow_symlinks=False):
                        serial += 1
                        try:
                            os.rename(inner.name, f".rm-{serial}", src_dir_fd=sub, dst_dir_fd=top)
                        except OSError:
                            pass
                    else:
                        _unlink(inner.name, sub)
            except OSError:
                pass
            finally:
                os.close(sub)
            try:
                os.rmdir(entry.name, dir_fd=top)
            except OSError:
                pass


def _unlink(name: str, dir_fd: int) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except OSError:
        pass


# ----------------------------------------------------------------------------- disk quota


def _libc():
    import ctypes
    import ctypes.util

    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def mount_tmpfs(path: str | os.PathLike, size_mb: int) -> bool:
    """Mount a tmpfs of ``size_mb`` MiB at ``path`` (root on Linux); False where it cannot."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0 or size_mb <= 0:
        return False
    try:
        libc = _libc()
        opts = f"size={int(size_mb)}m,mode=0700,nr_inodes=200000".encode()
        flags = 0x2 | 0x4 | 0x8  # MS_NOSUID | MS_NODEV | MS_NOEXEC: nothing runs from it
        return libc.mount(b"tmpfs", os.fsencode(path), b"tmpfs", flags, opts) == 0
    except (OSError, AttributeError):
        return False


def unmount(path: str | os.PathLike) -> None:
    """Detach the mount at ``path`` (``umount -l``); never raises."""
    try:
        _libc().umount2(os.fsencode(path), 2)  # MNT_DETACH
    except (OSError, AttributeError):
        pass


def is_mount(path: str | os.PathLike) -> bool:
    try:
        return os.path.ismount(path)
    except OSError:
        return False


# ----------------------------------------------------------------------------- seccomp

# Syscall numbers (x86_64, aarch64) of what a sandboxed kernel never needs: new user
# namespaces (unshare/clone with CLONE_NEWUSER; clone3 is refused with ENOSYS so the C library
# falls back to clone, whose flags the filter can read) and the kernel keyrings.
_SECCOMP_ARCH = {
    "x86_64": (0xC000003E, {"unshare": 272, "clone": 56, "clone3": 435, "add_key": 248,
                            "request_key": 249, "keyctl": 250}),
    "aarch64": (0xC00000B7, {"unshare": 97, "clone": 220, "clone3": 435, "add_key": 217,
                             "request_key": 218, "keyctl": 219}),
}  # fmt: skip
CLONE_NEWUSER = 0x10000000


def seccomp_filter() -> bytes | None:
    """A classic-BPF seccomp program (bytes for ``bwrap --seccomp FD``); ``None`` on an
    architecture it does not know. Denied with EPERM: ``unshare``/``clone`` asking for a new
    user namespace, ``add_key``, ``request_key``, ``keyctl``, and any syscall of another ABI
    (x32, i386); ``clone3`` fails with ENOSYS."""
    import platform
    import struct

    arch = _SECCOMP_ARCH.get(platform.machine())
    if arch is None:
        return None
    audit, nr = arch
    ld, jeq, jset, ret, jge = 0x20, 0x15, 0x45, 0x06, 0x35
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38
    prog = [
        (ld, 0, 0, 4),  # arch
        (jeq, 1, 0, audit),
        (ret, 0, 0, eperm),
        (ld, 0, 0, 0),  # syscall number
        (jge, 0, 1, 0x40000000),  # x32 ABI
        (ret, 0, 0, eperm),
        (jeq, 0, 1, nr["clone3"]),
        (ret, 0, 0, enosys),
    ]
    for name in ("add_key", "request_key", "keyctl"):
        prog += [(jeq, 0, 1, nr[name]), (ret, 0, 0, eperm)]
    prog += [
        (jeq, 1, 0, nr["unshare"]),
        (jeq, 0, 3, nr["clone"]),
        (ld, 0, 0, 16),  # low half of the first argument: the flags
        (jset, 0, 1, CLONE_NEWUSER),
        (ret, 0, 0, eperm),
        (ret, 0, 0, allow),
    ]
    return b"".join(struct.pack("HBBI", code, jt, jf, k) for code, jt, jf, k in prog)


# ----------------------------------------------------------------------------- stale leftovers

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
        base = _own_cgroup(root.name if root.name in ("memory", "pids", "cpu") else "")
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
