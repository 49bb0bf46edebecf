"""Sealed graded questions: the package a graded class installs carries no answer key.

``course release --seal DIR`` writes ``DIR/course_utils``: a copy of this package in which each
lesson's ``questions.py`` is replaced by a generated one holding, per question, only what the
student needs to answer it (id, title, points, notebook, prompt, evidence, choices, unit,
``personal``) and ``sealed=True``. It holds no ``correct`` letter, no ``truth`` (nor the
functions and constants that compute it), no misconception (whose names and feedback would
give the right letter away by elimination) and no ``backed_by`` claim texts. In that package
``answer()`` records without judging (:func:`course_utils.checks.questions.recorded_answer`),
and the instructor grades with ``course grade --keys CHECKOUT`` (the keys come from the
checkout's own ``questions.py`` files, :func:`course_utils.grading.questions.load_keys`).

This is separate from the Classroom template (``course release --template``): the template
holds the notebooks, the sealed copy holds the package; an instructor ships both.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from course_utils.checks.questions import Question

__all__ = ["PACKAGE_ROOT", "SEALED_MARKER", "sealed_source", "seal_package", "key_texts"]

PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # .../course_utils
SEALED_MARKER = "SEALED"  # a file at the sealed package's root: its questions carry no keys
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo")


def _sealed_question(q: Question) -> str:
    fields = {
        "id": q.id,
        "title": q.title,
        "points": q.points,
        "notebook": q.notebook,
        "prompt": q.prompt,
        "evidence": q.evidence,
        "choices": dict(q.choices) if q.choices is not None else None,
        "unit": q.unit,
        "personal": q.personal,
        "sealed": True,
    }
    body = "".join(f"        {name}={value!r},\n" for name, value in fields.items())
    return f"    Question(\n{body}    ),\n"


def sealed_source(lesson_module: str, questions: list[Question]) -> str:
    """The sealed ``questions.py`` of lesson ``lesson_module`` (e.g.
    ``"course_utils.lessons.nb03_scaled_dot_product"``): prompts and choices only."""
    items = "".join(_sealed_question(q) for q in questions)
    return (
        f'"""{lesson_module.rsplit(".", 1)[-1]}: graded questions, SEALED by `course release '
        "--seal`.\n\nNo key here: `answer()` records your answer, and the instructor grades "
        'it with `course grade --keys`."""\n\n'
        "from course_utils.checks.questions import Question\n\n"
        f"QUESTIONS = [\n{items}]\n"
    )


def key_texts(q: Question) -> list[str]:
    """What a sealed package must not contain for ``q``: its misconceptions' names and
    feedback and its backing claims (the right choice's own text is a choice, so it stays)."""
    texts = [m.name for m in q.misconceptions] + [m.feedback for m in q.misconceptions]
    return texts + list(q.backed_by)


def seal_package(dest: str | Path, source: Path = PACKAGE_ROOT) -> list[Path]:
    """Write the sealed copy of the package at ``source`` into ``dest/course_utils`` (replaced
    if present); returns the ``questions.py`` files it sealed."""
    from course_utils import lessons

    target = Path(dest) / source.name
    if target.resolve() == source.resolve():
        raise ValueError("--seal must write outside the course package")
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, ignore=_IGNORE)
    sealed = []
    for lesson in lessons.discover():
        if not lesson.has("questions"):
            continue
        module = lesson.module("questions")
        rel = Path(*module.__name__.split(".")[1:]).with_suffix(".py")
        path = target / rel
        path.write_text(sealed_source(module.__name__.rsplit(".", 1)[0], module.QUESTIONS))
        sealed.append(path)
    (target / SEALED_MARKER).write_text(
        "The graded questions of this package are sealed: no keys. Grade with "
        "`course grade --keys <instructor checkout>`.\n"
    )
    return sealed
