"""The GitHub workflow runs the same steps as ``.ci/run``, in the same order."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
PLUMBING = re.compile(r"^(set |cd |export |if |fi\b|then\b|else\b|start=|echo |[A-Z_]+=)")
# the README's virtual environment: one step here, setup-python's own environment on GitHub
VENV = ("python -m venv .venv", "source .venv/bin/activate")


def ci_run_steps() -> list[str]:
    """The commands of .ci/run (comments and shell plumbing left out)."""
    steps = []
    for line in (REPO / ".ci" / "run").read_text().splitlines():
        command = line.split(" #", 1)[0].strip()
        if command in VENV:
            continue
        if command and not command.startswith("#") and not PLUMBING.match(command):
            steps.append(command)
    return steps


def workflow() -> dict:
    return yaml.safe_load((REPO / ".github" / "workflows" / "ci.yml").read_text())


def test_ci_run_has_the_steps_the_workflow_must_mirror():
    steps = ci_run_steps()
    assert steps[0] == "bash .ci/install-system-packages"  # bubblewrap, chromium
    assert steps[1].startswith("python -m pip install torch==")
    assert {
        "course doctor",
        "course release --check",
        'python -m pytest -n 2 -m "not slow"',
        "python -m pytest -n 2 -m slow",
    } <= set(steps)
    assert {"ruff format --check .", "ruff check ."} <= set(steps)


def test_workflow_runs_ci_runs_steps_in_order_on_ubuntu_on_every_tested_python():
    wf = workflow()
    assert {"push", "pull_request"} <= set(
        wf[True] if True in wf else wf["on"]
    )  # "on" is YAML 1.1 True
    job = wf["jobs"]["test"]
    assert job["runs-on"] == "ubuntu-latest"
    assert job["env"]["COURSE_PROFILE"] == "ci"
    assert "continue-on-error" not in job  # every Python gates
    setup = [s for s in job["steps"] if s.get("uses", "").startswith("actions/setup-python")]
    assert setup and setup[0]["with"]["python-version"] == "${{ matrix.python }}"
    runs = [s["run"].strip() for s in job["steps"] if "run" in s]
    position = -1
    for step in ci_run_steps():
        # the same command, in order; the workflow may add options (torch's CPU index)
        found = [i for i, run in enumerate(runs) if run == step or run.startswith(step + " ")]
        assert found, f"the workflow does not run .ci/run's step {step!r}"
        assert found[0] > position, f"the workflow runs {step!r} out of .ci/run's order"
        position = found[0]


def test_every_python_runs_the_quick_tier_and_311_the_slow_tier():
    """Newcomer F5: requires-python admitted 3.10 while only 3.11 was tested."""
    job = workflow()["jobs"]["test"]
    assert job["strategy"]["matrix"]["python"] == ["3.10", "3.11", "3.13"]
    assert job["strategy"]["fail-fast"] is False  # one version's failure hides no other's
    steps = {s["run"].strip(): s for s in job["steps"] if "run" in s}
    assert "if" not in steps['python -m pytest -n 2 -m "not slow"']
    assert steps["python -m pytest -n 2 -m slow"]["if"] == "matrix.python == '3.11'"
    assert not any(s.get("continue-on-error") for s in job["steps"])
    assert set(workflow()["jobs"]) == {"test"}


def test_requires_python_is_the_range_ci_tests():
    """From the oldest Python the matrix tests to below the next one after the newest: pip
    refuses an untested newer Python rather than installing it silently."""
    from packaging.specifiers import SpecifierSet

    from course_utils import doctor

    matrix = workflow()["jobs"]["test"]["strategy"]["matrix"]["python"]
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    spec = SpecifierSet(re.search(r'^requires-python\s*=\s*"([^"]+)"', text, re.MULTILINE).group(1))
    minors = sorted(int(v.split(".")[1]) for v in matrix)
    assert spec == SpecifierSet(f">=3.{minors[0]},<3.{minors[-1] + 1}")
    assert all(f"3.{m}" in spec for m in range(minors[0], minors[-1] + 1))
    assert tuple(matrix) == doctor.TESTED_PYTHONS  # what course doctor calls "supported"
    assert doctor.ALLOWED_PYTHONS == tuple(f"3.{m}" for m in range(minors[0], minors[-1] + 1))


def test_ci_run_installs_into_a_venv_inside_the_clone_as_the_readme_says():
    """A newcomer follows the README: ``.venv`` in the clone, activated, torch first, then the
    course; .ci/run does the same (so a sandbox that cannot see such a venv fails CI)."""
    lines = [ln.split(" #", 1)[0].strip() for ln in (REPO / ".ci" / "run").read_text().splitlines()]
    order = [lines.index(c) for c in (*VENV, "python -m pip install torch==2.13.0")]
    assert order == sorted(order), order
    assert lines.index(VENV[1]) < lines.index('python -m pip install -e ".[dev]"')
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert all(c in readme for c in VENV)


def test_ci_runs_in_a_venv_that_cannot_see_the_base_interpreters_packages():
    """.ci/run's venv is made as the README says, from whatever Python the machine has, and sees
    none of that Python's packages: what passes in CI passes on a fresh machine (newcomer F1)."""
    if os.environ.get("COURSE_CI_CLEAN_VENV") != "1":
        pytest.skip("only under .ci/run (COURSE_CI_CLEAN_VENV=1), which makes its own venv")
    assert sys.prefix != sys.base_prefix, "not in a venv"
    cfg = (Path(sys.prefix) / "pyvenv.cfg").read_text().splitlines()
    assert "include-system-site-packages = false" in cfg
    base_paths = [p for p in sys.path if p.startswith(sys.base_prefix) and "site-packages" in p]
    assert base_paths == [], base_paths
