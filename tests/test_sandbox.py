"""The grading sandbox (``course grade --sandbox``): what a submission can reach, limits on
all its processes together, a result channel it cannot abuse, and reports safe to read.

Fast tests build commands and parse hostile result files without a kernel. The ``slow``
batch grades one hostile notebook per attack class (``tests/fixtures/grading/hostile``)
between two correct "victim" submissions, in one ``course grade -j 2`` run under
bubblewrap, and checks that each attack is contained.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from types import SimpleNamespace

import mistune
import numpy as np
import pytest

from course_utils.grading import cli as grade_cli
from course_utils.grading import harvest as hv
from course_utils.grading import reports as rp
from course_utils.grading import sandbox as sb

# one xdist worker runs this module (pyproject: --dist loadgroup), so the hostile batch (a module fixture) is graded once
# instead of once per worker or with a worker waiting on the other
pytestmark = pytest.mark.xdist_group("sandbox-batch")

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "grading"
HOSTILE = FIXTURES / "hostile"
CHECKS = FIXTURES / "grading_fixture_checks.py"
INJECTION_NAME = '=HYPERLINK("x") # [click](y) ![i](z).ipynb'
MEMORY_MB = 2048


# ----------------------------------------------------------------------------- the machine


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def require_bwrap() -> None:
    """Bubblewrap that can create namespaces here, or fail under ``CI=true`` (.ci/run
    installs it) / skip with the reason elsewhere (a newcomer's machine, a container)."""
    problem = sb.bwrap_problem() if sys.platform.startswith("linux") else "bubblewrap is Linux-only"
    if problem:
        if _in_ci():
            pytest.fail(f"the sandbox tests need bubblewrap: {problem} (CI is set)")
        pytest.skip(f"sandbox test skipped: {problem}")


def test_bubblewrap_works_here_so_auto_sandboxes():
    """CI installs bubblewrap (.ci/run): the default ``--sandbox auto`` must pick it."""
    require_bwrap()
    assert sb.resolve_backend("auto") == "bwrap"


def test_unknown_backend_is_refused():
    with pytest.raises(sb.SandboxError, match="choose from"):
        sb.resolve_backend("chroot")


def test_each_backend_is_one_class_chosen_once_by_the_factory(tmp_path):
    """``Sandbox(backend, ...)`` returns that backend's class; an unknown one is refused."""
    chosen = {b: type(sb.Sandbox(b, tmp_path / b)) for b in ("bwrap", "docker", "podman", "none")}
    assert chosen == {
        "bwrap": sb.BwrapSandbox,
        "docker": sb.ContainerSandbox,
        "podman": sb.ContainerSandbox,
        "none": sb.PlainSandbox,
    }
    assert not sb.Sandbox("none", tmp_path / "n").isolated
    assert sb.Sandbox("bwrap", tmp_path / "b").isolated
    with pytest.raises(sb.SandboxError, match="choose from"):
        sb.Sandbox("chroot", tmp_path / "c")


def test_no_backend_name_is_branched_on_inside_the_sandbox_classes():
    """The backends differ by overriding methods, never by comparing ``self.backend``."""
    source = Path(sb.__file__).read_text(encoding="utf-8")
    assert not re.search(r"self\.backend\s*(==|!=|in\b|not in\b)", source)


# ----------------------------------------------------------------------------- commands


def test_bwrap_sandbox_shows_only_its_own_folders_writable(tmp_path):
    box = tmp_path / "cg-x"
    box.mkdir()
    sandbox = sb.Sandbox("bwrap", box, sb.Limits(memory_mb=1024, max_procs=64))
    spec = sandbox._spec(str(box / "kernel.json"), {"as": 1 << 30})
    rw = [b for b in spec["binds"] if b[0] == "rw"]
    assert sorted(dest for _, _, dest in rw) == sorted(
        [sb.INSIDE_WORK, "/tmp", sb.INSIDE_HOME, sb.INSIDE_RUN]
    )
    assert all(Path(src).parent == box for _, src, _ in rw)
    shown = [src for mode, src, _ in spec["binds"] if mode == "ro"]
    assert str(ROOT) not in shown and str(ROOT / "solutions") not in shown
    assert str(ROOT / "course_utils") in shown  # the package, not the repository
    head = spec["wrapper"]
    assert "--die-with-parent" in head and "--new-session" in head
    assert "--unshare-all" in head or {"--unshare-pid", "--unshare-net"} <= set(head)
    assert spec["unset_env"] == ["JPY_PARENT_PID"]
    assert spec["connection"]["ip"] == sb.INSIDE_RUN + "/ipc/k"


def test_container_command_isolates_and_limits_the_whole_submission(tmp_path):
    limits = sb.Limits(memory_mb=3000, max_procs=99, disk_mb=500)
    env = {"HOME": sb.INSIDE_HOME, "PATH": "/host/bin", "COURSE_PROFILE": "ci"}
    for engine in ("docker", "podman"):
        cmd = sb.container_command(
            engine, name="course-grade-x", image="img:1", box=tmp_path, limits=limits, env=env
        )
        assert cmd[:2] == [engine, "run"] and cmd[-1] == "img:1"
        text = " ".join(cmd)
        for part in (
            "--network none",
            "--read-only",
            "--cap-drop ALL",
            "--memory 3000m",
            "--memory-swap 3000m",
            "--pids-limit 99",
            "--user 65534:65534",
            "--rm",
            "--env COURSE_PROFILE=ci",
        ):
            assert part in text, part
        volumes = [cmd[i + 1] for i, w in enumerate(cmd) if w == "--volume"]
        assert sorted(v.split(":")[0] for v in volumes) == sorted(
            str(tmp_path / d) for d in ("work", "tmp", "home", "run")
        )
        assert "/host/bin" not in text  # the image's own PATH


def test_docker_without_a_daemon_is_one_clear_error(tmp_path, monkeypatch, capsys):
    fake = tmp_path / "bin" / "docker"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'Cannot connect to the Docker daemon' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr("course_utils.grading.runner._PROBLEMS", {})
    assert "daemon is not reachable" in sb.container_problem("docker")
    from course_utils import cli as course_cli

    code = course_cli.main(["grade", str(FIXTURES / "submissions" / "solution.ipynb"), "-q"]
                           + ["--sandbox", "docker", "--checks", str(CHECKS)])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == grade_cli.EXIT_GRADER
    assert len(err) == 1 and "--sandbox docker" in err[0] and "daemon" in err[0]


# ----------------------------------------------------------------------------- result channel


def test_result_files_are_read_without_following_links_or_blocking(tmp_path):
    (tmp_path / "secret").write_text("grader's file")
    (tmp_path / "result.json").symlink_to(tmp_path / "secret")
    with pytest.raises(OSError):
        hv.read_capped(str(tmp_path), "result.json", 100)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(hv.UnsafeResult, match="not a regular file"):
        hv.read_capped(str(tmp_path), "fifo", 100)
    (tmp_path / "big").write_bytes(b"x" * 101)
    with pytest.raises(hv.UnsafeResult, match="too large"):
        hv.read_capped(str(tmp_path), "big", 100)
    linked_dir = tmp_path / "linked"
    linked_dir.symlink_to(tmp_path)
    with pytest.raises(OSError):
        hv.read_capped(str(linked_dir), "secret", 100)
    assert hv.load_harvest(str(tmp_path), 1).status == "malformed"


def _npz_with_header(shape, data: bytes, compress=zipfile.ZIP_STORED) -> bytes:
    buf = io.BytesIO()
    header = np.lib.format.header_data_from_array_1_0(np.zeros(0))
    header["shape"] = shape
    with zipfile.ZipFile(buf, "w", compression=compress) as zf:
        with zf.open("a0.npy", "w", force_zip64=True) as fh:
            np.lib.format.write_array_header_1_0(fh, header)
            fh.write(data)
    return buf.getvalue()


def test_zip_bombs_and_forged_array_headers_are_refused_before_inflating(monkeypatch):
    # 32 MiB of zeros in 32 KB, over a cap lowered to 16 MiB for speed (the real cap is
    # 256 MiB and the hostile batch sends 1 GiB): refused from the zip directory alone
    monkeypatch.setattr(hv, "MAX_ARRAYS_BYTES", 16 << 20)
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        with zf.open("a0.npy", "w", force_zip64=True) as fh:
            for _ in range(2):
                fh.write(bytes(16 << 20))
    assert len(bomb.getvalue()) < 1 << 20
    with pytest.raises(hv.UnsafeResult, match="inflates"):
        hv.load_arrays(bomb.getvalue(), {"a0"})
    # a header that claims 2**40 elements over 8 bytes of data
    with pytest.raises(hv.UnsafeResult, match="does not match"):
        hv.load_arrays(_npz_with_header((1 << 40,), bytes(8)), {"a0"})
    ok = hv.load_arrays(_npz_with_header((2,), np.array([1.5, 2.5]).tobytes()), {"a0"})
    assert ok["a0"].tolist() == [1.5, 2.5]
    too_many = io.BytesIO()
    with zipfile.ZipFile(too_many, "w") as zf:
        for i in range(hv.MAX_ARRAYS + 1):
            zf.writestr(f"a{i}.npy", b"")
    with pytest.raises(hv.UnsafeResult, match="members"):
        hv.load_arrays(too_many.getvalue(), set())


def test_deeply_nested_or_broken_result_json_is_the_students_error(tmp_path):
    deep = "[" * 100_000 + "]" * 100_000
    assert not hv.json_depth_ok(deep) and hv.json_depth_ok('{"a": "[[[[[[[[[[[[[[[[[[[[[["}')
    for text in (deep, '{"status": "passed", "outputs": 1', "\udcff"):
        (tmp_path / "result.json").write_bytes(text.encode("utf-8", "surrogateescape"))
        h = hv.load_harvest(str(tmp_path), 2)
        assert h.status == "malformed" and "unreadable" in h.message


def test_result_with_a_forged_case_index_or_object_array_is_malformed(tmp_path):
    arr = _npz_with_header((1,), np.array([1.0]).tobytes())
    (tmp_path / "outputs.npz").write_bytes(arr)
    for entry in (
        {"case": True, "key": "y", "array": "a0", "dtype": "torch.float64"},
        {"case": 9, "key": "y", "array": "a0"},
        {"case": 0, "key": "y", "array": "missing"},
    ):
        (tmp_path / "result.json").write_text(
            json.dumps({"status": "passed", "outputs": [entry]}), encoding="utf-8"
        )
        assert hv.load_harvest(str(tmp_path), 1).status == "malformed", entry


# ----------------------------------------------------------------------------- safe reports

EVIL = (
    "boom\n# Score: 6 / 6\n![pwned](https://evil.example/x.png) [click](https://evil.example)"
    '\n```\n</details><img src=x onerror=alert(1)>\n=HYPERLINK("https://evil.example")'
)


def _evil_report() -> dict:
    return {
        "notebook": f"/subs/{INJECTION_NAME}",
        "student": INJECTION_NAME[:-6],
        "assignment": None,
        "total": 0,
        "max": 3,
        "percent": 0.0,
        "exercises": [
            {
                "id": "99.1",
                "title": "Scale",
                "points": 0,
                "max_points": 1,
                "status": "error",
                "message": EVIL,
                "flags": [],
                "runtime_s": 0.1,
            },
            {
                "id": "99.2",
                "title": "Norm",
                "points": 0,
                "max_points": 2,
                "status": "error",
                "message": "=1+1 | **x** [a](b)",
                "flags": [],
                "runtime_s": 0.1,
            },
        ],  # fmt: skip
        "flags": [],
        "notes": ["+cmd|' /C calc'!A0 ![x](y)"],
        "error": "-2+3 [link](https://evil.example)",
        "error_kind": None,
        "kernel": {"status": "ok", "detail": ""},
        "cells": {"executed": 3, "errors": [{"cell": 2, "ename": "# H1", "evalue": "x"}]},
        "output": {"bytes_seen": 0, "bytes_kept": 0, "truncated": False},
        "seed": 1,
        "runtime_s": 1.0,
    }


def assert_markdown_is_inert(markdown: str, headings: int) -> None:
    """Rendered, the Markdown has exactly our headings and no link, image or raw HTML."""
    html = mistune.html(markdown)
    assert len(re.findall(r"<h[1-6]", html)) == headings, html
    for tag in ("<a ", "<img", "<details", "</details"):
        assert tag not in html, (tag, html)


def test_feedback_markdown_cannot_be_broken_out_of():
    md = rp.feedback_markdown(_evil_report())
    # ours: "Feedback", "What to look at", one per exercise, "Notes from the grader"
    assert_markdown_is_inert(md, headings=5)
    assert "Score:** 0 / 3" in md


def test_instructor_report_and_classroom_summary_are_inert():
    rep = _evil_report()
    rep["similarity"] = {"99.1": {"course": 0.5, "peer": 0.9, "peer_with": "[x](y) # z"}}
    assert_markdown_is_inert(rp.instructor_report([rep]), headings=2)


def test_csv_cells_a_spreadsheet_would_run_are_neutralised(tmp_path):
    rp.write_csv([_evil_report()], tmp_path / "g.csv")
    rows = list(csv.reader(open(tmp_path / "g.csv", encoding="utf-8")))
    for cell in rows[1]:
        assert not cell.startswith(("=", "+", "-", "@", "\t", "\r")), cell
    assert rows[1][0].startswith("'=HYPERLINK")
    assert rp.csv_safe(-1.5) == -1.5 and rp.csv_safe("plain") == "plain"


def test_junit_xml_escapes_student_text(tmp_path):
    import xml.etree.ElementTree as ET

    rep = _evil_report()
    rep["exercises"][0]["message"] = "]]><injected/>\x00\x1b[31m"
    rp.write_junit([rep], tmp_path / "g.xml")
    root = ET.parse(tmp_path / "g.xml").getroot()
    assert not list(root.iter("injected"))


def test_terminal_summary_prints_hints_in_full_without_control_characters():
    rep = _evil_report()
    long = "hint " + "word " * 80 + "END"
    rep["exercises"][1]["message"] = long + "\x1b[2J\r"
    out = grade_cli._summary(rep, detailed=True)
    assert "END" in out and " ".join(out.split()).count("word") == 80
    assert "\x1b" not in out and "\r" not in out


def test_terminal_summary_names_the_cells_that_raised_student_A_15():
    rep = _evil_report()
    rep["cells"] = {
        "executed": 9,
        "errors": [{"cell": 3, "ename": "ZeroDivisionError", "evalue": "division by zero\x1b[2J"}],
    }
    out = grade_cli._summary(rep, detailed=True)
    assert "cells that raised: 4 (ZeroDivisionError)" in out
    assert "cell 4: ZeroDivisionError: division by zero" in out and "\x1b" not in out
    batch = grade_cli._summary(rep, detailed=False)
    assert "cells that raised: 4 (ZeroDivisionError)" in batch and "division" not in batch


def test_missing_file_is_one_clear_line(tmp_path, capsys):
    from course_utils import cli as course_cli

    code = course_cli.main(["grade", str(tmp_path / "nope.ipynb"), "--sandbox", "none"])
    captured = capsys.readouterr()
    assert code == grade_cli.EXIT_BAD_INPUT
    lines = [ln for ln in captured.err.splitlines() if "nope.ipynb" in ln]
    assert lines == [f"course grade: {tmp_path / 'nope.ipynb'}: no such file"]
    assert "points" not in captured.out


# ----------------------------------------------------------------------------- hostile batch


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _alive_with(marker: str) -> list[int]:
    pids = []
    for f in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if marker.encode() in f.read_bytes():
                pids.append(int(f.parent.name))
        except OSError:
            pass
    return pids


@pytest.fixture(scope="module")
def hostile_batch(tmp_path_factory):
    """Two victims and every hostile notebook, each in its own folder, graded in one run."""
    require_bwrap()
    root = tmp_path_factory.mktemp("hostile")
    paths = []
    for name in ("victim_a", *sorted(p.stem for p in HOSTILE.glob("*.ipynb")), "victim_b"):
        folder = root / name
        folder.mkdir()
        if name.startswith("victim"):
            src, dest = FIXTURES / "submissions" / "solution.ipynb", folder / f"{name}.ipynb"
            (folder / "data.txt").write_text("the victim's own file\n")
        else:
            dest = folder / (INJECTION_NAME if name == "injection" else f"{name}.ipynb")
            src = HOSTILE / f"{name}.ipynb"
        shutil.copyfile(src, dest)
        paths.append(dest)
    before = {p: _sha(p) for p in root.rglob("*") if p.is_file()}
    out = root / "out"
    cmd = [sys.executable, "-m", "course_utils.cli", "grade", *map(str, paths)]
    cmd += ["--checks", str(CHECKS), "--reference-dir", str(FIXTURES / "solutions")]
    cmd += ["--assignment", "99_fixture", "--sandbox", "bwrap", "-j", "2"]
    cmd += ["--memory-mb", str(MEMORY_MB), "--cell-timeout", "30", "--json", str(out / "g.json")]
    cmd += ["--csv", str(out / "g.csv"), "--feedback", str(out / "fb"), "--report", str(out / "r.md")]  # fmt: skip
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=root, timeout=1200)
    json_right_after = (out / "g.json").read_text(encoding="utf-8")
    time.sleep(6)  # the survivor wakes up after 4 s
    reports = json.loads((out / "g.json").read_text(encoding="utf-8"))
    return SimpleNamespace(
        run=run,
        root=root,
        out=out,
        paths=paths,
        before=before,
        json_right_after=json_right_after,
        reports=reports,
        by={Path(r["notebook"]).parent.name: r for r in reports},
    )


