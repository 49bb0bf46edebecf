"""Check 11.1 (tiled attention) accepts correct tilings written differently, rejects an
implementation that builds the full (T, S) score matrix even when its values are right, and
names each classic online-softmax mistake. The wrong answers here are written independently of
the check's own.

Check 11.2 (a decoding step with a key/value cache) accepts correct answers written
differently, rejects each classic mistake under its own name, and its reference decodes a
sequence exactly like full causal attention.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from checks_testing import (
    assert_no_hint_prints_a_solution_line,
    assert_passes,
    assert_registered_mistakes_named,
    assert_rejected,
    mistake_names,
)

from course_utils import checks
from course_utils.checks._common import AllocationTracker
from course_utils.lessons.nb11_attention_at_scale.exercises import WRONG_DIM, kv_cache_decode_step
from course_utils.modeling import attention

ID = "11.1"


def tiled_loop(
    q,
    k,
    v,
    block_size,
    causal=False,
    rescale=(True, True),
    use_max=True,
    scale=True,
    last_block=True,
    local_causal=False,
    ignore_causal=False,
):
    """Online softmax, written as a student might (with switches to break it)."""
    T, S = q.shape[-2], k.shape[-2]
    sm = 1 / math.sqrt(q.shape[-1]) if scale else 1.0
    row_max = torch.full(q.shape[:-1], -math.inf, dtype=q.dtype)
    denom = torch.zeros(q.shape[:-1], dtype=q.dtype)
    num = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
    end = S if last_block else (S // block_size) * block_size
    for j0 in range(0, end, block_size):
        j1 = min(j0 + block_size, S)
        s = torch.einsum("...td,...sd->...ts", q, k[..., j0:j1, :]) * sm
        if causal and not ignore_causal:
            if local_causal:
                keep = torch.arange(j1 - j0)[None, :] <= torch.arange(T)[:, None]
            else:
                keep = torch.arange(j0, j1)[None, :] <= torch.arange(T)[:, None]
            s = s.masked_fill(~keep, -math.inf)
        if use_max:
            new_max = torch.maximum(row_max, s.max(dim=-1).values)
            safe = new_max.nan_to_num(neginf=0.0)
            corr = torch.exp(row_max - safe)
        else:
            new_max, safe, corr = row_max, torch.zeros_like(row_max), torch.ones_like(row_max)
        p = torch.exp(s - safe[..., None])
        denom = (denom * corr if rescale[0] else denom) + p.sum(-1)
        num = (num * corr[..., None] if rescale[1] else num) + p @ v[..., j0:j1, :]
        row_max = new_max
    return num / denom.clamp_min(1e-300)[..., None]


def tiled_query_blocks(q, k, v, block_size, causal=False):
    """Tiles queries as well as keys (FlashAttention's two loops)."""
    T = q.shape[-2]
    outs = (
        [
            tiled_loop(q[..., i : i + block_size, :], k, v, block_size, causal=False)
            for i in range(0, T, block_size)
        ]
        if not causal
        else None
    )
    if causal:  # the causal offset of a query block is its start
        outs = []
        for i in range(0, T, block_size):
            qb = q[..., i : i + block_size, :]
            kb, vb = k[..., : i + qb.shape[-2], :], v[..., : i + qb.shape[-2], :]
            pad = torch.zeros(*qb.shape[:-2], i, qb.shape[-1], dtype=q.dtype)
            out = tiled_loop(torch.cat([pad, qb], dim=-2), kb, vb, block_size, causal=True)
            outs.append(out[..., i:, :])
    return torch.cat(outs, dim=-2)


def tiled_lse_merge(q, k, v, block_size, causal=False):
    """Each block's softmax output merged with its log-sum-exp (no running max variable)."""
    T, S = q.shape[-2], k.shape[-2]
    out, lse = None, None
    for j0 in range(0, S, block_size):
        s = q @ k[..., j0 : j0 + block_size, :].mT / math.sqrt(q.shape[-1])
        if causal:
            keep = torch.arange(j0, j0 + s.shape[-1]) <= torch.arange(T)[:, None]
            s = s.masked_fill(~keep, -math.inf)
        block_lse = torch.logsumexp(s, dim=-1, keepdim=True)  # -inf on empty rows
        block_out = (
            torch.exp(s - block_lse.nan_to_num(neginf=0.0)) @ v[..., j0 : j0 + block_size, :]
        )
        if out is None:
            out, lse = block_out, block_lse
            continue
        new_lse = torch.logaddexp(lse, block_lse)
        safe = new_lse.nan_to_num(neginf=0.0)
        out = out * torch.exp(lse - safe) + block_out * torch.exp(block_lse - safe)
        lse = new_lse
    return out


@pytest.mark.parametrize(
    "candidate",
    [tiled_loop, tiled_query_blocks, tiled_lse_merge, attention.tiled_attention],
    ids=["loop", "query blocks too", "lse merge", "reference"],
)
def test_tiled_check_accepts_correct_tilings(candidate):
    assert_passes(ID, candidate)


def naive_einsum(q, k, v, block_size, causal=False):
    s = torch.einsum("...td,...sd->...ts", q, k) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), -math.inf)
    return s.softmax(-1) @ v


