"""The notebook 08 checks (08.1 the GPT assembled from its parts, 08.2 generation with
temperature and top-k, 08.3 the warmup + cosine learning rate, 08.4 AdamW's parameter groups,
08.5 one training step, 08.6 training FLOPs per token) accept correct answers written differently, reject each classic
mistake with a hint naming it, and refuse shortcuts (calling the model's own generate, building
a model to count its FLOPs)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from course_utils.checks import ERROR, FAILED, NOT_ATTEMPTED, PASSED, get, get_question, run
from course_utils.checks.core import judge
from course_utils.lessons.nb08_gpt.exercises import (
    FLOPS_MISTAKES,
    GENERATE_MISTAKES,
    GROUP_MISTAKES,
    LR_MISTAKES,
    MODEL_MISTAKES,
    STEP_MISTAKES,
    _build_gpt,
    _flops_cases,
    _generate_cases,
    _model_cases,
    flops_per_token,
    generate,
    get_lr,
    param_groups,
)
from course_utils.modeling.layers import TransformerBlock
from course_utils.modeling.models.gpt import GPT, GPTConfig
from course_utils.runtime.training import lr_schedule

IDS = ["08.1", "08.2", "08.3", "08.4", "08.5", "08.6"]

# ----------------------------------------------------------------------------- references


@pytest.mark.parametrize("exercise_id", IDS)
def test_reference_passes_its_own_check(exercise_id):
    result = run(exercise_id, get(exercise_id).reference)
    assert result.status == PASSED, result.message


def test_exercises_are_registered_for_notebook_08_in_reading_order():
    names = {ex: get(ex).function for ex in IDS}
    assert names == {
        "08.1": "GPTModel",
        "08.2": "generate",
        "08.3": "get_lr",
        "08.4": "param_groups",
        "08.5": "train_step",
        "08.6": "flops_per_token",
    }
    assert {get(ex).notebook for ex in IDS} == {"08_gpt.ipynb"}


@pytest.mark.parametrize("index", range(6))
def test_reference_generate_equals_gpt_generate_without_cache(index):
    i = _generate_cases(1)[index].inputs
    model = _build_gpt(i)
    kw = dict(temperature=i["temperature"], top_k=i["top_k"])
    ours = generate(
        model,
        i["idx"],
        i["max_new_tokens"],
        **kw,
        generator=torch.Generator().manual_seed(i["seed"]),
    )
    theirs = model.generate(
        i["idx"],
        i["max_new_tokens"],
        **kw,
        use_cache=False,
        generator=torch.Generator().manual_seed(i["seed"]),
    )
    assert torch.equal(ours, theirs)


# ----------------------------------------------------------------------------- 08.1 variants


class _Handwritten(nn.Module):
    """Correct: blocks built one by one, the head as a matmul with the tied matrix inside a
    Linear, position rows sliced from the table, the loss as -mean log-softmax."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        D = config.d_model
        self.tok_emb = nn.Embedding(config.vocab_size, D)
        self.pos_emb = nn.Embedding(config.block_size, D)
        blocks = []
        for _ in range(config.n_layers):
            blocks.append(
                TransformerBlock(
                    D,
                    config.n_heads,
                    config.d_ff,
                    norm_first=True,
                    activation="gelu",
                    bias=config.bias,
                )
            )
        self.blocks = nn.ModuleList(blocks)
        self.ln_f = nn.LayerNorm(D, bias=config.bias)
        self.lm_head = nn.Linear(D, config.vocab_size, bias=False)
        self.lm_head.weight = self.tok_emb.weight

    def forward(self, idx, targets=None):
        T = idx.shape[1]
        x = self.tok_emb.weight[idx] + self.pos_emb.weight[:T]
        for block in self.blocks:
            x = block(x, is_causal=True)
        logits = self.ln_f(x) @ self.lm_head.weight.T
        if targets is None:
            return logits, None
        logp = torch.log_softmax(logits, dim=-1)
        return logits, -logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1).mean()


