"""The third red team's cases (``shared/reviews/turn4/redteam-v3.md``), one test per case id.

Fast tests pin each fix on its own (no kernel). ``test_SURROGATE_ENV_LEAK_GH_CMDS_batch`` grades
one small hostile batch end to end, in the sandbox, as ``course grade -j 2`` does.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import sys
import time
from pathlib import Path

import pytest

from course_utils.checks.answers import read_answer, stub_answer
from course_utils.grading import cli as grade_cli
from course_utils.grading import confine, launch
from course_utils.grading import grader as gr
from course_utils.grading import kernel as kn
from course_utils.grading import plan as pl
from course_utils.grading import reports as rp

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "grading"
SOLUTION = FIXTURES / "submissions" / "solution.ipynb"
REFS = FIXTURES / "solutions"
CHECKS = FIXTURES / "grading_fixture_checks.py"


# ----------------------------------------------------------------------------- SURROGATE


def test_SURROGATE_clean_report_survives_every_writer(tmp_path):
    """A lone surrogate in an exception message and a non-UTF-8 folder name reach the
    writers as encodable text: grades.json, the CSV and the feedback are all written."""
    rep = gr.lost_report(tmp_path / "bob\udcff" / "x.ipynb", None, "bad \ud800 value")
    rep["exercises"] = [
        {
            "id": "00.1",
            "title": "t",
            "points": 0,
            "max_points": 2,
            "status": "error",
            "message": "ValueError: bad \ud800 value",
            "flags": ["odd \udcff"],
            "runtime_s": 0.0,
        }
    ]
    rep["student"] = "bob\udcff"
    clean = gr.clean_text(rep)
    text = json.dumps(clean, ensure_ascii=False)
    text.encode("utf-8")  # no surrogate left anywhere, keys included
    assert "\\ud800" in text and "\\udcff" in text  # shown, not silently dropped
    rp.write_json([clean], tmp_path / "grades.json")
    rp.write_csv([clean], tmp_path / "grades.csv")
    rp.write_feedback([clean], tmp_path / "fb")
    assert (tmp_path / "grades.json").stat().st_size > 0
    assert (tmp_path / "grades.csv").stat().st_size > 0
    assert list((tmp_path / "fb").iterdir())


def test_SURROGATE_grader_reports_leave_clean():
    """``grade_submission``'s reports are clean whatever the message (``_finish``)."""
    rep = gr.lost_report("x.ipynb", None, "died: \ud800")
    json.dumps(rep, ensure_ascii=False).encode("utf-8")


# ----------------------------------------------------------------------------- DEEPJSON


def test_DEEPJSON_recursion_is_bad_input_not_a_grader_failure(tmp_path):
    """A notebook nested 100,000 deep is the student's bad input (exit 2), not exit 3."""
    p = tmp_path / "deep.ipynb"
    p.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    with pytest.raises(pl.BadSubmission, match="nested too deeply"):
        pl.read_notebook(p)


# ----------------------------------------------------------------------------- TOKBOMB


def test_TOKBOMB_python_source_is_linear():
    """600 shell lines and 200,000 assignments (a 1.4 MB cell): well under a second or two,
    where IPython's transformer alone took minutes; the shell lines become ``pass``."""
    cell = "!true\n" * 600 + "x = 1\n" * 200_000
    t0 = time.process_time()
    out = pl.python_source(cell)
    assert time.process_time() - t0 < 5
    assert out.startswith("pass\npass\n") and out.count("x = 1") == 200_000


def test_TOKBOMB_small_cells_keep_ipython_semantics():
    src = "%matplotlib inline\nx = !ls\nfor i in range(3):\n    %time f(i)\n"
    assert "getoutput('ls')" in pl.python_source(src)
    big = "x = !ls\nif a != b:\n    !ls\n" + "z = 1\n" * 30_000 + "len?\n"
    import ast

    tree = ast.parse(pl.python_source(big))  # the linear reading keeps the cell valid Python
    assert isinstance(tree.body[0], ast.Assign)


# ----------------------------------------------------------------------------- ENFILE & host


