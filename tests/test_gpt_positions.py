"""GPTConfig.position: learned (the default, unchanged), sinusoidal, RoPE and ALiBi -- each
trains, is causal, and (all but the learned table) reads sequences longer than block_size."""

from __future__ import annotations

import pytest
import torch

from course_utils.modeling.models import GPT, GPTConfig
from course_utils.modeling.positional import sinusoidal_positional_encoding

POSITIONS = ["learned", "sinusoidal", "rope", "alibi"]
SMALL = dict(vocab_size=13, block_size=8, n_layers=2, n_heads=2, d_model=16)


def _gpt(position: str, seed: int = 0, **kw) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig(**{**SMALL, **kw}, position=position))


def _tokens(B: int, T: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(
        0, SMALL["vocab_size"], (B, T), generator=torch.Generator().manual_seed(seed)
    )


@pytest.mark.parametrize("position", POSITIONS)
def test_each_position_option_trains_a_step(position):
    model = _gpt(position)
    idx = _tokens(4, 8)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    before = model(idx[:, :-1], idx[:, 1:])[1]
    before.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    opt.step()
    after = model(idx[:, :-1], idx[:, 1:])[1]
    assert torch.isfinite(after) and after < before


@pytest.mark.parametrize("position", POSITIONS)
def test_each_position_option_is_causal(position):
    """Changing token p changes no logit before p (and does change the logits at p)."""
    model = _gpt(position).double().eval()
    idx = _tokens(2, 8)
    logits = model(idx)[0]
    for p in range(8):
        changed = idx.clone()
        changed[:, p] = (changed[:, p] + 1) % SMALL["vocab_size"]
        new = model(changed)[0]
        torch.testing.assert_close(new[:, :p], logits[:, :p], rtol=0, atol=1e-12)
        assert not torch.allclose(new[:, p], logits[:, p])


@pytest.mark.parametrize("position", ["sinusoidal", "rope", "alibi"])
def test_computed_positions_read_sequences_longer_than_block_size(position):
    """Nothing learned is indexed by position, so 3 x block_size tokens run; by causality the
    first block_size logits are those of the short sequence (whether the model *predicts*
    well that far is another matter: it never trained there)."""
    model = _gpt(position).double().eval()
    idx = _tokens(2, 24)
    long_logits = model(idx)[0]
    assert long_logits.shape == (2, 24, SMALL["vocab_size"])
    torch.testing.assert_close(long_logits[:, :8], model(idx[:, :8])[0])


def test_learned_positions_still_refuse_sequences_longer_than_block_size():
    with pytest.raises(ValueError, match="block_size"):
        _gpt("learned")(_tokens(1, 9))


def test_position_options_build_the_expected_parameters():
    names = {p: set(dict(_gpt(p).named_parameters())) for p in POSITIONS}
    assert "pos_emb.weight" in names["learned"]  # checkpoints of today's GPT still load
    for p in ("sinusoidal", "rope", "alibi"):
        assert names[p] == names["learned"] - {"pos_emb.weight"}
        cfg = GPTConfig(**SMALL, position=p)
        assert cfg.param_count() == GPT(cfg).num_params() == cfg.param_count(non_embedding=True)
    assert GPTConfig().position == "learned"
    with pytest.raises(ValueError, match="position"):
        GPTConfig(position="relative")


def test_sinusoidal_gpt_adds_the_encoding_to_the_token_embedding():
    model = _gpt("sinusoidal").double().eval()
    idx = _tokens(2, 5)
    pe = sinusoidal_positional_encoding(7, SMALL["d_model"], dtype=torch.float64)
    torch.testing.assert_close(model.embed(idx), model.tok_emb(idx) + pe[:5])
    torch.testing.assert_close(model.embed(idx, start_pos=2), model.tok_emb(idx) + pe[2:7])


@pytest.mark.parametrize("position", ["sinusoidal", "rope", "alibi"])
def test_cached_generation_equals_recomputing_for_every_position_option(position):
    model = _gpt(position).double()
    prompt = _tokens(2, 3)
    fast = model.generate(prompt, 12, temperature=0, use_cache=True)  # slides past block_size
    slow = model.generate(prompt, 12, temperature=0, use_cache=False)
    assert torch.equal(fast, slow)
