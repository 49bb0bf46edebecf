"""Notebook 05's graded questions (``05.Qk``): prompts, keys, named misconceptions."""

from __future__ import annotations

from course_utils.checks.questions import Misconception, Question
from course_utils.lessons.nb05_masked_attention import LESSON

CHEAT_QUESTION = Question(
    id="05.Q1",
    title="Is the unmasked model the better language model?",
    points=1,
    notebook=LESSON.filename,
    prompt=(
        "Where is the generation loss of the model trained without a mask: against the causal "
        "model's, and against the uniform guess (log 25 nats)?"
    ),
    evidence=("the table of section 6 (the column 'generation loss' and the row 'uniform')"),
    choices={
        "a": "Lower than the causal model's, like its training-mode loss: without the mask it "
        "became the better language model.",
        "b": "Between the two: above the causal model's but below the uniform guess, since a "
        "model that learned anything beats a blind guess.",
        "c": "Above the uniform guess: when it has to generate, on average it does worse than a "
        "guess that knows nothing at all.",
        "d": "Equal to its training-mode loss, as for the causal model: the two evaluations "
        "compute the same predictions for any model.",
    },
    correct="c",
    misconceptions=(
        Misconception(
            "a",
            "a lower training loss means a better model",
            "Read the row 'no mask' across: the training-mode loss is computed with the whole "
            "window visible, the generation loss from the prefix alone, as when the model "
            "writes. Which of the two columns says how it does when it generates?",
        ),
        Misconception(
            "b",
            "a model that learned anything cannot average worse than a blind guess",
            "Compare the unmasked model's generation loss with the row 'uniform' too, not only "
            "with the causal model: on which side of log 25 is it? An average over positions "
            "can hide positions where a model did well behind ones where it was confidently "
            "wrong.",
        ),
        Misconception(
            "d",
            "evaluating in training mode computes what generation computes, for any model",
            "Read the row 'no mask' across: are its two numbers close? Only a model whose "
            "position t cannot read position t+1 makes the same predictions both ways.",
        ),
    ),
    backed_by=("at generation time the model without a mask is worse than guessing uniformly",),
)

QUESTIONS = [CHEAT_QUESTION]
