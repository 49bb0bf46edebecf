"""The 07.2 check (parameter count of a Transformer block) accepts correct formulas written
differently, rejects each classic mistake with a hint naming it, and insists on a formula."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from course_utils.checks import ERROR, FAILED, NOT_ATTEMPTED, PASSED, get, run
from course_utils.checks.nb07_param_count import (
    MISTAKES,
    block_param_count,
    call,
    formula_block_param_count,
    make_cases,
)
from course_utils.layers import TransformerBlock


def _count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("seed", range(5))
def test_closed_form_equals_the_parameters_of_a_real_block(seed):
    g = torch.Generator().manual_seed(seed)
    H = int(torch.randint(1, 5, (1,), generator=g))
    D = H * int(torch.randint(2, 9, (1,), generator=g))
    F = int(torch.randint(1, 64, (1,), generator=g))
    ours = TransformerBlock(D, H, F)
    torchs = nn.TransformerEncoderLayer(D, H, F)
    assert formula_block_param_count(D, H, F) == _count(ours) == _count(torchs)
    assert block_param_count(D, H, F) == _count(ours)


def test_reference_passes_its_own_check():
    assert run("07.2", block_param_count).passed
    assert run("07.2", formula_block_param_count).passed


def _per_head(d_model, n_heads, d_ff):
    """Correct, written differently: head by head, then W_O, MLP and norms."""
    dh = d_model // n_heads
    heads = n_heads * 3 * (d_model * dh + dh)
    w_o = d_model * d_model + d_model
    mlp = (d_model * d_ff + d_ff) + (d_ff * d_model + d_model)
    return heads + w_o + mlp + 2 * (d_model + d_model)


def _float_arithmetic(d_model, n_heads, d_ff):
    """Correct, with true division (returns a float that is a whole number)."""
    per_head_width = d_model / n_heads
    return (
        4 * n_heads * per_head_width * d_model
        + 4 * d_model
        + 2 * d_model * d_ff
        + d_ff
        + 5 * d_model
    )


def _numpy_int(d_model, n_heads, d_ff):
    return np.int64(4 * d_model**2 + 2 * d_model * d_ff + 9 * d_model + d_ff)


def _tensor_scalar(d_model, n_heads, d_ff):
    return torch.tensor(4 * d_model**2 + 2 * d_model * d_ff + 9 * d_model + d_ff)


@pytest.mark.parametrize("answer", [_per_head, _float_arithmetic, _numpy_int, _tensor_scalar])
def test_correct_formulas_written_differently_pass(answer):
    result = run("07.2", answer)
    assert result.status == PASSED, result.message


@pytest.mark.parametrize("mistake", MISTAKES, ids=lambda m: m.name)
def test_each_classic_mistake_is_rejected_with_a_hint_naming_it(mistake):
    result = run("07.2", mistake.impl)
    assert result.status == FAILED
    assert result.mistake == mistake.name
    assert mistake.name in result.message and mistake.hint in result.message


def test_required_mistakes_are_all_known():
    names = {m.name for m in MISTAKES}
    for required in (
        "forgot the biases",
        "forgot the LayerNorm parameters",
        "W_O counted twice",
        "W_O not counted",
        "d_model and d_ff swapped",
    ):
        assert required in names


@pytest.mark.parametrize("seed", range(10))
def test_mistakes_give_distinct_counts_on_the_first_case_of_every_seed(seed):
    case = make_cases(seed)[0]
    args = (case.inputs["d_model"], case.inputs["n_heads"], case.inputs["d_ff"])
    counts = [formula_block_param_count(*args)] + [m.impl(*args) for m in MISTAKES]
    assert len(set(counts)) == len(counts), (case.name, counts)


def test_cases_include_real_model_sizes_and_keep_d_ff_apart_from_d_model():
    cases = make_cases(3)
    names = " ".join(c.name for c in cases)
    assert "BERT-base" in names and "GPT-3" in names
    for c in cases[:2]:
        D, H, F = c.inputs["d_model"], c.inputs["n_heads"], c.inputs["d_ff"]
        assert D % H == 0 and H >= 2 and F % D != 0 and D % F != 0


def test_bert_base_layer_has_the_known_count():
    assert formula_block_param_count(768, 12, 3072) == 7_087_872


def test_building_a_block_to_count_is_rejected_as_not_a_formula():
    def count_a_module(d_model, n_heads, d_ff):
        return _count(TransformerBlock(d_model, n_heads, d_ff))

    result = run("07.2", count_a_module)
    assert result.status == ERROR
    assert "formula" in result.message


def test_non_integer_count_is_an_error_that_says_so():
    result = run(
        "07.2",
        lambda d_model, n_heads, d_ff: formula_block_param_count(d_model, n_heads, d_ff) + 0.5,
    )
    assert result.status == ERROR
    assert "whole number" in result.message


def test_stub_is_not_attempted():
    def block_param_count_stub(d_model, n_heads, d_ff):
        raise NotImplementedError("Exercise 07.2: implement block_param_count")

    assert run("07.2", block_param_count_stub).status == NOT_ATTEMPTED


def test_outputs_are_plain_int64_scalars():
    case = make_cases(0)[0]
    out = call(formula_block_param_count, case)
    assert set(out) == {"count"} and out["count"].dtype == torch.int64
    assert out["count"].ndim == 0


def test_exercise_is_registered_for_notebook_07():
    ex = get("07.2")
    assert ex.notebook == "07_transformer_block.ipynb"
    assert ex.function == "block_param_count"
