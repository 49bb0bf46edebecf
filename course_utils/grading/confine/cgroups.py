"""Memory, pids and CPU cgroups (v1 controllers, or v2 where delegated) for one submission."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def own_cgroup(controller: str) -> str | None:
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
        base = own_cgroup(controller)
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
        base = own_cgroup("")
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
