"""Watching a candidate while a check runs it: shortcuts that earn no points.

A check runs the student's function on its cases (step 2, see :mod:`course_utils.checks.core`);
while it does, a :class:`Watch` records

- **forbidden torch calls**: each exercise declares what it asks the student to write
  (``Exercise.forbids``, e.g. ``("torch.softmax", "aten::_softmax")``). A ``TorchFunctionMode``
  sees torch functions, tensor methods and ``torch.nn.functional`` by name; a
  ``TorchDispatchMode`` sees the aten operators underneath, so hiding the call behind
  ``torch._C.DisableTorchFunction()`` or a name built with ``getattr`` does not get through;
- **the course's own implementation**: ``sys.setprofile`` records every code object that runs.
  When one of them is the exercise's reference (however it was reached: an import, a name built
  at run time, ``fallback()``, a patched registry) or a notebook function whose bytecode is the
  reference's (a copy pasted into another cell), the answer is not the student's;
- **tampering**: the watchers themselves switched off (``sys.setprofile`` called by the
  candidate, the profiler or the dispatch mode gone, or a run that produced tensors while the
  dispatch mode saw no operator at all).

Which codes are the reference is decided by the caller: the official grader computes them in
its own process from the trusted modules and sends them to the kernel as plain data
(:func:`reference_keys`, :func:`code_shape`), so patching the kernel's registry hides nothing.

This module is also executed from its text inside a student's kernel (the grader sends it with
:mod:`course_utils.grading.inkernel`), so it imports only the standard library at module level
and torch inside functions, and defines nothing at import time that the student could reach.
"""

import dis as _dis
import hashlib as _hashlib
import sys as _sys
import threading as _threading
import types as _types

# Builtins and functions that switch a profiler or tracer: called by the candidate = tampering.
_HOOK_NAMES = frozenset(
    {
        "setprofile",
        "settrace",
        "setprofile_all_threads",
        "settrace_all_threads",
        "_settraceallthreads",
    }
)
# torch internals that pop or disable the mode stacks.
_MODE_OFF_NAMES = frozenset(
    {
        "_pop_torch_dispatch_stack",
        "_unset_dispatch_mode",
        "_set_dispatch_mode",
        "_pop_torch_function_stack",
        "_disable_current_modes",
        "_pop_mode",
        "_pop_mode_temporarily",
    }
)
MIN_SHAPE_INSTRUCTIONS = 12  # shorter reference codes are not fingerprinted (too generic)


def _course_path(filename):
    """``course_utils/...`` part of a file name ('' when the file is not in the package)."""
    name = str(filename).replace("\\", "/")
    at = name.rfind("/course_utils/")
    if at < 0:
        return (
            "course_utils/" + name[len("course_utils/") :]
            if name.startswith("course_utils/")
            else ""
        )
    return name[at + 1 :]


def _shown_qualname(code, module):
    """The qualified name a message shows for ``code`` of ``module``: ``co_qualname`` (3.11+);
    on 3.10, which has none, the ``__qualname__`` of the module's function or method whose
    code it is (``RelativePositionBias.forward``, not ``forward``). For display only: keys
    (:func:`code_key`) stay as they are on both sides of the grader."""
    name = getattr(code, "co_qualname", None)
    if name:
        return name
    for obj in list(vars(_sys.modules.get(module) or _types.SimpleNamespace()).values()):
        for fn in [obj, *(vars(obj).values() if isinstance(obj, type) else ())]:
            fn = getattr(fn, "__func__", fn)
            fn = getattr(fn, "fget", fn)
            if getattr(fn, "__code__", None) is code:
                return fn.__qualname__
    return code.co_name


def code_key(code):
    """What identifies a code object of the course wherever it is installed:
    ``(path inside the package, qualified name, first line)``; None outside the package."""
    path = _course_path(code.co_filename)
    if not path:
        return None
    return (path, getattr(code, "co_qualname", code.co_name), int(code.co_firstlineno))


def codes_of(obj, depth=0):
    """The code objects of a function (and the functions nested in it) or of a class's own
    methods (those defined in its body, not inherited from torch or ``object``)."""
    found = []
    if depth > 3 or obj is None:
        return found
    if isinstance(obj, type):
        for value in list(vars(obj).values()):
            if isinstance(value, (staticmethod, classmethod)):
                value = value.__func__
            if isinstance(value, property):
                value = value.fget
            if isinstance(value, (_types.FunctionType, type)):
                found.extend(codes_of(value, depth + 1))
        return found
    target = getattr(obj, "func", obj)  # functools.partial
    target = getattr(target, "__func__", target)  # bound methods
    code = getattr(target, "__code__", None)
    if isinstance(code, _types.CodeType):
        stack = [code]
        while stack:
            c = stack.pop()
            found.append(c)
            stack.extend(k for k in c.co_consts if isinstance(k, _types.CodeType))
        # A library's decorator (``@torch.no_grad()``, ``functools.wraps``): the function it
        # wraps is what runs. Followed only from a wrapper that is not notebook code, so a
        # notebook function cannot claim another one by setting ``__wrapped__``.
        inner = getattr(target, "__wrapped__", None)
        if inner is not None and inner is not target and not _is_notebook_code(code):
            found.extend(codes_of(inner, depth + 1))
    return found


