"""Checks 13.1-13.6 (the capstone's ``make_model``): models written independently of the
solution notebook pass, each classic mistake is named, and the library's or the course's
finished Transformer earns nothing.

``rope_gpt`` below was written from the notebook's brief alone (ids (B, T) -> logits
(B, T, V), a budget), after the checks and without the solution's model: rotary positions
instead of a learned table, one loop over heads, no biases, so the checks are seen to judge
behaviour, not a layout."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
from checks_testing import assert_passes, assert_registered_mistakes_named

from course_utils import checks
from course_utils.lessons.nb13_capstone_gpt import exercises as nb13
from course_utils.lessons.nb13_capstone_gpt import recipe as rc
from course_utils.modeling.models.gpt import GPT, GPTConfig


@pytest.fixture(autouse=True)
def ci_profile(monkeypatch):
    """The ci brief (block 32, budget 150k, 400 steps): what CI grades in seconds."""
    monkeypatch.setenv("COURSE_PROFILE", "ci")


FAST = ("13.1", "13.2", "13.3", "13.5", "13.6")
SEEDS = (0, 1)


def rope_gpt(vocab_size: int, block_size: int) -> nn.Module:
    """A GPT written from the brief: rotary positions, heads in a loop, RMS-style norms."""
    width, n_heads, depth = 48, 3, 2
    head = width // n_heads

    def rotate(x):  # (B, T, Dh): rotate pairs of features by a position-dependent angle
        T = x.shape[1]
        freq = 1.0 / 10000 ** (torch.arange(0, head, 2, dtype=torch.float32) / head)
        angle = torch.arange(T, dtype=torch.float32)[:, None] * freq  # (T, Dh/2)
        cos, sin = angle.cos(), angle.sin()
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.q = nn.ModuleList(nn.Linear(width, head, bias=False) for _ in range(n_heads))
            self.k = nn.ModuleList(nn.Linear(width, head, bias=False) for _ in range(n_heads))
            self.v = nn.ModuleList(nn.Linear(width, head, bias=False) for _ in range(n_heads))
            self.o = nn.Linear(width, width, bias=False)
            self.ff = nn.Sequential(
                nn.Linear(width, 3 * width), nn.ReLU(), nn.Linear(3 * width, width)
            )

        def forward(self, x):
            h, T = self.norm1(x), x.shape[1]
            future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
            outs = []
            for q, k, v in zip(self.q, self.k, self.v, strict=True):
                s = rotate(q(h)) @ rotate(k(h)).transpose(1, 2) / math.sqrt(head)
                outs.append(torch.softmax(s.masked_fill(future, -1e9), dim=-1) @ v(h))
            x = x + self.o(torch.cat(outs, dim=-1))
            return x + self.ff(self.norm2(x))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab_size, width)
            self.layers = nn.Sequential(*(Layer() for _ in range(depth)))
            self.out = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, vocab_size))

        def forward(self, idx):
            return self.out(self.layers(self.embed(idx)))

    return Net()


def library_gpt(vocab_size: int, block_size: int) -> nn.Module:
    """Built from torch's finished Transformer: correct, and not the student's work."""

    class Lib(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab_size, 32), nn.Embedding(block_size, 32)
            layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
            self.body, self.head = nn.TransformerEncoder(layer, 2), nn.Linear(32, vocab_size)

        def forward(self, idx):
            T = idx.shape[1]
            mask = nn.Transformer.generate_square_subsequent_mask(T)
            x = self.tok(idx) + self.pos(torch.arange(T))
            return self.head(self.body(x, mask=mask, is_causal=True))

    return Lib()


def course_gpt(vocab_size: int, block_size: int) -> nn.Module:
    """The course's own GPT, wrapped to return the logits: not the student's work."""

    class Wrapped(nn.Module):
        def __init__(self):
            super().__init__()
            self.gpt = GPT(
                GPTConfig(vocab_size=vocab_size, block_size=block_size, n_layers=1, d_model=32)
            )

        def forward(self, idx):
            return self.gpt(idx)[0]

    return Wrapped()


@pytest.mark.parametrize("exercise_id", FAST)
def test_the_reference_and_a_model_written_from_the_brief_pass(exercise_id):
    assert_passes(exercise_id, nb13.CourseMakeModel, SEEDS)
    assert_passes(exercise_id, rope_gpt, SEEDS)
    assert_passes(exercise_id, nb13._mistake_model("ok"), SEEDS)


@pytest.mark.parametrize("exercise_id", FAST)
def test_every_classic_mistake_is_named(exercise_id):
    assert_registered_mistakes_named(exercise_id, SEEDS)


@pytest.mark.parametrize("exercise_id", [*FAST[:3], "13.4", *FAST[3:]])
@pytest.mark.parametrize("candidate", [library_gpt, course_gpt])
def test_the_librarys_or_the_courses_transformer_earns_nothing(exercise_id, candidate):
    result = checks.run(exercise_id, candidate, own_work=True)
    assert result.status == "failed" and result.points == 0
    if exercise_id != "13.4":  # 13.4 reports a missed bar first when the loss misses it too
        assert result.message.startswith("not accepted"), result.message


def test_causality_is_exact_and_names_the_leak():
    leak = checks.run("13.2", nb13._mistake_model("off_by_one"))
    assert (
        "changed the logits at position" in leak.message
        and leak.mistake == "the causal mask off by one"
    )
    assert checks.run(
        "13.2", nb13._mistake_model("no_positions")
    ).passed  # no positions: still causal


def test_a_bag_of_tokens_fails_positions_but_a_relative_encoding_passes():
    assert checks.run("13.3", nb13._mistake_model("bag")).mistake == "a bag of tokens"
    assert checks.run("13.3", rope_gpt).passed


def test_the_budget_follows_the_profile():
    assert [rc.capstone(p).max_params for p in ("ci", "cpu", "gpu")] == [
        150_000,
        1_000_000,
        12_000_000,
    ]
    for p in ("ci", "cpu", "gpu"):
        cap = rc.capstone(p)
        model = rc.course_model(65, cap.block_size, p)
        assert rc.count_params(model) < cap.max_params  # the course's GPT fits its own brief


@pytest.mark.slow
def test_it_learns_the_brief_model_passes_and_a_one_token_model_is_named():
    assert_passes("13.4", rope_gpt, seeds=(0,))
    assert_registered_mistakes_named("13.4", seeds=(0,))
