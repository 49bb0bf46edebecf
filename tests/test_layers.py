"""course_utils.modeling.layers against nn.MultiheadAttention / nn.TransformerEncoderLayer /
nn.TransformerDecoderLayer (float64), fast == manual path, KV cache, and properties."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensors_testing import DEVICES, F64, gen, randn
from torch import nn

from course_utils.modeling.attention import causal_mask, padding_mask, scaled_dot_product_attention
from course_utils.modeling.layers import (
    MLP,
    KVCache,
    MultiHeadAttention,
    TransformerBlock,
    TransformerDecoderBlock,
    merge_heads,
    record_attention,
    split_heads,
)

FEW = settings(max_examples=10, deadline=None)


def torch_mha(D, H, seed, bias=True):
    torch.manual_seed(seed)
    mha = nn.MultiheadAttention(D, H, batch_first=True, bias=bias, dtype=F64)
    if bias:  # torch initialises the biases to 0; make them matter
        with torch.no_grad():
            mha.in_proj_bias.normal_()
            mha.out_proj.bias.normal_()
    return mha


def call(m, *args, fast=True, **kwargs):
    """m(*args, **kwargs) with every MultiHeadAttention's ``fast`` set as given."""
    layers = [a for a in m.modules() if isinstance(a, MultiHeadAttention)]
    for a in layers:
        a.fast = fast
    try:
        return m(*args, **kwargs)
    finally:
        for a in layers:
            a.fast = True


def with_weights(m, *args, **kwargs):
    """(output, recorded weights) of one call of m; one map per attention call."""
    with record_attention(m) as maps:
        out = m(*args, **kwargs)
    return out, maps


# ----------------------------------------------------------------------------- heads


@FEW
@given(
    B=st.integers(1, 3), T=st.integers(1, 6), H=st.integers(1, 4), Dh=st.integers(1, 4),
    seed=st.integers(0, 10**6),
)  # fmt: skip
def test_split_heads_gives_each_head_its_slice_and_merge_heads_inverts_it(B, T, H, Dh, seed):
    x = randn(B, T, H * Dh, g=gen(seed))
    heads = split_heads(x, H)
    assert heads.shape == (B, H, T, Dh)
    for h in range(H):
        assert torch.equal(heads[:, h], x[..., h * Dh : (h + 1) * Dh])
    assert torch.equal(merge_heads(heads), x)


def test_split_heads_rejects_width_not_divisible_by_heads():
    with pytest.raises(ValueError, match="divisible by n_heads=3"):
        split_heads(torch.zeros(2, 5, 8), 3)
    with pytest.raises(ValueError, match="divisible"):
        MultiHeadAttention(10, 4)


# ----------------------------------------------------------------------------- multi-head attention


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("fast", [True, False])
def test_mha_self_attention_matches_torch(bias, fast):
    mha = torch_mha(12, 3, seed=0, bias=bias)
    ours = MultiHeadAttention.from_torch(mha)
    x = randn(2, 7, 12, g=gen(1))
    expected, w_avg = mha(x, x, x)
    _, w_heads = mha(x, x, x, average_attn_weights=False)
    torch.testing.assert_close(call(ours, x, fast=fast), expected)
    out, (w,) = with_weights(ours, x)
    assert w.shape == (2, 3, 7, 7)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(w, w_heads)
    torch.testing.assert_close(w.mean(dim=1), w_avg)


@pytest.mark.parametrize("fast", [True, False])
def test_mha_cross_attention_with_key_padding_matches_torch(fast):
    mha = torch_mha(16, 4, seed=2)
    ours = MultiHeadAttention.from_torch(mha)
    g = gen(3)
    x, ctx = randn(3, 5, 16, g=g), randn(3, 9, 16, g=g)
    kpm = padding_mask([9, 4, 1], 9)  # ours: True = real token
    expected, w_heads = mha(x, ctx, ctx, key_padding_mask=~kpm, average_attn_weights=False)
    torch.testing.assert_close(call(ours, x, ctx, key_padding_mask=kpm, fast=fast), expected)
    out, (w,) = with_weights(ours, x, ctx, key_padding_mask=kpm)
    assert w.shape == (3, 4, 5, 9)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(w, w_heads)
    assert (w[1, :, :, 4:] == 0).all()


