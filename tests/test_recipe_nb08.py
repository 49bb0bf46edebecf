"""Notebook 08's KV-cache measurement: it counts the steps where ``GPT.generate`` rebuilds the
cache (every step once the window is full), and times both ways in alternation on the same
prompt, with the same tokens."""

from __future__ import annotations

import pytest
import torch

from course_utils.lessons.nb08_gpt import recipe as nb08
from course_utils.modeling.models.gpt import GPT, GPTConfig


def _tiny_gpt(block_size: int = 8) -> GPT:
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=11, block_size=block_size, n_layers=1, n_heads=2, d_model=8)
    return GPT(cfg).eval()


@pytest.mark.parametrize(
    "prompt_len, new_tokens, rebuilds",
    [
        (1, 8, 0),  # the window (8) is never full while a position is fed
        (1, 12, 4),  # steps 8..11 start from a full window: one rebuild each
        (3, 4, 1),  # only the prompt's forward sees several positions
        (3, 10, 1 + 4),  # the prompt, then steps 6..9 rebuild (the cache holds 3 + k - 1)
    ],
)
def test_full_forwards_are_the_prompt_and_one_rebuild_per_step_past_the_window(
    prompt_len, new_tokens, rebuilds
):
    model = _tiny_gpt()
    prompt = torch.zeros(1, prompt_len, dtype=torch.long)
    assert nb08.count_full_forwards(model, prompt, new_tokens) == rebuilds


def test_compare_generation_gives_the_same_tokens_and_positive_times():
    model = _tiny_gpt()
    timing = nb08.compare_generation(model, torch.zeros(1, 1, dtype=torch.long), 6, rounds=2)
    assert timing.same_tokens and timing.new_tokens == 6 and timing.full_forwards == 0
    assert timing.plain_s > 0 and timing.cache_s > 0 and timing.speedup > 0
    with pytest.raises(ValueError, match="rounds"):
        nb08.compare_generation(model, torch.zeros(1, 1, dtype=torch.long), 6, rounds=0)
