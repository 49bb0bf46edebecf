"""Notebook 06 (multi-head attention): experiment sizes per profile and helpers.

* :func:`config` — every size the notebook uses, from the active profile.
* :class:`LookupTask` — a toy task whose solution needs *different* heads: at every position
  predict three tokens, the previous one, the mirror one (position ``T - 1 - i``) and the first
  one. Each lookup is one attention pattern (a sub-diagonal, an anti-diagonal, a column), so a
  trained model's heads specialise visibly.
* :class:`HeadsModel` and :func:`train_heads_model` — a 2-layer encoder trained on it in
  seconds; :func:`heads_vs_layers` trains it with 1 and 3 heads at 1 and 2 layers (is one head
  enough?); :func:`attention_maps` returns every head's weights, :func:`head_ablation` the
  accuracy with one head switched off (Michel et al. 2019).
* :func:`draw_split_heads` — the picture of ``split_heads``: which numbers land in which head;
  :func:`mha_flops` / :func:`mha_params` — the four matmuls' FLOPs and the parameters;
  :func:`score_entries` — the size of the scores tensor, which does grow with H;
  :func:`head_weights` — a fused layer's weights as per-head matrices, for the loop of 06.1;
  :func:`batched_heads` — all heads at once with exactly the loop's operations (no biases, plain
  softmax), the fair partner of the loop in a timing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from matplotlib.patches import Rectangle
from torch import Tensor, nn

from course_utils.modeling.layers import TransformerBlock, record_attention
from course_utils.runtime import devices
from course_utils.runtime.profiles import ProfileTable

__all__ = [
    "Config",
    "config",
    "LookupTask",
    "HeadsModel",
    "train_heads_model",
    "heads_vs_layers",
    "accuracy",
    "batched_heads",
    "attention_maps",
    "head_ablation",
    "draw_split_heads",
    "mha_flops",
    "mha_params",
    "score_entries",
    "head_weights",
]


@dataclass(frozen=True, kw_only=True)
class Config:
    """Sizes of notebook 06's experiments."""

    vocab: int = 8  # letters a, b, c, ...
    seq_len: int = 10
    d_model: int
    n_heads: int = 4
    n_layers: int = 2
    d_ff: int
    steps: int
    batch: int
    lr: float
    n_sentences: int = 6  # sentences offered by the viewer
    time_batch: int
    time_len: int
    time_d_model: int
    time_heads: tuple[int, ...]
    min_run_time: float  # seconds per torch.utils.benchmark measurement


SIZES = ProfileTable(
    ci=Config(
        d_model=32,
        d_ff=64,
        steps=150,
        batch=64,
        lr=1e-2,
        time_batch=2,
        time_len=32,
        time_d_model=128,
        time_heads=(1, 4, 16, 32),
        min_run_time=0.05,
    ),
    cpu=Config(
        d_model=48,
        d_ff=96,
        steps=600,
        batch=128,
        lr=5e-3,
        time_batch=4,
        time_len=64,
        time_d_model=256,
        time_heads=(1, 2, 4, 8, 16, 32, 64),
        min_run_time=0.2,
    ),
    gpu=Config(
        d_model=48,
        d_ff=96,
        steps=600,
        batch=128,
        lr=5e-3,
        time_batch=32,
        time_len=512,
        time_d_model=1024,
        time_heads=(1, 2, 4, 8, 16, 32, 64),
        min_run_time=0.2,
    ),
)


def config(profile: str | None = None) -> Config:
    """The sizes of the active profile (or of ``profile``: "ci", "cpu" or "gpu"): that row of
    :data:`SIZES` (the fields no row sets keep :class:`Config`'s defaults)."""
    return SIZES.for_profile(profile)


# ----------------------------------------------------------------------------- the task


