"""The GitHub Classroom workflow template: safe by construction, and it runs a real command."""

from __future__ import annotations

import argparse
import base64
import json
import re
import shlex
from pathlib import Path

import pytest
import yaml

from course_utils.grading import cli
from course_utils.grading.reports import classroom_result

WORKFLOW = Path(__file__).resolve().parents[1] / ".github" / "classroom" / "autograde.yml"


@pytest.fixture(scope="module")
def workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))


def _steps(job: dict) -> list[dict]:
    return job.get("steps", [])


def _runs_student_code(job: dict) -> bool:
    return any(
        "run" in s or str(s.get("uses", "")).startswith("actions/checkout") for s in _steps(job)
    )


def _grade_command(workflow: dict) -> list[str]:
    runs = [s["run"] for job in workflow["jobs"].values() for s in _steps(job) if "run" in s]
    text = "\n".join(runs).replace("\\\n", " ")
    line = next(ln for ln in text.splitlines() if "course grade" in ln)
    words = shlex.split(line[line.index("course grade") :])
    return words


def test_workflow_is_valid_yaml_with_jobs_and_triggers(workflow):
    assert workflow["name"] == "Autograding Tests"
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as True
    assert "push" in triggers
    assert set(workflow["jobs"]) == {"grade", "report"}


def test_workflow_grants_no_token_permissions_where_student_code_runs(workflow):
    assert workflow["permissions"] == {}
    student_jobs = [job for job in workflow["jobs"].values() if _runs_student_code(job)]
    assert student_jobs, "the grading job must be recognised"
    for job in student_jobs:
        assert job.get("permissions") == {}


def test_reporting_job_runs_no_student_code_and_only_the_classroom_reporter(workflow):
    report = workflow["jobs"]["report"]
    assert not _runs_student_code(report)
    uses = [s["uses"] for s in _steps(report)]
    assert uses == ["classroom-resources/autograding-grading-reporter@v1"]
    # the only permissions in the whole file: what the reporter needs to post the points
    assert report["permissions"] == {"checks": "write", "actions": "read"}
    assert report["name"] == "Autograding Tests"  # the check run the reporter updates


def test_checkout_does_not_persist_credentials(workflow):
    checkouts = [
        s
        for job in workflow["jobs"].values()
        for s in _steps(job)
        if str(s.get("uses", "")).startswith("actions/checkout")
    ]
    assert checkouts
    for step in checkouts:
        assert step["with"]["persist-credentials"] is False


def _keys_step(workflow: dict) -> dict:
    return next(s for s in _steps(workflow["jobs"]["grade"]) if "keys" in s.get("name", ""))


def test_only_the_keys_step_reads_a_secret_before_any_student_code_runs(workflow):
    """Issue 32: the instructor's keys come from a private checkout through one secret, read by
    one step that runs before the notebook is copied and runs nothing of the submission; the
    grading step, where student code runs, sees no secret."""
    text = WORKFLOW.read_text(encoding="utf-8")
    assert text.count("secrets.") == 1, "one secret, COURSE_KEYS_TOKEN, and only once"
    keys = _keys_step(workflow)
    assert re.fullmatch(r"\$\{\{\s*secrets\.COURSE_KEYS_TOKEN\s*\}\}", keys["env"]["KEYS_TOKEN"])
    assert keys["if"] == "env.COURSE_KEYS_REPO != ''"
    steps = _steps(workflow["jobs"]["grade"])
    grade = next(s for s in steps if s.get("id") == "grade")
    assert steps.index(keys) < steps.index(grade)
    for step in steps:
        if step is not keys:
            assert "secrets" not in json.dumps(step), step.get("name")
    for word in ("NOTEBOOK", "GITHUB_WORKSPACE", "course grade", "python"):
        assert word not in keys["run"], f"the keys step must not touch the submission: {word}"
    assert "$KEYS_TOKEN" not in keys["run"].split("clone", 1)[1], "the token goes in a header only"
    assert workflow["env"]["COURSE_KEYS_REPO"] == "", (
        "no keys repository until the instructor names one"
    )
    readme = (WORKFLOW.parent / "README.md").read_text(encoding="utf-8")
    for word in ("COURSE_KEYS_TOKEN", "COURSE_KEYS_REPO", "ASSIGNMENT_PREFIX", "private"):
        assert word in readme, f"the Classroom README does not explain {word}"


