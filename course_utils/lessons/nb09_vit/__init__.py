"""Lesson 09: Vision Transformer.

The notebook is ``solutions/09_vit.ipynb``; beside this file: its exercises (``exercises.py``:
the checks and their named mistakes), its graded questions (``questions.py``), and its experiments' sizes and runs per profile (``recipe.py``).
"""

from course_utils.lessons.lesson import GpuEstimate, Lesson

LESSON = Lesson(
    number="09",
    notebook="09_vit",
    title="Vision Transformer",
    slides="51",
    builds="a Vision Transformer on digits (MNIST when cached; CIFAR-10 on a GPU); ablation, class token vs mean pooling; attention maps; position embeddings; one architecture, many modalities",
    gpu=GpuEstimate(minutes=20.0, memory_gb=6.0),
)
