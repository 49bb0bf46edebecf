"""Check 11.2 (a decoding step with a key/value cache) accepts correct answers written
differently, rejects each classic mistake under its own name, and its reference decodes a
sequence exactly like full causal attention."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from checks_testing import (
    assert_passes,
    assert_registered_mistakes_named,
    assert_rejected,
)

from course_utils import attention, checks
from course_utils.checks.nb11_kv_cache import WRONG_DIM, kv_cache_decode_step

ID = "11.2"


def decode_einsum(x_t, W_q, W_k, W_v, cache_k, cache_v):
    q = torch.einsum("...td,dk->...tk", x_t, W_q)
    K = torch.concat((cache_k, torch.einsum("...td,dk->...tk", x_t, W_k)), -2)
    V = torch.concat((cache_v, torch.einsum("...td,dv->...tv", x_t, W_v)), -2)
    w = torch.einsum("...tk,...sk->...ts", q, K) / math.sqrt(K.shape[-1])
    w = (w - w.logsumexp(-1, keepdim=True)).exp()
    return torch.einsum("...ts,...sv->...tv", w, V), K, V


def decode_torch_sdpa_no_mask(x_t, W_q, W_k, W_v, cache_k, cache_v):
    K = torch.cat([cache_k, x_t @ W_k], dim=-2)
    V = torch.cat([cache_v, x_t @ W_v], dim=-2)
    return [F.scaled_dot_product_attention(x_t @ W_q, K, V), K, V]  # a list is fine too


def decode_bottom_right_mask(x_t, W_q, W_k, W_v, cache_k, cache_v):
    K = torch.cat([cache_k, x_t @ W_k], dim=-2)
    V = torch.cat([cache_v, x_t @ W_v], dim=-2)
    mask = attention.causal_mask(1, K.shape[-2])  # queries are the LAST positions: all True
    return attention.scaled_dot_product_attention(x_t @ W_q, K, V, mask)[0], K, V


@pytest.mark.parametrize(
    "answer",
    [kv_cache_decode_step, decode_einsum, decode_torch_sdpa_no_mask, decode_bottom_right_mask],
    ids=["reference", "einsum", "F.sdpa without mask", "bottom-right mask"],
)
def test_correct_answers_written_differently_pass(answer):
    assert_passes(ID, answer)


def test_every_registered_mistake_is_rejected_and_named():
    assert_registered_mistakes_named(ID)


def _steps(cat_dim):
    def wrong(x_t, W_q, W_k, W_v, cache_k, cache_v):
        K = torch.cat([cache_k, x_t @ W_k], dim=cat_dim)
        V = torch.cat([cache_v, x_t @ W_v], dim=cat_dim)
        return F.scaled_dot_product_attention(x_t @ W_q, K, V), K, V

    return wrong


@pytest.mark.parametrize("cat_dim", [0, 1, -1])
def test_concatenating_on_a_wrong_dim_is_named_even_though_it_raises(cat_dim):
    assert_rejected(ID, _steps(cat_dim), WRONG_DIM)


def test_sdpa_with_is_causal_on_one_query_is_named_top_left_mask():
    def causal_sdpa(x_t, W_q, W_k, W_v, cache_k, cache_v):
        K = torch.cat([cache_k, x_t @ W_k], dim=-2)
        V = torch.cat([cache_v, x_t @ W_v], dim=-2)
        return F.scaled_dot_product_attention(x_t @ W_q, K, V, is_causal=True), K, V

    assert_rejected(ID, causal_sdpa, "top-left causal mask on the single query")


def test_forgetting_to_append_is_named_even_with_the_cache_returned_unchanged():
    def never_appends(x_t, W_q, W_k, W_v, cache_k, cache_v):
        out = F.scaled_dot_product_attention(x_t @ W_q, cache_k, cache_v)
        return out, torch.cat([cache_k, x_t @ W_k], -2), torch.cat([cache_v, x_t @ W_v], -2)

    assert_rejected(ID, never_appends, "attends before appending the new key and value")


def test_returning_a_pair_says_to_return_the_triple():
    result = checks.run(ID, lambda *a: kv_cache_decode_step(*a)[:2])
    assert result.status == "error" and "(out, new_cache_k, new_cache_v)" in result.message


def test_unsolved_stub_is_not_attempted():
    def stub(x_t, W_q, W_k, W_v, cache_k, cache_v):
        raise NotImplementedError("Exercise 11.2")

    assert checks.run(ID, stub).status == "not_attempted"


def test_decoding_token_by_token_equals_full_causal_attention():
    g = torch.Generator().manual_seed(0)
    B, T, D, Dk, Dv = 2, 6, 5, 4, 3
    x = torch.randn(B, T, D, generator=g, dtype=torch.float64)
    W_q, W_k = (torch.randn(D, Dk, generator=g, dtype=torch.float64) for _ in range(2))
    W_v = torch.randn(D, Dv, generator=g, dtype=torch.float64)
    full, _ = attention.scaled_dot_product_attention(x @ W_q, x @ W_k, x @ W_v, is_causal=True)
    cache_k, cache_v = x.new_zeros(B, 0, Dk), x.new_zeros(B, 0, Dv)
    outs = []
    for t in range(T):
        out, cache_k, cache_v = kv_cache_decode_step(
            x[:, t : t + 1], W_q, W_k, W_v, cache_k, cache_v
        )
        outs.append(out)
    torch.testing.assert_close(torch.cat(outs, dim=1), full)
    assert cache_k.shape == (B, T, Dk) and cache_v.shape == (B, T, Dv)


def test_reference_rejects_a_token_without_its_time_axis():
    W = torch.zeros(4, 3)
    with pytest.raises(ValueError, match=r"\(\.\.\., 1, D\)"):
        kv_cache_decode_step(torch.zeros(2, 4), W, W, W, torch.zeros(2, 0, 3), torch.zeros(2, 0, 3))
