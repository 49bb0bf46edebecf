"""Checks for notebook 08 (a Transformer language model): 08.1 the GPT assembled from its parts,
08.2 sampling with temperature and top-k, 08.3 the learning-rate schedule (linear warmup, then
cosine decay), 08.4 AdamW's parameter groups, 08.5 one step of the training loop, 08.6 the
training FLOPs per token.

- ``GPTModel(config)`` is an ``nn.Module`` with the submodules of
  :class:`course_utils.modeling.models.GPT` (``tok_emb``, ``pos_emb``, ``blocks``, ``ln_f``, ``lm_head``)
  and ``forward(idx, targets=None) -> (logits, loss)``. The check builds it in float64, copies
  seeded weights into it by name (as ``GPT``'s ``state_dict`` would load), compares logits and
  loss with the course's GPT holding the same weights, and counts its distinct parameters (an
  untied LM head adds V * D of them).
- ``generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None)`` draws
  each token with ``torch.multinomial(probs, num_samples=1, generator=generator)``. The check
  records every probability vector passed to ``torch.multinomial`` (normalised, so unnormalised
  weights are fine) and compares, step by step, the distributions and then the tokens drawn with
  the same seeded generator as the reference: a wrong temperature or top-k shows up as a wrong
  distribution, deterministically.
- ``get_lr(step, max_lr, min_lr, warmup, steps) -> float`` is compared at every step of
  several schedules, a few steps past the end included.
- ``param_groups(model, weight_decay) -> list[dict]`` is judged parameter by parameter: the
  weight decay each trainable parameter gets, and how many times it appears.
- ``train_step(model, optimizer, x, y, lr, grad_clip) -> float`` runs three times on a float64
  GPT whose ``.grad`` holds a stale gradient, with AdamW's two groups; the parameters after the
  three steps and the returned losses are compared with the reference's.
- ``flops_per_token(config) -> float`` is a formula: the candidate runs under a guard that
  rejects creating big tensors.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor
from torch.overrides import TorchFunctionMode

from course_utils.checks._common import (
    WEIGHT_PREFIX,
    FormulaOnly,
    as_tensor,
    build_module,
    case_device,
    close,
    size,
)
from course_utils.checks.core import Case, Contract, Exercise, Mistake, Outputs, generator
from course_utils.lessons.nb08_gpt import LESSON
from course_utils.modeling.layers import TransformerBlock, pre_norm_stack
from course_utils.modeling.models.gpt import GPT, GPTConfig
from course_utils.runtime import devices
from course_utils.runtime.training import lr_schedule
from course_utils.runtime.training import param_groups as course_param_groups

NOTEBOOK = LESSON.filename

__all__ = [
    "GPTModel",
    "generate",
    "get_lr",
    "param_groups",
    "train_step",
    "flops_per_token",
    "MODEL_MISTAKES",
    "GENERATE_MISTAKES",
    "LR_MISTAKES",
    "GROUP_MISTAKES",
    "FLOPS_MISTAKES",
    "EXERCISES",
]

_CONFIG_KEYS = ("vocab_size", "block_size", "n_layers", "n_heads", "d_model")


# ============================================================================ building models


def _config(inputs: dict[str, Any]) -> GPTConfig:
    return GPTConfig(
        **{k: int(inputs[k]) for k in _CONFIG_KEYS},
        bias=bool(inputs.get("bias", True)),
        dropout=0.0,
    )


def _random_gpt_inputs(
    gen: torch.Generator, V: int, T: int, L: int, H: int, D: int, bias: bool = True
) -> dict[str, Any]:
    """Config ints plus seeded float64 weights for every parameter of ``GPT(...)``.

    Embeddings and LayerNorm shifts are large enough that leaving out the position embedding
    or the final LayerNorm changes the logits far beyond the tolerance."""
    cfg = GPTConfig(vocab_size=V, block_size=T, n_layers=L, n_heads=H, d_model=D, bias=bias)
    with torch.device("meta"):
        shapes = {n: tuple(p.shape) for n, p in GPT(cfg).named_parameters()}
    out: dict[str, Any] = dict(zip(_CONFIG_KEYS, (V, T, L, H, D), strict=True))
    out["bias"] = int(bias)
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


class _GenerateNotAllowed(GPT):
    """The check's GPT for 08.2: ``model.generate`` is what the exercise writes."""

    def generate(self, *args, **kwargs):  # noqa: D102
        raise RuntimeError(
            "generate should write the sampling loop itself (call model(idx_cond) for the "
            "logits), not call model.generate"
        )


def _build_gpt(inputs: dict[str, Any], cls: type[GPT] = GPT) -> GPT:
    """A float64 eval-mode GPT with the case's weights (under a forked RNG)."""
    cfg = _config(inputs)
    with torch.random.fork_rng(devices=[]):
        model = cls(cfg)
    model = model.double().to(case_device(inputs)).eval()
    with torch.no_grad():
        for key, value in inputs.items():
            if key.startswith(WEIGHT_PREFIX):
                model.get_parameter(key[len(WEIGHT_PREFIX) :]).copy_(value)
    return model


# ============================================================================ 08.1 the GPT

GPTModel = GPT  # the reference answer to 08.1: the course's verified model


