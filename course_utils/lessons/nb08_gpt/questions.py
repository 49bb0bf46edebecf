"""Notebook 08's graded questions (``08.Qk``): prompts, keys, named misconceptions."""

from __future__ import annotations

from course_utils.checks.questions import Misconception, Question
from course_utils.lessons.nb08_gpt import LESSON

TOO_LARGE_STD = 0.2  # ten times GPT-2's 0.02: the initialisation bug that 08.Q1 measures


def too_large_init_loss() -> float:
    """Question 08.Q1's right answer: the loss at initialisation of notebook 08's probe model
    (the ``ci`` size in every profile) with every weight matrix drawn at std 0.2, on the
    training windows of seed 0 of the corpus the run loads (tiny-shakespeare, bundled with the
    package). It is computed by the same function as the notebook's cell, so only a student who
    ran the cell has it: on tiny-shakespeare 5.51, while log V = 4.17, the GPT-2-initialised
    model's 4.19, the unigram entropy 3.31 and log2 V = 6.02 are all outside the 3% band."""
    from course_utils.lessons.nb08_gpt import recipe

    return recipe.initial_loss_at_std(recipe.load_dataset(), TOO_LARGE_STD)


INITIAL_LOSS = Question(
    id="08.Q1",
    title="the loss of a GPT initialised too large",
    points=1,
    notebook=LESSON.filename,
    prompt="What loss (nats per character) did the probe model have at initialisation when "
    "every weight matrix was drawn with standard deviation 0.2, ten times GPT-2's?",
    evidence="the line 'std 0.2: loss at initialisation ...' printed by the probe cell above",
    truth=too_large_init_loss,
    tolerance=0.03,
    unit="nats/char",
    backed_by=(
        "the loss at initialisation is within 0.2 of log V",
        "weights ten times too large start the loss more than 0.5 above log V",
    ),
)

KV_CACHE = Question(
    id="08.Q2",
    title="what the KV cache changes",
    points=1,
    notebook=LESSON.filename,
    prompt="What did the KV cache change in greedy generation, inside the model's window and "
    "past it?",
    evidence="the two lines printed by the timing cell above (same tokens, rebuilds)",
    choices={
        "a": "The text: caching keys and values is a shortcut that approximates the full "
        "computation, so the cached run's tokens drift away from the uncached run's.",
        "b": "Inside the window only the amount of work; past it the text too, because once the "
        "window slides, the cached keys and values belong to shifted positions.",
        "c": "Only the amount of work: the same tokens inside and past the window, where the "
        "cached run falls back to a full forward pass at every step.",
        "d": "Only the amount of work, and the cached run never needs more than one full "
        "forward pass, the prompt's, however long the generation runs.",
    },
    correct="c",
    misconceptions=(
        Misconception(
            "a",
            "the KV cache is an approximation",
            "Read 'same tokens' in both lines the timing cell printed. Appending a token to a "
            "causal sequence does not change the keys and values of the tokens before it.",
        ),
        Misconception(
            "b",
            "a sliding window makes the cached run's tokens differ",
            "Read the 'past the window' line: are the tokens the same, and at how many of the "
            "steps was the cache rebuilt? Ask what a rebuild computes from.",
        ),
        Misconception(
            "d",
            "the cache is built once and then only extended",
            "Read the 'past the window' line: at how many of its steps was the cache rebuilt? "
            "With learned positions, every cached position changes when the window slides.",
        ),
    ),
    backed_by=(
        "with and without the cache, greedy decoding gives the same tokens",
        "inside the window the cache is never rebuilt; past it, it is rebuilt at every step "
        "after the window is full",
    ),
)

QUESTIONS = [INITIAL_LOSS, KV_CACHE]
