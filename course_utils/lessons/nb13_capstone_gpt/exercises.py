"""Notebook 13's checks (``13.1`` ... ``13.6``): one ``make_model(vocab_size, block_size)``,
graded by what the model does, never by how it is written.

Every check builds the student's model from a seed the grader draws, runs it on inputs the
grader chooses and returns plain tensors (logits, counts, a loss, sampled ids); the verdict
is a property of those tensors, computed on the trusted side:

- ``13.1`` interface and budget: an ``nn.Module``; ``(B, T)`` ids -> ``(B, T, vocab_size)``
  finite logits for ``T = block_size`` and shorter; at most the profile's parameters;
- ``13.2`` causality: changing the token at ``p`` leaves every logit before ``p`` exactly as it
  was, and changes logits after ``p`` (the prediction uses the past);
- ``13.3`` positions: shuffling the context before ``t`` (the token at ``t`` kept) changes the
  prediction at ``t`` (a bag of tokens cannot tell the orders apart), and swapping two
  neighbours late in the context moves it about as much as swapping two early ones (a model
  with no position encoding knows order only by counting, which fades like 1 / position);
- ``13.4`` it learns: the course's loop (notebook 08's recipe of the profile) trains it on the
  corpus; its validation loss must come within :data:`~.recipe.BAR_MARGIN` of the course's own
  GPT trained the same way on the same text. Only a causal model within the budget is trained
  (13.2's leak test and 13.1's count run first): a model that sees the token it must predict
  copies it, and a bigger one buys its loss with parameters; either loss means nothing;
- ``13.5`` it generates: the course's sampler (context cropped to ``block_size``) writes
  ``block_size + 8`` new tokens, all valid ids;
- ``13.6`` written by you: every weight the forward uses is registered (the optimizer sees it).

All six forbid the library's and the course's finished pieces (:data:`FORBIDS` and the
reference's classes): a model built from ``nn.TransformerEncoderLayer``,
``nn.MultiheadAttention``, ``F.scaled_dot_product_attention`` or ``course_utils``'s GPT,
blocks or attention earns nothing. (Issue 33 asks for the checks developer's table of
forbidden ops by concept; until it lands, these are the exercise's own ``forbids``.)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from course_utils.checks.core import Case, Exercise, Mistake, Outputs, generator
from course_utils.lessons.nb13_capstone_gpt import LESSON
from course_utils.lessons.nb13_capstone_gpt import recipe as rc
from course_utils.modeling import attention as course_attention
from course_utils.modeling import layers as course_layers
from course_utils.modeling.models.gpt import GPT

NOTEBOOK = LESSON.filename
MEASURED = " (measured: "  # where a problem's own numbers begin (see _verdict)
TOL = 1e-5  # relative to the largest logit: float32 rounding is ~1e-7, a real effect far more

# The finished pieces a capstone may not call: the library's Transformer and attention
FORBIDS = (
    "torch.nn.functional.scaled_dot_product_attention",
    "torch.nn.functional.multi_head_attention_forward",
    "aten::scaled_dot_product_attention",
    "aten::_scaled_dot_product_attention_math",
    "aten::_scaled_dot_product_flash_attention_for_cpu",
    "aten::_scaled_dot_product_flash_attention",
    "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_cudnn_attention",
    "aten::_native_multi_head_attention",
    "aten::_transformer_encoder_layer_fwd",
)


class CourseMakeModel:
    """The reference ``make_model``: ``CourseMakeModel(vocab_size, block_size)`` returns the
    course's own GPT at notebook 08's size of the profile (ids (B, T) -> logits (B, T, V)).

    Its class attributes are the course's finished pieces: the checks' watch treats every one
    of their methods as "the course's implementation", so a capstone that runs any of them
    (GPT, its blocks, multi-head attention, the attention functions) is not accepted."""

    gpt = GPT
    block = course_layers.TransformerBlock
    decoder_block = course_layers.TransformerDecoderBlock
    multi_head = course_layers.MultiHeadAttention
    mlp = course_layers.MLP
    stack = staticmethod(course_layers.pre_norm_stack)
    attention = staticmethod(course_attention.scaled_dot_product_attention)
    fast_attention = staticmethod(course_attention.fast_attention)
    tiled_attention = staticmethod(course_attention.tiled_attention)

    def __new__(cls, vocab_size: int, block_size: int) -> nn.Module:  # type: ignore[misc]
        return rc.course_model(vocab_size, block_size)


# ============================================================================ shared helpers


def _sizes(gen: torch.Generator) -> dict[str, Any]:
    cap = rc.capstone()
    return {
        "vocab_size": int(torch.randint(20, 70, (1,), generator=gen)),
        "block_size": cap.block_size,
        "max_params": cap.max_params,
        "seed": int(torch.randint(0, 2**31 - 1, (1,), generator=gen)),
    }


def _build(candidate, inputs: dict[str, Any]) -> nn.Module:
    """The candidate's model, from the case's seed, in eval mode (no dropout)."""
    torch.manual_seed(int(inputs["seed"]))
    model = candidate(int(inputs["vocab_size"]), int(inputs["block_size"]))
    if not isinstance(model, nn.Module):
        raise TypeError(f"make_model returned a {type(model).__name__}, expected an nn.Module")
    return model.eval()


def _logits(model: nn.Module, ids: Tensor) -> Tensor:
    """model(ids) as float64 on the CPU, with a clear error when it is not a tensor; the ids go
    to the model's device first (the check runs on whatever device the model lives on)."""
    weights = next(iter(model.parameters()), None)
    out = model(ids.to(weights.device) if weights is not None else ids)
    if not isinstance(out, Tensor):
        raise TypeError(
            f"model(idx) returned a {type(out).__name__}; the brief asks for the logits "
            "tensor (B, T, vocab_size) alone (no loss, no tuple)"
        )
    return out.detach().double().cpu()