def own_codes_of(candidate):
    """The candidate's own code objects, for classes across its MRO (the student's classes
    only): a copy of the reference found there is the exercise cell itself, not a delegation."""
    found = []
    if isinstance(candidate, type):
        for cls in candidate.__mro__:
            mod = getattr(cls, "__module__", "") or ""
            if cls is object or mod.startswith(("torch", "builtins", "course_utils")):
                continue
            found.extend(codes_of(cls))
        return found
    return codes_of(candidate)


def reference_keys(reference):
    """``code_key`` of every code of the reference (a function or a class)."""
    return sorted({k for k in (code_key(c) for c in codes_of(reference)) if k is not None})


def code_shape(code):
    """A hash of what a code object does, blind to its name, its local variables' names,
    comments, docstring and line numbers: a verbatim copy of a function pasted into a notebook
    cell (and renamed) has the same shape as the original.

    ``PUSH_NULL`` is left out: Python 3.13 calls an attribute of a name the same compilation
    unit imports (``import math`` ... ``math.sqrt(d)``) as a plain function (``LOAD_ATTR``
    then ``PUSH_NULL``) and any other attribute as a method (no ``PUSH_NULL``), so a copy
    pasted without the module's imports differed from its original by that instruction."""
    skip = ("NOP", "CACHE", "RESUME", "EXTENDED_ARG", "PRECALL", "KW_NAMES", "PUSH_NULL")
    kept = [i for i in _dis.get_instructions(code) if i.opname not in skip]
    index = {ins.offset: n for n, ins in enumerate(kept)}
    jumps = set(_dis.hasjrel) | set(_dis.hasjabs)
    parts = []
    for ins in kept:
        arg = ins.argval
        op = "LOAD_ATTR" if ins.opname == "LOAD_METHOD" else ins.opname  # the compiler's choice
        if isinstance(arg, _types.CodeType):
            arg = code_shape(arg)
        elif ins.opcode in jumps:
            arg = index.get(arg, -1)  # a target by instruction, not by byte offset
        elif ins.opname.endswith(("_FAST", "_DEREF", "_CLOSURE")) or ins.opname == "MAKE_CELL":
            arg = ins.arg
        elif ins.opname == "LOAD_CONST" and isinstance(arg, str) and "." in arg:
            arg = "<qualname>"  # MAKE_FUNCTION's qualified name: the copy may be renamed
        parts.append(op + ":" + repr(arg))
    return _hashlib.sha256("\x1f".join(parts).encode("utf-8", "replace")).hexdigest()


def _unwrap(fn):
    """The function under library decorators (``__wrapped__``), as :func:`codes_of` follows."""
    for _ in range(4):
        code = getattr(fn, "__code__", None)
        inner = getattr(fn, "__wrapped__", None)
        if inner is None or code is None or _is_notebook_code(code):
            break
        fn = inner
    return fn


def reference_shapes(reference):
    """:func:`code_shape` of the reference's top-level codes that are long enough to mean
    something (a function's body, a class's methods)."""
    tops = []
    if isinstance(reference, type):
        for value in vars(reference).values():
            value = _unwrap(getattr(value, "__func__", value))
            if isinstance(value, _types.FunctionType):
                tops.append(value.__code__)
    else:
        target = _unwrap(reference)
        tops.extend(codes_of(target)[:1] if isinstance(target, _types.FunctionType) else [])
    out = set()
    for code in tops:
        if sum(1 for _ in _dis.get_instructions(code)) >= MIN_SHAPE_INSTRUCTIONS:
            out.add(code_shape(code))
    return sorted(out)


