"""Notebook 11's graded questions (``11.Qk``): prompts, keys, named misconceptions."""

from __future__ import annotations

from course_utils.checks.questions import Misconception, Question
from course_utils.lessons.nb11_attention_at_scale import LESSON

# -- graded questions ---------------------------------------------------------------------------
SCALING_EXPONENT = Question(
    id="11.Q1",
    title="Read your own scaling exponent",
    points=1,
    notebook=LESSON.filename,
    prompt="Which describes the exponent alpha of your fit L(N) = a N^(-alpha) at the same "
    "token budget?",
    evidence="the printed fit and the 'loss vs size' plot of section 7",
    choices={
        "a": "alpha is about 1 or more: the loss falls like 1/N",
        "b": "alpha is small and positive, between 0.01 and 0.6",
        "c": "alpha is about 0 (below 0.01): no trend",
        "d": "alpha is negative: bigger models do worse",
    },
    correct="b",
    misconceptions=(
        Misconception(
            "a",
            "loss is inversely proportional to size",
            "Compare the smallest and largest models' validation losses in the table the sweep "
            "printed: N grew by a large factor; by how much did the loss shrink? On the log-log "
            "plot a 1/N law would be a line of slope -1: compare it with the dashed fit line.",
        ),
        Misconception(
            "c",
            "at a fixed token budget size makes no difference",
            "Look at the dashed fit line and the validation-loss points on the 'loss vs size' "
            "plot: are they flat? Compare the first and last rows of the sweep's table.",
        ),
        Misconception(
            "d",
            "bigger models overfit and do worse",
            "On the 'loss vs size' plot, do the validation-loss points go up or down as N "
            "grows? The printed fit is L = a N^(-alpha), so a loss that falls with N has a "
            "positive alpha.",
        ),
    ),
    backed_by=(
        "the fitted exponent lies between 0.01 and 0.6: the loss falls with N, but far more "
        "slowly than 1/N",
    ),
)

QUESTIONS = [SCALING_EXPONENT]
