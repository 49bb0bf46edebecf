"""Lesson 11: Attention at scale.

The notebook is ``solutions/11_attention_at_scale.ipynb``; beside this file: its exercises (``exercises.py``:
the checks and their named mistakes), its graded questions (``questions.py``), and its experiments' sizes and runs per profile (``recipe.py``).
"""

from course_utils.lessons.lesson import GpuEstimate, Lesson

LESSON = Lesson(
    number="11",
    notebook="11_attention_at_scale",
    title="Attention at scale",
    slides="44",
    builds="O(n²) measured; tiled (flash-style) attention; SDPA backends; KV cache; tensor parallelism (two all-reduces per block); data-parallel training of the course GPT; scale measured: GPT size sweeps on text (where the data set the floor) and on fresh text of a generated language of known entropy (the distance from the floor as a power law, with a bootstrap interval), loss vs parameters and vs compute on log-log axes",
    gpu=GpuEstimate(minutes=8.0, memory_gb=12.0),
)