def source_shapes(source, marker="### BEGIN SOLUTION"):
    """:func:`code_shape` of the functions (and classes' methods) that ``source`` defines at
    its top level and that contain a line with ``marker`` (a solution notebook's exercise
    cell: the code the student writes, not the code the cell gives), long enough to mean
    something. With ``marker`` None, every such function."""
    try:
        module = compile(source, "<solution>", "exec")
    except (SyntaxError, ValueError):
        return []
    lines = source.splitlines()
    marks = [i + 1 for i, line in enumerate(lines) if marker and marker in line]
    out = set()
    for const in module.co_consts:
        if not isinstance(const, _types.CodeType):
            continue
        # a function's code, or a class body whose constants are its methods' codes
        inner = [c for c in const.co_consts if isinstance(c, _types.CodeType)]
        is_class = any(ins.opname == "STORE_NAME" for ins in _dis.get_instructions(const))
        for code in inner if is_class else [const]:
            # from the ``def`` line: Python 3.10's line table starts at the first statement,
            # after a marker comment right under the ``def`` (3.11+ starts at the ``def``)
            span = [code.co_firstlineno] + [n for _, _, n in code.co_lines() if n is not None]
            if marker and not any(min(span) <= m <= max(span) for m in marks):
                continue
            if sum(1 for _ in _dis.get_instructions(code)) >= MIN_SHAPE_INSTRUCTIONS:
                out.add(code_shape(code))
    return sorted(out)


def _is_notebook_code(code):
    """Code compiled from a notebook cell (IPython's ``<ipython-input-...>`` or
    ``.../ipykernel_<pid>/<hash>.py``), or from ``exec`` of a string."""
    name = str(code.co_filename)
    if name == "<course-grader>":  # the grader's own code, sent as text
        return False
    return name.startswith("<") or "ipykernel_" in name or "/ipython-input" in name


def _canary():
    return None


def _display(func, name):
    """How a student would have written the torch call ``func``: ``torch.softmax``,
    ``torch.nn.functional.softmax``, ``Tensor.softmax``."""
    qual = str(getattr(func, "__qualname__", name))
    if qual.startswith(("TensorBase.", "Tensor.")):
        return "Tensor." + name
    module = str(getattr(func, "__module__", None) or "torch")
    return module + "." + name