def full_float_causal_mask(q, k, v, block_size, causal=False):
    T, S = q.shape[-2], k.shape[-2]
    bias = torch.zeros(T, S, dtype=q.dtype)  # (T, S) floats: as big as the scores
    if causal:
        bias = bias.masked_fill(torch.ones(T, S, dtype=torch.bool).triu(1), -math.inf)
    out = None
    m = l = None
    for j0 in range(0, S, block_size):
        s = (
            q @ k[..., j0 : j0 + block_size, :].mT / math.sqrt(q.shape[-1])
            + bias[:, j0 : j0 + block_size]
        )
        bm = s.amax(-1, keepdim=True)
        if out is None:
            m, l, out = (
                bm,
                torch.zeros_like(bm),
                torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype),
            )
        new = torch.maximum(m, bm)
        p = torch.exp(s - new)
        l = l * torch.exp(m - new) + p.sum(-1, keepdim=True)
        out = out * torch.exp(m - new) + p @ v[..., j0 : j0 + block_size, :]
        m = new
    return out / l


WRONG = {
    "materialises the full (T, S) score matrix": naive_einsum,
    "calls F.scaled_dot_product_attention instead of tiling": lambda q, k, v, block_size, causal=False: (
        F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    ),
    "online softmax without rescaling": lambda q, k, v, bs, causal=False: tiled_loop(
        q, k, v, bs, causal, rescale=(False, False)
    ),
    "running sum rescaled but not the output accumulator": lambda q, k, v, bs, causal=False: (
        tiled_loop(q, k, v, bs, causal, rescale=(True, False))
    ),
    "output accumulator rescaled but not the running sum": lambda q, k, v, bs, causal=False: (
        tiled_loop(q, k, v, bs, causal, rescale=(False, True))
    ),
    "no running max (exp overflows on large scores)": lambda q, k, v, bs, causal=False: tiled_loop(
        q, k, v, bs, causal, use_max=False
    ),
    "each block normalised on its own (block outputs averaged)": lambda q, k, v, bs, causal=False: (
        torch.stack(
            [
                tiled_loop(q, k[..., j : j + bs, :], v[..., j : j + bs, :], bs, False)
                if not causal
                else attention.scaled_dot_product_attention(
                    q,
                    k[..., j : j + bs, :],
                    v[..., j : j + bs, :],
                    torch.arange(j, j + k[..., j : j + bs, :].shape[-2])
                    <= torch.arange(q.shape[-2])[:, None],
                )[0]
                for j in range(0, k.shape[-2], bs)
            ]
        ).mean(0)
    ),
    "last partial block dropped": lambda q, k, v, bs, causal=False: tiled_loop(
        q, k, v, bs, causal, last_block=False
    ),
    "missing 1/sqrt(d_k) scaling": lambda q, k, v, bs, causal=False: tiled_loop(
        q, k, v, bs, causal, scale=False
    ),
    "causal mask built from block-local indices": lambda q, k, v, bs, causal=False: tiled_loop(
        q, k, v, bs, causal, local_causal=True
    ),
    "causal flag ignored": lambda q, k, v, bs, causal=False: tiled_loop(
        q, k, v, bs, causal, ignore_causal=True
    ),
}


@pytest.mark.parametrize("mistake", sorted(WRONG))
def test_tiled_check_names_each_classic_mistake(mistake):
    assert_rejected(ID, WRONG[mistake], mistake)


def test_tiled_check_covers_every_registered_mistake():
    assert set(WRONG) == mistake_names(ID)
    assert_registered_mistakes_named(ID)


