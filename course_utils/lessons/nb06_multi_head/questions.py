"""Notebook 06's graded questions (``06.Qk``): prompts, keys, named misconceptions."""

from __future__ import annotations

from course_utils.checks.questions import Misconception, Question
from course_utils.lessons.nb06_multi_head import LESSON

HEADS_COST_QUESTION = Question(
    id="06.Q1",
    title="What do more heads cost?",
    points=1,
    notebook=LESSON.filename,
    prompt=(
        "At a fixed width D = 64, how do the parameters, the matmul FLOPs and the number of "
        "attention scores of the layer change from 1 head to 16 heads?"
    ),
    evidence="the line printed by the cell 'What do more heads cost?', run with several n_heads",
    choices={
        "a": "The parameters and the matmul FLOPs stay the same; only the number of attention "
        "scores grows, in proportion to H.",
        "b": "The parameters and the matmul FLOPs both grow in proportion to H: every head "
        "brings its own projections of width D.",
        "c": "The parameters stay the same, but the matmul FLOPs grow in proportion to H: every "
        "head computes its own T x T scores.",
        "d": "Nothing changes, not even the number of attention scores: the heads only share "
        "out the same T x T work between them.",
    },
    correct="a",
    misconceptions=(
        Misconception(
            "b",
            "every head brings its own full-width projections",
            "Run the cell with n_heads = 1 and with n_heads = 16 and compare the parameter "
            "counts it prints. How wide is one head's W_Q^h when D = 64 is split between 16 "
            "heads?",
        ),
        Misconception(
            "c",
            "more score matrices mean more matrix-multiply FLOPs",
            "Run the cell with n_heads = 1 and with n_heads = 16 and compare the matmul FLOPs "
            "it prints. One head's Q_h K_h^T multiplies vectors of width D / H: count its "
            "multiply-adds, then multiply by H.",
        ),
        Misconception(
            "d",
            "splitting into heads is pure bookkeeping",
            "Run the cell with n_heads = 1 and with n_heads = 16 and compare the last number it "
            "prints, the attention scores: how many T x T matrices does the layer compute?",
        ),
    ),
    backed_by=(
        "from 1 to 16 heads at a fixed width, the parameter count does not change",
        "from 1 to 16 heads at a fixed width, the matmul FLOPs do not change",
        "the number of attention scores grows in proportion to the number of heads",
    ),
)


def crossover_length(d_model: int = 64, longest: int = 4096) -> float:
    """The sequence length T at which the two attention matmuls of a layer of width
    ``d_model`` cost as many FLOPs as its two projections (the formulas of notebook 06)."""
    from course_utils.lessons.nb06_multi_head import recipe as nb06

    for T in range(1, longest + 1):
        qkv, scores, weighted, out = nb06.mha_flops(1, T, d_model, 4).values()
        if scores + weighted >= qkv + out:
            return float(T)
    raise ValueError(f"the attention matmuls never catch up below T = {longest}")


CROSSOVER_QUESTION = Question(
    id="06.Q2",
    title="Where does attention catch up with the projections?",
    points=1,
    notebook=LESSON.filename,
    prompt=(
        "At which length T do the two attention matmuls cost exactly as many FLOPs as the two "
        "projections, at D = 64?"
    ),
    evidence=(
        "the line printed by the cell 'Where does attention catch up?' for the T_try you set, "
        "or the formulas of the FLOP table"
    ),
    truth=crossover_length,
    abs_tolerance=0.01,  # a whole number is asked: 127.6 is not 128
    unit="tokens",
    backed_by=(
        "at D = 64 the attention matmuls cost as many FLOPs as the projections at T = 2D, "
        "fewer one token below and more one token above",
    ),
)

QUESTIONS = [HEADS_COST_QUESTION, CROSSOVER_QUESTION]
