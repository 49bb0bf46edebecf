"""course_utils.runtime.profiles: profile choice, the COURSE_PROFILE override, pick() and seeding."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
import torch

from course_utils.runtime import profiles


@pytest.mark.parametrize("name", profiles.PROFILES)
def test_course_profile_environment_variable_overrides_detection(monkeypatch, name):
    monkeypatch.setenv(profiles.ENV_VAR, name.upper() + " ")  # case and spaces tolerated
    assert profiles.profile_name() == name
    p = profiles.current()
    assert p.name == name and p.source == profiles.ENV_VAR
    if name in ("ci", "cpu"):
        assert p.device == torch.device("cpu")  # never a GPU, even when one exists
    assert name in profiles.describe()


def test_invalid_profile_is_a_clear_error_listing_the_choices(monkeypatch):
    monkeypatch.setenv(profiles.ENV_VAR, "laptop")
    with pytest.raises(ValueError, match="'laptop' is not a profile; choose one of ci, cpu, gpu"):
        profiles.profile_name()


def test_auto_detection_picks_gpu_only_with_cuda(monkeypatch):
    monkeypatch.delenv(profiles.ENV_VAR, raising=False)
    expected = "gpu" if torch.cuda.is_available() else "cpu"
    assert profiles.profile_name() == expected
    assert profiles.current().source == "auto-detected"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert profiles.profile_name() == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert profiles.profile_name() == "gpu"


@pytest.mark.parametrize("name, expected", [("ci", 1), ("cpu", 2), ("gpu", 3)])
def test_pick_returns_the_value_of_the_active_profile(monkeypatch, name, expected):
    monkeypatch.setenv(profiles.ENV_VAR, name)
    assert profiles.pick(ci=1, cpu=2, gpu=3) == expected


def test_pick_on_gpu_falls_back_to_the_cpu_value_when_gpu_is_not_given(monkeypatch):
    monkeypatch.setenv(profiles.ENV_VAR, "gpu")
    assert profiles.pick(ci="small", cpu="medium") == "medium"


def test_best_device_prefers_cuda_then_mps_then_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    mps = getattr(torch.backends, "mps", None)
    if mps is not None:
        monkeypatch.setattr(mps, "is_available", lambda: False)
    assert profiles.best_device() == torch.device("cpu")
    if mps is not None:
        monkeypatch.setattr(mps, "is_available", lambda: True)
        assert profiles.best_device() == torch.device("mps")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert profiles.best_device() == torch.device("cuda")


def test_seed_everything_makes_python_numpy_and_torch_repeatable():
    def draw():
        g = profiles.seed_everything(123)
        return (
            random.random(),
            float(np.random.rand()),
            float(torch.rand(())),
            float(torch.rand((), generator=g)),
        )

    first, second = draw(), draw()
    assert first == second
    profiles.seed_everything(124)
    assert random.random() != first[0]


def test_seed_everything_returns_a_generator_seeded_like_torch():
    g = profiles.seed_everything(7)
    assert isinstance(g, torch.Generator) and g.initial_seed() == 7
    assert torch.equal(
        torch.rand(3, generator=g), torch.rand(3, generator=torch.Generator().manual_seed(7))
    )


def test_using_profile_sets_the_variable_for_the_block_and_restores_it(monkeypatch):
    monkeypatch.setenv("COURSE_PROFILE", "cpu")
    with profiles.using_profile("ci"):
        assert profiles.profile_name() == "ci"
    assert os.environ["COURSE_PROFILE"] == "cpu"
    monkeypatch.delenv("COURSE_PROFILE")
    with pytest.raises(RuntimeError), profiles.using_profile("gpu"):
        assert os.environ["COURSE_PROFILE"] == "gpu"
        raise RuntimeError("the block failed")
    assert "COURSE_PROFILE" not in os.environ  # restored to unset, even after an error
    with profiles.using_profile(None):
        assert "COURSE_PROFILE" not in os.environ