class _Subclass(GPT):
    """Correct: the course's GPT with its own forward, the loss with the class dim moved to
    position 1 and shaped (1,)."""

    def forward(self, idx, targets=None):
        x = self.tok_emb(idx) + self.pos_emb(torch.arange(idx.shape[1]))[None]
        for block in self.blocks:
            x = block(x, is_causal=True)
        logits = self.lm_head(self.ln_f(x))
        loss = None if targets is None else F.cross_entropy(logits.transpose(1, 2), targets)[None]
        return logits, loss


@pytest.mark.parametrize("answer", [_Handwritten, _Subclass])
def test_gpt_written_differently_passes(answer):
    result = run("08.1", answer)
    assert result.status == PASSED, result.message


def test_untied_head_fails_naming_the_parameter_count_and_tying():
    result = run("08.1", MODEL_MISTAKES[5].impl)
    assert result.status == FAILED
    assert "distinct parameters" in result.message and "tying" in result.message


def test_renamed_submodule_is_an_error_naming_it():
    class Renamed(GPT):
        def __init__(self, config):
            super().__init__(config)
            self.final_norm = self.ln_f
            del self.ln_f

        def forward(self, idx, targets=None):
            return super().forward(idx, targets)

    result = run("08.1", Renamed)
    assert result.status == ERROR and "ln_f" in result.message


def test_model_without_config_is_an_error_saying_so():
    class NoConfig(GPT):
        def __init__(self, config):
            super().__init__(config)
            del self.config

        def forward(self, idx, targets=None):
            return GPT.forward(self, idx, targets)

    result = run("08.1", NoConfig)
    assert result.status == ERROR and "self.config" in result.message


def test_model_ignoring_config_bias_is_an_error_on_the_no_bias_case():
    class AlwaysBias(GPT):
        def __init__(self, config):
            super().__init__(replace(config, bias=True))
            self.config = config

    result = run("08.1", AlwaysBias)
    assert result.status == FAILED
    assert "parameters that the course's GPT does not have with this config" in result.message


class _PostNorm(GPT):
    """Wrong: the blocks in the 2017 order (post-norm), everything else the course's."""

    def __init__(self, config):
        super().__init__(config)
        self.blocks = nn.ModuleList(
            TransformerBlock(
                config.d_model, config.n_heads, config.d_ff, norm_first=False, bias=config.bias
            )
            for _ in range(config.n_layers)
        )


class _FinalNormWithBias(GPT):
    """Wrong: the final LayerNorm keeps its bias when the config turns biases off."""

    def __init__(self, config):
        super().__init__(config)
        self.ln_f = nn.LayerNorm(config.d_model)  # bias=True whatever config.bias says


def test_post_norm_blocks_are_named_and_the_message_gives_no_code():
    result = run("08.1", _PostNorm)
    assert result.status == FAILED and result.mistake.startswith("post-norm blocks")
    assert "pre-norm" in result.message and "norm_first=True" not in result.message


def test_final_layernorm_bias_under_bias_false_is_named():
    result = run("08.1", _FinalNormWithBias)
    assert result.status == FAILED, result.message
    assert result.mistake == "final LayerNorm with a bias although config.bias is False"
    assert "case 'config.bias = False" in result.message


def test_forward_returning_a_loss_without_targets_is_an_error():
    class AlwaysLoss(GPT):
        def forward(self, idx, targets=None):
            logits, loss = super().forward(idx, targets)
            return logits, torch.tensor(0.0) if loss is None else loss

    result = run("08.1", AlwaysLoss)
    assert result.status == ERROR and "(logits, None)" in result.message


def test_reference_model_equals_its_forward_on_the_case_weights():
    case = _model_cases(0)[1]
    model = _build_gpt(case.inputs)
    ex = get("08.1")
    out = ex.call(ex.reference, case)
    logits, loss = model(case.inputs["idx"], case.inputs["targets"])
    torch.testing.assert_close(out["logits"], logits)
    assert int(out["n_params"]) == model.num_params()


