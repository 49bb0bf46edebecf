"""Checks for notebook 08 (a Transformer language model): 08.1 the GPT forward pass and its
loss, 08.2 sampling with temperature and top-k, 08.3 the parameter count of a GPT.

08.1 and 08.2 are functions of a given model, :class:`course_utils.models.GPT`: the check
builds a small GPT in float64 with seeded weights (they travel as ``"w:<name>"`` case inputs)
and calls the student's function on it.

- ``gpt_forward(model, idx, targets=None) -> (logits, loss)`` must use the model's submodules
  (``tok_emb``, ``pos_emb``, ``blocks``, ``ln_f``, ``lm_head``): during the check, calling
  ``model(idx)`` itself raises.
- ``generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None)`` draws
  each token with ``torch.multinomial(probs, num_samples=1, generator=generator)``. The check
  records every probability vector passed to ``torch.multinomial`` (normalised, so unnormalised
  weights are fine) and compares, step by step, the distributions and then the tokens drawn with
  the same seeded generator as the reference: a wrong temperature or top-k shows up as a wrong
  distribution, deterministically.
- ``gpt_param_count(config) -> int`` is a formula: the candidate runs under a guard that
  rejects creating big tensors (building GPT-3 to count it would need 700 GB).
"""

from __future__ import annotations

import numbers
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.overrides import TorchFunctionMode

from course_utils import devices
from course_utils.checks._common import (
    WEIGHT_PREFIX,
    FormulaOnly,
    as_tensor,
    case_device,
    close,
    size,
)
from course_utils.checks.core import Case, Exercise, Mistake, Outputs, generator
from course_utils.models.gpt import GPT, GPTConfig

NOTEBOOK = "08_gpt.ipynb"

__all__ = [
    "gpt_forward",
    "generate",
    "gpt_param_count",
    "FORWARD_MISTAKES",
    "GENERATE_MISTAKES",
    "PARAM_MISTAKES",
    "EXERCISES",
]

_CONFIG_KEYS = ("vocab_size", "block_size", "n_layers", "n_heads", "d_model")


# ============================================================================ building models


def _random_gpt_inputs(
    gen: torch.Generator, V: int, T: int, L: int, H: int, D: int
) -> dict[str, Any]:
    """Config ints plus seeded float64 weights for every parameter of ``GPT(...)``.

    Embeddings and LayerNorm shifts are large enough that leaving out the position embedding
    or the final LayerNorm changes the logits far beyond the tolerance."""
    cfg = GPTConfig(vocab_size=V, block_size=T, n_layers=L, n_heads=H, d_model=D)
    with torch.device("meta"):
        shapes = {n: tuple(p.shape) for n, p in GPT(cfg).named_parameters()}
    out: dict[str, Any] = dict(zip(_CONFIG_KEYS, (V, T, L, H, D), strict=True))
    for name, shape in shapes.items():
        t = torch.randn(*shape, generator=gen, dtype=torch.float64)
        if name.endswith("emb.weight"):
            t = 0.7 * t
        elif len(shape) == 2:
            t = t / shape[-1] ** 0.5
        elif "norm" in name or name.startswith("ln_f"):
            t = (1.0 + 0.3 * t) if name.endswith("weight") else 0.3 * t
        else:
            t = 0.2 * t
        out[WEIGHT_PREFIX + name] = t
    return out


class _ForwardNotAllowed(GPT):
    """The check's GPT for 08.1: calling the model itself is what the exercise replaces."""

    def forward(self, *args, **kwargs):  # noqa: D102
        raise RuntimeError(
            "gpt_forward should compute the forward pass from the model's submodules "
            "(model.tok_emb, model.pos_emb, model.blocks, model.ln_f, model.lm_head), "
            "not by calling model(idx)"
        )


class _GenerateNotAllowed(GPT):
    """The check's GPT for 08.2: ``model.generate`` is what the exercise writes."""

    def generate(self, *args, **kwargs):  # noqa: D102
        raise RuntimeError(
            "generate should write the sampling loop itself (call model(idx_cond) for the "
            "logits), not call model.generate"
        )


