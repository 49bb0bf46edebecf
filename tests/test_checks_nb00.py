"""Check 00.1 (stable softmax) accepts correct answers written differently and names each
classic mistake. The wrong answers here are written independently of the check's own."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
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
        softmax_in_place,
        lambda x: F.softmax(x, dim=x.dim() - 1),
        checks.get(ID).reference,
    ],
    ids=["logsumexp", "float64", "in-place", "F.softmax", "reference"],
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