def _model_cases(seed: int) -> list[Case]:
    g = generator(seed)
    H = size(g, 2, 3)
    D = H * size(g, 3, 4)  # 6 .. 12
    V = size(g, 13, 19)  # never equal to T or D
    T_max = size(g, 7, 10)
    B = size(g, 2, 3)
    base = _random_gpt_inputs(g, V, T_max, 2, H, D)
    no_bias = _random_gpt_inputs(g, V, T_max, 1, H, D, bias=False)

    def case(name: str, T: int, with_targets: bool = True, B: int = B, weights=base) -> Case:
        idx = torch.randint(0, V, (B, T + 1), generator=g)
        inputs = {**weights, "idx": idx[:, :-1]}
        if with_targets:
            inputs["targets"] = idx[:, 1:]  # the next token at every position
        return Case(name, inputs)

    return [
        case(f"T = {T_max - 3} < block_size = {T_max}, with targets", T_max - 3),
        case(f"T = block_size = {T_max}, with targets", T_max),
        case("without targets (loss is None)", T_max - 1, with_targets=False),
        case("one sequence of one token", 1, B=1),
        case(
            "config.bias = False (no biases in the blocks and LayerNorms)",
            T_max - 2,
            weights=no_bias,
        ),
    ]


def _model_call(candidate, case: Case) -> Outputs:
    i = case.inputs
    cfg = _config(i)
    model = build_module(candidate, (cfg,), {}, i, "GPTModel")
    extra = _zero_extra_parameters(model, i)
    if getattr(model, "config", None) is None:
        raise AttributeError(
            "GPTModel should keep its config as self.config (generate reads "
            "model.config.block_size)"
        )
    head = getattr(model, "lm_head", None)
    emb = getattr(model, "tok_emb", None)
    if isinstance(head, nn.Linear) and isinstance(emb, nn.Embedding):
        if head.weight is not emb.weight and head.weight.shape == emb.weight.shape:
            with torch.no_grad():  # as GPT's state_dict would load into an untied head
                head.weight.copy_(emb.weight)
    with torch.no_grad():
        out = model(i["idx"], i.get("targets"))
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise TypeError(
            f"GPTModel.forward should return a pair (logits, loss), got {type(out).__name__}"
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
    elif loss is not None:
        raise ValueError("without targets, forward should return (logits, None)")
    n = sum(p.numel() for p in model.parameters())  # a tied tensor counts once
    result["n_params"] = torch.tensor(n, dtype=torch.int64)
    result["extra parameters"] = torch.tensor(extra, dtype=torch.int64)
    return result


def _zero_extra_parameters(model: nn.Module, inputs: dict[str, Any]) -> int:
    """Zero the parameters that the course's GPT does not have for this config (and so got no
    weights from the case), and return how many numbers they hold: a bias the config turned
    off then changes no output, and the comparison says so instead of reporting noise. An
    untied LM head is left alone (the call copies the embedding into it)."""
    extra = 0
    with torch.no_grad():
        for name, param in model.named_parameters():
            if WEIGHT_PREFIX + name not in inputs and name != "lm_head.weight":
                param.zero_()
                extra += param.numel()
    return extra


_values = close()


_MODEL_COUNTS = ("n_params", "extra parameters")


def _model_compare(case: Case, got: Outputs, expected: Outputs) -> str | None:
    values = {k: v for k, v in expected.items() if k not in _MODEL_COUNTS}
    problem = _values(case, {k: v for k, v in got.items() if k not in _MODEL_COUNTS}, values)
    if problem is not None:
        return problem
    extra = int(got["extra parameters"]) - int(expected["extra parameters"])
    if extra > 0:
        bias = "True" if case.inputs.get("bias", True) else "False"
        return (
            f"case '{case.name}': the outputs agree, but your model has {extra:,} numbers in "
            f"parameters that the course's GPT does not have with this config (bias={bias})"
        )
    g, e = int(got["n_params"]), int(expected["n_params"])
    if g != e:
        return (
            f"case '{case.name}': the outputs agree, but your model has {g:,} distinct "
            f"parameters where the course's GPT has {e:,} ({g - e:+,})"
        )
    return None


def _model_variant(
    *,
    tie: bool = True,
    final_norm: bool = True,
    positions: str = "ok",
    causal: bool = True,
    loss: str = "ok",
    probs: bool = False,
    norm_first: bool = True,
    block_bias: bool | None = None,
    final_bias: bool | None = None,
):
    """A GPT assembly with one classic slip (the arguments say which). ``block_bias`` /
    ``final_bias``: the blocks' / final LayerNorm's bias setting regardless of the config."""

    class Variant(nn.Module):
        def __init__(self, config: GPTConfig):
            super().__init__()
            self.config = config
            D = config.d_model
            self.tok_emb = nn.Embedding(config.vocab_size, D)
            self.pos_emb = nn.Embedding(config.block_size, D)
            bias = config.bias if block_bias is None else block_bias
            self.blocks = pre_norm_stack(config.n_layers, D, config.n_heads, config.d_ff, bias=bias)
            if not norm_first:
                self.blocks = nn.ModuleList(
                    TransformerBlock(D, config.n_heads, config.d_ff, norm_first=False, bias=bias)
                    for _ in range(config.n_layers)
                )
            self.ln_f = nn.LayerNorm(D, bias=config.bias if final_bias is None else final_bias)
            self.lm_head = nn.Linear(D, config.vocab_size, bias=False)
            if tie:
                self.lm_head.weight = self.tok_emb.weight

        def forward(self, idx, targets=None):
            T = idx.shape[1]
            x = self.tok_emb(idx)
            if positions == "ok":
                x = x + self.pos_emb(torch.arange(T, device=idx.device))
            elif positions == "from 1":
                x = x + self.pos_emb(torch.arange(1, T + 1, device=idx.device))
            elif positions == "last rows":
                x = x + self.pos_emb.weight[-T:]
            for block in self.blocks:
                x = block(x, is_causal=causal)
            logits = self.lm_head(self.ln_f(x) if final_norm else x)
            if probs:
                logits = torch.softmax(logits, dim=-1)
            if targets is None:
                return logits, None
            return logits, _loss_variant(logits, idx, targets, loss)

    return Variant


def _loss_variant(logits: Tensor, idx: Tensor, targets: Tensor, loss: str) -> Tensor:
    V = logits.shape[-1]
    if loss == "inputs":
        return F.cross_entropy(logits.reshape(-1, V), idx.reshape(-1))
    if loss == "shifted again":
        return F.cross_entropy(logits[:, :-1].reshape(-1, V), targets[:, 1:].reshape(-1))
    if loss == "time dim":
        logp = torch.log_softmax(logits, dim=1)  # normalised over positions
        return -logp.gather(-1, targets[..., None]).mean()
    if loss == "sum":
        return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), reduction="sum")
    return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))


