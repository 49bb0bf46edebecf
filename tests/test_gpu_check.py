"""The gpu profile's sizing (memory-adapted sweep, stated expectations, step cap) and the prepared
GPU check (``benchmarks/gpu.sh``), exercised on the CPU with tiny sizes."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import torch

from course_utils import doctor, gpu_plan, lessons
from course_utils.bench import gpu_check
from course_utils.lessons.nb01_rnn_bottleneck import recipe as nb01
from course_utils.lessons.nb08_gpt import recipe as nb08
from course_utils.lessons.nb11_attention_at_scale import recipe as nb11
from course_utils.lessons.nb12_image_captioning import recipe as nb12
from course_utils.modeling.models.gpt import GPTConfig
from course_utils.runtime import profiles

ROOT = Path(__file__).parents[1]


# ----------------------------------------------------------------------------- sized for real cards


def test_naive_sweep_stops_where_it_would_not_fit_and_says_so():
    cfg = nb11.config()
    n16k = 16384
    assert nb11.naive_bytes(n16k, cfg, torch.float16) == 3 * 8 * n16k * n16k * 2  # 12.9 GB
    big = dict(cfg.__dict__, lengths=(1024, 4096, 16384), naive_max=16384)
    cfg = type(cfg)(**big)
    n_max, why = nb11.naive_limit(cfg, "cuda", torch.float16, free_bytes=15 * 10**9)
    assert n_max == 4096
    assert "stops at n = 4096" in why and "n = 16384" in why and "15.0 GB free" in why
    n_max, why = nb11.naive_limit(cfg, "cuda", torch.float16, free_bytes=80 * 10**9)
    assert n_max == 16384 and "measured up to n = 16384" in why
    n_max, _ = nb11.naive_limit(cfg, "cuda", torch.float16, free_bytes=10**6)
    assert n_max == 0  # nothing fits: the sweep measures no naive point


def test_every_notebook_has_a_gpu_estimate_and_doctor_prints_them():
    notebooks = sorted(p.name[:2] for p in (ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))
    assert notebooks == sorted(gpu_plan.estimates()) == [x.number for x in lessons.discover()]
    assert all(lessons.get(key).what_on_gpu() for key in notebooks)
    report = "\n".join(doctor.report())
    for key in notebooks:
        assert f"gpu profile {key}: about" in report
    assert "not yet measured" in report and f"{gpu_plan.MIN_MEMORY_GB} GB" in report


def test_the_doctor_describes_each_notebook_from_its_recipe_table():
    gpt, r = nb08.RECIPES.gpu, nb01.RECIPES.gpu
    m = gpt.model
    nb08_what, nb01_what = what_on_gpu("08"), what_on_gpu("01_rnn_bottleneck")
    assert f"GPT {m.n_layers}x{m.n_heads}x{m.d_model}, {gpt.steps} steps, bf16" in nb08_what
    assert f"val <= {nb08.GPU_VAL_BAR}" in nb08_what
    assert f"{len(r.hidden_sizes)} widths" in nb01_what and r.budget in nb01_what
    assert f"n = {max(nb11.SIZES.gpu.lengths)}" in what_on_gpu("11")
    assert f"gpu profile {gpu_plan.row('08')}; {nb08_what}" in doctor.report()
    assert f"{nb12.SIZES.gpu.steps} steps each" in what_on_gpu("12")
    with pytest.raises(KeyError, match="'99'"):
        what_on_gpu("99")  # no lesson has that number


def test_changing_a_recipe_table_changes_the_gpu_plan_and_the_doctor(monkeypatch):
    from dataclasses import replace

    gpu = nb08.RECIPES.gpu
    bigger = replace(gpu, model=replace(gpu.model, n_layers=8, d_model=480), steps=1234)
    monkeypatch.setattr(nb08, "RECIPES", replace(nb08.RECIPES, gpu=bigger))
    monkeypatch.setattr(nb08, "GPU_VAL_BAR", 1.39)
    assert "GPT 8x6x480, 1234 steps" in what_on_gpu("08")
    report = "\n".join(doctor.report())
    assert (
        "gpu profile 08: about 4 min, up to 6 GB of GPU memory; GPT 8x6x480, 1234 steps" in report
    )
    assert "val <= 1.39" in what_on_gpu("08")
    wider = replace(nb01.RECIPES.gpu, hidden_sizes=(8, 16), steps=7)
    monkeypatch.setattr(nb01, "RECIPES", replace(nb01.RECIPES, gpu=wider))
    assert "2 widths (8 to 16), 7 steps" in what_on_gpu("01")


def what_on_gpu(notebook: str) -> str:
    """What ``course doctor`` says notebook ``notebook`` runs in the gpu profile."""
    return lessons.get(notebook).what_on_gpu()


NANOGPT_A100_MINUTES = 3.0  # nanoGPT's train_shakespeare_char: 5000 steps x 64 x 256 tokens


def _gpt_train_flops(cfg) -> float:
    """Training FLOPs of an nb08 recipe on tiny-shakespeare's 65 characters."""
    from dataclasses import replace

    from course_utils.bench.gpt import flops_per_token

    m = replace(cfg.model, vocab_size=65)
    per_token = flops_per_token(m.param_count(), m.n_layers, m.d_model, m.block_size)
    return cfg.steps * cfg.tokens_per_step * per_token


