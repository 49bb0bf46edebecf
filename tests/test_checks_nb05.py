"""Checks 05.1 (average of the past), 05.2 (causal mask) and 05.3 (masked softmax, forward and
backward) accept correct answers written differently and name each classic mistake. The wrong
answers here are written independently of the check's own."""

from __future__ import annotations

import pytest
import torch
from checks_testing import (
    assert_passes,
    assert_registered_mistakes_named,
    assert_rejected,
    mistake_names,
)

from course_utils import checks
from course_utils.modeling import attention

# ----------------------------------------------------------------------------- 05.1


def average_loop(x):
    out = torch.empty_like(x)
    for t in range(x.shape[-2]):
        out[..., t, :] = x[..., : t + 1, :].mean(dim=-2)
    return out


def average_matmul(x):
    T = x.shape[-2]
    W = torch.tril(torch.ones(T, T, dtype=x.dtype))
    return (W / W.sum(-1, keepdim=True)) @ x


def average_list(x):
    return torch.stack([x[..., :t, :].sum(-2) / t for t in range(1, x.shape[-2] + 1)], dim=-2)


@pytest.mark.parametrize(
    "candidate",
    [average_loop, average_matmul, average_list, checks.get("05.1").reference],
    ids=["loop", "matmul", "list of sums", "reference"],
)
def test_average_past_check_accepts_correct_answers(candidate):
    assert_passes("05.1", candidate)


def average_strict(x):
    out = torch.zeros_like(x)
    for t in range(1, x.shape[-2]):
        out[..., t, :] = x[..., :t, :].mean(dim=-2)
    return out


def average_future(x):
    return torch.stack([x[..., t:, :].mean(-2) for t in range(x.shape[-2])], dim=-2)


def average_features(x):
    return torch.stack([x[..., : j + 1].mean(-1) for j in range(x.shape[-1])], dim=-1)


AVERAGE_WRONG = {
    "averages the whole sequence (the future included)": lambda x: x.mean(-2, keepdim=True) + 0 * x,
    "sums the past instead of averaging it": lambda x: torch.stack(
        [x[..., : t + 1, :].sum(-2) for t in range(x.shape[-2])], dim=-2
    ),
    "divides by T instead of the number of past positions": lambda x: torch.stack(
        [x[..., : t + 1, :].sum(-2) / x.shape[-2] for t in range(x.shape[-2])], dim=-2
    ),
    "excludes the current position (strict past)": average_strict,
    "averages the future instead of the past": average_future,
    "averaged along the feature dimension instead of time": average_features,
    "window off by one: position t averages positions 0..t-1 (a slice's end is exclusive)": (
        lambda x: torch.stack([x[..., :t, :].mean(-2) for t in range(x.shape[-2])], dim=-2)
    ),
    "window off by one: position t also averages position t + 1 (the future)": lambda x: (
        torch.stack([x[..., : t + 2, :].mean(-2) for t in range(x.shape[-2])], dim=-2)
    ),
    "mean over the wrong dim inside the loop (the features instead of the time steps)": lambda x: (
        torch.stack([x[..., : t + 1, :].mean(-1) for t in range(x.shape[-2])], dim=-2)
    ),
}


def average_wrong_dim_into(x):
    out = torch.zeros_like(x)
    for t in range(x.shape[-2]):
        out[..., t, :] = x[..., : t + 1, :].mean(dim=-1)
    return out


def test_average_past_names_the_wrong_dim_when_it_crashes_too():
    """Student A's report: a mean over the wrong dim crashed in the loop, and the check said
    ERROR with a stack trace; it now names the mistake (both ways of writing the loop)."""
    assert_rejected(
        "05.1",
        average_wrong_dim_into,
        "mean over the wrong dim inside the loop (the features instead of the time steps)",
    )


def test_average_past_off_by_one_messages_say_which_end():
    short = checks.run("05.1", AVERAGE_WRONG[next(k for k in AVERAGE_WRONG if "0..t-1" in k)])
    assert "exclusive" in short.message and "itself included" in short.message
    long = checks.run("05.1", AVERAGE_WRONG[next(k for k in AVERAGE_WRONG if "t + 1 (the" in k)])
    assert "future" in long.message


@pytest.mark.parametrize("mistake", sorted(AVERAGE_WRONG))
def test_average_past_check_names_each_classic_mistake(mistake):
    assert_rejected("05.1", AVERAGE_WRONG[mistake], mistake)


def test_average_past_check_covers_every_registered_mistake():
    assert set(AVERAGE_WRONG) == mistake_names("05.1")
    assert_registered_mistakes_named("05.1")


