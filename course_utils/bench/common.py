"""Shared pieces of the benchmarks: machine description, timing, memory, tables."""

from __future__ import annotations

import os
import platform
import statistics
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils import benchmark


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info(device: str | None = None) -> dict[str, Any]:
    """What the numbers were measured on."""
    from course_utils.runtime.profiles import current

    dev = device or str(current().device)
    info = {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": dev,
        "dtype": "float32",
    }
    if dev.startswith("cuda") and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def median_time(fn: Callable[[], Any], min_run_time: float = 0.3) -> float:
    """Median seconds per call of ``fn`` (``torch.utils.benchmark``, ``blocked_autorange``)."""
    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    return timer.blocked_autorange(min_run_time=min_run_time).median


def paired_times(
    ref: Callable[[], Any], ours: Callable[[], Any], *, rounds: int = 5, min_run_time: float = 0.1
) -> tuple[float, float, float]:
    """(median seconds of ``ref``, of ``ours``, median of the per-round ratios ours/ref).

    The two are timed in alternation, ``rounds`` times each, so a slow spell of a shared
    machine hits both sides of a ratio instead of one; a single long ``blocked_autorange``
    of a call that takes most of a second would rest on one sample.
    """
    pairs = [
        (median_time(ref, min_run_time), median_time(ours, min_run_time)) for _ in range(rounds)
    ]
    t_ref = statistics.median(a for a, _ in pairs)
    t_ours = statistics.median(b for _, b in pairs)
    return t_ref, t_ours, statistics.median(b / a for a, b in pairs)


def sync(device: torch.device | str) -> None:
    """Wait for the GPU so timings cover the work, not just the launch."""
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1e4 else f"{v:,.0f}"
    return str(v)


def table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """A plain-text table of ``rows`` (dicts), numbers formatted compactly."""
    cells = [[_fmt(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = [
        "  ".join(c.rjust(w) for c, w in zip(columns, widths)),
        "  ".join("-" * w for w in widths),
    ]
    lines += ["  ".join(v.rjust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """The same table in Markdown (for the README's Performance section)."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---:" for _ in columns) + "|"]
    lines += ["| " + " | ".join(_fmt(r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join(lines)
