"""Shortcuts earn nothing (issue 21, red team A1-A7; issue 22): an exercise's forbidden torch
calls are rejected by every route (direct, ``F.``, the tensor method, hidden behind
``torch._C.DisableTorchFunction`` or a name built with ``getattr``), the course's own
implementation is rejected however it is reached (in a check cell and in the grader's harvest,
also with the kernel's registry patched), a copy of it pasted into another cell too, switching
the watchers off is tampering, and an answer written by hand is still accepted."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import math
import sys

import pytest
import torch
import torch.nn.functional as F

from course_utils import checks
from course_utils.checks import core, guard
from course_utils.grading import harvest as hv

SEEDS = (0, 1)


def _hidden(fn):
    """``fn`` called with torch functions' overrides switched off (red team A7)."""

    def run(*args, **kwargs):
        with torch._C.DisableTorchFunction():
            return fn(*args, **kwargs)

    return run


def _softmax_by_hand(x):
    m = x.amax(dim=-1, keepdim=True).nan_to_num(neginf=0.0)
    e = (x - m).exp()
    return e / e.sum(dim=-1, keepdim=True)


def _lse_by_hand(x):
    m = x.amax(-1)
    shift = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    return shift + (x - shift[..., None]).exp().sum(-1).log()


def _sdpa_by_hand(q, k, v, attn_mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, float("-inf"))
    w = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return w @ v, w


