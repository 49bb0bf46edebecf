"""Device cleanliness, proven without a GPU: models, generation, attention kernels, training
steps, the data-parallel step and the exercise harnesses run with every tensor on a stand-in
accelerator (``meta`` under :class:`device_harness.FakeAccelerator`), which rejects any CPU
tensor or CPU generator that meets it. The first tests prove the harness catches the bugs.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from device_harness import META, DeviceLeak, FakeAccelerator, all_on_meta, to_meta

from course_utils.lessons.nb09_vit import recipe as nb09
from course_utils.modeling import attention
from course_utils.modeling.models import GPT, EncoderDecoderTransformer, Seq2SeqRNN, ViT, ViTConfig
from course_utils.runtime import devices


def _first(out):
    """The first tensor of a model's output (a tensor, or a tuple starting with one)."""
    return out[0] if isinstance(out, (tuple, list)) else out


def _tiny_gpt(**kw) -> GPT:
    cfg = dict(vocab_size=11, block_size=8, n_layers=2, n_heads=2, d_model=16, dropout=0.1)
    return GPT(**{**cfg, **kw})


# ----------------------------------------------------------------------------- the harness


def test_harness_rejects_a_planted_cpu_allocation():
    """The bug notebook 11's solution had: a buffer allocated without device=."""

    def leaky_running_sum(x):
        acc = torch.zeros(x.shape[-1])  # planted: on the CPU whatever x's device
        return acc + x.sum(0)

    x = torch.randn(4, 3, device=META)
    with pytest.raises(DeviceLeak, match="CPU tensor of shape \\(3,\\)"):
        with FakeAccelerator():
            leaky_running_sum(x)


def test_harness_rejects_what_bare_meta_lets_through():
    """``meta`` alone accepts these three; a GPU (and the harness) does not."""
    x = torch.randn(2, 4, device=META)
    cases = {
        "matmul with a host matrix": lambda: x @ torch.randn(4, 3),
        "embedding of host token ids": lambda: nn.Embedding(5, 4, device=META)(
            torch.tensor([1, 2])
        ),
        "sampling with a host generator": lambda: torch.multinomial(
            x.softmax(-1), 1, generator=torch.Generator().manual_seed(0)
        ),
    }
    for name, fn in cases.items():
        fn()  # bare meta: no error
        with pytest.raises(DeviceLeak):
            with FakeAccelerator():
                fn()
        assert name


def test_harness_strict_mode_rejects_host_tensors_made_from_nothing():
    x = torch.randn(3, device=META)
    with FakeAccelerator(strict=True):
        x + torch.tensor(2.0)  # a 0-dim host scalar is fine (CUDA accepts it too)
        torch.arange(3, device=x.device)
    with pytest.raises(DeviceLeak, match="host allocation"):
        with FakeAccelerator(strict=True):
            torch.arange(3)


def test_harness_lets_loops_log_and_plot():
    """``.item()``, ``float()``, ``bool()`` and copies to the host work (stand-in values)."""
    loss = torch.randn(5, device=META).pow(2).mean()
    with FakeAccelerator() as h:
        assert loss.item() == 1.0 and float(loss) == 1.0 and bool(loss > 0)
        host = loss.detach().cpu()
    assert host.device.type == "cpu" and h.ops > 0


def test_harness_catches_a_cpu_prompt_given_to_a_model_on_the_device():
    model = to_meta(_tiny_gpt())
    with pytest.raises(DeviceLeak, match="embedding"):
        with FakeAccelerator():
            model(torch.zeros(1, 3, dtype=torch.long))


# ----------------------------------------------------------------------------- devices.py


def test_devices_helpers():
    model = to_meta(_tiny_gpt())
    assert devices.model_device(model) == META
    prompt, batch = devices.to_model_device(
        model, torch.zeros(1, 2, dtype=torch.long), {"x": [torch.ones(2)]}
    )
    assert prompt.device == META and batch["x"][0].device == META
    assert devices.generator(0, model) is None  # meta: nothing to draw
    g = devices.generator(3, "cpu")
    assert g.device.type == "cpu" and g.initial_seed() == 3
    with devices.autocast(META, torch.bfloat16):  # no autocast on meta: a no-op, no error
        pass
    with devices.autocast("cpu", torch.bfloat16):
        assert torch.is_autocast_enabled("cpu")
    assert devices.memory_bytes("cpu") is None


# ----------------------------------------------------------------------------- models


