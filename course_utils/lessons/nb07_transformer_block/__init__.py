"""Lesson 07: The Transformer block.

The notebook is ``solutions/07_transformer_block.ipynb``; beside this file: its exercises (``exercises.py``:
the checks and their named mistakes), its graded questions (``questions.py``), and its experiments' sizes and runs per profile (``recipe.py``).
"""

from course_utils.lessons.lesson import GpuEstimate, Lesson

LESSON = Lesson(
    number="07",
    notebook="07_transformer_block",
    title="The Transformer block",
    slides="44–48",
    builds="RNN vs CNN vs self-attention measured; LayerNorm, the MLP and the block (post-norm and pre-norm) built by the student; the original Transformer counted in full",
    gpu=GpuEstimate(minutes=1.0, memory_gb=1.0),
)
