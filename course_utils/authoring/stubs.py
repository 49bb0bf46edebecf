"""Stubs: what a solution region becomes in the student notebook.

A code region (``### BEGIN SOLUTION`` ... ``### END SOLUTION``) becomes one line, indented like
the ``BEGIN`` marker::

    raise NotImplementedError("Exercise 03.1: implement scaled_dot_product_attention")

(the name from the registry's ``Exercise.function``, or, for an exercise without a check, from
the outermost ``def``/``class`` around the region); a region in a markdown cell becomes
``YOUR ANSWER HERE``. Used by :mod:`~course_utils.authoring.validate` (a region whose stub
would not run is a problem of the solution) and :mod:`~course_utils.authoring.release`.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from typing import Any

from course_utils.authoring.regions import BEGIN, Region

ANSWER_PLACEHOLDER = "YOUR ANSWER HERE"
_DEF_OR_CLASS = re.compile(r"^(\s*)(?:async\s+)?(def|class)\s+([A-Za-z_]\w*)")


def enclosing_function(lines: list[str], begin: int) -> tuple[str | None, str | None]:
    """For a region starting at ``lines[begin]``: the kind (``"def"``/``"class"``) of the
    innermost enclosing ``def``/``class`` (``if``/``for``/``with`` blocks are looked through),
    and the name of the outermost one; found by indentation (``None`` when there is none)."""
    marker = lines[begin]
    limit = len(marker) - len(marker.lstrip())
    innermost: str | None = None
    outermost: str | None = None
    for line in reversed(lines[:begin]):
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        m = _DEF_OR_CLASS.match(line)
        opens_block = m is not None or line.split("#")[0].rstrip().endswith(":")
        if indent >= limit or not opens_block:
            continue
        limit = indent
        if m:
            innermost = innermost or m.group(2)
            outermost = m.group(3)
        if indent == 0:
            break
    return innermost, outermost


def stub_line(exercise_id: str, name: str | None) -> str:
    """The line that replaces a code solution region (without indentation)."""
    what = f"implement {name}" if name else "write your answer here"
    return f'raise NotImplementedError("Exercise {exercise_id}: {what}")'


def parses(source: str) -> bool:
    try:
        ast.parse(source)
    except SyntaxError:
        return False
    return True


def stub_source(
    cell: Mapping[str, Any],
    source: str,
    regions: list[Region],
    ex_id: str,
    exercise: Any,
) -> tuple[str, list[str]]:
    """The cell's source with each region replaced by its stub, and the problems found
    (a code region outside a function body, a stub that does not parse)."""
    lines = source.split("\n")
    is_code = cell.get("cell_type") == "code"
    out: list[str] = []
    problems: list[str] = []
    pos = 0
    for region in regions:
        out.extend(lines[pos : region.begin])
        if is_code:
            inner, outer = enclosing_function(lines, region.begin)
            if inner != "def":
                problems.append(
                    f"the solution region on line {region.begin + 1} is not inside a "
                    "function body: its stub would raise as soon as the student runs the "
                    "cell (an untouched notebook must run to the end); put the answer "
                    "inside a def"
                )
            name = exercise.function if exercise is not None else outer
            out.append(region.indent + stub_line(ex_id, name))
        else:
            out.append(region.indent + ANSWER_PLACEHOLDER)
        pos = region.end + 1
    out.extend(lines[pos:])
    new_source = "\n".join(out)
    if not problems and is_code and parses(source) and not parses(new_source):
        problems.append(
            "the student version of this cell is not valid Python: indent the "
            f"'{BEGIN}' marker like the code it replaces"
        )
    return new_source, problems