MODEL_MISTAKES = [
    Mistake(
        "missing position embeddings",
        "add the position embeddings of positions 0..T-1, one (T, D) table of rows, "
        "to the token embeddings (B, T, D): without them the model cannot tell positions "
        "apart (attention is permutation equivariant, notebook 04)",
        _model_variant(positions="none"),
    ),
    Mistake(
        "positions counted from 1",
        "positions are counted from 0: a sequence of T tokens uses rows 0 to T-1 of the "
        "position table",
        _model_variant(positions="from 1"),
    ),
    Mistake(
        "position rows sliced from the end of the table",
        "a sequence of T < block_size tokens uses the FIRST T rows of the position table "
        "(positions 0..T-1), not the last T",
        _model_variant(positions="last rows"),
    ),
    Mistake(
        "no final LayerNorm",
        "with pre-norm blocks the residual stream is never normalised inside the stack: "
        "normalise it with the final LayerNorm before the LM head",
        _model_variant(final_norm=False),
    ),
    Mistake(
        "blocks not causal (tokens see the future)",
        "every block must be causal (its forward has an argument for it): position t may only "
        "attend to positions <= t, or the model learns to copy the next token",
        _model_variant(causal=False),
    ),
    Mistake(
        "LM head not tied to the token embedding",
        "weight tying: make the head's weight the SAME tensor as the token embedding's "
        "(assign self.tok_emb.weight to self.lm_head.weight after creating both), so V*D "
        "parameters are learned once",
        _model_variant(tie=False),
    ),
    Mistake(
        "loss against idx: targets not shifted by one",
        "the target at position t is the NEXT token, targets[:, t] = idx[:, t + 1]: use the "
        "targets argument (already shifted), not idx",
        _model_variant(loss="inputs"),
    ),
    Mistake(
        "targets misaligned (shifted a second time)",
        "targets are already shifted (targets[:, t] is the token after idx[:, t]): compare "
        "logits[:, t] with targets[:, t], without slicing off a position",
        _model_variant(loss="shifted again"),
    ),
    Mistake(
        "cross-entropy over the wrong dim (softmax over positions)",
        "the distribution is over the vocabulary, the LAST dim of logits (B, T, V): flatten "
        "to (B*T, V) and (B*T,) for F.cross_entropy, or use log_softmax with dim=-1",
        _model_variant(loss="time dim"),
    ),
    Mistake(
        "loss summed instead of averaged",
        "report the MEAN cross-entropy over all B*T positions (F.cross_entropy's default "
        "reduction), so the loss does not grow with the batch",
        _model_variant(loss="sum"),
    ),
    Mistake(
        "post-norm blocks (the 2017 order) instead of pre-norm",
        "a GPT's blocks are pre-norm, GPT-2's order: each sublayer normalises its own input "
        "and the residual stream is left alone (hence the final LayerNorm). The block normalises "
        "the residual sum instead (post-norm, notebook 07's 2017 order) unless you ask for the "
        "pre-norm order when you create it",
        _model_variant(norm_first=False),
    ),
    Mistake(
        "final LayerNorm with a bias although config.bias is False",
        "config.bias=False means no bias vectors anywhere, the final LayerNorm included: "
        "nn.LayerNorm takes a bias argument; pass it the config's bias, as the blocks get it",
        _model_variant(final_bias=True),
    ),
    Mistake(
        "blocks built with biases although config.bias is False",
        "every block must follow config.bias (no biases in its linear layers and LayerNorms "
        "when it is False): pass the config's bias on to each TransformerBlock as a keyword, "
        "with dropout, activation and layer_norm_eps",
        _model_variant(block_bias=True),
    ),
    Mistake(
        "returned probabilities instead of logits",
        "return the raw scores of the LM head (B, T, V); F.cross_entropy applies "
        "log-softmax itself",
        _model_variant(probs=True),
    ),
]

