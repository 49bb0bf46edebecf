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


def test_workflow_uses_no_secrets():
    text = WORKFLOW.read_text(encoding="utf-8")
    assert "secrets." not in text
    assert not re.search(r"\$\{\{\s*secrets", text)


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
    assert args.classroom == "classroom.json"


def test_reporter_gets_base64_results_for_its_runner(workflow):
    report = workflow["jobs"]["report"]
    step = _steps(report)[0]
    runners = [r.strip() for r in step["with"]["runners"].split(",")]
    for runner in runners:  # the reporter reads <RUNNER>_RESULTS, base64-encoded JSON
        assert f"{runner.upper()}_RESULTS" in step["env"]
        assert "needs.grade.outputs.result" in step["env"][f"{runner.upper()}_RESULTS"]
    grade_run = next(s["run"] for s in _steps(workflow["jobs"]["grade"]) if s.get("id") == "grade")
    assert "base64 -w 0 classroom.json" in grade_run
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
