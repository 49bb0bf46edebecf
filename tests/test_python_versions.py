"""Python-version independence of what the grader compares (issue 35, newcomer F5).

Pasted-copy detection looks for the solution's functions in the exercise cell by the
``### BEGIN SOLUTION`` marker; Python 3.10's line table starts at a function's first
statement, so a marker right under the ``def`` was outside the function's span there (every
pasted copy passed on 3.10). The span now starts at ``co_firstlineno`` on every version.
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