def _build_gpt(inputs: dict[str, Any], cls: type[GPT] = GPT) -> GPT:
    """A float64 eval-mode GPT with the case's weights (under a forked RNG)."""
    cfg = GPTConfig(**{k: int(inputs[k]) for k in _CONFIG_KEYS}, dropout=0.0)
    with torch.random.fork_rng(devices=[]):
        model = cls(cfg)
    model = model.double().to(case_device(inputs)).eval()
    with torch.no_grad():
        for key, value in inputs.items():
            if key.startswith(WEIGHT_PREFIX):
                model.get_parameter(key[len(WEIGHT_PREFIX) :]).copy_(value)
    return model


# ============================================================================ 08.1 forward + loss


def gpt_forward(
    model: GPT, idx: Tensor, targets: Tensor | None = None
) -> tuple[Tensor, Tensor | None]:
    """The reference answer to 08.1: the course's own ``GPT.forward`` (token + position
    embedding -> causal blocks -> final LayerNorm -> LM head; mean next-token cross-entropy
    against ``targets``), called unbound so that the check's model may refuse ``model(idx)``."""
    return GPT.forward(model, idx, targets)


def _forward_cases(seed: int) -> list[Case]:
    g = generator(seed)
    H = size(g, 2, 3)
    D = H * size(g, 3, 4)  # 6 .. 12
    V = size(g, 13, 19)  # never equal to T or D
    T_max = size(g, 7, 10)
    B = size(g, 2, 3)
    base = _random_gpt_inputs(g, V, T_max, 2, H, D)

    def case(name: str, T: int, with_targets: bool = True, B: int = B) -> Case:
        idx = torch.randint(0, V, (B, T + 1), generator=g)
        inputs = {**base, "idx": idx[:, :-1]}
        if with_targets:
            inputs["targets"] = idx[:, 1:]  # the next token at every position
        return Case(name, inputs)

    return [
        case(f"T = {T_max - 3} < block_size = {T_max}, with targets", T_max - 3),
        case(f"T = block_size = {T_max}, with targets", T_max),
        case("without targets (loss is None)", T_max - 1, with_targets=False),
        case("one sequence of one token", 1, B=1),
    ]


def _forward_call(candidate, case: Case) -> Outputs:
    i = case.inputs
    model = _build_gpt(i, _ForwardNotAllowed)
    with torch.no_grad():
        out = candidate(model, i["idx"], i.get("targets"))
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise TypeError(
            f"gpt_forward should return a pair (logits, loss), got {type(out).__name__}"
        )
    logits, loss = out
    result = {"logits": as_tensor(logits, "logits")}
    if "targets" in i:
        loss = as_tensor(loss, "loss (with targets)")
        if loss.numel() != 1:
            raise ValueError(
                f"loss should be a scalar (the mean over all B*T positions), "
                f"got shape {tuple(loss.shape)}"
            )
        result["loss"] = loss.reshape(())
    else:
        if loss is not None:
            raise ValueError("without targets, gpt_forward should return (logits, None)")
    return result


def _fwd_variant(
    *,
    positions: bool = True,
    final_norm: bool = True,
    causal: bool = True,
    loss: str = "ok",
    probs: bool = False,
    pos_offset: int = 0,
):
    def forward(model, idx, targets=None):
        B, T = idx.shape
        x = model.tok_emb(idx)
        if positions:
            x = x + model.pos_emb(torch.arange(pos_offset, T + pos_offset))
        for block in model.blocks:
            x = block(x, is_causal=causal)
        logits = model.lm_head(model.ln_f(x) if final_norm else x)
        if probs:
            logits = torch.softmax(logits, dim=-1)
        if targets is None:
            return logits, None
        V = logits.shape[-1]
        if loss == "inputs":
            value = F.cross_entropy(logits.reshape(-1, V), idx.reshape(-1))
        elif loss == "shifted again":
            value = F.cross_entropy(logits[:, :-1].reshape(-1, V), targets[:, 1:].reshape(-1))
        elif loss == "time dim":
            logp = torch.log_softmax(logits, dim=1)  # normalised over positions
            value = -logp.gather(-1, targets[..., None]).mean()
        elif loss == "sum":
            value = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), reduction="sum")
        elif loss == "no log":
            p = torch.softmax(logits, dim=-1).gather(-1, targets[..., None])
            value = -p.mean()
        else:
            value = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
        return logits, value

    return forward


