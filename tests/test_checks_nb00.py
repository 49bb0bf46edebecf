"""Check 00.1 (stable softmax) accepts correct answers written differently and names each
classic mistake. The wrong answers here are written independently of the check's own."""

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

ID = "00.1"


def softmax_logsumexp(x):
    return torch.exp(x - torch.logsumexp(x, dim=-1, keepdim=True))


def softmax_in_float64(x):
    y = x.double()
    e = (y - y.max(dim=-1, keepdim=True).values).exp()
    return (e / e.sum(-1, keepdim=True)).to(x.dtype)


def softmax_in_place(x):
    x -= x.amax(dim=-1, keepdim=True)  # edits the caller's tensor: must not fool the check
    x.exp_()
    return x / x.sum(dim=-1, keepdim=True)


@pytest.mark.parametrize(
    "candidate",
    [
        softmax_logsumexp,
        softmax_in_float64,
        checks.get(ID).reference,
    ],
    # torch's softmax and an answer that edits its input in place are rejected: see
    # tests/test_checks_shortcuts.py
    ids=["logsumexp", "float64", "reference"],
)
def test_softmax_check_accepts_correct_answers(candidate):
    assert_passes(ID, candidate)


def naive(x):
    return torch.exp(x) / torch.exp(x).sum(-1, keepdim=True)


def global_max(x):
    z = torch.exp(x - x.max())
    return z / z.sum(-1, keepdim=True)


def max_without_keepdim(x):
    e = torch.exp(x - x.max(dim=-1)[0])
    return e / e.sum(-1, keepdim=True)


def sum_without_keepdim(x):
    e = torch.exp(x - x.max(dim=-1, keepdim=True)[0])
    return e / e.sum(-1)


WRONG = {
    "exp without subtracting the max (overflow)": naive,
    "max subtracted over the whole tensor instead of per row": global_max,
    "softmax over the wrong dimension (dim=0)": lambda x: torch.softmax(x, dim=0),
    "softmax over dim=1 instead of dim=-1": lambda x: torch.softmax(x, dim=1),
    "max taken without keepdim=True": max_without_keepdim,
    "sum taken without keepdim=True": sum_without_keepdim,
    "not normalised (no division by the sum)": lambda x: (x - x.amax(-1, keepdim=True)).exp(),
    "returned log-softmax instead of softmax": lambda x: torch.log_softmax(x, dim=-1),
}


@pytest.mark.parametrize("mistake", sorted(WRONG))
def test_softmax_check_names_each_classic_mistake(mistake):
    assert_rejected(ID, WRONG[mistake], mistake)


def test_softmax_check_covers_every_registered_mistake():
    assert set(WRONG) == mistake_names(ID)
    assert_registered_mistakes_named(ID)


def test_softmax_check_reports_a_wrong_shape():
    result = checks.run(ID, lambda x: torch.softmax(x, -1).sum(-1))
    assert result.status == "failed"
    assert "has shape" in result.message and "expected" in result.message


def test_softmax_cases_include_overflow_and_batch_edge_cases():
    cases = checks.get(ID).make_cases(0)
    xs = [c.inputs["x"] for c in cases]
    assert any(torch.isinf(torch.exp(x)).any() for x in xs)  # naive exp overflows
    assert any(torch.isneginf(x).any() for x in xs)
    assert any(x.ndim == 4 for x in xs)
    assert {x.dtype for x in xs} == {torch.float64, torch.float32}


# ----------------------------------------------------------------------------- 00.2 logsumexp

LSE = "00.2"


def lse_by_hand(x):
    m = x.max(dim=-1).values
    shift = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    return shift + (x - shift[..., None]).exp().sum(-1).log()


def lse_from_softmax_denominator(x):
    m = x.amax(-1, keepdim=True).nan_to_num(neginf=0.0)
    return (m + torch.log(torch.sum(torch.exp(x - m), dim=-1, keepdim=True)))[..., 0]


def lse_in_float64(x):
    return torch.logsumexp(x.double(), -1).to(x.dtype)


@pytest.mark.parametrize(
    "candidate",
    [
        lse_by_hand,
        lse_from_softmax_denominator,
        checks.get(LSE).reference,
    ],
    # torch.logsumexp / Tensor.logsumexp are rejected: see tests/test_checks_shortcuts.py
    ids=["by-hand", "keepdim-then-index", "reference"],
)
def test_logsumexp_check_accepts_correct_answers(candidate):
    assert_passes(LSE, candidate)


def lse_shift_kept(x):
    m = x.max(-1, keepdim=True).values
    return m + (x - m).exp().sum(-1).log()


def lse_nan_rows(x):
    m = x.max(-1).values
    return m + (x - m[..., None]).exp().sum(-1).log()


LSE_WRONG = {
    "log(sum(exp(x))) without subtracting the max (overflow)": lambda x: x.exp().sum(-1).log(),
    "the maximum is not added back": lambda x: (
        (x - x.max(-1, keepdim=True).values).exp().sum(-1).log()
    ),
    "max taken over the whole tensor instead of per row": lambda x: (
        x.max() + (x - x.max()).exp().sum(-1).log()
    ),
    "a kept dimension broadcast the result to the wrong shape": lse_shift_kept,
    "result keeps the reduced dimension (shape (..., 1))": lambda x: torch.logsumexp(
        x, -1, keepdim=True
    ),
    "NaN on a row of only -inf": lse_nan_rows,
    "reduced over the wrong dimension": lambda x: torch.logsumexp(x, 0),
    "returned the row maximum only": lambda x: x.max(-1).values,
}


@pytest.mark.parametrize("mistake", sorted(LSE_WRONG))
def test_logsumexp_check_names_each_classic_mistake(mistake):
    assert_rejected(LSE, LSE_WRONG[mistake], mistake)


def test_logsumexp_check_covers_every_registered_mistake():
    assert set(LSE_WRONG) == mistake_names(LSE)
    assert_registered_mistakes_named(LSE)


def test_logsumexp_cases_include_overflow_and_an_empty_row():
    xs = [c.inputs["x"] for c in checks.get(LSE).make_cases(0)]
    assert any(torch.isinf(torch.exp(x)).any() for x in xs)
    assert any(torch.isneginf(x).all(dim=-1).any() for x in xs)  # a row of only -inf
    assert any(x.ndim == 4 for x in xs)


# ----------------------------------------------------------------------------- every seed
# What tests/test_same_verdict_every_seed.py sweeps over many seeds, by exercise: the correct
# answers written differently, and the wrong ones by the name of the mistake they make.
SWEEP_CORRECT = {
    ID: [softmax_logsumexp, softmax_in_float64],
    LSE: [lse_by_hand, lse_from_softmax_denominator],
}
SWEEP_WRONG = {ID: WRONG, LSE: LSE_WRONG}