# ----------------------------------------------------------------------------- 08.3 variants


@pytest.mark.parametrize("warmup, steps", [(10, 100), (0, 30), (100, 5000)])
def test_reference_lr_is_the_course_schedule(warmup, steps):
    for s in range(steps + 3):
        expected = lr_schedule(s, lr=1e-3, steps=steps, warmup=warmup, min_lr=1e-4)
        assert get_lr(s, 1e-3, 1e-4, warmup, steps) == pytest.approx(expected)
    assert get_lr(steps + 2, 1e-3, 1e-4, warmup, steps) == pytest.approx(1e-4)


def _lr_linear_space(step, max_lr, min_lr, warmup, steps):
    """Correct: cosine of an angle, written with numpy and a tensor warmup."""
    if step < warmup:
        return float(torch.tensor(max_lr) * (step + 1) / warmup)
    angle = np.pi * np.clip((step - warmup) / max(1, steps - warmup), 0, 1)
    return float(min_lr + (max_lr - min_lr) * (np.cos(angle) + 1) / 2)


def _lr_sin_squared(step, max_lr, min_lr, warmup, steps):
    """Correct: (1 + cos x) / 2 = cos^2(x / 2); past the end returns min_lr explicitly."""
    if step < warmup:
        return (step + 1) * max_lr / warmup
    if step >= steps:
        return min_lr
    p = (step - warmup) / max(1, steps - warmup)
    return min_lr + (max_lr - min_lr) * math.cos(math.pi * p / 2) ** 2


@pytest.mark.parametrize("answer", [_lr_linear_space, _lr_sin_squared])
def test_lr_written_differently_passes(answer):
    result = run("08.3", answer)
    assert result.status == PASSED, result.message


def test_lr_returning_a_0d_tensor_is_rejected_the_prompt_asks_for_a_number():
    def lr_tensor(*args):
        return torch.tensor(_lr_sin_squared(*args))

    result = run("08.3", lr_tensor)
    assert result.status == "failed" and "should return a Python float or int" in result.message


def test_lr_returning_a_string_is_an_error():
    result = run("08.3", lambda *args: "1e-3")
    assert result.status == ERROR and "number" in result.message


def test_lr_message_says_where_the_schedule_differs():
    result = run("08.3", LR_MISTAKES[0].impl)
    assert "during the warmup" in result.message


# ----------------------------------------------------------------------------- 08.4 variants


def _groups_by_module(model, weight_decay):
    """Correct: by module type (Linear and Embedding weights decay), via named_modules."""
    decay, other = [], []
    seen = set()
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if id(p) in seen or not p.requires_grad:
                continue
            seen.add(id(p))
            big = isinstance(module, (nn.Linear, nn.Embedding)) and name == "weight"
            (decay if big else other).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": other, "weight_decay": 0}]


def _groups_three(model, weight_decay):
    """Correct: three groups (empty ones allowed), weight decay as a numpy float, tuples."""
    params = [p for p in model.parameters() if p.requires_grad]
    return (
        {
            "params": tuple(p for p in params if p.ndim >= 2),
            "weight_decay": np.float64(weight_decay),
        },
        {"params": [p for p in params if p.ndim == 1], "weight_decay": 0.0},
        {"params": [p for p in params if p.ndim == 0], "weight_decay": 0.0, "lr": 1.0},
    )


@pytest.mark.parametrize("answer", [_groups_by_module, _groups_three])
def test_groups_written_differently_pass(answer):
    result = run("08.4", answer)
    assert result.status == PASSED, result.message


def test_reference_groups_make_a_working_adamw():
    model = GPT(vocab_size=11, block_size=6, n_layers=2, n_heads=2, d_model=8)
    opt = torch.optim.AdamW(param_groups(model, 0.1), lr=1e-3)
    n = sum(p.numel() for g in opt.param_groups for p in g["params"])
    assert n == model.num_params()