def test_ENFILE_every_kernel_process_has_a_descriptor_limit():
    assert launch.RLIMITS["nofile"] == resource.RLIMIT_NOFILE
    assert 0 < kn.MAX_OPEN_FILES <= 1024


def test_ENFILE_refuses_a_batch_that_could_fill_the_file_table():
    if not Path("/proc/sys/fs/file-max").exists():
        pytest.skip("no /proc/sys/fs/file-max")
    file_max = int(Path("/proc/sys/fs/file-max").read_text().split()[0])
    jobs = file_max // (256 * kn.MAX_OPEN_FILES) + 1
    problem = grade_cli.host_problem(jobs, 0, 256, True)
    assert "file table" in problem
    assert grade_cli.host_problem(jobs, 0, 256, False) == ""  # no sandbox: nothing to bound
    assert "file table" in grade_cli.host_problem(1, 0, 0, True)  # --max-procs 0: unbounded
    assert grade_cli.host_problem(2, 2048, 256, True) == ""  # the tests' own batches


def test_JOBS_MEMORY_refuses_more_memory_than_the_machine_has():
    ram_mb = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") >> 20
    problem = grade_cli.host_problem(4, ram_mb // 2, 256, False)
    assert "RAM" in problem and "-j 4" in problem
    assert grade_cli.host_problem(1, ram_mb // 2, 256, False) == ""
    assert grade_cli.host_problem(64, 0, 256, False) == ""  # --memory-mb 0: no limit asked


def test_UID_LOCKS_live_at_a_fixed_path_not_under_tmpdir(tmp_path, monkeypatch):
    assert confine.UidLease.LOCK_DIR == "/run/course-grade-uids"
    if os.geteuid() != 0:
        pytest.skip("uid leases are for root")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    lease = confine.UidLease()
    try:
        assert Path(lease.fh.name).parent == Path(confine.UidLease.LOCK_DIR)
        assert not (tmp_path / "course-grade-uids").exists()
    finally:
        lease.release()


# ----------------------------------------------------------------------------- ENV-LEAK


def test_ENV_LEAK_exact_allow_list():
    base = {
        "PATH": "/bin",
        "COURSE_SUBMISSIONS_TOKEN": "rt4-canary-8c1f",
        "LC_RT4_NOTE": "rt4-canary-lc",
        "LC_ALL": "C.UTF-8",
        "COURSE_DEVICE": "cpu",
    }
    env = kn.kernel_env(profile=None, threads=1, hide_gpus=True, ipython_dir="/x", base=base)
    assert "COURSE_SUBMISSIONS_TOKEN" not in env and "LC_RT4_NOTE" not in env
    assert env["LC_ALL"] == "C.UTF-8" and env["COURSE_DEVICE"] == "cpu"


# ----------------------------------------------------------------------------- KWARG


def test_KWARG_answer_by_keyword_is_read():
    assert read_answer('answer("00.Q1", value="b")', "00.Q1").value == "b"
    assert read_answer('answer(question_id="00.Q1", value="b")', "00.Q1").value == "b"
    assert read_answer('answer(value=2.5, question_id="03.Q1")', "03.Q1").value == 2.5
    assert read_answer('answer("00.Q1", value=None)', "00.Q1").value is None
    assert stub_answer('answer("00.Q1", value="b")', "00.Q1") == 'answer("00.Q1", value=None)'


# ----------------------------------------------------------------------------- GH-CMDS


def test_GH_CMDS_no_printed_line_is_a_workflow_command():
    text = "  [00.1] x: error\n      ::error title=t::graded 4/4\r::add-mask::00.1\n ok ::x"
    out = grade_cli.no_workflow_commands(text)
    import re

    lines = re.split(r"\r\n|\r|\n", out)
    assert not [line for line in lines if line.lstrip().startswith("::")]
    assert "| ::error title=t::graded 4/4" in out and lines[-1] == " ok ::x"


# ----------------------------------------------------------------------------- end to end

ATTACK = [
    r"""
import os, resource
_seen = sorted(k + "=" + v for k, v in os.environ.items() if k.startswith(("COURSE_", "LC_")))
_nofile = resource.getrlimit(resource.RLIMIT_NOFILE)
raise ValueError(
    repr(_seen) + f" nofile={_nofile}"
    + "\n::error title=course grade::graded 4/4\n::add-mask::99.1\n::stop-commands::rt4"
)
""",
    r'raise ValueError("bad \ud800 value")',
]


def _submission(dest: Path, attack: list[str]) -> Path:
    nb = json.loads(SOLUTION.read_text(encoding="utf-8"))
    for k, source in enumerate(attack):
        cell = {"cell_type": "code", "id": f"attack-{k}", "metadata": {}, "outputs": []}
        nb["cells"].insert(2 + k, dict(cell, source=source, execution_count=None))
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(nb), encoding="utf-8")
    return dest


@pytest.mark.slow
def test_SURROGATE_ENV_LEAK_GH_CMDS_batch(tmp_path, monkeypatch, capsys):
    """alice (honest), mallory (a surrogate, canaries, workflow commands in one exception
    message) and a folder named ``b"bob\\xff"``: every report is written for all three."""
    from course_utils.grading.sandbox import bwrap_problem

    if bwrap_problem() or os.geteuid() != 0:
        pytest.skip("needs bubblewrap and root")
    paths = [
        _submission(tmp_path / "alice" / "sub.ipynb", []),
        _submission(tmp_path / "mallory" / "sub.ipynb", ATTACK),
        _submission(Path(os.fsdecode(bytes(tmp_path) + b"/bob\xff/sub.ipynb")), []),
    ]
    out = tmp_path / "out"
    monkeypatch.setenv("COURSE_SUBMISSIONS_TOKEN", "rt4-canary-8c1f")
    monkeypatch.setenv("LC_RT4_NOTE", "rt4-canary-lc")
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    from course_utils import cli as course_cli

    code = course_cli.main(
        ["grade", *map(str, paths), "--checks", str(CHECKS), "--reference-dir", str(REFS)]
        + ["--assignment", "99_fixture", "--cell-timeout", "20", "--memory-mb", "2048"]
        + ["-j", "2", "--sandbox", "bwrap", "--json", str(out / "grades.json")]
        + ["--csv", str(out / "grades.csv"), "--feedback", str(out / "fb")]
    )
    printed = capsys.readouterr().out
    assert code in (0, 1), printed
    reports = json.loads((out / "grades.json").read_text(encoding="utf-8"))
    assert len(reports) == 3 and (out / "grades.csv").stat().st_size > 0
    assert len(list((out / "fb").iterdir())) == 3
    everything = (out / "grades.json").read_text() + "".join(
        p.read_text() for p in (out / "fb").iterdir()
    )
    assert "\\ud800" in everything  # mallory's message is there, escaped
    assert "rt4-canary" not in everything  # ENV-LEAK
    assert f"nofile=({kn.MAX_OPEN_FILES}, {kn.MAX_OPEN_FILES})" in everything  # ENFILE
    assert not [ln for ln in printed.splitlines() if ln.lstrip().startswith("::")]  # GH-CMDS
    shutil.rmtree(tmp_path, ignore_errors=True)


# ----------------------------------------------------------------------------- EXECUTED-HTML


def test_EXECUTED_HTML_markup_is_kept_inert_and_still_compared():
    """``--executed`` renders no student markup (XSS in an instructor's HTML export); the
    nbval-style comparison still sees it."""
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        from nbval_compare import _comparable
    finally:
        sys.path.remove(str(ROOT / "tests"))
    html = {"text/html": "<script>alert(1)</script>", "text/plain": "df"}
    out = gr._inert({"output_type": "display_data", "data": html, "metadata": {}})
    assert set(out["data"]) == {"text/plain"}
    assert out["metadata"]["grader_inert"] == {"text/html": "<script>alert(1)</script>"}
    only = gr._inert({"output_type": "display_data", "data": {"text/markdown": "<b>x"}})
    assert "text/markdown" not in only["data"]
    stored = {"output_type": "display_data", "data": html, "metadata": {}}
    assert _comparable([out])[0]["data"] == _comparable([stored])[0]["data"]