def _verdict(problems: Callable[[Case, Outputs], list[str]]):
    """A compare from a property list: ``problems(case, outputs)`` says what is wrong with
    one run. The candidate agrees with a run (the reference's, or a mistake's) when both have
    the same problems (a problem's text up to :data:`MEASURED`, where its own numbers begin,
    so a student's model is named by the mistake it shares); the message is the candidate's."""

    def compare(case: Case, got: Outputs, expected: Outputs) -> str | None:
        mine, theirs = problems(case, got), problems(case, expected)
        if [m.split(MEASURED)[0] for m in mine] == [t.split(MEASURED)[0] for t in theirs]:
            return None
        return f"case '{case.name}': " + "; ".join(mine or ["behaves unlike the reference"])

    return compare


def _mistake_model(kind: str) -> Callable[[int, int], nn.Module]:
    def make(vocab_size: int, block_size: int) -> nn.Module:
        return WrongGPT(vocab_size, block_size, kind)

    make.__name__ = f"make_model_{kind}"
    return make


# ============================================================================ the mistakes' model


class WrongGPT(nn.Module):
    """A small GPT with one deliberate flaw, the checks' catalogue of classic mistakes:
    ``"ok"`` (none), ``"off_by_one"`` (the mask lets position t see t + 1), ``"no_mask"``,
    ``"no_positions"``, ``"bag"`` (a running mean of the token embeddings), ``"bigram"``
    (only the current token), ``"wide"`` (over the budget), ``"last_only"`` (logits of the
    last position only), ``"extra_logit"`` (vocab_size + 1 outputs), ``"list"`` (layers in a
    Python list, unregistered), ``"constant"`` (ignores the ids). idx (B, T) -> (B, T, V)."""

    def __init__(self, vocab_size: int, block_size: int, kind: str = "ok") -> None:
        super().__init__()
        D = 256 if kind == "wide" else 32
        self.kind, self.H = kind, 4
        self.tok = nn.Embedding(vocab_size, D)
        self.pos = nn.Embedding(block_size, D)
        blocks = [nn.ModuleDict(_block_parts(D)) for _ in range(2)]
        self.blocks = blocks if kind == "list" else nn.ModuleList(blocks)
        self.ln = nn.LayerNorm(D)
        self.head = nn.Linear(D, vocab_size + (kind == "extra_logit"))

    def forward(self, idx: Tensor) -> Tensor:
        B, T = idx.shape
        x = self.tok(idx)
        if self.kind == "constant":
            x = torch.zeros_like(x)
        if self.kind not in ("no_positions", "bag"):
            x = x + self.pos(torch.arange(T, device=idx.device))
        if self.kind == "bag":
            x = x.cumsum(1) / torch.arange(1, T + 1, device=idx.device)[:, None]
        elif self.kind != "bigram":
            for b in self.blocks:
                x = x + self._attend(b, b["ln1"](x))
                x = x + b["mlp"](b["ln2"](x))
        out = self.head(self.ln(x))
        return out[:, -1] if self.kind == "last_only" else out

    def _attend(self, b: nn.ModuleDict, x: Tensor) -> Tensor:
        B, T, D = x.shape
        q, k, v = b["qkv"](x).view(B, T, 3, self.H, D // self.H).permute(2, 0, 3, 1, 4)
        s = q @ k.transpose(-2, -1) / math.sqrt(D // self.H)  # (B, H, T, T)
        shift = {"off_by_one": 1, "no_mask": T}.get(self.kind, 0)
        allowed = torch.ones(T, T, dtype=torch.bool, device=x.device).tril(shift)
        w = s.masked_fill(~allowed, float("-inf")).softmax(-1)
        return b["proj"]((w @ v).transpose(1, 2).reshape(B, T, D))


def _block_parts(D: int) -> dict[str, nn.Module]:
    return {
        "ln1": nn.LayerNorm(D),
        "qkv": nn.Linear(D, 3 * D),
        "proj": nn.Linear(D, D),
        "ln2": nn.LayerNorm(D),
        "mlp": nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D)),
    }