@pytest.mark.parametrize("fast", [True, False])
def test_mha_causal_and_explicit_masks_match_torch(fast):
    mha = torch_mha(8, 2, seed=4)
    ours = MultiHeadAttention.from_torch(mha)
    g = gen(5)
    x = randn(2, 6, 8, g=g)
    kpm = padding_mask([6, 4], 6)
    expected, w_avg = mha(x, x, x, attn_mask=~causal_mask(6), key_padding_mask=~kpm)
    got = call(ours, x, is_causal=True, key_padding_mask=kpm, fast=fast)
    torch.testing.assert_close(got, expected)
    out, (w,) = with_weights(ours, x, attn_mask=causal_mask(6), key_padding_mask=kpm)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(w.mean(1), w_avg)
    bias = randn(6, 6, g=g)  # float masks are added to the scores, as in torch
    torch.testing.assert_close(
        call(ours, x, attn_mask=bias, fast=fast), mha(x, x, x, attn_mask=bias)[0]
    )
    per_batch = torch.rand(2, 1, 6, 6, generator=g) < 0.7
    per_batch[..., 0] = True
    torch_mask = (~per_batch).expand(2, 2, 6, 6).reshape(4, 6, 6)  # torch: (B*H, T, S)
    torch.testing.assert_close(
        call(ours, x, attn_mask=per_batch, fast=fast), mha(x, x, x, attn_mask=torch_mask)[0]
    )


@pytest.mark.parametrize("training", [False, True])
def test_mha_fast_path_equals_manual_path_including_fully_masked_rows(training):
    torch.manual_seed(6)
    ours = MultiHeadAttention(12, 4).double().train(training)
    g = gen(7)
    x = randn(3, 5, 12, g=g, dtype=F64).requires_grad_()
    ctx = randn(3, 6, 12, g=g)
    kpm = padding_mask([6, 2, 0], 6)  # the last sequence has no real key at all
    fast = ours(x, ctx, key_padding_mask=kpm)
    manual = call(ours, x, ctx, key_padding_mask=kpm, fast=False)
    torch.testing.assert_close(fast, manual)
    y_w, _ = with_weights(ours, x, ctx, key_padding_mask=kpm)
    torch.testing.assert_close(y_w, manual)
    # a query that may attend nothing outputs just the output bias, and no NaN anywhere
    torch.testing.assert_close(fast[2], ours.out.bias.expand(5, 12))
    (gx,) = torch.autograd.grad(fast.sum(), x)
    assert torch.isfinite(gx).all()


def test_mha_dropout_acts_only_in_training_mode():
    torch.manual_seed(8)
    ours = MultiHeadAttention(8, 2, dropout=0.5).double()
    x = randn(2, 6, 8, g=gen(9))
    ours.eval()
    torch.testing.assert_close(ours(x), call(ours, x, fast=False))
    ours.train()
    assert not torch.allclose(call(ours, x, fast=False), ours.eval()(x))


def test_mha_shape_errors_name_the_argument():
    mha = MultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match=r"x of shape \(B, T, D\) with D == 8"):
        mha(torch.zeros(2, 3, 6))
    with pytest.raises(ValueError, match=r"context of shape \(B, S, D\)"):
        mha(torch.zeros(2, 3, 8), torch.zeros(2, 4, 6))
    with pytest.raises(ValueError, match=r"attn_mask broadcastable .* \(2, 2, 3, 3\)"):
        mha(torch.zeros(2, 3, 8), attn_mask=torch.ones(4, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"key_padding_mask of shape \(B, S\)"):
        mha(torch.zeros(2, 3, 8), key_padding_mask=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="cache is for self attention"):
        mha(torch.zeros(2, 3, 8), torch.zeros(2, 4, 8), cache=KVCache())
    with pytest.raises(ValueError, match="add_bias_kv"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2, add_bias_kv=True))


# ----------------------------------------------------------------------------- KV cache


@pytest.mark.parametrize("chunks", [[1] * 7, [3, 1, 1, 2], [7]])
def test_kv_cache_incremental_decoding_equals_full_causal_recomputation(chunks):
    torch.manual_seed(10)
    ours = MultiHeadAttention(12, 3).double().eval()
    x = randn(2, sum(chunks), 12, g=gen(11))
    full = ours(x, is_causal=True)
    cache, outs, start = KVCache(), [], 0
    for n in chunks:
        outs.append(ours(x[:, start : start + n], is_causal=True, cache=cache))
        start += n
        assert len(cache) == start
    torch.testing.assert_close(torch.cat(outs, dim=1), full)
    assert cache.k.shape == (2, 3, start, 4)
    cache.reset()
    assert len(cache) == 0 and cache.k is None


