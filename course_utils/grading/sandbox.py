"""One sandbox per submission: what the kernel can see, and limits on all its processes.

Backends (``course grade --sandbox``):

- ``bwrap`` (bubblewrap; the default on Linux when installed): the kernel runs in its own
  user, PID, mount, IPC, network, UTS and cgroup namespaces (``bwrap --unshare-all``), in a
  new session, as an unprivileged uid (a fresh uid per running submission when the grader is
  root; the grader's own uid otherwise, mapped in a user namespace). It sees ``/usr``,
  a few files of ``/etc``, the Python installation and the ``course_utils`` package
  read-only, and, writable, only its own ``/submission`` (a copy of the submission's folder without
  notebooks), ``/tmp``, ``$HOME`` and ``/run/course`` (its connection file, sockets and result
  folders). No other submission, no batch folder, no report path, no grader process.
  ``--die-with-parent`` and the PID namespace make every process it started die with it.
- ``docker`` / ``podman``: the same layout in a container (``--network none``, read-only
  root, ``--pids-limit``, ``--memory``, ``--cpus``, an unprivileged user), for instructors
  who grade in containers; the image must contain Python, ipykernel and the course
  (``.github/classroom/Dockerfile``).
- ``none``: today's kernel as the grader's own user (a student's self-check on macOS or
  Windows); every report says it was not sandboxed.

Limits on the whole submission (:class:`Limits`), enforced by the first that applies:
memory by a cgroup (v1 ``memory`` controller, or v2 ``memory.max`` where delegated), else by
the watchdog summing the resident memory of the sandbox's process tree; processes by a
``pids`` cgroup, else ``RLIMIT_NPROC`` on the per-submission uid (root), else the watchdog;
disk: as root, one tmpfs of ``--disk-mb`` holding every writable folder (the box), else
``RLIMIT_FSIZE`` per file and the watchdog summing the writable folders; a ``/dev/shm``
tmpfs of that size; CPU share and quota by a ``cpu`` cgroup; CPU time by the watchdog (user +
system time of the tree); wall time by the grader's per-cell and total limits. A seccomp
filter (bubblewrap ``--seccomp``) refuses new user namespaces and the kernel keyrings.
:meth:`Sandbox.describe` says which mechanism enforced what.

The grader never works by name inside the folders the sandbox can write: ``run/`` and
``run/results/`` stay the grader's, result folders are made through directory handles
(:meth:`Sandbox.result_dir`), and the box is removed by unmounting it or through handles
(:func:`~course_utils.grading.confine.remove_tree`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from course_utils.grading.confine import (
    Cgroups,
    ConfineError,
    UidLease,
    chown_tree,
    hold_lock,
    is_mount,
    make_owned_dir,
    mount_tmpfs,
    open_dir,
    proc_table,
    process_tree,
    remove_tree,
    seccomp_filter,
    tree_size,
    unmount,
)

BACKENDS = ("auto", "bwrap", "docker", "podman", "none")
INSIDE_WORK = "/submission"
INSIDE_HOME = "/home/student"
SANDBOX_ENV = "COURSE_GRADER_SANDBOX"  # set in the kernel's environment inside the sandbox
INSIDE_RUN = "/run/course"
DOCKER_IMAGE = "course-grade:latest"
_ETC = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",
    "ssl",
    "ca-certificates",
    "fonts",
    "localtime",
    "mime.types",
    "matplotlibrc",
)


class SandboxError(RuntimeError):
    """The sandbox cannot be set up on this machine (a problem of the grading machine)."""


@dataclass
class Limits:
    """Limits on one submission, all its processes together (0 = no limit)."""

    memory_mb: int = 6144
    max_procs: int = 256
    disk_mb: int = 1024
    cpu_s: float = 0.0


@dataclass
class Usage:
    """What the watchdog measured (peaks over the whole run)."""

    peak_memory_mb: float = 0.0
    peak_procs: int = 0
    peak_disk_mb: float = 0.0
    cpu_s: float = 0.0


def resolve_backend(name: str) -> str:
    """``auto`` -> ``bwrap`` when bubblewrap is installed and works here, else ``none``."""
    if name not in BACKENDS:
        raise SandboxError(f"unknown sandbox {name!r}; choose from {', '.join(BACKENDS)}")
    if name != "auto":
        return name
    if sys.platform.startswith("linux") and bwrap_problem() is None:
        return "bwrap"
    return "none"


_BWRAP_PROBLEM: list[str | None] = []


def bwrap_problem() -> str | None:
    """Why bubblewrap cannot be used here (``None`` when it works); probed once."""
    if _BWRAP_PROBLEM:
        return _BWRAP_PROBLEM[0]
    exe = shutil.which("bwrap")
    problem: str | None = None
    if exe is None:
        problem = "bubblewrap (bwrap) is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    else:
        head = bwrap_head(privileged=os.geteuid() == 0)
        cmd = head + ["--ro-bind", "/", "/", "true"]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
            if r.returncode != 0:
                problem = f"bwrap cannot create namespaces here: {r.stderr.strip()[:300]}"
        except (OSError, subprocess.SubprocessError) as exc:
            problem = f"bwrap failed: {exc}"
    _BWRAP_PROBLEM.append(problem)
    return problem


def container_problem(engine: str) -> str | None:
    """Why ``docker``/``podman`` cannot run containers here (``None`` when it can)."""
    exe = shutil.which(engine)
    if exe is None:
        return f"the {engine} command is not installed"
    try:
        r = subprocess.run(
            [exe, "info", "--format", "{{json .ServerVersion}}"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{engine} info failed: {exc}"
    if r.returncode != 0:
        detail = (r.stderr or r.stdout).strip().splitlines()
        return (
            f"the {engine} daemon is not reachable ({detail[-1][:200] if detail else 'no detail'})"
        )
    return None


# ----------------------------------------------------------------------------- the sandbox


@dataclass
class Sandbox:
    """The sandbox of one submission: its folders, limits, launcher spec and watchdog.

    ``box`` is a fresh host folder holding ``work``, ``tmp``, ``home`` and ``run`` (the
    writable parts of the sandbox) and the grader's private files next to them.

    ``Sandbox(backend, box, ...)`` is the factory: it returns the class of that backend
    (:class:`BwrapSandbox`, :class:`ContainerSandbox` for ``docker`` and ``podman``,
    :class:`PlainSandbox` for ``none``; :data:`BACKEND_CLASSES`). Everything a backend does
    differently is one of the methods those classes override; the grader calls only this
    interface.
    """

    backend: str
    box: Path
    limits: Limits = field(default_factory=Limits)
    env: dict[str, str] = field(default_factory=dict)
    read_only: list[str] = field(default_factory=list)
    image: str = DOCKER_IMAGE
    cpus: int = 1
    uid: int | None = None
    gid: int | None = None
    usage: Usage = field(default_factory=Usage)
    kill_reason: str | None = None

    isolated = True  # the kernel runs in its own namespaces or container

    def __new__(cls, backend: str = "none", *args: Any, **kwargs: Any) -> Sandbox:
        if cls is Sandbox:
            if backend not in BACKEND_CLASSES:
                known = ", ".join(BACKEND_CLASSES)
                raise SandboxError(f"unknown sandbox backend {backend!r}; choose from {known}")
            cls = BACKEND_CLASSES[backend]
        return super().__new__(cls)

    def __post_init__(self) -> None:
        self.box = Path(self.box)
        self.name = "course-grade-" + self.box.name.replace("_", "-").lower()
        self._lease: UidLease | None = None
        self.cgroups: Cgroups | None = None
        self._watch: threading.Thread | None = None
        self._stop = threading.Event()
        self._root_pid: int | None = None
        self._killer = None
        self._tmpfs = False  # the whole box is a tmpfs of --disk-mb (root): a real disk quota
        self._lock: int | None = None

    # -- layout ------------------------------------------------------------------------
    @property
    def work(self) -> Path:
        return self.box / "work"

    @property
    def run_dir(self) -> Path:
        return self.box / "run"

    @property
    def results(self) -> Path:
        return self.box / "run" / "results"

    @property
    def nproc_by_uid(self) -> bool:
        """Whether ``RLIMIT_NPROC`` counts only this submission's processes (its own uid)."""
        return False

    def inside(self, host: str | Path) -> str:
        """The path the kernel sees for a host path under ``box``."""
        rel = Path(host).relative_to(self.box)
        top, rest = rel.parts[0], rel.parts[1:]
        base = {"work": INSIDE_WORK, "home": INSIDE_HOME, "run": INSIDE_RUN, "tmp": "/tmp"}[top]
        return str(Path(base, *rest))

    def prepare(self) -> None:
        """Create the folders, the uid lease and the cgroups (before copying files in)."""
        self.box.mkdir(parents=True, exist_ok=True)
        self._mount_box()
        self._lock = hold_lock(self.box)
        for sub in ("work", "tmp", "home", "run", "run/ipc", "run/results"):
            (self.box / sub).mkdir(mode=0o755, exist_ok=True)
        self._take_uid()
        self.cgroups = self._make_cgroups()

    def _mount_box(self) -> None:
        """Make the box its own file system where the backend can (see :class:`BwrapSandbox`)."""

    def _take_uid(self) -> None:
        """Choose the uid the kernel runs as (``None``: the grader's own)."""

    def _make_cgroups(self) -> Cgroups | None:
        return Cgroups(self.name, self.limits.memory_mb, self.limits.max_procs, cpus=self.cpus)

    def hand_over(self) -> None:
        """Give the writable folders to the sandbox's uid (after the files are copied in).

        ``/run/course`` and ``/run/course/results`` stay the grader's (the sandbox cannot
        rename, replace or plant anything in them); each check's result folder is made by
        :meth:`result_dir`. Everything goes through directory handles, never a path by name.
        """
        if self.isolated:  # matplotlib's font cache: seconds per submission when rebuilt
            cache = Path(os.environ.get("MPLCONFIGDIR") or Path.home() / ".cache" / "matplotlib")
            for f in sorted(cache.glob("fontlist-*.json"))[-3:] if cache.is_dir() else []:
                dest = self.box / "home" / ".matplotlib"
                dest.mkdir(exist_ok=True)
                shutil.copyfile(f, dest / f.name)
        box = open_dir(self.box)
        try:
            for sub in ("work", "tmp", "home", "run/ipc"):
                fd = open_dir(sub, dir_fd=box)
                try:
                    self._give(fd)
                finally:
                    os.close(fd)
        finally:
            os.close(box)

    def _give(self, fd: int) -> None:
        """Let the kernel write in the folder ``fd`` (one writable folder of the box)."""

    def result_dir(self, name: str) -> Path:
        """A fresh result folder ``run/results/NAME`` the kernel may write, made through a
        handle on the grader's own ``run/results`` (``mkdirat`` + ``fchown``): no link the
        sandbox plants and no rename it races can redirect it."""
        results = open_dir(self.results)
        try:
            make_owned_dir(results, name, self._result_owner(), self.gid)
            fd = open_dir(name, dir_fd=results)
            try:
                self._give_result(fd)
            finally:
                os.close(fd)
        finally:
            os.close(results)
        return self.results / name

    def _result_owner(self) -> int | None:
        return None

    def _give_result(self, fd: int) -> None:
        """Let the kernel write its result into the fresh folder ``fd``."""

    def remove_box(self) -> None:
        """Remove the box (after :meth:`close`): unmount its tmpfs, or remove it file by file
        through handles (any depth); never raises."""
        try:
            if self._lock is not None:
                os.close(self._lock)
                self._lock = None
            if self._tmpfs or is_mount(self.box):
                unmount(self.box)
                self._tmpfs = False
        except Exception:
            pass
        remove_tree(self.box)

    def kernel_env(self, env: dict[str, str]) -> dict[str, str]:
        """The kernel's environment with the paths it sees inside."""
        env = dict(env)
        env["HOME"] = INSIDE_HOME
        env["IPYTHONDIR"] = INSIDE_HOME + "/.ipython"
        env["TMPDIR"] = "/tmp"
        env["MPLCONFIGDIR"] = INSIDE_HOME + "/.matplotlib"
        env["PYTHONPATH"] = os.pathsep.join(self._python_path())
        env["USER"] = env["LOGNAME"] = "student"
        env[SANDBOX_ENV] = "1"  # so messages about files name the grading machine's folders
        data = self._data_dir()
        if data:
            env["COURSE_DATA_DIR"] = data
        else:
            env.pop("COURSE_DATA_DIR", None)
        return env

    # -- what the sandbox shows --------------------------------------------------------
    def _python_path(self) -> list[str]:
        import course_utils

        pkg_parent = str(Path(course_utils.__file__).resolve().parent.parent)
        extra = [str(Path(p).resolve().parent) for p in self.read_only if p.endswith(".py")]
        return list(dict.fromkeys([pkg_parent, *extra]))

    def _data_dir(self) -> str | None:
        value = os.environ.get("COURSE_DATA_DIR")
        path = Path(value).expanduser() if value else Path.home() / ".cache" / "course_utils"
        return str(path.resolve()) if path.is_dir() else None

    def system_binds(self) -> list[list[str]]:
        """``[mode, host, inside]`` for the read-only system, Python and course."""
        import course_utils

        binds: list[list[str]] = []
        for top in ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            p = Path("/") / top
            if p.is_symlink():
                binds.append(["symlink", os.readlink(p), str(p)])
            elif p.is_dir():
                binds.append(["ro", str(p), str(p)])
        for name in _ETC:
            p = Path("/etc") / name
            if p.exists():
                binds.append(["ro", str(p), str(p)])
        prefixes = {sys.base_prefix, sys.prefix, sys.exec_prefix, sys.base_exec_prefix}
        for prefix in sorted(prefixes):
            real = os.path.realpath(prefix)
            if not real.startswith(("/usr/", "/bin/", "/lib")) and os.path.isdir(real):
                binds.append(["ro", real, real])
                if real != prefix:
                    binds.append(["ro", real, prefix])
        exe_dir = os.path.dirname(os.path.realpath(sys.executable))
        if not any(exe_dir.startswith(b[1] + "/") for b in binds if b[0] == "ro"):
            binds.append(["ro", exe_dir, exe_dir])
        pkg = str(Path(course_utils.__file__).resolve().parent)
        binds.append(["ro", pkg, pkg])
        for p in self.read_only:
            rp = str(Path(p).resolve())
            if os.path.exists(rp):
                binds.append(["ro", rp, rp])
        data = self._data_dir()
        if data:
            binds.append(["ro", data, data])
        return binds

    def _spec(self, connection_file: str, rlimits: dict[str, int | None]) -> dict[str, Any]:
        """The launcher's instructions (``launch.json``): limits, cgroups, the wrapper."""
        kernel_conn = self.run_dir / "kernel.json"
        spec: dict[str, Any] = {
            "backend": self.backend,
            "cgroups": self.cgroups.procs_files if self.cgroups else [],
            "rlimits": rlimits,
            "uid": None,
            "gid": None,
        }
        spec["unset_env"] = ["JPY_PARENT_PID"]  # the grader's pid means nothing inside
        spec["connection"] = {
            "host": connection_file,
            "kernel": str(kernel_conn),
            "inside": self.inside(kernel_conn),
            "ip": INSIDE_RUN + "/ipc/k",
            "owner": [self.uid, self.gid] if self.uid is not None else None,
        }
        self._wrap(spec)
        return spec

    def _wrap(self, spec: dict[str, Any]) -> None:
        """Add the backend's wrapper command (and what it needs) to the launcher's spec."""

    def command(
        self, kernel_cmd: list[str], connection_file: str, rlimits: dict[str, int | None]
    ) -> list[str]:
        """The full command the grader starts: the launcher, then the sandboxed kernel."""
        spec_path = self.box / "launch.json"
        spec_path.write_text(json.dumps(self._spec(connection_file, rlimits)), encoding="utf-8")
        launcher = str(Path(__file__).with_name("launch.py"))
        return [sys.executable, "-I", "-S", launcher, str(spec_path), "--", *kernel_cmd]

    def exit_code(self, code: int) -> int:
        """The kernel's own exit code from the code of the process the grader started."""
        return code

    # -- watching and ending -----------------------------------------------------------
    def watch(self, root_pid: int, on_limit) -> None:
        """Start the watchdog on the process tree of ``root_pid``; ``on_limit(reason)`` kills."""
        self._root_pid = root_pid
        self._killer = on_limit
        self._watch = threading.Thread(target=self._loop, name=f"watch-{self.name}", daemon=True)
        self._watch.start()

    def _loop(self) -> None:
        last_disk = 0.0
        while not self._stop.wait(0.25):
            try:
                reason = self.sample(disk=time.monotonic() - last_disk > 1.0)
            except Exception:  # never let the watchdog kill the grader
                reason = None
            if time.monotonic() - last_disk > 1.0:
                last_disk = time.monotonic()
            if reason and self.kill_reason is None:
                self.kill_reason = reason
                self._killer(reason)
                return

    def sample(self, disk: bool = True) -> str | None:
        """Measure once; the reason to stop the submission, or ``None``."""
        return None

    def disk_usage(self) -> tuple[int, int]:
        """(bytes, files) in the writable folders: the tmpfs's own count when the box is one
        (no walk through folders the sandbox controls), else a walk that follows no link."""
        if self._tmpfs:
            st = os.statvfs(self.box)
            return (st.f_blocks - st.f_bfree) * st.f_frsize, st.f_files - st.f_ffree
        size = entries = 0
        for sub in ("work", "tmp", "home", "run"):
            b, n = tree_size(self.box / sub)
            size, entries = size + b, entries + n
        try:  # KERNEL_LOG: the kernel's stderr, which it writes, counts as its disk too
            st = os.lstat(self.box / "kernel.log")
            size, entries = size + (st.st_blocks * 512 or st.st_size), entries + 1
        except OSError:
            pass
        return size, entries

    def kill_all(self) -> None:
        """Kill every process of the submission (idempotent; nothing outlives this)."""
        if self._root_pid is not None:
            for pid in process_tree(self._root_pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        self._kill_rest()
        if self.cgroups is not None:
            self.cgroups.kill_all()
        if self._lease is not None:
            self._lease.kill_all()

    def _kill_rest(self) -> None:
        """Kill what the process tree does not reach (a container's own processes)."""

    def oom_killed(self) -> bool:
        return bool(self.cgroups and self.cgroups.oom_killed())

    def close(self) -> None:
        """Stop the watchdog, kill everything, remove the cgroups and give the uid back."""
        self._stop.set()
        if self._watch is not None and self._watch is not threading.current_thread():
            self._watch.join(timeout=5)
        try:
            self.sample(disk=True)
        except Exception:
            pass
        self.kill_all()
        if self.cgroups is not None:
            mem = self.cgroups.memory_bytes()
            if mem is not None:
                self.usage.peak_memory_mb = max(self.usage.peak_memory_mb, mem[1] / 2**20)
            self.cgroups.remove()
        if self._lease is not None:
            self._lease.release()
            self._lease = None

    def describe(self) -> dict[str, Any]:
        """What isolated this submission and what enforced each limit (for the report)."""
        return {
            "backend": self.backend,
            "isolated": self.isolated,
            "uid": self.uid,
            "limits": {
                "memory_mb": self.limits.memory_mb,
                "max_procs": self.limits.max_procs,
                "disk_mb": self.limits.disk_mb,
                "cpu_s": self.limits.cpu_s,
            },
            "enforced_by": self.enforced_by(),
            "peak_memory_mb": round(self.usage.peak_memory_mb, 1),
            "peak_procs": self.usage.peak_procs,
            "peak_disk_mb": round(self.usage.peak_disk_mb, 1),
            "cpu_s": round(self.usage.cpu_s, 2),
            "killed_for": self.kill_reason,
        }

    def enforced_by(self) -> dict[str, str]:
        """Limit -> the mechanism that enforced it for this submission."""
        raise NotImplementedError


class _HostSandbox(Sandbox):
    """A kernel that runs as host processes (bubblewrap, or none): cgroups where the machine
    has them, and a watchdog on the process tree for what they do not cover."""

    def sample(self, disk: bool = True) -> str | None:
        lim, use = self.limits, self.usage
        if self._root_pid is None:
            return None
        table = proc_table()
        tree = process_tree(self._root_pid, table)
        if self.cgroups is not None:
            tree |= self.cgroups.pids() & set(table)
        rss = sum(table[p][1] for p in tree if p in table)
        cpu = sum(table[p][2] for p in tree if p in table)
        mem = self.cgroups.memory_bytes() if self.cgroups else None
        if mem is not None:
            use.peak_memory_mb = max(use.peak_memory_mb, mem[1] / 2**20)
        else:
            use.peak_memory_mb = max(use.peak_memory_mb, rss / 2**20)
        use.peak_procs = max(use.peak_procs, len(tree))
        use.cpu_s = max(use.cpu_s, cpu)
        if lim.memory_mb and mem is None and rss > lim.memory_mb << 20:
            return (
                f"its processes together used {rss / 2**20:.0f} MB of memory, over the "
                f"limit of {lim.memory_mb} MB"
            )
        if lim.max_procs and "pids" not in getattr(self.cgroups, "dirs", {}):
            if len(tree) > lim.max_procs:
                return f"it ran more than {lim.max_procs} processes at once"
        if lim.cpu_s and cpu > lim.cpu_s:
            return f"its processes together used more than {lim.cpu_s:g} s of CPU time"
        if disk and lim.disk_mb:
            size, entries = self.disk_usage()
            use.peak_disk_mb = max(use.peak_disk_mb, size / 2**20)
            if size > lim.disk_mb << 20:
                return f"it wrote more than {lim.disk_mb} MB of files"
            if entries > 100_000:
                return "it created more than 100000 files"
        return None

    def enforced_by(self) -> dict[str, str]:
        dirs = self.cgroups.dirs if self.cgroups else {}
        return {
            "memory": (
                "cgroup v2 memory.max"
                if "v2" in dirs
                else "cgroup v1 memory.limit_in_bytes"
                if "memory" in dirs
                else "watchdog: resident memory of the process tree, sampled every 0.25 s"
            )
            + "; RLIMIT_AS per process",
            "processes": (
                "cgroup pids.max"
                if "pids" in dirs
                else "RLIMIT_NPROC on the submission's own uid"
                if self._procs_on_own_uid()
                else "watchdog: process count of the tree, sampled every 0.25 s"
            ),
            "bytes_written": self._bytes_written(),
            "cpu_time": "watchdog: user+system time of the process tree"
            if self.limits.cpu_s
            else "none (wall-time limits only)",
            "cpu_share": (
                f"cgroup cpu: an equal share and at most {self.cpus} CPU(s)"
                if "cpu" in dirs
                else "none (no cpu cgroup here)"
            ),
            "kernel_surface": self._kernel_surface(),
            "wall_time": "grader: per-cell and total limits",
        }

    def _procs_on_own_uid(self) -> bool:
        """Whether the submission runs as its own uid, so ``RLIMIT_NPROC`` bounds it."""
        return False

    def _bytes_written(self) -> str:
        return (
            "a tmpfs of --disk-mb holding every writable folder"
            if self._tmpfs
            else "RLIMIT_FSIZE per file; watchdog on the writable folders (1 s)"
        ) + "; /dev/shm tmpfs of --disk-mb"

    def _kernel_surface(self) -> str:
        return "not restricted"


class PlainSandbox(_HostSandbox):
    """``none``: the kernel runs as the grader's own user, seeing what the grader sees (a
    student's self-check on macOS or Windows); every report says it was not sandboxed."""

    isolated = False

    def inside(self, host: str | Path) -> str:
        return str(host)

    def _make_cgroups(self) -> Cgroups | None:
        return Cgroups(self.name, self.limits.memory_mb, self.limits.max_procs, cpus=0)

    def kernel_env(self, env: dict[str, str]) -> dict[str, str]:
        env = dict(env)
        env["TMPDIR"] = str(self.box / "tmp")
        return env

    def _spec(self, connection_file: str, rlimits: dict[str, int | None]) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "cgroups": self.cgroups.procs_files if self.cgroups else [],
            "rlimits": rlimits,
            "uid": None,
            "gid": None,
        }

    def _bytes_written(self) -> str:
        return "RLIMIT_FSIZE per file only (unsandboxed: it can write wherever you can)"