MODEL = Exercise(
    id="08.1",
    title="a GPT assembled from its parts",
    points=4,
    notebook=NOTEBOOK,
    function="GPTModel",
    reference=GPTModel,
    make_cases=_model_cases,
    call=_model_call,
    mistakes=MODEL_MISTAKES,
    compare=_model_compare,
    hint=(
        "Compare your model's named_parameters() with the course GPT's on the same config: which "
        "names or shapes differ? Feed one short sequence: are the logits (B, T, V), and does "
        "position t's logit change when you edit token t + 1 (it must not)? Over which positions "
        "does the loss average?"
    ),
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
        case(f"top_k = {V + 3}, more than the {V} tokens (keep them all)", 2, 3, 1.0, V + 3),
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
    hint=(
        "Generate with top_k = 1: every new token must be the argmax, whatever the temperature. "
        "Which positions does the model see once the sequence is longer than block_size, and "
        "which position's logits do you sample from? Run twice with the same generator seed: the "
        "same tokens?"
    ),
)


# ============================================================================ 08.3 lr schedule


def get_lr(step: int, max_lr: float, min_lr: float, warmup: int, steps: int) -> float:
    """The reference answer to 08.3: :func:`course_utils.runtime.training.lr_schedule` (linear warmup
    to ``max_lr`` over ``warmup`` steps, then half a cosine down to ``min_lr`` at ``steps``,
    ``min_lr`` after that)."""
    return lr_schedule(step, lr=max_lr, steps=steps, warmup=warmup, min_lr=min_lr)


def _lr_cases(seed: int) -> list[Case]:
    g = generator(seed)

    def case(name: str, max_lr: float, min_lr: float, warmup: int, steps: int) -> Case:
        return Case(name, dict(max_lr=max_lr, min_lr=min_lr, warmup=warmup, steps=steps))

    warmup, steps = size(g, 4, 9), size(g, 30, 50)
    return [
        case(f"warmup {warmup}, {steps} steps, lr 1e-3 -> 1e-4", 1e-3, 1e-4, warmup, steps),
        case("nanoGPT's Shakespeare schedule (100 warmup, 5000 steps)", 1e-3, 1e-4, 100, 5000),
        case("no warmup (warmup = 0)", 6e-4, 6e-5, 0, size(g, 20, 40)),
        case("min_lr = 0", 3e-3, 0.0, size(g, 2, 5), size(g, 20, 40)),
    ]


def _lr_call(candidate, case: Case) -> Outputs:
    i = case.inputs
    values = []
    for step in range(i["steps"] + 3):  # three steps past the end: min_lr
        value = candidate(step, i["max_lr"], i["min_lr"], i["warmup"], i["steps"])
        if isinstance(value, Tensor):
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"get_lr should return a number, got {type(value).__name__}")
        values.append(float(value))
    return {"lr": torch.tensor(values, dtype=torch.float64)}


def _lr_compare(case: Case, got: Outputs, expected: Outputs) -> str | None:
    g, e = got["lr"], expected["lr"]
    bad = (~torch.isclose(g, e, rtol=1e-6, atol=1e-12)).nonzero()
    if len(bad) == 0:
        return None
    s = int(bad[0])
    i = case.inputs
    where = (
        "during the warmup"
        if s < i["warmup"]
        else ("after the last step" if s >= i["steps"] else "during the decay")
    )
    return (
        f"case '{case.name}': at step {s} ({where}) your learning rate is {float(g[s]):.6g}, "
        f"expected {float(e[s]):.6g}"
    )


def _lr_variant(
    *,
    warmup_from: str = "step + 1",
    decay_from_zero: bool = False,
    floor: bool = True,
    period: float = 1.0,
    clamp: bool = True,
    shape: str = "cosine",
    half: bool = True,
):
    def get_lr(step, max_lr, min_lr, warmup, steps):
        if step < warmup:
            return max_lr * (step + (1 if warmup_from == "step + 1" else 0)) / warmup
        low = min_lr if floor else 0.0
        if decay_from_zero:
            ratio = step / steps
        else:
            ratio = (step - warmup) / max(1, steps - warmup)
        if clamp:
            ratio = min(1.0, ratio)
        if shape == "linear":
            return max_lr + ratio * (low - max_lr)
        coeff = (0.5 if half else 1.0) * (1.0 + math.cos(math.pi * period * ratio))
        return low + coeff * (max_lr - low)

    return get_lr


LR_MISTAKES = [
    Mistake(
        "warmup starts at 0",
        "during the warmup the rate is max_lr * (step + 1) / warmup: step 0 already trains "
        "(with max_lr / warmup), and step warmup - 1 reaches max_lr",
        _lr_variant(warmup_from="step"),
    ),
    Mistake(
        "decay counted from step 0 instead of from the end of the warmup",
        "the cosine starts where the warmup ends: its progress is (step - warmup) / "
        "(steps - warmup), 0 at the first step after the warmup and 1 at the last",
        _lr_variant(decay_from_zero=True),
    ),
    Mistake(
        "decays to 0 instead of min_lr",
        "the cosine goes from max_lr down to min_lr, not to 0: min_lr + (its factor) * "
        "(max_lr - min_lr)",
        _lr_variant(floor=False),
    ),
    Mistake(
        "a full cosine period (the rate comes back up)",
        "use HALF a cosine period: the factor 0.5 * (1 + cos(pi * progress)) falls from 1 "
        "to 0 as the progress goes from 0 to 1",
        _lr_variant(period=2.0),
    ),
    Mistake(
        "no clamp after the last step",
        "after `steps` steps the rate stays at min_lr: cap the progress at 1 (past the end "
        "the cosine would rise again)",
        _lr_variant(clamp=False),
    ),
    Mistake(
        "cosine factor without the 1/2",
        "the factor is 0.5 * (1 + cos(pi * progress)), between 0 and 1: without the 0.5 the "
        "decay starts at twice max_lr",
        _lr_variant(half=False),
    ),
    Mistake(
        "linear decay instead of cosine",
        "nanoGPT decays with half a cosine (slow at first and at the end), not a straight "
        "line: 0.5 * (1 + cos(pi * progress))",
        _lr_variant(shape="linear"),
    ),
]

