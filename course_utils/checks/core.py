"""The exercise-check machinery: exercises, cases, mistakes, results.

An exercise is checked in three steps that can run in different processes:

1. ``cases = exercise.make_cases(seed)`` — seeded random inputs (a list of :class:`Case`),
   drawn at grade time so no answer can be hard-coded.
2. ``outputs = exercise.call(candidate, case)`` — runs the student's function or class on one
   case and returns plain data: a ``dict[str, torch.Tensor]``. In the official grader this is
   the only step that runs inside the student's kernel; the tensors are written without pickle.
3. ``judge(exercise, cases, outputs)`` — in a trusted process: computes the reference outputs
   with ``exercise.call(exercise.reference, case)``, compares, and on a mismatch runs every
   known :class:`Mistake` through the same ``call`` to name the likely error in the hint.

``run(exercise_id, candidate)`` does all three in-process: that is what check cells use.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

Outputs = dict[str, torch.Tensor]

PASSED, FAILED, NOT_ATTEMPTED, ERROR, TIMEOUT = (
    "passed",
    "failed",
    "not_attempted",
    "error",
    "timeout",
)
STATUSES = (PASSED, FAILED, NOT_ATTEMPTED, ERROR, TIMEOUT)


@dataclass
class Case:
    """One seeded input to an exercise: a name for messages and the arguments (plain data)."""

    name: str
    inputs: dict[str, Any]


@dataclass(frozen=True)
class Contract:
    """What an exercise's prompt promises beyond the values, declared once and checked by the
    machinery for every case (see :func:`contract_call` and :func:`contract_cases`).

    ``float32``: the first case is run again with every floating input (module weights too)
    in float32; the outputs must come back float32 (the dtype follows the input's).
    ``differentiable``: input names (``"w:*"``: the module's weights) the floating outputs
    (``grad_outputs``, default all of them) must stay differentiable in: a detached output, a
    ``torch.no_grad()`` forward or numbers copied out of a tensor fail. ``returns``: the Python
    type(s) the candidate returns (``bool``; ``(int, float)`` for "a Python number"): a 0-d
    tensor fails. ``masked``: the name of
    the mask input; a case is added whose first query row is fully masked, and its output
    must be ``masked_output`` (as the prompt states it, e.g. "zeros").
    Every tensor the candidate returns (a module: its forward) must sit on the inputs'
    device (the check's own records, Python numbers it wraps, are not the candidate's).
    """

    float32: bool = False
    differentiable: tuple[str, ...] = ()
    grad_outputs: tuple[str, ...] = ()
    returns: type | tuple[type, ...] | None = None
    masked: str = ""
    masked_output: str = ""
    updates_weights: bool = False  # a training step: the module's weights may change


# Modules a check built from a case's weights (``_common.build_module``) during the current
# call, with those weights: the contract requires them unchanged afterwards.
BUILT_MODULES: list[tuple[Any, dict[str, torch.Tensor]]] = []
# The output key under which a call reports a broken contract (its message as uint8 bytes).
CONTRACT_KEY = "contract"


def contract_problem_of(outputs: Outputs) -> str | None:
    """The contract message a call put in ``outputs`` (see :func:`contract_call`), or None."""
    value = outputs.get(CONTRACT_KEY)
    if not isinstance(value, torch.Tensor):
        return None
    return bytes(value.to(torch.uint8).tolist()).decode(errors="replace")


@dataclass(frozen=True)
class Mistake:
    """A classic wrong answer, written as code with the student's signature, and its hint."""

    name: str  # e.g. "missing 1/sqrt(d) scaling"
    hint: str  # what to fix, in the words a student understands
    impl: Callable[..., Any]


def allclose_compare(
    case: Case, got: Outputs, expected: Outputs, *, rtol: float = 1e-5, atol: float = 1e-6
) -> str | None:
    """Default comparison: same keys, shapes and dtypes, values within tolerance.

    Returns ``None`` when they agree, else a message saying what differs (first key only).
    """
    for key, exp in expected.items():
        if key not in got:
            return f"case '{case.name}': no output '{key}'"
        g = got[key]
        if not isinstance(g, torch.Tensor):
            return f"case '{case.name}': '{key}' should be a torch.Tensor, got {type(g).__name__}"
        if tuple(g.shape) != tuple(exp.shape):
            return (
                f"case '{case.name}': '{key}' has shape {tuple(g.shape)}, "
                f"expected {tuple(exp.shape)}"
            )
        if g.dtype != exp.dtype and g.is_floating_point() and exp.is_floating_point():
            return (
                f"case '{case.name}': '{key}' has dtype {g.dtype}, expected {exp.dtype} "
                "(the dtype the prompt asks for: the inputs' dtype, or the one it names; "
                "compute in it, and bring any table you build to it with .to(...))"
            )
        if g.dtype != exp.dtype and not (g.is_floating_point() and exp.is_floating_point()):
            return f"case '{case.name}': '{key}' has dtype {g.dtype}, expected {exp.dtype}"
        if exp.dtype == torch.bool or not exp.is_floating_point():
            if not torch.equal(g.to(exp.dtype), exp):
                return f"case '{case.name}': '{key}' differs from the expected values"
            continue
        g64, e64 = g.detach().double().cpu(), exp.detach().double().cpu()
        if torch.isnan(g64).any() and not torch.isnan(e64).any():
            return f"case '{case.name}': '{key}' contains NaN"
        if not torch.allclose(g64, e64, rtol=rtol, atol=atol, equal_nan=True):
            err = (g64 - e64).abs().nan_to_num(float("inf")).max().item()
            return f"case '{case.name}': '{key}' differs from the expected values (max error {err:.3g})"
    return None


@dataclass
class Exercise:
    """A graded exercise.

    ``function`` is the name the student defines in the notebook (a function or a class);
    ``reference`` is the verified implementation with the same signature; ``call`` runs a
    candidate (student's, reference or mistake) on one case and returns plain tensors.
    """

    id: str
    title: str
    points: int
    notebook: str  # file name in solutions/, e.g. "03_scaled_dot_product.ipynb"
    function: str
    reference: Callable[..., Any]
    make_cases: Callable[[int], list[Case]]
    call: Callable[[Any, Case], Outputs]
    mistakes: Sequence[Mistake] = field(default_factory=tuple)
    compare: Callable[[Case, Outputs, Outputs], str | None] = allclose_compare
    hint: str = ""  # generic hint when no known mistake matches
    # Torch functions and aten operators the exercise asks the student to write instead of
    # calling (see :mod:`course_utils.checks.guard`): "torch.softmax", "aten::_softmax", ...
    forbids: tuple[str, ...] = ()
    # What the student builds, by concept (:mod:`course_utils.checks.concepts`): every library
    # op and course implementation doing that whole job is off-limits (added to ``forbids``
    # and to the course code the watch refuses, see :func:`own_work_keys`).
    concepts: tuple[str, ...] = ()
    contract: Contract = field(default_factory=Contract)

    def __post_init__(self) -> None:
        """Fold the concepts' ops into ``forbids``; wrap ``make_cases`` and ``call`` so the
        contract holds wherever they run (check cells, tests and the grader's kernel)."""
        if self.concepts:
            from course_utils.checks import concepts

            ops = concepts.forbidden_ops(self.concepts)
            self.forbids = tuple(dict.fromkeys((*self.forbids, *ops)))
        raw_cases, raw_call = self.make_cases, self.call
        if getattr(raw_call, "contract_of", None) is None:
            self.make_cases = _ContractCases(self, raw_cases)
            self.call = _ContractCall(self, raw_call)

    def __repr__(self) -> str:
        return f"Exercise({self.id!r}, {self.title!r}, points={self.points}, function={self.function!r})"


class _ContractCases:
    """``exercise.make_cases`` with the contract's extra cases appended (:func:`contract_cases`).
    ``func`` is the exercise's own function (what the grader fingerprints)."""

    def __init__(self, exercise: Exercise, func: Callable[[int], list[Case]]) -> None:
        self.exercise, self.func = exercise, func

    def __call__(self, seed: int) -> list[Case]:
        return contract_cases(self.exercise.contract, self.func(seed))


class _ContractCall:
    """``exercise.call`` run under the contract (:func:`contract_call`); ``func`` is the
    exercise's own function (what the grader fingerprints)."""

    def __init__(self, exercise: Exercise, func: Callable[[Any, Case], Outputs]) -> None:
        self.exercise, self.func = exercise, func
        self.contract_of = exercise.id

    def __call__(self, candidate: Any, case: Case) -> Outputs:
        return contract_call(self.exercise, self.func, candidate, case)


def _floating_inputs(inputs: dict[str, Any]) -> list[str]:
    return [k for k, v in inputs.items() if isinstance(v, torch.Tensor) and v.is_floating_point()]


def contract_cases(contract: Contract, cases: list[Case]) -> list[Case]:
    """``cases`` and, as the contract asks, the first case again in float32 (every floating
    input cast: ``"..., in float32"``) and the first case with a mask whose first query row is
    fully masked (``mask[..., 0, :] = False``; the case's name says what the row must give)."""
    out = list(cases)
    if not cases:
        return out
    first = cases[0]
    if contract.float32 and _floating_inputs(first.inputs):
        inputs = dict(first.inputs)
        for key in _floating_inputs(inputs):
            inputs[key] = inputs[key].to(torch.float32)
        out.append(Case(f"{first.name}, in float32", inputs))
    if contract.masked:
        base = next(
            (c for c in cases if isinstance(c.inputs.get(contract.masked), torch.Tensor)), None
        )
        if base is not None:
            mask = base.inputs[contract.masked].clone()
            if mask.dtype != torch.bool:
                raise TypeError(f"{contract.masked}: only bool masks can be fully masked here")
            mask[..., 0, :] = False
            name = f"{base.name}, first query row fully masked (it must output {contract.masked_output})"
            out.append(Case(name, {**base.inputs, contract.masked: mask}))
    return out


def contract_call(
    exercise: Exercise, call: Callable[[Any, Case], Outputs], candidate: Any, case: Case
) -> Outputs:
    """``call(candidate, case)`` holding ``exercise.contract``: the named inputs made
    differentiable (a non-leaf copy, so an in-place edit still reaches ``case.inputs``), the
    candidate's raw return values recorded, then :func:`_contract_problem` on what came back:
    a broken promise is added to the outputs as :data:`CONTRACT_KEY` (plain bytes, so the
    grader's judge sees it too) and judged after the values."""
    c = exercise.contract
    leaves: dict[str, torch.Tensor] = {}
    originals: dict[str, torch.Tensor] = {}
    for name in c.differentiable:
        value = case.inputs.get(name)
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            originals[name] = value
            leaves[name] = value.detach().clone().requires_grad_(True)
            case.inputs[name] = leaves[name] * 1  # a non-leaf: in-place edits stay legal
    returned: list[Any] = []
    run = candidate
    # The candidate's return values, for the returns and device promises (the reference, trusted
    # and recognised by identity in some calls, runs as itself unless a return type is promised)
    if not isinstance(candidate, type) and (
        c.returns is not None or candidate is not exercise.reference
    ):

        def run(*args: Any, **kwargs: Any) -> Any:
            value = candidate(*args, **kwargs)
            returned.append(value)
            return value

    BUILT_MODULES.clear()
    hook = None
    if isinstance(candidate, type) and issubclass(candidate, torch.nn.Module):

        def record(module: torch.nn.Module, _args: Any, value: Any) -> None:
            if isinstance(module, candidate):  # the candidate's forward, not its submodules'
                returned.append(value)

        hook = torch.nn.modules.module.register_module_forward_hook(record)
    try:
        with torch.enable_grad():
            out = call(run, case)
    finally:
        if hook is not None:
            hook.remove()
        for name, original in originals.items():
            used = case.inputs[name]
            if not _same(original, used):  # an in-place edit: the caller's copy shows it
                with torch.no_grad():
                    original.copy_(used.detach())
            case.inputs[name] = original
    problem = _contract_problem(exercise, case, out, returned, leaves)
    if not problem and not c.updates_weights:
        problem = _changed_weights(exercise.function)
    BUILT_MODULES.clear()
    if problem:  # as data: judged after the values, so a wrong value keeps its named mistake
        out = {**out, CONTRACT_KEY: torch.tensor(list(problem.encode()[:2000]), dtype=torch.uint8)}
    return out


def _contract_problem(
    exercise: Exercise,
    case: Case,
    out: Outputs,
    returned: list[Any],
    leaves: dict[str, torch.Tensor],
) -> str | None:
    """What the outputs ``out`` (and the candidate's raw ``returned`` values) break of the
    contract, in the prompt's words; None when nothing."""
    c, fn = exercise.contract, exercise.function
    if "raised" in out:  # an error carried as data: judged as such
        return None
    wanted = c.returns if isinstance(c.returns, tuple) else (c.returns,)
    for value in returned if c.returns is not None else ():
        if not isinstance(value, wanted) or (isinstance(value, bool) and bool not in wanted):
            names = " or ".join(t.__name__ for t in wanted)
            shown = "" if isinstance(value, torch.Tensor) else f" {value!r}"
            return (
                f"{fn} should return a Python {names} (as the prompt asks), got "
                f"{type(value).__name__}{shown}: convert it, e.g. with "
                f"{wanted[0].__name__}(...) or .item()"
            )
    device = _case_device(case.inputs)
    for value in _tensors_in(returned) if device is not None else ():
        if value.device != device:  # what the candidate returned; the check's own records
            # (Python numbers it wrapped, counts) are the check's business
            return (
                f"{fn} returned a tensor of shape {tuple(value.shape)} on {value.device}, its "
                f"inputs are on {device}: create new tensors on the inputs' device "
                "(device=x.device, torch.zeros_like(...)), never move the result"
            )
    if not leaves and not any(k.startswith("w:") for k in c.differentiable):
        return None
    keys = c.grad_outputs or [
        k for k, v in out.items() if isinstance(v, torch.Tensor) and v.is_floating_point()
    ]
    wrt = ", ".join(c.differentiable)
    for key in keys:
        value = out.get(key)
        if isinstance(value, torch.Tensor) and not value.requires_grad:
            return (
                f"{fn}'s '{key}' is not differentiable in {wrt}: no .detach(), .item()/.tolist(), "
                "numpy or torch.no_grad() on the way (training needs the gradient)"
            )
    return None


def _tensors_in(values: Any, depth: int = 0) -> list[torch.Tensor]:
    """The tensors in ``values`` (nested tuples, lists and dicts, a few levels deep)."""
    if isinstance(values, torch.Tensor):
        return [values]
    if depth > 3:
        return []
    if isinstance(values, dict):
        values = list(values.values())
    if isinstance(values, (tuple, list)):
        return [t for v in values for t in _tensors_in(v, depth + 1)]
    return []


def _changed_weights(fn: str) -> str | None:
    """Which weight of a module the check built (:data:`BUILT_MODULES`) the candidate changed
    in place, as a message; None when all are as given."""
    for module, weights in BUILT_MODULES:
        for name, value in weights.items():
            try:
                param = module.get_parameter(name)
            except AttributeError:
                continue
            if not _same(value.to(param.dtype), param.detach().to(value.device)):
                return (
                    f"{fn} changed the model's parameter '{name}' in place: the caller's model "
                    "is damaged for every later use (training, plots). Read the weights, "
                    "never write them (no in-place ops, no .data or no_grad() edits)"
                )
    return None


def _case_device(inputs: dict[str, Any]) -> torch.device | None:
    for value in inputs.values():
        if isinstance(value, torch.Tensor):
            return value.device
    return None


@dataclass
class CheckResult:
    """The verdict on one exercise: ``status`` is one of :data:`STATUSES`."""

    exercise_id: str
    title: str
    status: str
    points: float
    max_points: float
    message: str
    mistake: str | None = None  # name of the matched Mistake, if any

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def _ipython_display_(self) -> None:
        """Show nothing when a check cell's last line returns this: the verdict is printed."""

    def verdict_line(self) -> str:
        """The one deterministic line a check cell prints."""
        label = {
            PASSED: "PASSED",
            FAILED: "FAILED",
            NOT_ATTEMPTED: "not attempted",
            ERROR: "ERROR",
            TIMEOUT: "TIMEOUT",
        }[self.status]
        pts = f"{self.points:g}/{self.max_points:g} points"
        return f"[{self.exercise_id}] {self.title}: {label} ({pts})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.exercise_id,
            "title": self.title,
            "points": self.points,
            "max_points": self.max_points,
            "status": self.status,
            "message": self.message,
        }


def collect_outputs(
    exercise: Exercise, candidate: Any, cases: Sequence[Case], watch: Any = None
) -> tuple[str, list[Outputs], str]:
    """Run ``candidate`` on every case (step 2). Returns ``(status, outputs, message)``.

    ``status`` is ``passed`` when every case ran (correctness is judged later),
    ``not_attempted`` when the stub still raises ``NotImplementedError``, ``error`` with
    the exception (last frames of the traceback), and ``failed`` (with the outputs of every
    case, so the values can still be judged) when the candidate took a shortcut: it modified
    its inputs in place, called a torch function the exercise forbids, or ran the course's own
    implementation. ``watch`` makes the :class:`~course_utils.checks.guard.Watch` of one case
    (default: :func:`make_watch` without the reference rule, i.e. the exercise's ``forbids``).
    """
    if watch is None:
        watch = make_watch(exercise, candidate, reference=False)
    outputs: list[Outputs] = []
    violation = ""
    for case in cases:
        # A copy: an in-place edit of its inputs by the candidate must not reach the
        # reference, which runs on the same case afterwards (judge) in this process.
        given = _clone(case.inputs)
        try:
            with watch() as seen:
                out = exercise.call(candidate, Case(case.name, given))
                seen.made_tensors(out)
        except NotImplementedError:
            return (
                NOT_ATTEMPTED,
                outputs,
                "not attempted yet: the stub still raises NotImplementedError",
            )
        except Exception as exc:  # the student's code may raise anything
            if violation:  # a shortcut seen on an earlier case is the verdict
                return FAILED, outputs, violation
            return (
                ERROR,
                outputs,
                (
                    f"case '{case.name}': your code raised "
                    f"{type(exc).__name__}: {exc}\n" + _student_frames(exc)
                ).rstrip(),
            )
        violation = violation or seen.problem(exercise.function, exercise.id) or ""
        changed = changed_inputs(case.inputs, given)
        if changed and CONTRACT_KEY not in out:  # a broken contract (inputs untouched), not a
            # shortcut: judged after the values, with no flag in the grader
            text = (
                f"your {exercise.function} changed its input "
                f"{', '.join(repr(c) for c in changed)} in place (e.g. `x += ...` or `x[...] = ...` "
                "on an argument): the caller's tensor is modified, which breaks every later use "
                "of it. Compute into a new tensor instead (`y = x + ...`)."
            )
            out = {**out, CONTRACT_KEY: torch.tensor(list(text.encode()), dtype=torch.uint8)}
        outputs.append(
            {k: (v.detach().cpu() if isinstance(v, torch.Tensor) else v) for k, v in out.items()}
        )
    if violation:
        return FAILED, outputs, violation
    return PASSED, outputs, ""


def make_watch(exercise: Exercise, candidate: Any, *, reference: bool = True) -> Callable:
    """A factory of :class:`~course_utils.checks.guard.Watch` for ``exercise``: its
    ``forbids``, and with ``reference`` also the course's own implementation (the exercise's
    reference, called or copied into another cell). Check cells and the grader use it with
    ``reference=True``; :func:`course_utils.checks.run` (tests, authoring) without."""
    from course_utils.checks import guard

    keys = own_work_keys(exercise) if reference else []
    shapes = guard.reference_shapes(exercise.reference) if reference else []
    own = guard.own_codes_of(candidate) if reference else []
    ref = exercise.reference
    where = f"{getattr(ref, '__module__', '')}.{getattr(ref, '__qualname__', '')}"
    # The course's reference is trusted code (it may use what the student may not): without
    # the reference rule, running it is not held against it.
    forbids = () if candidate is ref and not reference else exercise.forbids

    def factory() -> guard.Watch:
        return guard.Watch(forbids, keys, shapes, own, where=where.strip("."), profile=reference)

    return factory


def own_work_keys(exercise: Exercise) -> list[tuple]:
    """The course code an answer to ``exercise`` may not run (as
    :func:`~course_utils.checks.guard.code_key` tuples): the exercise's reference and every
    course implementation of the concepts it names. The grader sends these to the kernel as
    the watch's ``reference`` (instead of ``guard.reference_keys(exercise.reference)``)."""
    from course_utils.checks import concepts, guard

    keys = set(guard.reference_keys(exercise.reference))
    keys.update(concepts.course_keys(exercise.concepts))
    return sorted(keys)


def changed_inputs(original: dict[str, Any], given: dict[str, Any]) -> list[str]:
    """Names of the case inputs that differ between ``original`` and the copy ``given`` to a
    candidate (values, shape or dtype): what the candidate modified in place."""
    return [k for k, v in original.items() if k in given and not _same(v, given[k])]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        if not isinstance(b, torch.Tensor) or a.shape != b.shape or a.dtype != b.dtype:
            return False
        a, b = a.detach(), b.detach()
        if a.is_floating_point() or a.is_complex():
            return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
        return torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return (
            isinstance(b, (list, tuple))
            and len(a) == len(b)
            and all(_same(x, y) for x, y in zip(a, b, strict=True))
        )
    return True  # numbers and other values are passed by value or are not compared


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _student_frames(exc: BaseException, limit: int = 3) -> str:
    """The last ``limit`` traceback frames of ``exc`` outside ``course_utils`` (the student's
    code and the libraries it called), formatted, always including the student's last line:
    when the error surfaces deep inside torch (a shape error in ``self.out(...)``), the
    student's frame that made the call comes first, then the last library frame."""
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if not os.path.abspath(f.filename).startswith(_PACKAGE_DIR + os.sep)
    ]
    own = [f for f in frames if not _is_library(f.filename)]
    shown = frames[-limit:]
    if own and own[-1] not in shown:
        shown = [own[-1], *frames[-(limit - 1) :]] if limit > 1 else [own[-1]]
    return "".join(traceback.format_list(shown))