class LookupTask:
    """Sequences of random letters; at position ``i`` predict three letters.

    ``x`` (B, T) token ids in ``[0, vocab)``; ``y`` (B, T, 3): ``y[:, i, 0] = x[:, i - 1]``
    (previous token, wrapping around at ``i = 0``), ``y[:, i, 1] = x[:, T - 1 - i]`` (mirror),
    ``y[:, i, 2] = x[:, 0]`` (first token).
    """

    LOOKUPS = ("previous", "mirror", "first")

    def __init__(self, vocab: int = 8, seq_len: int = 10):
        if not 2 <= vocab <= 26:
            raise ValueError(f"expected 2 <= vocab <= 26 (letters a-z), got {vocab}")
        self.vocab, self.seq_len = vocab, seq_len

    def targets(self, x: Tensor) -> Tensor:
        """x (B, T) -> y (B, T, 3): previous, mirror and first token at every position."""
        prev = x.roll(1, dims=1)
        mirror = x.flip(1)
        first = x[:, :1].expand_as(x)
        return torch.stack([prev, mirror, first], dim=-1)

    def sample(self, batch: int, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """A batch ``(x (B, T), y (B, T, 3))`` of random sentences."""
        x = torch.randint(0, self.vocab, (batch, self.seq_len), generator=generator)
        return x, self.targets(x)

    def letters(self, x: Tensor) -> list[str]:
        """One sentence (T,) as letters, for axis labels."""
        return [chr(ord("a") + int(i)) for i in x]


# ----------------------------------------------------------------------------- the model


class HeadsModel(nn.Module):
    """Token + learned position embeddings, ``n_layers`` pre-norm Transformer blocks, a final
    LayerNorm and one classifier per lookup: x (B, T) -> logits (B, T, 3, vocab)."""

    def __init__(
        self,
        vocab: int,
        seq_len: int,
        d_model: int,
        n_heads: int,
        n_layers: int,
        d_ff: int,
        n_outputs: int = 3,
    ):
        super().__init__()
        self.vocab, self.n_outputs = vocab, n_outputs
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.randn(seq_len, d_model))  # as strong as the tokens
        self.blocks = nn.ModuleList(
            TransformerBlock(d_model, n_heads, d_ff, norm_first=True) for _ in range(n_layers)
        )
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, n_outputs * vocab)

    def forward(self, x: Tensor) -> Tensor:
        """x (B, T) -> logits (B, T, 3, V)."""
        h = self.embed(x) + self.pos[: x.shape[1]]  # (B, T, D)
        for block in self.blocks:
            h = block(h)
        return self.head(self.norm(h)).unflatten(-1, (self.n_outputs, self.vocab))


def _loss(model: nn.Module, batch: tuple[Tensor, Tensor]) -> Tensor:
    x, y = batch
    logits = model(x)  # (B, T, 3, V)
    return F.cross_entropy(logits.flatten(0, -2), y.flatten())


