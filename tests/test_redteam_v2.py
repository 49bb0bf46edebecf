"""The second red team's attacks on the grader's host side (``shared/reviews/redteam-v2.md``),
each as a fixture that must change nothing outside its sandbox.

Fast tests drive the sandbox directly (a command inside bubblewrap, the grader's steps on a
prepared box, no kernel). The ``slow`` batch grades the attack notebooks
(``tests/fixtures/redteam``) and hostile *files* (links, a device, a FIFO, an odd name) next to
an honest submission in one ``course grade -j 2`` run. Tests that need bubblewrap (and root
for the per-submission uid) fail under ``CI=true`` and are skipped with the reason elsewhere.
"""

from __future__ import annotations

import csv
import json
import os
import resource
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from course_utils.grading import cli as grade_cli
from course_utils.grading import confine, runner
from course_utils.grading import grader as gr
from course_utils.grading import sandbox as sb

pytestmark = pytest.mark.xdist_group("redteam-batch")

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "grading"
ATTACKS = ROOT / "tests" / "fixtures" / "redteam"
SOLUTION = FIXTURES / "submissions" / "solution.ipynb"
CHECKS = FIXTURES / "grading_fixture_checks.py"


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def require_bwrap(root: bool = False) -> None:
    """Bubblewrap that works here (and root, for one uid per submission), or fail under CI /
    skip with the reason elsewhere."""
    problem = sb.bwrap_problem() if sys.platform.startswith("linux") else "not Linux"
    if problem is None and root and os.geteuid() != 0:
        problem = "needs root (a uid of its own per submission, a tmpfs per box)"
    if problem:
        if _in_ci():
            pytest.fail(f"the sandbox tests need bubblewrap: {problem} (CI is set)")
        pytest.skip(f"sandbox test skipped: {problem}")


def attack_notebook(dest: Path, *attacks: str, **fmt: str) -> Path:
    """The fixture's correct submission with the attack cells first."""
    nb = json.loads(SOLUTION.read_text(encoding="utf-8"))
    cells = []
    for i, name in enumerate(attacks):
        source = (ATTACKS / f"{name}.py").read_text(encoding="utf-8")
        for key, value in fmt.items():
            source = source.replace("{" + key + "}", value)
        cells.append(
            {
                "cell_type": "code",
                "id": f"attack-{i}",
                "metadata": {},
                "source": source,
                "execution_count": None,
                "outputs": [],
            }
        )
    nb["cells"][1:1] = cells
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(nb), encoding="utf-8")
    return dest


