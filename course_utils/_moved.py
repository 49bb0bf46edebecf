"""Old import paths of modules that moved into ``modeling``, ``authoring`` and ``runtime``.

A student's notebook written before the move (``from course_utils.attention import softmax``,
``import course_utils.models.gpt``) keeps working: the old name is the *same module object* as
the new one (one set of classes, one registry, and a patch through either name is seen by
both), never a second copy.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

# old top-level name -> its package today
MOVED = {
    **dict.fromkeys(("attention", "positional", "layers", "models"), "modeling"),
    **dict.fromkeys(
        ("release", "regions", "leaks", "student_work", "claims", "execute", "nbval_strict"),
        "authoring",
    ),
    **dict.fromkeys(("profiles", "devices", "training", "distributed"), "runtime"),
}


def new_name(old: str) -> str | None:
    """``course_utils.models.gpt`` -> ``course_utils.modeling.models.gpt``; None if not moved."""
    parts = old.split(".")
    if len(parts) < 2 or parts[0] != "course_utils" or parts[1] not in MOVED:
        return None
    return ".".join(["course_utils", MOVED[parts[1]], *parts[1:]])


class MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves an old module name to the module at its new place (an alias, not a copy)."""

    def find_spec(self, fullname, path=None, target=None):
        target_name = new_name(fullname)
        if target_name is None:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        module = importlib.import_module(new_name(spec.name))
        self._own_spec = module.__spec__  # the import system overwrites __spec__; put it back
        return module

    def exec_module(self, module):
        module.__spec__ = self._own_spec


def install() -> None:
    """Put the finder first on ``sys.meta_path``, once: before the path finder, which would
    otherwise find ``course_utils.models.gpt`` through the moved package's ``__path__`` and load
    a second copy of the file."""
    if not any(isinstance(f, MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, MovedModuleFinder())