FORWARD_MISTAKES = [
    Mistake(
        "missing position embeddings",
        "add model.pos_emb(torch.arange(T)) (T, D) to the token embeddings (B, T, D): "
        "without it the model cannot tell positions apart (attention is permutation "
        "equivariant, notebook 04)",
        _fwd_variant(positions=False),
    ),
    Mistake(
        "no final LayerNorm",
        "with pre-norm blocks the residual stream is never normalised inside the stack: "
        "apply model.ln_f to x before model.lm_head",
        _fwd_variant(final_norm=False),
    ),
    Mistake(
        "blocks not causal (tokens see the future)",
        "call every block with is_causal=True: position t may only attend to positions "
        "<= t, or the model learns to copy the next token",
        _fwd_variant(causal=False),
    ),
    Mistake(
        "loss against idx: targets not shifted by one",
        "the target at position t is the NEXT token, targets[:, t] = idx[:, t + 1]: use the "
        "targets argument (already shifted), not idx",
        _fwd_variant(loss="inputs"),
    ),
    Mistake(
        "targets misaligned (shifted a second time)",
        "targets are already shifted (targets[:, t] is the token after idx[:, t]): compare "
        "logits[:, t] with targets[:, t], without slicing off a position",
        _fwd_variant(loss="shifted again"),
    ),
    Mistake(
        "cross-entropy over the wrong dim (softmax over positions)",
        "the distribution is over the vocabulary, the LAST dim of logits (B, T, V): use "
        "F.cross_entropy(logits.reshape(B * T, V), targets.reshape(B * T)), or log_softmax "
        "with dim=-1",
        _fwd_variant(loss="time dim"),
    ),
    Mistake(
        "loss summed instead of averaged",
        "report the MEAN cross-entropy over all B*T positions (F.cross_entropy's default "
        "reduction), so the loss does not grow with the batch",
        _fwd_variant(loss="sum"),
    ),
    Mistake(
        "probability instead of log-probability in the loss",
        "cross-entropy is -mean(log p(target)), not -mean(p(target)): use "
        "F.cross_entropy on the logits",
        _fwd_variant(loss="no log"),
    ),
    Mistake(
        "returned probabilities instead of logits",
        "return the raw scores model.lm_head(...) (B, T, V); F.cross_entropy applies "
        "log-softmax itself",
        _fwd_variant(probs=True),
    ),
    Mistake(
        "positions counted from 1",
        "positions are 0, 1, ..., T-1: torch.arange(T)",
        _fwd_variant(pos_offset=1),
    ),
]

FORWARD = Exercise(
    id="08.1",
    title="GPT forward pass and next-token loss",
    points=3,
    notebook=NOTEBOOK,
    function="gpt_forward",
    reference=gpt_forward,
    make_cases=_forward_cases,
    call=_forward_call,
    mistakes=FORWARD_MISTAKES,
    compare=close(),
    hint="x = tok_emb(idx) + pos_emb(arange(T)); x = block(x, is_causal=True) for each block; "
    "logits = lm_head(ln_f(x)); loss = F.cross_entropy(logits.reshape(B*T, V), "
    "targets.reshape(B*T))",
)


# ============================================================================ 08.2 generation


