"""Notebook 12's graded questions (``12.Qk``): prompts, keys, named misconceptions."""

from __future__ import annotations

from course_utils.checks.questions import Misconception, Question
from course_utils.lessons.nb12_image_captioning import LESSON

NOVEL = Question(
    id="12.Q1",
    title="cross attention on new combinations",
    points=1,
    notebook=LESSON.filename,
    prompt="On the novel-combination test scenes, which statement does your run support?",
    evidence="the results table (per word, novel combinations) and the digit-name accuracies "
    "printed above",
    choices={
        "a": (
            "Cross attention's exact-caption rate on the novel combinations is at least half its "
            "in-distribution rate, and it names a digit in its held-out cell about as often as a "
            "digit in a place it saw."
        ),
        "b": (
            "The pooled vector gets at least as many novel-combination words right as cross "
            "attention: for a combination never seen, where to look no longer matters."
        ),
        "c": (
            "Cross attention gets more novel-combination words right than the pooled vector, but "
            "names a digit in its held-out cell correctly less than half as often as a digit in a "
            "place it saw."
        ),
        "d": (
            "Cross attention names a digit in its held-out cell about as often as a digit in a "
            "place it saw; its extra errors on the novel combinations are in the relation words "
            '("left of", "above").'
        ),
    },
    correct="c",
    misconceptions=(
        Misconception(
            "a",
            "attending to the right place is enough to generalise compositionally",
            "Compare the exact-caption columns of the two test splits in the results table, "
            "then the two digit-name accuracies printed above.",
        ),
        Misconception(
            "b",
            "the bottleneck does not matter on unseen combinations",
            "Read the per-word column of the novel combinations for the two models in the "
            "results table.",
        ),
        Misconception(
            "d",
            "the digits are easy and the layout is hard",
            "Read the two digit-name accuracies printed above: digits in a place training "
            "showed them in, and digits in their held-out cell.",
        ),
    ),
    backed_by=(
        "The captioner with cross attention gets more novel-combination test words right than "
        "the one with a pooled vector",
        "On novel-combination scenes the captioner with cross attention names a digit in its "
        "held-out cell correctly less than half as often as the other digits",
    ),
)

QUESTIONS = [NOVEL]