def _target(path: Path) -> dict[str, tuple[int, int, int]]:
    """A root-owned host folder an attack aims at, and a snapshot of it."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "a.txt").write_text("root's file\n")
    os.chmod(path / "a.txt", 0o600)
    (path / "sub").mkdir(exist_ok=True)
    return _snapshot(path)


def _snapshot(path: Path) -> dict[str, tuple[int, int, int]]:
    out = {}
    for p in [path, *sorted(path.rglob("*"))]:
        st = p.lstat()
        out[str(p.relative_to(path))] = (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode))
    return out


# ----------------------------------------------------------------------------- inside a box


class Box:
    """A prepared, handed-over sandbox whose commands run through the real launcher."""

    def __init__(self, folder: Path, disk_mb: int = 64) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.sandbox = sb.Sandbox(
            "bwrap", folder, sb.Limits(memory_mb=1024, max_procs=64, disk_mb=disk_mb)
        )
        self.sandbox.prepare()
        self.sandbox.hand_over()
        self.conn = folder / "conn.json"
        self.conn.write_text("{}")

    def run(self, script: str, timeout: float = 60) -> subprocess.CompletedProcess:
        s = self.sandbox
        rlimits = {"fsize": s.limits.disk_mb << 20, "core": 0}
        cmd = s.command([sys.executable, "-c", script], str(self.conn), rlimits)
        env = s.kernel_env({"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"})
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)

    def close(self) -> None:
        self.sandbox.close()
        self.sandbox.remove_box()


@pytest.fixture
def box(tmp_path):
    require_bwrap(root=True)
    # The box's cgroup is named after its folder: a name of its own per test, as the grader's
    # mkdtemp gives (a shared "cg-probe" let a neighbour worker's close remove this box's
    # cgroup under -n 2: the launcher then failed to join it).
    b = Box(Path(tempfile.mkdtemp(prefix="cg-probe-", dir=tmp_path)))
    yield b
    b.close()


def test_no_user_namespace_inside_the_box_D3(box):
    r = box.run(
        "import subprocess, sys\n"
        "r = subprocess.run(['unshare', '-U', 'true'], capture_output=True, text=True)\n"
        "print('unshare', r.returncode, r.stderr.strip())\n"
        "import ctypes\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "if libc.unshare(0x10000000) == 0:\n"
        "    print('os.unshare ok')\n"
        "else:\n"
        "    print('os.unshare refused', ctypes.get_errno())\n"
    )
    assert r.returncode == 0, r.stderr
    assert "unshare 0" not in r.stdout and "os.unshare refused 1" in r.stdout, r.stdout
    threads = box.run("import threading; t = threading.Thread(target=print); t.start(); t.join()")
    assert threads.returncode == 0, threads.stderr  # threads (clone without NEWUSER) still work


def test_no_kernel_keyring_inside_the_box_C4(box):
    r = box.run(
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "KEY_SPEC_USER_KEYRING = -4\n"
        "n = libc.syscall(248 if os.uname().machine == 'x86_64' else 217, b'user', b'k',"
        " b'persisted-secret', 16, KEY_SPEC_USER_KEYRING)\n"
        "print('add_key', n, ctypes.get_errno())\n"
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[:3] == ["add_key", "-1", "1"], r.stdout  # EPERM


def test_fallocate_past_the_disk_limit_fails_inside_the_box_E3(box):
    r = box.run(
        "import os\n"
        "for where in ('/tmp', '/submission', '/home/student'):\n"
        "    fd = os.open(where + '/big', os.O_CREAT | os.O_WRONLY)\n"
        "    try:\n"
        "        os.posix_fallocate(fd, 0, 40 << 20)\n"
        "        os.posix_fallocate(os.open(where + '/big2', os.O_CREAT | os.O_WRONLY), 0, 40 << 20)\n"
        "        print(where, 'allocated 80 MB')\n"
        "    except OSError as exc:\n"
        "        print(where, 'refused', exc.errno)\n"
        "    os.unlink(where + '/big')\n"
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 3 and all("refused 28" in ln for ln in lines), r.stdout  # ENOSPC
    assert box.sandbox.describe()["enforced_by"]["bytes_written"].startswith("a tmpfs")


# ----------------------------------------------------------------------------- the results folder


def _as_uid(uid: int, script: str) -> subprocess.CompletedProcess:
    """Run ``script`` as the sandbox's uid on the host: what the submission may do there."""
    drop = f"import os\nos.setgroups([])\nos.setgid({uid})\nos.setuid({uid})\n"
    return subprocess.run(
        [sys.executable, "-I", "-c", drop + script],
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_results_folder_cannot_be_replaced_or_swapped_D1_B1(tmp_path, monkeypatch):
    """D1, deterministically: the submission's uid tries to replace ``run/results`` with a
    link to a host folder before the grader's step, and to swap the new result folder for
    such a link right after the grader's ``mkdir`` (the red team's race, won here by a hook);
    the host folder must stay exactly as it was."""
    require_bwrap(root=True)
    target = tmp_path / "chown_target"
    before = _target(target)
    s = sb.Sandbox("bwrap", tmp_path / "cg-race", sb.Limits(memory_mb=0, max_procs=0))
    s.prepare()
    try:
        s.hand_over()
        run = s.run_dir
        plant = _as_uid(
            s.uid,
            f"import os\nos.rename({str(s.results)!r}, {str(run / 'old')!r})\n"
            f"os.symlink({str(target)!r}, {str(s.results)!r})\n",
        )
        assert plant.returncode != 0 and "PermissionError" in plant.stderr, plant
        real_mkdir = os.mkdir
        swaps = []

        def mkdir_then_swap(path, mode=0o777, *, dir_fd=None):
            real_mkdir(path, mode, dir_fd=dir_fd)
            full = s.results / os.path.basename(path)
            swaps.append(
                _as_uid(
                    s.uid,
                    f"import os\nos.rename({str(full)!r}, {str(full) + '.x'!r})\n"
                    f"os.symlink({str(target)!r}, {str(full)!r})\n",
                )
            )

        monkeypatch.setattr(os, "mkdir", mkdir_then_swap)
        out = s.result_dir("03.1-0123456789abcdef")
        monkeypatch.undo()
        assert swaps and swaps[0].returncode != 0, swaps
        st = out.lstat()
        assert stat.S_ISDIR(st.st_mode) and st.st_uid == s.uid
        assert out.parent == s.results and not s.results.is_symlink()
        ro = s.results.stat()
        assert ro.st_uid == 0 and ro.st_mode & 0o022 == 0  # the grader's, not writable inside
        assert run.stat().st_uid == 0
    finally:
        s.close()
        s.remove_box()
    assert _snapshot(target) == before


# ----------------------------------------------------------------------------- clean-up


def _chain(top: Path, depth: int) -> None:
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=fd)
        nxt = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = nxt
    os.symlink("/etc", "link", dir_fd=fd)
    with open(os.open("f", os.O_CREAT | os.O_WRONLY, dir_fd=fd), "w") as fh:
        fh.write("x")
    os.close(fd)


