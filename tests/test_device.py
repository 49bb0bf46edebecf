"""Device cleanliness, proven without a GPU: models, generation, attention kernels, training
steps, the data-parallel step and the exercise harnesses run with every tensor on a stand-in
accelerator (``meta`` under :class:`device_harness.FakeAccelerator`), which rejects any CPU
tensor or CPU generator that meets it. The first tests prove the harness catches the bugs.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from device_harness import META, DeviceLeak, FakeAccelerator, all_on_meta, to_meta

from course_utils import attention, devices
from course_utils.models import GPT, EncoderDecoderTransformer, Seq2SeqRNN, ViT, ViTConfig


def _first(out):
    """The first tensor of a model's output (a tensor, or a tuple starting with one)."""
    return out[0] if isinstance(out, (tuple, list)) else out


def _tiny_gpt(**kw) -> GPT:
    cfg = dict(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=16, dropout=0.1)
    return GPT(**{**cfg, **kw})


# ----------------------------------------------------------------------------- the harness


def test_harness_rejects_a_planted_cpu_allocation():
    """The bug notebook 11's solution had: a buffer allocated without device=."""

    def leaky_running_sum(x):
        acc = torch.zeros(x.shape[-1])  # planted: on the CPU whatever x's device
        return acc + x.sum(0)

    x = torch.randn(4, 3, device=META)
    with pytest.raises(DeviceLeak, match="CPU tensor of shape \\(3,\\)"):
        with FakeAccelerator():
            leaky_running_sum(x)


def test_harness_rejects_what_bare_meta_lets_through():
    """``meta`` alone accepts these three; a GPU (and the harness) does not."""
    x = torch.randn(2, 4, device=META)
    cases = {
        "matmul with a host matrix": lambda: x @ torch.randn(4, 3),
        "embedding of host token ids": lambda: nn.Embedding(5, 4, device=META)(
            torch.tensor([1, 2])
        ),
        "sampling with a host generator": lambda: torch.multinomial(
            x.softmax(-1), 1, generator=torch.Generator().manual_seed(0)
        ),
    }
    for name, fn in cases.items():
        fn()  # bare meta: no error
        with pytest.raises(DeviceLeak):
            with FakeAccelerator():
                fn()
        assert name


def test_harness_strict_mode_rejects_host_tensors_made_from_nothing():
    x = torch.randn(3, device=META)
    with FakeAccelerator(strict=True):
        x + torch.tensor(2.0)  # a 0-dim host scalar is fine (CUDA accepts it too)
        torch.arange(3, device=x.device)
    with pytest.raises(DeviceLeak, match="host allocation"):
        with FakeAccelerator(strict=True):
            torch.arange(3)


def test_harness_lets_loops_log_and_plot():
    """``.item()``, ``float()``, ``bool()`` and copies to the host work (stand-in values)."""
    loss = torch.randn(5, device=META).pow(2).mean()
    with FakeAccelerator() as h:
        assert loss.item() == 1.0 and float(loss) == 1.0 and bool(loss > 0)
        host = loss.detach().cpu()
    assert host.device.type == "cpu" and h.ops > 0


def test_harness_catches_a_cpu_prompt_given_to_a_model_on_the_device():
    model = to_meta(_tiny_gpt())
    with pytest.raises(DeviceLeak, match="embedding"):
        with FakeAccelerator():
            model(torch.zeros(1, 3, dtype=torch.long))


# ----------------------------------------------------------------------------- devices.py


def test_devices_helpers():
    model = to_meta(_tiny_gpt())
    assert devices.model_device(model) == META
    prompt, batch = devices.to_model_device(
        model, torch.zeros(1, 2, dtype=torch.long), {"x": [torch.ones(2)]}
    )
    assert prompt.device == META and batch["x"][0].device == META
    assert devices.generator(0, model) is None  # meta: nothing to draw
    g = devices.generator(3, "cpu")
    assert g.device.type == "cpu" and g.initial_seed() == 3
    with devices.autocast(META, torch.bfloat16):  # no autocast on meta: a no-op, no error
        pass
    with devices.autocast("cpu", torch.bfloat16):
        assert torch.is_autocast_enabled("cpu")
    assert devices.memory_bytes("cpu") is None


# ----------------------------------------------------------------------------- models


def test_gpt_forward_backward_generate_and_maps_on_the_device():
    model = to_meta(_tiny_gpt())
    idx = torch.zeros(2, 5, dtype=torch.long, device=META)
    with FakeAccelerator(strict=True):
        out = model(idx, idx)
        _first(out).float().sum().backward()
        for use_cache in (False, True):  # 12 new tokens: the cache window slides past 8
            gen = model.generate(idx, 12, temperature=0.8, top_k=3, use_cache=use_cache)
            assert gen.shape == (2, 17) and gen.device == META
        maps = model.attention_maps(idx)
    assert all_on_meta(maps)
    assert all(p.grad is not None and p.grad.device == META for p in model.parameters())


def test_vit_forward_backward_on_the_device():
    model = to_meta(ViT(ViTConfig(image_size=8, patch_size=4, d_model=16, n_layers=2, n_heads=2)))
    images = torch.randn(3, 1, 8, 8, device=META)
    with FakeAccelerator(strict=True):
        _first(model(images)).sum().backward()
        model.position_similarity()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


@pytest.mark.parametrize("attention_on", [False, True])
def test_seq2seq_rnn_on_the_device(attention_on):
    model = to_meta(Seq2SeqRNN(9, 9, 8, 12, attention=attention_on))
    src = torch.randint(3, 9, (2, 5)).to(META)
    lengths = torch.tensor([5, 3]).to(META)
    tgt = torch.randint(3, 9, (2, 4)).to(META)
    with FakeAccelerator(strict=True):
        _first(model(src, lengths, tgt)).sum().backward()
        tokens, _ = model.greedy_decode(src, lengths, 6)
    assert tokens.device == META


def test_encoder_decoder_transformer_on_the_device():
    model = to_meta(EncoderDecoderTransformer(9, 9, d_model=16, n_heads=2, n_layers=1, max_len=12))
    src = torch.randint(3, 9, (2, 5)).to(META)
    lengths = torch.tensor([5, 3]).to(META)
    tgt = torch.randint(3, 9, (2, 4)).to(META)
    with FakeAccelerator(strict=True):
        _first(model(src, lengths, tgt)).sum().backward()
        tokens, _ = model.greedy_decode(src, lengths, 6)
    assert tokens.device == META


# ----------------------------------------------------------------------------- attention kernels


@pytest.mark.parametrize("causal", [False, True])
def test_attention_kernels_on_the_device(causal):
    q, k, v = (torch.randn(2, 2, 7, 4, device=META) for _ in range(3))
    with FakeAccelerator(strict=True):
        out = attention.tiled_attention(q, k, v, 3, causal=causal)
        attention.scaled_dot_product_attention(q, k, v, is_causal=causal)
        attention.fast_attention(q, k, v, is_causal=causal)
    assert out.shape == (2, 2, 7, 4) and out.device == META
