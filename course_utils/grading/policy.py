"""The trusted side's indirection policy: constructs an honest answer to this course never needs.

The grader has the submission's source. Before anything runs, :func:`review` reads every code
cell the student wrote or changed (cells identical to a cell of the reference notebook are the
course's own text and are skipped) and flags the constructs the red teams used to get points
without the work (``shared/reviews/turn4/redteam-v3.md``):

==================  ==============================================================  ==========
kind                what                                                            scope
==================  ==============================================================  ==========
``ipython_hooks``   IPython input/AST transformers, hooks, events, ``run_cell``     notebook
                    (HARVEST-REWRITE: the grader's own request rewritten)
``tracing``         ``sys.setprofile``/``settrace``/``sys.monitoring``, frames      notebook
                    (W-MAP: the watch switched off)
``threads``         ``threading``, ``multiprocessing``, ``concurrent``, ``asyncio``,  notebook
                    ``subprocess``, ``os.fork`` (W-THREAD: work done off the watch)
``code_rewrite``    ``exec``/``eval``/``compile``, ``__code__``, ``FunctionType``,    exercise
                    ``importlib``, module files (``__file__``), ``sys.modules``,     or
                    ``ctypes`` (REHOME-ALL, W-REHOME)                                notebook
``torch_private``   ``torch._C`` and other private torch names, dispatch/function   exercise
                    modes, ``__torch_dispatch__`` (W-DISPATCH, v2 A7)               or notebook
``fx_jit``          ``torch.fx``, ``torch.jit``, ``torch.compile``, ``torch.export``    exercise
                    (W-FX/JIT)                                                      or notebook
``local_code``      importing a ``.py`` module of the submission's folder or one    exercise
                    the course does not install; ``%run``/``%load``/``%%writefile`` or notebook
                    (PYFILE)
``numpy``           a numpy/scipy round trip in the exercise's code (NUMPY)         exercise
``indirection``     ``getattr``/``setattr`` with a computed name on anything but     exercise
                    ``self``/``cls``; ``globals()``/``vars()``/``__dict__`` lookups
==================  ==============================================================  ==========

*Exercise* scope: the construct is in the exercise's code, i.e. its exercise cell(s) and the
cells defining a name those cells use (helpers, transitively); the flag goes on that exercise.
*Notebook* scope: the construct changes the kernel for everything after it, or sits in a cell
no exercise names; its flag goes on every exercise. A flag is visible in the report and the
CSV, and ``--zero-flagged`` zeroes the exercise (see :func:`~.grader.apply_flag_policy`).

Cost is bounded: cells go through :func:`~course_utils.grading.plan.python_source` (linear,
TOKBOMB) and :mod:`ast`; a cell larger than :data:`MAX_CELL_CHARS` is not parsed and is
flagged ``unreviewed`` instead (no honest cell of this course is that large).
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

MAX_CELL_CHARS = 200_000
MAX_HELPER_DEPTH = 8

NOTEBOOK_ONLY = frozenset({"ipython_hooks", "tracing", "threads", "unreviewed"})
EXERCISE_ONLY = frozenset({"numpy", "indirection"})

WHY = {
    "ipython_hooks": "changes how IPython runs cells (transformers, hooks, events)",
    "tracing": "switches profilers or tracers, or walks interpreter frames",
    "threads": "runs code in other threads or processes",
    "code_rewrite": "builds or rewrites code at run time (exec/compile/code objects/module files)",
    "torch_private": "uses torch's private dispatch machinery",
    "fx_jit": "traces or compiles code with torch.fx/torch.jit/torch.compile",
    "local_code": "runs code from a file outside the notebook",
    "numpy": "hands the work to numpy/scipy",
    "indirection": "looks names up indirectly (computed getattr, globals(), vars())",
    "unreviewed": "a code cell too large for the grader to review",
}

_IPY_ATTRS = frozenset(
    {
        "input_transformers_cleanup",
        "input_transformers_post",
        "input_transformer_manager",
        "ast_transformers",
        "register_magic_function",
        "register_magics",
        "set_hook",
        "set_custom_exc",
        "run_cell",
        "run_cell_async",
        "run_code",
        "run_ast_nodes",
        "transform_cell",
        "events",
        "user_ns_hidden",
        "execution_count",
        "kernel",
        "shell_handlers",
    }
)
_TRACE_ATTRS = frozenset(
    {
        "setprofile",
        "settrace",
        "setprofile_all_threads",
        "settrace_all_threads",
        "monitoring",
        "PyEval_SetProfile",
        "PyEval_SetTrace",
        "_getframe",
        "f_back",
        "f_globals",
        "f_locals",
        "f_builtins",
        "tb_frame",
        "gi_frame",
        "cr_frame",
        "currentframe",
        "stack",
    }
)
_THREAD_MODULES = frozenset(
    {"threading", "_thread", "multiprocessing", "concurrent", "asyncio", "subprocess", "signal"}
)
_THREAD_ATTRS = frozenset({"fork", "forkpty", "posix_spawn", "start_new_thread", "multiprocessing"})
_CODE_NAMES = frozenset(
    {"exec", "eval", "compile", "__import__", "FunctionType", "CodeType", "LambdaType"}
)
_CODE_ATTRS = frozenset(
    {
        "__code__",
        "co_code",
        "co_consts",
        "__globals__",
        "__closure__",
        "__builtins__",
        "__file__",
        "__loader__",
        "__spec__",
        "getsource",
        "getsourcelines",
        "getsourcefile",
        "FunctionType",
        "CodeType",
        "LambdaType",
        "import_module",
        "reload",
        "pythonapi",
        "get_objects",  # gc: any object of the kernel, the grader's included
        "get_referrers",
        "get_referents",
    }
)
_CODE_MODULES = frozenset(
    {
        "importlib",
        "ctypes",
        "cffi",
        "marshal",
        "runpy",
        "code",
        "codeop",
        "linecache",
        "builtins",
        "pkgutil",
        "zipimport",
    }
)
_TORCH_PRIVATE = frozenset(
    {
        "__torch_dispatch__",
        "__torch_function__",
        "DisableTorchFunction",
        "DisableTorchFunctionSubclass",
        "_DisableTorchDispatch",
        "TorchFunctionMode",
        "TorchDispatchMode",
        "_python_dispatch",
        "_disabled_torch_function_impl",
        "_make_wrapper_subclass",
        "_make_subclass",
        "aten",
    }
)
_TORCH_PRIVATE_MODULES = ("torch._", "torch.overrides", "torch.utils._")
_FX_JIT = frozenset({"fx", "jit", "compile", "export", "symbolic_trace"})
_FX_JIT_MODULES = ("torch.fx", "torch.jit", "torch.export", "torch.compiler", "torch._dynamo")
_NUMPY_MODULES = frozenset({"numpy", "scipy", "sklearn", "jax", "tensorflow", "cupy", "numba"})
_NUMPY_ATTRS = frozenset({"numpy", "from_numpy", "__array__"})
_NUMPY_NAMES = frozenset({"np", "numpy", "scipy", "sp"})
_LOCAL_MAGICS = re.compile(r"^\s*%{1,2}(run|load|writefile|load_ext|file)\b", re.MULTILINE)


@dataclass
class Review:
    """What :func:`review` found: flags per exercise id (its scope) and notebook-wide."""

    notebook: list[str] = field(default_factory=list)
    exercise: dict[str, list[str]] = field(default_factory=dict)

    def flags_for(self, exercise_id: str) -> list[str]:
        """Every flag that applies to ``exercise_id`` (its own and the notebook-wide ones)."""
        return sorted(set(self.exercise.get(exercise_id, [])) | set(self.notebook))


def _root(node: ast.AST) -> str | None:
    """The name an attribute chain starts from (``torch`` for ``torch._C.foo``)."""
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _module_kinds(module: str, local: frozenset[str]) -> set[tuple[str, str]]:
    """What importing ``module`` is (``(kind, what)`` pairs)."""
    top = module.split(".")[0]
    found: set[tuple[str, str]] = set()
    if top in _THREAD_MODULES or module == "torch.multiprocessing":
        found.add(("threads", f"import {module}"))
    if top in _CODE_MODULES:
        found.add(("code_rewrite", f"import {module}"))
    if module.startswith(_TORCH_PRIVATE_MODULES):
        found.add(("torch_private", f"import {module}"))
    if module.startswith(_FX_JIT_MODULES):
        found.add(("fx_jit", f"import {module}"))
    if top in _NUMPY_MODULES:
        found.add(("numpy", f"import {module}"))
    if top in local or not _installed(top):
        found.add(("local_code", f"import {module}"))
    return found


def _installed(top: str) -> bool:
    """Whether the top-level module ``top`` is importable here (stdlib or installed), looked
    up without importing it."""
    if top in sys.builtin_module_names or top in getattr(sys, "stdlib_module_names", ()):
        return True
    if top == "course_utils":
        return True
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return False
    if spec is None:
        return False
    locations = list(spec.submodule_search_locations or [])
    where = spec.origin or (locations[0] if locations else "")
    return "site-packages" in where or "dist-packages" in where


def _attr_kinds(node: ast.Attribute) -> set[tuple[str, str]]:
    attr, root, dotted = node.attr, _root(node), _dotted(node)
    found: set[tuple[str, str]] = set()
    if attr in _IPY_ATTRS and (root == "get_ipython" or "ipython" in (root or "").lower()):
        found.add(("ipython_hooks", dotted or attr))
    if attr in ("input_transformers_cleanup", "input_transformers_post", "ast_transformers"):
        found.add(("ipython_hooks", attr))
    if attr in _TRACE_ATTRS and (attr not in ("stack", "monitoring") or root in ("sys", "inspect")):
        found.add(("tracing", dotted or attr))
    if attr in _THREAD_ATTRS and root in ("os", "torch", "_thread"):
        found.add(("threads", dotted or attr))
    if attr in _CODE_ATTRS:
        found.add(("code_rewrite", dotted or attr))
    if attr == "modules" and root == "sys":
        found.add(("code_rewrite", "sys.modules"))
    if root == "torch" and (attr.startswith("_") and not attr.startswith("__") or attr == "ops"):
        found.add(("torch_private", dotted or attr))
    if attr in _TORCH_PRIVATE:
        found.add(("torch_private", dotted or attr))
    if root == "torch" and attr in _FX_JIT and dotted.count(".") == 1:
        found.add(("fx_jit", dotted))
    if attr in _NUMPY_ATTRS:
        found.add(("numpy", f".{attr}"))
    if isinstance(node.value, ast.Name) and node.value.id in _NUMPY_NAMES:
        found.add(("numpy", dotted))
    if attr == "__dict__":
        found.add(("indirection", dotted or attr))
    return found


def _call_kinds(node: ast.Call) -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    func = node.func
    name = func.id if isinstance(func, ast.Name) else None
    if name in ("getattr", "setattr", "delattr", "hasattr") and len(node.args) >= 2:
        target, key = node.args[0], node.args[1]
        computed = not (isinstance(key, ast.Constant) and isinstance(key.value, str))
        selfish = isinstance(target, ast.Name) and target.id in ("self", "cls")
        if computed and not selfish:
            found.add(("indirection", f"{name}(..., <computed name>)"))
    if name in ("globals", "vars", "locals"):
        found.add(("indirection", f"{name}()"))
    if isinstance(func, ast.Attribute) and func.attr in ("run_line_magic", "run_cell_magic"):
        magic = node.args[0] if node.args else None
        if isinstance(magic, ast.Constant) and magic.value in (
            "run",
            "load",
            "writefile",
            "load_ext",
            "file",
        ):
            found.add(("local_code", f"%{magic.value}"))
    return found


def scan(source: str, local: Iterable[str] = ()) -> set[tuple[str, str]]:
    """``(kind, what)`` for every flagged construct in one code cell's ``source``."""
    from course_utils.grading.plan import python_source

    if len(source) > MAX_CELL_CHARS:
        return {("unreviewed", f"{len(source) // 1000} KB in one cell")}
    local = frozenset(local)
    found: set[tuple[str, str]] = {
        ("local_code", f"%{m.group(1)}") for m in _LOCAL_MAGICS.finditer(source)
    }
    try:
        tree = ast.parse(python_source(source))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return found  # it does not run either
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found |= _module_kinds(alias.name, local)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found |= _module_kinds(node.module, local)
            for alias in node.names:  # ``from torch import fx``: the submodule counts too
                sub = _module_kinds(f"{node.module}.{alias.name}", frozenset())
                found |= {k for k in sub if k[0] != "local_code"} | _name_kinds(alias.name)
        elif isinstance(node, ast.ImportFrom) and node.level:
            found.add(("local_code", f"from {'.' * node.level}{node.module or ''} import"))
        elif isinstance(node, ast.Attribute):
            found |= _attr_kinds(node)
        elif isinstance(node, ast.Call):
            found |= _call_kinds(node)
        elif isinstance(node, ast.Name):
            found |= _name_kinds(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name in ("__torch_dispatch__", "__torch_function__"):
                found.add(("torch_private", node.name))
    return found


def _name_kinds(name: str) -> set[tuple[str, str]]:
    if name in _CODE_NAMES:
        return {("code_rewrite", name)}
    if name in _TORCH_PRIVATE:
        return {("torch_private", name)}
    if name in ("setprofile", "settrace", "_getframe", "currentframe"):
        return {("tracing", name)}
    return set()


def _tree(source: str) -> ast.AST | None:
    from course_utils.grading.plan import python_source

    if len(source) > MAX_CELL_CHARS:
        return None
    try:
        return ast.parse(python_source(source))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _used_names(source: str) -> set[str]:
    tree = _tree(source)
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} if tree else set()