def _is_library(filename: str) -> bool:
    name = filename.replace("\\", "/")
    return "/site-packages/" in name or "/dist-packages/" in name or "/lib/python" in name


def _clone(value: Any) -> Any:
    """A copy of a case's inputs: tensors cloned, containers rebuilt, anything else shared."""
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_clone(v) for v in value)
    return value


def judge(exercise: Exercise, cases: Sequence[Case], outputs: Sequence[Outputs]) -> CheckResult:
    """Compare a candidate's outputs with the reference (step 3) and name the likely mistake."""
    for case, got in zip(cases, outputs, strict=True):
        expected = exercise.call(exercise.reference, case)
        problem = exercise.compare(case, got, expected)
        if problem is None:
            broken = contract_problem_of(got)
            if broken is None:
                continue
            return CheckResult(
                exercise.id,
                exercise.title,
                FAILED,
                0,
                exercise.points,
                f"case '{case.name}': {broken}",
                "contract",
            )
        only_dtype = exercise.compare(case, _cast_like(got, expected), expected) is None
        mistake = None if only_dtype else diagnose(exercise, case, got)
        if mistake is not None:
            message = f"{problem}. Likely mistake: {mistake.name}. Hint: {mistake.hint}"
        else:
            message = problem + (f". Hint: {exercise.hint}" if exercise.hint else "")
        return CheckResult(
            exercise.id,
            exercise.title,
            FAILED,
            0,
            exercise.points,
            message,
            mistake.name if mistake else None,
        )
    return CheckResult(
        exercise.id,
        exercise.title,
        PASSED,
        exercise.points,
        exercise.points,
        f"all {len(cases)} cases agree with the reference",
    )


