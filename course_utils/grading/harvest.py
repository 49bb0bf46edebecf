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

Shortcuts (see :mod:`course_utils.checks.guard`): while ``collect_outputs`` runs the candidate,
a watch built from :data:`GUARD_SOURCE` (sent as text, run in a private namespace) records the
code that runs and the torch calls made; the rules (the exercise's ``forbids``, the reference's
code objects and shapes, the same rules as the check cell's) are computed here by :func:`guard_params` from
the grader's own modules and sent as plain data. A candidate that calls a forbidden op, runs the
course's implementation (or a copy of it from another cell) or switches the watch off gets
status ``error`` with a "not accepted: ..." message and a ``shortcut:`` flag: no points.

Re-export detection (flags, see :func:`reexport_flags` in :data:`KERNEL_SOURCE`): the
candidate *is* the reference implementation, wraps or subclasses it, is defined in the
reference's module or in ``course_utils``, or its code (its functions, nested functions and,
for classes, their methods) reaches the reference through its globals or closure.
"""

from __future__ import annotations

import json
import math
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from course_utils.checks import guard
from course_utils.grading import inkernel

MAX_RESULT_JSON_BYTES = 4 << 20  # result.json as written
MAX_JSON_DEPTH = 16  # result.json nests 4 deep
MAX_OUTPUTS_BYTES = 256 << 20  # outputs.npz on disk
MAX_ARRAYS_BYTES = 256 << 20  # all arrays together, uncompressed
MAX_ARRAYS = 4096  # members of outputs.npz
MAX_ENTRIES = 4096  # output entries in result.json

# The code that runs inside the student's kernel lives in a real module (linted, tested);
# the kernel gets its text, the grader imports it for ``fingerprint``.
KERNEL_SOURCE = Path(inkernel.__file__).read_text(encoding="utf-8")
# The watcher of a candidate's run (forbidden torch calls, the course's own implementation),
# sent as text too and run in its own private namespace by ``harvest``.
GUARD_SOURCE = Path(guard.__file__).read_text(encoding="utf-8")

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
    """The code the grader sends to the kernel at a check position.

    What the candidate may not run (the exercise's ``forbids``, the reference's code objects
    and their shapes, see :mod:`course_utils.checks.guard`) is computed here, in the grader,
    from its own modules: a registry patched inside the kernel changes none of it.
    """
    params = {
        "exercise": exercise_id,
        "function": function,
        "seed": int(seed),
        "out": out_dir,
        "module": module,
        "guard": _rules_or_none(exercise_id, module),
        "guard_source": GUARD_SOURCE,
    }
    return _HARVEST_TEMPLATE.format(source=KERNEL_SOURCE + _CALL, params=params)


def guard_params(exercise_id: str, module: str | None = None) -> dict[str, Any]:
    """The rules of exercise ``exercise_id`` as plain data, from the grader's own registry
    (or checks ``module``): ``forbids``, ``reference`` (code keys), ``shapes``, ``where``."""
    import importlib

    from course_utils.checks.core import own_work_keys

    if module:
        exercise = {e.id: e for e in importlib.import_module(module).EXERCISES}[exercise_id]
    else:
        from course_utils import checks

        exercise = checks.get(exercise_id)
    ref = exercise.reference
    where = f"{getattr(ref, '__module__', '')}.{getattr(ref, '__qualname__', '')}".strip(".")
    # The same rules as the check cell's watch (core.make_watch): the reference's shapes only.
    # The solution notebook's shapes are not sent (a hash oracle of the solution) nor used
    # (an honest helper has the solution's shape: HELPER-FP).
    return {
        "forbids": list(exercise.forbids),
        # the reference and every course implementation of the exercise's concepts: the
        # check cell's watch uses the same keys (core.make_watch), so both refuse the same code
        "reference": [list(k) for k in own_work_keys(exercise)],
        "shapes": sorted(set(guard.reference_shapes(ref))),
        "where": where,
    }


def _rules_or_none(exercise_id: str, module: str | None) -> dict[str, Any]:
    """:func:`guard_params`, or no rules when they cannot be computed (the grader has already
    resolved the exercise, so this is a bug, not a student's doing: say so on stderr)."""
    try:
        return guard_params(exercise_id, module)
    except Exception as exc:  # pragma: no cover - defensive
        import sys

        print(f"course grade: no run-time rules for {exercise_id}: {exc}", file=sys.stderr)
        return {"forbids": [], "reference": [], "shapes": [], "where": ""}


def trusted_namespace() -> dict[str, Any]:
    """The in-kernel code's functions as the grader runs them (a real module here)."""
    return vars(inkernel)


def fingerprint(obj: Any) -> str:
    """Hash of a function's code, identical to the one computed inside the kernel."""
    return inkernel.fingerprint(obj)


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


class UnsafeResult(ValueError):
    """What the kernel left in its result folder cannot be read safely."""


def read_capped(folder: str, name: str, cap: int) -> bytes:
    """The bytes of ``folder/name``, a regular file of at most ``cap`` bytes.

    Opened without following symbolic links (neither the file nor ``folder``), without
    blocking on a FIFO, and never read past ``cap`` + 1 bytes: whatever the kernel put there
    (a link to a grader's file, a device, a named pipe, a huge file) costs only its result.
    """
    dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeResult(f"{name} is not a regular file")
        if st.st_size > cap:
            raise UnsafeResult(f"{name} is too large ({st.st_size >> 20} MB, limit {cap >> 20} MB)")
        chunks, total = [], 0
        while total <= cap:
            chunk = os.read(fd, min(1 << 20, cap + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > cap:
            raise UnsafeResult(f"{name} is too large (limit {cap >> 20} MB)")
        return b"".join(chunks)
    finally:
        os.close(fd)


def json_depth_ok(text: str, max_depth: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``text`` nests arrays/objects at most ``max_depth`` deep (strings skipped)."""
    depth, in_string, escaped = 0, False, False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > max_depth:
                return False
        elif ch in "]}":
            depth -= 1
    return True


def parse_result_json(data: bytes) -> Any:
    """``result.json`` parsed with bounded depth; :class:`UnsafeResult` for anything odd."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnsafeResult("the result file is not UTF-8") from exc
    if not json_depth_ok(text):
        raise UnsafeResult(f"the result file nests deeper than {MAX_JSON_DEPTH} levels")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise UnsafeResult(f"the result file is not valid JSON ({str(exc)[:100]})") from exc


def load_arrays(data: bytes, names: set[str]) -> dict[str, Any]:
    """The arrays of ``outputs.npz`` (``data``), checked before anything is inflated.

    Only members named in ``names`` (plus ``.npy``) are read; the number of members, every
    member's declared uncompressed size and their total are checked against the caps, each
    ``.npy`` header is parsed by hand (no pickled or object dtypes; shape x itemsize must be
    exactly the member's size) and a member is never read past its declared size.
    """
    import io
    import zipfile

    import numpy as np
    from numpy.lib import format as npformat

    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise UnsafeResult(f"outputs.npz is not a zip archive ({exc})") from exc
    with zf:
        infos = zf.infolist()
        if len(infos) > MAX_ARRAYS:
            raise UnsafeResult(f"outputs.npz has {len(infos)} members (limit {MAX_ARRAYS})")
        total = sum(max(0, i.file_size) for i in infos)
        if total > MAX_ARRAYS_BYTES:
            raise UnsafeResult(
                f"outputs.npz inflates to {total >> 20} MB (limit {MAX_ARRAYS_BYTES >> 20} MB)"
            )
        arrays: dict[str, Any] = {}
        for info in infos:
            key = info.filename[:-4] if info.filename.endswith(".npy") else None
            if key is None or key not in names:
                continue
            with zf.open(info) as fh:
                version = npformat.read_magic(fh)
                if version == (1, 0):
                    shape, fortran, dtype = npformat.read_array_header_1_0(fh)
                elif version == (2, 0):
                    shape, fortran, dtype = npformat.read_array_header_2_0(fh)
                else:
                    raise UnsafeResult(f"unsupported .npy version {version}")
                if dtype.hasobject or dtype.itemsize == 0 and dtype.kind not in "SU":
                    raise UnsafeResult("object arrays are not accepted")
                count = 1
                for dim in shape:
                    count *= int(dim)
                nbytes = count * dtype.itemsize
                header = fh.tell()
                if header + nbytes != info.file_size:
                    raise UnsafeResult(f"array {key}: its header does not match its size")
                raw = fh.read(nbytes)
                if len(raw) != nbytes:
                    raise UnsafeResult(f"array {key} is truncated")
            arr = np.frombuffer(raw, dtype=dtype, count=count)
            arr = arr.reshape(shape[::-1]).transpose() if fortran else arr.reshape(shape)
            arrays[key] = arr
        return arrays


def load_harvest(out_dir: str, n_cases: int) -> Harvest:
    """Read and validate what the kernel wrote into ``out_dir`` (never trusts its content).

    Every problem (missing, too large, a link, too deep, not JSON, a zip bomb, a forged array
    header) is a ``malformed`` result: the student's error, never the grading machine's.
    """
    try:
        data = read_capped(out_dir, "result.json", MAX_RESULT_JSON_BYTES)
    except FileNotFoundError:
        return Harvest("malformed", "the kernel wrote no result")
    except (OSError, UnsafeResult) as exc:
        return Harvest("malformed", f"the kernel's result file is unusable ({exc})")
    try:
        raw = parse_result_json(data)
    except UnsafeResult as exc:
        return Harvest("malformed", f"the kernel's result file is unreadable ({exc})")
    try:
        return _validate(raw, out_dir, n_cases)
    except Exception as exc:  # anything the validation missed is still the student's
        return Harvest(
            "malformed", f"the kernel's result is unusable ({type(exc).__name__}: {exc})"[:500]
        )


def _decode_entry(entry: Any, arrays: dict[str, Any], n_cases: int) -> tuple[int, str, Any]:
    """One untrusted output entry -> (case, key, value); ValueError when it is malformed.

    An ``array`` entry names an array of the archive (numbers only, never objects); a
    ``python`` entry is a bool, int or float; anything else becomes an opaque stand-in."""
    import numpy as np
    import torch

    if not isinstance(entry, dict):
        raise ValueError("an output entry is not an object")
    case = entry.get("case")
    if not isinstance(case, int) or isinstance(case, bool) or not 0 <= case < n_cases:
        raise ValueError(f"output for an unknown case {str(case)[:20]!r}")
    key = str(entry.get("key", ""))[:100]
    if "array" in entry:
        arr = arrays.get(str(entry["array"]))
        if arr is None:
            raise ValueError(f"array {str(entry['array'])[:20]!r} is missing")
        if arr.dtype.kind not in "biufc":
            raise ValueError(f"arrays of dtype {arr.dtype} are not accepted")
        tensor = torch.from_numpy(np.array(arr, copy=True))
        dtype = _torch_dtype(str(entry.get("dtype", ""))[:40])
        return (
            case,
            key,
            tensor.to(dtype) if dtype is not None and tensor.dtype != dtype else tensor,
        )
    if "python" in entry:
        caster = {"bool": bool, "int": int, "float": float}.get(entry.get("python"))
        value = entry.get("value")
        if caster is None or not isinstance(value, (bool, int, float, type(None))):
            raise ValueError("a malformed scalar output")
        if isinstance(value, int) and abs(value) > 2**63:
            raise ValueError("an integer output out of range")
        return case, key, caster(value) if value is not None else float("nan")
    return case, key, _opaque(str(entry.get("repr", "object"))[:100])


def _validate(raw: Any, out_dir: str, n_cases: int) -> Harvest:

    if not isinstance(raw, dict):
        return Harvest("malformed", "the kernel's result is not an object")
    status = raw.get("status")
    if status not in ("passed", "not_attempted", "error", "missing", "harness_error"):
        return Harvest("malformed", f"the kernel reported an unknown status {str(status)[:50]!r}")
    flags = (
        [str(f)[:300] for f in raw.get("flags", []) if isinstance(f, str)][:10]
        if isinstance(raw.get("flags"), list)
        else []
    )
    fps = raw.get("fingerprints") if isinstance(raw.get("fingerprints"), dict) else {}
    fps = {str(k)[:100]: str(v)[:200] for k, v in list(fps.items())[:10]}
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
    if not isinstance(entries, list) or len(entries) > MAX_ENTRIES:
        return Harvest(
            "malformed", "the kernel's outputs are missing", flags=flags, fingerprints=fps
        )
    outputs: list[dict[str, Any]] = [{} for _ in range(n_cases)]
    try:
        names = {str(e["array"]) for e in entries if isinstance(e, dict) and "array" in e}
        arrays = load_arrays(read_capped(out_dir, "outputs.npz", MAX_OUTPUTS_BYTES), names)
        for entry in entries:
            case, key, value = _decode_entry(entry, arrays, n_cases)
            outputs[case][key] = value
    except (OSError, UnsafeResult, ValueError, TypeError, KeyError, RuntimeError) as exc:
        return Harvest(
            "malformed",
            f"the kernel's outputs are unreadable ({type(exc).__name__}: {str(exc)[:200]})",
            flags=flags,
            fingerprints=fps,
        )
    harvest.outputs = outputs
    return harvest