def _printed_totals(stdout: str) -> dict[str, str]:
    return dict(re.findall(r"^(.+?\.ipynb): (\d+/\d+) points", stdout, re.M))


@pytest.mark.slow
def test_hostile_batch_finishes_with_a_clean_exit_code(hostile_batch):
    run = hostile_batch.run
    assert run.returncode == 0, run.stdout + run.stderr  # no grader error, no bad input
    assert len(hostile_batch.reports) == len(hostile_batch.paths)
    for rep in hostile_batch.reports:
        assert rep["sandbox"]["backend"] == "bwrap" and rep["sandbox"]["isolated"]
        assert rep["error_kind"] is None, rep["error"]


@pytest.mark.slow
def test_victims_keep_their_exact_scores_and_files(hostile_batch):
    for name in ("victim_a", "victim_b"):
        rep = hostile_batch.by[name]
        assert (rep["total"], rep["max"]) == (3, 3), rep
        assert [e["status"] for e in rep["exercises"]] == ["passed", "passed"]
        assert rep["kernel"]["status"] == "ok" and rep["cells"]["errors"] == []
    for path, digest in hostile_batch.before.items():
        assert _sha(path) == digest, f"{path} was modified"


@pytest.mark.slow
def test_hostile_submissions_gain_nothing(hostile_batch):
    for name, rep in hostile_batch.by.items():
        if not name.startswith("victim"):
            assert rep["total"] == 0, (name, rep["exercises"])