def _layer_norm_by_hand(x, weight, bias, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return weight * (x - mu) / torch.sqrt(var + eps) + bias


def _sdpa_torch(q, k, v, attn_mask=None):
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
    return out, torch.zeros(q.shape[:-1] + k.shape[-2:-1], dtype=q.dtype)


FORBIDDEN = {
    # exercise id -> {route: candidate}; every candidate gives the right values
    "00.1": {
        "torch.softmax": lambda x: torch.softmax(x, dim=-1),
        "F.softmax": lambda x: F.softmax(x, dim=-1),
        "Tensor.softmax": lambda x: x.softmax(-1),
        "DisableTorchFunction": _hidden(lambda x: torch.softmax(x, dim=-1)),
        "getattr": lambda x: getattr(torch, "soft" + "max")(x, -1),
        "log_softmax": lambda x: torch.log_softmax(x, dim=-1).exp(),
    },
    "00.2": {
        "torch.logsumexp": lambda x: torch.logsumexp(x, dim=-1),
        "Tensor.logsumexp": lambda x: x.logsumexp(-1),
        "DisableTorchFunction": _hidden(lambda x: torch.logsumexp(x, dim=-1)),
        "getattr": lambda x: getattr(torch, "logsum" + "exp")(x, -1),
    },
    "07.1": {
        "F.layer_norm": lambda x, w, b, eps=1e-5: F.layer_norm(x, x.shape[-1:], w, b, eps),
        "DisableTorchFunction": _hidden(
            lambda x, w, b, eps=1e-5: F.layer_norm(x, x.shape[-1:], w, b, eps)
        ),
        "getattr": lambda x, w, b, eps=1e-5: getattr(F, "layer" + "_norm")(
            x, x.shape[-1:], w, b, eps
        ),
    },
}
HAND_WRITTEN = {"00.1": _softmax_by_hand, "00.2": _lse_by_hand, "07.1": _layer_norm_by_hand}


def _routes():
    return [(ex, route) for ex, routes in FORBIDDEN.items() for route in routes]


@pytest.mark.parametrize("exercise_id,route", _routes())
def test_every_route_to_a_forbidden_op_is_rejected_with_the_call_named(exercise_id, route):
    candidate = FORBIDDEN[exercise_id][route]
    for seed in SEEDS:
        for own_work in (False, True):  # checks.run and the check cell agree
            result = checks.run(exercise_id, candidate, seed=seed, own_work=own_work)
            assert result.status == "failed" and result.points == 0, result.message
            assert "not allowed here" in result.message
            assert f"exercise {exercise_id} asks you to write" in result.message


def test_the_message_names_the_call_that_was_made():
    msg = checks.run("00.1", lambda x: F.softmax(x, dim=-1)).message
    assert "calls torch.nn.functional.softmax" in msg
    msg = checks.run("00.1", lambda x: x.softmax(-1)).message
    assert "calls Tensor.softmax" in msg
    msg = checks.run("00.1", _hidden(lambda x: torch.softmax(x, -1))).message
    assert "calls aten::_softmax" in msg  # only the dispatch level saw it


@pytest.mark.parametrize("exercise_id", sorted(HAND_WRITTEN))
def test_an_answer_written_by_hand_is_accepted(exercise_id):
    for seed in SEEDS:
        result = checks.run(exercise_id, HAND_WRITTEN[exercise_id], seed=seed, own_work=True)
        assert result.passed, result.message


def test_a_wrong_answer_with_a_forbidden_op_still_gets_its_mistake_named():
    # values are judged first: the student learns what is wrong before what is not allowed
    result = checks.run("00.1", lambda x: torch.softmax(x, dim=0))
    assert result.status == "failed" and result.mistake is not None


@pytest.mark.parametrize("route", ["F.sdpa", "DisableTorchFunction"])
def test_attention_exercises_reject_the_fused_kernel(route):
    cand = _sdpa_torch if route == "F.sdpa" else _hidden(_sdpa_torch)

    def values_right(q, k, v, attn_mask=None):  # right weights too, so only the rule fails it
        out, _ = cand(q, k, v, attn_mask)
        return out, _sdpa_by_hand(q, k, v, attn_mask)[1]

    result = checks.run("03.1", values_right)
    assert result.status == "failed" and "not allowed here" in result.message
    assert checks.run("03.1", _sdpa_by_hand, own_work=True).passed


def test_tiled_attention_rejects_sdpa_hidden_from_the_tracker():
    # red team A7: 4/4 before, the AllocationTracker saw nothing
    def tiled(q, k, v, block_size, causal=False):
        with torch._C.DisableTorchFunction():
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    result = checks.run("11.1", tiled)
    assert result.status == "failed" and result.points == 0
    assert "not allowed here" in result.message


# ----------------------------------------------------------------------------- the reference


def _ref_03():
    return checks.get("03.1").reference


def _direct(q, k, v, attn_mask=None):  # A1
    return _ref_03()(q, k, v, attn_mask=attn_mask)


_MOD = importlib.import_module("course_utils.modeling." + "attention")


def _obfuscated(q, k, v, attn_mask=None):  # A2
    return getattr(_MOD, "scaled_dot_product" + "_attention")(q, k, v, attn_mask=attn_mask)


def _through_fallback():  # A3
    box = {"f": checks.fallback("03.1", None)}

    def scaled_dot_product_attention(q, k, v, attn_mask=None):
        return box["f"](q, k, v, attn_mask=attn_mask)

    return scaled_dot_product_attention


def _pasted_copy():
    """A5: the reference's source compiled as a notebook cell would be, renamed, and an
    answer that delegates to it."""
    src = inspect.getsource(_ref_03()).replace("def scaled_dot_product_attention", "def _impl1")
    ns = dict(vars(sys.modules[_ref_03().__module__]))
    exec(compile(src, "<ipython-input-7-abc>", "exec"), ns)
    impl = ns["_impl1"]

    def scaled_dot_product_attention(q, k, v, attn_mask=None):
        return impl(q, k, v, attn_mask=attn_mask)

    return scaled_dot_product_attention


@pytest.mark.parametrize(
    "make", [lambda: _direct, lambda: _obfuscated, _through_fallback, _pasted_copy]
)
def test_a_check_cell_rejects_the_course_implementation_however_it_is_reached(make, capsys):
    candidate = make()
    result = checks.check("03.1", candidate)
    assert result.status == "failed" and result.points == 0
    assert "the course's own" in result.message
    assert checks.run("03.1", candidate).passed  # the authoring API still accepts it


def test_a_check_cell_accepts_helpers_of_the_course_that_are_not_the_reference(capsys):
    from course_utils.modeling.attention import masked_softmax

    def uses_a_helper(q, k, v, attn_mask=None):
        w = masked_softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), attn_mask)
        return w @ v, w

    assert checks.check("03.1", uses_a_helper).passed


