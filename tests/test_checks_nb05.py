"""Checks 05.1 (causal mask) and 05.2 (masked softmax) accept correct answers written
differently and name each classic mistake. The wrong answers here are written independently of
the check's own."""

from __future__ import annotations

import pytest
import torch
from checks_testing import (
    assert_passes,
    assert_registered_mistakes_named,
    assert_rejected,
    mistake_names,
)

from course_utils import attention, checks

# ----------------------------------------------------------------------------- 05.1


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
    assert_passes("05.1", candidate)


def arange_compare(op):
    def impl(T):
        i = torch.arange(T)
        return op(i[:, None], i[None, :])

    return impl


CAUSAL_WRONG = {
    "diagonal excluded (torch.tril(..., diagonal=-1))": arange_compare(torch.gt),
    "triu instead of tril (attends to the future, not the past)": arange_compare(torch.le),
    "mask inverted (True marks the blocked future)": arange_compare(torch.lt),
    "float 0/1 mask instead of bool": lambda T: causal_arange(T).float(),
    "additive float mask (0 / -inf) instead of bool": lambda T: torch.where(
        causal_arange(T), 0.0, float("-inf")
    ),
}


@pytest.mark.parametrize("mistake", sorted(CAUSAL_WRONG))
def test_causal_mask_check_names_each_classic_mistake(mistake):
    assert_rejected("05.1", CAUSAL_WRONG[mistake], mistake)


def test_causal_mask_check_covers_every_registered_mistake():
    assert set(CAUSAL_WRONG) == mistake_names("05.1")
    assert_registered_mistakes_named("05.1")


def test_causal_mask_check_names_the_dtype_of_an_integer_mask():
    result = checks.run("05.1", lambda T: causal_arange(T).long())
    assert result.status == "failed"
    assert "dtype torch.int64, expected torch.bool" in result.message


# ----------------------------------------------------------------------------- 05.2


def ms_nan_to_num(scores, mask):
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1).nan_to_num(0.0)


def ms_logsumexp(scores, mask):
    s = scores.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1, keepdim=True)
    return torch.where(torch.isfinite(lse), torch.exp(s - lse), torch.zeros_like(s))


def ms_manual(scores, mask):
    s = torch.where(mask, scores, torch.full_like(scores, -1e300))
    e = torch.exp(s - s.max(dim=-1, keepdim=True).values) * mask
    total = e.sum(-1, keepdim=True)
    return e / total.clamp_min(1e-300)


@pytest.mark.parametrize(
    "candidate", [ms_nan_to_num, ms_logsumexp, ms_manual, attention.masked_softmax]
)
def test_masked_softmax_check_accepts_correct_answers(candidate):
    assert_passes("05.2", candidate)


def ms_exp_overflow(scores, mask):
    e = scores.exp().masked_fill(~mask, 0.0)
    s = e.sum(-1, keepdim=True)
    return torch.where(s == 0, torch.zeros_like(e), e / s)


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
}


@pytest.mark.parametrize("mistake", sorted(MS_WRONG))
def test_masked_softmax_check_names_each_classic_mistake(mistake):
    assert_rejected("05.2", MS_WRONG[mistake], mistake)


def test_masked_softmax_check_covers_every_registered_mistake():
    assert set(MS_WRONG) == mistake_names("05.2")
    assert_registered_mistakes_named("05.2")
