"""Lesson 12: Image captioning with cross attention.

The notebook is ``solutions/12_image_captioning.ipynb``; beside this file: its exercises (``exercises.py``:
the checks and their named mistakes), its graded questions (``questions.py``), and its experiments' sizes and runs per profile (``recipe.py``).
"""

from course_utils.lessons.lesson import GpuEstimate, Lesson

LESSON = Lesson(
    number="12",
    notebook="12_image_captioning",
    title="Image captioning with cross attention",
    slides="31",
    builds="image captioning: a ViT encoder and a decoder whose words cross-attend to the image patches; per-word attention maps on the image; the pooled-vector bottleneck; beam search with a length penalty",
    gpu=GpuEstimate(minutes=3.0, memory_gb=1.0),
)
