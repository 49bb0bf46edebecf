"""Lesson 01: The RNN bottleneck.

The notebook is ``solutions/01_rnn_bottleneck.ipynb``; beside this file: its exercises (``exercises.py``:
the checks and their named mistakes), its graded questions (``questions.py``), and its experiments' sizes and runs per profile (``recipe.py``).
"""

from course_utils.lessons.lesson import GpuEstimate, Lesson

LESSON = Lesson(
    number="01",
    notebook="01_rnn_bottleneck",
    title="The RNN bottleneck",
    slides="4–5",
    builds="a GRU encoder-decoder; the context-vector bottleneck, measured",
    gpu=GpuEstimate(minutes=2.0, memory_gb=0.5),
)