@pytest.mark.slow
def test_nothing_a_submission_started_outlives_it(hostile_batch):
    assert _alive_with("course-hostile-") == []
    assert not list(Path(hostile_batch.root).glob("cgb-*"))


@pytest.mark.slow
def test_reports_on_disk_equal_what_was_printed(hostile_batch):
    assert (hostile_batch.out / "g.json").read_text(
        encoding="utf-8"
    ) == hostile_batch.json_right_after
    printed = _printed_totals(hostile_batch.run.stdout)
    on_disk = {
        Path(r["notebook"]).name: f"{r['total']:g}/{r['max']:g}" for r in hostile_batch.reports
    }
    assert printed == on_disk


@pytest.mark.slow
def test_many_processes_share_one_memory_limit(hostile_batch):
    rep = hostile_batch.by["many_processes"]
    box = rep["sandbox"]
    assert box["peak_memory_mb"] <= MEMORY_MB * 1.02, box  # 4 x 700 MB would be 2800 MB
    assert box["peak_memory_mb"] > 1400, box  # the attack really ran (two hogs at least)
    enforced = box["enforced_by"]["memory"]
    if "watchdog" in enforced:  # no cgroup: the watchdog kills the whole submission
        assert box["killed_for"] and "memory" in box["killed_for"]