def test_gpt_forward_backward_generate_and_maps_on_the_device():
    model = to_meta(_tiny_gpt())
    idx = torch.zeros(2, 5, dtype=torch.long, device=META)
    with FakeAccelerator(strict=True):
        out = model(idx, idx)
        _first(out).float().sum().backward()
        for use_cache in (False, True):  # 12 new tokens: the cache window slides past 8
            gen = model.generate(idx, 12, temperature=0.8, top_k=3, use_cache=use_cache)
            assert gen.shape == (2, 17) and gen.device == META
        maps = model.attention_maps(idx)
    assert all_on_meta(maps)
    assert all(p.grad is not None and p.grad.device == META for p in model.parameters())


def test_vit_forward_backward_on_the_device():
    model = to_meta(ViT(ViTConfig(image_size=8, patch_size=4, d_model=16, n_layers=2, n_heads=2)))
    images = torch.randn(3, 1, 8, 8, device=META)
    with FakeAccelerator(strict=True):
        _first(model(images)).sum().backward()
        nb09.position_similarity(model)
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


@pytest.mark.parametrize("attention_on", [False, True])
def test_seq2seq_rnn_on_the_device(attention_on):
    model = to_meta(Seq2SeqRNN(9, 9, 8, 12, attention=attention_on))
    src = torch.randint(3, 9, (2, 5)).to(META)
    lengths = torch.tensor([5, 3]).to(META)
    tgt = torch.randint(3, 9, (2, 4)).to(META)
    with FakeAccelerator(strict=True):
        _first(model(src, lengths, tgt)).sum().backward()
        tokens, _ = model.greedy_decode(src, lengths, 6)
    assert tokens.device == META


def test_encoder_decoder_transformer_on_the_device():
    model = to_meta(EncoderDecoderTransformer(9, 9, d_model=16, n_heads=2, n_layers=1, max_len=12))
    src = torch.randint(3, 9, (2, 5)).to(META)
    lengths = torch.tensor([5, 3]).to(META)
    tgt = torch.randint(3, 9, (2, 4)).to(META)
    with FakeAccelerator(strict=True):
        _first(model(src, lengths, tgt)).sum().backward()
        tokens, _ = model.greedy_decode(src, lengths, 6)
    assert tokens.device == META


# ----------------------------------------------------------------------------- attention kernels


@pytest.mark.parametrize("causal", [False, True])
def test_attention_kernels_on_the_device(causal):
    q, k, v = (torch.randn(2, 2, 7, 4, device=META) for _ in range(3))
    with FakeAccelerator(strict=True):
        out = attention.tiled_attention(q, k, v, 3, causal=causal)
        attention.scaled_dot_product_attention(q, k, v, is_causal=causal)
        attention.fast_attention(q, k, v, is_causal=causal)
    assert out.shape == (2, 2, 7, 4) and out.device == META


# ----------------------------------------------------------------------------- recipes


@pytest.fixture
def on_meta_profile(monkeypatch):
    """The profile's device is the stand-in accelerator (COURSE_DEVICE=meta), as a GPU would be
    in the gpu profile: recipes that default to the profile's device must use it."""
    monkeypatch.setenv("COURSE_PROFILE", "ci")
    monkeypatch.setenv("COURSE_DEVICE", "meta")


TEXT = "to be, or not to be, that is the question:\n" * 20


def test_profile_device_override(on_meta_profile, monkeypatch):
    from course_utils.runtime import profiles

    assert profiles.current().device == META
    assert devices.resolve(None) == META and "COURSE_DEVICE" in profiles.describe()
    monkeypatch.setenv("COURSE_DEVICE", "not-a-device")
    with pytest.raises(ValueError, match="COURSE_DEVICE"):
        profiles.current()


def test_nb08_training_sampling_and_timing_on_the_device(on_meta_profile):
    from dataclasses import replace

    from course_utils.data.text import CharDataset
    from course_utils.lessons.nb08_gpt import recipe as nb08
    from course_utils.lessons.nb08_gpt.exercises import generate as reference_generate

    cfg = nb08.config("ci")
    cfg = replace(
        cfg,
        model=replace(cfg.model, block_size=8, n_layers=1, d_model=16, n_heads=2, dropout=0.1),
        batch_size=2,
        steps=3,
        eval_every=2,
        eval_batches=1,
        final_eval_batches=1,
        eval_batch_size=2,
    )
    data = CharDataset(TEXT)
    with FakeAccelerator() as h:
        model, history = nb08.train_char_gpt(cfg, data, progress=False, log_every=1)
        assert devices.model_device(model) == META and history.steps_done == 3
        prompt = torch.tensor([data.encode("\n")])  # (1, 1) on the CPU, as the notebook has it
        sample = nb08.on_model_device(reference_generate)
        out = sample(model, prompt, 10, temperature=0.8, top_k=3, seed=1)
        assert out.shape == (1, 11) and out.device.type == "cpu"
        for use_cache in (False, True):
            _, ids = nb08.time_generation(model, prompt, 10, use_cache=use_cache, repeats=1)
        assert nb08.next_token_distribution(model, data.val_data[:20]).device.type == "cpu"
        maps = model.attention_maps(prompt)  # a CPU prompt joins the model
    assert all_on_meta(maps) and h.ops > 100


