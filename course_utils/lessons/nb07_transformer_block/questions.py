"""Notebook 07's graded questions (``07.Qk``): prompts, keys, named misconceptions."""

from __future__ import annotations

from course_utils.checks.questions import Misconception, Question
from course_utils.lessons.nb07_transformer_block import LESSON

DEPTH_QUESTION = Question(
    id="07.Q2",
    title="Do the activations fade with the gradient?",
    points=1,
    notebook=LESSON.filename,
    prompt=(
        "In the deep stack with neither residuals nor LayerNorm, the gradient vanishes towards "
        "the input. What do the activations (the std of each block's output) do along that "
        "stack?"
    ),
    evidence=(
        "the two tables printed by the depth experiment of section 4 (row 'neither') and its "
        "right-hand plot"
    ),
    choices={
        "a": "they shrink block after block, geometrically like the gradient: the gradient "
        "vanishes because the signal fades away on its way through the stack",
        "b": "they drop once, in the first block, and then keep about the same scale through "
        "every later block: the gradient vanishes in the product of the blocks' Jacobians, not "
        "because the activations fade",
        "c": "they grow block after block, as the residual stream does when there is no LayerNorm",
        "d": "they keep the input's scale (std about 1) in every block: without LayerNorm "
        "nothing changes their scale",
    },
    correct="b",
    misconceptions=(
        Misconception(
            "a",
            "a vanishing gradient means vanishing activations",
            "Read the row 'neither' of the second table: divide the last block's std by the "
            "first block's, and compare that with how much the gradient changed between the "
            "same two blocks in the first table. The right-hand plot shows the whole line.",
        ),
        Misconception(
            "c",
            "every stack of blocks amplifies its input",
            "Compare the row 'neither' with the row 'residual, no LayerNorm' in the second "
            "table: only one of the two adds each block's output to its input.",
        ),
        Misconception(
            "d",
            "without LayerNorm the activations keep the scale of the input",
            "Read the std of the output of block 1 in the row 'neither' of the second table: "
            "the input had std 1.",
        ),
    ),
    backed_by=(
        "neither: the gradient at block 1 is more than 20 orders of magnitude below the last "
        "block's",
        "neither: the activations drop in the first block (std below 0.2, from an input of std "
        "1) and then stay flat (within a factor 2 over all blocks)",
    ),
)

PATH_QUESTION = Question(
    id="07.Q1",
    title="Which layer hears the first token at the last position?",
    points=1,
    notebook=LESSON.filename,
    prompt="Through which contender does the first input x[0] reach the last output y[n-1] "
    "with the largest gradient?",
    evidence="the gradient plot and the lines printed below it (|d y[n-1] / d x[0]| per layer)",
    choices={
        "a": "the GRU: its hidden state carries every earlier token forward to the last step",
        "b": "the convolution stack that covers n: it connects every input to every output",
        "c": "self attention, by orders of magnitude",
        "d": "one convolution: it is the cheapest and the most local",
    },
    correct="c",
    misconceptions=(
        Misconception(
            "a",
            "a recurrent state carries the distant past at full strength",
            "Read |d y[n-1] / d x[0]| of the GRU in the printed lines, and compare it with the "
            "gradient from the last inputs on the plot: how much survives n - 1 steps?",
        ),
        Misconception(
            "b",
            "a path that exists is a path that carries signal",
            "The stack does reach x[0] (count the inputs reaching y[n-1]), but read the size of "
            "its gradient from x[0] in the printed lines: how many layers did it go through?",
        ),
        Misconception(
            "d",
            "the cheapest layer is the best connected",
            "Count the inputs that reach y[n-1] through one convolution in the printed lines: "
            "is x[0] among them?",
        ),
    ),
    backed_by=(
        "self attention's gradient from x[0] is more than 100 times the GRU's and the covering "
        "stack's",
    ),
)

QUESTIONS = [PATH_QUESTION, DEPTH_QUESTION]  # in reading order: section 1, then section 4
