"""Notebook 08's graded questions (``08.Qk``): prompts, keys, named misconceptions."""

from __future__ import annotations

from typing import Any

import torch

from course_utils.checks.questions import Misconception, Question
from course_utils.lessons.nb08_gpt import LESSON
from course_utils.modeling.models.gpt import GPT, GPTConfig

TINYSHAKESPEARE_VOCAB = 65  # distinct characters of tiny-shakespeare, the notebook's corpus
OFFLINE_VOCAB = 32  # ... and of the offline corpus it trains on where tiny-shakespeare is missing


def initial_losses() -> tuple[float, float]:
    """Question 08.Q1's right answers: the loss at initialisation on tiny-shakespeare's 65
    characters, and on the offline corpus's 32 (a machine without tiny-shakespeare trains on
    it, and the grader cannot tell which one the student's run had)."""
    return initial_loss(TINYSHAKESPEARE_VOCAB), initial_loss(OFFLINE_VOCAB)


def initial_loss(vocab_size: int = TINYSHAKESPEARE_VOCAB, profile: str = "ci") -> float:
    """The next-token loss of the notebook's GPT at initialisation (question 08.Q1).

    The notebook's cell builds the profile's model with ``torch.manual_seed(0)`` and GPT-2's
    initialisation, and prints its loss on one batch. At initialisation every logit is close to
    0, so the loss hardly depends on which characters the batch holds or on the model's size:
    seeded random ids stand in for the text (the grader needs no corpus) and the ``ci``
    recipe's small model for the profile's (cheap). The notebook's cell on tiny-shakespeare
    prints 4.187 (``ci``), 4.212 (``cpu``) and 4.286 (``gpu``); this gives 4.181 and the
    question accepts 3.5% (4.03 to 4.33): log V = 4.174 passes, the unigram entropy (3.31)
    and log V in bits (6.02) do not. With ``vocab_size=32`` it is the offline corpus's value.
    """
    model_config = GPTConfig(**{**_model_fields(profile), "vocab_size": vocab_size})
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = GPT(model_config).eval()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab_size, (16, model_config.block_size + 1), generator=g)
    with torch.no_grad():
        _, loss = model(ids[:, :-1], ids[:, 1:])
    return float(loss)


def _model_fields(profile: str) -> dict[str, Any]:
    from dataclasses import asdict

    from course_utils.lessons.nb08_gpt import recipe as recipe

    return asdict(recipe.config(profile).model)


INITIAL_LOSS = Question(
    id="08.Q1",
    title="the loss of an untrained GPT",
    points=1,
    notebook=LESSON.filename,
    prompt="What loss (nats per character) did your model have at initialisation, before any "
    "training step?",
    evidence="the line 'loss at initialisation ...' printed by the cell above",
    truth=initial_losses,
    tolerance=0.035,
    unit="nats/char",
    backed_by=("the loss at initialisation is within 0.2 of log V",),
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
        "c": "Only the amount of work: both runs give the same tokens inside and past the "
        "window, and past the window the cached run falls back to a full forward pass at "
        "every step.",
        "d": "Only the amount of work, and the cached run never needs more than one full "
        "forward pass (the prompt's), however long the generation.",
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
