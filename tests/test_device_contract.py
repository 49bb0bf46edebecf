"""The device contract (``core.Contract``: every tensor the candidate returns sits on its
inputs' device) runs on an accelerator for every exercise: CUDA when the machine has one, else
the ``meta`` stand-in under :class:`device_harness.FakeAccelerator` (CI has no GPU). The device
is chosen, never skipped: the same code path (inputs moved to a non-CPU device, the contract
judged there) runs in CI and on a GPU machine.

On the accelerator the reference keeps the contract (before issue 31 the contract also judged the
check's own records, the Python numbers it wraps as CPU tensors, so the references of 01.3, 04.2,
05.3, 07.2, 08.1, 08.5, 10.3 and 11.1 broke it on any device but the CPU), and an answer that
hands its result back on the CPU breaks it with a message naming both devices.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from device_harness import FakeAccelerator

from course_utils import checks
from course_utils.checks.core import Case, contract_problem_of

ACCELERATOR = torch.device("cuda") if torch.cuda.is_available() else torch.device("meta")
EXERCISE_IDS = [e.id for e in checks.EXERCISES]


def on_accelerator():
    """The context the accelerator's runs need: none on CUDA, the stand-in's guard on meta."""
    return FakeAccelerator() if ACCELERATOR.type == "meta" else contextlib.nullcontext()


def _moved(value):
    if isinstance(value, torch.Tensor):
        return value.to(ACCELERATOR)
    if isinstance(value, (tuple, list)):
        return type(value)(_moved(v) for v in value)
    if isinstance(value, dict):
        return {k: _moved(v) for k, v in value.items()}
    return value


def device_case(exercise) -> Case:
    """The exercise's first case with every tensor on the accelerator."""
    case = exercise.make_cases(0)[0]
    return Case(f"{case.name}, on {ACCELERATOR.type}", _moved(case.inputs))


def _to_cpu(value):
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, (tuple, list)):
        return type(value)(_to_cpu(v) for v in value)
    return value


def _on_the_cpu(reference):
    """The reference, handing every tensor it returns back on the CPU."""
    if isinstance(reference, type):

        def forward(self, *args, **kwargs):
            return _to_cpu(reference.forward(self, *args, **kwargs))

        return type("OnCPU" + reference.__name__, (reference,), {"forward": forward})

    def variant(*args, **kwargs):
        return _to_cpu(reference(*args, **kwargs))

    return variant


def _takes_tensors(exercise) -> bool:
    return any(isinstance(v, torch.Tensor) for v in exercise.make_cases(0)[0].inputs.values())


# exercises whose cases hold no tensor (sizes, a config, a seeded table): no device to follow
SIZES_IN = {"04.3", "05.2", "07.4", "08.3", "08.4", "08.6", "12.2", "13.1", "13.4", "13.6"}


def test_the_exercises_without_tensor_inputs_are_the_listed_ones():
    assert {e for e in EXERCISE_IDS if not _takes_tensors(checks.get(e))} == SIZES_IN


@pytest.mark.parametrize("exercise_id", sorted(set(EXERCISE_IDS) - SIZES_IN))
def test_the_reference_keeps_the_device_contract_on_the_accelerator(exercise_id):
    ex = checks.get(exercise_id)
    with on_accelerator():
        outputs = ex.call(ex.reference, device_case(ex))
    assert contract_problem_of(outputs) is None, contract_problem_of(outputs)


@pytest.mark.parametrize(
    "exercise_id", sorted(e for e in set(EXERCISE_IDS) - SIZES_IN if e[:2] != "13")
)
def test_a_result_handed_back_on_the_cpu_breaks_the_device_contract(exercise_id):
    """Every exercise whose inputs are tensors and whose answer returns tensors (the capstone's
    make_model returns a model: its checks move the ids to the model's device themselves)."""
    ex = checks.get(exercise_id)
    returned = []
    cpu = _on_the_cpu(ex.reference)
    with on_accelerator():
        try:
            outputs = ex.call(cpu, device_case(ex))
        except Exception as exc:  # the check's own code met the CPU tensor: also a refusal
            returned.append(exc)
            outputs = {}
    problem = contract_problem_of(outputs)
    if exercise_id in NO_TENSOR_RETURNED:
        assert problem is None, problem
        return
    assert returned or (problem and f"on cpu, its inputs are on {ACCELERATOR.type}" in problem), (
        problem
    )


# answers that return Python values (numbers, bools, lists, parameter groups): nothing to move
NO_TENSOR_RETURNED = {"01.3", "04.2", "08.5"}


def test_the_accelerator_is_chosen_never_skipped():
    """CUDA when present (a GPU machine runs the same tests on it), else meta: never the CPU."""
    assert ACCELERATOR.type == ("cuda" if torch.cuda.is_available() else "meta")
    assert device_case(checks.get("03.1")).inputs["q"].device.type == ACCELERATOR.type