def test_kv_cache_in_transformer_blocks_equals_full_recomputation():
    torch.manual_seed(12)
    blocks = [TransformerBlock(8, 2, 16, norm_first=True).double().eval() for _ in range(2)]
    dec = TransformerDecoderBlock(8, 2, 16).double().eval()
    g = gen(13)
    x, memory = randn(2, 5, 8, g=g), randn(2, 4, 8, g=g)

    def run(x, caches=None):
        caches = caches or [None] * 3
        for block, c in zip(blocks, caches[:2]):
            x = block(x, is_causal=True, cache=c)
        return dec(x, memory, cache=caches[2])

    full = run(x)
    caches = [KVCache() for _ in range(3)]
    steps = [run(x[:, i : i + 1], caches) for i in range(5)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full)


def test_kv_cache_rejects_mismatched_shapes():
    cache = KVCache()
    cache.update(torch.zeros(2, 3, 4, 5), torch.zeros(2, 3, 4, 5))
    with pytest.raises(ValueError, match="match the cache"):
        cache.update(torch.zeros(2, 2, 1, 5), torch.zeros(2, 2, 1, 5))


# ----------------------------------------------------------------------------- MLP and blocks


def test_mlp_is_fc2_act_fc1():
    torch.manual_seed(14)
    x = randn(2, 3, 6, g=gen(15))
    for act, f in [("relu", torch.relu), ("gelu", nn.functional.gelu)]:
        mlp = MLP(6, 10, activation=act).double()
        expected = f(x @ mlp.fc1.weight.T + mlp.fc1.bias) @ mlp.fc2.weight.T + mlp.fc2.bias
        torch.testing.assert_close(mlp(x), expected)
    with pytest.raises(ValueError, match="activation"):
        MLP(6, 10, activation="tanh")


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("fast", [True, False])
def test_transformer_block_matches_torch_encoder_layer(norm_first, activation, fast):
    torch.manual_seed(16)
    layer = nn.TransformerEncoderLayer(
        16, 4, 24, dropout=0.0, activation=activation, norm_first=norm_first,
        batch_first=True, dtype=F64,
    )  # fmt: skip
    with torch.no_grad():  # non-trivial LayerNorm parameters
        for p in (layer.norm1.weight, layer.norm1.bias, layer.norm2.weight, layer.norm2.bias):
            p.add_(0.3 * torch.randn_like(p))
    ours = TransformerBlock.from_torch(layer)
    assert ours.norm_first == norm_first
    g = gen(17)
    x = randn(3, 7, 16, g=g)
    torch.testing.assert_close(call(ours, x, fast=fast), layer(x))
    kpm = padding_mask([7, 5, 2], 7)
    expected = layer(x, src_key_padding_mask=~kpm)
    got = call(ours, x, key_padding_mask=kpm, fast=fast)
    torch.testing.assert_close(got[kpm], expected[kpm])  # torch may zero padded rows
    expected_causal = layer(x, src_mask=~causal_mask(7), is_causal=True)
    torch.testing.assert_close(call(ours, x, is_causal=True, fast=fast), expected_causal)
    out, (w,) = with_weights(ours, x, key_padding_mask=kpm)  # torch's per-head weights
    h = layer.norm1(x) if norm_first else x
    _, w_torch = layer.self_attn(h, h, h, key_padding_mask=~kpm, average_attn_weights=False)
    torch.testing.assert_close(w, w_torch)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("fast", [True, False])
def test_decoder_block_matches_torch_decoder_layer(norm_first, fast):
    torch.manual_seed(18)
    layer = nn.TransformerDecoderLayer(
        16, 2, 20, dropout=0.0, activation="gelu", norm_first=norm_first,
        batch_first=True, dtype=F64,
    )  # fmt: skip
    ours = TransformerDecoderBlock.from_torch(layer)
    g = gen(19)
    x, memory = randn(3, 6, 16, g=g), randn(3, 8, 16, g=g)
    tgt_kpm, mem_kpm = padding_mask([6, 4, 3], 6), padding_mask([8, 8, 5], 8)
    expected = layer(
        x, memory, tgt_mask=~causal_mask(6), tgt_is_causal=True,
        tgt_key_padding_mask=~tgt_kpm, memory_key_padding_mask=~mem_kpm,
    )  # fmt: skip
    got = call(
        ours, x, memory, tgt_key_padding_mask=tgt_kpm, memory_key_padding_mask=mem_kpm, fast=fast
    )
    torch.testing.assert_close(got, expected)
    out, (w_self, w_cross) = with_weights(ours, x, memory, memory_key_padding_mask=mem_kpm)
    assert w_self.shape == (3, 2, 6, 6) and w_cross.shape == (3, 2, 6, 8)
    assert (w_self[..., ~causal_mask(6)] == 0).all()
    assert (w_cross[2, ..., 5:] == 0).all()
    # the recorded weights are torch's per-head weights for the same inputs
    causal, kpm_t = ~causal_mask(6), ~mem_kpm
    h0 = layer.norm1(x) if norm_first else x
    sa, w_torch_self = layer.self_attn(h0, h0, h0, attn_mask=causal, average_attn_weights=False)
    h1 = layer.norm2(x + sa) if norm_first else layer.norm1(x + sa)
    _, w_torch_cross = layer.multihead_attn(
        h1, memory, memory, key_padding_mask=kpm_t, average_attn_weights=False
    )
    torch.testing.assert_close(w_self, w_torch_self)
    torch.testing.assert_close(w_cross, w_torch_cross)
    no_mask = layer(x, memory)
    torch.testing.assert_close(call(ours, x, memory, is_causal=False, fast=fast), no_mask)


