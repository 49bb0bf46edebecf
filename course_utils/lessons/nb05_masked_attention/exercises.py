"""Checks for notebook 05 (masked attention): 05.1 averaging the past (a loop
is the suggested first version; a vectorised one passes too), 05.2 the
causal mask, 05.3 masked softmax (forward and backward).

Masks are bool, True = may attend (as ``F.scaled_dot_product_attention``; the opposite of
``nn.MultiheadAttention``'s ``attn_mask`` and ``key_padding_mask``). A fully masked row gives
all-zero weights and all-zero gradients, and 05.3 never computes a NaN on the way (section 9 of
the notebook: a NaN replaced afterwards is fragile), which the check watches op by op.

To add an exercise: define its cases, call and mistakes below, then append it to ``EXERCISES``.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode

from course_utils.checks import mistakes
from course_utils.checks._common import (
    as_tensor,
    close,
    compare_or_raised,
    lengths_mask,
    raised,
    random_mask,
    size,
)
from course_utils.checks.core import Case, Exercise, Mistake, allclose_compare, generator, randn
from course_utils.lessons.nb05_masked_attention import LESSON
from course_utils.modeling import attention

NOTEBOOK = LESSON.filename

# ----------------------------------------------------------------------------- 05.1 average the past


def average_past_reference(x: Tensor) -> Tensor:
    """y[..., t, :] = mean of x[..., 0..t, :] (the past and the present, never the future).

    x: (..., T, D) -> (..., T, D); a running mean along the time dimension -2.
    """
    counts = torch.arange(1, x.shape[-2] + 1, dtype=x.dtype, device=x.device)
    return x.cumsum(dim=-2) / counts[:, None]


def _average_cases(seed: int) -> list[Case]:
    g = generator(seed)
    T, D = size(g, 4, 7), size(g, 2, 5)
    return [
        Case("(T, D) sequence", {"x": randn(g, T, D)}),
        Case("a batch (B, T, D)", {"x": randn(g, size(g, 2, 3), T, D)}),
        Case("heads (B, H, T, D)", {"x": randn(g, 2, size(g, 2, 3), T + 1, D)}),
        Case("one token (T = 1)", {"x": randn(g, 1, D)}),
        Case("T == D (a square input)", {"x": randn(g, 5, 5)}),
        Case("float32", {"x": randn(g, T, D, dtype=torch.float32)}),
    ]


def _average_call(candidate, case: Case) -> dict[str, Tensor]:
    try:
        y = candidate(case.inputs["x"])
    except NotImplementedError:  # a RuntimeError too: the stub, "not attempted"
        raise
    except (RuntimeError, IndexError) as exc:  # shape errors: a named mistake can match them
        return raised(exc)
    return {"y": as_tensor(y, "average_past(x)")}


def _average_compare(case: Case, got, expected) -> str | None:
    return compare_or_raised(case, got, expected, close())


def _counts(x: Tensor, start: int = 1) -> Tensor:
    return torch.arange(start, x.shape[-2] + start, dtype=x.dtype)[:, None]


def _strict_past(x: Tensor) -> Tensor:
    prev = x.cumsum(dim=-2) - x  # sum over s < t
    return prev / _counts(x, 0).clamp_min(1)


def _future(x: Tensor) -> Tensor:
    rev = x.flip(-2).cumsum(dim=-2).flip(-2)  # sum over s >= t
    return rev / _counts(x).flip(0)


def _over_features(x: Tensor) -> Tensor:
    return x.cumsum(dim=-1) / torch.arange(1, x.shape[-1] + 1, dtype=x.dtype)


def _window_short(x: Tensor) -> Tensor:
    """The slice stops one early (positions 0..t-1): position 0 averages nothing (NaN)."""
    return torch.stack([x[..., :t, :].mean(dim=-2) for t in range(x.shape[-2])], dim=-2)


def _window_long(x: Tensor) -> Tensor:
    """The slice goes one too far (positions 0..t+1): each position sees the next one."""
    return torch.stack([x[..., : t + 2, :].mean(dim=-2) for t in range(x.shape[-2])], dim=-2)


def _loop_mean_over_features(x: Tensor) -> Tensor:
    """The loop's mean taken over the last dim: a (..., t+1) vector per step, which cannot be
    stacked (it raises on every case with T > 1)."""
    return torch.stack([x[..., : t + 1, :].mean(dim=-1) for t in range(x.shape[-2])], dim=-2)


def _loop_mean_over_features_into(x: Tensor) -> Tensor:
    """The same mistake written into a preallocated output: the assignment raises."""
    out = torch.empty_like(x)
    for t in range(x.shape[-2]):
        out[..., t, :] = x[..., : t + 1, :].mean(dim=-1)
    return out


AVERAGE_MISTAKES = [
    Mistake(
        "averages the whole sequence (the future included)",
        "position t may only use positions 0..t: average x over the past and present, not over "
        "all T positions",
        lambda x: x.mean(dim=-2, keepdim=True).expand_as(x),
    ),
    Mistake(
        "sums the past instead of averaging it",
        "divide the sum over positions 0..t by how many there are, t + 1",
        lambda x: x.cumsum(dim=-2),
    ),
    Mistake(
        "divides by T instead of the number of past positions",
        "position t averages t + 1 vectors (positions 0..t), not T",
        lambda x: x.cumsum(dim=-2) / x.shape[-2],
    ),
    Mistake(
        "excludes the current position (strict past)",
        "position t may see itself: average positions 0..t, inclusive",
        _strict_past,
    ),
    Mistake(
        "averages the future instead of the past",
        "position t averages positions 0..t (before it), not t..T-1 (after it)",
        _future,
    ),
    Mistake(
        "averaged along the feature dimension instead of time",
        "time is the second-to-last dimension (..., T, D): average along dim -2; each feature "
        "is averaged on its own",
        _over_features,
    ),
    Mistake(
        "window off by one: position t averages positions 0..t-1 (a slice's end is exclusive)",
        "position t averages t + 1 vectors, positions 0..t, itself included; the end of a "
        "Python slice is not included, so the slice must end one past t (position 0 averages "
        "an empty slice otherwise, which gives NaN)",
        _window_short,
    ),
    Mistake(
        "window off by one: position t also averages position t + 1 (the future)",
        "position t + 1 is the future: the window of position t ends at t, inclusive",
        _window_long,
    ),
    Mistake(
        "mean over the wrong dim inside the loop (the features instead of the time steps)",
        "the window x[..., 0..t, :] has shape (..., t + 1, D): average over its time "
        "dimension (the second to last), which leaves one D-vector per step; averaging over "
        "the last dimension leaves t + 1 numbers per step instead, so the steps cannot be "
        "put together",
        _loop_mean_over_features,
    ),
    Mistake(
        "mean over the wrong dim inside the loop (the features instead of the time steps)",
        "the window x[..., 0..t, :] has shape (..., t + 1, D): average over its time "
        "dimension (the second to last), which leaves one D-vector for row t; averaging over "
        "the last dimension leaves t + 1 numbers, which do not fit the row",
        _loop_mean_over_features_into,
    ),
]

AVERAGE_PAST = Exercise(
    id="05.1",
    title="Average of the past",
    points=1,
    notebook=NOTEBOOK,
    function="average_past",
    reference=average_past_reference,
    make_cases=_average_cases,
    call=_average_call,
    mistakes=AVERAGE_MISTAKES,
    compare=_average_compare,
    hint=(
        "Write out y for x = [[1], [2], [3]] by hand: which positions does y[t] average, and "
        "divided by how many? Compare with yours row by row, and check that the output has x's "
        "shape, with extra batch dimensions too."
    ),
)

# ----------------------------------------------------------------------------- 05.2 causal mask


def _causal_cases(seed: int) -> list[Case]:
    g = generator(seed)
    return [
        Case("T tokens", {"T": size(g, 3, 9)}),
        Case("one token (T = 1)", {"T": 1}),
        Case("two tokens (T = 2)", {"T": 2}),
        Case("a longer sequence", {"T": size(g, 10, 16)}),
    ]


def _causal_call(candidate, case: Case) -> dict[str, Tensor]:
    return {"mask": as_tensor(candidate(case.inputs["T"]), "causal_mask(T)")}


def _ones(T: int) -> Tensor:
    return torch.ones(T, T, dtype=torch.bool)


CAUSAL_MISTAKES = [
    Mistake(
        "diagonal excluded (a token cannot see itself)",
        "a token may attend to itself: the diagonal belongs to the allowed part",
        lambda T: torch.tril(_ones(T), diagonal=-1),
    ),
    Mistake(
        "upper triangle instead of lower (attends to the future, not the past)",
        "query i (row) may attend keys j <= i (columns up to its own index): the part on and "
        "below the diagonal",
        lambda T: torch.triu(_ones(T)),
    ),
    Mistake(
        "mask inverted (True marks the blocked future)",
        "True means MAY attend: return the allowed positions (lower triangle incl. the "
        "diagonal), not the blocked ones",
        lambda T: torch.triu(_ones(T), diagonal=1),
    ),
    Mistake(
        "float 0/1 mask instead of bool",
        "return a bool tensor (dtype=torch.bool); a float mask would be added to the scores",
        lambda T: torch.tril(torch.ones(T, T)),
    ),
    Mistake(
        "additive float mask (0 / -inf) instead of bool",
        "the course's masks are bool with True = may attend, not a float 0 / -inf mask to add to "
        "the scores (notebook 04's attention takes a bool mask)",
        lambda T: torch.zeros(T, T).masked_fill(~torch.tril(_ones(T)), float("-inf")),
    ),
]

CAUSAL = Exercise(
    id="05.2",
    title="Causal mask",
    points=1,
    notebook=NOTEBOOK,
    function="causal_mask",
    reference=attention.causal_mask,
    make_cases=_causal_cases,
    call=_causal_call,
    mistakes=CAUSAL_MISTAKES,
    compare=allclose_compare,  # exact for bool masks
    hint=(
        "Print your mask for T = 3 and read it as a table, rows the queries and columns the keys:"
        " which cells may a query read (may it read itself)? Is True the allowed side, and is the"
        " dtype bool?"
    ),
)

# ----------------------------------------------------------------------------- 05.3 masked softmax


def _masked_softmax_cases(seed: int) -> list[Case]:
    g = generator(seed)
    T, S = size(g, 3, 6), size(g, 7, 9)  # T != S
    B, H = size(g, 2, 3), size(g, 2, 3)
    huge = 1e4 + randn(g, B, T, S)
    cases = [
        Case(
            "(T, S) scores with a mask",
            {"scores": randn(g, T, S) * 2, "mask": random_mask(g, T, S)},
        ),
        Case(
            "heads (B, H, T, S), mask (T, S) broadcast",
            {"scores": randn(g, B, H, T, S) * 2, "mask": random_mask(g, T, S)},
        ),
        Case(
            "fully masked rows (expect zeros)",
            {"scores": randn(g, B, T, S) * 2, "mask": random_mask(g, B, T, S, full_rows=True)},
        ),
        Case(
            "key padding mask (B, 1, 1, S)",
            {"scores": randn(g, B, H, T, S), "mask": lengths_mask(g, B, S)[:, None, None, :]},
        ),
        Case("huge scores (about 1e4)", {"scores": huge, "mask": random_mask(g, B, T, S)}),
        Case(
            "nothing masked", {"scores": randn(g, T, S), "mask": torch.ones(T, S, dtype=torch.bool)}
        ),
    ]
    for case in cases:  # the upstream gradient of a loss sum(u * weights), for the backward pass
        case.inputs["u"] = randn(g, *case.inputs["scores"].shape)
    return cases


class NaNWatch(TorchFunctionMode):
    """Records whether any floating-point tensor that a torch function returns, inside the
    ``with`` block, holds a NaN: a NaN computed and replaced afterwards is still seen."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not self.seen:
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, Tensor) and t.is_floating_point() and bool(torch.isnan(t).any()):
                    self.seen = True
                    break
        return out