def _cast_like(got: Outputs, like: Outputs) -> Outputs:
    """``got`` with each floating tensor cast to the dtype of ``like``'s (values only)."""
    return {
        k: v.to(like[k].dtype)
        if isinstance(v, torch.Tensor)
        and isinstance(like.get(k), torch.Tensor)
        and v.is_floating_point()
        and like[k].is_floating_point()
        else v
        for k, v in got.items()
    }


def diagnose(exercise: Exercise, case: Case, got: Outputs) -> Mistake | None:
    """The first known mistake whose output on ``case`` matches ``got``, or ``None``."""
    for mistake in exercise.mistakes:
        try:
            wrong = exercise.call(mistake.impl, case)
        except Exception:
            continue
        wrong = _cast_like(wrong, got)  # a mistake is named by its values, not its dtype
        if exercise.compare(case, got, wrong) is None:
            return mistake
    return None


def check(
    exercise: Exercise, candidate: Any, seed: int = 0, *, own_work: bool = False
) -> CheckResult:
    """Steps 1-3 in this process: the self-check students run from a check cell.

    A wrong value is reported first (with its likely mistake); an answer whose values are right
    but which took a shortcut (see :func:`collect_outputs`) fails with what it did. With
    ``own_work`` the course's own implementation counts as a shortcut too (check cells and the
    grader; off for :func:`course_utils.checks.run`, which tests call with the reference).
    """
    cases = exercise.make_cases(seed)
    watch = make_watch(exercise, candidate, reference=own_work)
    status, outputs, message = collect_outputs(exercise, candidate, cases, watch)
    return verdict(exercise, cases, status, outputs, message)


