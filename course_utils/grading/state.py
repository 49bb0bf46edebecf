"""What one grading run is told (:class:`GradeOptions`) and what it holds (:class:`Run`),
shared by the runner (:mod:`~.runner`) and the judge (:mod:`~.judge`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from course_utils.grading import policy
from course_utils.grading.kernel import GradingKernel, OutputBudget
from course_utils.grading.plan import Assignment
from course_utils.grading.sandbox import DOCKER_IMAGE, Sandbox


@dataclass
class GradeOptions:
    """Limits and choices for grading (the CLI's options; defaults are the CLI's)."""

    reference_dir: str | None = None
    assignment: str | None = None
    checks_modules: tuple[str, ...] = ()
    cell_timeout: float = 120.0
    timeout: float = 900.0
    memory_mb: int = 6144
    max_output_kb: int = 1024
    seed: int | None = None
    threads: int = 1
    gpu: bool = False
    zero_flagged: bool = False
    executed_dir: str | None = None
    all_cells: bool = False  # also run the plan's tail (the cells that decide nothing)
    kernel_name: str = "python3"
    startup_timeout: float = 120.0
    interrupt_grace: float = 5.0
    sandbox: str = "auto"
    max_procs: int = 256
    disk_mb: int = 1024
    cpu_s: float = 0.0
    image: str = DOCKER_IMAGE
    box_parent: str | None = None  # where the sandboxes' folders go (default: the temp dir)
    keys: str | None = None  # an instructor checkout whose questions' keys grade sealed ones
    student: str | None = None  # the student's identity (personal numbers), for one submission
    student_by_folder: bool = False  # in a batch: the identity is the submission's folder name
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def runs_tail(self) -> bool:
        """Whether the plan's tail runs: with ``all_cells``, or with ``executed_dir`` (the
        executed notebook shows the whole run)."""
        return self.all_cells or bool(self.executed_dir)


@dataclass
class Run:
    """The state of one grading run, shared by the steps of :func:`_run`."""

    nb: dict[str, Any]
    assignment: Assignment
    report: dict[str, Any]
    opts: GradeOptions
    seed: int
    path: str
    box: Path
    plan: Any = None
    review: policy.Review = field(default_factory=policy.Review)
    budget: OutputBudget | None = None
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    cell_errors: dict[int, tuple[str, str]] = field(default_factory=dict)
    executed: list[tuple[Any, Any]] = field(default_factory=list)  # (step, result or entry)
    kernel: GradingKernel | None = None
    sandbox: Sandbox | None = None
    stop_reason: tuple[str, str] | None = None  # (status for the rest, message)

    def stop(self, status: str, message: str, kernel: dict[str, Any] | None = None) -> None:
        self.stop_reason = (status, message)
        if kernel is not None:
            self.report["kernel"] = kernel
