"""Notebook 07's recipe: the deep-stack experiment runs the notebook's own block when given one
(``make_block``) and then gives the numbers of the matching ``VariantBlock``; the CPU-clock
timing runs torch on one thread and restores the thread count."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from course_utils.lessons.nb07_transformer_block import recipe as nb07
from course_utils.modeling import layers


def _tiny():
    return replace(
        nb07.config(),
        depth=3,
        stack_d_model=8,
        stack_n_heads=2,
        stack_d_ff=12,
        stack_len=4,
        stack_batch=2,
        lengths=(4, 8),
        d_model=8,
        time_batch=1,
        min_run_time=0.001,
    )


def test_make_block_gives_the_numbers_of_the_matching_variant():
    cfg = _tiny()
    for norm_first, name in ((False, "post-norm (2017 paper)"), (True, "pre-norm (GPT-2 onwards)")):
        variant = nb07.gradient_norms_by_layer(nb07.VARIANTS[name], cfg)
        block = nb07.gradient_norms_by_layer(
            None,
            cfg,
            make_block=lambda nf=norm_first: layers.TransformerBlock(
                cfg.stack_d_model, cfg.stack_n_heads, cfg.stack_d_ff, norm_first=nf
            ),
        )
        for a, b in zip(variant, block, strict=True):
            assert a.shape == (cfg.depth,)
            torch.testing.assert_close(a, b)


def test_cpu_clock_timing_keeps_the_thread_count():
    before = torch.get_num_threads()
    times = nb07.time_vs_length(_tiny(), clock="cpu", device="cpu")
    assert torch.get_num_threads() == before
    assert set(times) == {
        "RNN (GRU, 1 layer)",
        "CNN (1 layer, k=3)",
        "CNN (enough layers to cover n)",
        "self-attention (1 layer)",
    }
    assert all(set(t) == {4, 8} and min(t.values()) > 0 for t in times.values())


def test_repeated_sweeps_give_the_median_of_each_point(monkeypatch):
    """With repeats, each point is the median over the sweeps: one slow sweep (a burst of load
    from another program) does not move it."""
    from torch.utils import benchmark

    class FakeMeasurement:
        def __init__(self):
            self.median = next(medians)

    sweep_values = []

    def fake_autorange(self, min_run_time):
        m = FakeMeasurement()
        sweep_values.append(m.median)
        return m

    cfg = _tiny()
    n_points = len(cfg.lengths) * 4
    # the second sweep's measurements are all 50 times slower than the others
    medians = iter([1.0] * n_points + [100.0] * n_points + [2.0] * n_points)
    monkeypatch.setattr(benchmark.Timer, "blocked_autorange", fake_autorange)
    times = nb07.time_vs_length(cfg, clock="cpu", device="cpu", repeats=3)
    assert len(sweep_values) == 3 * n_points
    assert all(v == 2.0 for t in times.values() for v in t.values())
    with pytest.raises(ValueError, match="repeats"):
        nb07.time_vs_length(cfg, clock="cpu", device="cpu", repeats=0)


def test_multiply_adds_are_the_real_counts_not_the_big_o_ratio_review_D_07_F1():
    macs = nb07.multiply_adds(1024, 64, 3)
    assert macs["RNN (GRU, 1 layer)"] == 6 * 1024 * 64 * 64
    assert macs["self-attention (1 layer)"] == 4 * 1024 * 64 * 64 + 2 * 1024 * 1024 * 64
    assert macs["self-attention (1 layer)"] / macs["RNN (GRU, 1 layer)"] == 6.0  # not n/D = 16


def test_he_init_separates_the_initialisation_from_the_distance_review_D_07_T1():
    n, d = 32, 64
    layers = nb07.conv_layers_to_cover(n, 3)
    grads = {}
    for init in ("he", "default"):
        torch.manual_seed(0)
        grads[init] = nb07.influence(nb07.ConvStack(d, layers, 3, init=init), n, d)
    he, default = grads["he"], grads["default"]
    assert 1e-2 < (he[0] / he[-1]).item() < 1e2  # far and near input of the same order
    assert (default[0] < 1e-3 * he[0]).item() and (default[-1] < 1e-3 * he[-1]).item()
    with pytest.raises(ValueError, match="init"):
        nb07.ConvStack(d, 2, 3, init="xavier")
