"""Run profiles (``ci`` / ``cpu`` / ``gpu``), device choice and seeding.

The profile decides how big every experiment is. It is ``gpu`` when CUDA is available and
``cpu`` otherwise; ``COURSE_PROFILE=ci|cpu|gpu`` overrides it (CI sets ``ci``). The profile
also carries the device every recipe uses: the GPU in ``gpu``, the CPU in ``ci`` and ``cpu``;
``COURSE_DEVICE`` (e.g. ``cuda:1``, or ``meta`` in the device tests) overrides that.

Notebooks never hard-code sizes. Every recipe in ``course_utils.recipes`` states its sizes in
one :class:`ProfileTable` (all three profiles written out, no fallback) and reads the active
row with ``TABLE.current()``; a notebook's one-off size is ``pick(ci=..., cpu=..., gpu=...)``,
which is the same table in one line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np
import torch

PROFILES = ("ci", "cpu", "gpu")
ENV_VAR = "COURSE_PROFILE"
DEVICE_VAR = "COURSE_DEVICE"
MAX_STEPS_VAR = "COURSE_MAX_STEPS"  # the GPU check's smoke runs: every training loop stops early
ALLOW_SLOW_VAR = "COURSE_ALLOW_SLOW"  # run the gpu profile on a machine without CUDA anyway
# How much slower the gpu profile runs on a CPU than on its reference GPU: notebook 08's gpu
# recipe took 25-37 s per step (x 5,000 steps: 35-50 h) on a shared 2-core machine
# (newcomer review, turn 4) against a GPU estimate of about 4 min: roughly 500-750x.
CPU_SLOWDOWN = (500.0, 750.0)


class ProfileError(ValueError):
    """An unusable ``COURSE_PROFILE``; its message is one line, for the command line."""


T = TypeVar("T")


@dataclass(frozen=True)
class Profile:
    """The active run profile: its name, the device it uses and where the choice came from."""

    name: str
    device: torch.device
    source: str  # "COURSE_PROFILE" or "auto-detected"

    def __str__(self) -> str:
        return f"profile={self.name} device={self.device} ({self.source})"


def best_device() -> torch.device:
    """CUDA if present, else Apple's MPS, else the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def profile_name() -> str:
    """The active profile's name: ``COURSE_PROFILE`` if set, else ``gpu`` with CUDA, else ``cpu``."""
    value = os.environ.get(ENV_VAR, "").strip().lower()
    if value:
        if value not in PROFILES:
            raise ProfileError(profile_problem())
        return value
    return "gpu" if torch.cuda.is_available() else "cpu"


def profile_problem() -> str:
    """What is wrong with ``COURSE_PROFILE`` ("" when it is unset or a profile), one line."""
    value = os.environ.get(ENV_VAR, "").strip().lower()
    if not value or value in PROFILES:
        return ""
    return f"{ENV_VAR}={value!r} is not a profile; choose one of {', '.join(PROFILES)}"


def _allow_slow() -> bool:
    return os.environ.get(ALLOW_SLOW_VAR, "").strip().lower() in ("1", "true", "yes")


def cpu_estimate() -> str:
    """The gpu profile's time on this machine's CPU, roughly, from the GPU estimates."""
    lo, hi = CPU_SLOWDOWN
    from course_utils import gpu_plan

    minutes = {k: e.minutes for k, e in gpu_plan.estimates().items()}
    slowest = max(minutes, key=minutes.get)
    total = sum(minutes.values())
    return (
        f"on a CPU the gpu profile takes roughly {total * lo / 60:.0f}-{total * hi / 60:.0f} h "
        f"for all notebooks (notebook {slowest} alone {minutes[slowest] * lo / 60:.0f}-"
        f"{minutes[slowest] * hi / 60:.0f} h)"
    )


def slow_gpu_problem(cuda: bool | None = None) -> str:
    """Why the gpu profile should not start here ("" when it may): ``COURSE_PROFILE=gpu`` on a
    machine without CUDA, unless ``COURSE_ALLOW_SLOW=1`` (or ``COURSE_DEVICE``) asks for it."""
    value = os.environ.get(ENV_VAR, "").strip().lower()
    if value != "gpu" or _allow_slow() or os.environ.get(DEVICE_VAR, "").strip():
        return ""
    if cuda is None:
        cuda = torch.cuda.is_available()
    if cuda:
        return ""
    return (
        f"{ENV_VAR}=gpu on a machine without a CUDA GPU: {cpu_estimate()}. Use "
        f"{ENV_VAR}=cpu, or set {ALLOW_SLOW_VAR}=1 (or pass --allow-slow) to run it anyway"
    )


@contextlib.contextmanager
def using_profile(name: str | None) -> Iterator[None]:
    """Set ``COURSE_PROFILE=name`` for the block (and the kernels it starts), then restore what
    was there; ``None`` leaves the environment as it is."""
    with using_environment({} if name is None else {ENV_VAR: name}):
        yield