def test_switching_the_profiler_off_is_tampering(capsys):
    def sneaky(q, k, v, attn_mask=None):
        saved = sys.getprofile()
        sys.setprofile(None)
        try:
            return _ref_03()(q, k, v, attn_mask=attn_mask)
        finally:
            sys.setprofile(saved)

    result = checks.check("03.1", sneaky)
    assert result.status == "failed" and "could not watch" in result.message


def test_switching_torch_modes_off_is_tampering():
    from torch.utils._python_dispatch import _disable_current_modes

    def sneaky(x):
        with _disable_current_modes():
            return torch.softmax(x, dim=-1)

    result = checks.run("00.1", sneaky, own_work=True)
    assert result.status == "failed" and "could not watch" in result.message


def test_a_watch_that_saw_no_operator_while_tensors_came_out_is_tampering():
    watch = guard.Watch(forbids=("aten::_softmax",), profile=False)
    with watch:
        pass
    watch.made_tensors({"y": torch.ones(2)})
    assert "no operation" in watch.problem("softmax", "00.1")


def test_copies_are_found_by_shape_whatever_their_name_and_docstring():
    def original(x, y):
        """doc"""
        total = x + y
        for i in range(3):
            total = total * i + x
        return total.sum() + y.mean()

    src = inspect.getsource(original).replace("original", "renamed").replace('"""doc"""', "")
    src = src.replace("total", "acc")  # local names do not matter either
    ns: dict = {}
    exec(compile(__import__("textwrap").dedent(src), "<ipython-input-1>", "exec"), ns)
    assert guard.code_shape(ns["renamed"].__code__) == guard.code_shape(original.__code__)

    def different(x, y):
        total = x - y
        for i in range(3):
            total = total * i + x
        return total.sum() + y.mean()

    assert guard.code_shape(different.__code__) != guard.code_shape(original.__code__)


# ----------------------------------------------------------------------------- the grader's side


def _harvest(tmp_path, user_ns, exercise_id="03.1", function="scaled_dot_product_attention"):
    code = hv.harvest_code(
        exercise_id=exercise_id, function=function, seed=3, out_dir=str(tmp_path)
    )
    return code


def _run_harvest(code, user_ns, tmp_path, exercise_id="03.1"):
    exec(code, user_ns)  # what the kernel does
    ex = checks.get(exercise_id)
    return hv.load_harvest(str(tmp_path), len(ex.make_cases(3)))


def test_the_harvest_rejects_the_reference_even_with_the_kernels_registry_patched(
    tmp_path, monkeypatch
):
    # A4: the rules are computed by the grader before the kernel's registry is touched
    code = _harvest(tmp_path, {})
    real = checks.REGISTRY["03.1"]
    monkeypatch.setitem(
        checks.REGISTRY, "03.1", dataclasses.replace(real, reference=lambda *a, **k: None)
    )
    h = _run_harvest(code, {"scaled_dot_product_attention": _obfuscated}, tmp_path)
    assert h.status == "error" and "the course's own implementation ran" in h.message
    assert any(f.startswith("shortcut:") for f in h.flags)