def test_groups_returning_one_dict_is_an_error():
    result = run("08.4", lambda model, wd: {"params": list(model.parameters()), "weight_decay": wd})
    assert result.status == ERROR and "list of dicts" in result.message


def test_groups_without_the_weight_decay_key_is_an_error():
    result = run("08.4", lambda model, wd: [{"params": list(model.parameters())}])
    assert result.status == ERROR and "'weight_decay'" in result.message


# ----------------------------------------------------------------------------- 08.6 variants


def _flops_by_parts(config):
    """Correct: forward FLOPs counted part by part, times 3."""
    N = config.param_count() - config.block_size * config.d_model
    forward = 2 * N + config.n_layers * (2 * config.block_size * config.d_model) * 2
    return 3 * forward


def _flops_tensor(config):
    n = torch.tensor(config.param_count(non_embedding=True), dtype=torch.float64)
    return 6 * n + 12 * config.n_layers * config.block_size * config.d_model


@pytest.mark.parametrize("answer", [_flops_by_parts, _flops_tensor])
def test_flops_written_differently_pass(answer):
    result = run("08.6", answer)
    assert result.status == PASSED, result.message


def test_flops_reference_matches_nanogpt_estimate_mfu_for_gpt2():
    cfg = GPTConfig.preset("gpt2")
    N = cfg.param_count(non_embedding=True)
    L, H, Q, T = cfg.n_layers, cfg.n_heads, cfg.d_model // cfg.n_heads, cfg.block_size
    assert flops_per_token(cfg) == 6 * N + 12 * L * H * Q * T  # nanoGPT's model.estimate_mfu


def test_attention_counted_for_the_forward_pass_only_is_named():
    def flops(config):
        N = config.param_count(non_embedding=True)
        return 6 * N + 4 * config.n_layers * config.block_size * config.d_model

    result = run("08.6", flops)
    assert result.status == FAILED
    assert result.mistake == "attention term counted for the forward pass only"


def test_building_a_model_to_count_flops_is_refused():
    def count_a_model(config):
        model = GPT(config)
        N = model.num_params(non_embedding=True)
        return 6 * N + 12 * config.n_layers * config.block_size * config.d_model

    result = run("08.6", count_a_model)
    assert result.status == ERROR and "formula" in result.message


@pytest.mark.parametrize("seed", range(5))
def test_flops_mistakes_give_distinct_counts_on_every_case(seed):
    ex = get("08.6")
    for case in _flops_cases(seed):
        values = [float(ex.call(flops_per_token, case)["flops"])]
        values += [float(ex.call(m.impl, case)["flops"]) for m in FLOPS_MISTAKES]
        assert len(set(values)) == len(values), (case.name, values)


# ----------------------------------------------------------------------------- all exercises

ALL_MISTAKES = (
    [("08.1", m) for m in MODEL_MISTAKES]
    + [("08.2", m) for m in GENERATE_MISTAKES]
    + [("08.3", m) for m in LR_MISTAKES]
    + [("08.4", m) for m in GROUP_MISTAKES]
    + [("08.5", m) for m in STEP_MISTAKES]
    + [("08.6", m) for m in FLOPS_MISTAKES]
)


@pytest.mark.parametrize(
    "exercise_id, mistake", ALL_MISTAKES, ids=[f"{e}-{m.name}" for e, m in ALL_MISTAKES]
)
def test_each_classic_mistake_is_rejected_with_a_hint_naming_it(exercise_id, mistake):
    result = run(exercise_id, mistake.impl)
    assert result.status == FAILED, result.message
    assert result.mistake == mistake.name, result.message
    assert mistake.hint in result.message