LR = Exercise(
    id="08.3",
    contract=Contract(returns=(float, int)),  # "Return a Python number"
    title="learning rate: linear warmup, then cosine decay",
    points=2,
    notebook=NOTEBOOK,
    function="get_lr",
    reference=get_lr,
    make_cases=_lr_cases,
    call=_lr_call,
    mistakes=LR_MISTAKES,
    compare=_lr_compare,
    hint=(
        "Print your rate at step 0, at warmup - 1, at warmup, halfway through the decay, at steps"
        " and beyond: does the warmup reach max_lr at its last step, and the decay start at "
        "max_lr and end at min_lr? Which step is the first of the cosine, and what comes after "
        "steps?"
    ),
)


# ============================================================================ 08.4 param groups


def param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """The reference answer to 08.4: :func:`course_utils.runtime.training.param_groups` (decay on
    every trainable tensor with two or more dimensions, none on the others)."""
    return course_param_groups(model, weight_decay)


class _TinyMixed(nn.Module):
    """Not a GPT: an embedding, a Linear with a bias, a LayerNorm, a frozen Linear, a scalar."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(7, 4)
        self.proj = nn.Linear(4, 5)
        self.norm = nn.LayerNorm(5)
        self.frozen = nn.Linear(5, 3)
        self.frozen.requires_grad_(False)
        self.temperature = nn.Parameter(torch.ones(()))


def _group_cases(seed: int) -> list[Case]:
    g = generator(seed)
    wd = [0.1, round(0.01 * size(g, 2, 9), 2), 0.05]
    return [
        Case(
            f"a 2-layer GPT with biases (tied head), weight_decay {wd[0]}",
            dict(model="gpt", bias=1, weight_decay=wd[0]),
        ),
        Case(
            f"a GPT without biases, weight_decay {wd[1]}",
            dict(model="gpt", bias=0, weight_decay=wd[1]),
        ),
        Case(
            f"another model, with a frozen layer and a scalar, weight_decay {wd[2]}",
            dict(model="mixed", bias=1, weight_decay=wd[2]),
        ),
    ]


def _group_model(inputs: dict[str, Any]) -> nn.Module:
    with torch.random.fork_rng(devices=[]):
        if inputs["model"] == "gpt":
            return GPT(
                vocab_size=11,
                block_size=6,
                n_layers=2,
                n_heads=2,
                d_model=8,
                bias=bool(inputs["bias"]),
            )
        return _TinyMixed()


def _group_call(candidate, case: Case) -> Outputs:
    model = _group_model(case.inputs)
    groups = candidate(model, case.inputs["weight_decay"])
    if isinstance(groups, dict) or not isinstance(groups, (list, tuple)):
        raise TypeError(f"param_groups should return a list of dicts, got {type(groups).__name__}")
    where = {id(p): k for k, p in enumerate(model.parameters())}
    decay = torch.full((len(where),), float("nan"), dtype=torch.float64)
    count = torch.zeros(len(where), dtype=torch.int64)
    for group in groups:
        if not isinstance(group, dict) or "params" not in group or "weight_decay" not in group:
            raise TypeError(
                "each group should be a dict with the keys 'params' (a list of parameters) "
                "and 'weight_decay' (a number)"
            )
        for p in group["params"]:
            k = where.get(id(p))
            if k is None:
                raise ValueError("a group holds a tensor that is not a parameter of the model")
            count[k] += 1
            decay[k] = float(group["weight_decay"])
    return {"weight_decay": decay, "count": count}


def _group_compare(case: Case, got: Outputs, expected: Outputs) -> str | None:
    model = _group_model(case.inputs)
    names = {id(p): n for n, p in model.named_parameters()}
    params = list(model.parameters())
    for k, p in enumerate(params):
        name = f"'{names[id(p)]}' {tuple(p.shape)}"
        gc, ec = int(got["count"][k]), int(expected["count"][k])
        if gc != ec:
            if ec == 0:
                return f"case '{case.name}': parameter {name} should be in no group, found {gc}x"
            return f"case '{case.name}': parameter {name} appears {gc} times, expected {ec}"
        gd, ed = float(got["weight_decay"][k]), float(expected["weight_decay"][k])
        if ec and not math.isclose(gd, ed, rel_tol=1e-9, abs_tol=1e-12):
            return f"case '{case.name}': parameter {name} gets weight decay {gd:g}, expected {ed:g}"
    return None


def _groups_variant(rule: str):
    def groups(model, weight_decay):
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        if rule == "all":
            return [{"params": [p for _, p in named], "weight_decay": weight_decay}]
        if rule == "none":
            return [{"params": [p for _, p in named], "weight_decay": 0.0}]
        if rule == "frozen":
            named = list(model.named_parameters())
        if rule == "twice":
            named = [
                (n, p) for n, p in model.named_parameters(remove_duplicate=False) if p.requires_grad
            ]
        if rule == "by name":
            test = lambda n, p: n.endswith("weight")  # noqa: E731
        elif rule == "no embeddings":
            test = lambda n, p: p.dim() >= 2 and "emb" not in n  # noqa: E731
        elif rule == "swapped":
            test = lambda n, p: p.dim() < 2  # noqa: E731
        else:
            test = lambda n, p: p.dim() >= 2  # noqa: E731
        return [
            {"params": [p for n, p in named if test(n, p)], "weight_decay": weight_decay},
            {"params": [p for n, p in named if not test(n, p)], "weight_decay": 0.0},
        ]

    return groups


GROUP_MISTAKES = [
    Mistake(
        "weight decay on every parameter",
        "decay only the tensors with two or more dimensions (weight matrices and "
        "embeddings); biases and LayerNorm scales and shifts get weight_decay 0",
        _groups_variant("all"),
    ),
    Mistake(
        "no weight decay at all",
        "the group of tensors with p.dim() >= 2 gets the weight_decay argument; only the "
        "other group gets 0",
        _groups_variant("none"),
    ),
    Mistake(
        "decay chosen by the name 'weight' (LayerNorm scales decayed)",
        "a LayerNorm's scale is also called 'weight' but is a vector: choose by the number "
        "of dimensions (p.dim() >= 2), not by the name",
        _groups_variant("by name"),
    ),
    Mistake(
        "embeddings left out of the decay",
        "nanoGPT's rule (and the course's) decays every tensor with two or more dimensions, "
        "the embeddings included: choose by p.dim(), not by the module",
        _groups_variant("no embeddings"),
    ),
    Mistake(
        "groups swapped (decay on biases and norms)",
        "weight decay belongs to the matrices (p.dim() >= 2); biases and LayerNorm "
        "parameters (1-D) get 0",
        _groups_variant("swapped"),
    ),
    Mistake(
        "tied weight listed twice",
        "model.parameters() (or named_parameters()) lists a tied tensor once; "
        "named_parameters(remove_duplicate=False) or the state_dict list the shared "
        "embedding / LM head twice, and AdamW refuses a parameter in two places",
        _groups_variant("twice"),
    ),
    Mistake(
        "frozen parameters included",
        "leave out parameters with requires_grad=False: the optimizer has nothing to do with them",
        _groups_variant("frozen"),
    ),
]

GROUPS = Exercise(
    id="08.4",
    title="AdamW parameter groups",
    points=2,
    notebook=NOTEBOOK,
    function="param_groups",
    reference=param_groups,
    make_cases=_group_cases,
    call=_group_call,
    mistakes=GROUP_MISTAKES,
    compare=_group_compare,
    hint=(
        "Print each parameter's name, shape and the group you put it in: which tensors are "
        "decayed (matrices) and which not (biases, LayerNorm weights)? Are frozen parameters left"
        " out, and is every trainable one in exactly one group?"
    ),
)


# ============================================================================ 08.5 one training step


def train_step(model: nn.Module, optimizer, x: Tensor, y: Tensor, lr: float, grad_clip: float):
    """The reference answer to 08.5: one step of nanoGPT's loop. Sets ``lr`` in every parameter
    group, computes the loss of ``model(x, y)``, clears the old gradients, backpropagates, clips
    the gradients' global norm to ``grad_clip`` and lets the optimizer step; returns the loss
    as a float."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    _, loss = model(x, y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    return loss.item()


