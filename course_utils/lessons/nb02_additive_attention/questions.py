"""Notebook 02's graded questions (``02.Qk``): prompts, keys, named misconceptions."""

from __future__ import annotations

from course_utils.checks.questions import Misconception, Question
from course_utils.lessons.nb02_additive_attention import LESSON

# 02.Q1 is predicted once the split is known (train short, test long) and answered after the
# four models are evaluated. The right statement is what the notebook's claims assert in every
# profile (``backed_by``); each distractor contradicts one of them.

_LENGTH_CHOICES = {
    "a": "Inside the training lengths attention stays high; beyond them it stays just as high: "
    "the decoder reads every word, so length no longer matters.",
    "b": "Inside the training lengths the model without attention does as well; beyond them "
    "attention pulls ahead: attention is for long inputs.",
    "c": "Inside the training lengths attention collapses with length like the model without "
    "it; beyond them both fail: re-weighting adds nothing.",
    "d": "Inside the training lengths attention is far ahead on the longest bucket; beyond them "
    "every attention model falls with each longer bucket.",
}

QUESTIONS = [
    Question(
        id="02.Q1",
        title="Does attention remove the collapse with length?",
        points=2,
        notebook=LESSON.filename,
        prompt="Trained on short sentences, tested on short and long ones: what does exact match "
        "do with attention, inside the training lengths and beyond them?",
        evidence="the four tables (and the plot) of exact match by source length, the bucket "
        "just left of the dashed line and those right of it",
        choices=_LENGTH_CHOICES,
        correct="d",
        misconceptions=(
            Misconception(
                "a",
                "removing the bottleneck makes a model generalise to any length",
                "Read an attention model's table from the longest trained bucket (the last one "
                "left of the dashed line) to the longest test bucket.",
            ),
            Misconception(
                "c",
                "attention only re-weights what the encoder already passed on",
                "Compare, on the longest trained bucket, the additive model's exact match with "
                "that of the model without attention.",
            ),
            Misconception(
                "b",
                "attention is a trick for long inputs only",
                "Compare, on the longest trained bucket, the additive model's exact match with "
                "that of the model without attention; then read each model's longer buckets.",
            ),
        ),
        backed_by=(
            "Inside the training lengths, attention adds at least 25 points of exact match on "
            "the longest trained bucket",
            "Beyond the training lengths every attention model gets worse with every bucket",
            "On the longest test bucket, never seen in training, every attention model is at "
            "least 40 points below its score on the longest trained bucket",
        ),
    ),
]
