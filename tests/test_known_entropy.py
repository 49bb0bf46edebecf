"""Notebook 11's data-unlimited sweep on a generated language of known entropy (issue 34, 11-C1
and 11-F1 of review D): the floor E is the language's true entropy rate, the measured excess is
a KL divergence (never below 0, exactly 0 for the true distribution), the fits and the
bootstrap recover a known power law, and each profile's sweep spans what the issue asks."""

from __future__ import annotations

import math

import pytest
import torch

from course_utils.lessons.nb11_attention_at_scale import known_entropy as ke


@pytest.fixture(scope="module")
def source():
    return ke.make_source(vocab=8, order=1, seed=3)


def test_the_entropy_rate_is_the_empirical_loss_of_the_true_distribution(source):
    tokens, contexts = ke.sample(source, 400, 200, torch.Generator().manual_seed(0))
    prev, nxt = contexts[:, :-1], tokens[:, 1:]
    empirical = -source.table[prev, nxt].log().mean().item()
    assert empirical == pytest.approx(source.entropy, abs=0.02)
    assert 0 < source.entropy < source.unigram_entropy <= math.log(8) + 1e-9


def test_the_stationary_distribution_is_stationary(source):
    pi = source.stationary
    assert torch.allclose(pi @ source.table, pi, atol=1e-10)  # order 1: contexts are symbols


def test_an_order_two_source_samples_contexts_that_match_its_tokens():
    src = ke.make_source(vocab=4, order=2, seed=1)
    tokens, contexts = ke.sample(src, 16, 12, torch.Generator().manual_seed(0))
    assert (contexts[:, 0] == -1).all()
    for t in range(1, 12):
        assert torch.equal(contexts[:, t], tokens[:, t - 1] * 4 + tokens[:, t])


class _Oracle(torch.nn.Module):
    """Predicts with the true next-symbol distribution (order 1)."""

    def __init__(self, table):
        super().__init__()
        self.logp = table.log().float()

    def forward(self, idx):
        return self.logp[idx], None


def test_the_excess_is_zero_for_the_true_distribution_and_positive_otherwise(source):
    held = ke.sample(source, 64, 16, torch.Generator().manual_seed(1))
    loss, excess = ke.expected_loss(_Oracle(source.table), source, *held)
    assert excess == pytest.approx(0.0, abs=1e-6)
    assert loss == pytest.approx(source.entropy, abs=0.05)
    uniform = _Oracle(torch.full_like(source.table, 1 / 8))
    assert ke.expected_loss(uniform, source, *held)[1] > 0.1


def _runs(ns, excess, entropy, seeds=(0,)):
    return [
        ke.Run(
            (1, 4, 1),
            s,
            n,
            1000,
            entropy + ex * (1 + 0.01 * s),
            float("nan"),
            ex * (1 + 0.01 * s),
            0.0,
        )
        for n, ex in zip(ns, excess)
        for s in seeds
    ]


def test_the_fits_recover_a_known_power_law_above_a_known_floor():
    ns = [200, 800, 3200, 12800, 51200]
    excess = [2.0 * n**-0.4 for n in ns]
    fit = ke.fit_known_floor(_runs(ns, excess, 2.5), 2.5)
    assert fit.alpha_known == pytest.approx(0.4, abs=1e-9)
    assert fit.e_fit == pytest.approx(2.5, abs=0.02)
    assert ke.excess_falls(fit) and ke.slopes_agree(fit)
    assert fit.squared_error("known") < fit.squared_error("pure") / 4
    loss_slopes = fit.loss_slopes()
    assert loss_slopes[-1] < loss_slopes[0] / 2  # the loss itself bends towards the floor


def test_a_bent_excess_fails_the_slope_claim():
    ns = [200, 800, 3200, 12800, 51200]
    excess = [0.05 + 2.0 * n**-0.6 for n in ns]  # a second floor: the excess bends
    fit = ke.fit_known_floor(_runs(ns, excess, 2.5), 2.5)
    assert not ke.slopes_agree(fit)


def test_the_bootstrap_interval_brackets_the_exponent_and_has_width_with_noise():
    ns = [200, 800, 3200, 12800, 51200]
    gen = torch.Generator().manual_seed(0)
    runs = [
        ke.Run(
            (1, 4, 1),
            s,
            n,
            1,
            0.0,
            0.0,
            2.0 * n**-0.4 * math.exp(0.1 * torch.randn(1, generator=gen).item()),
            0.0,
        )
        for n in ns
        for s in (0, 1)
    ]
    boot = ke.bootstrap_exponents(runs, samples=300)
    lo, hi = ke.percentile(boot, 0.05), ke.percentile(boot, 0.95)
    assert lo < 0.4 < hi and hi - lo > 0.005


@pytest.mark.parametrize("profile", ["ci", "cpu", "gpu"])
def test_every_profile_sweeps_five_sizes_over_a_hundredfold_in_n(profile):
    sweep = ke.config(profile)
    ns = [ke.non_embedding_params(s, sweep) for s in sweep.sizes]
    assert len(ns) >= 5 and ns == sorted(ns) and ns[-1] / ns[0] >= 100


def test_every_training_token_is_fresh_and_the_held_out_set_is_fixed():
    sweep = ke.config("ci")
    src = ke.source_of(sweep)
    a, b = ke.held_out_set(sweep, src), ke.held_out_set(sweep, src)
    assert torch.equal(a[0], b[0])
    gen = torch.Generator().manual_seed(10_000)
    first = ke.sample(src, sweep.batch_size, sweep.block_size + 1, gen)[0]
    second = ke.sample(src, sweep.batch_size, sweep.block_size + 1, gen)[0]
    assert not torch.equal(first, second)


def _stored_cell_text(cell_id: str) -> str:
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "solutions" / "11_attention_at_scale.ipynb"
    nb = json.loads(path.read_text(encoding="utf-8"))
    (cell,) = [c for c in nb["cells"] if c.get("id") == cell_id]
    out = []
    for o in cell.get("outputs", []):
        text = o.get("text") or o.get("data", {}).get("text/markdown") or ""
        out.append(text if isinstance(text, str) else "".join(text))
    return "".join(out)


def test_the_stored_cpu_run_shows_the_data_unlimited_fit_with_its_uncertainty_review_D_11_C1():
    """Issue 34's 'done when': the scale section's fit, residuals and uncertainty are in the
    stored cpu run, and its claims held there."""
    runs = _stored_cell_text("scale-known-runs")
    sweep = ke.config("cpu")
    assert runs.count(" fresh ") == len(sweep.sizes) * len(sweep.seeds)
    fit = _stored_cell_text("scale-known-fit")
    for needed in (
        "known floor",
        "fitted floor",
        "pure power law",
        "90% bootstrap interval",
        "local slopes of L - E",
        "resid. (known E)",
    ):
        assert needed in fit, needed
    claims = _stored_cell_text("scale-known-claims")
    assert claims.count("✓ ") == 4 and "✗" not in claims and "not tested" not in claims
