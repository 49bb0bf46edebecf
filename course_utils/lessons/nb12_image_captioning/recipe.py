"""Notebook 12 (image captioning with cross attention): sizes per profile, training and the
measurements.

    cfg = config()                                   # the active profile's recipe
    data = make_data(cfg)                            # digit scenes and their captions
    run = train_captioner(cfg, data)                 # or pooled=True: one image vector
    run.exact, run.per_word                          # greedy captions, novel-combination scenes
    run.exact_iid, run.per_word_iid                  # ... and in-distribution test scenes
    attention_on_named_digit(run.model, data.test)   # (share on the named digit, chance)
    beam_captions(run.model, data.test[:50].images, beam_size=4, alpha=0.6)
    early = at_checkpoint(run, cfg.early_step)       # train_captioner(..., checkpoints=(50,))
    caption_log_prob(early, images, captions)        # log P of each caption under a model

The two contenders (cross attention to every patch, and the pooled baseline whose memory is the
mean of the patch features) share the data, the sizes and the number of optimizer steps.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from course_utils.data.captions import (
    BOS,
    DIGIT_NAMES,
    EOS,
    PAD,
    CaptionData,
    CaptionSplit,
    Vocab,
    held_out_cell,
    make_caption_data,
)
from course_utils.modeling.decoding import beam_search
from course_utils.modeling.layers import record_attention
from course_utils.modeling.models.captioner import Captioner
from course_utils.modeling.module_state import eval_mode
from course_utils.runtime import devices
from course_utils.runtime.profiles import ProfileTable
from course_utils.runtime.training import History, train

__all__ = [
    "Sizes",
    "SIZES",
    "config",
    "make_data",
    "build_model",
    "caption_forward",
    "caption_loss",
    "greedy_captions",
    "caption_accuracy",
    "digit_name_accuracy",
    "Run",
    "train_captioner",
    "cross_attention",
    "attention_on_named_digit",
    "beam_captions",
    "captions_differ",
    "at_checkpoint",
    "caption_log_prob",
    "score_decoders",
]


@dataclass(frozen=True)
class Sizes:
    """Everything notebook 12 sizes by profile (one row of :data:`SIZES`)."""

    n_train: int
    n_test: int
    d_model: int
    n_heads: int
    enc_layers: int
    dec_layers: int
    d_ff: int
    batch_size: int
    steps: int
    lr: float
    warmup: int
    n_test_iid: int = 300  # in-distribution test scenes (the novel ones: n_test)
    canvas: int = 24  # 16: each 8x8 digit fills its cell (no random offset)
    patch: int = 4
    seed: int = 0
    early_step: int = 50  # the checkpoint section 6 decodes beside the trained model
    beam_scenes: int = 60  # test scenes per split that section 6 decodes


SIZES = ProfileTable(
    # ci: a smaller, easier picture than cpu's (16 x 16, each digit filling its 8 x 8 cell, 2 x 2
    # patches of 4 pixels per digit) so that 400 steps learn to read the digits; on cpu's 24 x 24
    # canvas with offsets, 200-600 steps name digits at chance (evidence-findings.md, CI-4)
    ci=Sizes(
        n_train=1000,
        n_test=150,
        d_model=48,
        n_heads=4,
        enc_layers=1,
        dec_layers=1,
        d_ff=96,
        batch_size=32,
        steps=400,
        lr=3e-3,
        warmup=20,
        n_test_iid=150,
        canvas=16,
        patch=4,
        beam_scenes=40,
    ),
    cpu=Sizes(
        n_train=3000,
        n_test=300,
        d_model=64,
        n_heads=4,
        enc_layers=2,
        dec_layers=2,
        d_ff=128,
        batch_size=32,
        steps=3000,
        lr=2e-3,
        warmup=50,
        patch=6,
    ),
    gpu=Sizes(
        n_train=20000,
        n_test=1000,
        d_model=128,
        n_heads=4,
        enc_layers=4,
        dec_layers=3,
        d_ff=256,
        batch_size=128,
        steps=4000,
        lr=1e-3,
        warmup=200,
        n_test_iid=1000,
        patch=6,
        early_step=200,  # the end of its warm-up (lr 1e-3): not measured on a GPU
        beam_scenes=200,
    ),
)


def config(profile: str | None = None) -> Sizes:
    """The recipe of the active profile (or of ``profile``: "ci", "cpu" or "gpu")."""
    return SIZES.for_profile(profile)


def make_data(cfg: Sizes | None = None) -> CaptionData:
    """The seeded captioning task at ``cfg``'s sizes (see :mod:`course_utils.data.captions`)."""
    c = cfg or config()
    return make_caption_data(
        c.n_train, c.n_test, n_test_iid=c.n_test_iid, canvas=c.canvas, patch=c.patch, seed=c.seed
    )