FAKE_GIT = """#!/bin/sh
# stands for `git -c http.extraHeader=... clone --quiet --depth 1 -- URL DIR`: a checkout of the
# instructor's course, solutions and all
echo "$@" >> "$GIT_CALLS"
for last; do :; done
mkdir -p "$last/.git" "$last/solutions" "$last/course_utils/lessons/nb03_x" "$last/course_utils/checks"
echo token-in-config > "$last/.git/config"
echo "answer" > "$last/solutions/03_x.ipynb"
echo "QUESTIONS = []" > "$last/course_utils/lessons/nb03_x/questions.py"
echo "x" > "$last/course_utils/lessons/nb03_x/recipe.py"
echo "x" > "$last/course_utils/checks/core.py"
"""


def test_the_keys_step_keeps_only_the_question_files_and_never_writes_the_token(tmp_path, workflow):
    import os
    import subprocess

    temp, bin_ = tmp_path / "temp", tmp_path / "bin"
    temp.mkdir()
    bin_.mkdir()
    (bin_ / "git").write_text(FAKE_GIT)
    (bin_ / "git").chmod(0o755)
    env = dict(
        os.environ,
        PATH=f"{bin_}:{os.environ['PATH']}",
        RUNNER_TEMP=str(temp),
        GIT_CALLS=str(tmp_path / "git-calls"),
        COURSE_KEYS_REPO="https://github.com/teacher/course-keys",
        KEYS_TOKEN="s3cr3t-token",
    )
    proc = subprocess.run(
        ["bash", "-e", "-c", _keys_step(workflow)["run"]], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    keys = temp / "course-keys"
    kept = sorted(str(p.relative_to(keys)) for p in keys.rglob("*") if p.is_file())
    assert kept == ["course_utils/lessons/nb03_x/questions.py"]
    assert oct(keys.stat().st_mode & 0o077) == "0o0"
    call = (tmp_path / "git-calls").read_text()
    assert "s3cr3t-token" not in call and "Authorization: Basic" in call  # base64, in a header
    assert "s3cr3t-token" not in proc.stdout + proc.stderr


def test_the_grader_gets_the_students_login_and_the_keys(tmp_path, workflow):
    words = _grade_command(workflow)
    assert words[words.index("--student") + 1] == "$STUDENT"
    assert words[words.index("--keys") + 1] == "$KEYS"
    # GitHub Classroom's repository <prefix><login>: the login is the identity
    env = {"GITHUB_REPOSITORY": "class-org/attn-03-alice", "GITHUB_ACTOR": "teacher"}
    _, _, calls, _ = _replay(tmp_path / "a", workflow, env={**env, "ASSIGNMENT_PREFIX": "attn-03-"})
    assert "--student alice " in calls
    assert f"--keys {tmp_path / 'a' / 'temp' / 'course'} " in calls  # no keys fetched: the course's
    # no prefix (or another repository name): the login that pushed
    _, _, calls, _ = _replay(tmp_path / "b", workflow, env={**env, "ASSIGNMENT_PREFIX": ""})
    assert "--student teacher " in calls
    _, _, calls, _ = _replay(tmp_path / "c", workflow, env=env, keys=True)
    assert f"--keys {tmp_path / 'c' / 'temp' / 'course-keys'} " in calls


def test_grading_step_runs_without_network(workflow):
    grade = next(s for s in _steps(workflow["jobs"]["grade"]) if s.get("id") == "grade")
    assert "unshare --net" in grade["run"]


def test_grade_command_exists_with_every_option_it_uses(workflow):
    words = _grade_command(workflow)
    assert words[:2] == ["course", "grade"]
    parser = argparse.ArgumentParser(prog="course grade")
    cli.add_arguments(parser)
    help_text = parser.format_help()
    options = [w for w in words if w.startswith("--")]
    assert "--classroom" in options and "--json" in options
    for option in options:
        assert option in help_text, f"{option} is not an option of course grade"
    args = parser.parse_args(words[2:])  # the whole command line parses
    # every output outside the checkout (F2, F6)
    for path in (args.classroom, args.json, args.feedback):
        assert path.startswith("$OUT/"), path


def test_reporter_gets_base64_results_for_its_runner(workflow):
    report = workflow["jobs"]["report"]
    step = _steps(report)[0]
    runners = [r.strip() for r in step["with"]["runners"].split(",")]
    for runner in runners:  # the reporter reads <RUNNER>_RESULTS, base64-encoded JSON
        assert f"{runner.upper()}_RESULTS" in step["env"]
        assert "needs.grade.outputs.result" in step["env"][f"{runner.upper()}_RESULTS"]
    grade_run = next(s["run"] for s in _steps(workflow["jobs"]["grade"]) if s.get("id") == "grade")
    assert 'base64 -w 0 "$OUT/classroom.json"' in grade_run
    assert workflow["jobs"]["grade"]["outputs"]["result"] == "${{ steps.grade.outputs.result }}"


def test_classroom_result_has_the_reporters_format():
    report = {
        "notebook": "00_start_here.ipynb",
        "student": "00_start_here",
        "error_kind": None,
        "exercises": [
            {
                "id": "00.1",
                "title": "Softmax",
                "points": 2,
                "max_points": 2,
                "status": "passed",
                "message": "ok",
                "runtime_s": 0.1,
            },
            {
                "id": "00.2",
                "title": "Mask",
                "points": 0,
                "max_points": 3,
                "status": "failed",
                "message": "wrong axis",
                "runtime_s": 0.2,
            },
        ],
    }
    result = classroom_result([report])
    assert result["version"] == 1 and result["status"] == "fail" and result["max_score"] == 5
    for test in result["tests"]:
        assert set(test) >= {
            "name",
            "status",
            "score",
            "line_no",
            "message",
            "test_code",
            "filename",
            "execution_time",
        }
    assert [t["status"] for t in result["tests"]] == ["pass", "fail"]
    assert sum(t["score"] for t in result["tests"]) == 2
    encoded = base64.b64encode(json.dumps(result).encode()).decode()
    assert json.loads(base64.b64decode(encoded)) == result  # what the reporter decodes


# ----------------------------------------------------------------------------- F1-F6


def _grade_step(workflow: dict) -> str:
    return next(s["run"] for s in _steps(workflow["jobs"]["grade"]) if s.get("id") == "grade")


def test_the_course_is_installed_outside_the_checkout_with_isolated_python(workflow):
    # F4: `python -m pip` run in the checkout would import a committed pip/__main__.py
    install = next(
        s["run"] for s in _steps(workflow["jobs"]["grade"]) if "pip install" in s.get("run", "")
    )
    lines = [ln.strip() for ln in install.splitlines() if ln.strip()]
    assert lines[0] == 'cd "$RUNNER_TEMP"'
    for ln in lines:
        if ln.startswith("python"):
            assert ln.startswith("python -I -m "), ln
    assert "$COURSE_REPO" in install and "$COURSE_REF" in install  # the instructor's pinned source


def test_outputs_are_written_outside_the_checkout_and_removed_first(workflow):
    run = _grade_step(workflow)
    assert 'OUT="$RUNNER_TEMP/grade-out"' in run
    assert run.index('rm -rf -- "$OUT"') < run.index("course grade")
    assert "feedback/*.md" not in run.replace('"$OUT"/feedback/*.md', "")  # never the checkout's
    upload = next(
        s for s in _steps(workflow["jobs"]["grade"]) if "upload-artifact" in s.get("uses", "")
    )
    assert all("runner.temp" in p for p in upload["with"]["path"].splitlines() if p.strip())


def test_the_workflow_says_what_editing_it_can_do_and_names_the_authoritative_path():
    text = WORKFLOW.read_text(encoding="utf-8")
    assert "can make it report any points" in text
    readme = (WORKFLOW.parent / "README.md").read_text(encoding="utf-8")
    assert "course grade" in readme and "authoritative" in readme
    # what the student controls (their own check run) and where the grade comes from instead
    assert "controls their own check run" in readme and "**trusted re-run**" in readme
    assert "--zero-flagged" in readme and "never the workflow" in readme


FAKE_SUDO = """#!/bin/sh
# the workflow's `sudo -E unshare --net -- sudo -E -u USER env ...`, without the privileges
while [ $# -gt 0 ]; do
  case "$1" in
    -E) shift ;;
    -u) shift 2 ;;
    unshare) shift; while [ "$1" != "--" ]; do shift; done; shift ;;
    *) break ;;
  esac
done
exec "$@"
"""

FAKE_COURSE = """#!/bin/sh
# stands for `course grade`: records its call, writes the result this run would write
echo "$@" >> "$CALLS"
while [ $# -gt 0 ]; do
  case "$1" in
    --classroom) C="$2"; shift 2 ;;
    --feedback) F="$2"; shift 2 ;;
    *) shift ;;
  esac
done
printf '%s' "$FAKE_RESULT" > "$C"
mkdir -p "$F" && echo "REAL FEEDBACK" > "$F/submission.md"
exit "${FAKE_EXIT:-0}"
"""

FORGED = {"version": 1, "status": "pass", "max_score": 3, "tests": [{"name": "x", "score": 3}]}
REAL = {"version": 1, "status": "fail", "max_score": 3, "tests": [{"name": "00.1", "score": 0}]}


def _replay(tmp_path, workflow, *, symlink=False, fake_exit=0, stale=True, env=None, keys=False):
    """Run the grade step's script as the runner would, with a stand-in for sudo and for
    `course grade`, in a checkout full of what a hostile student can commit (``env``: more
    of the runner's variables; ``keys``: the keys step fetched the instructor's keys)."""
    import os
    import subprocess

    ws, temp, bin_ = tmp_path / "ws", tmp_path / "temp", tmp_path / "bin"
    for d in (ws, temp, bin_):
        d.mkdir(parents=True)
    if keys:
        (temp / "course-keys" / "course_utils" / "lessons").mkdir(parents=True)
    (bin_ / "sudo").write_text(FAKE_SUDO)
    (bin_ / "course").write_text(FAKE_COURSE)
    for f in bin_.iterdir():
        f.chmod(0o755)
    # F2: a grade.json folder and a forged classroom.json; F6: a forged feedback file
    (ws / "grade.json").mkdir()
    (ws / "grade.json" / ".keep").write_text("")
    (ws / "classroom.json").write_text(json.dumps(FORGED))
    (ws / "feedback").mkdir()
    (ws / "feedback" / "00_start_here.zz.md").write_text("FORGED Score 3 / 3, passed")
    solutions = temp / "course" / "solutions"
    solutions.mkdir(parents=True)
    (solutions / "00_start_here.ipynb").write_text("{}")
    if symlink:  # F3: the instructor's solution, at a predictable place
        (ws / "00_start_here.ipynb").symlink_to(solutions / "00_start_here.ipynb")
    else:
        (ws / "00_start_here.ipynb").write_text("{}")
    if stale:  # a result left over in the runner's temp folder
        (temp / "grade-out").mkdir()
        (temp / "grade-out" / "classroom.json").write_text(json.dumps(FORGED))
    out, summary, calls = tmp_path / "gh_output", tmp_path / "summary.md", tmp_path / "calls"
    env = dict(
        os.environ,
        PATH=f"{bin_}:{os.environ['PATH']}",
        RUNNER_TEMP=str(temp),
        GITHUB_WORKSPACE=str(ws),
        GITHUB_OUTPUT=str(out),
        GITHUB_STEP_SUMMARY=str(summary),
        NOTEBOOK="00_start_here.ipynb",
        CALLS=str(calls),
        FAKE_RESULT=json.dumps(REAL),
        FAKE_EXIT=str(fake_exit),
        **(env or {}),
    )
    proc = subprocess.run(
        ["bash", "-e", "-c", _grade_step(workflow)], cwd=ws, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in out.read_text().splitlines() if ln.startswith("result="))
    result = json.loads(base64.b64decode(line[len("result=") :]))
    return (
        result,
        summary.read_text() if summary.exists() else "",
        calls.read_text() if calls.exists() else "",
        proc.stdout,
    )


def test_committed_results_and_feedback_change_nothing(tmp_path, workflow):
    # F2, F6 and a stale result in $RUNNER_TEMP
    result, summary, calls, _ = _replay(tmp_path, workflow)
    assert result == REAL
    assert "REAL FEEDBACK" in summary and "FORGED" not in summary
    assert "--classroom " + str(tmp_path / "temp" / "grade-out" / "classroom.json") in calls


def test_a_symlinked_notebook_is_refused(tmp_path, workflow):
    # F3 / A8: graded as the target before, full marks
    result, summary, calls, stdout = _replay(tmp_path, workflow, symlink=True)
    assert result["status"] == "error" and result["tests"] == []
    assert calls == ""  # not graded at all
    assert "not a regular file" in stdout and "FORGED" not in summary


def test_a_grader_failure_is_an_error_never_a_stale_or_forged_result(tmp_path, workflow):
    result, *_ = _replay(tmp_path, workflow, fake_exit=3)
    assert result["status"] == "error"


# ----------------------------------------------------------------------------- central grading

ROOT = WORKFLOW.parents[2]
README = WORKFLOW.parent / "README.md"
NB = "00_start_here.ipynb"


def _central_commands() -> list[str]:
    """Steps 2 and 3 of the README's central grading (the lines after `find` and `xargs`)."""
    text = README.read_text(encoding="utf-8")
    block = text[text.index("## The authoritative grade") :]
    block = block[block.index("```bash") + 7 : block.index("```", block.index("```bash") + 7)]
    block = block.replace("\\\n", " ")
    lines = [ln.strip() for ln in block.splitlines() if ln.strip() and not ln.startswith("#")]
    return [ln for ln in lines if ln.startswith(("find ", "xargs "))]


def _git_repo(path: Path, files: dict[str, str], links: dict[str, Path] | None = None) -> None:
    import subprocess

    path.mkdir(parents=True)
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text, encoding="utf-8")
    for name, target in (links or {}).items():
        (path / name).symlink_to(target)
    subprocess.run(["git", "init", "-q", str(path)], check=True)