class BwrapSandbox(_HostSandbox):
    """``bwrap``: bubblewrap namespaces; as root, a tmpfs box, a fresh uid per submission and
    the ``--become`` step of the launcher; a seccomp filter on the kernel's system calls."""

    @property
    def nproc_by_uid(self) -> bool:
        return self.uid is not None

    def _mount_box(self) -> None:
        """As root the box is a tmpfs of ``--disk-mb``: every writable folder of the sandbox
        together can never take more of the host's disk (``posix_fallocate`` included), and
        removing it is an unmount, never a walk."""
        if os.geteuid() == 0 and self.limits.disk_mb:
            self._tmpfs = mount_tmpfs(self.box, self.limits.disk_mb)

    def _take_uid(self) -> None:
        if os.geteuid() == 0:
            try:
                self._lease = UidLease()
            except ConfineError as exc:
                raise SandboxError(str(exc)) from exc
            self.uid = self.gid = self._lease.uid

    def _give(self, fd: int) -> None:
        if self.uid is not None:
            chown_tree(fd, self.uid, self.gid)

    def _result_owner(self) -> int | None:
        return self.uid

    def _wrap(self, spec: dict[str, Any]) -> None:
        root = self.uid is not None
        spec["wrapper"] = bwrap_head(privileged=root)
        if root:
            launcher = str(Path(__file__).with_name("launch.py"))
            spec["become"] = [sys.executable, "-I", "-S", launcher, "--become"]
            spec["become"] += [str(self.uid), str(self.gid), str(self.limits.max_procs), "--"]
        else:
            spec["uid"], spec["gid"] = self.uid, self.gid
        spec["binds"] = ordered_binds(
            self.system_binds(),
            [
                ["rw", str(self.work), INSIDE_WORK],
                ["rw", str(self.box / "tmp"), "/tmp"],
                ["rw", str(self.box / "home"), INSIDE_HOME],
                ["rw", str(self.run_dir), INSIDE_RUN],
            ],
        )
        bpf = seccomp_filter()
        if bpf is not None:  # no user namespaces, no keyrings inside
            (self.box / "seccomp.bpf").write_bytes(bpf)
            spec["seccomp"] = str(self.box / "seccomp.bpf")
        shm = str((self.limits.disk_mb or 1024) << 20)
        spec["wrapper_tail"] = ["--size", shm, "--perms", "1777", "--tmpfs", "/dev/shm"]
        spec["wrapper_tail"] += ["--remount-ro", "/", "--chdir", INSIDE_WORK]

    def exit_code(self, code: int) -> int:
        return 128 - code if code > 128 else code  # bwrap: 128 + signal

    def _procs_on_own_uid(self) -> bool:
        return os.geteuid() == 0

    def _kernel_surface(self) -> str:
        if seccomp_filter() is not None:
            return "seccomp: no new user namespaces, no keyrings"
        return "not restricted"