def _defined_code(source: str) -> set[str]:
    """Top-level functions and classes a cell defines (``f = lambda``, ``f = partial(g)``
    and ``f = g`` count too): what another cell can call."""
    tree = _tree(source)
    names: set[str] = set()
    for node in getattr(tree, "body", []):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign) and _callable_value(node.value):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def _callable_value(node: ast.AST) -> bool:
    """An assigned value that is code: a lambda, an alias (``f = g``, ``f = mod.g``) or a
    wrapper (``partial(g)``, ``lru_cache(g)``, any call whose first argument is a name)."""
    if isinstance(node, (ast.Lambda, ast.Name, ast.Attribute)):
        return True
    return (
        isinstance(node, ast.Call)
        and bool(node.args)
        and isinstance(node.args[0], (ast.Name, ast.Lambda))
        and _dotted(node.func).split(".")[-1]
        in (
            "partial",
            "lru_cache",
            "cache",
            "wraps",
            "jit",
            "script",
            "compile",
            "symbolic_trace",
            "trace",
        )
    )


def _source(cell: dict[str, Any]) -> str:
    raw = cell.get("source", "")
    return "".join(raw) if isinstance(raw, list) else str(raw)


def _norm(source: str) -> str:
    return "\n".join(line.rstrip() for line in source.strip().splitlines())


