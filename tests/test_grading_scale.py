"""The grader's own costs at class scale (issue 30, the third red team's rows "IOPub flood",
"non-root disk" and "many cells"): one test per case id.
"""

from __future__ import annotations

import copy
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import pytest

from course_utils.grading import plan as pl
from course_utils.grading.kernel import IOPUB_BUDGET, GradingKernel, _idle_of
from course_utils.grading.sandbox import Limits, Sandbox

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "grading"

FLOOD = """
import time
k = get_ipython().kernel
parent = k.get_parent()
t = time.time()
while time.time() - t < {secs}:
    k.session.send(k.iopub_socket, "stream", {{"name": "stdout", "text": "x" * 100}}, parent=parent)
"""


def _cpu() -> float:
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def test_IOPUB_a_flooding_kernel_costs_the_grader_little_cpu():
    """A cell sends IOPub stream messages as fast as it can for 6 s (the red team's probe:
    8.4 s of the grader's CPU for 30 s). Past ``IOPUB_BUDGET`` messages the grader skims at
    most 1,000 a second undecoded: its own CPU for the flood stays within 1 s of what a cell
    sleeping as long costs it (before: about 0.3 s per second of flood here)."""
    secs = 6
    with tempfile.TemporaryDirectory() as d:
        with GradingKernel(cwd=d, workdir=d, memory_mb=0, env=dict(os.environ)) as kernel:
            c0 = _cpu()
            quiet = kernel.execute(f"import time; time.sleep({secs})", 60)
            c1 = _cpu()
            flood = kernel.execute(FLOOD.format(secs=secs), 60)
            c2 = _cpu()
            after = kernel.execute("print('still here')", 30)
    assert quiet.status == flood.status == after.status == "ok"
    assert kernel.budget.truncated  # the dropped bytes count as output seen, not kept
    assert after.outputs and after.outputs[0]["text"] == "still here\n"
    extra = (c2 - c1) - (c1 - c0)
    assert extra < 1.0, f"the grader spent {c2 - c1:.2f} s of CPU on {secs} s of flood"


def test_IOPUB_budget_lets_an_honest_cell_keep_its_outputs():
    assert IOPUB_BUDGET >= 1000  # a progress bar for a minute at 10 updates a second


def test_IOPUB_idle_of_reads_only_small_raw_frames():
    import json

    def frames(msg_type: str, parent_id: str, state: str, pad: int = 0) -> list[bytes]:
        header = json.dumps({"msg_type": msg_type, "pad": "x" * pad}).encode()
        parent = json.dumps({"msg_id": parent_id}).encode()
        content = json.dumps({"execution_state": state}).encode()
        return [b"ident", b"<IDS|MSG>", b"sig", header, parent, b"{}", content]

    assert _idle_of(frames("status", "m1", "idle"), "m1")
    assert not _idle_of(frames("status", "m2", "idle"), "m1")
    assert not _idle_of(frames("status", "m1", "busy"), "m1")
    assert not _idle_of(frames("stream", "m1", "idle"), "m1")
    assert not _idle_of(frames("status", "m1", "idle", pad=10_000), "m1")  # never a big frame
    assert not _idle_of([b"garbage"], "m1")
    assert not _idle_of([b"<IDS|MSG>", b"s", b"{not json", b"{}", b"{}", b"{}"], "m1")


def test_KERNEL_LOG_the_kernels_stderr_counts_against_the_disk_limit(tmp_path):
    """Without root (CI, Classroom) the box is no tmpfs: the watchdog sums the writable
    folders, and now the kernel's stderr, ``box/kernel.log``, too (before: only
    ``RLIMIT_FSIZE`` bounded it, on top of ``--disk-mb``)."""
    box = Sandbox("bwrap", tmp_path / "box", Limits(memory_mb=0, max_procs=0, disk_mb=2))
    for sub in ("work", "tmp", "home", "run"):
        (box.box / sub).mkdir(parents=True)
    (box.box / "work" / "data.bin").write_bytes(b"x" * (1 << 20))
    assert box.disk_usage()[0] < 2 << 20
    with open(box.box / "kernel.log", "wb") as log:
        log.write(b"Traceback\n" * (150 << 10))  # 1.5 MB of stderr
    size, _ = box.disk_usage()
    assert size >= (2 << 20) + (400 << 10)
    box._root_pid = os.getpid()  # the watchdog's sample, as it runs every second
    assert box.sample(disk=True) == "it wrote more than 2 MB of files"