def generate(
    model: GPT,
    idx: Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """The reference answer to 08.2: the course's own ``GPT.generate`` without the KV cache
    (crop to ``block_size``, last position's logits / temperature, top-k, softmax, one
    ``torch.multinomial`` draw per row), called unbound so the check's model may refuse
    ``model.generate``: idx (B, T) -> (B, T + max_new_tokens)."""
    return GPT.generate(
        model, idx, max_new_tokens, temperature, top_k, use_cache=False, generator=generator
    )


def _generate_cases(seed: int) -> list[Case]:
    g = generator(seed)
    H = size(g, 2, 3)
    D = H * size(g, 3, 4)
    V = size(g, 11, 15)
    block = size(g, 6, 8)
    B = size(g, 2, 3)
    base = _random_gpt_inputs(g, V, block, 2, H, D)

    def case(name: str, T0: int, new: int, temperature: float, top_k: int | None) -> Case:
        return Case(
            name,
            {
                **base,
                "idx": torch.randint(0, V, (B, T0), generator=g),
                "max_new_tokens": new,
                "temperature": temperature,
                "top_k": top_k,
                "seed": int(torch.randint(0, 2**31 - 1, (1,), generator=g)),
            },
        )

    return [
        case("temperature 1, no top-k", 3, 4, 1.0, None),
        case("temperature 0.5 (sharper), no top-k", 3, 4, 0.5, None),
        case("temperature 2 (flatter), top_k = 3", 2, 4, 2.0, 3),
        case("temperature 0.7, top_k = 5", 3, 4, 0.7, 5),
        case(f"context grows past block_size = {block} (crop it)", block - 1, 4, 1.3, 4),
        case("top_k = 1 (always the most likely token)", 2, 3, 1.0, 1),
    ]


class _MultinomialRecorder(TorchFunctionMode):
    """Records the (normalised) probability rows of every ``torch.multinomial`` call."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[Tensor] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.multinomial, Tensor.multinomial):
            w = (args[0] if args else kwargs["input"]).detach().double()
            w = w.reshape(-1, w.shape[-1])
            self.rows.append(w / w.sum(dim=-1, keepdim=True))
        return func(*args, **kwargs)


def _generate_call(candidate, case: Case) -> Outputs:
    i = case.inputs
    model = _build_gpt(i, _GenerateNotAllowed)
    gen = devices.generator(int(i["seed"]), case_device(i))
    with _MultinomialRecorder() as rec, torch.no_grad():
        out = candidate(
            model,
            i["idx"],
            int(i["max_new_tokens"]),
            temperature=i["temperature"],
            top_k=i["top_k"],
            generator=gen,
        )
    out = as_tensor(out, "generate(...)")
    V = int(i["vocab_size"])
    probs = torch.cat(rec.rows) if rec.rows else torch.empty(0, V, dtype=torch.float64)
    return {"tokens": out, "probs": probs}


def _generate_compare(case: Case, got: Outputs, expected: Outputs) -> str | None:
    """Prompt kept, then step by step: the distribution sampled from, then the token drawn."""
    tok, exp_tok = got["tokens"], expected["tokens"]
    name = f"case '{case.name}'"
    if tuple(tok.shape) != tuple(exp_tok.shape):
        return (
            f"{name}: generate returned shape {tuple(tok.shape)}, expected "
            f"{tuple(exp_tok.shape)} (B, T + max_new_tokens): the prompt followed by the "
            "new tokens"
        )
    if tok.dtype != exp_tok.dtype:
        return f"{name}: tokens have dtype {tok.dtype}, expected {exp_tok.dtype} (token ids)"
    B, T0 = case.inputs["idx"].shape
    if not torch.equal(tok[:, :T0], exp_tok[:, :T0]):
        return f"{name}: the output should start with the prompt idx, unchanged"
    probs, exp_probs = got["probs"], expected["probs"]
    if exp_probs.shape[0] == 0:  # judging against a known mistake that never samples
        return None if torch.equal(tok, exp_tok) else f"{name}: the tokens differ"
    if probs.shape[0] == 0:
        return (
            f"{name}: generate never called torch.multinomial: sample each token with "
            "torch.multinomial(probs, num_samples=1, generator=generator)"
        )
    if probs.shape[-1] != exp_probs.shape[-1]:
        return (
            f"{name}: torch.multinomial got {probs.shape[-1]} probabilities per row, "
            f"expected {exp_probs.shape[-1]} (one per vocabulary entry, from the logits "
            "of the last position)"
        )
    for s in range(tok.shape[1] - T0):
        rows, exp_rows = probs[s * B : (s + 1) * B], exp_probs[s * B : (s + 1) * B]
        if rows.shape != exp_rows.shape or not torch.allclose(rows, exp_rows, rtol=1e-5, atol=1e-7):
            if rows.shape != exp_rows.shape:
                return (
                    f"{name}: new token {s + 1}: expected one torch.multinomial draw of B "
                    f"rows per new token, got {probs.shape[0]} rows in all for "
                    f"{exp_probs.shape[0]} expected"
                )
            err = (rows - exp_rows).abs().max().item()
            return (
                f"{name}: new token {s + 1}: the next-token probabilities you sampled from "
                f"differ from the expected ones (max error {err:.3g})"
            )
        if not torch.equal(tok[:, T0 + s], exp_tok[:, T0 + s]):
            return (
                f"{name}: new token {s + 1}: the probabilities agree but the token drawn "
                "differs: draw with torch.multinomial(probs, num_samples=1, "
                "generator=generator), one call per step for the whole batch, and append "
                "it to idx"
            )
    if probs.shape[0] != exp_probs.shape[0]:
        return (
            f"{name}: torch.multinomial was called for {probs.shape[0]} rows, expected "
            f"{exp_probs.shape[0]} (one draw per sequence per new token)"
        )
    return None


def _gen_variant(
    *,
    temp: str = "divide",
    topk: str = "ok",
    position: int = -1,
    greedy: bool = False,
    softmax_dim: int = -1,
):
    @torch.no_grad()
    def gen(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
        for _ in range(max_new_tokens):
            logits, _ = model(idx[:, -model.config.block_size :])
            logits = logits[:, position, :]
            if temp == "divide":
                logits = logits / temperature
            elif temp == "multiply":
                logits = logits * temperature
            if top_k is not None and topk != "ignored":
                k = top_k - 1 if topk == "k-1" else top_k
                kth = torch.topk(logits, max(k, 1), dim=-1).values[:, -1:]
                if topk == "k-1":
                    drop = logits <= kth if k < 1 else logits < kth
                else:
                    drop = logits < kth
                logits = logits.masked_fill(drop, 0.0 if topk == "zero" else float("-inf"))
            probs = torch.softmax(logits, dim=softmax_dim)
            if temp == "after softmax":
                probs = probs / temperature
            if greedy:
                nxt = probs.argmax(dim=-1, keepdim=True)
            else:
                nxt = torch.multinomial(probs, 1, generator=generator)
            idx = torch.cat([idx, nxt], dim=1)
        return idx

    return gen


GENERATE_MISTAKES = [
    Mistake(
        "temperature applied after the softmax (or not at all)",
        "divide the LOGITS by the temperature before the softmax: softmax(logits / T). "
        "Dividing the probabilities by T changes nothing once they are normalised",
        _gen_variant(temp="after softmax"),
    ),
    Mistake(
        "temperature multiplied instead of divided",
        "logits / temperature: T < 1 sharpens the distribution, T > 1 flattens it; "
        "multiplying does the opposite",
        _gen_variant(temp="multiply"),
    ),
    Mistake(
        "top-k keeps k - 1 tokens",
        "keep the k largest logits: mask only logits strictly below the k-th largest "
        "(torch.topk(logits, k).values[:, [-1]]), e.g. logits < kth, not logits <= kth",
        _gen_variant(topk="k-1"),
    ),
    Mistake(
        "top-k masks with 0 instead of -inf",
        "a logit of 0 still gets probability e^0 / Z > 0: set the dropped logits to "
        "float('-inf') so the softmax gives them exactly 0",
        _gen_variant(topk="zero"),
    ),
    Mistake(
        "top-k ignored",
        "when top_k is given, keep only the top_k largest logits of each "
        "row (the rest -inf) before the softmax",
        _gen_variant(topk="ignored"),
    ),
    Mistake(
        "sampled from the logits of the first position",
        "the next token is predicted by the LAST position: logits[:, -1, :] (B, V), not "
        "logits[:, 0, :]",
        _gen_variant(position=0),
    ),
    Mistake(
        "softmax over the batch instead of the vocabulary",
        "normalise each row over the vocabulary: F.softmax(logits, dim=-1)",
        _gen_variant(softmax_dim=0),
    ),
    Mistake(
        "greedy decoding (argmax) instead of sampling",
        "sample the next token with torch.multinomial(probs, num_samples=1, "
        "generator=generator); argmax always picks the same token",
        _gen_variant(greedy=True),
    ),
]

GENERATE = Exercise(
    id="08.2",
    title="generation with temperature and top-k",
    points=3,
    notebook=NOTEBOOK,
    function="generate",
    reference=generate,
    make_cases=_generate_cases,
    call=_generate_call,
    mistakes=GENERATE_MISTAKES,
    compare=_generate_compare,
    hint="each step: logits = model(idx[:, -block_size:])[0][:, -1, :] / temperature; mask all "
    "but the top_k largest with -inf; probs = softmax(logits, -1); "
    "torch.multinomial(probs, 1, generator=generator); torch.cat to idx",
)


# ============================================================================ 08.3 parameter count


def gpt_param_count(config: GPTConfig) -> int:
    """Parameters of ``GPT(config)`` from the formula (biases on, ``d_ff = 4 * d_model``, LM head
    tied to the token embedding): ``L (12 D^2 + 13 D) + V D + T D + 2 D``."""
    return config.param_count()


def _formula_only() -> FormulaOnly:
    return FormulaOnly(
        lambda shape: (
            f"gpt_param_count created a tensor of shape {shape}: exercise 08.3 asks "
            "for a formula in the config's numbers (plain arithmetic), not for building a model "
            "and counting its parameters (GPT-3's would need about 700 GB)"
        )
    )


def _param_cases(seed: int) -> list[Case]:
    g = generator(seed)
    cases = []
    for i in range(2):
        while True:  # redraw until every known mistake gives its own count (a clear diagnosis)
            H = size(g, 2, 4)
            D = H * size(g, 3, 8)
            V, T, L = size(g, 20, 90), size(g, 5, 40), size(g, 2, 4)
            cfg = GPTConfig(vocab_size=V, block_size=T, n_layers=L, n_heads=H, d_model=D)
            counts = {cfg.param_count()} | {m.impl(cfg) for m in PARAM_MISTAKES}
            if len(counts) == len(PARAM_MISTAKES) + 1:
                break
        cases.append(
            Case(
                f"random config #{i + 1} (V={V}, T={T}, L={L}, H={H}, D={D})",
                dict(zip(_CONFIG_KEYS, (V, T, L, H, D), strict=True)),
            )
        )
    cases.append(
        Case(
            "nanoGPT's CPU model (V=65, T=64, L=4, H=4, D=128)",
            dict(zip(_CONFIG_KEYS, (65, 64, 4, 4, 128), strict=True)),
        )
    )
    cases.append(
        Case(
            "GPT-2 small (V=50257, T=1024, L=12, H=12, D=768)",
            dict(zip(_CONFIG_KEYS, (50257, 1024, 12, 12, 768), strict=True)),
        )
    )
    cases.append(
        Case(
            "GPT-3 175B (V=50257, T=2048, L=96, H=96, D=12288)",
            dict(zip(_CONFIG_KEYS, (50257, 2048, 96, 96, 12288), strict=True)),
        )
    )
    return cases


def _as_count(value: Any) -> int:
    if isinstance(value, Tensor):
        if value.numel() != 1:
            raise TypeError(
                f"gpt_param_count should return one number, got a tensor of shape "
                f"{tuple(value.shape)}"
            )
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"gpt_param_count should return an int, got {type(value).__name__}")
    if isinstance(value, numbers.Integral):
        return int(value)
    if not float(value).is_integer():
        raise ValueError(
            f"gpt_param_count returned {value}, which is not a whole number: a "
            "parameter count is an integer (use // when you divide)"
        )
    return int(value)


def _param_call(candidate, case: Case) -> Outputs:
    cfg = GPTConfig(**{k: int(case.inputs[k]) for k in _CONFIG_KEYS})
    with _formula_only():
        value = candidate(cfg)
    return {"count": torch.tensor(_as_count(value), dtype=torch.int64)}


def _param_compare(case: Case, got: Outputs, expected: Outputs) -> str | None:
    g, e = int(got["count"]), int(expected["count"])
    if g == e:
        return None
    return (
        f"case '{case.name}': your formula gives {g:,} but the model has {e:,} parameters "
        f"({g - e:+,})"
    )


def _count(
    *,
    linear_bias: bool = True,
    ln: str = "all",
    pos: bool = True,
    head: int = 1,
    tok: bool = True,
    mlp_ratio: int = 4,
    w_o: bool = True,
    layers: bool = True,
    norms_per_block: int = 2,
):
    """A parameter-count formula with one classic slip (the arguments say which)."""

    def count(config: GPTConfig) -> int:
        V, T, L, D = config.vocab_size, config.block_size, config.n_layers, config.d_model
        F_, b = mlp_ratio * D, int(linear_bias)
        ln_block = {"all": 2 * D, "no final": 2 * D, "scale only": D, "none": 0}[ln]
        ln_final = 0 if ln == "no final" else ln_block
        attn = 3 * D * D + b * 3 * D + (D * D + b * D if w_o else 0)
        mlp = D * F_ + b * F_ + F_ * D + b * D
        per_layer = attn + mlp + norms_per_block * ln_block
        embeddings = (head if tok else head - 1) * V * D + (T * D if pos else 0)
        return (L if layers else 1) * per_layer + ln_final + embeddings

    return count


def _approximation(config: GPTConfig) -> int:
    return 12 * config.n_layers * config.d_model**2


PARAM_MISTAKES = [
    Mistake(
        "forgot the biases",
        "every nn.Linear in a block has a bias as long as its output: qkv 3D, out D, fc1 "
        "4D, fc2 D, so 9D per layer (the tied LM head has none)",
        _count(linear_bias=False),
    ),
    Mistake(
        "forgot the LayerNorm parameters",
        "each LayerNorm has a scale and a shift of D numbers each (2D), and there are "
        "2 per block plus the final one: (2L + 1) * 2D",
        _count(ln="none"),
    ),
    Mistake(
        "forgot the final LayerNorm",
        "after the last block, ln_f normalises x before the LM head: another 2D",
        _count(ln="no final"),
    ),
    Mistake(
        "LayerNorm counted with a scale only",
        "a LayerNorm has a learned scale gamma AND shift beta, D each",
        _count(ln="scale only"),
    ),
    Mistake(
        "one LayerNorm per block",
        "a pre-norm block has two LayerNorms, one before attention and one before the MLP",
        _count(norms_per_block=1),
    ),
    Mistake(
        "forgot the position embeddings",
        "the learned position embedding is a (block_size, D) table: T*D parameters (nanoGPT "
        "prints a 'non-embedding' count without it; here count everything)",
        _count(pos=False),
    ),
    Mistake(
        "tied LM head counted twice",
        "the LM head shares its (V, D) weight with the token embedding (weight tying): "
        "count V*D once",
        _count(head=2),
    ),
    Mistake(
        "forgot the token embedding / LM head matrix",
        "the token embedding (V, D), shared with the LM head, counts V*D once",
        _count(tok=False),
    ),
    Mistake(
        "MLP hidden width D instead of 4D",
        "the MLP goes D -> d_ff = 4D -> D: 8D^2 weights plus 4D + D biases per layer",
        _count(mlp_ratio=1),
    ),
    Mistake(
        "W_O not counted",
        "attention has four D x D matrices (W_Q, W_K, W_V in qkv, and W_O in out), each "
        "with a bias",
        _count(w_o=False),
    ),
    Mistake(
        "one block counted instead of n_layers",
        "multiply the per-block count by n_layers",
        _count(layers=False),
    ),
    Mistake(
        "only the 12 * n_layers * d_model^2 approximation",
        "12 L D^2 is the leading term (4D^2 attention + 8D^2 MLP per layer); the exercise "
        "asks for the exact count: add the biases, LayerNorms and both embeddings",
        _approximation,
    ),
]

PARAM_COUNT = Exercise(
    id="08.3",
    title="parameter count of a GPT from its config",
    points=2,
    notebook=NOTEBOOK,
    function="gpt_param_count",
    reference=gpt_param_count,
    make_cases=_param_cases,
    call=_param_call,
    mistakes=PARAM_MISTAKES,
    compare=_param_compare,
    hint="per block: attention 4D^2 + 4D, MLP 8D^2 + 5D, two LayerNorms 4D; then the token "
    "embedding V*D (shared with the LM head), the position embedding T*D and ln_f 2D. "
    "Print [(n, p.shape) for n, p in GPT(GPTConfig(vocab_size=7, block_size=5, n_layers=1, "
    "n_heads=2, d_model=4)).named_parameters()] to see every tensor.",
)

EXERCISES = [FORWARD, GENERATE, PARAM_COUNT]