NAN_ON_THE_WAY = "a NaN computed on the way (then replaced)"


def _masked_softmax_call(candidate, case: Case) -> dict[str, Tensor]:
    """The weights; the gradient of sum(u * weights) with respect to the scores (a row with no
    allowed entry must get zero weights and a zero, finite, gradient); and whether any
    intermediate result of the forward pass held a NaN (none may: the exercise asks for a
    softmax that never computes 0/0)."""
    i = case.inputs
    scores = i["scores"].detach().clone().requires_grad_(True)
    watch = NaNWatch()
    with watch:
        result = candidate(scores, i["mask"])
    weights = as_tensor(result, "masked_softmax(scores, mask)")
    if not weights.requires_grad:
        raise TypeError(
            "masked_softmax(scores, mask) must be differentiable with respect to scores (it is "
            "trained through): no .detach(), .item(), numpy or torch.no_grad() on the way"
        )
    (grad,) = torch.autograd.grad((weights * i["u"]).sum(), scores, allow_unused=True)
    if grad is None:
        grad = torch.zeros_like(scores)
    out = {"weights": weights.detach(), "d loss / d scores": grad}
    # a NaN on the way is the mistake only of an answer that is otherwise right (a wrong one is
    # named by what it gets wrong): compare with the reference's weights and gradient
    right = watch.seen and candidate is not attention.masked_softmax
    if right:
        expected = _masked_softmax_call(attention.masked_softmax, case)
        right = all(
            tuple(out[k].shape) == tuple(expected[k].shape)
            and torch.allclose(out[k].double(), expected[k].double(), rtol=1e-4, atol=1e-6)
            for k in ("weights", "d loss / d scores")
        )
    return {**out, NAN_ON_THE_WAY: torch.tensor(bool(right))}


