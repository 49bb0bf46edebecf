"""Notebook 13's graded questions (``13.Qk``): prompts, keys, named misconceptions."""

from __future__ import annotations

import math

from course_utils.checks.questions import Question
from course_utils.lessons.nb13_capstone_gpt import LESSON


def confident_start_excess(seed: int = 0) -> float:
    """Question 13.Q1's truth for the student's ``seed``: how many nats per character the
    probe's loss at initialisation (:func:`~.recipe.confident_start_loss`: the course's GPT,
    its logits multiplied by the personal factor k) lies above ln V of the corpus the run
    loads (tiny-shakespeare, bundled with the package). Computed by the function the
    notebook's probe cell calls, so only a student who ran it has the number: with the default
    seed 0 (k = 4.0) it is 0.344 nats; a neighbour's seed gives another k and another number."""
    from course_utils.lessons.nb13_capstone_gpt import recipe

    data = recipe.load_dataset()
    return recipe.confident_start_loss(data, seed) - math.log(data.vocab_size)


# 13.Q1 was a multiple-choice question ("which statement explains your first loss?") whose
# right option a reader who knows cross-entropy picks without running anything (ln V, the
# uniform guess) and which was also the longest option (question audit, issue 32). Now it is
# a number from two of the run's outputs, personal as 03.Q1: the probe's factor k and its
# initial weights come from the student's seed, so reasoning about ln V alone gets nowhere
# near the 0.01-nat band, and a neighbour's number fails.
FIRST_LOSS = Question(
    id="13.Q1",
    title="how far above ln V a confidently wrong start sits",
    points=1,
    notebook=LESSON.filename,
    prompt="By how many nats per character does the probe's loss at initialisation (the "
    "course's GPT with its logits multiplied by your factor k) lie above ln V? Answer the "
    "difference of the two numbers the probe cell printed, to three decimals. Your number is "
    "personal: it depends on your seed (COURSE_STUDENT).",
    evidence="the lines 'probe: ...' printed by the probe cell above (your k, the probe's loss "
    "at initialisation and ln V)",
    truth=confident_start_excess,
    personal=True,
    # the probe prints three decimals: 0.001 of rounding in each of the two numbers at most
    abs_tolerance=0.01,
    unit="nats/char",
    backed_by=(
        "logits k times larger start the probe more than 0.1 nats above ln V",
        "at its own initialisation the course's GPT starts within 0.1 nats of ln V",
    ),
)

QUESTIONS = [FIRST_LOSS]
