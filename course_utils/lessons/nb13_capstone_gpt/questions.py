"""Notebook 13's graded questions (``13.Qk``): prompts, keys, named misconceptions."""

from __future__ import annotations

from course_utils.checks.questions import Misconception, Question
from course_utils.lessons.nb13_capstone_gpt import LESSON

FIRST_LOSS = Question(
    id="13.Q1",
    title="your model's loss at initialisation",
    points=1,
    notebook=LESSON.filename,
    prompt="The training cell printed your model's loss at initialisation beside ln V, log2 V "
    "and the entropy of the character frequencies. Which statement explains your number?",
    evidence="the line 'loss at initialisation ...' printed by the training cell above, and the "
    "loss after training on the next line",
    choices={
        "a": "ln V is the best loss any model can reach on this text: a first loss near it means "
        "the model has nothing left to learn.",
        "b": "ln V is the loss of a uniform guess over the V characters: a freshly built model "
        "whose logits are all small makes that guess, so its first loss sits near ln V; a first "
        "loss well above it means large initial logits, confidently wrong.",
        "c": "A fresh model already predicts each character as often as it occurs in the text, "
        "so its first loss is the entropy of the character frequencies.",
        "d": "The loss is counted in bits, so a uniform guess costs log2 V and a fresh model "
        "starts there.",
    },
    correct="b",
    misconceptions=(
        Misconception(
            "a",
            "ln V is the floor of the loss",
            "Read the next line of the training cell: after training the loss is far below ln V. "
            "A uniform guess is where a model starts, not the best it can do.",
        ),
        Misconception(
            "c",
            "an untrained model already knows the character frequencies",
            "Compare the entropy of the character frequencies with your first loss: which one "
            "is it near? Frequencies are the first thing training teaches; nothing has been "
            "learned at initialisation.",
        ),
        Misconception(
            "d",
            "the loss is in bits",
            "Compare log2 V with your first loss. The course's loss is the cross-entropy of "
            "PyTorch, with the natural logarithm: nats per character.",
        ),
    ),
    backed_by=(
        "the entropy of the character frequencies is more than 0.5 nats below ln V",
        "training takes the validation loss below ln V",
        "log2 V is more than 1.5 above ln V",
    ),
)

QUESTIONS = [FIRST_LOSS]
