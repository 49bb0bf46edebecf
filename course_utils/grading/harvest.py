"""The harvest protocol: the kernel computes outputs, the trusted grader decides.

At each check position the grader sends :func:`harvest_code` to the student's kernel. That
snippet (the constant :data:`KERNEL_SOURCE`, run in a private namespace so it leaves no names
behind) does only step 2 of a check (see :mod:`course_utils.checks.core`):

1. looks the exercise up in the kernel's registry and the candidate up by
   ``exercise.function`` in the user namespace;
2. draws the cases with ``exercise.make_cases(seed)`` — ``seed`` is chosen by the grader at
   grade time (``secrets.randbits``), so no answer can be prepared for it;
3. runs ``collect_outputs(exercise, candidate, cases)`` and writes the outputs as plain data
   into a fresh temporary folder: ``outputs.npz`` (``numpy.savez``; tensors converted to numpy,
   bfloat16 widened to float32) and ``result.json`` (status, message, dtype/shape of every
   output, re-export flags and fingerprints of the grading code it ran).

The grader then (:func:`load_harvest`) reads ``result.json`` with size limits and strict
validation, loads the arrays with ``numpy.load(..., allow_pickle=False)``, *regenerates the
cases itself from the same seed* and calls :func:`course_utils.checks.core.judge` in its own
process. Nothing the student's code does to ``course_utils.checks``, ``torch.allclose`` or
IPython inside the kernel takes part in the verdict. Fingerprints of
``collect_outputs``/``exercise.call``/``exercise.make_cases`` computed in the kernel are
compared with the grader's own: a replaced grading function makes the exercise an ``error``
flagged ``tampered``.

Re-export detection (flags, see :func:`reexport_flags` in :data:`KERNEL_SOURCE`): the
candidate *is* the reference implementation, wraps or subclasses it, is defined in the
reference's module or in ``course_utils``, or its code (its functions, nested functions and,
for classes, their methods) reaches the reference through its globals or closure.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any

MAX_RESULT_JSON_BYTES = 4 << 20
MAX_OUTPUTS_BYTES = 512 << 20

# The code that runs inside the student's kernel. It is also exec'd in the grader (for
# ``fingerprint``), so both sides compute fingerprints with the same code.
KERNEL_SOURCE = r'''
import hashlib as _hashlib
import json as _json
import os as _os
import time as _time
import types as _types


def fingerprint(obj):
    """A stable hash of a function's code (bytecode, names, constants; recursive)."""
    target = getattr(obj, "func", obj)            # functools.partial
    target = getattr(target, "__func__", target)  # bound methods
    code = getattr(target, "__code__", None)
    if code is None:
        return "nocode:" + type(obj).__module__ + "." + type(obj).__qualname__

    def walk(c):
        parts = [c.co_name, c.co_code.hex(), repr(c.co_names), repr(c.co_varnames)]
        for const in c.co_consts:
            if isinstance(const, _types.CodeType):
                parts.append(walk(const))
            elif isinstance(const, frozenset):
                parts.append(repr(sorted(map(repr, const))))
            else:
                parts.append(repr(const))
        return _hashlib.sha256("\x1f".join(parts).encode("utf-8", "replace")).hexdigest()

    return walk(code)


def _codes_of(obj, depth=0):
    """Code objects reachable from a function or a class defined by the student."""
    found = []
    if depth > 3:
        return found
    if isinstance(obj, type):
        for cls in obj.__mro__:
            mod = getattr(cls, "__module__", "") or ""
            if cls is object or mod.startswith(("torch", "builtins", "typing", "abc")):
                continue
            for value in list(vars(cls).values()):
                if isinstance(value, (staticmethod, classmethod)):
                    value = value.__func__
                if isinstance(value, property):
                    value = value.fget
                if isinstance(value, _types.FunctionType):
                    found.extend(_codes_of(value, depth + 1))
        return found
    fn = getattr(obj, "__func__", obj)
    code = getattr(fn, "__code__", None)
    if isinstance(code, _types.CodeType):
        stack = [code]
        while stack:
            c = stack.pop()
            found.append((fn, c))
            stack.extend(k for k in c.co_consts if isinstance(k, _types.CodeType))
    return found


