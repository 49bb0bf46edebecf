"""Peak extra memory of a call, for the notebooks and the benchmarks.

On a CPU, PyTorch keeps no allocator statistics, so :class:`PeakMemory` counts them itself: a
``TorchDispatchMode`` sees the result of every aten op, counts each new tensor storage once
(views and in-place results on memory from before the call are free) and releases it when the
last tensor on it dies. On CUDA, :func:`peak_extra_memory` reads the caching allocator's peak.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

__all__ = ["PeakMemory", "peak_extra_memory"]


class PeakMemory(TorchDispatchMode):
    """Peak bytes of tensor storage created while active and still alive (CPU accounting).

    Every aten op's outputs are seen (a dispatch mode sits below composite ops like
    ``softmax`` or the math path of SDPA, so their pieces count too). A storage is counted once,
    however many views share it, and released when the last tensor the mode saw on it dies.
    Not seen: scratch buffers a fused C++ kernel allocates and frees inside itself (for the CPU
    flash kernel a few (block x block) tiles per thread) and memory outside tensors.
    """

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self._refs: dict[int, list[int]] = {}  # storage pointer -> [views alive, nbytes]

    def _release(self, key: int) -> None:
        entry = self._refs.get(key)
        if entry is None:
            return
        entry[0] -= 1
        if entry[0] == 0:
            self.live -= entry[1]
            del self._refs[key]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {
            t.untyped_storage().data_ptr()
            for t in tree_flatten((args, kwargs))[0]
            if isinstance(t, torch.Tensor)
        }
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor) or t.device.type != "cpu":
                continue
            storage = t.untyped_storage()
            key, nbytes = storage.data_ptr(), storage.nbytes()
            if nbytes == 0:
                continue
            entry = self._refs.get(key)
            if entry is None:
                if key in inputs:  # a view of (or an in-place op on) memory from before
                    continue
                entry = self._refs[key] = [0, nbytes]
                self.live += nbytes
                self.peak = max(self.peak, self.live)
            entry[0] += 1
            weakref.finalize(t, self._release, key)
        return out


def peak_extra_memory(fn: Callable[[], object], device: torch.device | str = "cpu") -> int:
    """Peak bytes allocated by ``fn()`` above what was allocated before (output included)."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        out = fn()
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device) - base
        del out
        return int(peak)
    tracker = PeakMemory()
    with torch.no_grad(), tracker:
        out = fn()
    del out
    return int(tracker.peak)
