"""Lesson 08: A Transformer language model (GPT).

The notebook is ``solutions/08_gpt.ipynb``; beside this file: its exercises (``exercises.py``:
the checks and their named mistakes), its graded questions (``questions.py``), and its experiments' sizes and runs per profile (``recipe.py``).
"""

from course_utils.lessons.lesson import GpuEstimate, Lesson

LESSON = Lesson(
    number="08",
    notebook="08_gpt",
    title="A Transformer language model (GPT)",
    slides="38, 47–48, the language-model slides after 48",
    builds="assemble a character-level GPT and train it on tiny-shakespeare with a nanoGPT-style loop (warmup + cosine, AdamW groups, the clipped training step); sampling; KV cache; GPT-3's parameters and FLOPs per token",
    gpu=GpuEstimate(minutes=4.0, memory_gb=6.0),
)