def build_model(cfg: Sizes, data: CaptionData, *, pooled: bool = False) -> Captioner:
    """A fresh :class:`Captioner` for ``data`` (``pooled``: the one-vector baseline)."""
    return Captioner(
        len(data.vocab),
        image_size=data.canvas,
        patch_size=data.patch,
        d_model=cfg.d_model,
        n_heads=cfg.n_heads,
        enc_layers=cfg.enc_layers,
        dec_layers=cfg.dec_layers,
        d_ff=cfg.d_ff,
        max_len=int(data.train.captions.shape[1]) + 2,
        pooled=pooled,
        pad_id=PAD,
        bos_id=BOS,
        eos_id=EOS,
    )


def caption_forward(
    model: Captioner, images: torch.Tensor, captions: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Teacher-forced pass: images (B, 1, H, W), captions (B, T) (words, EOS, PAD) ->
    (logits (B, T, V), mean cross-entropy over the non-PAD caption tokens).

    The decoder reads BOS + captions[:, :-1]; each block: causal self attention over the
    words, then cross attention whose queries are the words and whose keys and values are
    the patch features, then the MLP (pre-norm residuals).
    """
    memory = model.encode(images)  # (B, N, D)
    bos = torch.full_like(captions[:, :1], model.bos_id)
    x = model.embed(torch.cat([bos, captions[:, :-1]], dim=1))  # (B, T, D)
    for block in model.blocks:
        x = x + block.self_attn(block.norm1(x), is_causal=True)
        x = x + block.cross_attn(block.norm2(x), memory)
        x = x + block.mlp(block.norm3(x))
    logits = model.head(model.norm(x))  # (B, T, V)
    loss = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), captions.reshape(-1), ignore_index=model.pad_id
    )
    return logits, loss


ForwardFn = Callable[[Captioner, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def caption_loss(
    forward: ForwardFn = caption_forward,
) -> Callable[[nn.Module, object], torch.Tensor]:
    """A ``loss_fn(model, batch)`` for :func:`course_utils.runtime.training.train` from a
    ``forward(model, images, captions) -> (logits, loss)`` (the student's, once it passes)."""

    def loss_fn(model: nn.Module, batch: CaptionSplit) -> torch.Tensor:
        return forward(model, batch.images, batch.captions)[1]

    return loss_fn


@torch.no_grad()
def greedy_captions(
    model: Captioner, split: CaptionSplit, *, batch_size: int = 500
) -> torch.Tensor:
    """Greedy captions of every scene of ``split`` -> (N, T) on the CPU (T: the split's
    caption width; PAD after EOS)."""
    device = devices.model_device(model)
    T = int(split.captions.shape[1])
    out = []
    with eval_mode(model):
        for s in range(0, len(split), batch_size):
            tokens = model.greedy_decode(split.images[s : s + batch_size].to(device), T).cpu()
            out.append(F.pad(tokens, (0, T - tokens.shape[1]), value=PAD))
    return torch.cat(out)


def caption_accuracy(pred: torch.Tensor, captions: torch.Tensor) -> tuple[float, float]:
    """(exact-caption accuracy, per-word accuracy): pred and captions (N, T) with PAD after
    EOS; per-word accuracy counts the reference's words and its EOS, position by position."""
    real = captions != PAD
    right = (pred == captions) | ~real
    exact = right.all(dim=1).float().mean().item()
    per_word = ((pred == captions) & real).sum().item() / max(1, int(real.sum()))
    return exact, per_word


def digit_name_accuracy(pred: torch.Tensor, split: CaptionSplit) -> tuple[float, float]:
    """(accuracy on the digit names whose digit sits in its held-out cell, accuracy on the other
    digit names): pred (N, T) against ``split.captions`` (N, T), position by position; NaN for
    a group with no word. The k-th digit name of a caption names the k-th occupied cell."""
    names = torch.tensor(Vocab().encode(list(DIGIT_NAMES)))
    is_name = torch.isin(split.captions, names)  # (N, T)
    held = torch.zeros_like(is_name)
    for i in range(len(split)):
        cells = [c for c, d in enumerate(split.digits[i].tolist()) if d >= 0]
        flags = [held_out_cell(int(split.digits[i, c])) == c for c in cells]
        held[i, is_name[i].nonzero().flatten()] = torch.tensor(flags, dtype=torch.bool)
    right = (pred == split.captions).float()
    on_held = right[held].mean().item() if held.any() else float("nan")
    rest = is_name & ~held
    return on_held, right[rest].mean().item() if rest.any() else float("nan")


@dataclass
class Run:
    """One trained captioner and what was measured on it."""

    name: str
    model: Captioner
    history: History
    exact: float  # exact-caption accuracy of greedy decoding on the novel test scenes
    per_word: float  # per-word accuracy of the same
    train_time_s: float
    n_params: int
    exact_iid: float  # the same two on the in-distribution test scenes
    per_word_iid: float
    checkpoints: dict[int, dict[str, torch.Tensor]] = field(default_factory=dict)  # step -> weights

    def __repr__(self) -> str:
        return (
            f"Run({self.name!r}: in-distribution exact {self.exact_iid:.3f}, per word "
            f"{self.per_word_iid:.3f}; novel exact {self.exact:.3f}, per word "
            f"{self.per_word:.3f}; {self.train_time_s:.1f} s, {self.n_params:,} parameters)"
        )


def _batches(split: CaptionSplit, batch_size: int, seed: int):
    """Endless shuffled mini-batches of ``split``."""
    g = torch.Generator().manual_seed(seed)
    while True:
        perm = torch.randperm(len(split), generator=g)
        for s in range(0, len(split) - batch_size + 1, batch_size):
            yield split[perm[s : s + batch_size]]


def train_captioner(
    cfg: Sizes,
    data: CaptionData,
    *,
    pooled: bool = False,
    forward: ForwardFn = caption_forward,
    seed: int = 0,
    progress: bool | str = "auto",
    device: torch.device | str | None = None,
    checkpoints: tuple[int, ...] = (),
) -> Run:
    """Train a captioner for ``cfg.steps`` steps with ``forward``'s teacher-forced loss on
    ``device`` (default: the profile's) and measure greedy captions on ``data.test`` (novel
    combinations) and ``data.test_iid`` (in distribution). ``checkpoints``: steps (1-based) after
    which a copy of the weights is kept in ``Run.checkpoints`` (see :func:`at_checkpoint`)."""
    torch.manual_seed(seed)
    model = build_model(cfg, data, pooled=pooled)
    name = "pooled vector" if pooled else "cross attention"
    kept: dict[int, dict[str, torch.Tensor]] = {}

    def keep(step: int, model: nn.Module) -> None:
        if step + 1 in checkpoints:
            kept[step + 1] = copy.deepcopy(model.state_dict())

    t0 = time.perf_counter()
    history = train(
        model,
        _batches(data.train, cfg.batch_size, seed),
        steps=cfg.steps,
        lr=cfg.lr,
        warmup=cfg.warmup,
        loss_fn=caption_loss(forward),
        eval_at_end=False,
        seed=seed,
        progress=progress,
        desc=name,
        device=devices.resolve(device),
        on_step=keep if checkpoints else None,
    )
    seconds = time.perf_counter() - t0
    exact, per_word = caption_accuracy(greedy_captions(model, data.test), data.test.captions)
    iid = data.test_iid
    exact_iid, per_word_iid = caption_accuracy(greedy_captions(model, iid), iid.captions)
    n_params = sum(p.numel() for p in model.parameters())
    return Run(
        name, model, history, exact, per_word, seconds, n_params, exact_iid, per_word_iid, kept
    )


def at_checkpoint(run: Run, step: int) -> Captioner:
    """A copy of ``run``'s model with the weights it had after ``step`` steps (kept by
    :func:`train_captioner`'s ``checkpoints``), in eval mode."""
    if step not in run.checkpoints:
        raise KeyError(f"no checkpoint at step {step}; kept: {sorted(run.checkpoints)}")
    model = copy.deepcopy(run.model)
    model.load_state_dict(run.checkpoints[step])
    return model.eval()


@torch.no_grad()
def cross_attention(model: Captioner, images: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Cross-attention weights, averaged over heads and layers: images (B, 1, H, W), decoder
    input tokens (B, T) (BOS first) -> (B, T, N): row t is where the word predicted at t
    looked."""
    device = devices.model_device(model)
    with eval_mode(model), record_attention(*(b.cross_attn for b in model.blocks)) as maps:
        model(images.to(device), tokens.to(device))
    return torch.stack(maps).mean(dim=(0, 2))  # (L, B, H, T, N) -> (B, T, N)


def attention_on_named_digit(
    model: Captioner, split: CaptionSplit, *, batch_size: int = 250
) -> tuple[float, float]:
    """(mean share of the cross attention that falls on the named digit's patches, the share
    expected by chance): over every digit name of ``split``'s captions, teacher-forced; chance
    is the fraction of the image's patches that hold that digit's ink."""
    shares, chances = [], []
    for s in range(0, len(split), batch_size):
        part = split[s : s + batch_size]
        bos = torch.full_like(part.captions[:, :1], BOS)
        tokens = torch.cat([bos, part.captions[:, :-1]], dim=1)
        attn = cross_attention(model, part.images, tokens).cpu()  # (B, T, N)
        named = part.noun_patches  # (B, T, N)
        is_noun = named.any(dim=-1)  # (B, T)
        shares.append((attn * named).sum(-1)[is_noun])
        chances.append(named.float().mean(-1)[is_noun])
    return torch.cat(shares).mean().item(), torch.cat(chances).mean().item()


@torch.no_grad()
def beam_captions(
    model: Captioner,
    images: torch.Tensor,
    *,
    beam_size: int,
    alpha: float,
    search: Callable = beam_search,
) -> torch.Tensor:
    """Beam-search captions (N, T) (PAD after EOS, T = model.max_len - 2) with ``search``
    (signature of :func:`course_utils.modeling.decoding.beam_search`), one image at a time."""
    device = devices.model_device(model)
    T = model.max_len - 2
    out = torch.full((images.shape[0], T), PAD, dtype=torch.long)
    with eval_mode(model):
        for i in range(images.shape[0]):
            memory = model.encode(images[i : i + 1].to(device))  # (1, N, D)

            def log_probs(prefixes: torch.Tensor, memory=memory) -> torch.Tensor:
                prefixes = prefixes.to(device)
                mem = memory.expand(prefixes.shape[0], -1, -1)
                return model.decode(prefixes, mem)[:, -1].log_softmax(dim=-1)

            tokens, _ = search(log_probs, BOS, EOS, beam_size, T, alpha)
            tokens = torch.as_tensor(tokens).long().cpu()[:T]
            out[i, : len(tokens)] = tokens
    return out


@torch.no_grad()
def caption_log_prob(
    model: Captioner, images: torch.Tensor, captions: torch.Tensor
) -> torch.Tensor:
    """log P(caption | image) under ``model`` for each row: images (N, 1, H, W), captions (N, T)
    (words, EOS, PAD after it) -> (N,), the sum over the words and the EOS (PAD ignored)."""
    device = devices.model_device(model)
    images, captions = images.to(device), captions.to(device)
    bos = torch.full_like(captions[:, :1], BOS)
    with eval_mode(model):
        logp = model(images, torch.cat([bos, captions[:, :-1]], dim=1)).log_softmax(dim=-1)
    picked = logp.gather(-1, captions[..., None])[..., 0]  # (N, T)
    return picked.masked_fill(captions == PAD, 0.0).sum(dim=1).cpu()


def score_decoders(
    model: Captioner, part, *, search: Callable = beam_search
) -> dict[str, tuple[float, float, float, float, int]]:
    """Section 6's table for one model and one split ``part`` (images, captions): greedy
    decoding and beam search (beam 4, alpha 0 and 0.6, with ``search``), each as
    ``(exact, per word, mean length, mean log P under model, captions differing from greedy's)``,
    keyed ``"greedy"``, ``"beam 4, α = 0.0"``, ``"beam 4, α = 0.6"``."""
    rows = {"greedy": greedy_captions(model, part)}
    for alpha in (0.0, 0.6):
        rows[f"beam 4, α = {alpha}"] = beam_captions(
            model, part.images, beam_size=4, alpha=alpha, search=search
        )
    out = {}
    for name, pred in rows.items():
        pred = pred[:, : part.captions.shape[1]]
        exact, per_word = caption_accuracy(pred, part.captions)
        length = (pred != PAD).sum(1).float().mean().item()
        log_p = caption_log_prob(model, part.images, pred).mean().item()
        out[name] = (exact, per_word, length, log_p, captions_differ(pred, rows["greedy"]))
    return out


def captions_differ(a: torch.Tensor, b: torch.Tensor) -> int:
    """How many rows of two caption tensors (N, T) and (N, T') differ as token sequences (PAD
    after EOS, so a wider tensor's extra PAD columns do not count)."""
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"expected as many captions, got {a.shape[0]} and {b.shape[0]}")
    width = max(a.shape[1], b.shape[1])
    a = F.pad(a, (0, width - a.shape[1]), value=PAD)
    b = F.pad(b, (0, width - b.shape[1]), value=PAD)
    return int((a != b).any(dim=1).sum())


@torch.no_grad()
def caption_with_attention(
    model: Captioner, image: torch.Tensor, vocab
) -> tuple[list[str], torch.Tensor]:
    """Greedy caption of one image (1, H, W) and, for each generated word (EOS included), its
    cross-attention over the patches: (words, (T', N))."""
    device = devices.model_device(model)
    tokens = model.greedy_decode(image[None].to(device), model.max_len - 2)[0].cpu()
    tokens = tokens[tokens != PAD]
    inputs = torch.cat([torch.tensor([BOS]), tokens[:-1]])[None]
    attn = cross_attention(model, image[None], inputs)[0].cpu()  # (T', N)
    words = [vocab.itos[int(t)] for t in tokens]
    return words, attn


def show_caption_attention(
    image: torch.Tensor, words: list[str], attn: torch.Tensor, *, cols: int = 8, step=None
):
    """One panel per word: the image (1, H, W) with the word's cross attention over the patch
    grid drawn on it (Show, Attend and Tell's picture); ``step`` shows that word only."""
    import matplotlib.pyplot as plt

    H = image.shape[-1]
    g = int(round(attn.shape[-1] ** 0.5))
    idx = list(range(len(words))) if step is None else [int(step)]
    n_cols = min(cols, len(idx))
    n_rows = -(-len(idx) // n_cols)
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(1.9 * n_cols, 2.1 * n_rows), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for ax, t in zip(axes.flat, idx, strict=False):
        ax.imshow(image[0], cmap="gray_r", extent=(0, H, H, 0))
        ax.imshow(attn[t].reshape(g, g), cmap="magma", alpha=0.55, extent=(0, H, H, 0))
        ax.set_title(f"{t + 1}: {words[t]}", fontsize=9)
    fig.suptitle("cross attention of each generated word over the image patches")
    fig.tight_layout()
    return fig


def gpu_summary() -> str:
    """What this notebook runs in the ``gpu`` profile, in words, from the gpu row of its table
    (``course doctor`` prints it beside the estimate)."""

    s = SIZES.gpu
    return (
        f"captioners (cross attention and pooled vector) on {s.n_train:,} digit scenes, "
        f"{s.steps} steps each"
    )
