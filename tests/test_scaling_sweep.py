"""Notebook 11's scaling sweep: the power-law fits recover known laws (with noise too), the
parameter and FLOP counts match a hand count, and the sweep's table states every profile."""

from __future__ import annotations

import math
import random

import pytest

from course_utils.data.text import CharDataset, fallback_corpus
from course_utils.lessons.nb11_attention_at_scale import scaling_sweep as ss
from course_utils.modeling.models.gpt import GPT, GPTConfig
from course_utils.runtime.profiles import PROFILES
from course_utils.scaling import fit_power_law, fit_power_law_with_floor, power_law

NS = [1e4, 3e4, 1e5, 3e5, 1e6, 3e6]


# ------------------------------------------------------------------------------ the fits


def test_fit_power_law_recovers_an_exact_law():
    ys = [5.0 * n**-0.076 for n in NS]
    a, alpha = fit_power_law(NS, ys)
    assert a == pytest.approx(5.0, rel=1e-9)
    assert alpha == pytest.approx(0.076, abs=1e-12)


def test_fit_power_law_of_a_growing_curve_gives_a_negative_exponent():
    _, alpha = fit_power_law([1, 2, 4, 8], [3.0 * n**2 for n in (1, 2, 4, 8)])
    assert alpha == pytest.approx(-2.0)


def test_fit_power_law_stays_close_under_one_percent_noise():
    rng = random.Random(0)
    alphas = []
    for _ in range(20):
        ys = [2.0 * n**-0.3 * math.exp(rng.gauss(0.0, 0.01)) for n in NS]
        alphas.append(fit_power_law(NS, ys)[1])
    assert max(abs(a - 0.3) for a in alphas) < 0.01
    assert abs(sum(alphas) / len(alphas) - 0.3) < 0.003


def test_fit_with_a_floor_recovers_the_irreducible_term():
    ys = [power_law(n, 3.0, 0.3, floor=1.5) for n in NS]
    c, a, alpha = fit_power_law_with_floor(NS, ys, grid=2000)
    assert c == pytest.approx(1.5, abs=0.01)
    assert alpha == pytest.approx(0.3, abs=0.02)
    assert max(abs(power_law(n, a, alpha, c) - y) for n, y in zip(NS, ys)) < 1e-3


def test_fit_with_a_floor_of_a_pure_power_law_finds_no_floor():
    ys = [4.0 * n**-0.1 for n in NS]
    c, _, alpha = fit_power_law_with_floor(NS, ys)
    assert c == 0.0 and alpha == pytest.approx(0.1)


@pytest.mark.parametrize(
    ("xs", "ys", "words"),
    [
        ([1, 2], [1.0], "as many xs as ys"),
        ([3, 3], [1.0, 2.0], "two different xs"),
        ([1, 2], [1.0, 0.0], "must be > 0"),
        ([0, 2], [1.0, 2.0], "must be > 0"),
        ([1, 2], [1.0, float("nan")], "must be > 0"),
    ],
)
def test_fit_power_law_refuses_what_has_no_logarithm(xs, ys, words):
    with pytest.raises(ValueError, match=words):
        fit_power_law(xs, ys)


def test_fit_with_a_floor_needs_three_points():
    with pytest.raises(ValueError, match="three different xs"):
        fit_power_law_with_floor([1, 2], [2.0, 1.0])


# ------------------------------------------------------------------ counting N and C


def test_non_embedding_params_match_a_hand_count_of_a_tiny_gpt():
    cfg = GPTConfig(vocab_size=10, block_size=8, n_layers=1, n_heads=2, d_model=4, bias=False)
    # one layer: 2 LayerNorm weights (2 x 4) + QKV (3 x 4 x 4) + output (4 x 4)
    # + MLP (4 x 16 + 16 x 4) = 8 + 48 + 16 + 128 = 200; the final LayerNorm 4
    assert ss.non_embedding_params(cfg) == 204
    model = GPT(cfg)
    embeddings = model.tok_emb.weight.numel() + model.pos_emb.weight.numel()  # 40 + 32
    assert sum(p.numel() for p in model.parameters()) - embeddings == 204


def test_non_embedding_params_are_close_to_kaplans_12_l_d_squared():
    for size in ss.SIZES.cpu.sizes:
        cfg = ss.model_config(size, 64, 65)
        approx = 12 * size[0] * size[1] ** 2
        assert approx < ss.non_embedding_params(cfg) < 1.02 * approx


def test_training_flops_are_six_n_d_and_invert():
    assert ss.training_flops(204, 1000) == 6 * 204 * 1000
    assert ss.tokens_for_flops(ss.training_flops(204, 1000), 204) == 1000
    # the same compute buys a four times smaller model four times the tokens
    assert ss.tokens_for_flops(ss.training_flops(400, 1000), 100) == 4000


# --------------------------------------------------------------------------- the table