def verdict(
    exercise: Exercise, cases: Sequence[Case], status: str, outputs: Sequence[Outputs], message: str
) -> CheckResult:
    """The verdict on what :func:`collect_outputs` returned (step 3): judged when every case
    ran; else the outputs of the cases before the one that raised are judged first, so a
    wrong value there keeps its named mistake ("Likely mistake: ...") rather than the later
    error. The grader calls this on the harvested ``(status, outputs, message)`` so its
    verdict is the check cell's."""
    if status == PASSED:
        return judge(exercise, cases, outputs)
    if outputs:  # cases in order: a wrong value before the raising case (or the shortcut)
        earlier = judge(exercise, cases[: len(outputs)], outputs)
        if earlier.status == FAILED:
            earlier.message += f" (then {message.splitlines()[0] if message else status})"
            return earlier
    return CheckResult(exercise.id, exercise.title, status, 0, exercise.points, message)


def item_key(item_id: str) -> tuple:
    """Sort key of an exercise id ``"03.2"`` or a question id ``"03.Q1"``: by notebook, then
    exercises before questions, then number."""
    nb, _, rest = item_id.partition(".")
    if rest.startswith("Q") and rest[1:].isdigit():
        return (int(nb) if nb.isdigit() else nb, 1, int(rest[1:]))
    return (int(nb) if nb.isdigit() else nb, 0, int(rest) if rest.isdigit() else rest)


def generator(seed: int) -> torch.Generator:
    """A CPU generator for drawing a check's random inputs."""
    return torch.Generator().manual_seed(int(seed))


def randn(gen: torch.Generator, *shape: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Seeded standard-normal tensor (float64 by default: checks compare in double precision)."""
    return torch.randn(*shape, generator=gen, dtype=dtype)
