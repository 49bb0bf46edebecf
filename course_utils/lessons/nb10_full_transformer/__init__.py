"""Lesson 10: The full Transformer.

The notebook is ``solutions/10_full_transformer.ipynb``; beside this file: its exercises (``exercises.py``:
the checks and their named mistakes), its graded questions (``questions.py``), and its experiments' sizes and runs per profile (``recipe.py``).
"""

from course_utils.lessons.lesson import GpuEstimate, Lesson

LESSON = Lesson(
    number="10",
    notebook="10_full_transformer",
    title="The full Transformer",
    slides="31, 47–48",
    builds="the encoder-decoder Transformer assembled by the student (masks, target shift, loss, greedy decoding); RNN vs RNN+attention vs Transformer trained short, tested on longer sentences",
    # three seeds of both attention models since issue 34 (was two Transformer runs): 2.0 -> 3.0
    gpu=GpuEstimate(minutes=3.0, memory_gb=1.0),
)