def test_nb08_autocast_and_fused_optimizer_paths_are_taken_in_the_gpu_recipe():
    from course_utils.lessons.nb08_gpt import recipe as nb08

    cfg = nb08.config("gpu")
    assert cfg.autocast_dtype == torch.bfloat16
    assert cfg.model.n_layers == 6 and cfg.model.n_heads == 6 and cfg.model.d_model == 384


def test_nb06_training_and_analyses_on_the_device(on_meta_profile):
    from dataclasses import replace

    from course_utils.lessons.nb06_multi_head import recipe as nb06

    cfg = replace(nb06.config(), steps=2, batch=4, d_model=16, n_heads=2, n_layers=1, d_ff=16)
    with FakeAccelerator():
        model, task, _ = nb06.train_heads_model(cfg, progress=False)
        assert devices.model_device(model) == META
        x, y = task.sample(8, torch.Generator().manual_seed(1))  # CPU data, as in the notebook
        assert nb06.accuracy(model, x, y).device.type == "cpu"
        assert nb06.attention_maps(model, x).device.type == "cpu"
        nb06.head_ablation(model, x, y)


def test_nb07_gradient_norms_on_the_device(on_meta_profile):
    from dataclasses import replace

    from course_utils.lessons.nb07_transformer_block import recipe as nb07

    cfg = replace(
        nb07.config(), depth=3, stack_d_model=16, stack_d_ff=16, stack_len=4, stack_batch=2
    )
    with FakeAccelerator() as h:
        for variant in nb07.VARIANTS.values():
            norms, stds = nb07.gradient_norms_by_layer(variant, cfg)
            assert norms.shape == (3,) and norms.device.type == "cpu"
    assert h.ops > 0


@pytest.mark.parametrize("name", ["transformer", "rnn", "rnn+attention"])
def test_nb10_training_and_decoding_on_the_device(on_meta_profile, name):
    from dataclasses import replace

    from course_utils.lessons.nb10_full_transformer import recipe as nb10

    cfg = nb10.config()
    cfg = replace(
        cfg,
        task=replace(cfg.task, n_train=16, n_test=8),
        transformer=replace(cfg.transformer, d_model=16, n_heads=2, n_layers=1, d_ff=16),
        batch_size=4,
        steps=2,
        warmup=1,
        eval_points=1,
        eval_subset=4,
    )
    data = nb10.make_data(cfg)
    with FakeAccelerator():
        run = nb10.train_model(name, cfg, data, progress=False)
        assert devices.model_device(run.model) == META
        assert nb10.decode(run.model, data.test[:3]).device.type == "cpu"


def test_nb09_vit_training_on_the_device(on_meta_profile):
    from dataclasses import replace

    from course_utils.data.images import ImageSplit
    from course_utils.lessons.nb09_vit import recipe as nb09

    cfg = nb09.config()
    g = torch.Generator().manual_seed(0)
    data = ImageSplit(
        torch.rand(8, 1, 8, 8, generator=g),
        torch.randint(0, 10, (8,), generator=g),
        torch.rand(4, 1, 8, 8, generator=g),
        torch.randint(0, 10, (4,), generator=g),
        [str(i) for i in range(10)],
    )
    vit = replace(cfg.vit, d_model=16, n_layers=1, n_heads=2)
    tc = replace(cfg.train, epochs=1, batch_size=4, eval_every_epochs=1)
    with FakeAccelerator():
        run = nb09.train_vit(cfg, data, vit=vit, train_cfg=tc, progress=False)
    assert devices.model_device(run.model) == META


def test_data_parallel_step_on_the_device():
    from course_utils.lessons.nb11_attention_at_scale import recipe as nb11
    from course_utils.runtime import distributed

    info = distributed.DistInfo(0, 1, 0, META, None)
    with FakeAccelerator():
        result = nb11.demo_worker(info, steps=2, batch_size=8)
    assert result["world_size"] == 1 and all(
        v.device.type == "cpu" for v in result["state"].values()
    )


def test_data_parallel_backend_says_why():
    from course_utils.runtime import distributed

    backend, note = distributed.data_parallel_backend(2)
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    assert backend == ("nccl" if gpus >= 2 else "gloo")
    assert ("skipped" in note) == (gpus == 1)
    assert backend in note


