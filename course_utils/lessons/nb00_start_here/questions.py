"""Notebook 00's graded questions (``00.Qk``): prompts, keys, named misconceptions."""

from __future__ import annotations

from course_utils.checks.questions import Misconception, Question
from course_utils.lessons.nb00_start_here import LESSON

# -- graded questions ---------------------------------------------------------------------------
NAIVE_OVERFLOW = Question(
    id="00.Q1",
    title="What the naive softmax does on large logits",
    points=1,
    notebook=LESSON.filename,
    prompt="What does naive_softmax return on the logits [1000, 1001, 1002]?",
    evidence="the two lines printed by the overflow cell: first exp(logits), then the softmax",
    choices={
        "a": "the same weights as for [0, 1, 2], about [0.09, 0.24, 0.67]",
        "b": "nan in every position",
        "c": "[0, 0, 1]: the largest logit takes all the weight",
        "d": "nothing: PyTorch raises an overflow error",
    },
    correct="b",
    misconceptions=(
        Misconception(
            "a",
            "softmax is shift-invariant, so the code is too",
            "The math is shift-invariant, but the code computes exp(logits) first: look at the "
            "first printed line, before any division happens.",
        ),
        Misconception(
            "c",
            "a huge logit simply wins",
            "Look at what exp(logits) printed: are those three numbers finite? What is one of "
            "them divided by their sum?",
        ),
        Misconception(
            "d",
            "floating-point overflow raises an exception",
            "The cell ran to the end and printed two tensors: PyTorch did not stop. Read what "
            "the exponentials became.",
        ),
    ),
    backed_by=("the naive formula gives inf / inf = nan on logits around 1000",),
)

QUESTIONS = [NAIVE_OVERFLOW]
