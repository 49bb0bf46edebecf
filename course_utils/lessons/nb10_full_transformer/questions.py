"""Notebook 10's graded questions (``10.Qk``): prompts, keys, named misconceptions."""

from __future__ import annotations

from course_utils.checks.questions import Misconception, Question
from course_utils.lessons.nb10_full_transformer import LESSON

# 10.Q2 is predicted before the two RNNs train and answered from the table by length: beyond
# the training lengths, which attention model holds up better? Notebook 02 taught that
# attention models fall there; which of the two falls further can go either way for a reader
# who has not run it (the Transformer "reads every position directly"), and the run decides.
# The right statement is asserted for the first seed (the table the student reads) in every
# profile (``backed_by``: cpu 64.3% vs 15.2%, ci 31.5% vs 23.9% mean exact match beyond the
# training lengths), and over three paired seeds in cpu and gpu (cpu: +49.1, +44.7, +54.5).
LENGTHS = Question(
    id="10.Q2",
    title="beyond the training lengths: which attention model holds up?",
    points=1,
    notebook=LESSON.filename,
    prompt="Beyond the training lengths, how do the two attention models, the RNN + attention "
    "and the Transformer, compare in exact match?",
    evidence="the exact-match table by source-length bucket printed above (the buckets beyond "
    "the training lengths, and the longest one inside them) and its plot",
    choices={
        "a": "The Transformer holds up better: it reads every source position directly, while "
        "the RNN + attention still passes them through a recurrence.",
        "b": "The RNN + attention holds up better: both fall beyond the training lengths, the "
        "Transformer to a lower exact match.",
        "c": "They hold up alike, within a few points: beyond the training lengths it is "
        "attention that matters, not the model around it.",
        "d": "Neither falls: both stay within a few points of their longest training bucket, "
        "since attention removes the length problem.",
    },
    correct="b",
    misconceptions=(
        Misconception(
            "a",
            "the model that reads every position directly generalises best to longer inputs",
            "Read the two attention models' rows in the buckets right of the dashed line (the "
            "ones beyond the training lengths): which row is higher?",
        ),
        Misconception(
            "c",
            "every attention model generalises alike: attention is what decides",
            "Subtract, in each bucket beyond the training lengths, the Transformer's exact match "
            "from the RNN + attention's: is the difference a few points?",
        ),
        Misconception(
            "d",
            "attention solves length generalisation",
            "Read each attention model's row from its longest training bucket (just left of the "
            "dashed line) to the buckets right of it.",
        ),
    ),
    backed_by=(
        "With the first seed, the run of the table above, beyond the training lengths the RNN + "
        "attention does better than the Transformer (mean exact match over the buckets beyond "
        "them)",
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
