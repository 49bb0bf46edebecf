"""Notebook 06's recipe: the batched partner of the loop computes exactly what the loop of
06.1 computes (so the timing compares like with like), and the heads-vs-layers sweep trains
every requested model and reports its three accuracies."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from course_utils.lessons.nb06_multi_head import recipe as nb06
from course_utils.lessons.nb06_multi_head.exercises import multi_head_loop_reference
from course_utils.modeling import layers


@pytest.mark.parametrize("n_heads", [1, 4, 8])
def test_batched_heads_equals_the_loop_on_the_same_weights(n_heads):
    torch.manual_seed(n_heads)
    layer = layers.MultiHeadAttention(16, n_heads)
    x = torch.randn(3, 5, 16)
    with torch.no_grad():
        got = nb06.batched_heads(x, layer.qkv.weight, layer.out.weight, n_heads)
        want = multi_head_loop_reference(x, *nb06.head_weights(layer))
        layer.qkv.bias.zero_()
        layer.out.bias.zero_()
        fused = layer(x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got, fused, rtol=1e-5, atol=1e-5)


def test_batched_heads_uses_its_head_count():
    torch.manual_seed(0)
    layer = layers.MultiHeadAttention(16, 4)
    x = torch.randn(2, 6, 16)
    with torch.no_grad():
        four = nb06.batched_heads(x, layer.qkv.weight, layer.out.weight, 4)
        one = nb06.batched_heads(x, layer.qkv.weight, layer.out.weight, 1)
    assert not torch.allclose(four, one, atol=1e-4)


def test_heads_vs_layers_trains_each_requested_model():
    cfg = replace(nb06.config(), d_model=12, d_ff=12, steps=2, batch=4)
    threads = torch.get_num_threads()
    results = nb06.heads_vs_layers(cfg, heads=(1, 3), n_layers=(1, 2))
    assert torch.get_num_threads() == threads
    assert set(results) == {(1, 1), (1, 3), (2, 1), (2, 3)}
    for acc in results.values():
        assert acc.shape == (3,)
        assert ((0 <= acc) & (acc <= 1)).all()
