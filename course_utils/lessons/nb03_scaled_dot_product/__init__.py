"""Lesson 03: Scaled dot-product attention.

The notebook is ``solutions/03_scaled_dot_product.ipynb``; beside this file: its exercises (``exercises.py``:
the checks and their named mistakes), its graded questions (``questions.py``), and its experiments' sizes and runs per profile (``recipe.py``).
"""

from course_utils.lessons.lesson import GpuEstimate, Lesson

LESSON = Lesson(
    number="03",
    notebook="03_scaled_dot_product",
    title="Scaled dot-product attention",
    slides="18–29",
    builds="why `1/sqrt(d)`; the matrix form; queries, keys and values",
    gpu=GpuEstimate(minutes=0.3, memory_gb=0.2),
)
