"""Lesson 00: Start here.

The notebook is ``solutions/00_start_here.ipynb``; beside this file: its exercises (``exercises.py``:
the checks and their named mistakes), its graded questions (``questions.py``).
"""

from course_utils.lessons.lesson import GpuEstimate, Lesson

LESSON = Lesson(
    number="00",
    notebook="00_start_here",
    title="Start here",
    slides="",
    builds="setup, profiles, how exercises and grading work; a numerically stable softmax",
    gpu=GpuEstimate(minutes=0.2, memory_gb=0.1),
    gpu_runs="environment report, softmax exercise (nothing sized)",
)