def reexport_flags(candidate, reference, function):
    """Ways in which ``candidate`` merely re-exports or delegates to ``reference``."""
    flags = []
    ref_name = getattr(reference, "__name__", "")
    ref_mod = getattr(reference, "__module__", "") or ""
    where = (ref_mod + "." + getattr(reference, "__qualname__", ref_name)).strip(".")
    if candidate is reference:
        return ["is_reference: " + function + " is the course's own " + where]
    inner = getattr(candidate, "__wrapped__", None)
    inner = getattr(candidate, "func", inner)
    if inner is reference:
        flags.append("wraps_reference: " + function + " wraps " + where)
    if isinstance(candidate, type) and isinstance(reference, type) and issubclass(candidate, reference):
        flags.append("subclass_of_reference: " + function + " subclasses " + where)
    mod = getattr(candidate, "__module__", "") or ""
    if mod and mod != "__main__" and (mod.startswith("course_utils") or mod == ref_mod):
        flags.append("course_module: " + function + " is defined in " + mod + ", not in the notebook")
    for fn, code in _codes_of(candidate):
        globs = getattr(fn, "__globals__", {}) or {}
        bound = [(name, globs[name]) for name in code.co_names if name in globs]
        cells = getattr(fn, "__closure__", None) or ()
        for name, cell in zip(getattr(fn.__code__, "co_freevars", ()), cells):
            try:
                bound.append((name, cell.cell_contents))
            except ValueError:  # an empty cell
                pass
        hit = None
        for name, value in bound:
            if value is reference:
                hit = name
            elif isinstance(value, _types.ModuleType) and ref_name in code.co_names \
                    and getattr(value, ref_name, None) is reference:
                hit = name + "." + ref_name
            if hit:
                break
        if hit:
            flags.append("calls_reference: " + function + " calls " + where + " (via " + hit + ")")
            break
    return flags


def _encode(outputs, torch):
    arrays, entries = {}, []
    for i, out in enumerate(outputs):
        if not isinstance(out, dict):
            entries.append({"case": i, "key": "", "repr": type(out).__name__})
            continue
        for key, value in out.items():
            entry = {"case": i, "key": str(key)}
            if isinstance(value, torch.Tensor):
                t = value.detach()
                if t.layout != torch.strided:
                    t = t.to_dense()
                t = t.cpu().resolve_conj().resolve_neg()
                entry["dtype"] = str(t.dtype)
                if t.dtype in (torch.bfloat16,) or "float8" in str(t.dtype):
                    t = t.float()
                name = "a" + str(len(arrays))
                arrays[name] = t.contiguous().numpy()
                entry["array"] = name
            elif isinstance(value, (bool, int, float)) and not isinstance(value, type):
                entry["python"] = type(value).__name__
                entry["value"] = value if not isinstance(value, float) or value == value else None
            else:
                entry["repr"] = type(value).__name__
            entries.append(entry)
    return arrays, entries