def exercise_code(cells: list[dict[str, Any]], own: list[int], reviewed: set[int]) -> set[int]:
    """The cells of one exercise's code: its exercise cells ``own`` and every reviewed cell
    that defines a name they use (helpers), transitively."""
    defines = {i: _defined_code(_source(cells[i])) for i in reviewed}
    code = set(own)
    frontier = set(own)
    for _ in range(MAX_HELPER_DEPTH):
        wanted: set[str] = set()
        for i in frontier:
            wanted |= _used_names(_source(cells[i]))
        new = {i for i, names in defines.items() if i not in code and names & wanted}
        if not new:
            break
        code |= new
        frontier = new
    return code


def review(
    nb: dict[str, Any],
    exercise_cells: dict[str, list[int]],
    reference: dict[str, Any] | None = None,
    local_modules: Iterable[str] = (),
) -> Review:
    """The flags of a submission ``nb`` (see the module docstring).

    ``exercise_cells``: exercise id -> the submission's exercise cell indices (the plan's);
    ``reference``: the reference notebook (its cells' text is the course's, not reviewed);
    ``local_modules``: module names the submission's folder holds (``mine`` for ``mine.py``).
    """
    cells = nb.get("cells", [])
    course = {
        _norm(_source(c))
        for c in (reference or {}).get("cells", [])
        if c.get("cell_type") == "code"
    }
    own_cells = {i for ids in exercise_cells.values() for i in ids}
    reviewed = {
        i
        for i, c in enumerate(cells)
        if c.get("cell_type") == "code" and (i in own_cells or _norm(_source(c)) not in course)
    }
    local = frozenset(local_modules)
    found = {i: scan(_source(cells[i]), local) for i in sorted(reviewed)}
    out = Review()
    in_some_exercise: set[int] = set()
    for ex_id, own in exercise_cells.items():
        code = exercise_code(cells, own, reviewed) & reviewed
        in_some_exercise |= code
        flags = {
            _flag(kind, what, i)
            for i in sorted(code)
            for kind, what in found.get(i, ())
            if kind not in NOTEBOOK_ONLY
        }
        helpers = sorted(code - set(own))
        flags |= solution_copies([_source(cells[i]) for i in helpers], helpers, reference, ex_id)
        out.exercise[ex_id] = sorted(flags)
    out.notebook = sorted(
        {
            _flag(kind, what, i)
            for i, kinds in found.items()
            for kind, what in kinds
            if kind in NOTEBOOK_ONLY or (i not in in_some_exercise and kind not in EXERCISE_ONLY)
        }
    )
    return out


