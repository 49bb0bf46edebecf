"""The host's process table from ``/proc``: process trees, their memory and CPU time, and
the size of a folder (what the watchdog samples where no cgroup measures it).
"""

from __future__ import annotations

import os
from pathlib import Path


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
