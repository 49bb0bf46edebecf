"""Every registered exercise, whatever its notebook: the course's own answer gets full points,
both in the student's self-check and through the official grader's harvest-and-judge path
(outputs encoded without pickle, loaded by the trusted side, judged outside the kernel).

This is what lets ``test_notebooks.py`` grade one solution end to end instead of all twelve.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from course_utils import checks
from course_utils.checks import core
from course_utils.grading import harvest as hv

IDS = [ex.id for ex in checks.EXERCISES]


@pytest.mark.parametrize("exercise_id", IDS)
def test_the_reference_gets_full_points_through_the_graders_harvest(exercise_id, tmp_path):
    ex = checks.get(exercise_id)
    assert checks.run(exercise_id, ex.reference).passed

    cases = ex.make_cases(0)
    status, outputs, message = core.collect_outputs(ex, ex.reference, cases)
    assert status == core.PASSED, message
    arrays, entries = hv.trusted_namespace()["_encode"](outputs, torch)
    np.savez(tmp_path / "outputs.npz", **arrays)
    (tmp_path / "result.json").write_text(json.dumps({"status": "passed", "outputs": entries}))
    harvested = hv.load_harvest(str(tmp_path), len(cases))
    assert harvested.status == "passed"
    result = core.judge(ex, cases, harvested.outputs)
    assert result.passed and result.points == ex.points > 0, result.message


def test_a_broken_contract_survives_the_graders_harvest(tmp_path):
    """A contract breach travels as plain data (the "contract" output, uint8 bytes) through the
    grader's encoding, and the trusted judge fails the answer with the same message."""
    from course_utils.modeling import layers

    class Detached(layers.MultiHeadAttention):
        def forward(self, x, attn_mask=None):
            return super().forward(x, attn_mask=attn_mask).detach()

    ex = checks.get("06.4")
    cases = ex.make_cases(0)
    status, outputs, message = core.collect_outputs(ex, Detached, cases)
    assert status == core.PASSED, message
    arrays, entries = hv.trusted_namespace()["_encode"](outputs, torch)
    np.savez(tmp_path / "outputs.npz", **arrays)
    (tmp_path / "result.json").write_text(json.dumps({"status": "passed", "outputs": entries}))
    harvested = hv.load_harvest(str(tmp_path), len(cases))
    result = core.verdict(ex, cases, harvested.status, harvested.outputs, harvested.message)
    assert result.status == core.FAILED and "not differentiable" in result.message
