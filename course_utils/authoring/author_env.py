"""The environment variable that marks an authoring tool's run of a notebook.

Its own module, free of heavy imports: every notebook's first cell imports
:mod:`course_utils.authoring.claims`, which needs this name, and taking it from
:mod:`course_utils.authoring.execute` pulled in nbformat and jsonschema (about 1.1 s of CPU
per kernel: each student run and each graded submission paid it).
"""

from __future__ import annotations

# "1" in the environment of the authoring tools' runs: a failed claim speaks to the author
AUTHOR_ENV_VAR = "COURSE_CLAIMS_AUTHOR"
