"""Python-version independence of what the grader compares (issue 35, newcomer F5).

Pasted-copy detection looks for the solution's functions in the exercise cell by the
``### BEGIN SOLUTION`` marker; Python 3.10's line table starts at a function's first
statement, so a marker right under the ``def`` was outside the function's span there (every
pasted copy passed on 3.10). The span now starts at ``co_firstlineno`` on every version.

On 3.13 the shape of a function depended on its module's imports: ``math.sqrt(d)`` compiles to
``LOAD_ATTR sqrt; PUSH_NULL`` where the same unit says ``import math`` and to a method call
without ``PUSH_NULL`` in a cell that does not, so the course's reference pasted into a notebook
passed the check (``test_checks_shortcuts``' ``_pasted_copy``). ``code_shape`` ignores
``PUSH_NULL``. CI runs these on 3.10, 3.11 and 3.13 (``.github/workflows/ci.yml``).

On 3.10 nine quick-tier tests failed with ``AssertionError: .../python3.10/distutils/core.py``
whenever they ran after ``tests/test_packaging.py`` in the same process: it read TOML with
``pip._vendor.tomli``, and importing ``pip`` makes setuptools' distutils shim stand down for
the rest of the process (``_distutils_hack``'s ``spec_for_pip``, Python < 3.12), so the next
``import setuptools`` (``torch.utils.benchmark`` -> ``torch.utils.cpp_extension``) found the
stdlib's distutils and asserted. The tests now use ``tomli`` (pytest's own dependency there);
nothing the tests or the package import may import ``pip``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from course_utils.checks import guard

ROOT = Path(__file__).resolve().parents[1]

SOURCE = '''
def attention(q, k, v):
    """Docstring."""
    ### BEGIN SOLUTION
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    weights = scores.softmax(dim=-1)
    out = weights @ v
    return out, weights
    ### END SOLUTION
'''


def test_source_shapes_finds_a_function_whose_marker_is_right_under_its_def():
    shapes = guard.source_shapes(SOURCE)
    assert len(shapes) == 1
    copy = SOURCE.replace("### BEGIN SOLUTION", "").replace("def attention", "def mine")
    namespace: dict = {}
    exec(compile(copy, "<ipython-input-1-x>", "exec"), namespace)
    assert guard.code_shape(namespace["mine"].__code__) == shapes[0]


MODULE = """
import math

import torch


def attention(q, k, v):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights
"""


def test_a_copy_pasted_without_the_modules_imports_has_the_shape_of_the_original():
    original: dict = {}
    exec(compile(MODULE, "course_utils/fake_module.py", "exec"), original)
    body = MODULE.split("\n\n\n", 1)[1].replace("def attention", "def mine")
    pasted: dict = {"math": original["math"], "torch": original["torch"]}
    exec(compile(body, "<ipython-input-3-x>", "exec"), pasted)
    assert guard.code_shape(pasted["mine"].__code__) == guard.code_shape(
        original["attention"].__code__
    )


IMPORTS_PIP = re.compile(r"^\s*(from\s+pip[\s.]|import\s+pip\b)", re.MULTILINE)


def test_nothing_the_tests_or_the_package_import_imports_pip():
    """The 3.10 distutils order failure: ``from pip._vendor import tomli`` in a test module."""
    offenders = [
        str(path.relative_to(ROOT))
        for folder in ("tests", "course_utils", "benchmarks")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if IMPORTS_PIP.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []


def test_torch_benchmark_imports_after_the_test_modules_that_read_toml():
    """The order that failed on 3.10, in a fresh interpreter: the TOML-reading test modules'
    imports first, then ``torch.utils.benchmark`` (which imports setuptools)."""
    code = (
        "import sys; sys.path.insert(0, 'tests')\n"
        "import test_packaging, test_nbval_plugin\n"
        "from torch.utils import benchmark\n"
        "import distutils.core as c; assert '_distutils' in c.__file__ or sys.version_info >= (3, 12), c.__file__\n"
        "print('ok')\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stderr[-2000:]


def test_a_refusal_names_the_course_method_with_its_class_on_every_version():
    """3.10's code objects have no ``co_qualname``: "the course's own implementation ran
    (course_utils.modeling.positional.forward)" named no class (12 quick-tier failures on 3.10,
    e.g. test_checks_nb04's RelativePositionBias.forward). Keys are unchanged; only the name
    shown is looked up in the module."""
    from course_utils.modeling import positional

    code = positional.RelativePositionBias.forward.__code__
    assert (
        guard._shown_qualname(code, "course_utils.modeling.positional")
        == "RelativePositionBias.forward"
    )