def test_KERNEL_LOG_a_link_in_its_place_is_not_followed(tmp_path):
    box = Sandbox("bwrap", tmp_path / "box", Limits(memory_mb=0, max_procs=0, disk_mb=2))
    for sub in ("work", "tmp", "home", "run"):
        (box.box / sub).mkdir(parents=True)
    big = tmp_path / "big"
    big.write_bytes(b"x" * (3 << 20))
    (box.box / "kernel.log").symlink_to(big)
    assert box.disk_usage()[0] < 1 << 20


def test_MANY_CELLS_own_checks_are_scanned_as_a_set():
    """20,000 check-tagged cells before the exercise cell and 50,000 Markdown cells after it:
    planning takes well under a second (8.4 s when ``own_checks`` was a list)."""
    sys.path.insert(0, str(FIXTURES))
    try:
        table = pl.exercise_table(("grading_fixture_checks",))
    finally:
        sys.path.remove(str(FIXTURES))
    nb = pl.read_notebook(FIXTURES / "submissions" / "solution.ipynb")
    cells = nb["cells"]
    ex = next(i for i, c in enumerate(cells) if pl.course_meta(c)[1] == "exercise")
    check = next(c for c in cells if pl.course_meta(c)[1] == "check")
    checks = []
    for k in range(20_000):
        cell = copy.deepcopy(check)
        cell["id"] = f"chk{k}"
        checks.append(cell)
    markdown = [
        {"cell_type": "markdown", "id": f"md{k}", "metadata": {}, "source": "x"}
        for k in range(50_000)
    ]
    nb["cells"] = cells[:ex] + checks + [cells[ex]] + markdown + cells[ex + 1 :]
    assignment = pl.resolve_assignment(
        "99_fixture.ipynb", nb, dirs=[FIXTURES / "solutions"], table=table
    )
    t0 = time.process_time()
    plan = pl.build_plan(nb, assignment)
    assert time.process_time() - t0 < 3.0
    assert plan.steps  # the exercise is still planned and checked


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-n", "0"]))


def test_default_jobs_is_one_per_core_within_what_the_host_allows(monkeypatch):
    from course_utils.grading import cli as grade_cli

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(2)), raising=False)
    assert grade_cli.default_jobs(0, 1) == 2
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(512)), raising=False)
    jobs = grade_cli.default_jobs(6144, 256)
    assert 1 <= jobs < 512  # RAM and the file table bound it long before 512
    assert grade_cli.host_problem(jobs, 6144, 256, sandboxed=True) == ""
    assert jobs == 1 or grade_cli.host_problem(jobs + 1, 6144, 256, sandboxed=True)
    ram_mb = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") >> 20
    assert grade_cli.default_jobs(ram_mb + 1, 1) == 1  # never refuses: at least one


def test_preload_imports_what_a_grading_process_needs():
    """The batch's fork server imports these once (``course_utils.grading.preload``); a
    grading process then imports next to nothing of its own (measured: 20 modules, 0.7 s of
    its CPU for nb03, where it imported 920 and spent 3.1 s)."""
    import subprocess

    code = (
        "import sys, course_utils.grading.grader, course_utils.grading.preload as p\n"
        "missing = [m for m in p.MODULES if m not in sys.modules]\n"
        "print(missing, 'course_utils.lessons.nb03_scaled_dot_product.exercises' in sys.modules)"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "[] True", out.stderr[-2000:]
    from course_utils.grading import cli as grade_cli

    source = Path(grade_cli.__file__).read_text()
    assert '"course_utils.grading.preload"' in source  # in the fork server's preload list