def _additive_nan_to_num(scores: Tensor, mask: Tensor) -> Tensor:
    additive = torch.zeros(mask.shape, dtype=scores.dtype).masked_fill(~mask, float("-inf"))
    return torch.softmax(scores + additive, dim=-1).nan_to_num(0.0)


def _filled_then_replaced(scores: Tensor, mask: Tensor) -> Tensor:
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1).nan_to_num(0.0)


_REPLACED_HINT = (
    "your weights and gradients are right, but a fully masked row computed 0/0 = NaN on the "
    "way and the NaN was replaced afterwards. This exercise asks for a softmax that never "
    "computes 0/0 (section 9: whether a replaced NaN stays out of the gradient depends on how "
    "the mask reached the scores). Give the empty row harmless values before anything divides: "
    "shift it by 0 instead of its -inf maximum, and divide by 1 where the row sum is 0"
)


def _filled(fill: float, invert: bool = False, dim: int = -1):
    def impl(scores: Tensor, mask: Tensor) -> Tensor:
        return torch.softmax(scores.masked_fill(mask if invert else ~mask, fill), dim=dim)

    return impl


def _naive_exp(scores: Tensor, mask: Tensor) -> Tensor:
    e = torch.exp(scores.masked_fill(~mask, float("-inf")))  # inf for scores above ~709
    total = e.sum(dim=-1, keepdim=True)
    return e / torch.where(total > 0, total, torch.ones_like(total))  # empty rows handled


