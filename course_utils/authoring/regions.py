"""Solution regions: the lines of a solution cell between ``### BEGIN SOLUTION`` and
``### END SOLUTION`` (nbgrader's markers). :mod:`course_utils.authoring.release` replaces them with stubs;
:mod:`course_utils.authoring.leaks` looks for their lines elsewhere in the student notebook."""

from __future__ import annotations

import re
from dataclasses import dataclass

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"

_MARKER_WORDS = re.compile(r"\b(BEGIN|END)\s+SOLUTION\b")


@dataclass
class Region:
    """One solution region of a cell: line indices of its markers and their indentation."""

    begin: int  # line index of the BEGIN marker
    end: int  # line index of the END marker
    indent: str


def find_regions(source: str) -> tuple[list[Region], list[str]]:
    """The solution regions of a cell's source, and messages for malformed/unbalanced markers.

    Lines are counted from 1 in the messages.
    """
    regions: list[Region] = []
    problems: list[str] = []
    open_at: int | None = None
    indent = ""
    for i, line in enumerate(source.split("\n")):
        stripped = line.strip()
        if stripped == BEGIN:
            if open_at is not None:
                problems.append(
                    f"line {i + 1}: '{BEGIN}' inside the region opened on line "
                    f"{open_at + 1} (regions cannot nest; close it with '{END}' first)"
                )
                continue
            open_at, indent = i, line[: len(line) - len(line.lstrip())]
        elif stripped == END:
            if open_at is None:
                problems.append(f"line {i + 1}: '{END}' without a '{BEGIN}' before it")
                continue
            regions.append(Region(open_at, i, indent))
            open_at = None
        elif _MARKER_WORDS.search(line):
            problems.append(
                f"line {i + 1}: malformed solution marker {stripped!r}: write exactly "
                f"'{BEGIN}' or '{END}' on a line of its own"
            )
    if open_at is not None:
        problems.append(f"line {open_at + 1}: '{BEGIN}' has no '{END}' after it")
    return regions, problems
