"""Lesson 05: Masked attention.

The notebook is ``solutions/05_masked_attention.ipynb``; beside this file: its exercises (``exercises.py``:
the checks and their named mistakes), its graded questions (``questions.py``), and its experiments' sizes and runs per profile (``recipe.py``).
"""

from course_utils.lessons.lesson import GpuEstimate, Lesson

LESSON = Lesson(
    number="05",
    notebook="05_masked_attention",
    title="Masked attention",
    slides="38",
    builds="causal and padding masks; the NaN trap; no future leakage, proven by a Jacobian",
    gpu=GpuEstimate(minutes=0.3, memory_gb=0.2),
)