def test_a_1500_level_chain_is_removed_without_recursion_E1():
    # not under tmp_path: if remove_tree ever failed, pytest's own (recursive) clean-up of old
    # temporary folders would crash a later session on the chain left behind
    scratch = Path(tempfile.mkdtemp(prefix="rt-deep-", dir="/tmp"))
    top = scratch / "cg-deep"
    top.mkdir()
    _chain(top / "", 1500)
    os.chmod(top / "d", 0o500)  # a read-only folder on the way
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(64, hard), hard))
    try:
        confine.remove_tree(top)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        subprocess.run(["rm", "-rf", str(scratch)], check=False)  # coreutils rm: iterative
    assert not top.exists()
    assert Path("/etc/passwd").exists()  # the link was removed, never followed
    confine.remove_tree(top)  # gone already: never raises


def test_stale_boxes_and_batches_are_removed_only_when_no_grader_holds_them_D5(tmp_path):
    stale = tmp_path / "cg-stale"
    held = tmp_path / "cg-held"
    foreign = tmp_path / "cgx-not-ours"
    batch = tmp_path / "cgb-old"
    young = tmp_path / "cg-young-no-lock"
    for d in (stale, held, foreign, batch / "cg-inner", young):
        d.mkdir(parents=True)
        (d / "file").write_text("student data")
    (stale / confine.LOCK_NAME).write_text("")
    (batch / confine.LOCK_NAME).write_text("")
    lock = confine.hold_lock(held)
    try:
        removed = confine.remove_stale(tmp_path)
    finally:
        os.close(lock)
    assert sorted(Path(p).name for p in removed if p.startswith(str(tmp_path))) == [
        "cg-stale",
        "cgb-old",
    ]
    assert held.exists() and foreign.exists() and young.exists()
    assert not stale.exists() and not batch.exists()


# ----------------------------------------------------------------------------- CPU (B2)


def test_a_submission_gets_at_most_its_cpu_quota_B2(tmp_path):
    """Sixteen busy processes in a cgroup with a quota of 0.1 CPU get about 0.1 CPU-seconds per
    second between them (an honest neighbour keeps the rest)."""
    require_bwrap(root=True)
    groups = confine.Cgroups(f"course-grade-cg-cputest{os.getpid()}", 0, 0, cpus=0.1)
    if "cpu" not in groups.dirs:
        groups.remove()
        reason = f"no cpu cgroup on this machine ({groups.notes})"
        if _in_ci():
            pytest.fail(reason)
        pytest.skip(reason)
    join = "".join(f"open({f!r}, 'w').write(str(os.getpid()))\n" for f in groups.procs_files)
    spin = (  # 16 processes spin for 1.5 s each and print the CPU time they got
        f"import os, time\n{join}"
        "kids = []\n"
        "for _ in range(15):\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        kids = None\n"
        "        break\n"
        "    kids.append(pid)\n"
        "end = time.monotonic() + 1.5\n"
        "while time.monotonic() < end: pass\n"
        'os.write(1, f"{time.process_time()}\\n".encode())\n'
        "if kids is None: os._exit(0)\n"
        "for pid in kids: os.waitpid(pid, 0)\n"
    )
    try:
        r = subprocess.run([sys.executable, "-c", spin], capture_output=True, text=True, timeout=60)
    finally:
        groups.remove()
    times = [float(x) for x in r.stdout.split()]
    assert len(times) == 16, r.stdout + r.stderr
    assert sum(times) < 0.1 * 1.5 + 0.3, times  # 0.1 CPU for 1.5 s (16 x 1.5 s unconfined)


