"""Notebook 01's graded questions (``01.Qk``): prompts, keys, named misconceptions."""

from __future__ import annotations

from course_utils.checks.questions import Misconception, Question
from course_utils.lessons.nb01_rnn_bottleneck import LESSON

# 01.Q1 is predicted before the hidden-size sweep runs and answered after it; 01.Q2 reads the
# linear probe's table. The right statements are the claims the notebook asserts in every
# profile (``backed_by``); each distractor contradicts one of them.

_SWEEP_CHOICES = {
    "a": "A bigger c gets more sentences right overall, but on the longest sentences exact "
    "match stays below 10% at every size.",
    "b": "A bigger c gets more sentences right overall, and with the largest c the longest "
    "sentences climb towards the short ones' level.",
    "c": "Nothing changes overall or on the longest sentences: with the same data and steps, a "
    "bigger model cannot learn more.",
    "d": "Little changes overall, but the longest sentences gain the most: the extra room goes "
    "first to the inputs with most words to store.",
}

_PROBE_CHOICES = {
    "a": "About the same share at every length: c has a fixed size, so it holds a short and a "
    "long sentence equally well.",
    "b": "Far more than the position-only guess on the shortest sentences, and more than 20 "
    "points less on the longest ones.",
    "c": "No more than the position-only guess at any length: c keeps how long the sentence is, "
    "not which words it holds.",
    "d": "Far more than the position-only guess at every length, losing under 10 points from "
    "shortest to longest: c holds the words, the decoder fails to use them.",
}

QUESTIONS = [
    Question(
        id="01.Q1",
        title="Does a bigger c fix the long sentences?",
        points=2,
        notebook=LESSON.filename,
        prompt="Same data, same steps, same seed, one model per hidden size: what does a "
        "bigger context vector c do to exact match on the longest sentences?",
        evidence="the sweep table (one row per hidden size, the last column of buckets is the "
        "longest sentences) and its plots",
        choices=_SWEEP_CHOICES,
        correct="a",
        misconceptions=(
            Misconception(
                "b",
                "the bottleneck is only a matter of capacity",
                "Read the longest bucket's column of the sweep table from the smallest H to "
                "the largest, and compare it with the shortest bucket's column.",
            ),
            Misconception(
                "c",
                "at a fixed budget, a bigger model cannot learn more",
                'Compare the "overall" column of the sweep table between the smallest and the '
                "largest H.",
            ),
            Misconception(
                "d",
                "extra room goes to the inputs that need it most",
                "For each bucket column of the sweep table, subtract the smallest H's score from "
                "the largest H's: in which bucket is the gain largest, and how far did the "
                "longest bucket move?",
            ),
        ),
        backed_by=(
            "at every hidden size the longest bucket stays below 10% exact match",
            "a larger c gets more sentences right overall: the largest hidden size beats the "
            "smallest on all lengths together",
        ),
    ),
    Question(
        id="01.Q2",
        title="What can a linear probe read out of c?",
        points=1,
        notebook=LESSON.filename,
        prompt="How much of a sentence's words can a linear probe read out of c, by length?",
        evidence="the probe table: the main model's row (H of section 6) and the position-only "
        "row, from the shortest bucket to the longest",
        choices=_PROBE_CHOICES,
        correct="b",
        misconceptions=(
            Misconception(
                "a",
                "a fixed-size summary holds every input equally well",
                "Read the main model's row of the probe table from the shortest bucket to the "
                "longest.",
            ),
            Misconception(
                "c",
                "c only encodes the sentence's length",
                "Compare, on the shortest bucket, the main model's row with the \"position "
                'only" row.',
            ),
            Misconception(
                "d",
                "c holds every word; only the decoder fails to read them",
                "Read the main model's row of the probe table from the shortest bucket to the "
                "longest and count the points it loses; then compare its longest bucket with "
                "the position-only row.",
            ),
        ),
        backed_by=(
            "the probe's accuracy falls by more than 20 points from the shortest to the longest "
            "sentences",
            "on the shortest sentences the probe beats the position-only guess by more than 20 "
            "points",
        ),
    ),
]
