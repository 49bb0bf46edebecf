"""course_utils.modeling.attention against PyTorch's references (float64, random shapes) and its properties."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from tensors_testing import DEVICES, F64, gen, randn, random_mask
from torch.utils._python_dispatch import TorchDispatchMode

from course_utils.modeling.attention import (
    AdditiveAttention,
    additive_scores,
    causal_mask,
    combine_masks,
    fast_attention,
    masked_softmax,
    padding_mask,
    scaled_dot_product_attention,
    softmax,
    tiled_attention,
)

FEW = settings(max_examples=15, deadline=None)


batch_dims = st.lists(st.integers(1, 3), min_size=0, max_size=2).map(tuple)
length = st.integers(1, 9)
width = st.integers(1, 8)


# ----------------------------------------------------------------------------- softmax


@FEW
@given(shape=st.lists(st.integers(1, 6), min_size=1, max_size=4), seed=st.integers(0, 10**6))
def test_softmax_rows_sum_to_one_and_match_torch(shape, seed):
    x = randn(*shape, g=gen(seed)) * 5
    for dim in range(-len(shape), 0):
        p = softmax(x, dim=dim)
        torch.testing.assert_close(p.sum(dim), torch.ones_like(p.sum(dim)))
        torch.testing.assert_close(p, torch.softmax(x, dim=dim))
        assert (p >= 0).all()


@pytest.mark.parametrize("big", [1e4, -1e4, 1e30])
def test_softmax_is_stable_for_large_inputs(big):
    x = randn(4, 7, g=gen(0)) * big
    p = softmax(x)
    assert torch.isfinite(p).all()
    torch.testing.assert_close(p, torch.softmax(x, dim=-1))
    naive = torch.exp(x) / torch.exp(x).sum(-1, keepdim=True)
    if big > 0:
        assert not torch.isfinite(naive).all()  # the naive formula overflows


# ----------------------------------------------------------------------------- masks


def test_causal_mask_blocks_future_tokens():
    m = causal_mask(5)
    assert m.dtype == torch.bool and m.shape == (5, 5)
    assert torch.equal(m, torch.ones(5, 5, dtype=torch.bool).tril())
    for i in range(5):
        for j in range(5):
            assert m[i, j] == (j <= i)


@pytest.mark.parametrize("T,S", [(1, 6), (3, 7), (4, 4), (6, 3)])
def test_causal_mask_with_cache_treats_queries_as_the_last_positions(T, S):
    m = causal_mask(T, S)
    assert m.shape == (T, S)
    for i in range(T):
        for j in range(S):
            assert m[i, j] == (j <= i + (S - T))
    if T <= S:
        assert m[-1].all()  # the newest query sees every key


def test_padding_mask_is_true_at_real_tokens():
    m = padding_mask(torch.tensor([3, 0, 5]), 5)
    expected = torch.tensor([[1, 1, 1, 0, 0], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(m, expected)
    assert torch.equal(padding_mask([2], 3), torch.tensor([[True, True, False]]))


@FEW
@given(lead=batch_dims, T=length, S=length, seed=st.integers(0, 10**6))
def test_masked_softmax_matches_softmax_of_filled_scores(lead, T, S, seed):
    g = gen(seed)
    scores = randn(*lead, T, S, g=g) * 3
    mask = random_mask(T, S, g=g)
    w = masked_softmax(scores, mask)
    expected = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    torch.testing.assert_close(w, expected)
    assert (w[..., ~mask] == 0).all()


def test_masked_softmax_fully_masked_rows_give_zeros_and_finite_gradients():
    g = gen(1)
    scores = randn(2, 4, 5, g=g).requires_grad_()
    mask = random_mask(2, 4, 5, g=g)
    mask[0, 1] = False  # one fully masked row
    mask[1] = False  # a fully masked sequence
    w = masked_softmax(scores, mask)
    assert torch.isfinite(w).all()
    assert (w[0, 1] == 0).all() and (w[1] == 0).all()
    torch.testing.assert_close(w[0, 0].sum(), torch.tensor(1.0, dtype=F64))
    (w * randn(2, 4, 5, g=g)).sum().backward()
    assert torch.isfinite(scores.grad).all()
    assert (scores.grad[1] == 0).all()


def test_masked_softmax_handles_minus_inf_scores_and_rejects_bad_masks():
    scores = torch.tensor([[float("-inf"), float("-inf")], [0.0, float("-inf")]])
    torch.testing.assert_close(masked_softmax(scores), torch.tensor([[0.0, 0.0], [1.0, 0.0]]))
    with pytest.raises(ValueError, match="mask"):
        masked_softmax(torch.zeros(3, 4), torch.ones(3, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="bool"):
        masked_softmax(torch.zeros(3, 4), torch.ones(3, 4))


def test_combine_masks_ands_padding_and_causality():
    kpm = padding_mask([2, 3], 3)  # (B, S)
    m = combine_masks(None, kpm, is_causal=True, T=3, S=3)
    assert m.shape == (2, 1, 3, 3)
    expected = kpm[:, None, None, :] & causal_mask(3)
    assert torch.equal(m, expected)
    float_mask = torch.zeros(3, 3)
    mf = combine_masks(float_mask, kpm, T=3, S=3)
    assert mf.dtype == torch.float32 and torch.equal(
        torch.isneginf(mf), ~kpm[:, None, None, :].expand(2, 1, 3, 3)
    )
    assert combine_masks(None, None) is None


# ----------------------------------------------------------------------------- scaled dot-product


@FEW
@given(lead=batch_dims, T=length, S=length, Dk=width, Dv=width, seed=st.integers(0, 10**6))
def test_sdpa_matches_torch_over_batch_dims_and_shapes(lead, T, S, Dk, Dv, seed):
    g = gen(seed)
    q, k, v = randn(*lead, T, Dk, g=g), randn(*lead, S, Dk, g=g), randn(*lead, S, Dv, g=g)
    out, w = scaled_dot_product_attention(q, k, v)
    assert out.shape == (*lead, T, Dv) and w.shape == (*lead, T, S)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))
    torch.testing.assert_close(w, torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(Dk), -1))
    torch.testing.assert_close(w.sum(-1), torch.ones(*lead, T, dtype=F64))


@FEW
@given(lead=batch_dims, T=length, S=length, Dk=width, Dv=width, seed=st.integers(0, 10**6))
def test_sdpa_matches_torch_with_bool_and_float_masks(lead, T, S, Dk, Dv, seed):
    g = gen(seed)
    q, k, v = randn(*lead, T, Dk, g=g), randn(*lead, S, Dk, g=g), randn(*lead, S, Dv, g=g)
    mask = random_mask(*lead, T, S, g=g)
    out, w = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    assert (w[~mask] == 0).all()
    bias = randn(T, S, g=g)  # a float mask is added to the scores
    out_f, _ = scaled_dot_product_attention(q, k, v, bias)
    torch.testing.assert_close(out_f, F.scaled_dot_product_attention(q, k, v, attn_mask=bias))
    out_s, _ = scaled_dot_product_attention(q, k, v, scale=0.3)
    torch.testing.assert_close(out_s, F.scaled_dot_product_attention(q, k, v, scale=0.3))


@pytest.mark.parametrize("T,S", [(5, 5), (1, 6), (3, 8)])
def test_sdpa_causal_matches_torch(T, S):
    g = gen(T * 10 + S)
    q, k, v = randn(2, 3, T, 4, g=g), randn(2, 3, S, 4, g=g), randn(2, 3, S, 6, g=g)
    out, w = scaled_dot_product_attention(q, k, v, is_causal=True)
    if T == S:
        torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))
    # our causal is bottom-right aligned (KV cache); give torch the explicit mask
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(T, S))
    torch.testing.assert_close(out, ref)
    assert (w[..., ~causal_mask(T, S)] == 0).all()


def test_sdpa_fully_masked_rows_give_zero_output():
    g = gen(3)
    q, k, v = randn(2, 4, 3, g=g), randn(2, 5, 3, g=g), randn(2, 5, 2, g=g)
    mask = random_mask(2, 4, 5, g=g)
    mask[1, 2] = False
    out, w = scaled_dot_product_attention(q, k, v, mask)
    assert torch.isfinite(out).all()
    assert (out[1, 2] == 0).all() and (w[1, 2] == 0).all()


@pytest.mark.parametrize(
    "mask_kind", ["none", "bool", "float", "causal", "causal+bool", "empty rows"]
)
def test_fast_attention_equals_manual_path(mask_kind):
    g = gen(4)
    T, S = 5, 7
    q = randn(2, 3, T, 4, g=g).requires_grad_()
    k, v = randn(2, 3, S, 4, g=g), randn(2, 3, S, 6, g=g)
    mask, causal = None, mask_kind.startswith("causal")
    if mask_kind in ("bool", "causal+bool", "empty rows"):
        mask = random_mask(2, 1, T, S, g=g)
    if mask_kind == "empty rows":
        mask[0, 0, 1] = False
        mask[1, 0] = False
    if mask_kind == "float":
        mask = randn(T, S, g=g)
        mask[2] = float("-inf")
    manual, _ = scaled_dot_product_attention(q, k, v, mask, is_causal=causal)
    fast = fast_attention(q, k, v, mask, is_causal=causal)
    torch.testing.assert_close(fast, manual)
    (grad_fast,) = torch.autograd.grad(fast.sum(), q)
    (grad_manual,) = torch.autograd.grad(manual.sum(), q)
    assert torch.isfinite(grad_fast).all()
    torch.testing.assert_close(grad_fast, grad_manual)


def test_sdpa_shape_errors_name_the_argument():
    q, k, v = torch.zeros(2, 4, 3), torch.zeros(2, 5, 3), torch.zeros(2, 5, 6)
    with pytest.raises(ValueError, match=r"q of shape \(\.\.\., T, Dk\)"):
        scaled_dot_product_attention(q, torch.zeros(2, 5, 4), v)
    with pytest.raises(ValueError, match=r"v of shape \(\.\.\., S, Dv\)"):
        scaled_dot_product_attention(q, k, torch.zeros(2, 6, 6))
    with pytest.raises(ValueError, match="attn_mask broadcastable"):
        scaled_dot_product_attention(q, k, v, torch.ones(4, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="batch dims"):
        scaled_dot_product_attention(q, torch.zeros(3, 5, 3), torch.zeros(3, 5, 6))
    with pytest.raises(ValueError, match="attn_mask broadcastable"):
        fast_attention(q, k, v, torch.ones(3, 4, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="at least 2 dims"):
        scaled_dot_product_attention(torch.zeros(3), k, v)


def test_sdpa_dropout_changes_output_but_returns_undropped_weights():
    g = gen(5)
    q, k, v = randn(2, 6, 4, g=g), randn(2, 6, 4, g=g), randn(2, 6, 4, g=g)
    torch.manual_seed(0)
    out, w = scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    ref_out, ref_w = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(w, ref_w)
    assert not torch.allclose(out, ref_out)


def test_causal_attention_has_zero_jacobian_from_future_inputs():
    g = gen(6)
    T, D = 6, 4
    Wq, Wk, Wv = randn(D, D, g=g), randn(D, D, g=g), randn(D, D, g=g)
    x = randn(T, D, g=g)

    def self_attention(x):
        return scaled_dot_product_attention(x @ Wq, x @ Wk, x @ Wv, is_causal=True)[0]

    J = torch.autograd.functional.jacobian(self_attention, x)  # (T, D, T, D): d out[i] / d x[j]
    norms = J.abs().sum(dim=(1, 3))  # (T, T)
    future = ~causal_mask(T)
    assert (norms[future] == 0).all()
    assert (norms[~future] > 0).all()  # and the past does matter
    J_tiled = torch.autograd.functional.jacobian(
        lambda x: tiled_attention(x @ Wq, x @ Wk, x @ Wv, block_size=4, causal=True), x
    )
    assert (J_tiled.abs().sum(dim=(1, 3))[future] == 0).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_attention_functions_run_in_float32_float64_and_on_cuda(device, dtype):
    g = gen(7)
    q, k, v = (randn(2, 5, 4, g=g, dtype=dtype).to(device) for _ in range(3))
    mask = causal_mask(5, device=device)
    out, w = scaled_dot_product_attention(q, k, v, mask)
    fast = fast_attention(q, k, v, mask)
    tiled = tiled_attention(q, k, v, block_size=2, causal=True)
    for t in (out, w, fast, tiled):
        assert t.dtype == dtype and t.device.type == device
    tol = dict(atol=1e-5, rtol=1e-4) if dtype == torch.float32 else {}
    torch.testing.assert_close(fast, out, **tol)
    torch.testing.assert_close(tiled, out, **tol)
    ctx, weights = AdditiveAttention(4, 4, 3).to(device, dtype)(q[:, 0], k)
    assert ctx.dtype == dtype and weights.shape == (2, 5)
    assert (
        masked_softmax(q @ k.transpose(-2, -1), mask).dtype == dtype
        and softmax(q).device.type == device
    )


# ----------------------------------------------------------------------------- additive


def test_additive_scores_follow_the_bahdanau_formula():
    g = gen(8)
    B, S, Dq, Dk, A = 3, 5, 4, 6, 7
    s, h = randn(B, Dq, g=g), randn(B, S, Dk, g=g)
    Wq, Wk, v = randn(A, Dq, g=g), randn(A, Dk, g=g), randn(A, g=g)
    e = additive_scores(s, h, Wq, Wk, v)
    assert e.shape == (B, S)
    for b in range(B):
        for j in range(S):
            expected = v @ torch.tanh(Wq @ s[b] + Wk @ h[b, j])
            torch.testing.assert_close(e[b, j], expected)
    with pytest.raises(ValueError, match="W_key of shape"):
        additive_scores(s, h, Wq, randn(A, Dk + 1, g=g), v)
    with pytest.raises(ValueError, match=r"keys of shape \(B, S, Dk\)"):
        additive_scores(s, h[0], Wq, Wk, v)


def test_additive_attention_module_uses_the_functional_scores_and_ignores_padding():
    torch.manual_seed(0)
    B, S, Dq, Dk, Dv, A = 3, 6, 4, 5, 2, 8
    att = AdditiveAttention(Dq, Dk, A).double()
    g = gen(9)
    s, h, values = randn(B, Dq, g=g), randn(B, S, Dk, g=g), randn(B, S, Dv, g=g)
    mask = padding_mask([6, 3, 1], S)
    ctx, w = att(s, h, values, mask)
    assert ctx.shape == (B, Dv) and w.shape == (B, S)
    scores = additive_scores(s, h, att.W_query.weight, att.W_key.weight, att.v)
    expected_w = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1)
    torch.testing.assert_close(w, expected_w)
    torch.testing.assert_close(ctx, torch.einsum("bs,bsd->bd", w, values))
    # changing padded keys and values changes nothing
    h2, values2 = h.clone(), values.clone()
    h2[~mask], values2[~mask] = 100.0, -100.0
    ctx2, w2 = att(s, h2, values2, mask)
    torch.testing.assert_close(ctx2, ctx)
    torch.testing.assert_close(w2, w)
    ctx_keys, _ = att(s, h)  # values default to the keys
    assert ctx_keys.shape == (B, Dk)
    with pytest.raises(ValueError, match="mask of shape"):
        att(s, h, values, mask[:, :3])


# ----------------------------------------------------------------------------- tiled


@FEW
@given(
    lead=batch_dims,
    T=st.integers(1, 12),
    S=st.integers(1, 12),
    block=st.integers(1, 7),
    causal=st.booleans(),
    seed=st.integers(0, 10**6),
)
def test_tiled_attention_equals_reference(lead, T, S, block, causal, seed):
    g = gen(seed)
    q, k, v = randn(*lead, T, 4, g=g), randn(*lead, S, 4, g=g), randn(*lead, S, 3, g=g)
    out = tiled_attention(q, k, v, block_size=block, causal=causal)
    ref, _ = scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.testing.assert_close(out, ref, atol=1e-6, rtol=0)


@pytest.mark.parametrize("causal", [False, True])
def test_tiled_attention_matches_torch_on_a_longer_sequence(causal):
    g = gen(10)
    q, k, v = randn(2, 2, 50, 8, g=g), randn(2, 2, 50, 8, g=g), randn(2, 2, 50, 5, g=g)
    out = tiled_attention(q, k, v, block_size=16, causal=causal)  # 16 does not divide 50
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.testing.assert_close(out, ref, atol=1e-6, rtol=0)


def test_tiled_attention_causal_rows_with_no_key_are_zero():
    g = gen(11)
    q, k, v = (
        randn(6, 4, g=g),
        randn(3, 4, g=g),
        randn(3, 2, g=g),
    )  # T > S: first 3 rows see nothing
    out = tiled_attention(q, k, v, block_size=2, causal=True)
    assert (out[:3] == 0).all()
    torch.testing.assert_close(out, scaled_dot_product_attention(q, k, v, is_causal=True)[0])


class LargestTensor(TorchDispatchMode):
    """Records the largest number of elements of any tensor an op produces."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


@pytest.mark.parametrize("causal", [False, True])
def test_tiled_attention_never_materialises_the_score_matrix(causal):
    B, T, S, D, block = 2, 64, 48, 4, 8
    g = gen(12)
    q, k, v = randn(B, T, D, g=g), randn(B, S, D, g=g), randn(B, S, D, g=g)
    with LargestTensor() as spy:
        tiled_attention(q, k, v, block_size=block, causal=causal)
    assert spy.largest <= B * T * block < B * T * S
    with LargestTensor() as naive:  # the spy does catch a (B, T, S) score matrix
        scaled_dot_product_attention(q, k, v, is_causal=causal)
    assert naive.largest >= B * T * S


def test_tiled_attention_rejects_bad_arguments():
    q = torch.zeros(4, 3)
    with pytest.raises(ValueError, match="block_size"):
        tiled_attention(q, q, q, block_size=0)
    with pytest.raises(ValueError, match="q of shape"):
        tiled_attention(q, torch.zeros(4, 2), torch.zeros(4, 2))
