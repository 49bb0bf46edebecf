"""The maths behind two of lesson 09's pictures: attention rollout, and how similar the
learned position embeddings are as a function of distance on the patch grid.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from course_utils.modeling.models.vit import ViT


def attention_rollout(weights: list[Tensor] | Tensor, *, residual: bool = True) -> Tensor:
    """Attention rollout (Abnar & Zuidema, 2020): how much each input token flows into each
    output token through all layers, if attention were the only way information moves.

    weights: per layer (B, H, L, L) (a list, or a tensor (n_layers, B, H, L, L)) -> (B, L, L).
    Heads are averaged; with ``residual`` the skip connection is modelled as
    ``0.5 * A + 0.5 * I`` (rows renormalised); the layers' maps are multiplied,
    ``R = A_n ... A_2 A_1``, so ``R[b, i, j]`` is token j's share in output token i.
    """
    layers = list(weights)
    if not layers:
        raise ValueError("attention_rollout needs the weights of at least one layer")
    rollout = None
    for w in layers:
        if w.dim() != 4 or w.shape[-1] != w.shape[-2]:
            raise ValueError(f"expected per-layer weights (B, H, L, L), got {tuple(w.shape)}")
        a = w.mean(dim=1)  # (B, L, L)
        if residual:
            a = 0.5 * a + 0.5 * torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
            a = a / a.sum(dim=-1, keepdim=True)
        rollout = a if rollout is None else a @ rollout
    return rollout


def position_similarity(model: ViT) -> Tensor:
    """Cosine similarity of every patch's learned position embedding with every other's,
    arranged on the patch grid (the ViT paper's figure 7, centre): (gh, gw, gh, gw).

    ``out[r, c]`` is a (gh, gw) map: how similar patch (r, c)'s position vector is to each
    position of the grid. The class token's embedding is left out.
    """
    gh, gw = model.config.grid_size
    pos = model.pos_embed[0, 1:] if model.cls_token is not None else model.pos_embed[0]
    pos = F.normalize(pos.detach().float(), dim=-1)  # (N, D)
    return (pos @ pos.T).reshape(gh, gw, gh, gw).cpu()


def grid_distance(grid: tuple[int, int]) -> Tensor:
    """Euclidean distance between every two patches of a (gh, gw) grid, in patches: (N, N)."""
    gh, gw = grid
    rows, cols = torch.meshgrid(torch.arange(gh), torch.arange(gw), indexing="ij")
    pos = torch.stack([rows.flatten(), cols.flatten()], dim=-1).float()  # (N, 2)
    return torch.cdist(pos, pos)


def position_distance_correlation(model: ViT) -> float:
    """Pearson correlation, over all pairs of different patches, between the cosine similarity
    of their position embeddings and their distance on the patch grid.

    Clearly negative: near patches have similar embeddings (the grid was learned); near 0: no
    relation (random embeddings give about 0).
    """
    gh, gw = model.config.grid_size
    n = gh * gw
    if n < 3:
        raise ValueError(f"need at least 3 patches to correlate, the grid is {gh}x{gw}")
    sim = position_similarity(model).reshape(n, n)
    dist = grid_distance((gh, gw))
    off = ~torch.eye(n, dtype=torch.bool)
    return float(torch.corrcoef(torch.stack([sim[off], dist[off]]))[0, 1])


def similarity_by_distance(model: ViT) -> tuple[list[float], list[float]]:
    """Mean cosine similarity of position embeddings at each distance on the grid:
    ``(distances, means)``, distances sorted (the pairs of a patch with itself left out)."""
    gh, gw = model.config.grid_size
    n = gh * gw
    sim = position_similarity(model).reshape(n, n)
    squared = grid_distance((gh, gw)).square().round().long()  # integers: exact to compare
    values = sorted({int(d) for d in squared.flatten() if d > 0})
    return [math.sqrt(d) for d in values], [float(sim[squared == d].mean()) for d in values]