_STEP_LRS = (3e-3, 2e-3, 1e-3)  # three calls, each with its own rate (a schedule's values)


def _step_cases(seed: int) -> list[Case]:
    g = generator(seed)
    cases = []
    for name, clip in (("gradients clipped (norm 0.05)", 0.05), ("clip never reached", 1e6)):
        B, T = size(g, 2, 4), 6
        x = torch.randint(0, 11, (3, B, T), generator=g)
        y = torch.randint(0, 11, (3, B, T), generator=g)
        cases.append(Case(f"{name}, three steps of batch {B}", dict(x=x, y=y, grad_clip=clip)))
    return cases


def _step_setup(inputs: dict[str, Any]):
    """A float64 GPT whose .grad already holds a stale gradient, and AdamW with two groups."""
    device = case_device(inputs)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(8)
        model = GPT(vocab_size=11, block_size=6, n_layers=2, n_heads=2, d_model=8)
        model = model.double().to(device)
        stale = sum((p - 0.5).pow(2).sum() for p in model.parameters())
        stale.backward()  # a gradient left over from elsewhere: a step must not use it
    optimizer = torch.optim.AdamW(
        course_param_groups(model, 0.1), lr=1e-2, betas=(0.9, 0.99), foreach=False
    )
    return model, optimizer