@pytest.mark.parametrize("seed", [1])
@pytest.mark.parametrize(
    "exercise_id, mistakes",
    [
        ("08.1", MODEL_MISTAKES),
        ("08.2", GENERATE_MISTAKES),
        ("08.3", LR_MISTAKES),
        ("08.4", GROUP_MISTAKES),
        ("08.5", STEP_MISTAKES),
        ("08.6", FLOPS_MISTAKES),
    ],
)
def test_mistakes_are_named_correctly_on_other_seeds(exercise_id, mistakes, seed):
    ex = get(exercise_id)
    cases = ex.make_cases(seed)
    for mistake in mistakes:
        outputs = []
        for case in cases:
            try:
                outputs.append(ex.call(mistake.impl, case))
            except Exception:
                break
        result = judge(ex, cases[: len(outputs)], outputs)
        assert result.status == FAILED and result.mistake == mistake.name, (
            mistake.name,
            result.message,
        )


def test_required_mistakes_are_all_covered():
    names = " | ".join(m.name for _, m in ALL_MISTAKES)
    for required in (
        "not tied",
        "no final LayerNorm",
        "missing position embeddings",
        "sliced from the end",
        "not causal",
        "wrong dim",
        "targets not shifted",
        "temperature applied after the softmax",
        "multiplied instead of divided",
        "k - 1",
        "0 instead of -inf",
        "first position",
        "warmup starts at 0",
        "decays to 0",
        "every parameter",
        "LayerNorm scales decayed",
        "listed twice",
        "forward pass only",
        "attention term left out",
        "post-norm",
        "final LayerNorm with a bias",
        "cleared after the optimizer step",
    ):
        assert required in names, required


def _stub_class(exercise_id):
    class Stub(nn.Module):
        def __init__(self, config):
            super().__init__()
            raise NotImplementedError(f"Exercise {exercise_id}: implement it")

    return Stub


@pytest.mark.parametrize(
    "exercise_id, signature",
    [
        ("08.1", _stub_class("08.1")),
        (
            "08.2",
            lambda model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None: _stub(
                "08.2"
            ),
        ),
        ("08.3", lambda step, max_lr, min_lr, warmup, steps: _stub("08.3")),
        ("08.4", lambda model, weight_decay: _stub("08.4")),
        ("08.5", lambda model, optimizer, x, y, lr, grad_clip: _stub("08.5")),
        ("08.6", lambda config: _stub("08.6")),
    ],
)
def test_stub_is_not_attempted(exercise_id, signature):
    assert run(exercise_id, signature).status == NOT_ATTEMPTED


def _stub(exercise_id):
    raise NotImplementedError(f"Exercise {exercise_id}: implement it")


# ----------------------------------------------------------------------------- 08.2 variants