def _exercise(n: int, title: str, points: int, **kw) -> Exercise:
    return Exercise(
        id=f"13.{n}",
        title=title,
        points=points,
        notebook=NOTEBOOK,
        function="make_model",
        reference=CourseMakeModel,
        forbids=FORBIDS,
        **kw,
    )


# ============================================================================ 13.1 interface


def _interface_cases(seed: int) -> list[Case]:
    g = generator(seed)
    return [Case("make_model(vocab_size, block_size) on (B, T) ids", _sizes(g)) for _ in (0, 1)]


def _interface_call(candidate, case: Case) -> Outputs:
    i = case.inputs
    model = _build(candidate, i)
    V, T = int(i["vocab_size"]), int(i["block_size"])
    g = torch.Generator().manual_seed(int(i["seed"]))
    with torch.no_grad():
        full = _logits(model, torch.randint(0, V, (2, T), generator=g))
        short = _logits(model, torch.randint(0, V, (3, max(T // 2, 1)), generator=g))
    return {
        "n_params": torch.tensor(rc.count_params(model)),
        "full_shape": torch.tensor(list(full.shape)),
        "short_shape": torch.tensor(list(short.shape)),
        "finite": torch.tensor(bool(full.isfinite().all() and short.isfinite().all())),
    }


def _interface_problems(case: Case, out: Outputs) -> list[str]:
    V, T, cap = (int(case.inputs[k]) for k in ("vocab_size", "block_size", "max_params"))
    found = []
    for key, shape in (("full_shape", (2, T, V)), ("short_shape", (3, max(T // 2, 1), V))):
        got = tuple(int(s) for s in out[key].tolist())
        if got != shape:
            found.append(
                f"model(idx) with idx of shape {shape[:2]} returned shape {got}, expected "
                f"{shape} (B, T, vocab_size): one row of logits per position, for any T up to "
                "block_size. See it: print(model(idx).shape)"
            )
    if not bool(out["finite"]):
        found.append("the logits contain NaN or inf at initialisation")
    n = int(out["n_params"])
    if n > cap:
        found.append(
            f"{n:,} parameters, over this profile's budget of {cap:,}: make it narrower or "
            "shallower. See it: sum(p.numel() for p in model.parameters())"
        )
    return found


INTERFACE = _exercise(
    1,
    "the interface and the parameter budget",
    2,
    make_cases=_interface_cases,
    call=_interface_call,
    compare=_verdict(_interface_problems),
    mistakes=(
        Mistake(
            "over the parameter budget",
            "the model is too big for this profile: fewer layers or a smaller width",
            _mistake_model("wide"),
        ),
        Mistake(
            "logits of the last position only",
            "the language model predicts the next token at every position: return all T "
            "rows of logits, (B, T, vocab_size)",
            _mistake_model("last_only"),
        ),
        Mistake(
            "an output layer wider than vocab_size",
            "the last layer maps the width to exactly vocab_size scores, one per token",
            _mistake_model("extra_logit"),
        ),
    ),
)


# ============================================================================ 13.2 causality


def _variants(g: torch.Generator, base: Tensor, V: int, positions: list[int]) -> Tensor:
    """base (B, T) and, for each p, a copy with the token at p changed: (1 + P, B, T)."""
    out = [base]
    for p in positions:
        x = base.clone()
        x[:, p] = (x[:, p] + torch.randint(1, V, (x.shape[0],), generator=g)) % V
        out.append(x)
    return torch.stack(out)


def _causal_cases(seed: int) -> list[Case]:
    g = generator(seed)
    cases = []
    for name in ("random positions", "more random positions"):
        i = _sizes(g)
        V, T = i["vocab_size"], i["block_size"]
        positions = (torch.randperm(T - 2, generator=g)[:4] + 1).sort().values.tolist()
        base = torch.randint(0, V, (2, T), generator=g)
        cases.append(
            Case(name, {**i, "positions": positions, "ids": _variants(g, base, V, positions)})
        )
    return cases


def _many_logits(candidate, case: Case) -> Outputs:
    """The model's logits on every sequence of the case: ids (N, B, T) -> (N, B, T, V)."""
    model = _build(candidate, case.inputs)
    ids = case.inputs["ids"]
    with torch.no_grad():
        logits = _logits(model, ids.reshape(-1, ids.shape[-1]))
    return {"logits": logits.reshape(*ids.shape, -1).float()}


def _causal_problems(case: Case, out: Outputs) -> list[str]:
    L = out["logits"].double()
    if L.dim() != 4 or L.shape[-1] != case.inputs["vocab_size"]:
        return [f"logits of shape {tuple(L.shape[1:])} per batch: see check 13.1 first"]
    tol = TOL * float(L[0].abs().max()) + 1e-12
    found: dict[str, str] = {}
    for j, p in enumerate(case.inputs["positions"], start=1):
        d = (L[j] - L[0]).abs().amax(dim=(0, 2))  # (T,): the largest change at each position
        if d[p - 1] > tol:
            found.setdefault(
                "next",
                f"changing the token at position {p} changed the logits at position {p - 1} "
                f"(by {float(d[p - 1]):.2g}): position t sees token t + 1, the one it must "
                "predict. See it: compare model(x)[:, :p] for two x that differ only at p",
            )
        if p >= 2 and d[: p - 1].max() > tol:
            found.setdefault(
                "far",
                f"changing the token at position {p} changed the logits at positions before "
                f"{p - 1}: earlier positions see several future tokens (no causal mask?)",
            )
        if d[p + 1 :].max() <= tol:
            found.setdefault(
                "past",
                f"changing the token at position {p} changed no logit after it: the prediction "
                "ignores the earlier tokens (a constant or one-token model)",
            )
    return list(found.values())


CAUSAL = _exercise(
    2,
    "causality: no logit sees the future, and the past matters",
    3,
    make_cases=_causal_cases,
    call=_many_logits,
    compare=_verdict(_causal_problems),
    mistakes=(
        Mistake(
            "the causal mask off by one",
            "row t of the mask may allow keys 0..t and nothing after: check the diagonal",
            _mistake_model("off_by_one"),
        ),
        Mistake(
            "no causal mask",
            "every attention layer needs the causal mask before the softmax",
            _mistake_model("no_mask"),
        ),
        Mistake(
            "the prediction ignores earlier tokens",
            "the logits at t come from token t alone: the tokens before it must reach position t "
            "through attention",
            _mistake_model("bigram"),
        ),
    ),
)


# ============================================================================ 13.3 positions

# Position information that fades with distance from the start is what a causal model gets from
# its mask alone: with no position encoding, attention at every layer is a weighted average over
# a *set* of earlier states, and the only thing the mask adds is how many there are. Swapping the
# neighbours at i and i + 1 then changes one prefix's mix of tokens, by about 1 / (i + 1): the
# effect on a later prediction falls like 1 / i, at any depth and with any weights (a 2- or
# 4-layer position-less model measures ~0.15 at block 32, its 1 / i estimate 4 / 27). With
# positions (learned, sinusoidal, RoPE) a late swap moves it about as much as an early one
# (0.75-1.2 measured). A model passes when the late swap moves it at least this fraction of
# the early swap's effect:
FADE_MIN = 0.4
EARLY = 3  # the early swap: positions 3 and 4; the late one: T - 6 and T - 5; read at T - 1
N_SWAP_SEQUENCES = 8


def _swaps(g: torch.Generator, V: int, T: int) -> Tensor:
    """(3, B, T): random ids, the same with positions EARLY, EARLY + 1 swapped, and with
    T - 6, T - 5 swapped (each pair drawn distinct, so a swap always changes the sequence)."""
    base = torch.randint(0, V, (N_SWAP_SEQUENCES, T), generator=g)
    for i in (EARLY, T - 6):
        base[:, i + 1] = (base[:, i] + torch.randint(1, V, (len(base),), generator=g)) % V
    out = [base]
    for i in (EARLY, T - 6):
        swapped = base.clone()
        swapped[:, [i, i + 1]] = base[:, [i + 1, i]]
        out.append(swapped)
    return torch.stack(out)


def _position_cases(seed: int) -> list[Case]:
    g = generator(seed)
    i = _sizes(g)
    V, T = i["vocab_size"], i["block_size"]
    base = torch.randint(0, V, (2, T), generator=g)
    shuffled = base.clone()
    shuffled[:, : T - 1] = base[:, torch.randperm(T - 1, generator=g)]
    j = _sizes(g)
    return [
        Case(
            "shuffled context, last position",
            {**i, "t": T - 1, "ids": torch.stack([base, shuffled])},
        ),
        Case(
            "neighbours swapped near the start and near the end",
            {**j, "t": j["block_size"] - 1, "ids": _swaps(g, j["vocab_size"], j["block_size"])},
        ),
    ]


# torch layers whose reset_parameters is PyTorch's default initialisation (a student's own
# module may define a reset_parameters of its own: its matrices are drawn as bare parameters)
_STANDARD_LAYERS = (nn.Linear, nn.Embedding, nn.LayerNorm, nn.Conv1d, nn.Bilinear)
if hasattr(nn, "RMSNorm"):
    _STANDARD_LAYERS += (nn.RMSNorm,)


def _redraw(model: nn.Module, seed: int) -> nn.Module:
    """The same architecture with standard weights: every torch layer's ``reset_parameters``
    (PyTorch's default initialisation), then every other matrix (a bare ``nn.Parameter``)
    drawn N(0, 1 / its last dimension). A small initialisation (std 0.02, as nanoGPT) makes
    attention nearly uniform at step 0, which hides what a relative encoding such as RoPE
    adds; the architecture, not the first weights, is what 13.3 asks about."""
    torch.manual_seed(seed)
    covered = set()
    for module in model.modules():
        reset = getattr(module, "reset_parameters", None)
        if isinstance(module, _STANDARD_LAYERS) and callable(reset):
            reset()
            covered.update(id(p) for p in module.parameters(recurse=False))
    with torch.no_grad():
        for p in model.parameters():
            if id(p) not in covered and p.dim() >= 2:
                p.normal_(0.0, p.shape[-1] ** -0.5)
    return model


def _position_call(candidate, case: Case) -> Outputs:
    """The logits on every sequence of the case, with the model's own weights and, for the
    swap case, again with redrawn weights (:func:`_redraw`): (N, B, T, V) each."""
    out = _many_logits(candidate, case)
    if "neighbours" in case.name:
        model = _redraw(_build(candidate, case.inputs), int(case.inputs["seed"]))
        ids = case.inputs["ids"]
        with torch.no_grad():
            logits = _logits(model, ids.reshape(-1, ids.shape[-1]))
        out["redrawn"] = logits.reshape(*ids.shape, -1).float()
    return out


def _swap_effects(L: Tensor, t: int) -> tuple[float, float]:
    """The mean (over sequences) largest change of the logits at t: early swap, late swap."""
    early, late = ((L[k, :, t] - L[0, :, t]).abs().amax(-1).mean() for k in (1, 2))
    return float(early), float(late)


def _position_problems(case: Case, out: Outputs) -> list[str]:
    L = out["logits"].double()
    if L.dim() != 4 or L.shape[-1] != case.inputs["vocab_size"]:
        return [f"logits of shape {tuple(L.shape[1:])} per batch: see check 13.1 first"]
    t = int(case.inputs["t"])
    tol = TOL * float(L[0].abs().max()) + 1e-12
    if "neighbours" not in case.name:
        change = float((L[1, :, t] - L[0, :, t]).abs().max())
        if change <= tol:
            return [
                f"shuffling the {t} tokens before position {t} (the token at {t} kept) left the "
                f"prediction at {t} unchanged: the model sees a bag of tokens, not a sequence. "
                f"See it: model(x)[:, t] for x and a shuffled x{MEASURED}largest change "
                f"{change:.2g})"
            ]
        return []
    fades = []
    for key in ("logits", "redrawn"):
        early, late = _swap_effects(out[key].double(), t)
        if early <= tol:
            return []  # no order effect at all: the shuffle case says so
        fades.append(late / early)
    if max(fades) >= FADE_MIN:
        return []
    T = int(case.inputs["block_size"])
    return [
        f"swapping the neighbours at {T - 6} and {T - 5} moves the prediction at {t} far less "
        f"than swapping those at {EARLY} and {EARLY + 1}: the model knows the order only by "
        "counting how many tokens the causal mask lets it see, which fades like 1 / position. "
        "That is a model with no position information; add positions (notebook 04: learned, "
        "sinusoidal or rotary). See it: the change of model(x)[:, -1] when two neighbours swap, "
        f"early and late{MEASURED}late / early = {fades[0]:.2f} with your weights, "
        f"{fades[1]:.2f} with standard ones; a model with positions gives at least {FADE_MIN})"
    ]


POSITIONS = _exercise(
    3,
    "positions: the order of the context changes the prediction",
    2,
    make_cases=_position_cases,
    call=_position_call,
    compare=_verdict(_position_problems),
    mistakes=(
        Mistake(
            "a bag of tokens",
            "averaging the context forgets its order: attention with position information "
            "(notebook 04) lets each position weigh each earlier one differently",
            _mistake_model("bag"),
        ),
        Mistake(
            "no position information (the causal mask alone)",
            "token embeddings alone make every attention a weighted average over a set; a "
            "deep model can count how many tokens it sees, and nothing more: add a position "
            "embedding or rotate queries and keys by position (notebook 04)",
            _mistake_model("no_positions"),
        ),
    ),
)


# ============================================================================ 13.4 it learns


def _learn_cases(seed: int) -> list[Case]:
    cap = rc.capstone()
    return [
        Case(
            f"{cap.steps} steps of the course's loop on the corpus",
            {
                "seed": int(seed),
                "block_size": cap.block_size,
                "steps": cap.steps,
                "max_params": cap.max_params,
            },
        )
    ]


def _learn_call(candidate, case: Case) -> Outputs:
    """Trains the candidate only when it is causal (13.2's first case) and within the budget:
    otherwise its loss would mean nothing (it can copy the answer, or it bought its loss with
    parameters the brief does not allow) and the run is not spent."""
    i = case.inputs
    leak = _causal_cases(int(i["seed"]))[0]
    out = {
        "causal": _many_logits(candidate, leak)["logits"],
        "n_params": torch.tensor(0),
        "is_bar": torch.tensor(candidate is CourseMakeModel),  # the reference's run: the bar
    }
    nan = torch.tensor(float("nan"))
    untrained = {"init": nan, "val": nan, "vocab_size": torch.tensor(0), "seconds": nan}
    if _leaks(leak, out["causal"]):
        return {**out, **untrained}
    data = rc.load_dataset()
    torch.manual_seed(int(i["seed"]))
    model = candidate(data.vocab_size, int(i["block_size"]))
    if not isinstance(model, nn.Module):
        raise TypeError(f"make_model returned a {type(model).__name__}, not an nn.Module")
    out["n_params"] = torch.tensor(rc.count_params(model))
    if int(out["n_params"]) > int(i["max_params"]):
        return {**out, **untrained}
    if candidate is CourseMakeModel:  # the bar: trained once per process (trusted code)
        res = rc.course_run(int(i["seed"]), int(i["steps"]))
    else:
        res = rc.train_lm(model, data, seed=int(i["seed"]), steps=int(i["steps"]))
    return {
        **out,
        "init": torch.tensor(res.init),
        "val": torch.tensor(res.val),
        "vocab_size": torch.tensor(data.vocab_size),
        "seconds": torch.tensor(res.seconds),
    }


MISTAKE_MATCH = 0.1  # nats/char: a failing loss this close to a mistake's is named after it


def _leaks(case: Case, logits: Tensor) -> list[str]:
    """13.2's problems that are leaks of the future (not the 'ignores the past' one)."""
    problems = _causal_problems(case, {"logits": logits})
    return [p for p in problems if "ignores the earlier tokens" not in p]


def _learn_compare(case: Case, got: Outputs, expected: Outputs) -> str | None:
    leak_case = _causal_cases(int(case.inputs["seed"]))[0]
    leak = _leaks(leak_case, got["causal"])
    if leak:
        if _leaks(leak_case, expected["causal"]):
            return None  # a leaking mistake: the candidate agrees with it
        return (
            f"case '{case.name}': not trained: the model sees the future ({leak[0]}). A model "
            "that reads the token it must predict reaches a low validation loss by copying it, "
            "so 13.4 is awarded only to a causal model: fix check 13.2 first"
        )
    n, cap = int(got["n_params"]), int(case.inputs["max_params"])
    if n > cap:
        if int(expected["n_params"]) > cap:
            return None  # an over-budget mistake: the candidate agrees with it
        return (
            f"case '{case.name}': not trained: {n:,} parameters, over this profile's budget of "
            f"{cap:,} (check 13.1). More parameters buy a lower loss, so 13.4 trains only a "
            "model within the budget"
        )
    mine = float(got["val"])
    if not bool(expected["is_bar"]):  # a mistake's run: the candidate agrees when it is as bad
        theirs = float(expected["val"])
        return None if abs(mine - theirs) <= MISTAKE_MATCH else "a different loss"
    bar = float(expected["val"]) + rc.BAR_MARGIN
    if math.isfinite(mine) and mine <= bar:
        return None
    V = int(got["vocab_size"])
    return (
        f"case '{case.name}': your validation loss is {mine:.3f} nats/char; the bar is "
        f"{bar:.3f} (the course's GPT trained the same way reaches {float(expected['val']):.3f}, "
        f"plus {rc.BAR_MARGIN}). At initialisation it was {float(got['init']):.3f} "
        f"(a uniform guess: ln {V} = {math.log(V):.3f}). See it: recipe.train_lm(make_model(...), "
        "data) in the notebook, and its loss curve"
    )


LEARN = _exercise(
    4,
    "it learns: validation loss near the course's GPT",
    4,
    make_cases=_learn_cases,
    call=_learn_call,
    compare=_learn_compare,
    mistakes=(
        Mistake(
            "the model sees the future",
            "13.4 trains only a causal model: the causal mask must hide every later token "
            "(check 13.2 says where it leaks)",
            _mistake_model("off_by_one"),
        ),
        Mistake(
            "over the parameter budget",
            "13.4 trains only a model within the budget: make it narrower or shallower (check "
            "13.1 counts the parameters)",
            _mistake_model("wide"),
        ),
        Mistake(
            "a bag of tokens",
            "a loss in this range is what a model that averages its context reaches: it "
            "knows which characters came before, not in which order (see check 13.3)",
            _mistake_model("bag"),
        ),
        Mistake(
            "the ids are not used",
            "a loss in this range is what a model that ignores its input reaches (the "
            "character frequencies): the logits must be computed from the embedded ids",
            _mistake_model("constant"),
        ),
    ),
)


# ============================================================================ 13.5 it generates


def _generate_cases(seed: int) -> list[Case]:
    g = generator(seed)
    i = _sizes(g)
    V = i["vocab_size"]
    prompt = torch.randint(0, V, (2, 3), generator=g)
    prompt[1, -1] = (prompt[0, -1] + 1) % V  # two prompts that differ
    return [Case(f"{i['block_size'] + 8} new tokens from two prompts", {**i, "prompt": prompt})]


def _generate_call(candidate, case: Case) -> Outputs:
    i = case.inputs
    model = _build(candidate, i)
    T, new = int(i["block_size"]), int(i["block_size"]) + 8
    sampled = rc.sample(model, i["prompt"], new, T, temperature=1.0, seed=int(i["seed"]))
    with torch.no_grad():
        first = _logits(model, i["prompt"])[:, -1]  # (2, V): the first draw's scores
    return {"sampled": sampled, "first": first.float()}


def _generate_problems(case: Case, out: Outputs) -> list[str]:
    V, T = int(case.inputs["vocab_size"]), int(case.inputs["block_size"])
    prompt = case.inputs["prompt"]
    found = []
    s, first = out["sampled"], out["first"].double()
    want = (prompt.shape[0], prompt.shape[1] + T + 8)
    if tuple(s.shape) != want:
        return [f"the sampler returned {tuple(s.shape)}, expected {want}"]
    if int(s.min()) < 0 or int(s.max()) >= V:
        found.append(f"sampled id {int(s.max())} is not a token (vocab_size = {V})")
    if float((first[0] - first[1]).abs().max()) <= TOL * float(first.abs().max()) + 1e-12:
        found.append(
            "two different prompts give the same scores for the first new token: what "
            "the model writes ignores the prompt. See it: model(prompt)[:, -1] for two prompts"
        )
    return found


GENERATE = _exercise(
    5,
    "it generates with the course's sampler",
    1,
    make_cases=_generate_cases,
    call=_generate_call,
    compare=_verdict(_generate_problems),
    mistakes=(
        Mistake(
            "the ids are not used",
            "the logits must be computed from the embedded ids (and their positions)",
            _mistake_model("constant"),
        ),
    ),
)


# ============================================================================ 13.6 written by you


def _leaves(loss: Tensor) -> list[Tensor]:
    """The leaf tensors that ``loss``'s graph accumulates gradients into."""
    seen, stack, found = set(), [loss.grad_fn], []
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        if hasattr(fn, "variable"):
            found.append(fn.variable)
        stack.extend(nxt for nxt, _ in fn.next_functions)
    return found


def _own_cases(seed: int) -> list[Case]:
    return [Case("one training step's forward and backward", _sizes(generator(seed)))]


def _own_call(candidate, case: Case) -> Outputs:
    i = case.inputs
    model = _build(candidate, i).train()
    V, T = int(i["vocab_size"]), int(i["block_size"])
    g = torch.Generator().manual_seed(int(i["seed"]))
    x, y = torch.randint(0, V, (2, 2, T), generator=g)
    loss = F.cross_entropy(_grad_logits(model, x).reshape(-1, V), y.reshape(-1))
    registered = {id(p) for p in model.parameters()}
    leaves = _leaves(loss)
    return {
        "used": torch.tensor(sum(t.numel() for t in leaves if id(t) in registered)),
        "unregistered": torch.tensor(sum(t.numel() for t in leaves if id(t) not in registered)),
    }


def _grad_logits(model: nn.Module, x: Tensor) -> Tensor:
    out = model(x)
    if not isinstance(out, Tensor):
        raise TypeError(f"model(idx) returned a {type(out).__name__}, expected the logits")
    return out.float()


def _own_problems(case: Case, out: Outputs) -> list[str]:
    found = []
    if int(out["unregistered"]):
        found.append(
            f"the forward uses {int(out['unregistered']):,} weights that model.parameters() "
            "does not list (layers kept in a Python list or dict, or a bare tensor with "
            "requires_grad): the optimizer would never train them. See it: compare "
            "[n for n, _ in model.named_parameters()] with the layers you built"
        )
    if not int(out["used"]):
        found.append("no parameter of the model reaches the loss")
    return found


OWN = _exercise(
    6,
    "written by you: your own layers, all registered",
    2,
    make_cases=_own_cases,
    call=_own_call,
    compare=_verdict(_own_problems),
    mistakes=(
        Mistake(
            "layers in a plain Python list",
            "a Python list hides its layers from the module: nn.ModuleList registers them",
            _mistake_model("list"),
        ),
    ),
)

EXERCISES = [INTERFACE, CAUSAL, POSITIONS, LEARN, GENERATE, OWN]
