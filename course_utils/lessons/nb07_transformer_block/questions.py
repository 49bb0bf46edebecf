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
        "In the deep stack with neither residuals nor LayerNorm, the gradient becomes very small "
        "towards the input. What do the activations (the std of each block's output) do along "
        "that stack?"
    ),
    evidence=(
        "the two tables printed by the depth experiment of section 4 (row 'neither') and its "
        "right-hand plot"
    ),
    choices={
        "a": "they shrink block after block, by a factor that compounds with depth, like the "
        "gradient",
        "b": "they drop once, in the first block, then stay within a factor 2 through the later "
        "blocks",
        "c": "they grow block after block, by a factor that compounds with depth, unlike the "
        "gradient",
        "d": "they keep the input's scale, a std of about 1, in every block from the first to "
        "the last",
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
    title="Does the gradient fade with distance?",
    points=1,
    notebook=LESSON.filename,
    prompt="For the GRU and for the He-initialised convolution stack that covers n: is the "
    "gradient from the farthest input x[0] far below (more than 100 times smaller than) the "
    "gradient from the nearest input x[n-1]?",
    evidence="the table printed below the gradient plot (|dy/dx[0]|, |dy/dx[n-1]| and their "
    "ratio per contender) and the ratios of the three seeds",
    choices={
        "a": "GRU: x[0]'s gradient far below x[n-1]'s. Covering stack (He init): x[0]'s far below "
        "x[n-1]'s too.",
        "b": "GRU: x[0]'s gradient far below x[n-1]'s. Covering stack (He init): the two within a "
        "factor 100 of each other.",
        "c": "GRU: the two within a factor 100 of each other. Covering stack (He init): x[0]'s "
        "far below x[n-1]'s.",
        "d": "GRU: the two within a factor 100 of each other. Covering stack (He init): the two "
        "within a factor 100 of each other.",
    },
    correct="b",
    misconceptions=(
        Misconception(
            "a",
            "every deep path loses signal with distance",
            "Read the ratio column of the covering stack (He init) for the three seeds. Then ask "
            "how many layers the path from the nearest input x[n-1] to y[n-1] crosses: fewer "
            "than the path from x[0]?",
        ),
        Misconception(
            "c",
            "a recurrent state carries the distant past at full strength, and depth is distance",
            "Read the ratio column of the GRU: how much of the gradient survives n - 1 steps? "
            "Then the stack's ratio, for each seed.",
        ),
        Misconception(
            "d",
            "a recurrent state carries the distant past at full strength",
            "Read the ratio column of the GRU for the three seeds: how much of the gradient "
            "survives n - 1 recurrent steps?",
        ),
    ),
    backed_by=(
        "the GRU's gradient from x[0] is more than four orders of magnitude smaller than from "
        "the last input, for each of 3 seeds",
        "through the He-initialised covering stack the gradients from x[0] and from the last input "
        "are within a factor 100 of each other, for each of 3 seeds",
    ),
)

QUESTIONS = [PATH_QUESTION, DEPTH_QUESTION]  # in reading order: section 1, then section 4
