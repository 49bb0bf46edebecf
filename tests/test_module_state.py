"""course_utils.modeling.module_state: the one ``model_device`` and the ``eval_mode`` context."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
import torch.nn as nn

from course_utils.modeling.module_state import eval_mode, model_device
from course_utils.runtime import devices


@pytest.mark.parametrize("was_training", [True, False])
def test_eval_mode_switches_every_submodule_off_and_restores_the_flag(was_training):
    model = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5)).train(was_training)
    with eval_mode(model) as inside:
        assert inside is model
        assert not any(m.training for m in model.modules())
    assert all(m.training == was_training for m in model.modules())


def test_eval_mode_restores_the_flag_when_the_block_raises():
    model = nn.Dropout(0.5).train()
    with pytest.raises(RuntimeError, match="boom"), eval_mode(model):
        raise RuntimeError("boom")
    assert model.training


def test_model_device_reads_parameters_then_buffers_then_defaults_to_the_cpu():
    assert model_device(nn.Linear(2, 2).to("meta")) == torch.device("meta")
    norm = nn.BatchNorm1d(3, affine=False).to("meta")  # buffers only
    assert model_device(norm) == torch.device("meta")
    assert model_device(nn.ReLU()) == torch.device("cpu")
    assert devices.model_device is model_device  # one definition, re-exported by the runtime


def test_to_device_moves_a_dataclass_batch_with_a_to_method():
    @dataclass
    class Pair:
        x: torch.Tensor

        def to(self, device):
            return Pair(self.x.to(device))

    moved = devices.to_device({"a": Pair(torch.ones(2)), "b": 3}, "meta")
    assert moved["a"].x.device.type == "meta" and moved["b"] == 3