def _step_call(candidate, case: Case) -> Outputs:
    i = case.inputs
    model, optimizer = _step_setup(i)
    losses = []
    for k, lr in enumerate(_STEP_LRS):
        out = candidate(model, optimizer, i["x"][k], i["y"][k], lr, i["grad_clip"])
        if out is None:
            raise TypeError("train_step should return the step's loss (a float), got None")
        if isinstance(out, torch.Tensor) and (out.requires_grad or out.numel() != 1):
            raise TypeError(
                "train_step should return the step's loss as a Python float, got a tensor "
                f"of shape {tuple(out.shape)}{' attached to its graph' * out.requires_grad}: "
                "a loop that keeps the loss of every step would keep every step's graph too "
                "(memory grows each step); return the number, loss.item()"
            )
        losses.append(float(out))
    params = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    return {"parameters after 3 steps": params, "losses": torch.tensor(losses, dtype=torch.float64)}


def _step_variant(mistake: str):
    def step(model, optimizer, x, y, lr, grad_clip):
        groups = optimizer.param_groups
        for group in groups[:1] if mistake == "first group" else groups:
            if mistake != "no lr":
                group["lr"] = lr
        if mistake == "step first":
            optimizer.step()
        _, loss = model(x, y)
        if mistake not in ("no zero_grad", "zero after backward", "zero after step"):
            optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if mistake == "zero after backward":
            optimizer.zero_grad(set_to_none=True)
        if mistake == "clip per tensor":
            for p in model.parameters():
                torch.nn.utils.clip_grad_norm_([p], grad_clip)
        elif mistake == "clip by value":
            torch.nn.utils.clip_grad_value_(model.parameters(), grad_clip)
        elif mistake != "no clip":
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        if mistake != "step first":
            optimizer.step()
        if mistake == "zero after step":
            optimizer.zero_grad(set_to_none=True)
        return loss.item()

    return step


STEP_MISTAKES = [
    Mistake(
        "old gradients never cleared",
        "backward() adds to .grad: clear the gradients before each backward pass, or every "
        "step also follows the gradients of the steps before it",
        _step_variant("no zero_grad"),
    ),
    Mistake(
        "gradients cleared after backward",
        "the gradients are cleared before the backward pass: after it, clearing erases the "
        "gradient this step just computed",
        _step_variant("zero after backward"),
    ),
    Mistake(
        "gradients cleared after the optimizer step instead of before the backward pass",
        "in a loop that starts with empty gradients this trains the same, but a step must not "
        "depend on what .grad held before it: here the model arrives with a gradient from "
        "elsewhere (an evaluation or a gradient check that called backward, a step that "
        "raised before its clearing), and your first step adds it to this batch's gradient. "
        "Clear the gradients before the backward pass, so every step uses its batch alone",
        _step_variant("zero after step"),
    ),
    Mistake(
        "optimizer step before the backward pass",
        "the order is forward, loss, backward, clip, then the optimizer's step: stepping first "
        "uses the previous step's gradients",
        _step_variant("step first"),
    ),
    Mistake(
        "no gradient clipping",
        "clip the global norm of all gradients to grad_clip "
        "(torch.nn.utils.clip_grad_norm_) between backward and the optimizer step (clipping "
        "after the step changes nothing: the optimizer has already read the gradients)",
        _step_variant("no clip"),
    ),
    Mistake(
        "each tensor's gradient clipped on its own",
        "clip the norm of ALL gradients together (one call on all the parameters), so the "
        "direction of the update is kept; clipping tensor by tensor changes it",
        _step_variant("clip per tensor"),
    ),
    Mistake(
        "gradients clipped by value",
        "nanoGPT clips the global norm (clip_grad_norm_), not each component (clip_grad_value_)",
        _step_variant("clip by value"),
    ),
    Mistake(
        "learning rate never set",
        "write lr into every parameter group (group['lr'] = lr) before the step: the "
        "optimizer reads its rate from there",
        _step_variant("no lr"),
    ),
    Mistake(
        "learning rate set in the first group only",
        "AdamW has two groups (with and without weight decay): set the rate in every one",
        _step_variant("first group"),
    ),
]

STEP = Exercise(
    id="08.5",
    title="one step of the training loop",
    points=2,
    notebook=NOTEBOOK,
    function="train_step",
    reference=train_step,
    make_cases=_step_cases,
    call=_step_call,
    mistakes=STEP_MISTAKES,
    compare=close(),
    hint=(
        "Run two steps on the same batch and print the loss and one parameter's gradient norm "
        "after each: does the second step still see the first one's gradient? Print the "
        "optimizer's lr after your step: is it the one you were given? Is the gradient clipped "
        "before the update, and is the loss returned as a Python number?"
    ),
    contract=Contract(updates_weights=True, returns=(float, int)),  # the weights change
)


# ============================================================================ 08.6 FLOPs per token


def flops_per_token(config: GPTConfig) -> float:
    """The reference answer to 08.6: training FLOPs per token of ``GPT(config)`` at the full
    context, ``6 N + 12 L T D`` with ``N = config.param_count(non_embedding=True)`` (nanoGPT's
    ``estimate_mfu``, from the PaLM paper's appendix B)."""
    N = config.param_count(non_embedding=True)
    L, T, D = config.n_layers, config.block_size, config.d_model
    return float(6 * N + 12 * L * T * D)


