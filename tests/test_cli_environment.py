"""The ``course`` command's environment checks (issue 35, newcomer F4, F10, F11):
``course --version``; an invalid ``COURSE_PROFILE`` is one line and exit 2 for every command
(``course grade`` included); ``COURSE_PROFILE=gpu`` without CUDA refuses to run notebooks
unless asked (``COURSE_ALLOW_SLOW=1`` or ``--allow-slow``), printing the CPU estimate; the
doctor reports the sandbox, Chromium and the Python version, and folds the gpu profile's
section on a machine without CUDA. Fast: nothing is graded.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from course_utils import doctor
from course_utils.runtime import profiles

REPO = Path(__file__).resolve().parents[1]


def course(*argv: str, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k not in ("COURSE_PROFILE", "COURSE_ALLOW_SLOW")}
    full.update(env)
    full["PYTHONPATH"] = os.pathsep.join([str(REPO), full.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run(
        [sys.executable, "-m", "course_utils.cli", *argv],
        capture_output=True,
        text=True,
        env=full,
        timeout=120,
    )


def test_course_version():
    r = course("--version")
    assert r.returncode == 0 and r.stdout.startswith("course ") and r.stdout.strip()[7:]


@pytest.mark.parametrize("command", [["doctor"], ["grade", "x.ipynb"], ["release", "--check"]])
def test_an_invalid_profile_is_one_line_and_exit_2(command):
    r = course(*command, COURSE_PROFILE="foo")
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and "COURSE_PROFILE='foo' is not a profile" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_the_gpu_profile_without_cuda_refuses_to_grade_unless_asked():
    r = course("grade", "missing.ipynb", COURSE_PROFILE="gpu")
    assert r.returncode == 2 and "without a CUDA GPU" in r.stderr and " h " in r.stderr
    assert "COURSE_ALLOW_SLOW=1" in r.stderr
    for allowed in (course("grade", "missing.ipynb", COURSE_PROFILE="gpu", COURSE_ALLOW_SLOW="1"),
                    course("--allow-slow", "grade", "missing.ipynb", COURSE_PROFILE="gpu")):  # fmt: skip
        assert "no such file" in allowed.stderr and "CUDA" not in allowed.stderr


def test_slow_gpu_problem_rules(monkeypatch):
    monkeypatch.delenv(profiles.ALLOW_SLOW_VAR, raising=False)
    monkeypatch.delenv(profiles.DEVICE_VAR, raising=False)
    monkeypatch.setenv(profiles.ENV_VAR, "gpu")
    assert "h for all notebooks" in profiles.slow_gpu_problem(cuda=False)
    assert profiles.slow_gpu_problem(cuda=True) == ""
    monkeypatch.setenv(profiles.ALLOW_SLOW_VAR, "1")
    assert profiles.slow_gpu_problem(cuda=False) == ""
    monkeypatch.setenv(profiles.ENV_VAR, "cpu")
    monkeypatch.delenv(profiles.ALLOW_SLOW_VAR)
    assert profiles.slow_gpu_problem(cuda=False) == ""
    monkeypatch.setenv(profiles.ENV_VAR, "laptop")
    with pytest.raises(profiles.ProfileError, match="one of ci, cpu, gpu"):
        profiles.profile_name()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_doctor_folds_the_gpu_section_and_reports_sandbox_chromium_and_python(monkeypatch):
    monkeypatch.setenv("COURSE_PROFILE", "cpu")
    folded = doctor.report(full_gpu=False)
    full = doctor.report(full_gpu=True)
    assert not any(line.startswith("gpu profile 08:") for line in folded)
    assert any(line.startswith("gpu profile 08:") for line in full)
    assert len(full) - len(folded) >= 10
    text = "\n".join(folded)
    assert "sandbox     " in text and "cgroups" in text and "user " in text
    assert "chromium    " in text and "Python 3." in text


def test_python_support_statuses():
    assert "supported" in doctor.python_support((3, 11))
    assert "not tested" in doctor.python_support((3, 12)) or "supported" in doctor.python_support(
        (3, 12)
    )
    assert "NOT supported" in doctor.python_support((3, 9))
