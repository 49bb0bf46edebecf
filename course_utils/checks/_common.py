"""Helpers shared by the per-notebook check modules (``nbNN_*.py``).

Not an exercise module itself (its name does not start with ``nb``): sizes and tolerances,
turning a student's return value into plain tensors with a clear error, building a student's
``nn.Module`` with given weights, and watching which tensors a candidate allocates.

Case inputs stay flat and plain (``str -> Tensor | int | float | bool | None``) so a grader can
hand them to another process without pickle; module weights travel as ``"w:<param name>"``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from course_utils.checks.core import BUILT_MODULES, Case, Outputs, allclose_compare

Compare = Callable[[Case, Outputs, Outputs], "str | None"]

WEIGHT_PREFIX = "w:"


# ----------------------------------------------------------------------------- sizes


def size(gen: torch.Generator, low: int, high: int) -> int:
    """A seeded integer in [low, high] (both included)."""
    return int(torch.randint(low, high + 1, (1,), generator=gen).item())


def distinct_sizes(gen: torch.Generator, k: int, low: int, high: int) -> list[int]:
    """``k`` different seeded integers in [low, high]: keeps T, S, Dk, Dv apart so that a
    mistake like "scaled by sqrt(Dv) instead of sqrt(Dk)" changes the numbers."""
    if high - low + 1 < k:
        raise ValueError(f"cannot draw {k} distinct sizes from [{low}, {high}]")
    perm = torch.randperm(high - low + 1, generator=gen)[:k]
    return [low + int(i) for i in perm]


def lengths_mask(gen: torch.Generator, B: int, S: int, *, min_len: int = 1) -> Tensor:
    """A padding mask (B, S), True at real tokens; lengths in [min_len, S], one row full."""
    lengths = torch.randint(min_len, S + 1, (B,), generator=gen)
    lengths[size(gen, 0, B - 1)] = S
    return torch.arange(S)[None, :] < lengths[:, None]


def random_mask(
    gen: torch.Generator, *shape: int, p_keep: float = 0.6, full_rows: bool = False
) -> Tensor:
    """A random bool mask (..., T, S), True = may attend. Every row keeps at least one key
    unless ``full_rows``, which then masks the first row of every (T, S) slice completely."""
    mask = torch.rand(*shape, generator=gen) < p_keep
    keep = torch.randint(0, shape[-1], shape[:-1], generator=gen)
    mask.scatter_(-1, keep[..., None], True)  # one allowed key per row at least
    if full_rows:
        mask[..., 0, :] = False
    return mask


# ----------------------------------------------------------------------------- outputs


def as_tensor(value: Any, what: str) -> Tensor:
    """``value`` if it is a tensor, else a TypeError a student can act on."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{what} should be a torch.Tensor, got {type(value).__name__}")
    return value


def as_pair(value: Any, fn: str, names: tuple[str, str]) -> tuple[Tensor, Tensor]:
    """Unpack a ``(a, b)`` return value, checking it is a pair of tensors."""
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        got = type(value).__name__ + (
            f" of length {len(value)}" if isinstance(value, (tuple, list)) else ""
        )
        raise TypeError(f"{fn} should return a pair ({names[0]}, {names[1]}), got a {got}")
    return as_tensor(value[0], names[0]), as_tensor(value[1], names[1])


@dataclass(frozen=True)
class Out:
    """One returned tensor of a return contract, as the exercise's prompt states it:
    ``Out("logits", ("B", "T", "V"))``. ``shape`` holds sizes or names of sizes (resolved with
    the ``sizes`` given to :func:`check_return`); None skips the shape. ``floating``: it must
    be a floating-point tensor."""

    name: str
    shape: tuple[int | str, ...] | None = None
    floating: bool = True

    def describe(self) -> str:
        dims = "" if self.shape is None else " (" + ", ".join(map(str, self.shape)) + ")"
        return f"{self.name}{dims}"


