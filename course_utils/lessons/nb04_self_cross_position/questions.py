"""Notebook 04's graded questions (``04.Qk``): prompts, keys, named misconceptions."""

from __future__ import annotations

from course_utils.checks.questions import Misconception, Question

LENGTH_QUESTION = Question(
    id="04.Q1",
    title="Which encodings work at twice the training length?",
    points=1,
    notebook="04_self_cross_position.ipynb",
    prompt=(
        "On sequences of 48 tokens, twice the training length, which encodings still solve the "
        "lag task?"
    ),
    evidence=(
        "the extrapolation table of section 6 (the columns 'T = 48' and 'new ones') and the "
        "plot right of its dotted line"
    ),
    choices={
        "a": "All four: each gives every one of the 48 positions a vector, an angle or a bias, "
        'and the task only needs "two back".',
        "b": "Only RoPE: the relative bias is clipped to the distances seen in training, so it "
        "cannot place the tokens beyond them.",
        "c": "Only the two fixed formulas, sinusoidal and RoPE, which are defined at any "
        "position; the learned table and the clipped bias fail.",
        "d": "Only RoPE and the relative bias, whose scores depend on j - i alone; sinusoidal "
        "and learned lose much on the new positions.",
    },
    correct="d",
    misconceptions=(
        Misconception(
            "a",
            "an encoding defined at every position works at every position",
            "Compare, row by row, the column 'T = 24' with the column 'new ones' (positions "
            "24-47, which no training sequence had), and look at the curves right of the "
            "dotted line: being defined at a position is not the same as having been trained "
            "on it.",
        ),
        Misconception(
            "c",
            "a fixed formula extrapolates, a learned or clipped table does not",
            "Read the sinusoidal row and the relative row of the column 'new ones': which of "
            "the two keeps its training-length accuracy? Ask what is new to each model at "
            "position 40: an input vector it never saw, or only a distance it saw in training "
            "(distances beyond the clip share the bias of the largest one).",
        ),
        Misconception(
            "b",
            "a clipped relative bias cannot handle longer sequences",
            "Read the relative row in the columns 'T = 48' and 'new ones'. Which distances "
            "does the lag task need, and are they inside the clipping range? Clipping only "
            "merges distances larger than the clip.",
        ),
    ),
    backed_by=(
        "RoPE and the relative bias keep at least 95% accuracy at twice the training length "
        "(where the distance the task needs, 2, is one seen in training)",
        "the learned table fails on the new positions (below 25%: its rows there were never "
        "trained)",
        "sinusoidal encodings lose at least 20 points on the new positions",
    ),
)

QUESTIONS = [LENGTH_QUESTION]