def _flops_cases(seed: int) -> list[Case]:
    g = generator(seed)
    cases = []
    for i in range(2):
        while True:  # redraw until every known mistake gives its own count
            H = size(g, 2, 4)
            D = H * size(g, 3, 8)
            V, T, L = size(g, 20, 90), size(g, 5, 40), size(g, 2, 4)
            inputs = dict(zip(_CONFIG_KEYS, (V, T, L, H, D), strict=True), bias=i % 2)
            cfg = _config(inputs)
            counts = {flops_per_token(cfg)} | {m.impl(cfg) for m in FLOPS_MISTAKES}
            if len(counts) == len(FLOPS_MISTAKES) + 1:
                break
        cases.append(Case(f"random config #{i + 1} (V={V}, T={T}, L={L}, D={D})", inputs))
    for name, preset, bias in (
        ("nanoGPT's CPU model without biases", GPTConfig.preset("nanogpt-cpu"), 0),
        ("GPT-2 small", GPTConfig.preset("gpt2"), 1),
        ("GPT-3 175B", GPTConfig.preset("gpt3-175b"), 1),
    ):
        values = tuple(getattr(preset, k) for k in _CONFIG_KEYS)
        cases.append(Case(name, dict(zip(_CONFIG_KEYS, values, strict=True), bias=bias)))
    return cases


def _flops_call(candidate, case: Case) -> Outputs:
    cfg = _config(case.inputs)
    guard = FormulaOnly(
        lambda shape: (
            f"flops_per_token created a tensor of shape {shape}: exercise 08.5 asks for a "
            "formula in the config's numbers, not for building the model"
        )
    )
    with guard:
        value = candidate(cfg)
    if isinstance(value, Tensor):
        if value.numel() != 1:
            raise TypeError(
                f"flops_per_token should return one number, got shape {tuple(value.shape)}"
            )
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"flops_per_token should return a number, got {type(value).__name__}")
    return {"flops": torch.tensor(float(value), dtype=torch.float64)}


def _flops_compare(case: Case, got: Outputs, expected: Outputs) -> str | None:
    g, e = float(got["flops"]), float(expected["flops"])
    if math.isclose(g, e, rel_tol=1e-9):
        return None
    return f"case '{case.name}': your count is {g:.6g} FLOPs per token, expected {e:.6g}"


def _flops_variant(
    weights: float = 6, attention: float = 12, T_power: int = 1, positions: bool = False
):
    def flops(config):
        N = config.param_count(non_embedding=not positions)
        L, T, D = config.n_layers, config.block_size, config.d_model
        return float(weights * N + attention * L * T**T_power * D)

    return flops


FLOPS_MISTAKES = [
    Mistake(
        "forward pass only",
        "training runs the forward pass AND the backward pass, which costs about twice the "
        "forward (gradients for the activations and for the weights): 3 x the forward "
        "count, for the weights and for attention",
        _flops_variant(weights=2, attention=4),
    ),
    Mistake(
        "backward counted as one forward",
        "the backward pass computes two gradients per matrix product (of the input and of "
        "the weight), each as costly as the forward product: forward + backward = 3 x "
        "forward",
        _flops_variant(weights=4, attention=8),
    ),
    Mistake(
        "multiply-adds counted instead of FLOPs",
        "a multiply-add is 2 floating-point operations: a weight costs 2 FLOPs per token in "
        "the forward pass, not 1",
        _flops_variant(weights=3, attention=6),
    ),
    Mistake(
        "attention term left out",
        "the scores Q K^T and the weighted sum of the values use no weights, so 6N misses "
        "them: per layer and token, each is T * D multiply-adds in the forward pass",
        _flops_variant(attention=0),
    ),
    Mistake(
        "attention term counted for the forward pass only",
        "the attention products have a backward pass too, twice as costly as their forward, "
        "like every product: multiply the attention term by the same 3 as the weights",
        _flops_variant(attention=4),
    ),
    Mistake(
        "attention term halved (only one of its two products)",
        "attention does two products per layer, the scores Q K^T and the weighted sum of V, "
        "T * D multiply-adds each per token (count the full T, as nanoGPT does: the fused "
        "kernel's causal mask is not counted as a saving)",
        _flops_variant(attention=6),
    ),
    Mistake(
        "attention counted per sequence (T squared)",
        "per TOKEN, a query meets T keys: T * D multiply-adds per product; T^2 * D is the "
        "cost of a whole sequence",
        _flops_variant(T_power=2),
    ),
    Mistake(
        "position table counted in N",
        "a position embedding is looked up, not multiplied: N leaves it out (the config's "
        "parameter count has an option for that); the token table does count, it is the "
        "LM head's matrix",
        _flops_variant(positions=True),
    ),
]

FLOPS = Exercise(
    id="08.6",
    title="training FLOPs per token",
    points=2,
    notebook=NOTEBOOK,
    function="flops_per_token",
    reference=flops_per_token,
    make_cases=_flops_cases,
    call=_flops_call,
    mistakes=FLOPS_MISTAKES,
    compare=_flops_compare,
    hint=(
        "Count by hand for a one-layer model: how many multiply-adds does one weight cost per "
        "token in the forward pass, and how many FLOPs is a multiply-add? How much more does the "
        "backward pass cost? Which products in attention involve no weight at all, and how do "
        "they grow with T?"
    ),
)

EXERCISES = [MODEL, GENERATE, LR, GROUPS, STEP, FLOPS]
