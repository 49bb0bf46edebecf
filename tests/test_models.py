"""Tests for course_utils.modeling.models: shapes, masking/causality properties, KV-cache equivalence,
dtypes, and (marked slow) that each model learns a small task in seconds on CPU."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from course_utils.modeling.layers import record_attention
from course_utils.modeling.models import (
    GPT,
    EncoderDecoderTransformer,
    GPTConfig,
    Seq2SeqRNN,
    ViT,
    ViTConfig,
    patchify,
    sample_next_token,
    unpatchify,
)
from course_utils.runtime.training import make_optimizer

DTYPES = [torch.float32, torch.float64]
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
PAD, BOS, EOS = 0, 1, 2


# ----------------------------------------------------------------------------- helpers


def reverse_task(n: int, vocab: int, min_len: int, max_len: int, g: torch.Generator):
    """Toy seq2seq data: reverse a sequence of symbols 3..vocab-1.

    Returns src (n, max_len) padded with PAD, lengths (n,), tgt_in (n, max_len+1) starting with
    BOS and tgt_out (n, max_len+1) ending with EOS, both padded with PAD.
    """
    lengths = torch.randint(min_len, max_len + 1, (n,), generator=g)
    src = torch.full((n, max_len), PAD)
    tgt_out = torch.full((n, max_len + 1), PAD)
    for i, L in enumerate(lengths.tolist()):
        seq = torch.randint(3, vocab, (L,), generator=g)
        src[i, :L] = seq
        tgt_out[i, :L] = seq.flip(0)
        tgt_out[i, L] = EOS
    tgt_in = torch.cat([torch.full((n, 1), BOS), tgt_out[:, :-1]], dim=1)
    tgt_in[tgt_in == EOS] = PAD  # EOS is never an input
    return src, lengths, tgt_in, tgt_out


def exact_match(pred: torch.Tensor, tgt_out: torch.Tensor) -> float:
    """Fraction of rows whose decoded tokens equal the target up to and including EOS."""
    T = tgt_out.shape[1]
    if pred.shape[1] < T:
        pred = F.pad(pred, (0, T - pred.shape[1]), value=PAD)
    return (pred[:, :T] == tgt_out).all(dim=1).float().mean().item()


def train_seq2seq(model, steps, lr, g, vocab=8, min_len=5, max_len=8, batch=32):
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    decay = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1 - step / steps)
    losses = []
    for _ in range(steps):
        src, lengths, tgt_in, tgt_out = reverse_task(batch, vocab, min_len, max_len, g)
        logits, _ = model(src, lengths, tgt_in)
        loss = F.cross_entropy(logits.transpose(1, 2), tgt_out, ignore_index=PAD)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        decay.step()
        losses.append(loss.item())
    return losses


def tiny_gpt(**kw) -> GPT:
    cfg = dict(vocab_size=11, block_size=12, n_layers=2, n_heads=2, d_model=16)
    return GPT(GPTConfig(**{**cfg, **kw}))


# ----------------------------------------------------------------------------- patchify


def test_patchify_equals_unfold():
    g = torch.Generator().manual_seed(0)
    for C, H, W, p in [(3, 8, 12, 2), (1, 8, 8, 4), (2, 6, 9, 3), (3, 4, 4, 1)]:
        x = torch.randn(2, C, H, W, generator=g)
        ref = F.unfold(x, kernel_size=p, stride=p).transpose(1, 2)
        out = patchify(x, p)
        assert out.shape == (2, (H // p) * (W // p), C * p * p)
        torch.testing.assert_close(out, ref, rtol=0, atol=0)


def test_patchify_orders_patches_row_major_and_pixels_channel_first():
    C, H, W, p = 2, 4, 6, 2
    # Each pixel stores (channel, row, column) as c*100 + r*10 + w.
    c = torch.arange(C)[:, None, None]
    r = torch.arange(H)[None, :, None]
    w = torch.arange(W)[None, None, :]
    image = (c * 100 + r * 10 + w).float()[None]  # (1, C, H, W)
    patches = patchify(image, p)[0]  # (N, C*p*p)
    gw = W // p
    for n in range(patches.shape[0]):
        pr, pc = divmod(n, gw)  # row-major: patch n is grid cell (n // gw, n % gw)
        expected = image[0, :, pr * p : (pr + 1) * p, pc * p : (pc + 1) * p].reshape(-1)
        assert torch.equal(patches[n], expected), f"patch {n}"
    # the first pixel of patch 1 is at row 0, column p (left to right first)
    assert patches[1, 0].item() == 0 * 10 + p


def test_patchify_rejects_non_4d_and_indivisible_sizes():
    with pytest.raises(ValueError, match=r"\(B, C, H, W\)"):
        patchify(torch.zeros(1, 8, 8), 2)
    with pytest.raises(ValueError, match="divisible"):
        patchify(torch.zeros(1, 1, 8, 7), 2)
    with pytest.raises(ValueError, match="divisible"):
        patchify(torch.zeros(1, 1, 6, 8), 4)


def test_unpatchify_inverts_patchify():
    x = torch.randn(3, 3, 8, 12)
    assert torch.equal(unpatchify(patchify(x, 4), 4, (8, 12), channels=3), x)


# ----------------------------------------------------------------------------- ViT


def tiny_vit(**kw) -> ViT:
    cfg = dict(
        image_size=8, patch_size=2, in_channels=1, num_classes=3, d_model=16, n_layers=2, n_heads=2
    )
    return ViT(ViTConfig(**{**cfg, **kw}))


@pytest.mark.parametrize("pool", ["cls", "mean"])
def test_vit_shapes_and_attention_maps_for_cls_and_mean_pooling(pool):
    model = tiny_vit(pool=pool).eval()
    x = torch.randn(4, 1, 8, 8)
    logits = model(x)
    assert logits.shape == (4, 3)
    L = 16 + (1 if pool == "cls" else 0)
    with record_attention(model) as maps:
        logits2 = model(x)
    torch.testing.assert_close(logits2, logits)
    assert len(maps) == 2 and all(m.shape == (4, 2, L, L) for m in maps)
    torch.testing.assert_close(maps[0].sum(-1), torch.ones(4, 2, L))
    assert model.pos_embed.shape == (1, L, 16)
    assert (model.cls_token is not None) == (pool == "cls")
    assert model.patch_embed(x).shape == (4, 16, 16)


def test_vit_cls_pooling_reads_token_zero_and_mean_pooling_averages():
    tokens = torch.randn(2, 5, 16)
    torch.testing.assert_close(tiny_vit(pool="cls").pool(tokens), tokens[:, 0])
    torch.testing.assert_close(tiny_vit(pool="mean").pool(tokens), tokens.mean(1))


def test_vit_config_rejects_bad_pool_and_patch_size():
    with pytest.raises(ValueError, match="pool"):
        ViTConfig(pool="max")
    with pytest.raises(ValueError, match="divisible"):
        ViTConfig(image_size=8, patch_size=3)
    with pytest.raises(ValueError, match=r"\(B, 1, 8, 8\)"):
        tiny_vit()(torch.zeros(2, 3, 8, 8))


def test_vit_patch_embed_is_patchify_then_linear():
    model = tiny_vit()
    x = torch.randn(2, 1, 8, 8)
    torch.testing.assert_close(model.patch_embed(x), model.patch_embed.proj(patchify(x, 2)))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_vit_runs_in_float32_and_float64(dtype, device):
    model = tiny_vit().to(device, dtype)
    out = model(torch.randn(2, 1, 8, 8, dtype=dtype, device=device))
    assert out.dtype == dtype
    out.sum().backward()


# ----------------------------------------------------------------------------- GPT


def test_gpt_shapes_and_initial_loss_near_uniform():
    torch.manual_seed(0)
    model = tiny_gpt()
    idx = torch.randint(0, 11, (3, 12))
    logits, loss = model(idx, idx)
    assert logits.shape == (3, 12, 11)
    assert abs(loss.item() - math.log(11)) < 0.3
    _, none = model(idx)
    assert none is None


def test_gpt_is_causal_future_tokens_do_not_change_earlier_logits():
    torch.manual_seed(0)
    model = tiny_gpt().double().eval()
    idx = torch.randint(0, 11, (2, 12))
    changed = idx.clone()
    changed[:, 7:] = (changed[:, 7:] + 3) % 11
    a, _ = model(idx)
    b, _ = model(changed)
    torch.testing.assert_close(a[:, :7], b[:, :7], rtol=0, atol=1e-12)
    assert not torch.allclose(a[:, 7:], b[:, 7:])


def test_gpt_cached_logits_equal_full_recomputation_step_by_step():
    torch.manual_seed(0)
    model = tiny_gpt().double().eval()
    idx = torch.randint(0, 11, (2, 12))
    full, _ = model(idx)
    cache = model.new_cache()
    prefix_logits, _ = model(idx[:, :5], cache=cache)  # prefill 5 tokens
    steps = [prefix_logits]
    for t in range(5, 12):
        step, _ = model(idx[:, t : t + 1], cache=cache)  # one new position
        steps.append(step)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=0, atol=1e-10)
    assert len(cache[0]) == 12


@pytest.mark.parametrize("temperature,top_k", [(1.0, None), (0.8, 3), (0.0, None)])
def test_gpt_cached_generation_equals_uncached_for_the_same_generator(temperature, top_k):
    torch.manual_seed(0)
    model = tiny_gpt().double()
    prompt = torch.randint(0, 11, (3, 4))
    # 4 + 20 > block_size = 12: the cached path must also handle the sliding window
    outs = [
        model.generate(
            prompt,
            20,
            temperature=temperature,
            top_k=top_k,
            use_cache=use_cache,
            generator=torch.Generator().manual_seed(7),
        )
        for use_cache in (True, False)
    ]
    assert outs[0].shape == (3, 24)
    assert torch.equal(outs[0][:, :4], prompt)
    assert torch.equal(outs[0], outs[1])
    assert model.training  # generate restores the mode


def test_sample_next_token_top_k_and_temperature_zero():
    logits = torch.tensor([[0.0, 3.0, 1.0, 2.0]]).repeat(200, 1)
    g = torch.Generator().manual_seed(0)
    top2 = sample_next_token(logits, temperature=1.0, top_k=2, generator=g)
    assert set(top2.flatten().tolist()) == {1, 3}
    assert sample_next_token(logits, temperature=0.0).flatten().unique().tolist() == [1]
    cold = sample_next_token(logits, temperature=0.05, generator=g)
    assert (cold == 1).float().mean() > 0.99


def test_gpt_param_count_formula_matches_num_params():
    for bias in (True, False):
        cfg = GPTConfig(vocab_size=11, block_size=12, n_layers=3, n_heads=2, d_model=16, bias=bias)
        model = GPT(cfg)
        assert model.num_params() == cfg.param_count()
        assert model.num_params(non_embedding=True) == cfg.param_count(non_embedding=True)
    gpt3 = GPTConfig.preset("gpt3-175b").param_count()
    assert 170e9 < gpt3 < 180e9


def test_gpt_and_vit_keyword_overrides_rescale_the_default_mlp_width():
    gpt = GPT(GPTConfig(vocab_size=11, block_size=8), d_model=32, n_heads=2, n_layers=1)
    assert gpt.blocks[0].mlp.fc1.out_features == 4 * 32
    assert GPT(gpt.config, d_ff=40).blocks[0].mlp.fc1.out_features == 40
    vit = ViT(ViTConfig(), d_model=16, n_layers=1)
    assert vit.blocks[0].mlp.fc1.out_features == 4 * 16


def test_gpt_head_is_tied_to_token_embedding():
    model = tiny_gpt()
    assert model.lm_head.weight is model.tok_emb.weight


def test_gpt_optimizer_decays_only_matrices():
    model = tiny_gpt()
    opt = make_optimizer(model, lr=1e-3, weight_decay=0.1)
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() == 2 for p in decay["params"])
    assert all(p.dim() == 1 for p in no_decay["params"])
    n = sum(p.numel() for g in opt.param_groups for p in g["params"])
    assert n == model.num_params()


def test_gpt_attention_maps_are_causal_per_layer_and_head():
    model = tiny_gpt().eval()
    maps = model.attention_maps(torch.randint(0, 11, (2, 9)))
    assert len(maps) == 2 and maps[0].shape == (2, 2, 9, 9)
    future = ~torch.tril(torch.ones(9, 9, dtype=torch.bool))
    assert (maps[1][..., future] == 0).all()
    torch.testing.assert_close(maps[1].sum(-1), torch.ones(2, 2, 9))


def test_gpt_rejects_sequences_longer_than_block_size():
    with pytest.raises(ValueError, match="block_size"):
        tiny_gpt()(torch.zeros(1, 13, dtype=torch.long))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_gpt_runs_in_float32_and_float64(dtype, device):
    model = tiny_gpt().to(device, dtype)
    idx = torch.randint(0, 11, (2, 12), device=device)
    logits, loss = model(idx, idx)
    assert logits.dtype == dtype and loss.dtype == dtype
    loss.backward()
    out = model.generate(idx[:, :3], 4, top_k=5)
    assert out.shape == (2, 7) and out.device == idx.device


# ----------------------------------------------------------------------------- encoder-decoder Transformer


def tiny_transformer(**kw) -> EncoderDecoderTransformer:
    args = dict(src_vocab=9, tgt_vocab=9, d_model=16, n_heads=2, n_layers=2, d_ff=32, max_len=16)
    return EncoderDecoderTransformer(**{**args, **kw})


@pytest.mark.parametrize("norm_first", [True, False])
def test_transformer_shapes_and_cross_attention_maps(norm_first):
    torch.manual_seed(0)
    model = tiny_transformer(norm_first=norm_first).eval()
    src, lengths, tgt_in, _ = reverse_task(3, 9, 3, 6, torch.Generator().manual_seed(0))
    logits, none = model(src, lengths, tgt_in)
    assert logits.shape == (3, 7, 9) and none is None
    with record_attention(*(block.cross_attn for block in model.decoder)) as cross:
        logits2, _ = model(src, lengths, tgt_in)
    torch.testing.assert_close(logits2, logits)
    assert len(cross) == 2 and cross[0].shape == (3, 2, 7, 6)
    torch.testing.assert_close(cross[0].sum(-1), torch.ones(3, 2, 7))
    pad = ~model.src_mask(src, lengths)  # (B, S)
    assert (cross[1].permute(0, 2, 1, 3)[pad[:, None, None, :].expand(-1, 7, 2, -1)] == 0).all()


def test_transformer_decoder_is_causal():
    torch.manual_seed(0)
    model = tiny_transformer().double().eval()
    src, lengths, tgt_in, _ = reverse_task(2, 9, 4, 6, torch.Generator().manual_seed(1))
    changed = tgt_in.clone()
    changed[:, 4:] = (changed[:, 4:] + 1) % 9
    a, _ = model(src, lengths, tgt_in)
    b, _ = model(src, lengths, changed)
    torch.testing.assert_close(a[:, :4], b[:, :4], rtol=0, atol=1e-12)
    assert not torch.allclose(a[:, 4:], b[:, 4:])


def test_transformer_source_padding_does_not_change_outputs():
    torch.manual_seed(0)
    model = tiny_transformer().double().eval()
    src, lengths, tgt_in, _ = reverse_task(3, 9, 3, 6, torch.Generator().manual_seed(2))
    longer = torch.cat([src, torch.full((3, 4), PAD)], dim=1)  # 4 more padding positions
    a, _ = model(src, lengths, tgt_in)
    b, _ = model(longer, lengths, tgt_in)
    torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    # lengths or an explicit mask or nothing (pad_id inferred) give the same result
    c, _ = model(src, None, tgt_in, src_key_padding_mask=model.src_mask(src, lengths))
    d, _ = model(src, None, tgt_in)
    torch.testing.assert_close(a, c)
    torch.testing.assert_close(a, d)


def test_transformer_greedy_decode_agrees_with_teacher_forced_argmax():
    torch.manual_seed(0)
    model = tiny_transformer().double().eval()
    src, lengths, _, _ = reverse_task(4, 9, 3, 6, torch.Generator().manual_seed(3))
    tokens, none = model.greedy_decode(src, lengths, max_len=7)
    cross = model.cross_attention_maps(src, lengths, tokens)
    assert none is None
    assert tokens.shape[0] == 4 and tokens.shape[1] <= 7
    tgt_in = torch.cat([torch.full((4, 1), BOS), tokens[:, :-1]], dim=1)
    logits, _ = model(src, lengths, tgt_in)
    active = torch.ones_like(tokens, dtype=torch.bool)  # positions before (and at) the first EOS
    active[:, 1:] = (tokens[:, :-1] != EOS).cumprod(dim=1).bool()
    assert torch.equal(logits.argmax(-1)[active], tokens[active])
    assert len(cross) == 2 and cross[0].shape == (4, 2, tokens.shape[1], src.shape[1])
    with record_attention(model.decoder[1].cross_attn) as last:
        model(src, lengths, tgt_in)
    torch.testing.assert_close(cross[1], last[0])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_transformer_runs_in_float32_and_float64(dtype, device):
    model = tiny_transformer().to(device, dtype)
    data = reverse_task(2, 9, 3, 5, torch.Generator().manual_seed(0))
    src, lengths, tgt_in, _ = (t.to(device) for t in data)
    logits, _ = model(src, lengths, tgt_in)
    assert logits.dtype == dtype
    logits.sum().backward()
    tokens, _ = model.greedy_decode(src, lengths, max_len=4)
    assert tokens.device == src.device


# ----------------------------------------------------------------------------- Seq2SeqRNN


def tiny_rnn(attention: bool, **kw) -> Seq2SeqRNN:
    return Seq2SeqRNN(9, 9, 8, 16, attention=attention, **kw)


@pytest.mark.parametrize("attention", [False, True])
def test_seq2seq_rnn_shapes(attention):
    torch.manual_seed(0)
    model = tiny_rnn(attention).eval()
    src, lengths, tgt_in, _ = reverse_task(3, 9, 3, 6, torch.Generator().manual_seed(0))
    enc_states, final = model.encode(src, lengths)
    assert enc_states.shape == (3, 6, 16) and final.shape == (3, 16)
    logits, attn = model(src, lengths, tgt_in)
    assert logits.shape == (3, 7, 9)
    assert (attn is None) == (not attention)
    if attention:
        assert attn.shape == (3, 7, 6)
    tokens, attn2 = model.greedy_decode(src, lengths, max_len=5)
    assert tokens.shape[0] == 3 and tokens.shape[1] <= 5
    assert (attn2 is None) == (not attention)


def test_seq2seq_rnn_attention_weights_sum_to_one_and_ignore_padding():
    torch.manual_seed(0)
    model = tiny_rnn(True).eval()
    src, lengths, tgt_in, _ = reverse_task(4, 9, 2, 6, torch.Generator().manual_seed(4))
    _, attn = model(src, lengths, tgt_in)  # (B, T, S)
    torch.testing.assert_close(attn.sum(-1), torch.ones(4, 7))
    pad = ~model.src_mask(src, lengths)  # (B, S)
    assert (attn.masked_select(pad[:, None, :].expand_as(attn)) == 0).all()


@pytest.mark.parametrize("attention", [False, True])
def test_seq2seq_rnn_source_padding_does_not_change_outputs(attention):
    torch.manual_seed(0)
    model = tiny_rnn(attention).double().eval()
    src, lengths, tgt_in, _ = reverse_task(3, 9, 2, 5, torch.Generator().manual_seed(5))
    longer = torch.cat([src, torch.full((3, 3), PAD)], dim=1)
    a, _ = model(src, lengths, tgt_in)
    b, _ = model(longer, lengths, tgt_in)
    torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    enc_states, final = model.encode(src, lengths)
    # the context vector is the state after the last real token, and padding states are zero
    torch.testing.assert_close(final, enc_states[torch.arange(3), lengths - 1])
    assert (enc_states[~model.src_mask(src, lengths)] == 0).all()


def test_seq2seq_rnn_greedy_decode_agrees_with_teacher_forced_argmax():
    torch.manual_seed(0)
    model = tiny_rnn(True).double().eval()
    src, lengths, _, _ = reverse_task(4, 9, 3, 6, torch.Generator().manual_seed(6))
    tokens, attn = model.greedy_decode(src, lengths, max_len=6)
    tgt_in = torch.cat([torch.full((4, 1), BOS), tokens[:, :-1]], dim=1)
    logits, attn_tf = model(src, lengths, tgt_in)
    active = torch.ones_like(tokens, dtype=torch.bool)
    active[:, 1:] = (tokens[:, :-1] != EOS).cumprod(dim=1).bool()
    assert torch.equal(logits.argmax(-1)[active], tokens[active])
    torch.testing.assert_close(attn[active], attn_tf[active])


def test_seq2seq_rnn_decode_step_without_attention_needs_the_context():
    model = tiny_rnn(False)
    enc_states, c = model.encode(torch.tensor([[3, 4, 5]]))
    mask = torch.ones(1, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="context"):
        model.decode_step(torch.tensor([BOS]), c, enc_states, mask)
    logits, state, w = model.decode_step(torch.tensor([BOS]), c, enc_states, mask, context=c)
    assert logits.shape == (1, 9) and state.shape == (1, 16) and w is None


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("attention", [False, True])
def test_seq2seq_rnn_runs_in_float32_and_float64(dtype, attention, device):
    model = tiny_rnn(attention).to(device, dtype)
    data = reverse_task(2, 9, 3, 5, torch.Generator().manual_seed(0))
    src, lengths, tgt_in, _ = (t.to(device) for t in data)
    logits, _ = model(src, lengths, tgt_in)
    assert logits.dtype == dtype
    logits.sum().backward()
    tokens, _ = model.greedy_decode(src, lengths, max_len=4)
    assert tokens.device == src.device


# ----------------------------------------------------------------------------- models learn (slow)


@pytest.mark.slow
def test_seq2seq_rnn_with_attention_learns_to_reverse():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    model = Seq2SeqRNN(8, 8, 16, 32, attention=True)
    losses = train_seq2seq(model, steps=150, lr=1e-2, g=g)
    assert losses[-1] < 0.2 * losses[0]
    src, lengths, _, tgt_out = reverse_task(200, 8, 5, 8, g)
    tokens, _ = model.eval().greedy_decode(src, lengths, max_len=9)
    assert exact_match(tokens, tgt_out) > 0.9


@pytest.mark.slow
def test_transformer_learns_to_reverse():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    model = EncoderDecoderTransformer(8, 8, d_model=32, n_heads=2, n_layers=2, d_ff=64, max_len=16)
    losses = train_seq2seq(model, steps=200, lr=5e-3, g=g)
    assert losses[-1] < 0.2 * losses[0]
    src, lengths, _, tgt_out = reverse_task(200, 8, 5, 8, g)
    tokens, _ = model.eval().greedy_decode(src, lengths, max_len=9)
    assert exact_match(tokens, tgt_out) > 0.9


@pytest.mark.slow
def test_gpt_learns_a_repeating_pattern():
    torch.manual_seed(0)
    pattern = torch.tensor([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7])  # period 14
    stream = pattern.repeat(60)
    model = GPT(GPTConfig(vocab_size=10, block_size=16, n_layers=2, n_heads=2, d_model=32))
    opt = make_optimizer(model, lr=3e-3, betas=(0.9, 0.99))
    g = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(150):
        starts = torch.randint(0, len(stream) - 17, (16,), generator=g)
        x = torch.stack([stream[s : s + 16] for s in starts])
        y = torch.stack([stream[s + 1 : s + 17] for s in starts])
        _, loss = model(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.2 * losses[0]
    out = model.generate(pattern[None, :14], 28, temperature=0.0)
    assert torch.equal(out[0, 14:], pattern.repeat(2))


@pytest.mark.slow
def test_vit_learns_a_separable_image_task():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    # class k = a fixed 2x2 sign pattern tiled over the 8x8 image, plus strong noise
    tiles = torch.tensor([[1.0, 1, -1, -1], [1, -1, 1, -1], [1, -1, -1, 1], [1, 1, 1, 1]])
    templates = tiles.reshape(4, 1, 2, 2).repeat(1, 1, 4, 4)  # (4, 1, 8, 8)

    def batch(n):
        y = torch.randint(0, 4, (n,), generator=g)
        return templates[y] + torch.randn(n, 1, 8, 8, generator=g), y

    model = ViT(
        ViTConfig(image_size=8, patch_size=2, num_classes=4, d_model=32, n_layers=2, n_heads=2)
    )
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(50):
        x, y = batch(64)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.3 * losses[0]
    x, y = batch(500)
    with torch.no_grad():
        acc = (model.eval()(x).argmax(-1) == y).float().mean().item()
    assert acc > 0.95


@pytest.mark.parametrize("cls", [GPTConfig, ViTConfig])
def test_resolve_config_keeps_the_4x_rule_only_where_it_held(cls):
    from course_utils.modeling.models.config import resolve_config

    base = cls(d_model=32, n_heads=4)
    assert resolve_config(cls, None, {"d_model": 32, "n_heads": 4}) == base
    assert resolve_config(cls, base, {}) is base
    wider = resolve_config(cls, base, {"d_model": 64})
    assert (wider.d_model, wider.d_ff) == (64, 256)  # followed the rule: follows it again
    custom = cls(d_model=32, n_heads=4, d_ff=50)
    assert resolve_config(cls, custom, {"d_model": 64}).d_ff == 50  # a chosen width stays
    assert resolve_config(cls, base, {"d_model": 64, "d_ff": 70}).d_ff == 70
    assert base.d_model == 32 and base.d_ff == 128  # the given config is not changed


# ----------------------------------------------------------------------------- ViT initialisation


def test_vit_initialises_itself_as_notebook_09_trains_it():
    """init="xavier" (the default): Xavier-uniform linears (bound sqrt(6 / (fan_in + fan_out))),
    zero biases and head, positions and class token from N(0, 0.2^2)."""
    torch.manual_seed(0)
    vit = ViT(ViTConfig(d_model=64, n_layers=2, n_heads=4, image_size=16, patch_size=2))
    for name, module in vit.named_modules():
        if isinstance(module, torch.nn.Linear):
            fan_out, fan_in = module.weight.shape
            bound = (6 / (fan_in + fan_out)) ** 0.5
            if name == "head":
                assert torch.count_nonzero(module.weight) == 0
            else:
                assert module.weight.abs().max() <= bound
                assert module.weight.std().item() == pytest.approx(bound / 3**0.5, rel=0.1)
            assert module.bias is None or torch.count_nonzero(module.bias) == 0
    assert vit.pos_embed.std().item() == pytest.approx(0.2, rel=0.1)
    assert vit.cls_token.abs().max() > 0.05


def test_vit_timm_init_is_the_small_normal_one():
    torch.manual_seed(0)
    vit = ViT(ViTConfig(d_model=64, n_layers=2, n_heads=4, image_size=16, init="timm"))
    assert vit.patch_embed.proj.weight.std().item() == pytest.approx(0.02, rel=0.15)
    assert vit.pos_embed.std().item() == pytest.approx(0.02, rel=0.15)
    assert torch.count_nonzero(vit.head.weight) == 0
    with pytest.raises(ValueError, match="init"):
        ViTConfig(init="kaiming")
