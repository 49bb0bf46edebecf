"""course_utils: the helper package of *Attention & Transformers, hands-on*.

Three layers, each importing only from the ones above it:

- ``modeling``: the verified building blocks (``attention``, ``positional``, ``layers``) and the
  models built from them (``models``: GPT, ViT, the encoder-decoder Transformer, the RNNs);
- ``runtime``: where and how they run (``profiles``, ``devices``, ``training``,
  ``distributed``);
- ``authoring``: the tools that make and check the notebooks (``release``, ``regions``,
  ``leaks``, ``student_work``, ``claims``, ``execute``, ``nbval_strict``).

Beside them: ``data``, the exercise checks (``checks``), the per-notebook experiments
(``recipes``), the grader (``grading``), ``plots``, ``widgets`` and the benchmarks (``bench``).
Every notebook imports from here. The old flat paths (``course_utils.attention``, ...) still
import the same modules (see ``_moved``).
"""

__version__ = "0.1.0"

import sys as _sys

# nbformat validates notebooks with jsonschema which, when the optional package rfc3987_syntax
# is installed (Jupyter's jsonschema[format-nongpl] brings it), builds a parser at import: one to
# three seconds in every process that reads a notebook (the grader, `course release`, the test
# suite's subprocesses). Notebook schemas use no IRI format, so the course goes without it.
_sys.modules.setdefault("rfc3987_syntax", None)

from course_utils import _moved as _moved_modules  # noqa: E402

_moved_modules.install()
