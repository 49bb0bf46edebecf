"""Beam search with the GNMT length penalty (Wu et al. 2016, eq. 14), for one input at a time.

A hypothesis Y of |Y| generated tokens (its EOS included, BOS not) scores

    s(Y) = log P(Y) / lp(Y),        lp(Y) = ((5 + |Y|) / 6) ** alpha

``alpha = 0`` ranks by the raw log-probability, which favours short captions (every extra
token adds a negative log-probability); ``alpha = 1`` divides by roughly the length.

Each step extends every alive beam by every token, keeps the ``beam_size`` best extensions by
log-probability (alive beams all have the same length, so the penalty does not change their
order), moves those ending in EOS to the finished list (a finished beam is never extended)
and goes on with the rest, until none is alive or ``max_len`` tokens were generated; beams
still alive then count as hypotheses of length ``max_len``. The answer is the hypothesis with
the best ``s(Y)``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = ["length_penalty", "beam_search"]


def length_penalty(length: int, alpha: float) -> float:
    """GNMT's lp(Y) = ((5 + |Y|) / 6) ** alpha for a hypothesis of ``length`` tokens."""
    return ((5.0 + length) / 6.0) ** alpha


def beam_search(
    log_probs_fn: Callable[[torch.Tensor], torch.Tensor],
    bos_id: int,
    eos_id: int,
    beam_size: int,
    max_len: int,
    alpha: float = 0.6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The best hypothesis and its length-normalised score.

    ``log_probs_fn(prefixes)``: prefixes (K, t) token ids, BOS first -> (K, V) log-probabilities
    of the next token. Returns ``(tokens (L,), score ())``: the generated tokens without BOS
    (ending in EOS unless the hypothesis ran to ``max_len``) and ``log P(Y) / lp(Y)``.
    """
    probe = log_probs_fn(torch.tensor([[bos_id]]))
    device = probe.device
    alive = torch.full((1, 1), bos_id, dtype=torch.long, device=device)  # (K, t)
    alive_logp = torch.zeros(1, dtype=probe.dtype, device=device)  # (K,)
    finished: list[tuple[torch.Tensor, torch.Tensor]] = []
    for step in range(1, max_len + 1):
        logp = probe if step == 1 else log_probs_fn(alive)  # (K, V)
        V = logp.shape[-1]
        total = (alive_logp[:, None] + logp).flatten()  # (K * V,)
        top, idx = total.topk(min(beam_size, total.numel()))
        seqs = torch.cat([alive[idx // V], (idx % V)[:, None]], dim=1)  # (k, t + 1)
        ended = seqs[:, -1] == eos_id
        for seq, lp in zip(seqs[ended], top[ended], strict=True):
            finished.append((seq[1:], lp / length_penalty(step, alpha)))
        alive, alive_logp = seqs[~ended], top[~ended]
        if alive.shape[0] == 0:
            break
    for seq, lp in zip(alive, alive_logp, strict=True):  # ran out of length
        finished.append((seq[1:], lp / length_penalty(max_len, alpha)))
    best = max(range(len(finished)), key=lambda i: float(finished[i][1]))
    return finished[best]
