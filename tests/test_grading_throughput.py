"""Grading throughput (issue 30, "A class of 1,000"): what each graded submission's kernel
pays, and what the grader may skip because no verdict depends on it. One test per lever."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))
# authoring-only packages: a notebook's kernel never needs them (about 1.1 s of CPU in all)
AUTHORING_ONLY = ("nbformat", "jsonschema", "nbclient", "rfc3987_syntax")


def _course_imports(path: Path) -> list[str]:
    """The ``course_utils`` import statements of a notebook's code cells."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    found = []
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        try:
            tree = ast.parse(source)
        except SyntaxError:  # IPython magics
            continue
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = (
                    [node.module or ""]
                    if isinstance(node, ast.ImportFrom)
                    else [a.name for a in node.names]
                )
                if any(n.startswith("course_utils") for n in names):
                    found.append(ast.unparse(node))
    return found


def test_KERNEL_IMPORTS_no_notebook_pulls_in_the_authoring_tools():
    """Every notebook's first cell imports ``course_utils.authoring.claims``; it took one
    constant from ``authoring.execute``, which imported nbformat and jsonschema (and
    rfc3987_syntax's grammar): 1.15 s of CPU in every kernel, a fifth of an nb03 grading.
    The course imports of all solution notebooks together import none of them."""
    lines = sorted({line for path in SOLUTIONS for line in _course_imports(path)})
    assert len(lines) > 20, lines  # the notebooks' imports were found
    code = "\n".join(lines) + (
        f"\nimport sys\nprint([m for m in {AUTHORING_ONLY!r} if m in sys.modules])"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout[-2000:]