def _topk_scatter(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    """Correct: top-k by scattering the kept values into a row of -inf; the model's forward."""
    for _ in range(max_new_tokens):
        logits, _ = model(idx[:, -model.config.block_size :])
        logits = logits[:, -1] / temperature
        if top_k is not None:
            values, where = torch.topk(logits, min(top_k, logits.size(-1)))
            logits = torch.full_like(logits, float("-inf")).scatter(-1, where, values)
        nxt = torch.softmax(logits, -1).multinomial(1, generator=generator)
        idx = torch.cat((idx, nxt), dim=1)
    return idx


def _power_of_probs(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    """Correct: p ** (1/T) is proportional to softmax(logits / T); top-k on the probabilities
    with zeros, unnormalised weights (multinomial normalises)."""
    with torch.no_grad():
        for _ in range(max_new_tokens):
            logits, _ = model(idx[:, -model.config.block_size :])
            w = torch.softmax(logits[:, -1, :], dim=-1) ** (1.0 / temperature)
            if top_k is not None:
                kth = w.topk(min(top_k, w.shape[-1]), dim=-1).values[:, -1:]
                w = torch.where(w >= kth, w, torch.zeros_like(w))
            idx = torch.cat([idx, torch.multinomial(w, 1, generator=generator)], dim=1)
    return idx


def _row_by_row(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    """Correct: one multinomial call per sequence (the same random stream as one batched call),
    the context cropped by slicing from a start index."""
    for _ in range(max_new_tokens):
        start = max(0, idx.shape[1] - model.config.block_size)
        logits = model(idx[:, start:])[0][:, -1, :] / temperature
        if top_k is not None:
            k = min(top_k, logits.shape[-1])
            kth = torch.sort(logits, dim=-1, descending=True).values[:, k - 1 : k]
            logits[logits < kth] = float("-inf")
        probs = F.softmax(logits, dim=-1)
        nxt = torch.stack([torch.multinomial(p, 1, generator=generator) for p in probs])
        idx = torch.cat([idx, nxt], dim=1)
    return idx


def test_generate_that_does_not_clamp_top_k_to_the_vocabulary_is_told_student_B_16():
    def no_clamp(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
        for _ in range(max_new_tokens):
            logits = model(idx[:, -model.config.block_size :])[0][:, -1, :] / temperature
            if top_k is not None:
                kth = torch.topk(logits, top_k).values[:, -1:]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            nxt = torch.multinomial(torch.softmax(logits, -1), 1, generator=generator)
            idx = torch.cat([idx, nxt], dim=1)
        return idx

    result = run("08.2", no_clamp)
    assert result.status == ERROR and "more than the" in result.message


@pytest.mark.parametrize("answer", [_topk_scatter, _power_of_probs, _row_by_row])
def test_generate_written_differently_passes(answer):
    result = run("08.2", answer)
    assert result.status == PASSED, result.message


def test_generate_that_calls_model_generate_is_an_error():
    def shortcut(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
        return model.generate(idx, max_new_tokens, temperature, top_k, generator=generator)

    result = run("08.2", shortcut)
    assert result.status == ERROR and "sampling loop" in result.message


def test_generate_without_multinomial_fails_saying_how_to_sample():
    def gumbel(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
        for _ in range(max_new_tokens):
            logits = model(idx[:, -model.config.block_size :])[0][:, -1] / temperature
            u = torch.rand(logits.shape, generator=generator, dtype=logits.dtype)
            idx = torch.cat([idx, (logits - torch.log(-torch.log(u))).argmax(-1, True)], 1)
        return idx

    result = run("08.2", gumbel)
    assert result.status == FAILED and "torch.multinomial" in result.message


def test_generate_dropping_the_prompt_fails_with_the_expected_shape():
    def new_only(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
        return generate(model, idx, max_new_tokens, temperature, top_k, generator)[
            :, idx.shape[1] :
        ]

    result = run("08.2", new_only)
    assert result.status == FAILED and "prompt followed by the new tokens" in result.message


def test_generate_without_cropping_raises_the_models_crop_hint():
    def no_crop(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
        for _ in range(max_new_tokens):
            logits = model(idx)[0][:, -1] / temperature
            if top_k is not None:
                kth = logits.topk(top_k).values[:, -1:]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            probs = torch.softmax(logits, -1)
            idx = torch.cat([idx, torch.multinomial(probs, 1, generator=generator)], 1)
        return idx

    result = run("08.2", no_crop)
    assert result.status in (ERROR, FAILED)
    assert "block_size" in result.message


def test_temperature_and_top_k_mistakes_differ_from_the_reference_at_the_first_step():
    """The distributions, not the luck of the draw, tell a wrong temperature or top-k apart."""
    case = _generate_cases(0)[2]  # temperature 2, top_k 3
    ex = get("08.2")
    expected = ex.call(ex.reference, case)
    V = case.inputs["vocab_size"]
    B = case.inputs["idx"].shape[0]
    for mistake in GENERATE_MISTAKES[:5]:
        wrong = ex.call(mistake.impl, case)
        assert not torch.allclose(wrong["probs"][:B], expected["probs"][:B]), mistake.name
    assert expected["probs"].shape == (B * case.inputs["max_new_tokens"], V)


# ----------------------------------------------------------------------------- the recipe


def _tiny_recipe(**overrides):
    from course_utils.lessons.nb08_gpt import recipe as nb08

    base = nb08.config("ci")
    model = replace(base.model, block_size=8, n_layers=1, n_heads=2, d_model=8)
    return replace(
        base,
        model=model,
        batch_size=4,
        steps=6,
        warmup=2,
        eval_every=3,
        eval_batches=1,
        final_eval_batches=2,
        eval_batch_size=4,
        **overrides,
    )


def test_unigram_entropy_is_the_entropy_of_the_character_frequencies():
    from course_utils.lessons.nb08_gpt.recipe import unigram_entropy

    data = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])  # uniform over 4 symbols
    assert unigram_entropy(data, 6) == pytest.approx(np.log(4))


def test_train_char_gpt_runs_its_steps_records_curves_and_is_deterministic():
    from course_utils.data.text import CharDataset
    from course_utils.lessons.nb08_gpt import recipe as nb08

    data = CharDataset("to be or not to be, that is the question\n" * 20)
    _, h1 = nb08.train_char_gpt(_tiny_recipe(), data, progress=False, log_every=2)
    _, h2 = nb08.train_char_gpt(_tiny_recipe(), data, progress=False, log_every=2)
    assert h1.steps_done == 6 and h1.stopped_by == "steps" and h1.step == [1, 3, 5]
    assert h1.eval_step == [2, 5] and set(h1.final) == {"train", "val"}
    assert h1.eval["val loss"][-1] == h1.final["val"]  # the final estimate closes the curve
    assert 0 < h1.train_seconds <= h1.wall_seconds
    assert h1.train_loss == h2.train_loss and h1.final == h2.final
    assert h1.tokens_seen == 6 * 4 * 8


def test_a_time_budget_stops_training_and_still_ends_the_schedule():
    from course_utils.data.text import CharDataset
    from course_utils.lessons.nb08_gpt import recipe as nb08

    data = CharDataset("abcdefgh" * 50)
    _, h = nb08.train_char_gpt(_tiny_recipe(), data, steps=10**6, time_budget_s=0.0, progress=False)
    assert h.stopped_by == "time budget" and h.steps_done == 0
    cfg = _tiny_recipe()
    assert nb08.lr_at(cfg.steps, cfg) == pytest.approx(cfg.min_lr)
    assert nb08.lr_at(cfg.warmup, cfg, time_fraction=1.0) == pytest.approx(cfg.min_lr)
    assert nb08.lr_at(0, cfg) == pytest.approx(cfg.lr / cfg.warmup)


# ----------------------------------------------------------------------------- 08.5 variants


def _step_zeros(model, opt, x, y, lr, grad_clip):
    for g in opt.param_groups:
        g.update(lr=lr)
    opt.zero_grad()  # zeros instead of None: the same step
    _, loss = model(x, targets=y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(list(model.parameters()), max_norm=grad_clip)
    opt.step()
    return float(loss)


def test_train_step_written_differently_passes():
    result = run("08.5", _step_zeros)
    assert result.status == PASSED, result.message


def test_train_step_returning_a_0d_tensor_is_rejected_the_prompt_asks_for_a_number():
    def step(model, opt, x, y, lr, grad_clip):
        for g in opt.param_groups:
            g.update(lr=lr)
        opt.zero_grad()
        _, loss = model(x, targets=y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(model.parameters()), max_norm=grad_clip)
        opt.step()
        return loss.detach()  # a 0-d tensor instead of a float

    result = run("08.5", step)
    assert result.status == "failed" and "should return a Python float or int" in result.message


def test_clearing_the_gradients_after_the_step_is_named_and_says_why_it_matters_here():
    def step(model, opt, x, y, lr, grad_clip):  # the common idiom: clear at the end
        for g in opt.param_groups:
            g["lr"] = lr
        loss = model(x, y)[1]
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        opt.step()
        opt.zero_grad()
        return loss.item()

    result = run("08.5", step)
    assert result.status == FAILED
    assert result.mistake == (
        "gradients cleared after the optimizer step instead of before the backward pass"
    )
    assert "gradient from elsewhere" in result.message


def test_train_step_returning_the_loss_with_its_graph_is_told_to_return_a_number_student_B_6():
    def step(model, opt, x, y, lr, grad_clip):
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad()
        _, loss = model(x, targets=y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        opt.step()
        return loss  # still attached to its graph: a loop keeping these keeps every graph

    result = run("08.5", step)
    assert result.status == ERROR and "loss.item()" in result.message
    assert "attached to its graph" in result.message


def test_train_step_that_returns_nothing_is_told_to_return_the_loss():
    from course_utils.lessons.nb08_gpt.exercises import train_step

    def step(model, opt, x, y, lr, grad_clip):
        train_step(model, opt, x, y, lr, grad_clip)

    result = run("08.5", step)
    assert result.status == ERROR and "return the step's loss" in result.message


def test_train_step_cases_start_from_a_stale_gradient_and_clip_in_one_case():
    from course_utils.lessons.nb08_gpt.exercises import _step_cases, _step_setup

    cases = _step_cases(0)
    assert {c.inputs["grad_clip"] for c in cases} == {0.05, 1e6}
    model, optimizer = _step_setup(cases[0].inputs)
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    assert len(optimizer.param_groups) == 2


# ---------------------------------------------------------------- graded questions 08.Q1, 08.Q2


def test_question_08_q1_needs_the_probe_run_and_refuses_what_is_printed_before_it():
    from course_utils.checks.questions import check_answer
    from course_utils.lessons.nb08_gpt import recipe

    q = get_question("08.Q1")
    truth = q.truths()
    assert len(truth) == 1 and 5.3 < truth[0] < 5.7  # one run, one corpus (the bundled text)
    assert truth[0] == recipe.initial_loss_at_std(recipe.load_dataset(), 0.2)  # the cell's own
    for value in (truth[0], round(truth[0], 2), str(round(truth[0], 3))):
        assert check_answer(q, value).status == PASSED, value
    # log V (printed before the model exists), the GPT-2-initialised loss (4.19 in ci, 4.21 in
    # cpu), the unigram entropy, log V in bits, zero, V itself, the offline corpus's log 32
    for value in (math.log(65), 4.189, 4.212, 4.286, 3.309, 6.022, 0.0, 65, math.log(32)):
        result = check_answer(q, value)
        assert result.status == FAILED and "loss at initialisation" in result.message, value
    assert check_answer(q, None).status == NOT_ATTEMPTED
    assert check_answer(q, "four").status == FAILED


def test_question_08_q2_names_every_distractor_and_hides_the_answer():
    from course_utils.checks.questions import check_answer

    q = get_question("08.Q2")
    assert check_answer(q, "c").status == PASSED and check_answer(q, "(C)").status == PASSED
    for letter in "abd":
        result = check_answer(q, letter)
        assert result.status == FAILED and result.mistake == q.misconception(letter).name
        assert "(c)" not in result.message and q.choices["c"][:30] not in result.message
    assert check_answer(q, None).status == NOT_ATTEMPTED
    assert check_answer(q, "e").status == FAILED


# ----------------------------------------------------------------------------- every seed
# What tests/test_same_verdict_every_seed.py sweeps over many seeds, by exercise: the correct
# answers written differently (the wrong ones here are the registered mistakes themselves).
SWEEP_CORRECT = {
    "08.1": [_Handwritten, _Subclass],
    "08.2": [_topk_scatter, _power_of_probs, _row_by_row],
    "08.3": [_lr_linear_space, _lr_sin_squared],
    "08.4": [_groups_by_module, _groups_three],
    "08.5": [_step_zeros],
    "08.6": [_flops_by_parts, _flops_tensor],
}
SWEEP_WRONG = {
    "08.1": {
        "final LayerNorm with a bias although config.bias is False": _FinalNormWithBias,
    },
}
