"""Skip the IRI grammar jsonschema would build when nbformat validates a notebook.

nbformat validates notebooks with jsonschema which, when the optional package rfc3987_syntax
is installed (Jupyter's ``jsonschema[format-nongpl]`` brings it), builds a parser at import: one
to three seconds in every process that reads a notebook (the grader, ``course release``, the test
suite's subprocesses). Notebook schemas use no IRI format, so the course's own entry points
(``course ...`` and the test suite) go without it by calling :func:`skip_iri_parser` first;
importing ``course_utils`` changes nothing in anyone's process.
"""

from __future__ import annotations

import sys

__all__ = ["skip_iri_parser"]


def skip_iri_parser() -> None:
    """Make ``import rfc3987_syntax`` fail (jsonschema then skips that format); call it before
    nbformat is imported. A process that already imported it keeps it."""
    sys.modules.setdefault("rfc3987_syntax", None)