def _gpt_estimate_covers(cfg, minutes: float) -> bool:
    """Whether ``minutes`` is at least nanoGPT's A100 time scaled by the recipe's FLOPs."""
    reference = nb08.Config(
        model=GPTConfig.preset("nanogpt-gpu", bias=False),
        batch_size=64,
        steps=5000,
        lr=1e-3,
        min_lr=1e-4,
        warmup=100,
    )
    return minutes >= NANOGPT_A100_MINUTES * _gpt_train_flops(cfg) / _gpt_train_flops(reference)


def test_the_estimates_do_not_contradict_the_tables():
    from dataclasses import replace

    assert _gpt_estimate_covers(nb08.RECIPES.gpu, gpu_plan.estimates()["08"].minutes)
    longer = replace(nb08.RECIPES.gpu, steps=10_000)
    assert not _gpt_estimate_covers(longer, gpu_plan.estimates()["08"].minutes)
    # notebook 11's naive attention at its longest length fits the memory estimate (GiB)
    cfg = nb11.SIZES.gpu
    peak = nb11.naive_bytes(cfg.naive_max, cfg, torch.bfloat16) / 2**30
    assert peak <= gpu_plan.estimates()["11"].memory_gb <= gpu_plan.MIN_MEMORY_GB


def test_describe_states_the_gpu_expectations_only_in_the_gpu_profile(monkeypatch):
    monkeypatch.setenv("COURSE_PROFILE", "ci")
    assert "\n" not in profiles.describe()  # the stored ci/cpu outputs do not change
    monkeypatch.setenv("COURSE_PROFILE", "gpu")
    text = profiles.describe("08")
    assert "sized for one current data-centre GPU" in text and "08: about 4 min" in text
    monkeypatch.setenv("JPY_SESSION_NAME", "/home/me/course/notebooks/11_attention_at_scale.ipynb")
    assert "11: about" in profiles.describe()


def test_step_cap(monkeypatch):
    from course_utils.runtime.training import train

    assert profiles.cap_steps(500) == 500
    monkeypatch.setenv("COURSE_MAX_STEPS", "3")
    assert profiles.cap_steps(500) == 3 and profiles.cap_steps(2) == 2
    model = torch.nn.Linear(2, 1)
    batch = (torch.randn(4, 2), torch.randn(4, 1))
    history = train(
        model,
        lambda step: batch,
        steps=50,
        loss_fn=lambda m, b: ((m(b[0]) - b[1]) ** 2).mean(),
        progress=False,
    )
    assert history.step[-1] == 2  # three steps, 0..2
    monkeypatch.setenv("COURSE_MAX_STEPS", "zero")
    with pytest.raises(ValueError, match="COURSE_MAX_STEPS"):
        profiles.cap_steps(5)


def test_the_step_cap_reaches_every_recipe_table_with_steps(monkeypatch):
    """The H200 run: notebook 01's gpu recipe trains with the student's own loop for
    ``r.steps``; without the cap reaching the table, COURSE_MAX_STEPS=60 left it at 3,000 steps
    and the notebook ran past the lease (benchmarks/results/gpu.md)."""
    assert nb01.RECIPES.for_profile("gpu").steps == 3000
    monkeypatch.setenv("COURSE_MAX_STEPS", "60")
    assert nb01.RECIPES.for_profile("gpu").steps == 60
    assert nb12.SIZES.for_profile("gpu").steps == 60
    assert nb08.config("gpu").steps == 60
    table = profiles.ProfileTable(ci=5, cpu=50, gpu=500)  # a plain number is not a recipe
    assert table.for_profile("gpu") == 500
    small = nb01.RECIPES.for_profile("ci")
    monkeypatch.setenv("COURSE_MAX_STEPS", str(10 * small.steps))
    assert nb01.RECIPES.for_profile("ci") is nb01.RECIPES.ci  # nothing to cap: the same object