MASKED_SOFTMAX_MISTAKES = [
    mistakes.MASK_AFTER_SOFTMAX(lambda s, m: torch.softmax(s, dim=-1) * m),
    mistakes.MASK_FILLED_WITH_ZERO(_filled(0.0)),
    mistakes.MASK_INVERTED(_filled(float("-inf"), invert=True)),
    mistakes.MASK_INVERTED(lambda s, m: attention.masked_softmax(s, ~m)),
    mistakes.MASK_IGNORED(lambda s, m: torch.softmax(s, dim=-1)),
    Mistake(
        "softmax over the wrong axis (dim=-2)",
        "normalise each query's row over the keys: dim=-1",
        lambda s, m: attention.masked_softmax(s, m, dim=-2),
    ),
    mistakes.MASKED_ROW_NAN(
        _filled(float("-inf")),
        hint="a row whose keys are all blocked is all -inf, and the softmax computes 0/0 = NaN "
        "there. Do not replace the NaN afterwards (section 9): never compute 0/0 -- shift an "
        "empty row by 0 instead of its -inf maximum, and divide by 1 where the row sum is 0",
    ),
    Mistake(
        "a NaN computed on a fully masked row, then replaced", _REPLACED_HINT, _filled_then_replaced
    ),
    Mistake(
        "NaN gradient on fully masked rows (0/0 computed, then replaced)",
        "the weights are right but the backward pass of a fully masked row is NaN: the softmax "
        "divided 0 by 0 and the NaN was replaced afterwards, while autograd still "
        "differentiates the 0/0 and the mask (added as a float -inf) passes the NaN on to the "
        "scores. Never compute 0/0: shift an empty row by 0 instead of its -inf maximum and "
        "divide by 1 where the row sum is 0",
        _additive_nan_to_num,
    ),
    mistakes.MASKED_ROW_UNIFORM(_filled(-1e9)),
    Mistake(
        "exp without subtracting the max (overflow)",
        "exp(1e4) is inf: subtract each row's maximum over the allowed entries before exp "
        "(or fill with -inf and use a stable softmax)",
        _naive_exp,
    ),
]

MASKED_SOFTMAX = Exercise(
    id="05.3",
    title="Masked softmax",
    points=3,
    notebook=NOTEBOOK,
    function="masked_softmax",
    reference=attention.masked_softmax,
    make_cases=_masked_softmax_cases,
    call=_masked_softmax_call,
    mistakes=MASKED_SOFTMAX_MISTAKES,
    compare=close(),
    hint=(
        "Try one row with a masked entry and one row with every entry masked: what should each "
        "give? Print the intermediate values: does any step compute 0/0 or -inf - (-inf), even on"
        " a row you zero later? Call .sum().backward() on your output: is the fully masked row's "
        "gradient finite?"
    ),
)

EXERCISES = [AVERAGE_PAST, CAUSAL, MASKED_SOFTMAX]