def test_tiled_check_rejects_a_full_size_float_mask_even_with_right_values():
    result = checks.run(ID, full_float_causal_mask)
    assert result.status == "failed"
    assert "the values are right" in result.message
    assert "Likely mistake: materialises the full (T, S) score matrix" in result.message


def test_tiled_check_message_shows_the_full_matrix_shape():
    result = checks.run(ID, naive_einsum)
    case = checks.get(ID).make_cases(0)[0]
    T, S = case.inputs["q"].shape[-2], case.inputs["k"].shape[-2]
    assert f"shape ({T}, {S})" in result.message


def test_allocation_tracker_counts_storage_not_the_size_of_views():
    a = torch.randn(4, 8)
    with AllocationTracker() as tracker:
        big_view = a.expand(100, 4, 8)  # 3200 elements seen, 32 stored
        torch.ones(50, 50, dtype=torch.bool)  # not floating point
        c = torch.zeros(6, 6) + 1.0  # 36 stored
    assert big_view.numel() == 3200 and c.numel() == 36
    assert tracker.largest == 36 and tracker.largest_shape == (6, 6)
    assert tracker.fused is None


def test_allocation_tracker_flags_fused_attention():
    q = torch.randn(1, 3, 4)
    with AllocationTracker() as tracker:
        F.scaled_dot_product_attention(q, q, q)
    assert tracker.fused is not None


# ----------------------------------------------------------------------------- 11.2 KV-cache decoding step
KV_ID = "11.2"


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
    assert_passes(KV_ID, answer)


def test_every_registered_mistake_is_rejected_and_named():
    assert_registered_mistakes_named(KV_ID)


def _steps(cat_dim):
    def wrong(x_t, W_q, W_k, W_v, cache_k, cache_v):
        K = torch.cat([cache_k, x_t @ W_k], dim=cat_dim)
        V = torch.cat([cache_v, x_t @ W_v], dim=cat_dim)
        return F.scaled_dot_product_attention(x_t @ W_q, K, V), K, V

    return wrong


@pytest.mark.parametrize("cat_dim", [0, 1, -1])
def test_concatenating_on_a_wrong_dim_is_named_even_though_it_raises(cat_dim):
    assert_rejected(KV_ID, _steps(cat_dim), WRONG_DIM)


def test_sdpa_with_is_causal_on_one_query_is_named_top_left_mask():
    def causal_sdpa(x_t, W_q, W_k, W_v, cache_k, cache_v):
        K = torch.cat([cache_k, x_t @ W_k], dim=-2)
        V = torch.cat([cache_v, x_t @ W_v], dim=-2)
        return F.scaled_dot_product_attention(x_t @ W_q, K, V, is_causal=True), K, V

    assert_rejected(KV_ID, causal_sdpa, "top-left causal mask on the single query")


def test_forgetting_to_append_is_named_even_with_the_cache_returned_unchanged():
    def never_appends(x_t, W_q, W_k, W_v, cache_k, cache_v):
        out = F.scaled_dot_product_attention(x_t @ W_q, cache_k, cache_v)
        return out, torch.cat([cache_k, x_t @ W_k], -2), torch.cat([cache_v, x_t @ W_v], -2)

    assert_rejected(KV_ID, never_appends, "attends before appending the new key and value")


def test_returning_a_pair_says_to_return_the_triple():
    result = checks.run(KV_ID, lambda *a: kv_cache_decode_step(*a)[:2])
    assert result.status == "error" and "(out, new_cache_k, new_cache_v)" in result.message


def test_unsolved_stub_is_not_attempted():
    def stub(x_t, W_q, W_k, W_v, cache_k, cache_v):
        raise NotImplementedError("Exercise 11.2")

    assert checks.run(KV_ID, stub).status == "not_attempted"


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


@pytest.mark.parametrize("exercise_id", ["11.1", "11.2"])
def test_no_hint_prints_a_solution_line(exercise_id):
    assert_no_hint_prints_a_solution_line(exercise_id)


# ----------------------------------------------------------------------------- every seed
# What tests/test_same_verdict_every_seed.py sweeps over many seeds, by exercise: the correct
# answers written differently, and the wrong ones by the name of the mistake they make.
SWEEP_CORRECT = {
    ID: [tiled_loop, tiled_query_blocks, tiled_lse_merge],
    KV_ID: [decode_einsum, decode_torch_sdpa_no_mask, decode_bottom_right_mask],
}
SWEEP_WRONG = {ID: WRONG}
