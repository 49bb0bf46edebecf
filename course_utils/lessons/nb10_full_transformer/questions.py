"""Notebook 10's graded questions (``10.Qk``): prompts, keys, named misconceptions."""

from __future__ import annotations

from course_utils.checks.questions import Misconception, Question
from course_utils.lessons.nb10_full_transformer import LESSON

LENGTHS = Question(
    id="10.Q2",
    title="what attention fixes, and what it does not",
    points=1,
    notebook=LESSON.filename,
    prompt="What does the table of exact match by source length show for the three models, "
    "inside and beyond the training lengths?",
    evidence="the exact-match table by source-length bucket printed above (and its plot)",
    choices={
        "a": "The Transformer keeps its accuracy on every bucket, beyond the training lengths "
        "too: with attention, length no longer matters.",
        "b": "Inside the training lengths all three models fall as sentences get longer, at "
        "about the same rate; attention only raises the level.",
        "c": "The plain RNN does as well as the attention models on the longest training "
        "lengths; it only falls behind beyond them.",
        "d": "Inside the training lengths both attention models stay high while the plain RNN "
        "falls; beyond them the attention models fall too.",
    },
    correct="d",
    misconceptions=(
        Misconception(
            "a",
            "attention solves length generalisation",
            "Read the Transformer's row in the buckets right of the dashed line (the ones "
            "beyond the training lengths) against its longest training bucket.",
        ),
        Misconception(
            "b",
            "attention does not remove the bottleneck",
            "Read the rows along the buckets inside the training lengths (left of the dashed "
            "line): which rows fall, and which stay level?",
        ),
        Misconception(
            "c",
            "the bottleneck only shows on unseen lengths",
            "Compare the three rows in the longest bucket inside the training lengths (just "
            "left of the dashed line).",
        ),
    ),
    backed_by=(
        "Both attention models reach at least 90% exact match on every bucket inside the "
        "training lengths",
        "Beyond the training lengths both attention models are worse than on their longest "
        "training lengths",
    ),
)

SHIFT = Question(
    id="10.Q1",
    title="what the target shift is for",
    points=1,
    notebook=LESSON.filename,
    prompt="Trained with the target itself as the decoder input (SHIFT = False) instead of the "
    "shifted target, what does the Transformer do?",
    evidence="the table of final training loss and test exact match printed by the knob cell "
    "above, and its first translations",
    choices={
        "a": "It cannot learn: fed the wrong input at every position, its training loss stays "
        "far above the shifted run's.",
        "b": "It translates better: each position reads one more target word, so its training "
        "loss is lower and its test translations too.",
        "c": "Its training loss falls near 0, yet it translates almost no test sentence "
        "exactly: it learned to copy the word it was shown.",
        "d": "Nothing changes: the causal mask already hides the word each position must "
        "predict, so the shift is only a convention.",
    },
    correct="c",
    misconceptions=(
        Misconception(
            "a",
            "a wrong decoder input makes learning impossible",
            "Read the first and the final training loss in the two rows of the knob cell's table.",
        ),
        Misconception(
            "b",
            "a lower training loss means better translations",
            "Read the test exact match of the two rows of the knob cell's table, and the "
            "translations it printed.",
        ),
        Misconception(
            "d",
            "the causal mask alone stops the decoder from seeing its target",
            "Compare the two rows of the knob cell's table. Position t may look at input "
            "positions up to t: which word sits at position t of the unshifted input?",
        ),
    ),
    backed_by=(
        "Fed the target itself, the Transformer's training loss ends below 0.01 nats per word",
        "Fed the target itself, the Transformer translates fewer than 5% of the test sentences "
        "exactly",
    ),
)

QUESTIONS = [SHIFT, LENGTHS]