# ----------------------------------------------------------------------------- the GPU check


def test_gpu_check_dry_run_prints_the_plan_and_writes_nothing(tmp_path, capsys):
    assert gpu_check.main(["--dry-run", "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    for stage in gpu_check.STAGES:
        assert f"  {stage}" in text
    assert f"val <= {nb08.GPU_VAL_BAR}" in text and "NCCL" in text and "total budget ~550 s" in text
    assert not list(tmp_path.iterdir())


def test_gpu_check_runs_its_stages_on_the_cpu(tmp_path, monkeypatch):
    """doctor, paths and the GPT bar, tiny: the logic a GPU run depends on, proven here."""
    monkeypatch.delenv("COURSE_MAX_STEPS", raising=False)
    argv = ["--profile", "ci", "--device", "cpu", "--max-steps", "2", "--bar-steps", "2"]
    argv += ["--stages", "doctor", "paths", "gpt-bar", "--out", str(tmp_path)]
    assert gpu_check.main(argv) == 0
    report = json.loads((tmp_path / "gpu.json").read_text())
    stages = report["stages"]
    assert [stages[s]["status"] for s in ("doctor", "paths", "gpt-bar")] == ["ok"] * 3
    paths = stages["paths"]
    assert paths["gpt_step"]["steps"] == 2 and paths["kv_cache_identical"] is True
    assert "MATH" in paths["sdpa_backends"] and paths["sdpa_kernel"]
    if not torch.cuda.is_available():
        assert paths["data_parallel"]["backend"] == "skipped"
        assert "no GPU" in paths["data_parallel"]["note"]
    assert stages["gpt-bar"]["met"] is None  # a 2-step ci run is not judged against the bar
    md = (tmp_path / "gpu.md").read_text()
    assert "| paths | ok |" in md and "GPT bar: val" in md and "not judged" in md
    assert "== paths" in (tmp_path / "gpu.txt").read_text()


def test_gpu_check_reports_a_failing_stage_and_exits_1(tmp_path):
    argv = ["--profile", "ci", "--stages", "notebooks", "--solutions", str(tmp_path / "none")]
    assert gpu_check.main([*argv, "--out", str(tmp_path)]) == 1
    stage = json.loads((tmp_path / "gpu.json").read_text())["stages"]["notebooks"]
    assert stage["status"].startswith("FAILED: FileNotFoundError")


@pytest.mark.slow
def test_gpu_check_runs_notebooks_in_the_profile_with_the_step_cap(tmp_path):
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(
            "import os\n"
            "from course_utils.runtime.profiles import cap_steps, profile_name\n"
            "assert profile_name() == 'ci', profile_name()\n"
            "assert cap_steps(1000) == 3, cap_steps(1000)\n"
        ),
        # a quality claim that 3 steps cannot meet prints its cross; the smoke goes on
        nbformat.v4.new_code_cell(
            "from course_utils.authoring.claims import claim\n"
            "claim('the validation loss reaches the bar', False)\n"
            "print('smoke went on')"
        ),
    ]
    solutions = tmp_path / "solutions"
    solutions.mkdir()
    nbformat.write(nb, solutions / "00_probe.ipynb")
    argv = ["--profile", "ci", "--stages", "notebooks", "--max-steps", "3"]
    assert gpu_check.main([*argv, "--solutions", str(solutions), "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "gpu.json").read_text())["stages"]["notebooks"]["rows"]
    assert rows == [{"notebook": "00_probe", "seconds": rows[0]["seconds"], "status": "ok"}]
    assert os.environ.get("COURSE_CLAIMS_KEEP_GOING") is None  # only inside the smoke


def _probe_solutions(tmp_path: Path, **cells: str) -> Path:
    import nbformat

    solutions = tmp_path / "solutions"
    solutions.mkdir()
    for name, source in cells.items():
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(source)]
        nbformat.write(nb, solutions / f"{name}.ipynb")
    return solutions


@pytest.mark.slow
def test_gpu_check_stops_a_slow_notebook_at_its_wall_clock_limit_and_fails_the_stage(tmp_path):
    """The H200 run: nbclient's timeout is per cell, so notebook 01 ran 460 s until the lease
    ended and nothing after it ran. Each notebook now runs in its own process group, killed
    at --nb-timeout; the stage is FAILED and names it, and the next notebook still runs."""
    solutions = _probe_solutions(
        tmp_path,
        **{
            "00_slow": "import time\nfor _ in range(3000):\n    time.sleep(0.1)",
            "01_broken": "raise RuntimeError('probe')",
            "02_fine": "print('fine')",
        },
    )
    argv = ["--profile", "ci", "--stages", "notebooks", "--nb-timeout", "25"]
    t0 = time.perf_counter()
    assert gpu_check.main([*argv, "--solutions", str(solutions), "--out", str(tmp_path)]) == 1
    assert time.perf_counter() - t0 < 120  # not the 300 s of the sleeping cell
    stage = json.loads((tmp_path / "gpu.json").read_text())["stages"]["notebooks"]
    status = {row["notebook"]: row["status"] for row in stage["rows"]}
    assert status["00_slow"] == "timed out after 25 s (--nb-timeout)"
    assert "probe" in status["01_broken"]
    assert status["02_fine"] == "ok"
    assert stage["status"] == "FAILED: 2 failed: 00_slow, 01_broken"


def test_gpu_check_writes_its_report_after_every_stage(tmp_path, monkeypatch):
    """A run stopped by a lease's time limit keeps the stages it finished."""
    seen = []

    def doctor_stage(opts):
        return {"probe": 1}

    def bench_stage(opts):
        seen.append(json.loads((tmp_path / "gpu.json").read_text())["stages"])
        return {}

    monkeypatch.setitem(gpu_check.RUNNERS, "doctor", doctor_stage)
    monkeypatch.setitem(gpu_check.RUNNERS, "bench", bench_stage)
    argv = ["--stages", "doctor", "bench", "--out", str(tmp_path), "--device", "cpu"]
    assert gpu_check.main(argv) == 0
    assert list(seen[0]) == ["doctor"] and seen[0]["doctor"]["probe"] == 1


def test_gpu_sh_calls_the_check():
    script = (ROOT / "benchmarks" / "gpu.sh").read_text()
    assert "python -m course_utils.bench.gpu_check" in script and "set -euo pipefail" in script


def test_a_long_vit_run_states_its_expected_time_first():
    from course_utils.lessons.nb09_vit import recipe as nb09

    cfg = nb09.config("gpu", dataset="cifar10")
    per_epoch = -(-50_000 // cfg.train.batch_size)
    assert cfg.train.epochs * per_epoch >= nb09.LONG_RUN_STEPS  # the CIFAR-10 run is long
    for profile in ("ci", "cpu"):  # the digits runs are not: their stored outputs stay as they are
        c = nb09.config(profile)
        assert c.train.epochs * -(-len(nb09.load_images(c).x_train) // c.train.batch_size) < (
            nb09.LONG_RUN_STEPS
        )
    line = nb09.long_run_notice("ViT", 39_200, 200, torch.device("cuda"))
    assert "39,200 optimizer steps" in line and "about 20 min" in line and "estimate" in line


def test_data_parallel_stage_runs_notebook_11s_gpt_demo_over_nccl(monkeypatch):
    from types import SimpleNamespace

    from course_utils.bench import gpu_check
    from course_utils.lessons.nb11_attention_at_scale import recipe as nb11
    from course_utils.runtime import distributed

    calls = []
    monkeypatch.setattr(distributed, "data_parallel_backend", lambda n: ("nccl", f"{n} GPUs"))
    monkeypatch.setattr(
        nb11,
        "data_parallel_demo",
        lambda **kw: calls.append(kw) or SimpleNamespace(max_abs_diff=1e-7),
    )
    assert gpu_check.data_parallel_stage(4) == {
        "backend": "nccl",
        "note": "4 GPUs",
        "max_abs_diff": 1e-7,
    }
    assert calls == [dict(world_size=4, steps=5, batch_size=32, backend="nccl", model="gpt")]


def test_data_parallel_stage_says_why_it_skips_without_two_gpus():
    from course_utils.bench import gpu_check

    out = gpu_check.data_parallel_stage(0)
    assert out["backend"] == "skipped" and out["note"]