def _run_for_start(tmp_path, opts) -> gr._Run:
    report = gr._skeleton("x.ipynb", 1)
    run = gr._Run({}, None, report, opts, 1, "x.ipynb", tmp_path)
    run.sandbox = sb.Sandbox("none", tmp_path, sb.Limits(memory_mb=0))
    run.budget = gr.OutputBudget(1024)
    return run


def test_a_kernel_that_does_not_start_is_retried_then_not_blamed_on_the_student_B2(
    tmp_path, monkeypatch
):
    starts = []
    never = []

    class SlowKernel:
        def __init__(self, **kw):
            pass

        def start(self):
            starts.append(1)
            if len(starts) < 2 or never:
                raise gr.KernelStartError("could not start: Kernel didn't respond in 120 seconds")

    monkeypatch.setattr(runner, "GradingKernel", SlowKernel)  # where _start_kernel lives
    run = _run_for_start(tmp_path, gr.GradeOptions())
    assert gr._start_kernel(run, {}) and len(starts) == 2  # the second try started

    starts.clear()
    never.append(True)
    run = _run_for_start(tmp_path, gr.GradeOptions(startup_timeout=7))
    assert not gr._start_kernel(run, {})
    rep = run.report
    assert rep["error_kind"] == "busy" and grade_cli.exit_code([rep], None) == grade_cli.EXIT_GRADER
    assert "grading machine" not in rep["error"] and "nothing about your work" in rep["error"]
    assert run.stop_reason[1] == rep["error"]


# ----------------------------------------------------------------------------- files that are not files


def _big_files() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 30, 1 << 30))


def _small_files() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (16 << 20, 16 << 20))


def test_only_regular_files_of_the_submissions_own_folder_are_copied_E2(tmp_path):
    src = tmp_path / "alice"
    src.mkdir()
    (src / "data.txt").write_text("mine")
    os.mkfifo(src / "pipe")
    os.symlink("/etc/passwd", src / "passwd")
    (src / "sub").mkdir()
    os.symlink(str(tmp_path), src / "sub" / "up")
    if os.geteuid() == 0:
        os.mknod(src / "zero", stat.S_IFCHR | 0o666, os.makedev(1, 5))  # /dev/zero
    dst = tmp_path / "box" / "work"
    copy = (
        "import sys; sys.path.insert(0, sys.argv[3])\n"
        "from course_utils.grading.grader import _copy_submission_dir\n"
        "_copy_submission_dir(sys.argv[1], __import__('pathlib').Path(sys.argv[2]))\n"
    )
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(src / "sock"))
        # bounded: a grader that copied /dev/zero would stop at 16 MB, not fill the disk
        r = subprocess.run(
            [sys.executable, "-c", copy, str(src), str(dst), str(ROOT)],
            preexec_fn=_small_files,
            timeout=120,
            capture_output=True,
        )
    assert r.returncode == 0, r
    copied = sorted(str(p.relative_to(dst)) for p in dst.rglob("*"))
    assert copied == ["data.txt"], copied


