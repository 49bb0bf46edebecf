"""What one lesson is: its notebook, its place in the lecture, and its ``gpu``-profile estimate.

Each lesson folder's ``__init__.py`` holds one :class:`Lesson` (``LESSON``). It imports nothing
heavy (no torch, no recipe), so the registry can be read by the runtime layer at a notebook's
first cell, by ``course doctor`` and by the site before any experiment is loaded.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from types import ModuleType

__all__ = ["GpuEstimate", "Lesson", "PIECES"]

# the modules a lesson folder may hold, and what each one is for
PIECES = {
    "exercises": "the checks of its exercises and their named mistakes (EXERCISES)",
    "questions": "its graded questions and their named misconceptions (QUESTIONS)",
    "recipe": "its experiments: sizes per profile and the runs (gpu_summary() says what runs)",
}


@dataclass(frozen=True)
class GpuEstimate:
    """One notebook in the ``gpu`` profile: estimated minutes and peak GPU memory (GB).

    ESTIMATES from the recipe's sizes, not measurements (``bash benchmarks/gpu.sh`` measures)."""

    minutes: float
    memory_gb: float


@dataclass(frozen=True)
class Lesson:
    """One notebook of the course and the package folder that holds its material.

    ``number`` ("05"), ``notebook`` (the stem, "05_masked_attention"), ``title`` (as its first
    heading reads), ``slides`` (the lecture's slide numbers, "" when none), ``builds`` (the
    README table's "what you build"), ``gpu`` (its estimate in the gpu profile) and, for a
    lesson without a recipe, ``gpu_runs`` (what it runs, in words)."""

    number: str
    notebook: str
    title: str
    slides: str
    builds: str
    gpu: GpuEstimate
    gpu_runs: str = ""

    @property
    def package(self) -> str:
        """The lesson's package: ``course_utils.lessons.nb05_masked_attention``."""
        return f"course_utils.lessons.nb{self.notebook}"

    @property
    def filename(self) -> str:
        """The notebook's file name: ``05_masked_attention.ipynb``."""
        return f"{self.notebook}.ipynb"

    def has(self, piece: str) -> bool:
        """Whether the lesson folder holds ``piece`` (``"exercises"``, ``"recipe"``, ...)."""
        return importlib.util.find_spec(f"{self.package}.{piece}") is not None

    def module(self, piece: str) -> ModuleType:
        """The lesson's ``piece`` module, imported (``lesson.module("recipe")``)."""
        if piece not in PIECES:
            raise KeyError(f"no lesson piece {piece!r}; pieces: {', '.join(PIECES)}")
        return importlib.import_module(f"{self.package}.{piece}")

    def what_on_gpu(self) -> str:
        """What the notebook runs in the ``gpu`` profile, written from its recipe's table."""
        return self.gpu_runs or self.module("recipe").gpu_summary()