def _kind(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        inner = ", ".join("None" if v is None else type(v).__name__ for v in value[:4])
        return f"a {type(value).__name__} of {len(value)} ({inner})"
    return "None" if value is None else f"a {type(value).__name__}"


def check_return(
    value: Any,
    contract: Out | tuple[Out, ...],
    fn: str,
    sizes: dict[str, int] | None = None,
) -> Any:
    """``value`` if it holds the return contract (one tensor, or a tuple of them), else a
    TypeError/ValueError that says what the prompt promised and what came back, e.g.
    "Transformer.forward should return the logits (B, T, V), got a tuple of 2 (Tensor, None):
    return only the logits". One contract per notebook, held by every check that calls the
    student's code (``return check_return(model(x), LOGITS, "Transformer.forward", sizes)``).

    Shapes: ``(2, 5, 11)`` against ``Out("logits", ("B", "T", "V"))`` with
    ``sizes={"B": 2, "T": 5, "V": 11}``.
    """
    sizes = sizes or {}
    if isinstance(contract, Out):
        if isinstance(value, (tuple, list)):
            raise TypeError(
                f"{fn} should return {contract.describe()}, one tensor, got {_kind(value)}: "
                f"return only {contract.name}"
            )
        _check_out(value, contract, fn, sizes)
        return value
    names = ", ".join(o.describe() for o in contract)
    if not isinstance(value, (tuple, list)) or len(value) != len(contract):
        raise TypeError(f"{fn} should return a tuple ({names}), got {_kind(value)}")
    for v, out in zip(value, contract, strict=True):
        _check_out(v, out, fn, sizes)
    return value


def _check_out(value: Any, out: Out, fn: str, sizes: dict[str, int]) -> None:
    if not isinstance(value, torch.Tensor):
        raise TypeError(
            f"{fn} should return {out.describe()} as a torch.Tensor, got {_kind(value)}"
        )
    if out.floating and not value.is_floating_point():
        raise TypeError(f"{fn} returned {out.name} of dtype {value.dtype}: expected floating point")
    if out.shape is None:
        return
    expected = tuple(sizes.get(d, d) if isinstance(d, str) else d for d in out.shape)
    if all(isinstance(d, int) for d in expected) and tuple(value.shape) != expected:
        named = " = (" + ", ".join(map(str, out.shape)) + ")" if expected != out.shape else ""
        raise ValueError(
            f"{fn} returned {out.name} of shape {tuple(value.shape)}, expected {expected}{named}"
        )


def _same_nan_rows(got: Outputs, expected: Outputs) -> tuple[Outputs, Outputs]:
    """Where both sides have NaN in exactly the same rows (last dim), zero those rows.

    Only an expected output with NaN is touched -- a known mistake's output, never a reference
    (references do not produce NaN) -- so judging is unchanged; it lets the judge recognise a
    NaN-producing mistake however the NaN spread inside the broken rows.
    """
    got, expected = dict(got), dict(expected)
    for key, exp in expected.items():
        g = got.get(key)
        if (
            not isinstance(g, torch.Tensor)
            or not exp.is_floating_point()
            or exp.ndim == 0
            or not g.is_floating_point()
            or g.shape != exp.shape
        ):
            continue
        e_rows = torch.isnan(exp).any(dim=-1, keepdim=True)
        if not e_rows.any():
            continue
        g_rows = torch.isnan(g.detach().cpu()).any(dim=-1, keepdim=True)
        if torch.equal(e_rows, g_rows):
            got[key] = g.detach().cpu().masked_fill(g_rows, 0.0)
            expected[key] = exp.masked_fill(e_rows, 0.0)
    return got, expected


def close(
    rtol: float = 1e-5, atol: float = 1e-6, *, rtol32: float = 1e-3, atol32: float = 1e-4
) -> Compare:
    """``allclose_compare`` with these tolerances (``rtol32``/``atol32`` when an expected
    output is float32 or lower), plus a word on dtype when the candidate's is less precise.
    Rows that are NaN on both sides count as equal (see ``_same_nan_rows``)."""

    def compare(case: Case, got: Outputs, expected: Outputs) -> str | None:
        got, expected = _same_nan_rows(got, expected)
        low = any(
            e.is_floating_point() and torch.finfo(e.dtype).bits <= 32 for e in expected.values()
        )
        problem = allclose_compare(
            case, got, expected, rtol=rtol32 if low else rtol, atol=atol32 if low else atol
        )
        if problem is None:
            return None
        for key, exp in expected.items():
            g = got.get(key)
            if (
                isinstance(g, torch.Tensor)
                and g.is_floating_point()
                and exp.is_floating_point()
                and torch.finfo(g.dtype).bits < torch.finfo(exp.dtype).bits
            ):
                problem += (
                    f" (your '{key}' is {g.dtype}, expected {exp.dtype}: compute in "
                    f"the inputs' dtype instead of creating tensors with a fixed one)"
                )
                break
        return problem

    return compare


def raised(exc: BaseException) -> Outputs:
    """An error as plain data: the exception's text as uint8 bytes under the key ``raised``.

    Shape errors are how several classic mistakes show up when the sizes differ; carrying
    them as data lets the judge go through the cases in order, so a wrong answer is diagnosed
    on the first (square) case where the mistake still runs and can be named.
    """
    text = f"{type(exc).__name__}: {exc}".encode()[:2000]
    return {"raised": torch.tensor(list(text), dtype=torch.uint8)}


def compare_or_raised(
    case: Case, got: Outputs, expected: Outputs, values: Compare = allclose_compare
) -> str | None:
    """``values`` (default :func:`allclose_compare`) that also understands :func:`raised`
    outputs: the same error on both sides is a match (a mistake that fails the same way)."""
    if "raised" in got or "raised" in expected:
        if (
            "raised" in got
            and "raised" in expected
            and torch.equal(got["raised"], expected["raised"])
        ):
            return None
        if "raised" in got:
            text = bytes(got["raised"].tolist()).decode(errors="replace")
            return f"case '{case.name}': your code raised {text}"
        return f"case '{case.name}': differs (the expected computation raised an error)"
    return values(case, got, expected)


# ----------------------------------------------------------------------------- modules


def weights_of(module: nn.Module) -> dict[str, Tensor]:
    """A module's parameters as flat case inputs ``{"w:<name>": tensor}``."""
    return {WEIGHT_PREFIX + name: p.detach().clone() for name, p in module.named_parameters()}


def random_weights(
    gen: torch.Generator, shapes: dict[str, tuple[int, ...]], scale: dict[str, float] | None = None
) -> dict[str, Tensor]:
    """Seeded float64 weights ``{"w:<name>": tensor}``: N(0, 1/fan_in) for matrices,
    N(0, 0.1) for vectors, N(1, 0.1) for LayerNorm scales (names ending in ``norm*.weight``)."""
    out = {}
    for name, shape in shapes.items():
        t = torch.randn(*shape, generator=gen, dtype=torch.float64)
        if len(shape) >= 2:
            t = t / shape[-1] ** 0.5
        elif "." in name and name.split(".")[-2].startswith("norm") and name.endswith("weight"):
            t = 1.0 + 0.1 * t
        else:
            t = 0.1 * t
        if scale and name in scale:
            t = t * scale[name]
        out[WEIGHT_PREFIX + name] = t
    return out


def case_device(inputs: dict[str, Any]) -> torch.device:
    """The device of a case's tensors (the first one found; the CPU if none): checks build
    their modules there, so a harness runs on a GPU as it does on the CPU."""
    for value in inputs.values():
        if isinstance(value, torch.Tensor):
            return value.device
    return torch.device("cpu")


def case_dtype(inputs: dict[str, Any]) -> torch.dtype:
    """The floating dtype of a case's module weights (``"w:..."``), else of its first floating
    tensor, else float64: a check builds its modules in it."""
    floating = {
        k: v for k, v in inputs.items() if isinstance(v, torch.Tensor) and v.is_floating_point()
    }
    weights = [v for k, v in floating.items() if k.startswith(WEIGHT_PREFIX)]
    for t in weights or list(floating.values()):
        return t.dtype
    return torch.float64


def build_module(
    cls: Any, args: tuple, kwargs: dict[str, Any], inputs: dict[str, Any], class_name: str
) -> nn.Module:
    """``cls(*args, **kwargs)`` in eval mode, in the weights' dtype (float64, or float32 for a
    contract's float32 case), with the case's weights copied in.

    Built under a forked RNG so a check never moves the notebook's random stream. A weight the
    module lacks (renamed submodule) or of another shape is a ValueError naming it.
    """
    with torch.random.fork_rng(devices=[]):
        module = cls(*args, **kwargs)
    if not isinstance(module, nn.Module):
        raise TypeError(f"{class_name}(...) should build an nn.Module, got {type(module).__name__}")
    module = module.to(dtype=case_dtype(inputs), device=case_device(inputs)).eval()
    with torch.no_grad():
        for key, value in inputs.items():
            if not key.startswith(WEIGHT_PREFIX):
                continue
            name = key[len(WEIGHT_PREFIX) :]
            try:
                param = module.get_parameter(name)
            except AttributeError:
                raise ValueError(
                    f"your {class_name} has no parameter '{name}' of shape {tuple(value.shape)}: "
                    f"keep the __init__ the notebook gives (same submodule names)"
                ) from None
            if param.shape != value.shape:
                raise ValueError(
                    f"your {class_name}'s parameter '{name}' has shape {tuple(param.shape)}, "
                    f"expected {tuple(value.shape)}: keep the __init__ the notebook gives"
                )
            param.copy_(value)
    weights = {
        k[len(WEIGHT_PREFIX) :]: v.detach().clone()
        for k, v in inputs.items()
        if k.startswith(WEIGHT_PREFIX) and isinstance(v, torch.Tensor)
    }
    BUILT_MODULES.append((module, weights))
    return module


# ----------------------------------------------------------------------------- allocations


class AllocationTracker(TorchFunctionMode):
    """Records the largest floating-point tensor that a torch function returns while active,
    and whether a fused attention kernel (``F.scaled_dot_product_attention``) was called.

    A torch *function* mode, not a dispatch mode: it is cheap to enter (a dispatch mode imports
    torch's compiler stack, seconds on a first use) and sees every torch function, tensor method
    and operator the candidate calls, with its result. Views share their base's storage, so the
    size counted is the storage's (in elements): expanding, slicing or reshaping a small tensor
    does not count as a large one. Temporaries inside one fused kernel are invisible, hence the
    separate ``fused`` flag.
    """

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0
        self.largest_shape: tuple[int, ...] = ()
        self.fused: str | None = None  # name of the fused attention function called, if any

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if "scaled_dot_product" in name or "multi_head_attention" in name:
            self.fused = self.fused or name
        out = func(*args, **(kwargs or {}))
        for t in (out,) if isinstance(out, torch.Tensor) else tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                try:
                    n = t.untyped_storage().nbytes() // t.element_size()
                except (RuntimeError, NotImplementedError):  # no storage (meta, sparse, ...)
                    n = t.numel()
                if n > self.largest:
                    self.largest, self.largest_shape = n, tuple(t.shape)
        return out


_FACTORY = re.compile(r"\b(empty|zeros|ones|full|rand|randn|normal)\b")


class FormulaOnly(TorchDispatchMode):
    """Guard for exercises that ask for a formula (parameter counts): raise a ValueError with
    ``message(shape)`` before a factory op creates, or as soon as any op returns, a tensor of
    more than ``limit`` elements -- building the model to count it would need gigabytes.

    ``with FormulaOnly(lambda shape: f"... {shape} ..."): candidate(...)``
    """

    def __init__(self, message: Callable[[tuple[int, ...]], str], limit: int = 4096) -> None:
        super().__init__()
        self.message, self.limit = message, limit

    @classmethod
    def _should_skip_dynamo(cls) -> bool:  # no torch._dynamo import (seconds) on first use
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _FACTORY.search(str(func)):
            for a in [*args, *kwargs.values()]:
                if isinstance(a, (list, tuple)) and a and all(isinstance(s, int) for s in a):
                    if math.prod(a) > self.limit:
                        raise ValueError(self.message(tuple(a)))
        out = func(*args, **kwargs)
        for t in tree_flatten(out)[0]:
            if isinstance(t, Tensor) and t.numel() > self.limit:
                raise ValueError(self.message(tuple(t.shape)))
        return out


def parameter_shapes(module_cls: Callable[..., nn.Module], *args, **kwargs) -> dict[str, tuple]:
    """Name -> shape of every parameter of ``module_cls(*args, **kwargs)``, in registration
    order, built on the ``meta`` device (no memory): the weights a check seeds for a module
    the student completes (e.g. ``parameter_shapes(layers.TransformerBlock, D, 1, d_ff)``)."""
    with torch.device("meta"):
        module = module_cls(*args, **kwargs)
    return {name: tuple(p.shape) for name, p in module.named_parameters()}


# The fused attention kernels, by every name a call can reach them under (the function, the
# multi-head wrapper and the aten ops they run as): forbidden where the student writes attention.
FUSED_ATTENTION_OPS = (
    "torch.nn.functional.scaled_dot_product_attention",
    "torch.nn.functional.multi_head_attention_forward",
    "aten::_safe_softmax",
    "aten::_scaled_dot_product_attention_math",
    "aten::_scaled_dot_product_flash_attention",
    "aten::_scaled_dot_product_flash_attention_for_cpu",
    "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_cudnn_attention",
)
