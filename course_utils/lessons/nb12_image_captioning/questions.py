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
        "a": "Cross attention solves the new combinations: its exact-caption rate on them is "
        "about as high as on the in-distribution scenes.",
        "b": "The pooled vector does as well as cross attention there: for a combination never "
        "seen, where to look no longer matters.",
        "c": "Cross attention still gets more of the words right than the pooled vector, but it "
        "names a digit that sits in its held-out cell correctly less than half as often as the "
        "other digits.",
        "d": 'Both models name every digit right; only the grammar words ("left of", '
        '"above") go wrong on the new combinations.',
    },
    correct="c",
    misconceptions=(
        Misconception(
            "a",
            "attending to the right place is enough to generalise compositionally",
            "Compare the exact-caption columns of the two test splits in the results table.",
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