def harvest(user_ns, params):
    """Step 2 of a check, in the student's kernel; writes outputs.npz + result.json."""
    out_dir = params["out"]
    result = {"status": "harness_error", "message": "", "flags": [], "fingerprints": {},
              "outputs": [], "n_cases": 0, "elapsed": 0.0}
    try:
        import importlib
        import numpy as np
        import torch
        from course_utils.checks import core
        if params.get("module"):
            module = importlib.import_module(params["module"])
            exercise = {e.id: e for e in module.EXERCISES}[params["exercise"]]
        else:
            import course_utils.checks as registry
            exercise = registry.REGISTRY[params["exercise"]]
        import course_utils
        result["fingerprints"] = {"collect_outputs": fingerprint(core.collect_outputs),
                                  "call": fingerprint(exercise.call),
                                  "make_cases": fingerprint(exercise.make_cases)}
        result["modules"] = {m.__name__: str(getattr(m, "__file__", ""))
                             for m in (course_utils, core, np, torch)}
        name = params["function"]
        if name not in user_ns:
            result["status"] = "missing"
            result["message"] = name + " is not defined"
            return
        candidate = user_ns[name]
        try:
            result["flags"] = reexport_flags(candidate, exercise.reference, name)
        except Exception as exc:
            result["flags"] = []
        cases = exercise.make_cases(int(params["seed"]))
        result["n_cases"] = len(cases)
        start = _time.perf_counter()
        try:
            status, outputs, message = core.collect_outputs(exercise, candidate, cases)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # SystemExit and friends from the student's code
            status, outputs, message = "error", [], "your code raised " + type(exc).__name__ + ": " + str(exc)
        result["elapsed"] = _time.perf_counter() - start
        arrays, entries = _encode(outputs, torch)
        np.savez(_os.path.join(out_dir, "outputs.npz"), **arrays)
        result.update(status=str(status), message=str(message)[:4000], outputs=entries)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        result["status"] = "harness_error"
        result["message"] = type(exc).__name__ + ": " + str(exc)[:2000]
    finally:
        tmp = _os.path.join(out_dir, "result.json.tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            _json.dump(result, fh)
        _os.replace(tmp, _os.path.join(out_dir, "result.json"))
'''

# What the kernel executes: run KERNEL_SOURCE in a private namespace, hand it the user
# namespace, delete nothing from the user's (nothing was added).
_HARVEST_TEMPLATE = (
    "exec(compile({source!r}, '<course-grader>', 'exec'), "
    "{{'__name__': '__course_grader__', '__builtins__': __builtins__, "
    "'_user_ns': globals(), '_params': {params!r}}})"
)
_CALL = "\nharvest(_user_ns, _params)\n"


def harvest_code(
    *, exercise_id: str, function: str, seed: int, out_dir: str, module: str | None = None
) -> str:
    """The code the grader sends to the kernel at a check position."""
    params = {
        "exercise": exercise_id,
        "function": function,
        "seed": int(seed),
        "out": out_dir,
        "module": module,
    }
    return _HARVEST_TEMPLATE.format(source=KERNEL_SOURCE + _CALL, params=params)


_TRUSTED: dict[str, Any] = {}


def trusted_namespace() -> dict[str, Any]:
    """:data:`KERNEL_SOURCE` exec'd in the grader's own process (for ``fingerprint``)."""
    if not _TRUSTED:
        exec(compile(KERNEL_SOURCE, "<course-grader>", "exec"), _TRUSTED)
    return _TRUSTED


def fingerprint(obj: Any) -> str:
    """Hash of a function's code, identical to the one computed inside the kernel."""
    return trusted_namespace()["fingerprint"](obj)


@dataclass
class Harvest:
    """What the kernel reported for one exercise, validated (outputs as plain tensors)."""

    status: str  # passed | not_attempted | error | missing | harness_error | malformed
    message: str = ""
    outputs: list[dict[str, Any]] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    fingerprints: dict[str, str] = field(default_factory=dict)
    elapsed: float = 0.0
    modules: dict[str, str] = field(default_factory=dict)  # module name -> file in the kernel


class _Opaque:
    """Stands for a non-tensor, non-number value the student's code returned."""

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name

    def __repr__(self) -> str:
        return f"<{self.type_name}>"


_OpaqueTypes: dict[str, type] = {}


def _opaque(type_name: str) -> Any:
    # A real class named like the student's type, so messages read "got list", not "got _Opaque".
    safe = "".join(ch for ch in type_name if ch.isalnum() or ch == "_")[:40] or "object"
    cls = _OpaqueTypes.get(safe)
    if cls is None:
        cls = type(safe, (_Opaque,), {})
        _OpaqueTypes[safe] = cls
    return cls(safe)


def _torch_dtype(name: str):
    import torch

    attr = name.split(".", 1)[1] if name.startswith("torch.") else ""
    dtype = getattr(torch, attr, None) if attr.isidentifier() else None
    return dtype if isinstance(dtype, torch.dtype) else None


def load_harvest(out_dir: str, n_cases: int) -> Harvest:  # noqa: C901 -- validates each untrusted field of the harvest in turn
    """Read and validate what the kernel wrote into ``out_dir`` (never trusts its content)."""
    import numpy as np
    import torch

    path = os.path.join(out_dir, "result.json")
    if not os.path.isfile(path):
        return Harvest("malformed", "the kernel wrote no result")
    if os.path.getsize(path) > MAX_RESULT_JSON_BYTES:
        return Harvest("malformed", "the kernel's result file is too large")
    try:
        with open(path, encoding="utf-8") as fh:
            raw = json.load(fh)
    except (OSError, ValueError) as exc:
        return Harvest("malformed", f"the kernel's result file is unreadable ({exc})")
    if not isinstance(raw, dict):
        return Harvest("malformed", "the kernel's result is not an object")
    status = raw.get("status")
    if status not in ("passed", "not_attempted", "error", "missing", "harness_error"):
        return Harvest("malformed", f"the kernel reported an unknown status {status!r}")
    flags = (
        [str(f)[:300] for f in raw.get("flags", []) if isinstance(f, str)][:10]
        if isinstance(raw.get("flags"), list)
        else []
    )
    fps = raw.get("fingerprints") if isinstance(raw.get("fingerprints"), dict) else {}
    fps = {str(k): str(v) for k, v in fps.items()}
    elapsed = raw.get("elapsed") if isinstance(raw.get("elapsed"), (int, float)) else 0.0
    mods = raw.get("modules") if isinstance(raw.get("modules"), dict) else {}
    harvest = Harvest(
        status,
        str(raw.get("message", ""))[:4000],
        [],
        flags,
        fps,
        float(elapsed) if math.isfinite(elapsed) else 0.0,
        {str(k)[:100]: str(v)[:1000] for k, v in list(mods.items())[:10]},
    )
    if status != "passed":
        return harvest
    entries = raw.get("outputs")
    if not isinstance(entries, list):
        return Harvest(
            "malformed", "the kernel's outputs are missing", flags=flags, fingerprints=fps
        )
    npz_path = os.path.join(out_dir, "outputs.npz")
    if not os.path.isfile(npz_path) or os.path.getsize(npz_path) > MAX_OUTPUTS_BYTES:
        return Harvest(
            "malformed",
            f"your outputs are missing or too large (over {MAX_OUTPUTS_BYTES >> 20} MB)",
            flags=flags,
            fingerprints=fps,
        )
    outputs: list[dict[str, Any]] = [{} for _ in range(n_cases)]
    try:
        with np.load(npz_path, allow_pickle=False) as arrays:
            for entry in entries:
                if not isinstance(entry, dict):
                    raise ValueError("an output entry is not an object")
                case = entry.get("case")
                if not isinstance(case, int) or not 0 <= case < n_cases:
                    raise ValueError(f"output for an unknown case {case!r}")
                key = str(entry.get("key", ""))
                if "array" in entry:
                    arr = arrays[str(entry["array"])]
                    if arr.dtype == object:
                        raise ValueError("object arrays are not accepted")
                    tensor = torch.from_numpy(np.array(arr, copy=True))
                    dtype = _torch_dtype(str(entry.get("dtype", "")))
                    if dtype is not None and tensor.dtype != dtype:
                        tensor = tensor.to(dtype)
                    outputs[case][key] = tensor
                elif "python" in entry:
                    kind = entry.get("python")
                    value = entry.get("value")
                    caster = {"bool": bool, "int": int, "float": float}.get(kind)
                    if caster is None or not isinstance(value, (bool, int, float, type(None))):
                        raise ValueError("a malformed scalar output")
                    outputs[case][key] = caster(value) if value is not None else float("nan")
                else:
                    outputs[case][key] = _opaque(str(entry.get("repr", "object")))
    except Exception as exc:
        return Harvest(
            "malformed",
            f"the kernel's outputs are unreadable ({type(exc).__name__}: {str(exc)[:200]})",
            flags=flags,
            fingerprints=fps,
        )
    harvest.outputs = outputs
    return harvest
