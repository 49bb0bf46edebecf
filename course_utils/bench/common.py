"""Shared pieces of the benchmarks: machine description, timing, memory, tables."""

from __future__ import annotations

import os
import platform
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils import benchmark
from torch.utils._pytree import tree_flatten


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
    from course_utils.profiles import current

    dev = device or str(current().device)
    info = {"cpu": cpu_model(), "cores": os.cpu_count(), "threads": torch.get_num_threads(),
            "torch": torch.__version__, "python": platform.python_version(), "device": dev,
            "dtype": "float32"}
    if dev.startswith("cuda") and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def median_time(fn: Callable[[], Any], min_run_time: float = 0.3) -> float:
    """Median seconds per call of ``fn`` (``torch.utils.benchmark``, ``blocked_autorange``)."""
    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    return timer.blocked_autorange(min_run_time=min_run_time).median


def sync(device: torch.device | str) -> None:
    """Wait for the GPU so timings cover the work, not just the launch."""
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


class PeakTensorMemory(TorchFunctionMode):
    """Peak bytes held by tensors created while active (CPU or GPU), above what existed before.

    Every tensor a torch function returns is counted by its storage (views are free) until that
    storage is freed. It sees what the Python-level code allocates: a fused kernel's internal
    workspace is invisible, which for ``F.scaled_dot_product_attention`` on the CPU is its
    blocked scratch space (small: it never holds the (T, S) matrix).
    """

    def __init__(self) -> None:
        super().__init__()
        self.current = 0
        self.peak = 0
        self._seen: set[int] = set()

    def _release(self, key: int, nbytes: int) -> None:
        self._seen.discard(key)
        self.current -= nbytes

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            try:
                storage = t.untyped_storage()
            except (RuntimeError, NotImplementedError):
                continue
            key = storage.data_ptr()
            if key in self._seen or storage.nbytes() == 0:
                continue
            self._seen.add(key)
            self.current += storage.nbytes()
            self.peak = max(self.peak, self.current)
            weakref.finalize(t, self._release, key, storage.nbytes())
        return out


def peak_memory(fn: Callable[[], Any], device: torch.device | str = "cpu") -> int:
    """Peak extra bytes while running ``fn`` once: CUDA's allocator stats on a GPU, else
    :class:`PeakTensorMemory`."""
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        fn()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base
    tracker = PeakTensorMemory()
    with tracker:
        result = fn()
        del result
    return tracker.peak


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1e4 else f"{v:,.0f}"
    return str(v)


def table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """A plain-text table of ``rows`` (dicts), numbers formatted compactly."""
    cells = [[_fmt(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(columns, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.rjust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """The same table in Markdown (for the README's Performance section)."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---:" for _ in columns) + "|"]
    lines += ["| " + " | ".join(_fmt(r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join(lines)
