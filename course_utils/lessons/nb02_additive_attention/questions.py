"""Notebook 02's graded questions (``02.Qk``): prompts, keys, named misconceptions."""

from __future__ import annotations

from course_utils.checks.questions import Misconception, Question
from course_utils.lessons.nb02_additive_attention import LESSON

# 02.Q1 is predicted before training and answered from the count of the early-stops cell: how
# the attention models fail on sentences longer than any they trained on. Every option agrees
# that they fail there (the notebook's thesis gives nothing away); only the run says how. The
# right statement is what the notebook's claim asserts in every profile (``backed_by``: more
# than 80% of the wrong translations stop early in the stored cpu run and in ci); each
# distractor is a failure mode students expect from seq2seq models.

_FAILURE_CHOICES = {
    "a": "Most stop too early: the decoder writes EOS before the reference ends, since no "
    "training target was that long.",
    "b": "Most run too long: having lost its place in the source, the decoder repeats words "
    "and misses the EOS.",
    "c": "Most have the reference's length but words out of order: attention still finds every "
    "word, not where it goes.",
    "d": "About as many stop too early as run too long: past the training lengths, where the "
    "decoder stops is a coin toss.",
}

QUESTIONS = [
    Question(
        id="02.Q1",
        title="How do the attention models fail beyond the training lengths?",
        points=2,
        notebook=LESSON.filename,
        prompt="On the longest test bucket, longer than any training sentence, what do most of "
        "an attention model's wrong translations look like?",
        evidence="the three lines printed just above the question: for each attention model, the "
        "share of its wrong translations of the longest bucket that end before the reference does",
        choices=_FAILURE_CHOICES,
        correct="a",
        misconceptions=(
            Misconception(
                "b",
                "an attention decoder that loses its place loops and never stops",
                "Read the share printed just above the question for each attention model: what "
                "fraction of the wrong translations end before the reference does, and what "
                "does that leave for the ones that run past it?",
            ),
            Misconception(
                "c",
                "on long inputs attention finds the words but loses their order",
                "A translation of the reference's length does not end before it. Read the share "
                "printed just above the question for each attention model.",
            ),
            Misconception(
                "d",
                "a model has no preference about lengths it never saw",
                "Read the share printed just above the question for each attention model: is it "
                "near one half, or far from it?",
            ),
        ),
        backed_by=(
            "On the longest test bucket more than half of every attention model's wrong "
            "translations end before the reference does",
        ),
    ),
]