# ----------------------------------------------------------------------------- 05.2


def causal_arange(T):
    i = torch.arange(T)
    return i[:, None] >= i[None, :]


def causal_lists(T):
    return torch.tensor([[j <= i for j in range(T)] for i in range(T)], dtype=torch.bool)


@pytest.mark.parametrize(
    "candidate",
    [
        causal_arange,
        causal_lists,
        attention.causal_mask,
        lambda T: ~torch.ones(T, T, dtype=torch.bool).triu(1),
    ],
    ids=["arange comparison", "python lists", "reference", "not triu(1)"],
)
def test_causal_mask_check_accepts_correct_answers(candidate):
    assert_passes("05.2", candidate)


def arange_compare(op):
    def impl(T):
        i = torch.arange(T)
        return op(i[:, None], i[None, :])

    return impl


CAUSAL_WRONG = {
    "diagonal excluded (a token cannot see itself)": arange_compare(torch.gt),
    "upper triangle instead of lower (attends to the future, not the past)": arange_compare(
        torch.le
    ),
    "mask inverted (True marks the blocked future)": arange_compare(torch.lt),
    "float 0/1 mask instead of bool": lambda T: causal_arange(T).float(),
    "additive float mask (0 / -inf) instead of bool": lambda T: torch.where(
        causal_arange(T), 0.0, float("-inf")
    ),
}


@pytest.mark.parametrize("mistake", sorted(CAUSAL_WRONG))
def test_causal_mask_check_names_each_classic_mistake(mistake):
    assert_rejected("05.2", CAUSAL_WRONG[mistake], mistake)


def test_causal_mask_check_covers_every_registered_mistake():
    assert set(CAUSAL_WRONG) == mistake_names("05.2")
    assert_registered_mistakes_named("05.2")


def test_causal_mask_check_names_the_dtype_of_an_integer_mask():
    result = checks.run("05.2", lambda T: causal_arange(T).long())
    assert result.status == "failed"
    assert "dtype torch.int64, expected torch.bool" in result.message


# ----------------------------------------------------------------------------- 05.3


def ms_nan_to_num(scores, mask):
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1).nan_to_num(0.0)


def ms_logsumexp(scores, mask):
    s = scores.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1, keepdim=True)
    return torch.where(torch.isfinite(lse), torch.exp(s - lse), torch.zeros_like(s))


def ms_logsumexp_safe(scores, mask):
    s = scores.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1, keepdim=True)
    lse = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))  # empty row: shift by 0
    return torch.exp(s - lse)


def ms_large_fill_times_mask(scores, mask):  # student A's: -1e9, then zero the blocked entries
    return torch.softmax(scores.masked_fill(~mask, -1e9), dim=-1) * mask


def ms_min_fill_then_zero(scores, mask):
    filled = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return torch.softmax(filled, dim=-1).masked_fill(~mask, 0.0)


def ms_where_after_softmax(scores, mask):
    w = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return torch.where(mask, w, torch.zeros_like(w))


REPLACED = "a NaN computed on a fully masked row, then replaced"


@pytest.mark.parametrize("candidate", [ms_nan_to_num, ms_where_after_softmax, ms_logsumexp])
def test_masked_softmax_rejects_a_nan_replaced_afterwards_as_section_9_argues(candidate):
    """05.3 asks for a softmax that never computes 0/0 (section 9); the one-liner of the
    notebook's cell 43 and student A's softmax-then-where earned full marks before. The hint
    must not recommend replacing the NaN."""
    assert_rejected("05.3", candidate, REPLACED)
    message = checks.run("05.3", candidate).message
    assert "never computes 0/0" in message and "nan_to_num" not in message


def test_no_05_3_message_recommends_replacing_the_nan():
    ex = checks.get("05.3")
    for text in [ex.hint] + [m.hint for m in ex.mistakes]:
        assert "nan_to_num" not in text and "torch.where" not in text


def ms_manual(scores, mask):
    s = torch.where(mask, scores, torch.full_like(scores, -1e300))
    e = torch.exp(s - s.max(dim=-1, keepdim=True).values) * mask
    total = e.sum(-1, keepdim=True)
    return e / total.clamp_min(1e-300)


@pytest.mark.parametrize(
    "candidate",
    [
        ms_logsumexp_safe,
        ms_manual,
        ms_large_fill_times_mask,
        ms_min_fill_then_zero,
        attention.masked_softmax,
    ],
)
def test_masked_softmax_check_accepts_correct_answers(candidate):
    assert_passes("05.3", candidate)