# A shape match says "read these side by side", never "zero it": three honest lines of softmax in
# a helper have the solution's shape (HELPER-FP). ``--zero-flagged`` leaves these flags alone.
REVIEW_ONLY = "review"


def solution_copies(
    sources: list[str], cells: list[int], reference: dict[str, Any] | None, exercise_id: str
) -> set[str]:
    """``review:`` flags for the helper cells (``sources``, at submission indices ``cells``)
    that define a function with the shape of the solution notebook's answer to
    ``exercise_id`` (the solution pasted into another cell, or an honest helper written the
    same way): compared here, on the trusted side; the shapes never reach the kernel."""
    from course_utils.checks import guard
    from course_utils.grading.plan import course_meta, python_source

    solution = [
        _source(c)
        for c in (reference or {}).get("cells", [])
        if course_meta(c) == (exercise_id, "exercise")
    ]
    shapes = {h for src in solution for h in guard.source_shapes(python_source(src))}
    out: set[str] = set()
    for i, src in zip(cells, sources, strict=True):
        if not shapes or len(src) > MAX_CELL_CHARS:
            continue
        if shapes & set(guard.source_shapes(python_source(src), marker=None)):
            out.add(
                f"{REVIEW_ONLY}: solution_shape: cell {i + 1} defines a function shaped like "
                "the solution's (a copy, or an honest helper written the same way)"
            )
    return out


def _flag(kind: str, what: str, cell: int) -> str:
    return f"policy: {kind}: cell {cell + 1} {WHY[kind]} ({what[:80]})"


def local_module_names(folder_files: Iterable[str]) -> set[str]:
    """Module names a submission folder's files provide (``mine.py`` -> ``mine``, a package
    folder ``pkg/__init__.py`` -> ``pkg``)."""
    names: set[str] = set()
    for rel in folder_files:
        parts = rel.replace("\\", "/").split("/")
        if parts[-1].endswith((".py", ".pyc", ".so", ".pyd")) or len(parts) > 1:
            stem = parts[0].split(".")[0]
            if stem.isidentifier():
                names.add(stem)
    return names