class ContainerSandbox(Sandbox):
    """``docker`` / ``podman``: the same layout in a container; the engine enforces the
    limits, so there is no cgroup and no watchdog of the grader's own."""

    def _take_uid(self) -> None:
        self.uid = self.gid = 65534 if os.geteuid() == 0 else None

    def _make_cgroups(self) -> Cgroups | None:
        return None

    def _give(self, fd: int) -> None:
        os.fchmod(fd, 0o777)

    def _give_result(self, fd: int) -> None:
        os.fchmod(fd, 0o777)

    def _wrap(self, spec: dict[str, Any]) -> None:
        spec["wrapper"] = container_command(
            self.backend,
            name=self.name,
            image=self.image,
            box=self.box,
            limits=self.limits,
            env=self.env,
            cpus=self.cpus,
            user=self.uid,
        )

    def command(
        self, kernel_cmd: list[str], connection_file: str, rlimits: dict[str, int | None]
    ) -> list[str]:
        kernel_cmd = ["python", "-m", "ipykernel_launcher", "-f", connection_file]
        return super().command(kernel_cmd, connection_file, rlimits)

    def _kill_rest(self) -> None:
        try:
            subprocess.run([self.backend, "rm", "-f", self.name], capture_output=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            pass

    def enforced_by(self) -> dict[str, str]:
        return {k: f"{self.backend} --{k}" for k in ("memory", "pids-limit", "cpus")}


BACKEND_CLASSES: dict[str, type[Sandbox]] = {
    "bwrap": BwrapSandbox,
    "docker": ContainerSandbox,
    "podman": ContainerSandbox,
    "none": PlainSandbox,
}

WRITABLE_INSIDE = (INSIDE_WORK, "/tmp", INSIDE_HOME, INSIDE_RUN)


def ordered_binds(system: list[list[str]], writable: list[list[str]]) -> list[list[str]]:
    """The sandbox's binds in mount order: system binds, the writable folders, then any
    system bind that lies inside a writable folder (a virtual environment under ``/tmp`` or
    ``$HOME``), so the private folder does not hide the Python the kernel runs."""
    inside = [b for b in system if b[2].startswith(tuple(w + "/" for w in WRITABLE_INSIDE))]
    return [b for b in system if b not in inside] + writable + inside


def bwrap_head(privileged: bool = False) -> list[str]:
    """The fixed part of the bubblewrap command (namespaces, /proc, /dev, session).

    ``privileged`` (the grader is root): no user namespace; every capability is dropped but
    CAP_SETUID/CAP_SETGID, which the first process inside uses to become the submission's
    uid (and thereby loses them).
    """
    if privileged:
        spaces = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts"]
        spaces += ["--unshare-cgroup-try", "--cap-drop", "ALL"]
        spaces += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        spaces = ["--unshare-all"]
    return [
        shutil.which("bwrap") or "bwrap",
        *spaces,
        "--die-with-parent",
        "--new-session",
        "--hostname",
        "grader",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--dir",
        "/run",
    ]


def container_command(
    engine: str,
    *,
    name: str,
    image: str,
    box: Path,
    limits: Limits,
    env: dict[str, str],
    cpus: int = 1,
    user: int | None = 65534,
) -> list[str]:
    """``docker run`` / ``podman run`` for one submission (the kernel command follows)."""
    cmd = [
        engine,
        "run",
        "--rm",
        "--init",
        "--name",
        name,
        "--network",
        "none",
        "--read-only",
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges",
        "--ipc",
        "private",
        "--cpus",
        str(max(1, cpus)),
        "--ulimit",
        "core=0",
    ]
    if user is not None:
        cmd += ["--user", f"{user}:{user}"]
    if limits.memory_mb:
        cmd += ["--memory", f"{limits.memory_mb}m", "--memory-swap", f"{limits.memory_mb}m"]
    if limits.max_procs:
        cmd += ["--pids-limit", str(limits.max_procs)]
    if limits.disk_mb:
        cmd += ["--ulimit", f"fsize={limits.disk_mb << 20}"]
    for host, inside in (
        (box / "work", INSIDE_WORK),
        (box / "tmp", "/tmp"),
        (box / "home", INSIDE_HOME),
        (box / "run", INSIDE_RUN),
    ):
        cmd += ["--volume", f"{host}:{inside}:rw"]
    cmd += ["--workdir", INSIDE_WORK]
    for key in sorted(env):
        if key in ("PATH", "PYTHONPATH", "VIRTUAL_ENV", "CONDA_PREFIX", "LD_LIBRARY_PATH"):
            continue  # the image's own
        cmd += ["--env", f"{key}={env[key]}"]
    cmd += [image]
    return cmd
