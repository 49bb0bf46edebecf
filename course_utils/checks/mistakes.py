"""Shared catalogues of classic mistakes: one name and one hint for a mistake that the
exercises of several lessons can make.

An entry is not a :class:`~course_utils.checks.core.Mistake` yet: each exercise reproduces the
mistake on its own inputs, so it calls the entry with its implementation
(``MASK_INVERTED(my_variant)``); where its feedback must say more than the shared hint (the
names of that exercise's tensors), it passes its own ``hint`` and keeps the shared name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from course_utils.checks.core import Mistake


@dataclass(frozen=True)
class Known:
    """A classic mistake: the name a student sees and the hint that fixes it."""

    name: str
    hint: str = ""

    def __call__(self, impl: Callable[..., Any], *, hint: str | None = None) -> Mistake:
        """This mistake reproduced by ``impl`` (``hint``: this exercise's own words)."""
        return Mistake(self.name, self.hint if hint is None else hint, impl)


# -- masks (the course's convention: True means "may attend") ---------------------------------
MASK_AFTER_SOFTMAX = Known(
    "mask applied after the softmax",
    "mask before the softmax: fill blocked scores with float('-inf'), then softmax; "
    "zeroing weights afterwards leaves each row summing to less than 1",
)
MASK_FILLED_WITH_ZERO = Known(
    "masked scores filled with 0 instead of -inf",
    "a blocked score of 0 still gets weight exp(0) > 0: fill blocked positions with float('-inf')",
)
MASK_INVERTED = Known(
    "mask inverted (True treated as blocked)",
    "the mask is True where a query MAY attend: block the positions where it is False "
    "(the convention of F.scaled_dot_product_attention; nn.MultiheadAttention's is the "
    "opposite)",
)
MASK_IGNORED = Known("mask ignored", "blocked positions (mask False) must get zero weight")
MASKED_ROW_NAN = Known(
    "NaN on fully masked rows",
    "a row whose keys are all blocked is all -inf and the softmax gives 0/0 = NaN there: "
    "such a row must come out as zero weights (and a zero output). Notebook 05 shows the "
    "robust way, which never computes 0/0: an empty row is shifted by 0, not by its -inf "
    "maximum, and divided by 1 where its sum is 0",
)
MASKED_ROW_UNIFORM = Known(
    "fully masked rows get uniform weights (finite fill such as -1e9)",
    "a finite fill like -1e9 makes a fully blocked row uniform (1/S everywhere); "
    "the course convention is zeros: zero the weights of rows with no allowed key",
)

# -- scores and their softmax (each exercise words the fix with its own tensors) ------------
MISSING_SCALE = Known("missing 1/sqrt(d_k) scaling")
SOFTMAX_OVER_QUERIES = Known("softmax over the query axis (dim=-2) instead of the keys (dim=-1)")
