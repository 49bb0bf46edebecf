"""Notebook 09's graded questions (``09.Qk``): prompts, keys, named misconceptions."""

from __future__ import annotations

from course_utils.checks.questions import Misconception, Question
from course_utils.lessons.nb09_vit import LESSON

ROLLOUT = Question(
    id="09.Q1",
    title="does attention rollout explain the decision?",
    points=1,
    notebook=LESSON.filename,
    prompt="How well does the class token's attention rollout agree with occlusion, the drop of "
    "p(true class) when each patch is blanked?",
    evidence="the correlation r printed by the occlusion cell above, and its maps beside the "
    "rollout maps",
    choices={
        "a": "Closely: a correlation above 0.8 over the test images and patches.",
        "b": "Weakly: a correlation between -0.5 and 0.5.",
        "c": "Moderately: a correlation between 0.5 and 0.8.",
        "d": "Inversely: a correlation below -0.5, the patches rollout weights most being the "
        "least important ones.",
    },
    correct="b",
    misconceptions=(
        Misconception(
            "a",
            "attention weights explain the decision",
            "Read the correlation r that the occlusion cell printed, and compare the occlusion "
            "maps with the rollout column of the maps above: do the same patches light up?",
        ),
        Misconception(
            "c",
            "attention weights are a fair, if rough, explanation",
            "Read the size of the correlation r that the occlusion cell printed, and compare the "
            "occlusion maps with the rollout column: how many of the patches agree?",
        ),
        Misconception(
            "d",
            "a map that disagrees points the wrong way",
            "Read the sign of the correlation r that the occlusion cell printed: is it below -0.5?",
        ),
    ),
    backed_by=(
        "rollout and occlusion agree only weakly: their correlation is between -0.5 and 0.5",
    ),
)

QUESTIONS = [ROLLOUT]
