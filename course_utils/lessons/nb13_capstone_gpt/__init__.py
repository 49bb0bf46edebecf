"""Lesson 13: Capstone: a GPT from an empty cell.

The notebook is ``solutions/13_capstone_gpt.ipynb``; beside this file: its exercises
(``exercises.py``: six property checks of one ``make_model``, each with its named mistakes),
its graded question (``questions.py``) and its sizes, training and sampling per profile
(``recipe.py``).
"""

from course_utils.lessons.lesson import GpuEstimate, Lesson

LESSON = Lesson(
    number="13",
    notebook="13_capstone_gpt",
    title="Capstone: a GPT from an empty cell",
    slides="38–48",
    builds="write `make_model(vocab_size, block_size)` alone in one empty cell; it is graded by what it does: interface and parameter budget, causality, positions, a validation-loss bar after the course's training loop, generation, written by you",
    gpu=GpuEstimate(minutes=4.0, memory_gb=6.0),
)