def test_record_attention_maps_equal_the_manual_paths_weights_and_leave_outputs_unchanged():
    torch.manual_seed(30)
    blocks = nn.Sequential(*(TransformerBlock(8, 2, 16, norm_first=True) for _ in range(3)))
    blocks = blocks.double().eval()
    x = randn(2, 5, 8, g=gen(31))
    plain = blocks(x)
    with record_attention(blocks) as maps:
        recorded = blocks(x)
    torch.testing.assert_close(recorded, plain)
    assert len(maps) == 3 and all(m.shape == (2, 2, 5, 5) for m in maps)
    h = x
    for block, w in zip(blocks, maps, strict=True):  # the taught manual path, layer by layer
        q, k, v = (split_heads(t, 2) for t in block.attn.qkv(block.norm1(h)).split(8, dim=-1))
        _, expected = scaled_dot_product_attention(q, k, v)
        torch.testing.assert_close(w, expected)
        h = block(h)
    # recording stops when the block exits; an inner recorder takes its layers over
    assert all(b.attn.recorded is None for b in blocks)
    with record_attention(blocks) as outer, record_attention(blocks[0]) as inner:
        blocks(x)
    assert len(inner) == 1 and len(outer) == 2  # the innermost recorder gets layer 0
    with pytest.raises(ValueError, match="no MultiHeadAttention"):
        with record_attention(nn.Linear(2, 2)):
            pass


def test_transformer_block_returns_per_head_weights():
    torch.manual_seed(20)
    block = TransformerBlock(8, 2, 16).double()
    x = randn(2, 5, 8, g=gen(21))
    out, (w,) = with_weights(block, x, is_causal=True)
    torch.testing.assert_close(out, block(x, is_causal=True))
    assert w.shape == (2, 2, 5, 5)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 2, 5, dtype=F64))


# ----------------------------------------------------------------------------- properties


def test_self_attention_without_positions_is_permutation_equivariant():
    torch.manual_seed(22)
    mha = MultiHeadAttention(8, 2).double()
    block = TransformerBlock(8, 2, 16, norm_first=True).double()
    x = randn(2, 7, 8, g=gen(23))
    perm = torch.randperm(7, generator=gen(24))
    for layer in (mha, block):
        torch.testing.assert_close(layer(x[:, perm]), layer(x)[:, perm])
    # causal attention is not: the mask is tied to positions
    assert not torch.allclose(mha(x[:, perm], is_causal=True), mha(x, is_causal=True)[:, perm])


def test_padding_tokens_do_not_change_the_other_outputs():
    torch.manual_seed(25)
    g = gen(26)
    x = randn(2, 6, 8, g=g)
    kpm = padding_mask([6, 3], 6)
    x_other = x.clone()
    x_other[~kpm] = randn(int((~kpm).sum()), 8, g=g) * 10  # different padding content
    block = TransformerBlock(8, 2, 16).double()
    torch.testing.assert_close(
        block(x, key_padding_mask=kpm)[kpm], block(x_other, key_padding_mask=kpm)[kpm]
    )
    dec = TransformerDecoderBlock(8, 2, 16).double()
    tgt = randn(2, 4, 8, g=g)
    torch.testing.assert_close(
        dec(tgt, x, memory_key_padding_mask=kpm), dec(tgt, x_other, memory_key_padding_mask=kpm)
    )
    # and without the mask they would
    assert not torch.allclose(block(x)[kpm], block(x_other)[kpm])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_layers_run_in_float32_float64_and_on_cuda(device, dtype):
    torch.manual_seed(27)
    x = torch.randn(2, 5, 8, dtype=dtype, device=device)
    memory = torch.randn(2, 3, 8, dtype=dtype, device=device)
    kpm = padding_mask(torch.tensor([5, 2], device=device), 5)
    modules = {
        "mha": MultiHeadAttention(8, 2),
        "mlp": MLP(8, 16, "gelu"),
        "block": TransformerBlock(8, 2, 16, norm_first=True),
        "dec": TransformerDecoderBlock(8, 2, 16),
    }
    for name, m in modules.items():
        m = m.to(device=device, dtype=dtype)
        if name == "dec":
            out = m(x, memory, tgt_key_padding_mask=kpm)
        elif name == "mlp":
            out = m(x)
        else:
            out = m(x, key_padding_mask=kpm, is_causal=True)
            tol = dict(atol=1e-5, rtol=1e-4) if dtype == torch.float32 else {}
            torch.testing.assert_close(
                out, call(m, x, key_padding_mask=kpm, is_causal=True, fast=False), **tol
            )
        assert out.shape == x.shape and out.dtype == dtype and out.device.type == device
        assert torch.isfinite(out).all()
        out.sum().backward()