# ----------------------------------------------------------------------------- exercises


def _solution_function(notebook: str, name: str):
    """The function ``name`` as the solution notebook defines it (its exercise cell run alone,
    after the notebook's imports cell)."""
    import json
    from pathlib import Path

    nb = json.loads((Path(__file__).parents[1] / "solutions" / notebook).read_text())
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    imports = next(src for src in code if "import torch" in src)
    cell = next(src for src in code if f"def {name}(" in src or f"class {name}(" in src)
    namespace: dict = {}
    exec(compile(imports + "\n" + cell, f"{notebook}:{name}", "exec"), namespace)
    return namespace[name]


@pytest.mark.parametrize("causal", [False, True])
def test_notebook_11_solution_tiled_attention_allocates_on_the_device(causal):
    """The crash site of issue 16: the solution's running max / sum / accumulator / positions."""
    tiled = _solution_function("11_attention_at_scale.ipynb", "tiled_attention")
    q, k, v = (torch.randn(1, 2, 7, 4, device=META) for _ in range(3))
    with FakeAccelerator(strict=True):
        assert tiled(q, k, v, 3, causal=causal).device == META


def test_notebook_08_solutions_run_on_the_device():
    gpt_model = _solution_function("08_gpt.ipynb", "GPTModel")
    generate = _solution_function("08_gpt.ipynb", "generate")
    model = to_meta(gpt_model(_tiny_gpt().config))
    idx = torch.zeros(2, 3, dtype=torch.long, device=META)
    with FakeAccelerator(strict=True):
        logits, loss = model(idx, idx)
        loss.backward()
        assert generate(model, idx, 9, temperature=0.9, top_k=4).shape == (2, 12)


def _exercise_ids():
    from course_utils import checks

    return [ex.id for ex in checks.EXERCISES]


@pytest.mark.parametrize("exercise_id", _exercise_ids())
def test_exercise_harness_runs_the_reference_on_the_device(exercise_id):
    """Each exercise's check harness (its cases and its ``call``) drives the verified
    reference with every input on the device: what ``fallback(...)`` hands the later cells."""
    from course_utils import checks

    ex = checks.get(exercise_id)
    case = ex.make_cases(0)[0]
    case = type(case)(case.name, to_meta(case.inputs))
    with FakeAccelerator():
        outputs = ex.call(ex.reference, case)
    assert outputs is not None


def test_greedy_decoders_take_a_source_from_the_cpu():
    """Notebook 10's cross-attention cell decodes one CPU sentence with the trained model."""
    src, lengths = torch.randint(3, 9, (2, 4)), torch.tensor([4, 3])
    for model in (
        EncoderDecoderTransformer(9, 9, d_model=16, n_heads=2, n_layers=1, max_len=12),
        Seq2SeqRNN(9, 9, 8, 12, attention=True),
    ):
        model = to_meta(model)
        with FakeAccelerator(strict=True):
            tokens, _ = model.greedy_decode(src, lengths, 5)
        assert tokens.device == META


def test_nb11_kv_cache_demo_runs_on_the_device():
    """Notebook 11's KV-cache cell: GPT on the device, a CPU prompt, the generic timer."""
    from course_utils.lessons.nb11_attention_at_scale import recipe as nb11

    model = to_meta(_tiny_gpt(dropout=0.0))
    prompt = torch.zeros(1, 1, dtype=torch.long)
    with FakeAccelerator():
        out, seconds, clock = nb11.timed(lambda: model.generate(prompt, 4, temperature=0.0), META)
    assert out.device == META and seconds >= 0 and clock == "wall time on meta"
    _, _, clock = nb11.timed(lambda: None, "cpu")
    assert clock == "CPU time"


def test_nb12_captioner_training_and_decoding_on_the_device(on_meta_profile):
    from dataclasses import replace

    from course_utils.lessons.nb12_image_captioning import recipe as nb12

    cfg = replace(
        nb12.config(),
        n_train=16,
        n_test=4,
        d_model=16,
        n_heads=2,
        d_ff=16,
        steps=2,
        batch_size=4,
        warmup=1,
    )
    data = nb12.make_data(cfg)
    with FakeAccelerator():
        for pooled in (False, True):
            run = nb12.train_captioner(cfg, data, pooled=pooled, progress=False)
            assert devices.model_device(run.model) == META
        assert nb12.greedy_captions(run.model, data.test).device.type == "cpu"
        assert nb12.cross_attention(run.model, data.test.images, data.test.captions).shape[-1] == 1
