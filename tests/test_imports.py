"""Boundaries of the package: no import cycles, and no module importing another's private names."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "course_utils"


def modules() -> dict[str, Path]:
    """Dotted name -> file, for every module of course_utils."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> list[tuple[str, str | None]]:
    """(module imported, name taken from it or None) for every import in the file, wherever
    it stands (a function-level import is still a dependency)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([node.module] if node.module else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.append((sub, None) if sub in known else (base, alias.name))
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    return {
        name: {target for target, _ in imports(name, path, known) if target in known} - {name}
        for name, path in known.items()
    }


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None (depth-first search, three colours)."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_find_cycle_finds_a_cycle_and_accepts_a_tree():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_course_utils_has_no_import_cycle():
    edges = graph()
    assert {
        "course_utils.modeling.layers",
        "course_utils.runtime.training",
        "course_utils.doctor",
    } <= set(edges)
    assert find_cycle(edges) is None, f"import cycle: {' -> '.join(find_cycle(edges))}"


def test_no_module_imports_another_modules_private_names():
    known = modules()
    offenders = [
        f"{name} imports {target}.{taken}"
        for name, path in known.items()
        for target, taken in imports(name, path, known)
        if taken
        and taken.startswith("_")
        and not taken.startswith("__")
        and target.startswith("course_utils")
        and target != name
    ]
    assert offenders == []


def test_reading_a_notebook_does_not_build_jsonschemas_iri_parser():
    """The course's entry points keep jsonschema from building rfc3987_syntax's grammar (seconds
    per process that imports nbformat: every grader and release run); notebooks still validate;
    importing course_utils alone changes nothing (no import-time global state)."""
    bare = "import sys, course_utils; print(sys.modules.get('rfc3987_syntax', 'untouched'))"
    done = subprocess.run([sys.executable, "-c", bare], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "untouched", done.stdout + done.stderr
    code = (
        "import sys\n"
        "from course_utils.fast_nbformat import skip_iri_parser\n"
        "skip_iri_parser()\n"
        "import nbformat\n"
        "nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell('1')])\n"
        "nbformat.validate(nb)\n"
        "print(sorted(m for m in ('lark', 'rfc3987_syntax') if sys.modules.get(m)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


# Which package may import which: the math knows nothing of how it runs or is taught, the
# runtime nothing of notebooks or grading, the authoring tools nothing of the grader.
FORBIDDEN_IMPORTS = {
    "course_utils.modeling": (
        "course_utils.runtime",
        "course_utils.authoring",
        "course_utils.checks",
        "course_utils.grading",
        "course_utils.lessons",
    ),
    "course_utils.runtime": (
        "course_utils.authoring",
        "course_utils.checks",
        "course_utils.grading",
        "course_utils.lessons",
    ),
    # the kernel-side checks never need the authoring tools (STRICT_ENV: strict_checks)
    "course_utils.checks": ("course_utils.authoring",),
}


def layer_violations(edges: dict[str, set[str]]) -> list[str]:
    """'a imports b' for every import that goes against FORBIDDEN_IMPORTS."""
    return [
        f"{name} imports {target}"
        for name, targets in sorted(edges.items())
        for layer, banned in FORBIDDEN_IMPORTS.items()
        if name == layer or name.startswith(layer + ".")
        for target in sorted(targets)
        if target.startswith(banned)
    ]


def test_layer_violations_are_found():
    edges = {"course_utils.modeling.layers": {"course_utils.runtime.devices"}}
    assert layer_violations(edges) == [
        "course_utils.modeling.layers imports course_utils.runtime.devices"
    ]


def test_the_layers_import_only_downwards():
    edges = graph()
    assert {"course_utils.modeling.attention", "course_utils.runtime.training"} <= set(edges)
    assert layer_violations(edges) == []


def test_no_alias_for_the_old_import_paths():
    """0.1.0 is unreleased: the modules that moved have one name, the new one."""
    import importlib

    for old in [
        "course_utils.attention",
        "course_utils.models.gpt",
        "course_utils.recipes" + ".nb08",  # spelled apart: no rewrite touches it
    ]:
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(old)