class Watch:
    """Context manager around one run of a candidate; :meth:`problem` says what it saw.

    ``forbids``: names of torch functions (``"torch.softmax"``, ``"torch.Tensor.softmax"``)
    and aten operators (``"aten::_softmax"``) the candidate may not call. ``reference``: keys
    (:func:`reference_keys`) of the exercise's reference implementation and ``shapes``
    (:func:`reference_shapes`); ``own``: the candidate's own codes (:func:`own_codes_of`),
    never counted as a copy. ``where`` names the reference in messages. ``profile``: watch the
    code that runs (needed for the reference rule; off, only torch calls are watched).
    """

    def __init__(self, forbids=(), reference=(), shapes=(), own=(), where="", profile=True):
        self.forbids = tuple(forbids)
        self.aten = {f for f in self.forbids if "::" in f}
        self.names = {f.rsplit(".", 1)[-1]: f for f in self.forbids if "::" not in f}
        self.reference = {tuple(k) for k in reference}
        self.shapes = set(shapes)
        self.own = set(own)
        self.where = where
        self.profile = bool(profile)
        self.seen = set()
        self.forbidden = None  # first forbidden call seen, as named in forbids
        self.tampered = None
        self.aten_ops = 0
        self._modes = []
        self._old = None

    # ----------------------------------------------------------------- profiler

    def _hook(self, frame, event, arg):
        if event == "call":
            code = frame.f_code
            self.seen.add(code)
            if code.co_name in _MODE_OFF_NAMES and self._from_student(frame):
                self.tampered = self.tampered or "switched off torch's modes"
            elif (
                code.co_name in _HOOK_NAMES
                and "threading" in code.co_filename
                and (frame.f_back is None or frame.f_back.f_code not in _OWN_CODES)
            ):
                self.tampered = self.tampered or "called threading." + code.co_name
        elif event == "c_call":
            name = getattr(arg, "__name__", "")
            if name in _HOOK_NAMES and frame.f_code not in _OWN_CODES:
                self.tampered = self.tampered or "called sys." + name
            elif name in _MODE_OFF_NAMES and self._from_student(frame):
                self.tampered = self.tampered or "switched off torch's modes"

    @staticmethod
    def _from_student(frame):
        """Whether the code that made this call (``frame`` is the callee of a ``call`` event,
        the caller of a ``c_call``) is neither torch's own (torch pops its modes itself) nor
        this watch's, looking through ``contextlib``/``functools`` wrappers."""
        caller = frame.f_back if frame.f_code.co_name in _MODE_OFF_NAMES else frame
        while caller is not None:
            name = str(caller.f_code.co_filename).replace("\\", "/")
            if not name.endswith(("/contextlib.py", "/functools.py")):
                break
            caller = caller.f_back
        if caller is None:
            return False
        name = str(caller.f_code.co_filename).replace("\\", "/")
        return "/torch/" not in name and caller.f_code not in _OWN_CODES

    def _start_profile(self):
        self._old = (_sys.getprofile(), _threading.getprofile())
        self._bound = self._hook  # one bound method, compared by identity at the end
        _threading.setprofile(self._bound)
        _sys.setprofile(self._bound)
        _canary()
        if _canary.__code__ not in self.seen:
            self.tampered = "the profiler does not run (sys.setprofile was replaced)"

    def _stop_profile(self):
        active = _sys.getprofile()
        _sys.setprofile(self._old[0])
        _threading.setprofile(self._old[1])
        if active is not self._bound and not self.tampered:
            self.tampered = "the profiler was switched off"

    # ----------------------------------------------------------------- torch modes

    def _start_modes(self):
        import torch
        from torch.overrides import TorchFunctionMode
        from torch.utils._python_dispatch import TorchDispatchMode

        watch = self

        class _Functions(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                name = getattr(func, "__name__", "")
                if name in watch.names and watch.forbidden is None:
                    watch.forbidden = _display(func, name)
                return func(*args, **(kwargs or {}))

        class _Operators(TorchDispatchMode):
            @classmethod
            def _should_skip_dynamo(cls):  # no torch._dynamo import (seconds) on first use
                return False

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                watch.aten_ops += 1
                schema = getattr(func, "_schema", None)
                name = getattr(schema, "name", "")
                if name in watch.aten and watch.forbidden is None:
                    watch.forbidden = name
                return func(*args, **(kwargs or {}))

        self._torch = torch
        self._dispatch = _Operators()
        self._modes = [_Functions(), self._dispatch]
        for mode in self._modes:
            mode.__enter__()

    def _stop_modes(self):
        from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

        if self._dispatch not in _get_current_dispatch_mode_stack() and not self.tampered:
            self.tampered = "torch's dispatch mode was switched off"
        for mode in reversed(self._modes):
            try:
                mode.__exit__(None, None, None)
            except Exception:  # the stack was tampered with; the run is rejected anyway
                self.tampered = self.tampered or "torch's modes were switched off"

    # ----------------------------------------------------------------- protocol

    def __enter__(self):
        if self.forbids:
            self._start_modes()
        if self.profile:
            self._start_profile()
        return self

    def __exit__(self, *exc):
        if self.profile:
            self._stop_profile()
        if self.forbids:
            self._stop_modes()
        return False

    def made_tensors(self, outputs):
        """Record whether ``outputs`` (a call's plain outputs) hold a floating tensor: a run
        that made one while the dispatch mode saw no operator hid its work from the check."""
        if not self.forbids or self.aten_ops or self.tampered:
            return
        torch = self._torch
        values = outputs.values() if isinstance(outputs, dict) else ()
        if any(isinstance(v, torch.Tensor) and v.is_floating_point() for v in values):
            self.tampered = "it produced tensors while torch's dispatch mode saw no operation"

    def ran_reference(self):
        """The course implementations (the reference's codes and the others the watch was
        given) that ran, as ``"module.Qual.name"`` joined by ", " (nested functions named by
        their enclosing one); None if none did."""
        if not self.reference:
            return None
        found = set()
        for code in self.seen.copy():  # threads started in the watch may still add to it
            if "course_utils" in code.co_filename:
                key = code_key(code)
                if key is not None and key in self.reference:
                    module = key[0][: -len(".py")].replace("/", ".").removesuffix(".__init__")
                    found.add(module + "." + _shown_qualname(code, module).split(".<locals>")[0])
        return ", ".join(sorted(found)) or None

    def ran_copy(self):
        """The name of a notebook function that ran and has the reference's shape (a copy)."""
        if not self.shapes:
            return None
        for code in self.seen.copy():  # threads started in the watch may still add to it
            if code in self.own or not _is_notebook_code(code):
                continue
            if code_shape(code) in self.shapes:
                return getattr(code, "co_qualname", code.co_name)
        return None

    def problem(self, function, exercise_id):
        """What makes this run earn nothing (a message for the student), or None."""
        if self.tampered:
            return (
                f"not accepted: the check could not watch your {function} ({self.tampered}). "
                "Run it without switching off profilers or torch's modes."
            )
        if self.forbidden:
            call = self.forbidden
            return (
                f"not accepted: your {function} calls {call}, which is not allowed here: "
                f"exercise {exercise_id} asks you to write that computation yourself "
                f"(not allowed: {', '.join(self.forbids)})"
            )
        ref = self.ran_reference()
        if ref:
            return (
                f"not accepted: while the check ran your {function}, the course's own "
                f"implementation ran ({ref}). Exercise {exercise_id} asks for "
                "your own code: an import, fallback() or a name built at run time all count."
            )
        copy = self.ran_copy()
        if copy:
            return (
                f"not accepted: your {function} calls {copy}, a copy of the course's own "
                f"implementation ({self.where}). Exercise {exercise_id} asks for your own code."
            )
        return None


# The Watch's own calls of the profiler functions (starting and stopping it) are not tampering.
_OWN_CODES = frozenset({Watch._start_profile.__code__, Watch._stop_profile.__code__})