def ms_additive_then_where(scores, mask):
    bias = torch.where(mask, 0.0, float("-inf")).to(scores.dtype)  # an additive float mask
    w = (scores + bias).softmax(-1)
    return torch.where(torch.isnan(w), torch.zeros_like(w), w)


def ms_exp_overflow(scores, mask):
    e = scores.exp().masked_fill(~mask, 0.0)
    s = e.sum(-1, keepdim=True)
    return e / torch.where(s == 0, torch.ones_like(s), s)


MS_WRONG = {
    "mask applied after the softmax": lambda s, m: s.softmax(-1).masked_fill(~m, 0.0),
    "masked scores filled with 0 instead of -inf": lambda s, m: torch.where(
        m, s, torch.zeros_like(s)
    ).softmax(-1),
    "mask inverted (True treated as blocked)": lambda s, m: s.masked_fill(m, float("-inf")).softmax(
        -1
    ),
    "mask ignored": lambda s, m: s.softmax(-1),
    "softmax over the wrong axis (dim=-2)": lambda s, m: (
        s.masked_fill(~m, float("-inf")).softmax(-2).nan_to_num(0.0)
    ),
    "NaN on fully masked rows": lambda s, m: s.masked_fill(~m, float("-inf")).softmax(-1),
    "fully masked rows get uniform weights (finite fill such as -1e9)": lambda s, m: s.masked_fill(
        ~m, -1e9
    ).softmax(-1),
    "exp without subtracting the max (overflow)": ms_exp_overflow,
    "NaN gradient on fully masked rows (0/0 computed, then replaced)": ms_additive_then_where,
    REPLACED: ms_logsumexp,
}


@pytest.mark.parametrize("mistake", sorted(MS_WRONG))
def test_masked_softmax_check_names_each_classic_mistake(mistake):
    assert_rejected("05.3", MS_WRONG[mistake], mistake)


def test_masked_softmax_check_covers_every_registered_mistake():
    assert set(MS_WRONG) == mistake_names("05.3")
    assert_registered_mistakes_named("05.3")


def test_masked_softmax_check_tests_the_backward_pass_on_fully_masked_rows():
    cases = checks.get("05.3").make_cases(0)
    case = next(c for c in cases if "fully masked" in c.name)
    outputs = checks.get("05.3").call(attention.masked_softmax, case)
    empty = ~case.inputs["mask"].any(dim=-1)
    assert empty.any()
    assert torch.isfinite(outputs["d loss / d scores"]).all()
    assert (outputs["d loss / d scores"][empty] == 0).all()
    result = checks.run("05.3", ms_additive_then_where)
    assert "d loss / d scores" in result.message and "contains NaN" in result.message


def test_masked_softmax_check_rejects_a_detached_answer_with_a_clear_message():
    result = checks.run("05.3", lambda s, m: attention.masked_softmax(s.detach(), m))
    assert result.status == "error" and "differentiable" in result.message


def test_the_reference_masked_softmax_never_computes_a_nan_and_the_watch_sees_one():
    """The NaN watch behind 05.3: silent on the reference (on every case of the check, fully
    masked rows included), and it does see a NaN that is replaced afterwards."""
    from course_utils.lessons.nb05_masked_attention.exercises import NaNWatch

    for case in checks.get("05.3").make_cases(0):
        watch = NaNWatch()
        with watch:
            attention.masked_softmax(case.inputs["scores"], case.inputs["mask"])
        assert not watch.seen, case.name
    watch = NaNWatch()
    with watch:
        ms_nan_to_num(torch.zeros(2, 3, dtype=torch.float64), torch.zeros(2, 3, dtype=torch.bool))
    assert watch.seen


# ----------------------------------------------------------------------------- every seed
# What tests/test_same_verdict_every_seed.py sweeps over many seeds, by exercise: the correct
# answers written differently, and the wrong ones by the name of the mistake they make.
SWEEP_CORRECT = {
    "05.1": [average_loop, average_matmul, average_list],
    "05.2": {
        "arange comparison": causal_arange,
        "python lists": causal_lists,
        "not triu(1)": lambda T: ~torch.ones(T, T, dtype=torch.bool).triu(1),
    },
    "05.3": [ms_logsumexp_safe, ms_manual, ms_large_fill_times_mask, ms_min_fill_then_zero],
}
SWEEP_WRONG = {"05.1": AVERAGE_WRONG, "05.2": CAUSAL_WRONG, "05.3": MS_WRONG}
