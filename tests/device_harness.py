"""A stand-in accelerator for the tests: run code with its tensors on ``meta`` and reject any
CPU tensor or CPU generator that meets them, as a GPU would.

Not a test module; imported by name (``tests/`` is on ``sys.path`` under pytest).

PyTorch's ``meta`` device has shapes and dtypes but no data, so a whole model runs on it in no
time. On its own it is a weak guard: ``meta @ cpu`` and ``embedding(cpu ids)`` pass, a CPU
``torch.Generator`` is silently accepted, and ``.item()`` raises, so a training loop that logs
its loss cannot run. :class:`FakeAccelerator` (a ``TorchDispatchMode``, it sees every operator,
backward included) closes those gaps:

* an operator that receives a ``meta`` tensor and a CPU tensor of one or more dimensions raises
  :class:`DeviceLeak` (0-dim CPU tensors are allowed, as CUDA allows them); copies between
  devices (``.to``, ``copy_``) are of course allowed;
* an operator on ``meta`` given a CPU ``torch.Generator`` raises :class:`DeviceLeak` (CUDA does);
* ``strict=True``: any operator that makes a new CPU tensor (of one or more dimensions) from
  no tensor at all (``torch.zeros(n)``, ``torch.arange(n)``, ``torch.tensor([...])``) raises
  too, unless PyTorch's own Python code made it: for code that should create nothing on the
  host (a model's forward, attention kernels, generation);
* CPU index tensors are accepted by indexing (CUDA accepts them), and operators that take a
  host tensor by design (``pack_padded_sequence``'s lengths) are exempt;
* ``.item()`` / ``float()`` / ``bool()`` of a ``meta`` scalar answer a stand-in (1, 1.0,
  True), as do ``torch.equal`` / ``torch.allclose`` (True); copies from ``meta`` to the CPU
  are zeros (ones for integers): loops that log, decode and plot run to the end.
"""

from __future__ import annotations

import linecache
import sys
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

aten = torch.ops.aten

META = torch.device("meta")

# Moving data between devices is what .to(device) is for.
_COPIES = {
    aten._to_copy.default,
    aten.copy_.default,
    aten._copy_from.default,
    aten._copy_from_and_resize.default,
    aten.lift_fresh.default,
    aten.lift_fresh_copy.default,
}


# Operators that answer a Python bool from data.
_COMPARISONS = {aten.allclose.default, aten.equal.default}

# Operators that take a host tensor by design, on CUDA too.
_HOST_ARGUMENT_OK = {
    aten._pack_padded_sequence.default,  # lengths must be a CPU int64 tensor
}
# Advanced indexing accepts host index tensors on CUDA (they are copied over).
_HOST_INDEX_OK = {
    aten.index.Tensor,
    aten.index_put.default,
    aten.index_put_.default,
    aten._index_put_impl_.default,
}


class DeviceLeak(AssertionError):
    """A CPU tensor or generator met the (stand-in) accelerator."""


def _caller() -> tuple[str, int, str]:
    """(file, line, function) of the innermost frame outside the dispatcher and this file."""
    f = sys._getframe(1)
    while f is not None and f.f_code.co_filename.endswith(_DISPATCH_FRAMES):
        f = f.f_back
    if f is None:
        return "?", 0, "?"
    return f.f_code.co_filename, f.f_lineno, f.f_code.co_name


def _where() -> str:
    """Where the offending call was made: the innermost frame outside torch (file:line)."""
    f = sys._getframe(1)
    while f is not None and (
        "/torch/" in f.f_code.co_filename or f.f_code.co_filename.endswith(_DISPATCH_FRAMES)
    ):
        f = f.f_back
    if f is None:
        return "?"
    line = linecache.getline(f.f_code.co_filename, f.f_lineno).strip()
    return f"{f.f_code.co_filename}:{f.f_lineno} ({line})"


# Frames between the caller and __torch_dispatch__ (the dispatcher's own Python layers).
_DISPATCH_FRAMES = (
    "device_harness.py",
    "torch/_ops.py",
    "utils/_python_dispatch.py",
    "_dynamo/eval_frame.py",
    "torch/_compile.py",
)