@pytest.mark.parametrize("kind", ["solutions", "neighbour", "shadow", "fifo", "folder_link"])
def test_submissions_that_are_not_notebook_files_are_refused_A8_A9_F3_C2(tmp_path, kind):
    alice = tmp_path / "alice" / "solution.ipynb"
    alice.parent.mkdir()
    shutil.copyfile(SOLUTION, alice)
    sub = tmp_path / "mallory" / "solution.ipynb"
    sub.parent.mkdir()
    if kind == "solutions":
        os.symlink(FIXTURES / "solutions" / "99_fixture.ipynb", sub)
    elif kind == "neighbour":
        os.symlink("../alice/solution.ipynb", sub)
    elif kind == "shadow":
        os.symlink("/etc/shadow", sub)
    elif kind == "fifo":
        os.mkfifo(sub)
    else:
        sub.parent.rmdir()
        os.symlink(alice.parent, sub.parent)
    why = gr.admit(sub)
    assert why and ("symbolic link" in why or "not a regular file" in why), why
    opts = gr.GradeOptions(
        reference_dir=str(FIXTURES / "solutions"),
        checks_modules=("grading_fixture_checks",),
        assignment="99_fixture",
        sandbox="none",
    )
    sys.path.insert(0, str(FIXTURES))
    try:
        rep = gr.grade_submission(sub, opts)
    finally:
        sys.path.remove(str(FIXTURES))
    assert rep["error_kind"] == "bad_input" and rep["total"] == 0, rep
    assert rep["kernel"]["status"] == "not_started"