@pytest.mark.slow
def test_central_grading_commands_on_three_student_repositories(tmp_path):
    import copy
    import os
    import subprocess

    from course_utils import checks
    from course_utils.authoring import release
    from course_utils.grading import plan as pl

    solution = json.loads((ROOT / "solutions" / NB).read_text(encoding="utf-8"))
    stub = release.release_file(ROOT / "solutions" / NB)
    hostile = copy.deepcopy(solution)
    for cell in hostile["cells"]:
        if pl.course_meta(cell) == ("00.1", "exercise"):  # A2: the course's softmax, hidden
            cell["source"] = (
                "import importlib\n"
                "_m = importlib.import_module('course_utils.modeling.' + 'attention')\n"
                "def softmax(x):\n    return getattr(_m, 'soft' + 'max')(x)\n"
            )
        if pl.course_meta(cell) == ("00.2", "exercise"):  # A6: the op it asks to write
            cell["source"] = "def logsumexp(x):\n    return torch.logsumexp(x, -1)\n"
        if pl.course_meta(cell) == ("00.Q1", "answer"):  # and a misconception
            cell["source"] = 'answer("00.Q1", "a")\n'
    subs = tmp_path / "hw0-submissions"
    _git_repo(subs / "alice", {NB: json.dumps(solution)})
    _git_repo(subs / "bob", {NB: stub})
    forged = json.dumps({"version": 1, "status": "pass", "max_score": 3, "tests": []})
    _git_repo(
        subs / "mallory",
        {
            NB: json.dumps(hostile),
            "classroom.json": forged,  # F2
            "grade.json/.keep": "",
            "feedback/00_start_here.zz.md": "Score 3 / 3",  # F6
            "pip/__main__.py": "raise SystemExit('pwned')",  # F4
        },
        {"01_rnn_bottleneck.ipynb": ROOT / "solutions" / "01_rnn_bottleneck.ipynb"},  # F3
    )
    commands = _central_commands()
    assert len(commands) == 2, commands
    reference = tmp_path / "course" / "notebooks"
    reference.mkdir(parents=True)
    (reference / NB).write_text(stub, encoding="utf-8")
    env = dict(os.environ, COURSE_PROFILE="ci")
    find = commands[0].replace("03_scaled_dot_product.ipynb", NB)
    subprocess.run(["bash", "-e", "-c", find], cwd=tmp_path, check=True, env=env)
    listed = (tmp_path / "submissions.txt").read_text().split()
    assert sorted(Path(p).parent.name for p in listed) == ["alice", "bob", "mallory"]
    grade = commands[1].replace("--sandbox bwrap", "--sandbox none")  # speed; same otherwise
    proc = subprocess.run(
        ["bash", "-c", grade + " -q"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    reports = json.loads((tmp_path / "grades.json").read_text())
    by = {Path(r["notebook"]).parent.name: r for r in reports}
    full = sum(e.points for e in [*checks.EXERCISES, *checks.QUESTIONS] if e.notebook == NB)
    assert by["alice"]["total"] == by["alice"]["max"] == full
    assert by["bob"]["total"] == 0
    assert by["mallory"]["total"] == 0, by["mallory"]["exercises"]
    messages = " ".join(e["message"] for e in by["mallory"]["exercises"])
    assert "course's own" in messages and "torch.logsumexp" in messages
    # the symlinked 01 notebook of mallory's repository was never listed for any grading
    listed_01 = subprocess.run(
        [
            "bash",
            "-c",
            find.replace(NB, "01_rnn_bottleneck.ipynb").replace("submissions.txt", "s01.txt"),
        ],
        cwd=tmp_path,
        env=env,
    )
    assert listed_01.returncode == 0
    assert (tmp_path / "s01.txt").read_text() == ""


def test_release_writes_a_student_template_repository_without_solutions(tmp_path):
    from course_utils.authoring import release
    from course_utils.authoring.project import CourseSettings

    settings = CourseSettings("https://github.com/prof/attention-course")
    written = release.write_template(ROOT / "solutions", tmp_path / "template", "03", settings=settings)  # fmt: skip
    names = {p.relative_to(tmp_path / "template").as_posix() for p in written}
    assert names == {".github/workflows/classroom.yml", "README.md", "03_scaled_dot_product.ipynb"}
    files = [p for p in (tmp_path / "template").rglob("*") if p.is_file()]
    assert not any("solutions" in p.relative_to(tmp_path).parts for p in files)
    assert not any("BEGIN SOLUTION" in p.read_text(encoding="utf-8") for p in files)