class FakeAccelerator(TorchDispatchMode):
    """Inside ``with FakeAccelerator():`` ``meta`` behaves like a GPU that rejects host tensors.

    ``strict``: also reject creating host tensors from nothing. ``cpu_allocations`` lists the
    host tensors created from nothing (op, shape, where), strict or not.
    """

    def __init__(self, strict: bool = False) -> None:
        super().__init__()
        self.strict = strict
        self.cpu_allocations: list[str] = []
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.ops += 1
        tensors = _tensors(args, kwargs)
        on_meta = any(t.device.type == "meta" for t in tensors) or _device_kwarg(kwargs) == "meta"

        if func is aten._local_scalar_dense.default and tensors[0].device.type == "meta":
            t = tensors[0]
            return True if t.dtype == torch.bool else (1.0 if t.is_floating_point() else 1)
        if func in _COMPARISONS and on_meta:
            return True  # no data to compare: the stand-in answer
        if func in _COPIES:
            return self._copy(func, args, kwargs)

        if on_meta and func not in _HOST_ARGUMENT_OK:
            host = [t for t in tensors if t.device.type == "cpu" and t.dim() > 0]
            if func in _HOST_INDEX_OK:
                host = [t for t in host if t.is_floating_point() or t.is_complex()]
            if host:
                raise DeviceLeak(
                    f"{func} got a CPU tensor of shape {tuple(host[0].shape)} together with "
                    f"tensors on the accelerator, at {_where()}"
                )
            gen = kwargs.get("generator")
            if isinstance(gen, torch.Generator) and gen.device.type == "cpu":
                raise DeviceLeak(
                    f"{func} on the accelerator was given a CPU torch.Generator, at {_where()}"
                )
        out = func(*args, **kwargs)
        if not tensors:
            self._host_allocation(func, out)
        return out

    def _copy(self, func, args, kwargs):
        if func is aten._to_copy.default:
            src = args[0]
            target = kwargs.get("device", src.device)
            if src.device.type == "meta" and torch.device(target).type == "cpu":
                dtype = kwargs.get("dtype") or src.dtype
                return _stand_in(src.shape, dtype)
        if func is aten.copy_.default:
            dst, src = args[0], args[1]
            if src.device.type == "meta" and dst.device.type == "cpu":
                return dst.copy_(_stand_in(dst.shape, dst.dtype))
        out = func(*args, **kwargs)
        if func in (aten.lift_fresh.default, aten.lift_fresh_copy.default):  # torch.tensor([..])
            self._host_allocation(func, out)
        return out

    def _host_allocation(self, func, out) -> None:
        if isinstance(out, torch.Tensor) and out.device.type == "cpu" and out.dim() > 0:
            file, line, fn = _caller()
            self.cpu_allocations.append(f"{func} -> CPU tensor {tuple(out.shape)} at {file}:{line}")
            if self.strict and "/torch/" not in file:
                raise DeviceLeak(
                    f"host allocation: {func} -> CPU tensor {tuple(out.shape)} at {_where()}"
                )


def _tensors(args, kwargs) -> list[torch.Tensor]:
    """The tensors among an operator's arguments (top level and inside lists / tuples)."""
    found = []
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            found.append(a)
        elif isinstance(a, (list, tuple)):
            found.extend(t for t in a if isinstance(t, torch.Tensor))
    return found


def _stand_in(shape, dtype: torch.dtype) -> torch.Tensor:
    """Host values for data that does not exist: ones for integers (lengths, counts stay
    valid), zeros otherwise."""
    if dtype.is_floating_point or dtype.is_complex or dtype == torch.bool:
        return torch.zeros(shape, dtype=dtype)
    return torch.ones(shape, dtype=dtype)


def _device_kwarg(kwargs: dict[str, Any]) -> str | None:
    d = kwargs.get("device")
    return None if d is None else torch.device(d).type


def to_meta(x: Any) -> Any:
    """Tensors (nested in tuples / lists / dicts) and modules moved to ``meta``."""
    if isinstance(x, torch.nn.Module):
        return x.to(META)
    return tree_map(lambda t: t.to(META) if isinstance(t, torch.Tensor) else t, x)


def all_on_meta(x: Any) -> bool:
    """Every tensor in ``x`` (nested) is on ``meta``."""
    flat, _ = tree_flatten(x)
    return all(t.device.type == "meta" for t in flat if isinstance(t, torch.Tensor))