def test_a_huge_valid_notebook_is_refused_before_parsing_E4(tmp_path, monkeypatch):
    def never(path):
        raise AssertionError("the grader parsed a notebook it must refuse")

    monkeypatch.setattr(gr, "read_notebook", never)
    big = tmp_path / "big.ipynb"
    with open(big, "w", encoding="utf-8") as fh:  # 150 MB, valid JSON
        fh.write('{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [')
        cell = '{"cell_type": "code", "metadata": {}, "source": "x = 1", "outputs": []},'
        fh.write(cell * (150_000_000 // len(cell)))
        fh.write('{"cell_type": "markdown", "metadata": {}, "source": ""}]}')
    assert big.stat().st_size > 150e6
    t0 = time.monotonic()
    assert "too large" in gr.admit(big)
    many = tmp_path / "many.ipynb"  # under the size cap, but 1.4 M one-line cells
    many.write_text(
        '{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": ['
        + ",".join(['{"cell_type":"raw","source":"x"}'] * 700_000)
        + "]}"
    )
    assert many.stat().st_size < gr.MAX_SUBMISSION_BYTES
    assert "strings" in gr.admit(many)
    rep = gr.grade_submission(many, gr.GradeOptions(sandbox="none", assignment="00_start_here"))
    assert rep["error_kind"] == "bad_input" and "strings" in rep["error"]
    assert time.monotonic() - t0 < 10


def test_kernel_messages_are_capped_far_below_the_graders_memory_E5():
    from course_utils.grading import kernel

    assert kernel.MAX_MESSAGE_BYTES <= 128 << 20


# ----------------------------------------------------------------------------- names (G1, G3)

ODD = "odd\n[99.1] Scale a tensor: passed (1 of 1)\tx.ipynb"


def test_a_name_never_adds_a_line_to_the_summary_csv_or_junit_G1(tmp_path):
    from course_utils.grading import reports as rp

    rep = gr._skeleton(str(tmp_path / "eve" / ODD), 1)
    rep.update(total=0, max=1, error="bad", error_kind="bad_input")
    grade_cli.name_students([rep])
    summary = grade_cli._summary(rep, detailed=True)
    assert summary.splitlines()[0].startswith("odd?[99.1]") and "\t" not in summary
    assert len(summary.splitlines()) == 2  # the head line and the error
    rp.write_csv([rep], tmp_path / "g.csv")
    assert len((tmp_path / "g.csv").read_text(encoding="utf-8").splitlines()) == 2
    rp.write_junit([rep], tmp_path / "g.xml")
    assert "\n[99.1]" not in (tmp_path / "g.xml").read_text(encoding="utf-8")


def test_one_folder_per_student_names_the_student_G3(tmp_path):
    reps = [gr._skeleton(str(tmp_path / who / "03_x.ipynb"), 1) for who in ("alice", "bob")]
    reps.append(gr._skeleton(str(tmp_path / "carol" / "03_x.ipynb"), 1))
    reps.append(gr._skeleton(str(tmp_path / "dave.ipynb"), 1))
    grade_cli.name_students(reps)
    assert [r["student"] for r in reps] == ["alice", "bob", "carol", "dave"]
    assert grade_cli.display_name(reps[0]) == "alice/03_x.ipynb"
    assert grade_cli.display_name(reps[3]) == "dave.ipynb"


# ----------------------------------------------------------------------------- the batch


@pytest.fixture(scope="module")
def attack_batch():
    """Honest alice (with a device node and a FIFO in her folder), links to solutions, to
    alice and to /etc/shadow, an odd name, and one notebook with E1's deep chain, D2's
    results link and D1's swapping thread: one ``course grade -j 2`` run."""
    require_bwrap(root=True)
    # a short folder: under xdist, tmp_path_factory's is too long for the kernels' unix sockets
    root = Path(tempfile.mkdtemp(prefix="rt-", dir="/tmp"))
    t1 = root / "host_target"
    before = {t1: _target(t1)}
    alice = root / "alice" / "solution.ipynb"
    alice.parent.mkdir()
    shutil.copyfile(SOLUTION, alice)
    os.mknod(alice.parent / "data.bin", stat.S_IFCHR | 0o666, os.makedev(1, 5))
    os.mkfifo(alice.parent / "pipe")
    links = {
        "mallory": FIXTURES / "solutions" / "99_fixture.ipynb",
        "eve": Path("../alice/solution.ipynb"),
        "trudy": Path("/etc/shadow"),
    }
    paths = [alice]
    for who, to in links.items():
        (root / who).mkdir()
        os.symlink(to, root / who / "solution.ipynb")
        paths.append(root / who / "solution.ipynb")
    (root / "odd").mkdir()
    os.symlink("../alice/solution.ipynb", root / "odd" / ODD)
    paths.append(root / "odd" / ODD)
    # one kernel for E1, D2 and D1 (each attack alone breaks today's grader)
    attacks = ("deepdir", "results_symlink", "swap_results")
    paths.append(attack_notebook(root / "deep" / "solution.ipynb", *attacks, target=str(t1)))
    out = root / "out"
    cmd = [sys.executable, "-m", "course_utils.cli", "grade", *map(str, paths)]
    cmd += ["--checks", str(CHECKS), "--reference-dir", str(FIXTURES / "solutions")]
    cmd += ["--assignment", "99_fixture", "--sandbox", "bwrap", "-j", "2", "--memory-mb", "2048"]
    cmd += ["--cell-timeout", "60", "--json", str(out / "g.json"), "--csv", str(out / "g.csv")]
    cmd += ["--junit", str(out / "g.xml")]
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        TMPDIR=str(root),  # the batch folder lands here, so the test can see it is gone
    )
    t0 = time.monotonic()
    run = subprocess.run(  # no file over 1 GB: a grader copying /dev/zero stops there
        cmd, capture_output=True, text=True, env=env, cwd=root, timeout=600, preexec_fn=_big_files
    )
    reports = json.loads((out / "g.json").read_text(encoding="utf-8"))
    yield SimpleNamespace(
        run=run,
        root=root,
        out=out,
        before=before,
        wall=time.monotonic() - t0,
        by={Path(r["notebook"]).parent.name: r for r in reports},
    )
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.slow
def test_batch_survives_every_attack_and_reports_everyone_E1(attack_batch):
    run = attack_batch.run
    assert run.returncode == grade_cli.EXIT_BAD_INPUT, run.stdout + run.stderr  # the links
    assert "Traceback" not in run.stderr, run.stderr
    assert set(attack_batch.by) == {"alice", "mallory", "eve", "trudy", "odd", "deep"}
    assert not list(attack_batch.root.glob("cgb-*")), "the batch folder was left behind"
    deep = attack_batch.by["deep"]
    assert deep["error_kind"] is None and deep["total"] == 3, deep  # E1 costs nothing


@pytest.mark.slow
def test_honest_submission_next_to_a_device_node_keeps_full_marks_E2(attack_batch):
    alice = attack_batch.by["alice"]
    assert (alice["total"], alice["max"], alice["error"]) == (3, 3, None), alice
    assert alice["student"] == "alice"  # G3: the folder, not the notebook's stem


@pytest.mark.slow
def test_linked_submissions_get_nothing_A8_A9_F3_C2(attack_batch):
    for who in ("mallory", "eve", "trudy", "odd"):
        rep = attack_batch.by[who]
        assert rep["error_kind"] == "bad_input" and rep["total"] == 0, rep
        assert "symbolic link" in rep["error"], rep["error"]


@pytest.mark.slow
def test_results_link_and_swaps_change_nothing_on_the_host_D1_D2(attack_batch):
    for target, snapshot in attack_batch.before.items():
        assert _snapshot(target) == snapshot, f"{target} was changed by the grader"
    deep = attack_batch.by["deep"]
    assert deep["total"] == 3, deep  # planting failed; the results folder stayed the grader's


@pytest.mark.slow
def test_odd_names_stay_on_one_line_in_every_report_G1(attack_batch):
    out = attack_batch.run.stdout
    assert not any(ln.startswith("[99.1] Scale a tensor: passed") for ln in out.splitlines())
    rows = list(csv.reader(open(attack_batch.out / "g.csv", encoding="utf-8")))
    assert len(rows) == 1 + len(attack_batch.by)
    assert all("\n" not in cell for row in rows for cell in row)
    xml = (attack_batch.out / "g.xml").read_text(encoding="utf-8")
    assert "\n[99.1]" not in xml and "\t" not in xml


# ----------------------------------------------------------------------------- a newcomer's machine


def test_without_bubblewrap_auto_falls_back_and_sandbox_tests_skip(tmp_path, monkeypatch):
    monkeypatch.setattr(sb, "_BWRAP_PROBLEM", [])
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on it
    assert "not installed" in sb.bwrap_problem()
    assert sb.resolve_backend("auto") == "none"
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="not installed"):
        require_bwrap()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI is set"):
        require_bwrap()


