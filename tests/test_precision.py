"""Mixed precision per device (course_utils.runtime.precision): bfloat16 where the card has it,
float16 with a gradient scaler on a T4-class card, float32 off CUDA; the device's capabilities
are faked, so this runs on the CPU."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from course_utils import gpu_plan
from course_utils.runtime import precision

T4 = SimpleNamespace(name="Tesla T4", major=7, minor=5, total_memory=15_843_721_216)
A100 = SimpleNamespace(name="NVIDIA A100-SXM4-40GB", major=8, minor=0, total_memory=42_298_834_944)


@pytest.fixture
def card(monkeypatch):
    """Pretend CUDA device 0 is ``props``, with native bfloat16 iff compute capability >= 8."""

    def fake(props):
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index=0: props)
        monkeypatch.setattr(
            torch.cuda, "is_bf16_supported", lambda including_emulation=True: props.major >= 8
        )

    return fake


def test_a_t4_gets_float16_with_a_gradient_scaler_and_says_why(card):
    card(T4)
    p = precision.choose("cuda")
    assert p.dtype == torch.float16 and p.grad_scaler and p.label == "fp16 + GradScaler"
    assert "Tesla T4" in p.reason and "7.5" in p.reason and "no native bfloat16" in p.reason


def test_an_a100_keeps_bfloat16_without_a_scaler(card):
    card(A100)
    p = precision.choose("cuda:0")
    assert (p.dtype, p.grad_scaler, p.label) == (torch.bfloat16, False, "bf16")
    assert "8.0" in p.reason and "native" in p.reason


def test_emulated_bfloat16_does_not_count_as_native(monkeypatch):
    # torch reports bf16 "supported" on a T4 when emulation counts; the course asks without it
    seen = []

    def is_bf16_supported(including_emulation=True):
        seen.append(including_emulation)
        return including_emulation

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", is_bf16_supported)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index=0: T4)
    assert precision.choose("cuda").dtype == torch.float16 and seen == [False]


def test_off_cuda_everything_is_float32():
    for device in ("cpu", "meta"):
        p = precision.choose(device)
        assert (p.dtype, p.grad_scaler, p.label) == (None, False, "fp32")


def test_resolve_maps_a_recipes_bfloat16_to_what_the_card_has(card):
    card(T4)
    assert precision.resolve(torch.bfloat16, "cuda").label == "fp16 + GradScaler"
    assert precision.resolve(None, "cuda").label == "fp32"
    assert precision.resolve(torch.bfloat16, "cpu").label == "fp32"
    card(A100)
    assert precision.resolve(torch.bfloat16, "cuda").label == "bf16"
    assert precision.resolve(torch.float16, "cuda").label == "fp16 + GradScaler"


def test_a_16_gb_card_counts_as_one():
    assert T4.total_memory >= gpu_plan.CARD_16GB
    assert 12e9 < gpu_plan.CARD_16GB


def test_course_doctor_prints_the_precision_and_memory_it_chose_on_a_t4(card, monkeypatch):
    from course_utils import doctor

    card(T4)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    lines = doctor.precision_lines()
    assert lines[0].startswith("precision   fp16 + GradScaler: Tesla T4, compute capability 7.5")
    assert lines[1].startswith("gpu memory  15.8 GB: the gpu profile fits (largest estimate")
    card(A100)
    assert doctor.precision_lines()[0].startswith("precision   bf16: NVIDIA A100")


def test_course_doctor_on_the_cpu_names_both_gpu_precisions(monkeypatch):
    from course_utils import doctor

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    (line,) = doctor.precision_lines()
    assert "fp32 here" in line and "bf16" in line and "fp16 with a gradient scaler" in line


def test_autocast_for_turns_bfloat16_into_float16_on_a_t4_only(card):
    card(T4)
    cuda = torch.device("cuda")
    assert precision.autocast_for(torch.bfloat16, cuda) == torch.float16
    assert precision.autocast_for(torch.float16, cuda) == torch.float16
    assert precision.autocast_for(None, cuda) is None
    assert precision.autocast_for(torch.bfloat16, "cpu") == torch.bfloat16  # CPU autocast as asked
    card(A100)
    assert precision.autocast_for(torch.bfloat16, cuda) == torch.bfloat16


def test_the_training_loop_runs_what_the_card_supports_with_the_scaler_it_needs(monkeypatch):
    """train() asks precision.autocast_for once and uses its answer for both the autocast and
    the gradient scaler: a T4's float16 gets an enabled scaler (faked here on the CPU)."""
    from course_utils.runtime import devices, training

    asked, scalers, autocasts = [], [], []

    def t4_autocast_for(requested, device):
        asked.append((requested, torch.device(device).type))
        return torch.float16 if requested == torch.bfloat16 else requested

    real_autocast, real_scaler = devices.autocast, training.gradient_scaler
    monkeypatch.setattr(precision, "autocast_for", t4_autocast_for)
    monkeypatch.setattr(
        training, "gradient_scaler", lambda d, t: scalers.append(real_scaler(d, t)) or scalers[-1]
    )
    monkeypatch.setattr(
        devices, "autocast", lambda d, t: autocasts.append(t) or real_autocast(d, t)
    )
    model = torch.nn.Sequential(torch.nn.Linear(4, 1))
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    training.train(
        model,
        [(x, y)],
        loss_fn=lambda m, b: torch.nn.functional.mse_loss(m(b[0]).float(), b[1]),
        steps=2,
        autocast_dtype=torch.bfloat16,
        progress=False,
    )
    assert asked[0] == (torch.bfloat16, "cpu")
    (scaler,) = scalers
    assert scaler.is_enabled()  # float16: the loss is scaled
    assert autocasts and set(autocasts) == {torch.float16}


def test_the_gpu_check_has_a_t4_plan_labelled_as_an_estimate():
    from course_utils.bench import gpu_check

    datacentre = gpu_check.plan(gpu_check.parser().parse_args(["--dry-run"]))
    t4 = gpu_check.plan(gpu_check.parser().parse_args(["--dry-run", "--card", "t4"]))
    assert "ESTIMATE" in t4[1] and "T4" in t4[1] and "ESTIMATE" not in datacentre[1]
    assert any("fp16 autocast + GradScaler" in line for line in t4)
    total = {
        name: int(p[-1].split("~")[1].split()[0]) for name, p in (("dc", datacentre), ("t4", t4))
    }
    assert total["t4"] == 5 * total["dc"] == 5 * sum(gpu_check.BUDGET_S.values())


def test_the_gpu_plan_counts_a_t4s_memory_as_enough(card, monkeypatch):
    from course_utils import gpu_plan

    card(T4)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: T4.name)
    assert "this machine: Tesla T4, 16 GB (enough)" in gpu_plan.doctor_lines()
    small = SimpleNamespace(name="small", major=7, minor=5, total_memory=8_000_000_000)
    card(small)
    assert any("below 16 GB: sizes adapt" in line for line in gpu_plan.doctor_lines())
