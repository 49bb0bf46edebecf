"""course_utils: the helper package of *Attention & Transformers, hands-on*.

Verified building blocks (``attention``, ``positional``, ``layers``, ``models``), data
(``data``), the training loop (``training``), run profiles (``profiles``), exercise checks
(``checks``) and the grader (``grading``). Every notebook imports from here.
"""

__version__ = "0.1.0"

import sys as _sys

# nbformat validates notebooks with jsonschema which, when the optional package rfc3987_syntax
# is installed (Jupyter's jsonschema[format-nongpl] brings it), builds a parser at import: one to
# three seconds in every process that reads a notebook (the grader, `course release`, the test
# suite's subprocesses). Notebook schemas use no IRI format, so the course goes without it.
_sys.modules.setdefault("rfc3987_syntax", None)