@pytest.mark.slow
def test_decompression_bomb_costs_its_points_not_the_graders_memory(hostile_batch):
    rep = hostile_batch.by["zip_bomb"]
    assert all(e["status"] == "error" for e in rep["exercises"])
    assert any("inflates" in e["message"] for e in rep["exercises"]), rep["exercises"]
    assert rep["grader_peak_rss_mb"] < 1500


@pytest.mark.slow
def test_nested_result_is_the_students_error(hostile_batch):
    rep = hostile_batch.by["nested_result"]
    assert all("nests deeper" in e["message"] for e in rep["exercises"]), rep["exercises"]


@pytest.mark.slow
def test_injected_markdown_and_formulas_stay_text(hostile_batch):
    feedback = sorted((hostile_batch.out / "fb").glob("*.md"))
    assert len(feedback) == len(hostile_batch.paths)
    evil = next(p for p in feedback if "HYPERLINK" in p.name)
    # "Feedback", "What to look at" and one per exercise (no notes in a sandboxed run)
    assert_markdown_is_inert(evil.read_text(encoding="utf-8"), headings=4)
    assert_markdown_is_inert((hostile_batch.out / "r.md").read_text(encoding="utf-8"), headings=1)
    rows = list(csv.reader(open(hostile_batch.out / "g.csv", encoding="utf-8")))
    for row in rows[1:]:
        for cell in row:
            assert not cell.startswith(("=", "+", "@", "\t", "\r")), cell