def test_bwrap_without_namespaces_falls_back_to_none_with_a_warning(tmp_path, monkeypatch, capsys):
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(sb, "_BWRAP_PROBLEM", [])
    monkeypatch.setattr(runner, "_PROBLEMS", {})
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert "cannot create namespaces" in sb.bwrap_problem()
    assert sb.resolve_backend("auto") == "none"
    from course_utils import cli as course_cli

    code = course_cli.main(["grade", str(tmp_path / "none.ipynb")])
    err = capsys.readouterr().err
    assert code == grade_cli.EXIT_BAD_INPUT and "not sandboxed" in err, err


def running_site_packages() -> list[str]:
    """The site-packages folders of the interpreter running the tests (torch, ipykernel, ...)."""
    import site

    return [p for p in site.getsitepackages() if Path(p).is_dir()]


def make_probe_venv(venv: Path) -> None:
    """A bare venv at ``venv`` that sees this interpreter's packages through a ``.pth`` file.

    Not ``--system-site-packages``: made from a venv, that chains to the *base* interpreter,
    which on a fresh machine has no torch or ipykernel (the newcomer report's F1)."""
    # from the real interpreter: Python 3.10's venv links to the running executable, which in
    # a venv under /tmp (hidden by the sandbox's private /tmp) is not found inside the sandbox
    base = os.path.realpath(sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    inside = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    (inside / "course-test-parent.pth").write_text("\n".join(running_site_packages()) + "\n")


def test_a_venv_under_tmp_is_visible_inside_the_sandbox(tmp_path):
    """The sandbox replaces /tmp with a private folder; a virtual environment living there
    is bound after it, so the kernel's Python is found."""
    require_bwrap()
    venv = Path("/tmp") / f"course-venv-test-{os.getpid()}"
    try:
        make_probe_venv(venv)
        probe = (
            "import sys; sys.path.insert(0, {root!r})\n"
            "from pathlib import Path\n"
            "from course_utils.grading import sandbox as sb\n"
            "box = Path({box!r}); box.mkdir()\n"
            "s = sb.Sandbox('bwrap', box, sb.Limits(memory_mb=0, max_procs=0, disk_mb=64),"
            " read_only={site!r})\n"
            "s.prepare(); s.hand_over(); (box / 'c.json').write_text('{{}}')\n"
            "import subprocess, os\n"
            "cmd = s.command([sys.executable, '-c', 'import sys, ipykernel; print(sys.prefix)'],"
            " str(box / 'c.json'), {{}})\n"
            "r = subprocess.run(cmd, capture_output=True, text=True, env=s.kernel_env(dict(os.environ)))\n"
            "s.close(); s.remove_box()\n"
            "print(r.returncode, r.stdout.strip(), r.stderr.strip()[-300:])\n"
        ).format(root=str(ROOT), box=str(tmp_path / "cg-venv"), site=running_site_packages())
        r = subprocess.run(
            [str(venv / "bin" / "python"), "-c", probe], capture_output=True, text=True, timeout=120
        )
        assert r.returncode == 0, r.stderr
        assert r.stdout.split()[:2] == ["0", str(venv)], r.stdout
    finally:
        shutil.rmtree(venv, ignore_errors=True)


@pytest.mark.slow
def test_busy_neighbour_cannot_starve_an_honest_submission_B2(tmp_path):
    """B2 end to end: a submission running 150 busy processes (each its own session) and an
    honest one graded side by side (``-j 2``): the honest one keeps its full marks, because
    each sandbox has its own CPU share and quota."""
    require_bwrap(root=True)
    honest = tmp_path / "honest" / "solution.ipynb"
    honest.parent.mkdir()
    shutil.copyfile(SOLUTION, honest)
    starver = attack_notebook(tmp_path / "starver" / "solution.ipynb", "cpu_starver")
    out = tmp_path / "g.json"
    cmd = [sys.executable, "-m", "course_utils.cli", "grade", str(starver), str(honest)]
    cmd += ["--checks", str(CHECKS), "--reference-dir", str(FIXTURES / "solutions")]
    cmd += ["--assignment", "99_fixture", "--sandbox", "bwrap", "-j", "2", "--json", str(out)]
    cmd += ["--memory-mb", "2048", "--cell-timeout", "60", "--timeout", "120"]
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=400)
    by = {Path(r["notebook"]).parent.name: r for r in json.loads(out.read_text())}
    rep = by["honest"]
    assert (rep["total"], rep["max"], rep["error"]) == (3, 3, None), run.stdout + run.stderr
    assert "cgroup cpu" in by["starver"]["sandbox"]["enforced_by"]["cpu_share"]
    # the attack really ran (throttled to its quota, it forks slower than it would alone)
    assert by["starver"]["sandbox"]["peak_procs"] > 50


