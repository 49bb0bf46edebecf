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
        "a": "Closely: the patches that rollout weights most are the ones whose blanking costs "
        "the true class the most (a correlation near 1).",
        "b": "Weakly: their correlation is below 0.5 over the test images and patches; rollout "
        "shows where information is routed, not which patches the decision rests on.",
        "c": "Inversely: the patches that rollout weights most are the least important ones (a "
        "correlation below -0.5).",
        "d": "Weakly, because the ViT gets most test images wrong, so no map of it can mean "
        "anything.",
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
            "'not an explanation' taken to mean 'points the wrong way'",
            "Read the sign and the size of the correlation r that the occlusion cell printed.",
        ),
        Misconception(
            "d",
            "a map that disagrees means a broken model",
            "Read the ViT's test accuracy in section 3 and the number of misclassified test "
            "images in section 4: is the model wrong on most images?",
        ),
    ),
    backed_by=("rollout and occlusion agree only weakly: their correlation is below 0.5",),
)

QUESTIONS = [ROLLOUT]
