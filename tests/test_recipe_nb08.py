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


def test_keep_best_restores_the_weights_of_the_best_evaluation(monkeypatch):
    """The H200 run: the gpu recipe's last step overfits (val 1.472 at step 5000, above the
    1.47 bar); nanoGPT keeps the best evaluation's checkpoint, and so does Config.keep_best.
    A scripted validation curve (down, then up) must bring back the weights of its minimum."""
    from dataclasses import replace

    vals = iter([3.0, 2.0, 2.5, 2.8])  # the periodic evaluations: best at the second
    snapshots = []

    def scripted(net, data, batches, batch_size, autocast_dtype=None, **kw):
        if batches == cfg.final_eval_batches:  # the final estimate, on the kept weights
            snapshots.append(("final", [p.detach().clone() for p in net.parameters()]))
            return {"train": 1.0, "val": 2.0}
        snapshots.append(("eval", [p.detach().clone() for p in net.parameters()]))
        return {"train": 1.0, "val": next(vals)}

    monkeypatch.setattr(nb08, "estimate_loss", scripted)
    cfg = replace(nb08.config("ci"), steps=8, eval_every=2, keep_best=True, final_eval_batches=3)
    data = nb08.load_dataset(None)
    model, hist = nb08.train_char_gpt(cfg, data, progress=False)
    periodic = [params for tag, params in snapshots if tag == "eval"]
    final = [params for tag, params in snapshots if tag == "final"]
    assert len(periodic) >= 3 and len(final) == 1
    assert hist.kept_step == hist.eval_step[1]
    kept = periodic[1]
    assert all(torch.equal(a, b) for a, b in zip(kept, model.parameters()))
    assert all(torch.equal(a, b) for a, b in zip(kept, final[0]))  # judged on the kept weights
    assert not all(torch.equal(a, b) for a, b in zip(periodic[2], kept))  # training did move
    assert f"weights of step {hist.kept_step} kept" in hist.summary()
    # without keep_best the last weights stay
    vals = iter([3.0, 2.0, 2.5, 2.8])
    snapshots.clear()
    model, hist = nb08.train_char_gpt(replace(cfg, keep_best=False), data, progress=False)
    assert hist.kept_step is None and "kept" not in hist.summary()
    kept = [params for tag, params in snapshots if tag == "eval"][1]
    assert not all(torch.equal(a, b) for a, b in zip(kept, model.parameters()))


def test_only_the_gpu_recipe_keeps_the_best_evaluation():
    assert nb08.config("gpu").keep_best
    assert not nb08.config("ci").keep_best and not nb08.config("cpu").keep_best