def test_a_kernel_that_cannot_start_says_why_in_one_line(tmp_path, monkeypatch):
    """A newcomer's broken kernel (here: a kernelspec whose Python lacks a module) is one line
    that quotes what the kernel printed, not only "Kernel died"."""
    from course_utils.grading.kernel import GradingKernel, KernelStartError

    spec = tmp_path / "kernels" / "broken"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-c", "raise SystemExit('No module named ipykernel_x')"],
                "display_name": "broken",
                "language": "python",
            }
        )
    )
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    # a short work folder: under xdist, tmp_path is too long for the kernel's unix sockets
    workdir = Path(tempfile.mkdtemp(prefix="rt-", dir="/tmp"))
    kernel = GradingKernel(
        cwd=str(tmp_path),
        workdir=str(workdir),
        kernel_name="broken",
        startup_timeout=20,
        env=dict(os.environ),
    )
    try:
        with pytest.raises(KernelStartError) as err:
            kernel.start()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    message = str(err.value)
    assert "the kernel said: No module named ipykernel_x" in message and "\n" not in message


def test_a_venv_under_tmp_gets_parents_the_kernels_uid_can_enter():
    """bwrap makes a bind's missing parents 0700 and root-owned: a venv at /tmp/ci/main/.venv
    (CI's clone) was unreachable by the submission's uid ("Permission denied" at exec) until
    its parents were made 0755 inside the box's own /tmp; never inside a read-only mount."""
    from course_utils.grading.launch import bind_args
    from course_utils.grading.sandbox import ordered_binds

    binds = ordered_binds(
        [["ro", "/usr", "/usr"], ["ro", "/tmp/ci/main/.venv", "/tmp/ci/main/.venv"]],
        [["rw", "/box/tmp", "/tmp"]],
    )
    args = bind_args(binds)
    venv = args.index("/tmp/ci/main/.venv")
    for parent in ("/tmp/ci", "/tmp/ci/main"):
        at = args.index(parent)
        assert args[at - 3 : at] == ["--perms", "0755", "--dir"] and at < venv, args
    assert args.index("/box/tmp") < args.index("/tmp/ci"), "made inside the box's /tmp"
    ro = bind_args([["ro", "/opt/x", "/opt/x"], ["ro", "/opt/x/y/z", "/opt/x/y/z"]])
    assert "/opt/x/y" not in ro, "never a folder inside a read-only mount"
