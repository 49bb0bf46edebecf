"""Notebook 03's graded questions (``03.Qk``): prompts, keys, named misconceptions."""

from __future__ import annotations

import math

import torch

from course_utils.checks.questions import Misconception, Question
from course_utils.lessons.nb03_scaled_dot_product import LESSON

# The question cells live in the notebook; the truth of a numeric question is recomputed here,
# in the grader's own process, exactly as the notebook's cell computes it.

SPREAD_WIDTH = 2048  # the width 03.Q1 asks about (a row of the variance table in every profile)
SPREAD_PAIRS = 8_000  # (q, x) pairs per width: nb03.config(...).n_pairs in every profile


def measured_score_std(d: int = SPREAD_WIDTH, n_pairs: int = SPREAD_PAIRS, seed: int = 0) -> float:
    """The std of q . x that the notebook's variance table prints for width ``d``: ``n_pairs``
    pairs of standard-normal vectors drawn from a generator seeded with ``d + seed`` (q first,
    then x), ``seed`` being the student's personal seed (0 without an identity)."""
    gen = torch.Generator().manual_seed(d + seed)
    q = torch.randn(n_pairs, d, generator=gen)
    x = torch.randn(n_pairs, d, generator=gen)
    return (q * x).sum(dim=-1).std().item()


def spread_excess_percent(seed: int = 0) -> float:
    """03.Q1's truth for ``seed``: by how many percent the measured std at d = SPREAD_WIDTH
    exceeds sqrt(d), 100 (std - sqrt(d)) / sqrt(d) (negative when it falls short)."""
    root = math.sqrt(SPREAD_WIDTH)
    return 100 * (measured_score_std(seed=seed) - root) / root


QUESTIONS = [
    Question(
        id="03.Q1",
        title="How far is your measured spread from the theory's sqrt(d)?",
        points=1,
        notebook=LESSON.filename,
        prompt=f"At d = {SPREAD_WIDTH}, by how many percent does the std of q·x that your run "
        "measured exceed √d? Answer 100·(std − √d)/√d from the table's two columns, to two "
        "decimals (negative if it falls short). Your number is personal: it depends on your "
        "seed (COURSE_STUDENT).",
        evidence=f"the std(q.x) and sqrt(d) columns of the variance table, row d = {SPREAD_WIDTH}",
        truth=spread_excess_percent,
        personal=True,
        # the table prints two decimals: 100 * 0.01 / 45.25 = 0.022 points of rounding at most
        abs_tolerance=0.03,
        unit="%",
        backed_by=("the measured variance tracks d (Var(q.x)/d within 15% of 1 at every width)",),
    ),
    Question(
        id="03.Q2",
        title="What does the scale do to the weights?",
        points=2,
        notebook=LESSON.filename,
        prompt="You ran the cell with no scaling, with 1/√d and with 1/d. Which statement do "
        "your three runs support?",
        evidence="the three tables your runs of the cell above printed (largest weight and "
        "entropy, at d = 4, 64 and 1024)",
        choices={
            "a": "1/d is the safest scale: its smaller scores keep the weights soft, and at "
            "d = 1024 they still single out the best-matching key.",
            "b": "The scale changes nothing: the softmax normalises the scores, so your three "
            "tables show the same largest weights and entropies.",
            "c": "Only 1/√d keeps the weights alike across widths: unscaled they turn one-hot "
            "as d grows, and 1/d flattens them to uniform.",
            "d": "Unscaled, wider vectors give softer weights, since a sum of more random terms "
            "averages out; 1/√d and 1/d sharpen them again.",
        },
        correct="c",
        misconceptions=(
            Misconception(
                "a",
                "the more the scores are shrunk, the safer",
                "Look at the largest-weight column of your 1/d run at d = 1024 and compare it "
                "with the uniform weight printed in the table's header: how much can that "
                "softmax still prefer one key over the others?",
            ),
            Misconception(
                "b",
                "the softmax undoes any rescaling of the scores",
                "The softmax ignores a constant *added* to every score, not a factor that "
                "multiplies them. Compare the largest-weight column of your three runs at the "
                "same d.",
            ),
            Misconception(
                "d",
                "a sum of d random terms averages out like a mean",
                'Look at the score-spread column of your "none" run: does it shrink or grow '
                "from d = 4 to d = 1024? Section 2 measured why.",
            ),
        ),
        backed_by=(
            "unscaled, the weights turn nearly one-hot as d grows (largest weight above 0.9 "
            "at d = 1024)",
            "scaled by 1/sqrt(d), the weights look alike at every width (largest weight within "
            "0.1, entropy within 0.3 nats)",
            "scaled by 1/d, the weights flatten towards uniform as d grows (at d = 1024: "
            "largest weight below 0.08, entropy within 0.01 nats of log S)",
        ),
    ),
]
