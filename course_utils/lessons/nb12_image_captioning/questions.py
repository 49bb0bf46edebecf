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
            "The pooled vector gets at least as many novel-combination words right as cross "
            "attention, and cross attention names a digit in its held-out cell at least half as "
            "often as one in a place it saw."
        ),
        "b": (
            "Cross attention names a digit in its held-out cell less than half as often as one in "
            "a place it saw, and so gets no more novel-combination words right than the pooled "
            "vector."
        ),
        "c": (
            "Cross attention gets more novel-combination words right than the pooled vector, but "
            "names a digit in its held-out cell correctly less than half as often as one in a "
            "place it saw."
        ),
        "d": (
            "Cross attention gets more novel-combination words right than the pooled vector, and "
            "names a digit in its held-out cell at least half as often as one in a place it saw."
        ),
    },
    correct="c",
    misconceptions=(
        Misconception(
            "a",
            "small scenes need no attention and known parts recombine freely: one summary vector "
            "reads them, and a digit's name does not depend on where it sits",
            "Read the per-word column of the novel combinations for the two models in the "
            "results table, then the two digit-name accuracies printed above.",
        ),
        Misconception(
            "b",
            "once the model fails on the unseen combination, where to look no longer matters "
            "for any word of the caption",
            "Read the per-word column of the novel combinations for the two models in the "
            "results table: the held-out digit is one word of each caption, not all of them.",
        ),
        Misconception(
            "d",
            "attending to the right place is enough to generalise compositionally: looking at "
            "the right patch carries a digit's name to a new place",
            "Compare the two digit-name accuracies printed above: digits in a place training "
            "showed them in, and digits in their held-out cell.",
        ),
    ),
    backed_by=(
        "The captioner with cross attention gets more novel-combination test words right than "
        "the one with a pooled vector",
        "The captioner with cross attention names at least half of the digits in places "
        "training showed them in correctly (far above a guess among ten names)",
        "On novel-combination scenes the captioner with cross attention names a digit in its "
        "held-out cell correctly less than half as often as the other digits",
    ),
)

QUESTIONS = [NOVEL]
