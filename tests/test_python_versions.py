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
"""

from __future__ import annotations

from course_utils.checks import guard

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
