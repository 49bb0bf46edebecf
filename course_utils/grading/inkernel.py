"""The grading code that runs inside the student's kernel (step 2 of a check).

This module is never imported by the kernel: the grader reads this file's text and sends it
(see :func:`course_utils.grading.harvest.harvest_code`), so that it runs in a private namespace
the student's code has not seen and cannot have replaced. The grader imports it normally to
compute the same fingerprints on its side. Standard library only at import time.
"""

import hashlib as _hashlib
import json as _json
import os as _os
import time as _time
import types as _types


def fingerprint(obj):
    """A stable hash of a function's code (bytecode, names, constants; recursive)."""
    target = getattr(obj, "func", obj)  # functools.partial
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
    if (
        isinstance(candidate, type)
        and isinstance(reference, type)
        and issubclass(candidate, reference)
    ):
        flags.append("subclass_of_reference: " + function + " subclasses " + where)
    mod = getattr(candidate, "__module__", "") or ""
    if mod and mod != "__main__" and (mod.startswith("course_utils") or mod == ref_mod):
        flags.append(
            "course_module: " + function + " is defined in " + mod + ", not in the notebook"
        )
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
            elif (
                isinstance(value, _types.ModuleType)
                and ref_name in code.co_names
                and getattr(value, ref_name, None) is reference
            ):
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


def _watcher(params, candidate):
    """The factory of watchers for the candidate's run, built from the guard's source that the
    grader sent (run here in a namespace of its own) and the rules it computed."""
    rules = params.get("guard") or {}
    namespace = {"__name__": "__course_guard__", "__builtins__": __builtins__}
    exec(compile(params["guard_source"], "<course-grader>", "exec"), namespace)
    own = namespace["own_codes_of"](candidate)
    watch = namespace["Watch"]
    keys = [tuple(k) for k in rules.get("reference", [])]

    def factory():
        return watch(
            rules.get("forbids", ()),
            keys,
            rules.get("shapes", ()),
            own,
            where=rules.get("where", ""),
            profile=True,
        )

    return factory


def harvest(user_ns, params):
    """Step 2 of a check, in the student's kernel; writes outputs.npz + result.json."""
    out_dir = params["out"]
    result = {
        "status": "harness_error",
        "message": "",
        "flags": [],
        "fingerprints": {},
        "outputs": [],
        "n_cases": 0,
        "elapsed": 0.0,
    }
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

        result["fingerprints"] = {
            "collect_outputs": fingerprint(core.collect_outputs),
            "call": fingerprint(exercise.call),
            "make_cases": fingerprint(exercise.make_cases),
        }
        result["modules"] = {
            m.__name__: str(getattr(m, "__file__", "")) for m in (course_utils, core, np, torch)
        }
        name = params["function"]
        if name not in user_ns:
            result["status"] = "missing"
            result["message"] = name + " is not defined"
            return
        candidate = user_ns[name]
        try:
            result["flags"] = reexport_flags(candidate, exercise.reference, name)
        except Exception:
            result["flags"] = []
        cases = exercise.make_cases(int(params["seed"]))
        result["n_cases"] = len(cases)
        watch = _watcher(params, candidate)
        start = _time.perf_counter()
        try:
            status, outputs, message = core.collect_outputs(exercise, candidate, cases, watch)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # SystemExit and friends from the student's code
            status, outputs, message = (
                "error",
                [],
                "your code raised " + type(exc).__name__ + ": " + str(exc),
            )
        result["elapsed"] = _time.perf_counter() - start
        if status == "failed":  # a shortcut (see guard): no points, the message says why
            status = "error"
            result["flags"] = list(result["flags"]) + ["shortcut: " + str(message)[:200]]
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
