"""The course's lessons, one package per notebook, found by :func:`discover`.

Opening this folder shows the course's table of contents: ``nb00_start_here/`` ...
``nb12_image_captioning/``. Each lesson package holds everything only that notebook uses:

- ``__init__.py``: ``LESSON`` (:class:`~course_utils.lessons.lesson.Lesson`): number, notebook,
  title, lecture slides, what the student builds, the ``gpu``-profile estimate;
- ``exercises.py``: ``EXERCISES``, the checks and their named mistakes;
- ``questions.py``: ``QUESTIONS``, the graded questions and their named misconceptions;
- ``recipe.py``: the experiments, sized per profile, and ``gpu_summary()``.

Everything several lessons share stays outside (``modeling``, ``runtime``, ``data``, the
``checks`` machinery, ``grading``, ``authoring``). Nothing keeps a hand list of lessons: the
README table, ``course doctor``'s gpu lines, the exercise and question registries and the
contract tests are all derived from :func:`discover`; adding a lesson is adding a folder.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil

from course_utils.lessons.lesson import PIECES, GpuEstimate, Lesson

__all__ = ["GpuEstimate", "Lesson", "PIECES", "discover", "get"]


@functools.cache
def discover() -> tuple[Lesson, ...]:
    """Every lesson, in notebook order (from the ``nbNN_*`` packages beside this file)."""
    found: list[Lesson] = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if not (info.ispkg and info.name.startswith("nb")):
            continue
        lesson = importlib.import_module(f"{__name__}.{info.name}").LESSON
        if f"nb{lesson.notebook}" != info.name:
            raise RuntimeError(f"{info.name}: LESSON names notebook {lesson.notebook!r}")
        found.append(lesson)
    numbers = [lesson.number for lesson in found]
    if len(set(numbers)) != len(numbers):
        raise RuntimeError(f"two lessons share a number: {numbers}")
    return tuple(found)


def get(notebook: str) -> Lesson:
    """The lesson of notebook ``"08"``, ``"08_gpt"`` or ``"08_gpt.ipynb"``; ``KeyError`` if none."""
    key = str(notebook)[:2]
    for lesson in discover():
        if lesson.number == key:
            return lesson
    known = ", ".join(lesson.number for lesson in discover())
    raise KeyError(f"no lesson for notebook {notebook!r}; lessons: {known}")