@contextlib.contextmanager
def using_environment(values: dict[str, str]) -> Iterator[None]:
    """Set the environment variables ``values`` for the block (and the processes it starts),
    then restore each to what it was (unset if it was unset)."""
    old = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def current() -> Profile:
    """The active :class:`Profile`. ``ci`` and ``cpu`` run on the CPU even when a GPU exists;
    ``COURSE_DEVICE`` overrides the device of any profile."""
    name = profile_name()
    source = ENV_VAR if os.environ.get(ENV_VAR, "").strip() else "auto-detected"
    device = best_device() if name == "gpu" else torch.device("cpu")
    override = os.environ.get(DEVICE_VAR, "").strip()
    if override:
        try:
            device = torch.device(override)
        except RuntimeError as exc:
            raise ValueError(f"{DEVICE_VAR}={override!r} is not a device: {exc}") from None
        source += f", {DEVICE_VAR}"
    return Profile(name=name, device=device, source=source)


@dataclass(frozen=True)
class ProfileTable(Generic[T]):
    """One value (a number, a tuple, a recipe's whole size dataclass) per profile, all three
    stated: the single form in which the course writes a size that depends on the profile.

    >>> STEPS = ProfileTable(ci=200, cpu=2000, gpu=5000)
    >>> STEPS.for_profile("gpu")
    5000

    ``current()`` is the active profile's value. No profile falls back to another's: a table
    missing one is a ``TypeError`` when the module defining it is imported. Under
    ``COURSE_MAX_STEPS`` (the GPU check's smoke runs) a recipe dataclass with an integer
    ``steps`` field comes back with its steps capped, so training loops that take
    ``r.steps`` (a student's own loop among them) stop early too.
    """

    ci: T
    cpu: T
    gpu: T

    def for_profile(self, name: str | None = None) -> T:
        """The value of profile ``name`` ("ci", "cpu" or "gpu"; ``None``: the active one)."""
        name = profile_name() if name is None else name
        if name not in PROFILES:
            raise ValueError(f"expected profile 'ci', 'cpu' or 'gpu', got {name!r}")
        return _steps_capped(getattr(self, name))

    def current(self) -> T:
        """The active profile's value (:func:`profile_name`)."""
        return self.for_profile(None)

    def items(self) -> tuple[tuple[str, T], ...]:
        """``(("ci", value), ("cpu", value), ("gpu", value))``."""
        return tuple((name, getattr(self, name)) for name in PROFILES)


def _steps_capped(value: T) -> T:
    """``value`` with its ``steps`` field capped by :func:`cap_steps` when ``COURSE_MAX_STEPS``
    is set and ``value`` is a dataclass instance with an integer ``steps``; else ``value``."""
    steps = getattr(value, "steps", None)
    if (
        not os.environ.get(MAX_STEPS_VAR, "").strip()
        or not dataclasses.is_dataclass(value)
        or isinstance(value, type)
        or not isinstance(steps, int)
        or isinstance(steps, bool)
    ):
        return value
    capped = cap_steps(steps)
    return value if capped == steps else dataclasses.replace(value, steps=capped)


def pick(*, ci: T, cpu: T, gpu: T) -> T:
    """The value for the active profile; all three must be given (no profile falls back to
    another's size). A one-line :class:`ProfileTable`.

    >>> steps = pick(ci=200, cpu=2000, gpu=5000)
    """
    return ProfileTable(ci=ci, cpu=cpu, gpu=gpu).current()


def cap_steps(steps: int) -> int:
    """``steps``, or fewer when ``COURSE_MAX_STEPS`` is set (the GPU check runs every notebook
    with shortened training this way; training loops call this once)."""
    value = os.environ.get(MAX_STEPS_VAR, "").strip()
    if not value:
        return steps
    try:
        cap = int(value)
    except ValueError:
        raise ValueError(f"{MAX_STEPS_VAR}={value!r} is not a whole number of steps") from None
    if cap < 1:
        raise ValueError(f"{MAX_STEPS_VAR} must be >= 1, got {cap}")
    return min(steps, cap)


def seed_everything(seed: int = 0) -> torch.Generator:
    """Seed Python, NumPy and torch (CPU and CUDA) and return a CPU ``torch.Generator`` seeded alike."""
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def describe(notebook: str | None = None) -> str:
    """One line naming the profile and device, printed at the top of every notebook.

    In the ``gpu`` profile a second line states what the profile assumes and this notebook's
    estimate (``notebook`` like "08", default: the running notebook's, when Jupyter names it).
    """
    p = current()
    line = f"Running the '{p.name}' profile on {p.device} ({p.source}); torch {torch.__version__}"
    if p.name != "gpu":
        return line
    if p.device.type == "cpu" and not torch.cuda.is_available():
        line += f"\nWARNING: no CUDA GPU here; {cpu_estimate()}. Use {ENV_VAR}=cpu."
    from course_utils import gpu_plan

    notebook = notebook or gpu_plan.current_notebook()
    est = (
        f"; notebook {gpu_plan.row(notebook)}"
        if notebook and notebook[:2] in gpu_plan.estimates()
        else ""
    )
    return (
        f"{line}\ngpu profile: sized for {gpu_plan.REFERENCE}{est} "
        "(estimates; `course doctor` lists every notebook)"
    )