# ----------------------------------------------------------------------------- positions in attention


def _reference_positional_attention(mha, x, position):
    """Causal self attention written out in float64: RoPE as a complex rotation of each pair
    (x[2i] + i x[2i+1]) * e^(i pos base^(-2i/Dh)), ALiBi as -m_h (i - j) added to the scores."""
    B, T, D = x.shape
    H, Dh = mha.n_heads, D // mha.n_heads
    q, k, v = (
        t.reshape(B, T, H, Dh).transpose(1, 2)
        for t in (x @ mha.qkv.weight.T + mha.qkv.bias).split(D, dim=-1)
    )
    scores_bias = torch.zeros(H, T, T, dtype=F64)
    if position == "rope":
        theta = 10000.0 ** (-torch.arange(0, Dh, 2, dtype=F64) / Dh)  # (Dh/2,)
        rot = torch.polar(
            torch.ones(T, Dh // 2, dtype=F64), torch.arange(T, dtype=F64)[:, None] * theta
        )

        def rotate(t):
            pairs = torch.view_as_complex(t.reshape(B, H, T, Dh // 2, 2).contiguous())
            return torch.view_as_real(pairs * rot).reshape(B, H, T, Dh)

        q, k = rotate(q), rotate(k)
    else:
        m = torch.tensor([2.0 ** (-8 * (h + 1) / H) for h in range(H)], dtype=F64)
        i = torch.arange(T, dtype=F64)
        scores_bias = -m[:, None, None] * (i[:, None] - i[None, :])
    scores = q @ k.transpose(-2, -1) / Dh**0.5 + scores_bias
    scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    y = scores.softmax(-1) @ v  # (B, H, T, Dh)
    return y.transpose(1, 2).reshape(B, T, D) @ mha.out.weight.T + mha.out.bias


@pytest.mark.parametrize("position", ["rope", "alibi"])
@pytest.mark.parametrize("fast", [True, False])
def test_attention_with_rope_or_alibi_matches_the_written_out_formula(position, fast):
    g = gen(30)
    torch.manual_seed(30)
    mha = MultiHeadAttention(16, 4, position=position).double()
    mha.fast = fast
    x = randn(2, 7, 16, g=g)
    ours = mha(x, is_causal=True)
    torch.testing.assert_close(ours, _reference_positional_attention(mha, x, position))
    plain = MultiHeadAttention(16, 4).double()
    plain.load_state_dict(mha.state_dict())
    assert not torch.allclose(plain(x, is_causal=True), ours)  # the positions do something


@pytest.mark.parametrize("position", ["rope", "alibi"])
def test_attention_with_positions_and_a_kv_cache_equals_the_full_pass(position):
    g = gen(31)
    torch.manual_seed(31)
    mha = MultiHeadAttention(16, 2, position=position).double()
    x = randn(2, 6, 16, g=g)
    full = mha(x, is_causal=True)
    cache = KVCache()
    steps = [mha(x[:, :3], is_causal=True, cache=cache)]
    steps += [mha(x[:, t : t + 1], is_causal=True, cache=cache) for t in range(3, 6)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full)


def test_attention_positions_are_checked():
    with pytest.raises(ValueError, match="position"):
        MultiHeadAttention(16, 2, position="learned")
    with pytest.raises(ValueError, match="even head width"):
        MultiHeadAttention(6, 2, position="rope")
    mha = MultiHeadAttention(8, 2, position="alibi")
    with pytest.raises(ValueError, match="self attention"):
        mha(torch.randn(1, 2, 8), torch.randn(1, 3, 8))
