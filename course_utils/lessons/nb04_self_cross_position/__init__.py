"""Lesson 04: Self, cross and position.

The notebook is ``solutions/04_self_cross_position.ipynb``; beside this file: its exercises (``exercises.py``:
the checks and their named mistakes), its graded questions (``questions.py``), and its experiments' sizes and runs per profile (``recipe.py``).
"""

from course_utils.lessons.lesson import GpuEstimate, Lesson

LESSON = Lesson(
    number="04",
    notebook="04_self_cross_position",
    title="Self, cross and position",
    slides="31–36",
    builds="self vs cross attention; permutation equivariance; sinusoidal, learned, RoPE and relative positions",
    gpu=GpuEstimate(minutes=0.5, memory_gb=0.2),
)