def train_heads_model(
    cfg: Config | None = None,
    seed: int = 0,
    progress: bool | str = "auto",
    device: torch.device | str | None = None,
):
    """Train a :class:`HeadsModel` on :class:`LookupTask` on ``device`` (default: the
    profile's); returns ``(model, task, history)``."""
    from course_utils.runtime.training import train

    cfg = cfg or config()
    torch.manual_seed(seed)
    task = LookupTask(cfg.vocab, cfg.seq_len)
    model = HeadsModel(cfg.vocab, cfg.seq_len, cfg.d_model, cfg.n_heads, cfg.n_layers, cfg.d_ff)
    gen = torch.Generator().manual_seed(seed)
    val = task.sample(1024, torch.Generator().manual_seed(seed + 1))

    history = train(
        model,
        lambda step: task.sample(cfg.batch, gen),
        steps=cfg.steps,
        lr=cfg.lr,
        loss_fn=_loss,
        warmup=cfg.steps // 10,
        eval_fn=lambda m: {"accuracy": accuracy(m, *val).min().item()},
        eval_every=max(cfg.steps // 5, 1),
        progress=progress,
        desc="lookup task",
        device=devices.resolve(device),
    )
    return model, task, history


def heads_vs_layers(
    cfg: Config | None = None,
    heads: tuple[int, ...] = (1, 3),
    n_layers: tuple[int, ...] = (1, 2),
    seed: int = 0,
    progress: bool | str = False,
) -> dict[tuple[int, int], Tensor]:
    """Train the lookup model with each number of layers and heads (everything else as in
    ``cfg``) and return ``{(layers, heads): per-lookup accuracy (3,)}`` on 1024 fresh
    sentences. ``cfg.d_model`` must be divisible by every head count. On a CPU the models
    train on one torch thread (restored afterwards): the sums then run in one order, so a
    seed gives the same models however many cores the machine has, and a busy machine is not
    slowed further by threads waiting for each other."""
    cfg = cfg or config()
    results = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for L in n_layers:
            for H in heads:
                model, task, _ = train_heads_model(
                    replace(cfg, n_layers=L, n_heads=H), seed=seed, progress=progress
                )
                x, y = task.sample(1024, torch.Generator().manual_seed(seed + 1))
                results[(L, H)] = accuracy(model, x, y)
    finally:
        torch.set_num_threads(threads)
    return results


@torch.no_grad()
def accuracy(model: nn.Module, x: Tensor, y: Tensor) -> Tensor:
    """Per-lookup token accuracy, shape (3,): previous, mirror, first (on the CPU; x and y move
    to the model's device)."""
    x, y = devices.to_model_device(model, x, y)
    return (model(x).argmax(-1) == y).float().mean(dim=(0, 1)).cpu()


@torch.no_grad()
def attention_maps(model: HeadsModel, x: Tensor) -> Tensor:
    """Every head's attention weights on the sentences x (B, T): (L, B, H, T, T)."""
    model.eval()
    x = devices.to_model_device(model, x)
    with record_attention(model) as maps:  # one (B, H, T, T) per layer
        model(x)
    return torch.stack(maps).cpu()


@torch.no_grad()
def head_ablation(model: HeadsModel, x: Tensor, y: Tensor) -> Tensor:
    """Accuracy per lookup with one head switched off: (L, H, 3).

    A head is switched off by zeroing its slice ``h*Dh:(h+1)*Dh`` of the merged heads before
    ``W_O`` (a forward pre-hook on ``attn.out``): exactly removing it from the concatenation.
    """
    model.eval()
    L = len(model.blocks)
    H = model.blocks[0].attn.n_heads
    Dh = model.blocks[0].attn.head_dim
    result = torch.zeros(L, H, y.shape[-1])
    for layer, block in enumerate(model.blocks):
        for head in range(H):

            def zero_head(module, args, head=head):
                merged = args[0].clone()  # (B, T, D): the heads side by side
                merged[..., head * Dh : (head + 1) * Dh] = 0
                return (merged,)

            handle = block.attn.out.register_forward_pre_hook(zero_head)
            try:
                result[layer, head] = accuracy(model, x, y)
            finally:
                handle.remove()
    return result


# ----------------------------------------------------------------------------- cost


def mha_flops(B: int, T: int, D: int, H: int) -> dict[str, int]:
    """FLOPs (2 per multiply-add) of the four matmuls of self attention on x (B, T, D).

    The head count cancels: H heads of width D/H cost what one head of width D costs.
    """
    Dh = D // H
    return {
        "1. QKV projection  x W_qkv": 2 * B * T * D * 3 * D,
        "2. scores  Q K^T (all H heads)": 2 * B * H * T * T * Dh,
        "3. weighted sum  A V (all H heads)": 2 * B * H * T * T * Dh,
        "4. output projection  Y W_O": 2 * B * T * D * D,
    }


def score_entries(B: int, T: int, H: int) -> int:
    """Entries of the attention scores (B, H, T, T): what the scaling, the mask and the softmax
    touch. Unlike the matmul FLOPs, this grows linearly with H."""
    return B * H * T * T


def head_weights(mha: nn.Module) -> tuple[list[Tensor], list[Tensor], list[Tensor], Tensor]:
    """A fused layer's weights as per-head matrices for a loop over heads (math convention
    ``q = x @ W``): ``(W_q, W_k, W_v, W_o)`` with ``W_q[h]`` (D, Dh) and ``W_o`` (D, D).

    ``mha`` has ``qkv`` = Linear(D, 3D) (weight rows [W_q; W_k; W_v]) and ``out`` = Linear(D, D);
    head h owns rows ``h*Dh:(h+1)*Dh`` of each block. Biases are not included.
    """
    D, H = mha.out.weight.shape[0], mha.n_heads
    Dh = D // H
    blocks = mha.qkv.weight.detach().split(D)  # W_q, W_k, W_v as (D_out, D_in)
    W_q, W_k, W_v = ([w[h * Dh : (h + 1) * Dh].T for h in range(H)] for w in blocks)
    return W_q, W_k, W_v, mha.out.weight.detach().T


def batched_heads(x: Tensor, qkv_weight: Tensor, out_weight: Tensor, n_heads: int) -> Tensor:
    """Multi-head self attention, all heads at once, with exactly the operations of the loop
    of 06.1 (no biases, ``torch.softmax``, no mask): x (B, T, D) -> (B, T, D).

    ``qkv_weight`` (3D, D) and ``out_weight`` (D, D) in ``nn.Linear``'s layout (a fused layer's
    ``qkv.weight`` and ``out.weight``), so it computes what ``multi_head_loop`` computes on
    ``head_weights`` of the same layer (with the layer's biases at zero).
    """
    B, T, D = x.shape
    Dh = D // n_heads
    q, k, v = (
        t.reshape(B, T, n_heads, Dh).transpose(1, 2)  # (B, H, T, Dh)
        for t in F.linear(x, qkv_weight).chunk(3, dim=-1)
    )
    weights = torch.softmax(q @ k.transpose(-2, -1) / Dh**0.5, dim=-1)  # (B, H, T, T)
    return F.linear((weights @ v).transpose(1, 2).reshape(B, T, D), out_weight)


def mha_params(D: int) -> dict[str, int]:
    """Parameters of multi-head attention of width D (with biases): 4 D^2 + 4 D."""
    return {"W_qkv (3D x D) + bias": 3 * D * D + 3 * D, "W_O (D x D) + bias": D * D + D}


# ----------------------------------------------------------------------------- the picture


def _draw_grid(
    ax, labels: list[list[str]], colours: list[list[int]], x0: float, y0: float, title: str, palette
) -> None:
    rows, cols = len(labels), len(labels[0])
    for r in range(rows):
        for c in range(cols):
            ax.add_patch(
                Rectangle(
                    (x0 + c, y0 - r - 1),
                    1,
                    1,
                    facecolor=palette(colours[r][c]),
                    edgecolor="black",
                    linewidth=0.8,
                )
            )
            ax.text(x0 + c + 0.5, y0 - r - 0.5, labels[r][c], ha="center", va="center", fontsize=8)
    ax.text(x0, y0 + 0.3, title, fontsize=9, va="bottom")


def draw_split_heads(T: int = 3, D: int = 6, H: int = 2):
    """A figure of ``split_heads`` on one sequence x (T, D): every cell is labelled
    ``token,feature`` and coloured by the head that owns its feature.

    Left: x (T, D). Middle: ``x.reshape(T, H, Dh).transpose(0, 1)`` (H, T, Dh), the right
    split: each head gets every token and its own ``Dh`` features. Right: a plain
    ``x.reshape(H, T, Dh)``, the classic mistake: a "head" then mixes different tokens.
    """
    import matplotlib.pyplot as plt

    if D % H:
        raise ValueError(f"expected D divisible by H, got D={D}, H={H}")
    Dh = D // H
    palette = plt.get_cmap("Pastel1")
    x = [[(t, d) for d in range(D)] for t in range(T)]
    flat = [cell for row in x for cell in row]
    right = [[[x[t][h * Dh + j] for j in range(Dh)] for t in range(T)] for h in range(H)]
    wrong = [[[flat[(h * T + t) * Dh + j] for j in range(Dh)] for t in range(T)] for h in range(H)]

    fig, ax = plt.subplots(figsize=(10, 0.55 * (H * (T + 1.2) + 2.5)), constrained_layout=True)
    height = H * (T + 1.2)

    def lab(cells):
        return [[f"{t},{d}" for t, d in row] for row in cells]

    def col(cells):
        return [[d // Dh for _, d in row] for row in cells]

    _draw_grid(ax, lab(x), col(x), 0, height, "x: (T, D)", palette)
    xs = D + 2
    for h in range(H):
        y = height - h * (T + 1.2)
        _draw_grid(ax, lab(right[h]), col(right[h]), xs, y, f"head {h}: (T, Dh)", palette)
        _draw_grid(
            ax, lab(wrong[h]), col(wrong[h]), xs + Dh + 4, y, f'"head" {h}: (T, Dh)', palette
        )
    ax.text(xs, height + 1.2, "right: each head keeps all T tokens", fontsize=10, weight="bold")
    ax.text(
        xs + Dh + 4,
        height + 1.2,
        "wrong: a head mixes tokens",
        fontsize=10,
        weight="bold",
        color="firebrick",
    )
    ax.set_xlim(-0.5, xs + 2 * Dh + 5)
    ax.set_ylim(-0.5, height + 2)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(
        f"split_heads on one sequence, T={T}, D={D}, H={H} (cell = token,feature; "
        "colour = head that owns the feature)",
        fontsize=10,
    )
    return fig


def gpu_summary() -> str:
    """What this notebook runs in the ``gpu`` profile, in words, from the gpu row of its table
    (``course doctor`` prints it beside the estimate)."""

    s = SIZES.gpu
    return (
        f"multi-head lookup model ({s.steps} steps), head ablation, loop vs batched heads "
        f"up to H = {max(s.time_heads)} at d = {s.time_d_model}, n = {s.time_len}"
    )