def test_course_grade_finds_the_same_references_from_the_root_and_from_notebooks(
    tmp_path, monkeypatch
):
    from course_utils.grading import plan as pl

    for sub in ("solutions", "notebooks"):
        (tmp_path / sub).mkdir()
    monkeypatch.chdir(tmp_path)
    from_root = [p.resolve() for p in pl.reference_dirs(None)]
    monkeypatch.chdir(tmp_path / "notebooks")
    from_notebooks = [p.resolve() for p in pl.reference_dirs(None)]
    assert from_root[:2] == from_notebooks[:2] == [tmp_path / "solutions", tmp_path / "notebooks"]


def test_an_unsandboxed_report_says_so(fx_opts):
    from course_utils.grading.grader import NOT_SANDBOXED, grade_submission

    fx_opts.sandbox, fx_opts.kernel_name = "none", "no-such-kernel"
    rep = grade_submission(FIXTURES / "submissions" / "solution.ipynb", fx_opts)
    assert rep["sandbox"]["backend"] == "none" and not rep["sandbox"]["isolated"]
    assert NOT_SANDBOXED in rep["notes"] and "not sandboxed" in rp.feedback_markdown(rep)


@pytest.fixture
def fx_opts(monkeypatch):
    from course_utils.grading.grader import GradeOptions

    monkeypatch.syspath_prepend(str(FIXTURES))
    return GradeOptions(
        reference_dir=str(FIXTURES / "solutions"),
        checks_modules=("grading_fixture_checks",),
        assignment="99_fixture",
        startup_timeout=30,
    )


def _fake_proc(root: Path, processes: dict[int, tuple[int, str]]) -> Path:
    for pid, (uid, state) in processes.items():
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "status").write_text(
            f"Name:\tpython\nState:\t{state}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
        )
    (root / "self").mkdir()  # not a pid: ignored
    return root


def test_kill_uid_stops_at_zombies_and_waits_for_the_living(tmp_path):
    """``kill -1`` "succeeds" on zombies, so the killer asks /proc whether anything of the
    uid is still alive instead of retrying for two seconds after every submission."""
    from course_utils.grading import launch

    uid = 201234
    assert launch.alive(uid, str(_fake_proc(tmp_path / "a", {7: (uid, "S (sleeping)")})))
    assert launch.alive(uid, str(_fake_proc(tmp_path / "b", {7: (uid, "Z (zombie)")}))) is False
    assert launch.alive(uid, str(_fake_proc(tmp_path / "c", {7: (0, "R (running)")}))) is False
    assert launch.alive(uid, str(tmp_path / "missing")) is None
    assert launch.alive(os.getuid()) is True  # the real /proc: pytest's parent has this uid
