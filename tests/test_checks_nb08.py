"""The notebook 08 checks (08.1 GPT forward + loss, 08.2 generation with temperature and
top-k, 08.3 the parameter count of a GPT) accept correct answers written differently, reject
each classic mistake with a hint naming it, and refuse shortcuts (calling the model's own
forward or generate, building a model to count it)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from course_utils.checks import ERROR, FAILED, NOT_ATTEMPTED, PASSED, get, run
from course_utils.checks.core import judge
from course_utils.checks.nb08_gpt import (
    FORWARD_MISTAKES,
    GENERATE_MISTAKES,
    PARAM_MISTAKES,
    _build_gpt,
    _forward_cases,
    _generate_cases,
    _param_cases,
    generate,
    gpt_forward,
    gpt_param_count,
)
from course_utils.models.gpt import GPT, GPTConfig

# ----------------------------------------------------------------------------- references


@pytest.mark.parametrize("exercise_id", ["08.1", "08.2", "08.3"])
def test_reference_passes_its_own_check(exercise_id):
    result = run(exercise_id, get(exercise_id).reference)
    assert result.status == PASSED, result.message


def test_exercises_are_registered_for_notebook_08_with_their_function_names():
    names = {ex: get(ex).function for ex in ("08.1", "08.2", "08.3")}
    assert names == {"08.1": "gpt_forward", "08.2": "generate", "08.3": "gpt_param_count"}
    assert {get(ex).notebook for ex in names} == {"08_gpt.ipynb"}


def test_reference_forward_equals_the_model_forward():
    case = _forward_cases(0)[1]
    model = _build_gpt(case.inputs)
    logits, loss = gpt_forward(model, case.inputs["idx"], case.inputs["targets"])
    ref_logits, ref_loss = model(case.inputs["idx"], case.inputs["targets"])
    torch.testing.assert_close(logits, ref_logits)
    torch.testing.assert_close(loss, ref_loss)


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


@pytest.mark.parametrize("dims", [(7, 5, 1, 2, 4), (65, 64, 4, 4, 128), (50, 9, 3, 3, 12)])
def test_param_count_formula_equals_the_parameters_of_a_real_gpt(dims):
    cfg = GPTConfig(
        **dict(zip(("vocab_size", "block_size", "n_layers", "n_heads", "d_model"), dims))
    )
    model = GPT(cfg)
    assert gpt_param_count(cfg) == sum(p.numel() for p in model.parameters()) == model.num_params()


def test_gpt2_and_gpt3_counts_match_the_published_sizes():
    gpt2 = GPTConfig.preset("gpt2")
    with torch.device("meta"):
        assert gpt_param_count(gpt2) == sum(p.numel() for p in GPT(gpt2).parameters())
    assert gpt_param_count(gpt2) == 124_439_808  # nanoGPT: "124M"
    gpt3 = gpt_param_count(GPTConfig.preset("gpt3-175b"))
    assert 174e9 < gpt3 < 176e9


# ----------------------------------------------------------------------------- 08.1 variants


def _forward_tied_manual(model, idx, targets=None):
    """Correct: position rows sliced from the table, the tied head written as a matmul, the
    loss as -mean log-softmax gathered at the targets."""
    T = idx.shape[1]
    x = model.tok_emb.weight[idx] + model.pos_emb.weight[:T]
    for block in model.blocks:
        x = block(x, is_causal=True)
    logits = model.ln_f(x) @ model.tok_emb.weight.T
    if targets is None:
        return logits, None
    logp = torch.log_softmax(logits, dim=-1)
    return logits, -logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1).mean()


def _forward_transposed_ce(model, idx, targets=None):
    """Correct: cross-entropy with the class dim moved to position 1, loss shaped (1,)."""
    x = model.tok_emb(idx) + model.pos_emb(torch.arange(idx.shape[1]))[None]
    for block in model.blocks:
        x = block(x, is_causal=True)
    logits = model.lm_head(model.ln_f(x))
    loss = None if targets is None else F.cross_entropy(logits.transpose(1, 2), targets)[None]
    return logits, loss


@pytest.mark.parametrize("answer", [_forward_tied_manual, _forward_transposed_ce])
def test_forward_written_differently_passes(answer):
    result = run("08.1", answer)
    assert result.status == PASSED, result.message


def test_forward_that_calls_the_model_itself_is_an_error_naming_the_submodules():
    result = run("08.1", lambda model, idx, targets=None: model(idx, targets))
    assert result.status == ERROR
    assert "submodules" in result.message


def test_forward_returning_a_loss_without_targets_is_an_error():
    def always_loss(model, idx, targets=None):
        logits, loss = gpt_forward(model, idx, targets)
        return logits, torch.tensor(0.0) if loss is None else loss

    result = run("08.1", always_loss)
    assert result.status == ERROR and "(logits, None)" in result.message


# ----------------------------------------------------------------------------- 08.2 variants


def _topk_scatter(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    """Correct: top-k by scattering the kept values into a row of -inf; the 08.1 forward."""
    for _ in range(max_new_tokens):
        logits, _ = gpt_forward(model, idx[:, -model.config.block_size :])
        logits = logits[:, -1] / temperature
        if top_k is not None:
            values, where = torch.topk(logits, top_k)
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
                kth = w.topk(top_k, dim=-1).values[:, -1:]
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
            kth = torch.sort(logits, dim=-1, descending=True).values[:, top_k - 1 : top_k]
            logits[logits < kth] = float("-inf")
        probs = F.softmax(logits, dim=-1)
        nxt = torch.stack([torch.multinomial(p, 1, generator=generator) for p in probs])
        idx = torch.cat([idx, nxt], dim=1)
    return idx


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


# ----------------------------------------------------------------------------- 08.3 variants


def _per_module(config):
    """Correct: module by module, reading d_ff from the config."""
    V, T, L, D, F_ = (
        config.vocab_size,
        config.block_size,
        config.n_layers,
        config.d_model,
        config.d_ff,
    )
    linear = lambda i, o: i * o + o  # noqa: E731
    block = 2 * (2 * D) + linear(D, 3 * D) + linear(D, D) + linear(D, F_) + linear(F_, D)
    return L * block + 2 * D + V * D + T * D


def _closed_form_float(config):
    """Correct: the closed form with a float on the way (a whole number at the end)."""
    D = float(config.d_model)
    return config.n_layers * (12 * D**2 + 13 * D) + (config.vocab_size + config.block_size + 2) * D


def _numpy_int(config):
    return np.int64(gpt_param_count(config))


@pytest.mark.parametrize("answer", [_per_module, _closed_form_float, _numpy_int])
def test_param_count_written_differently_passes(answer):
    result = run("08.3", answer)
    assert result.status == PASSED, result.message


def test_building_a_model_to_count_it_is_refused_before_it_allocates():
    def count_a_model(config):
        return sum(p.numel() for p in GPT(config).parameters())

    result = run("08.3", count_a_model)
    assert result.status == ERROR and "formula" in result.message


def test_non_integer_count_is_an_error_that_says_so():
    result = run("08.3", lambda config: gpt_param_count(config) + 0.5)
    assert result.status == ERROR and "whole number" in result.message


@pytest.mark.parametrize("seed", range(10))
def test_param_mistakes_give_distinct_counts_on_every_case(seed):
    for case in _param_cases(seed):
        cfg = GPTConfig(**case.inputs)
        counts = [gpt_param_count(cfg)] + [m.impl(cfg) for m in PARAM_MISTAKES]
        assert len(set(counts)) == len(counts), (case.name, counts)


# ----------------------------------------------------------------------------- all exercises

ALL_MISTAKES = (
    [("08.1", m) for m in FORWARD_MISTAKES]
    + [("08.2", m) for m in GENERATE_MISTAKES]
    + [("08.3", m) for m in PARAM_MISTAKES]
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
    "exercise_id, mistakes", [("08.1", FORWARD_MISTAKES), ("08.2", GENERATE_MISTAKES)]
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
        "targets not shifted",
        "targets misaligned",
        "wrong dim",
        "missing position embeddings",
        "no final LayerNorm",
        "temperature applied after the softmax",
        "multiplied instead of divided",
        "k - 1",
        "0 instead of -inf",
        "first position",
        "forgot the biases",
        "forgot the LayerNorm",
        "forgot the position embeddings",
        "tied LM head counted twice",
    ):
        assert required in names, required


@pytest.mark.parametrize(
    "exercise_id, signature",
    [
        ("08.1", lambda model, idx, targets=None: _stub("08.1")),
        (
            "08.2",
            lambda model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None: _stub(
                "08.2"
            ),
        ),
        ("08.3", lambda config: _stub("08.3")),
    ],
)
def test_stub_is_not_attempted(exercise_id, signature):
    assert run(exercise_id, signature).status == NOT_ATTEMPTED


def _stub(exercise_id):
    raise NotImplementedError(f"Exercise {exercise_id}: implement it")


# ----------------------------------------------------------------------------- the recipe


def _tiny_recipe(**overrides):
    from course_utils.recipes import nb08

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
    from course_utils.recipes.nb08 import unigram_entropy

    data = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])  # uniform over 4 symbols
    assert unigram_entropy(data, 6) == pytest.approx(np.log(4))


def test_train_char_gpt_runs_its_steps_records_curves_and_is_deterministic():
    from course_utils.data.text import CharDataset
    from course_utils.recipes import nb08

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
    from course_utils.recipes import nb08

    data = CharDataset("abcdefgh" * 50)
    _, h = nb08.train_char_gpt(_tiny_recipe(), data, steps=10**6, time_budget_s=0.0, progress=False)
    assert h.stopped_by == "time budget" and h.steps_done == 0
    cfg = _tiny_recipe()
    assert nb08.lr_at(cfg.steps, cfg) == pytest.approx(cfg.min_lr)
    assert nb08.lr_at(cfg.warmup, cfg, time_fraction=1.0) == pytest.approx(cfg.min_lr)
    assert nb08.lr_at(0, cfg) == pytest.approx(cfg.lr / cfg.warmup)
