"""The course site, built once per test process (``tests/test_site.py`` and the browser test).

Not a test module; imported by name (``tests/`` is on ``sys.path``). Both modules that use it are
in the ``course-site`` xdist group, so one worker builds the site once per session.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from course_utils.authoring import site

REPO = Path(__file__).resolve().parents[1]
_BUILT: dict[str, site.BuildReport] = {}


def built_site() -> site.BuildReport:
    """The whole site of this checkout, built into a temporary folder on first use."""
    if "site" not in _BUILT:
        out = Path(tempfile.mkdtemp(prefix="course-site-")) / "site"
        _BUILT["site"] = site.build(REPO, out)
    return _BUILT["site"]
