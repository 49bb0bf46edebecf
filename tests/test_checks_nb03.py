"""Checks 03.1 (scaled dot-product attention) and 03.2 (learned q/k/v projections) accept correct answers written differently and
names each classic mistake; its reference agrees with F.scaled_dot_product_attention. The
wrong answers here are written independently of the check's own."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from checks_testing import (
    SEEDS,
    assert_passes,
    assert_registered_mistakes_named,
    assert_rejected,
    mistake_names,
)

from course_utils import checks
from course_utils.checks.questions import check_answer

ID = "03.1"


def sdpa_einsum(q, k, v, attn_mask=None):
    scores = torch.einsum("...td,...sd->...ts", q, k) / math.sqrt(q.size(-1))
    if attn_mask is not None:
        scores = scores.masked_fill(attn_mask.logical_not(), float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return torch.einsum("...ts,...sd->...td", weights, v), weights


def sdpa_where(q, k, v, attn_mask=None):
    scores = q @ k.mT * q.shape[-1] ** -0.5
    if attn_mask is None:
        weights = scores.softmax(-1)
    else:
        scores = torch.where(attn_mask, scores, torch.tensor(-1e30, dtype=scores.dtype))
        weights = scores.softmax(-1) * attn_mask
        weights = torch.where(attn_mask.any(-1, keepdim=True), weights, 0.0)
    return weights @ v, weights


def sdpa_float_mask(q, k, v, attn_mask=None):
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(k.shape[-1])
    if attn_mask is not None:
        additive = torch.zeros(attn_mask.shape, dtype=q.dtype).masked_fill(~attn_mask, -math.inf)
        scores = scores + additive
    weights = F.softmax(scores, dim=-1)
    weights = torch.where(torch.isnan(weights), torch.zeros_like(weights), weights)
    return torch.matmul(weights, v), weights


def sdpa_in_place(q, k, v, attn_mask=None):
    q /= math.sqrt(q.shape[-1])  # edits the caller's q: must not change the expected answer
    return sdpa_einsum(q * math.sqrt(q.shape[-1]), k, v, attn_mask)


@pytest.mark.parametrize(
    "candidate",
    [sdpa_einsum, sdpa_where, sdpa_float_mask, checks.get(ID).reference],
    ids=["einsum+nan_to_num", "where", "float mask", "reference"],
)
def test_sdpa_check_accepts_correct_answers(candidate):
    assert_passes(ID, candidate)


def test_sdpa_check_rejects_in_place_edits_of_the_inputs():
    # sdpa_in_place scales the caller's q in place (its output is right): the caller's tensor
    # is changed, which breaks later cells, so the check says so (issue 22)
    result = checks.run(ID, sdpa_in_place)
    assert result.status == "failed" and result.points == 0
    assert "changed its input 'q' in place" in result.message


def manual(
    scale=None, dim=-1, fill=None, after=False, scale_after=False, invert=False, ignore_mask=False
):
    def impl(q, k, v, attn_mask=None):
        factor = 1 / math.sqrt(q.shape[-1]) if scale is None else scale(q, k, v)
        s = q @ k.transpose(-2, -1)
        if not scale_after:
            s = s * factor
        m = attn_mask
        if m is not None and invert:
            m = ~m
        if m is not None and not after and not ignore_mask:
            s = s.masked_fill(~m, float("-inf") if fill is None else fill)
        w = torch.softmax(s, dim=dim)
        if m is not None and after:
            w = w * m
        if fill is None and not after and m is not None and not ignore_mask and not invert:
            w = w.nan_to_num(0.0)
        if scale_after:
            w = w * factor
        return w @ v, w

    return impl


WRONG = {
    "missing 1/sqrt(d_k) scaling": manual(scale=lambda q, k, v: 1.0),
    "scaled by 1/sqrt(d_v) instead of 1/sqrt(d_k)": manual(
        scale=lambda q, k, v: v.shape[-1] ** -0.5
    ),
    "scaled by 1/d_k instead of 1/sqrt(d_k)": manual(scale=lambda q, k, v: 1 / k.shape[-1]),
    "multiplied by sqrt(d_k) instead of dividing": manual(scale=lambda q, k, v: q.shape[-1] ** 0.5),
    "scaled by the wrong size (q.shape[1] instead of q.shape[-1])": manual(
        scale=lambda q, k, v: 1 / math.sqrt(q.size(1))
    ),
    "softmax over the query axis (dim=-2) instead of the keys (dim=-1)": manual(dim=-2),
    "scaling applied after the softmax": manual(scale_after=True),
    "mask applied after the softmax": manual(after=True),
    "masked scores filled with 0 instead of -inf": manual(fill=0.0),
    "mask inverted (True treated as blocked)": manual(invert=True),
    "mask ignored": manual(ignore_mask=True),
    "fully masked rows get uniform weights (finite fill such as -1e9)": manual(fill=-1e9),
    "returned (weights, output) instead of (output, weights)": lambda q, k, v, attn_mask=None: (
        sdpa_einsum(q, k, v, attn_mask)[::-1]
    ),
}


def sdpa_nan_rows(q, k, v, attn_mask=None):
    s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, float("-inf"))
    w = torch.softmax(s, dim=-1)
    return w @ v, w


WRONG["NaN on fully masked rows"] = sdpa_nan_rows


@pytest.mark.parametrize("mistake", sorted(WRONG))
def test_sdpa_check_names_each_classic_mistake(mistake):
    assert_rejected(ID, WRONG[mistake], mistake)


def test_sdpa_check_covers_every_registered_mistake():
    assert set(WRONG) == mistake_names(ID)
    assert_registered_mistakes_named(ID)


def test_sdpa_check_asks_for_a_pair():
    result = checks.run(ID, lambda q, k, v, attn_mask=None: sdpa_einsum(q, k, v, attn_mask)[0])
    assert result.status == "error"
    assert "should return a pair (output, weights)" in result.message


def test_sdpa_cases_cover_the_edge_cases():
    cases = checks.get(ID).make_cases(0)
    q_dims = {c.inputs["q"].ndim for c in cases}
    assert {2, 3, 4} <= q_dims
    assert any(c.inputs["q"].shape[-2] != c.inputs["k"].shape[-2] for c in cases)  # T != S
    assert all(c.inputs["k"].shape[-1] != c.inputs["v"].shape[-1] for c in cases)  # Dk != Dv
    masks = [c.inputs["attn_mask"] for c in cases if "attn_mask" in c.inputs]
    assert masks and all(m.dtype == torch.bool for m in masks)
    assert any((~m.any(dim=-1)).any() for m in masks)  # a fully masked row
    assert {c.inputs["q"].dtype for c in cases} == {torch.float64, torch.float32}


@pytest.mark.parametrize("seed", SEEDS)
def test_sdpa_reference_agrees_with_torch_sdpa_on_every_case(seed):
    exercise = checks.get(ID)
    for case in exercise.make_cases(seed):
        q, k, v = case.inputs["q"], case.inputs["k"], case.inputs["v"]
        mask = case.inputs.get("attn_mask")
        out, weights = exercise.reference(q, k, v, attn_mask=mask)
        expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        if mask is not None:  # backends differ on fully masked rows: ours gives zeros
            empty = ~mask.expand(weights.shape).any(dim=-1, keepdim=True)
            assert torch.all(out.masked_select(empty) == 0), case.name
            assert torch.all(weights.masked_select(empty.expand(weights.shape)) == 0)
            keep = ~empty
            out, expected = out.masked_select(keep), expected.masked_select(keep)
        torch.testing.assert_close(out, expected, msg=case.name)
        torch.testing.assert_close(
            weights.sum(-1)[weights.sum(-1) > 0],
            torch.ones_like(weights.sum(-1)[weights.sum(-1) > 0]),
        )


# ----------------------------------------------------------------------------- 03.2

QKV = "03.2"


def qkv_einsum(queries, x, W_q, W_k, W_v):
    q = torch.einsum("...ti,ik->...tk", queries, W_q)
    k = torch.einsum("...si,ik->...sk", x, W_k)
    v = torch.einsum("...si,iv->...sv", x, W_v)
    scores = torch.einsum("...tk,...sk->...ts", q / math.sqrt(q.shape[-1]), k)
    w = torch.exp(scores - scores.amax(-1, keepdim=True))
    w = w / w.sum(-1, keepdim=True)
    return torch.einsum("...ts,...sv->...tv", w, v), w


def qkv_torch_sdpa(queries, x, W_q, W_k, W_v):
    q, k, v = queries @ W_q, x @ W_k, x @ W_v
    out = F.scaled_dot_product_attention(q, k, v)
    w = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1)
    return out, w


def qkv_linear(queries, x, W_q, W_k, W_v):
    q = F.linear(queries, W_q.T)  # F.linear multiplies by the transpose of its weight
    k, v = F.linear(x, W_k.T), F.linear(x, W_v.T)
    return checks.get(ID).reference(q, k, v)


@pytest.mark.parametrize(
    "candidate",
    [qkv_einsum, qkv_torch_sdpa, qkv_linear, checks.get(QKV).reference],
    ids=["einsum", "F.sdpa", "F.linear", "reference"],
)
def test_qkv_check_accepts_correct_answers(candidate):
    assert_passes(QKV, candidate)


def _weights(q, k, v, scale, dim=-1):
    w = torch.softmax(q @ k.transpose(-1, -2) * scale, dim=dim)
    return w @ v, w


QKV_WRONG = {
    "keys and values swapped": lambda Q, x, Wq, Wk, Wv: _weights(
        Q @ Wq, x @ Wv, x @ Wk, Wk.shape[1] ** -0.5
    ),
    "queries not projected": lambda Q, x, Wq, Wk, Wv: _weights(
        Q, x @ Wk, x @ Wv, Wk.shape[1] ** -0.5
    ),
    "queries projected with W_k instead of W_q": lambda Q, x, Wq, Wk, Wv: _weights(
        Q @ Wk, x @ Wk, x @ Wv, Wk.shape[1] ** -0.5
    ),
    "missing 1/sqrt(d) scaling": lambda Q, x, Wq, Wk, Wv: _weights(Q @ Wq, x @ Wk, x @ Wv, 1.0),
    "scaled by sqrt(Din) instead of sqrt(Dk)": lambda Q, x, Wq, Wk, Wv: _weights(
        Q @ Wq, x @ Wk, x @ Wv, x.shape[-1] ** -0.5
    ),
    "scaled by 1/d instead of 1/sqrt(d)": lambda Q, x, Wq, Wk, Wv: _weights(
        Q @ Wq, x @ Wk, x @ Wv, 1 / Wk.shape[1]
    ),
    "values not projected (V = x)": lambda Q, x, Wq, Wk, Wv: _weights(
        Q @ Wq, x @ Wk, x, Wk.shape[1] ** -0.5
    ),
    "keys not projected (K = x)": lambda Q, x, Wq, Wk, Wv: _weights(
        Q @ Wq, x, x @ Wv, Wk.shape[1] ** -0.5
    ),
    "projection matrices transposed": lambda Q, x, Wq, Wk, Wv: _weights(
        Q @ Wq.T, x @ Wk.T, x @ Wv.T, Wk.shape[0] ** -0.5
    ),
    "softmax over the queries instead of the keys": lambda Q, x, Wq, Wk, Wv: _weights(
        Q @ Wq, x @ Wk, x @ Wv, Wk.shape[1] ** -0.5, dim=-2
    ),
}


@pytest.mark.parametrize("mistake", sorted(QKV_WRONG))
def test_qkv_check_names_each_classic_mistake(mistake):
    assert_rejected(QKV, QKV_WRONG[mistake], mistake)


def test_qkv_check_covers_every_registered_mistake():
    assert set(QKV_WRONG) == mistake_names(QKV)
    assert_registered_mistakes_named(QKV)


def test_qkv_check_reports_an_unknown_shape_error_with_the_case():
    def broken(queries, x, W_q, W_k, W_v):
        if x.shape[-1] != queries.shape[-1]:  # an error no known mistake makes
            return torch.cat([queries, x], dim=-1)
        return checks.get(QKV).reference(queries, x, W_q, W_k, W_v)

    result = checks.run(QKV, broken)
    assert result.status == "failed" and result.mistake is None
    assert "your code raised RuntimeError" in result.message


def test_qkv_check_asks_for_the_weights_too():
    result = checks.run(QKV, lambda *a: checks.get(QKV).reference(*a)[0])
    assert result.status == "failed" and "(output, weights)" in result.message


def test_qkv_cases_cover_batch_dims_unequal_widths_and_a_square_first_case():
    cases = checks.get(QKV).make_cases(0)
    assert {c.inputs["queries"].ndim for c in cases} >= {2, 3, 4}
    assert any(len({c.inputs[w].shape[0] for w in ("W_q", "W_k")}) == 2 for c in cases)
    first = cases[0].inputs
    assert len({*first["W_q"].shape, *first["W_k"].shape, *first["W_v"].shape}) == 1


def test_qkv_reference_matches_torch_sdpa_on_every_case():
    for case in checks.get(QKV).make_cases(3):
        i = case.inputs
        out, w = checks.get(QKV).reference(i["queries"], i["x"], i["W_q"], i["W_k"], i["W_v"])
        expected = F.scaled_dot_product_attention(
            i["queries"] @ i["W_q"], i["x"] @ i["W_k"], i["x"] @ i["W_v"]
        )
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close(w.sum(-1), torch.ones_like(w.sum(-1)))


# ----------------------------------------------------------------------------- questions
# Each graded question: a missing answer is not attempted, a nonsense answer and every
# distractor fail (with feedback that points at the evidence, not at the answer), the right
# answer passes; the claims that back it are asserted in every profile, sit below the answer
# cell (they would give it away above it) and are printed with a tick in the stored run.

_SOLUTION = Path(__file__).resolve().parents[1] / "solutions" / "03_scaled_dot_product.ipynb"


def _solution_cells():
    return json.loads(_SOLUTION.read_text(encoding="utf-8"))["cells"]


def test_the_spread_question_reads_a_row_every_profile_prints_the_same():
    from course_utils.lessons.nb03_scaled_dot_product import recipe as nb03
    from course_utils.lessons.nb03_scaled_dot_product.questions import SPREAD_PAIRS, SPREAD_WIDTH

    for profile in ("ci", "cpu", "gpu"):
        cfg = nb03.config(profile)
        assert SPREAD_WIDTH in cfg.dims and cfg.n_pairs == SPREAD_PAIRS, profile
    q = checks.get_question("03.Q1")
    truth = q.expected()  # the default seed's: the stored run had no COURSE_STUDENT
    table = next(c for c in _solution_cells() if c.get("id") == "variance-measure")
    printed = "".join("".join(o.get("text", "")) for o in table["outputs"])
    row = next(
        line.split() for line in printed.splitlines() if line.split()[:1] == [str(SPREAD_WIDTH)]
    )
    std, root = float(row[2]), float(row[3])
    from_table = round(100 * (std - root) / root, 2)  # what a student computes from the row
    assert abs(std - math.sqrt(SPREAD_WIDTH) * (1 + truth / 100)) < 0.006  # a std, not a variance
    assert check_answer(q, from_table).status == "passed"
    assert check_answer(q, 0).status == "failed"  # "std = sqrt(d)" from the prose is not enough
    assert check_answer(q, std).status == "failed"  # the std itself
    assert check_answer(q, float(row[1])).status == "failed"  # the variance column
    assert check_answer(q, float(row[4])).status == "failed"  # the scaled column


# ----------------------------------------------------------------------------- every seed
# What tests/test_same_verdict_every_seed.py sweeps over many seeds, by exercise: the correct
# answers written differently, and the wrong ones by the name of the mistake they make.
SWEEP_CORRECT = {
    ID: [sdpa_einsum, sdpa_where, sdpa_float_mask],
    QKV: [qkv_einsum, qkv_torch_sdpa, qkv_linear],
}
SWEEP_WRONG = {ID: WRONG, QKV: QKV_WRONG}