def test_the_sweep_states_every_profile_with_enough_sizes():
    assert [name for name, _ in ss.SIZES.items()] == list(PROFILES)
    assert len(ss.SIZES.ci.sizes) >= 5 and len(ss.SIZES.cpu.sizes) >= 5  # the bend needs 5 sizes
    assert len(ss.SIZES.gpu.sizes) >= len(ss.SIZES.cpu.sizes)
    for _, sweep in ss.SIZES.items():
        counts = [
            ss.non_embedding_params(ss.model_config(s, sweep.block_size, 65)) for s in sweep.sizes
        ]
        assert counts == sorted(set(counts)), "sizes go from smallest to largest"
        assert all(d % h == 0 for _, d, h in sweep.sizes)
        for budget, others in sweep.compute:
            assert 0 <= budget < len(sweep.sizes) and budget not in others
            assert all(0 <= j < len(sweep.sizes) for j in others)
    assert ss.config("cpu") is ss.SIZES.cpu


def test_the_claimed_exponent_range_is_far_from_the_misconceptions():
    low, high = ss.ALPHA_RANGE
    assert 0 < low < ss.KAPLAN_ALPHA_N < high < 1


# ------------------------------------------------------------------- reading the runs


def run(kind, params, tokens, val):
    return ss.Run(kind, (1, 8, 1), params, tokens, val, val, 0.0)


def test_frontier_keeps_the_runs_no_cheaper_run_beats():
    runs = [
        run(ss.SAME_TOKENS, 100, 100, 2.0),  # 6e4 FLOPs
        run(ss.SAME_TOKENS, 400, 100, 1.8),  # 2.4e5
        run(ss.SAME_COMPUTE, 100, 400, 1.7),  # 2.4e5, better at the same compute
        run(ss.SAME_TOKENS, 1600, 100, 1.75),  # 9.6e5, worse than a cheaper run
    ]
    assert [(r.params, r.tokens) for r in ss.frontier(runs)] == [(100, 100), (100, 400)]


def test_winners_rank_every_run_at_a_budget():
    sweep = ss.SIZES.ci
    fixed = [run(ss.SAME_TOKENS, p, 1000, v) for p, v in ((100, 2.0), (400, 1.8), (1600, 1.7))]
    cheaper = run(ss.SAME_COMPUTE, 400, 250, 2.1)  # the smallest run's compute
    wins = ss.winners(sweep, [*fixed, cheaper])
    assert list(wins) == [fixed[0].flops]
    assert [r.val_loss for r in wins[fixed[0].flops]] == [2.0, 2.1]


@pytest.mark.parametrize(
    ("losses", "falls"),
    [
        ((2.0, 1.9, 1.8), True),
        ((2.0, 1.9, 1.91), True),  # within the slack
        ((2.0, 1.9, 1.95), False),
        ((2.0, 2.0, 2.0), False),  # no gain at all
    ],
)
def test_falls_with_size_allows_a_small_slack(losses, falls):
    runs = [run(ss.SAME_TOKENS, 100 * 4**i, 1000, v) for i, v in enumerate(losses)]
    assert ss.falls_with_size(runs) is falls


# ---------------------------------------------------------------------- the ci sweep


@pytest.mark.slow
def test_the_ci_sweep_on_the_offline_corpus_shows_the_claimed_trend():
    sweep = ss.SIZES.ci
    data = CharDataset(fallback_corpus())  # always there, whatever the machine has cached
    runs = ss.same_tokens(sweep, data)
    _, alpha = ss.fit_same_tokens(runs)
    assert ss.falls_with_size(runs)
    assert ss.ALPHA_RANGE[0] < alpha < ss.ALPHA_RANGE[1]
    more = ss.same_compute(sweep, data, runs)
    assert len(more) == sum(len(others) for _, others in sweep.compute)
    budget = runs[sweep.compute[0][0]].flops
    for r in more:  # the budget's tokens, rounded to whole steps
        assert abs(r.tokens - ss.tokens_for_flops(budget, r.params)) <= sweep.tokens_per_step / 2


# ----------------------------------------------------- is it one power law? (review D 11-C1)


def test_local_slopes_are_constant_for_a_power_law_and_shrink_towards_a_floor():
    from course_utils.scaling import local_slopes

    assert local_slopes(NS, [power_law(n, 3.0, 0.1) for n in NS]) == pytest.approx([0.1] * 5)
    bent = local_slopes(NS, [power_law(n, 30.0, 0.5, 2.0) for n in NS])
    assert all(b < a for a, b in zip(bent, bent[1:]))


def test_the_stored_cpu_sweep_bends_as_review_D_derived():
    from course_utils.scaling import jackknife_exponents, local_slopes, residuals, squared_error

    ns = [6224, 24736, 98624, 332448, 787584]  # the cpu run reviewed in turn 4
    ls = [2.479, 2.271, 2.169, 2.128, 2.104]
    assert [round(s, 3) for s in local_slopes(ns, ls)] == [0.064, 0.033, 0.016, 0.013]
    a, alpha = fit_power_law(ns, ls)
    signs = ["+" if r > 0 else "-" for r in residuals(ns, ls, a, alpha)]
    assert signs[0] == signs[-1] == "+" and signs[1] == signs[2] == "-"
    c, a2, alpha2 = fit_power_law_with_floor(ns, ls)
    assert 2.0 < c < 2.1 and 0.4 < alpha2 < 0.6
    assert squared_error(ns, ls, a2, alpha2, c) < squared_error(ns, ls, a, alpha) / 4
    jack = jackknife_exponents(ns, ls, with_floor=True)
    assert len(jack) == 5 and max(jack) - min(jack) < 0.2
    with pytest.raises(ValueError, match="at least 4 points"):
        jackknife_exponents(ns[:3], ls[:3], with_floor=True)
