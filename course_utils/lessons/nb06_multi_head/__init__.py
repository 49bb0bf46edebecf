"""Lesson 06: Multi-head attention.

The notebook is ``solutions/06_multi_head.ipynb``; beside this file: its exercises (``exercises.py``:
the checks and their named mistakes), its graded questions (``questions.py``), and its experiments' sizes and runs per profile (``recipe.py``).
"""

from course_utils.lessons.lesson import GpuEstimate, Lesson

LESSON = Lesson(
    number="06",
    notebook="06_multi_head",
    title="Multi-head attention",
    slides="40–41",
    builds="multi-head attention as a loop over heads, then batched (checked equal) and checked against `nn.MultiheadAttention`",
    gpu=GpuEstimate(minutes=1.0, memory_gb=0.5),
)
