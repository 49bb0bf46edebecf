"""Lesson 02: Additive attention.

The notebook is ``solutions/02_additive_attention.ipynb``; beside this file: its exercises (``exercises.py``:
the checks and their named mistakes), its graded questions (``questions.py``), and its experiments' sizes and runs per profile (``recipe.py``).
"""

from course_utils.lessons.lesson import GpuEstimate, Lesson

LESSON = Lesson(
    number="02",
    notebook="02_additive_attention",
    title="Additive attention",
    slides="6–15",
    builds="Bahdanau attention; alignment maps; the bottleneck removed",
    gpu=GpuEstimate(minutes=1.5, memory_gb=0.5),
)
