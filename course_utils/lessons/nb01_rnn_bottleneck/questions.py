"""Notebook 01's graded questions (``01.Qk``): prompts, keys, named misconceptions."""

from __future__ import annotations

from course_utils.checks.questions import Misconception, Question
from course_utils.lessons.nb01_rnn_bottleneck import LESSON

# 01.Q1 is predicted before the hidden-size sweep runs and answered after the control (section
# 9): which of the two look-alike remedies did more, a bigger c or more steps? Every option
# but (c) agrees with the notebook's thesis (the longest sentences stay out of reach), so the
# thesis gives nothing away; the student compares two numbers of their run (the sweep's
# largest H, "overall", and the control's "all" row). The notebook's thesis even points the
# wrong way: a reader who believes "c is the bottleneck" expects the bigger c to win. 01.Q2
# reads the linear probe's table. The right statements are the claims the notebook asserts in
# every profile (``backed_by``); each distractor contradicts one of them.

_REMEDY_CHOICES = {
    "a": "The largest c raised exact match on all lengths more than the extra steps did; "
    "neither brought the longest bucket above 25%.",
    "b": "The extra steps raised exact match on all lengths more than the largest c did; "
    "neither brought the longest bucket above 25%.",
    "c": "The extra steps raised exact match on all lengths more than the largest c did, and "
    "brought the longest bucket above 25% too.",
    "d": "Neither raised exact match on all lengths by more than a few points: with this data "
    "the model had learned what it could.",
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
        title="A bigger c or more steps?",
        points=2,
        notebook=LESSON.filename,
        prompt="The sweep trained bigger c's with the same steps; the control trained the main "
        "model with several times the steps. Which did more for exact match on all lengths "
        "together, and what did either do for the longest sentences?",
        evidence="the sweep table's last column (all lengths, one row per hidden size) and the "
        "control's table (its 'all' row and its longest bucket), or the line under them",
        choices=_REMEDY_CHOICES,
        correct="b",
        misconceptions=(
            Misconception(
                "a",
                "the bottleneck is the size of c alone: only a bigger c helps",
                "Compare two numbers of your run: the 'overall' exact match of the largest H in "
                "the sweep table, and the control's exact match on all lengths (its 'all' row).",
            ),
            Misconception(
                "c",
                "the long sentences fail only because the model is under-trained",
                "Read the longest bucket's row of the control's table: how far did several "
                "times the steps move its exact match?",
            ),
            Misconception(
                "d",
                "a model whose training loss has flattened has learned all it can",
                "Compare the 'overall' column of the sweep table from the smallest H to the "
                "largest, and the main model's 'all' row with the control's.",
            ),
        ),
        backed_by=(
            "more steps did more than a bigger c: the control's exact match on all lengths "
            "together beats the largest hidden size's",
            "neither a bigger c nor more steps brings the longest bucket above 25% exact match",
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
