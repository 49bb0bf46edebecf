"""Notebook 11's graded questions (``11.Qk``): prompts, keys, named misconceptions."""

from __future__ import annotations

from course_utils.checks.questions import Misconception, Question
from course_utils.lessons.nb11_attention_at_scale import LESSON

# -- graded questions ---------------------------------------------------------------------------
SCALING_EXPONENT = Question(
    id="11.Q1",
    title="Is it one power law?",
    points=1,
    notebook=LESSON.filename,
    prompt="At the same token budget, does one power law L = a N^(-alpha) describe your sweep "
    "over the whole range of sizes?",
    evidence="the local slopes, the residuals of the two fits and their squared errors, printed "
    "by the fit cell of section 7, and the 'loss vs size' plot",
    choices={
        "a": "Yes: the local slopes between neighbouring sizes stay within a factor 1.5 of one "
        "another, so one exponent describes the whole range.",
        "b": "No: the local slope between the two largest sizes is less than half the slope "
        "between the two smallest, and the fit with a floor has a far smaller squared error.",
        "c": "No: the local slope between the two largest sizes is more than twice the slope "
        "between the two smallest, so every tenfold increase in size buys more than the one "
        "before.",
        "d": "No: the loss stops falling; the largest model does no better than the smallest.",
    },
    correct="b",
    misconceptions=(
        Misconception(
            "a",
            "a fitted exponent proves a power law",
            "A line can be fitted to any points. Read the local slopes the fit cell printed, "
            "first against last, and the signs of the pure power law's residuals: do they "
            "scatter, or run +, -, ..., +?",
        ),
        Misconception(
            "c",
            "returns to scale grow with scale",
            "Read the local slopes the fit cell printed in order of N: do they grow or shrink?",
        ),
        Misconception(
            "d",
            "at a fixed token budget size makes no difference",
            "Compare the first and the last validation losses of the sweep's table.",
        ),
    ),
    backed_by=(
        "at the same token budget the validation loss falls with model size (no larger model more "
        "than 0.02 nats/char above a smaller one; the largest beats the smallest)",
        "the local log-log slope between the two largest sizes is less than half the slope "
        "between the two smallest",
        "the fit with a floor, L = E + A N^-alpha, has less than a quarter of the pure power "
        "law's squared error",
    ),
)

QUESTIONS = [SCALING_EXPONENT]