def test_a_pasted_copy_of_the_solution_gets_the_check_cells_verdict_and_a_review_flag(tmp_path):
    # A5 with the solution notebook's code (what leaks between students), not the module's.
    # Three honest lines in a helper can have the same shape (HELPER-FP, redteam-v3), so the
    # kernel's watch judges it as the check cell does (the solution's shapes are never sent:
    # a hash oracle) and the trusted side flags the shared shape for review, never zeroed.
    nb = __import__("json").loads(
        (
            hv.Path(hv.__file__).resolve().parents[2] / "solutions" / "03_scaled_dot_product.ipynb"
        ).read_text(encoding="utf-8")
    )
    from course_utils.grading import plan as pl
    from course_utils.grading import policy

    cell = next(c for c in nb["cells"] if pl.course_meta(c) == ("03.1", "exercise"))
    src = "".join(cell["source"]).replace("def scaled_dot_product_attention", "def _impl1")
    ns = {"torch": torch, "math": math}
    exec(compile(src, "<ipython-input-4-deadbeef>", "exec"), ns)
    impl = ns["_impl1"]

    def scaled_dot_product_attention(q, k, v, attn_mask=None):
        return impl(q, k, v, attn_mask)

    h = _run_harvest(
        _harvest(tmp_path, {}),
        {"scaled_dot_product_attention": scaled_dot_product_attention},
        tmp_path,
    )
    in_cell = core.check(checks.get("03.1"), scaled_dot_product_attention, own_work=True)
    assert h.status == "passed" and in_cell.status == "passed", (h.message, in_cell.message)
    flags = policy.solution_copies([src], [4], nb, "03.1")
    assert flags and all(f.startswith(policy.REVIEW_ONLY + ": solution_shape") for f in flags)


def test_the_harvest_accepts_an_answer_written_by_hand(tmp_path):
    h = _run_harvest(
        _harvest(tmp_path, {}), {"scaled_dot_product_attention": _sdpa_by_hand}, tmp_path
    )
    assert h.status == "passed", h.message
    cases = checks.get("03.1").make_cases(3)
    assert core.judge(checks.get("03.1"), cases, h.outputs).passed


def test_the_harvest_rejects_a_forbidden_op_hidden_from_torch_function(tmp_path):
    code = hv.harvest_code(exercise_id="00.1", function="softmax", seed=3, out_dir=str(tmp_path))
    ns = {"softmax": _hidden(lambda x: torch.softmax(x, -1))}
    h = _run_harvest(code, ns, tmp_path, "00.1")
    assert h.status == "error" and "aten::_softmax" in h.message


def test_the_rules_sent_to_the_kernel_come_from_the_graders_registry():
    rules = hv.guard_params("00.1")
    assert rules["forbids"] == list(checks.get("00.1").forbids)
    assert rules["reference"] and all(k[0].startswith("course_utils/") for k in rules["reference"])
    assert rules["shapes"]


def _solution_cell(exercise_id: str) -> str:
    from course_utils.grading import plan as pl

    ex = checks.get(exercise_id)
    nb = __import__("json").loads(
        (hv.Path(hv.__file__).resolve().parents[2] / "solutions" / ex.notebook).read_text(
            encoding="utf-8"
        )
    )
    cell = next(c for c in nb["cells"] if pl.course_meta(c) == (exercise_id, "exercise"))
    return "".join(cell["source"])


def test_the_harvest_accepts_the_solution_itself_under_a_library_decorator(tmp_path):
    # 08.2 and 10.3's solutions are decorated with @torch.no_grad(): the function that runs is
    # the student's own, under torch's wrapper, not a copy called from elsewhere
    src = _solution_cell("03.1").replace(
        "def scaled_dot_product_attention", "@torch.no_grad()\ndef scaled_dot_product_attention"
    )
    ns = {"torch": torch, "math": math}
    exec(compile(src, "/tmp/ipykernel_1/2718.py", "exec"), ns)
    user_ns = {"scaled_dot_product_attention": ns["scaled_dot_product_attention"]}
    h = _run_harvest(_harvest(tmp_path, {}), user_ns, tmp_path)
    assert h.status == "passed", h.message


def test_a_decorated_reference_is_still_recognised():
    ex = checks.get("03.1")
    wrapped = torch.no_grad()(ex.reference)  # torch's wrapper code is not the reference's
    assert guard.reference_keys(wrapped) == guard.reference_keys(ex.reference)
    assert guard.reference_shapes(wrapped) == guard.reference_shapes(ex.reference)
    decorated = dataclasses.replace(ex, reference=wrapped)
    result = core.check(decorated, _direct, own_work=True)
    assert result.status == "failed" and "the course's own" in result.message
