"""Packaging: environment.yml agrees with pyproject.toml, and the `course` command runs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

try:
    import tomllib
except ImportError:  # Python 3.10: pytest's own dependency (never pip's vendored copy:
    # importing pip turns setuptools' distutils shim off, test_python_versions.py)
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
# conda package name -> pip name, where they differ
CONDA_TO_PIP = {"pytorch": "torch"}
NOT_PACKAGES = {"python", "pip"}


def _norm(name: str) -> str:
    name = re.sub(r"[-_.]+", "-", name).lower()
    return CONDA_TO_PIP.get(name, name)


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


ENV_FILES = ("environment.yml", "environment-cpu.yml")


def _environment(name: str = "environment.yml") -> dict:
    return yaml.safe_load((ROOT / name).read_text(encoding="utf-8"))


def _parse(specs: list[str], where: str) -> dict[str, SpecifierSet]:
    out: dict[str, SpecifierSet] = {}
    for spec in specs:
        try:
            req = Requirement(spec)
        except Exception as exc:  # a conda-only spelling such as "numpy 1.24.*"
            raise AssertionError(
                f"{where}: cannot read {spec!r} as 'name>=version' ({exc})"
            ) from None
        name = _norm(req.name)
        assert name not in out, f"{where}: {req.name} is listed twice"
        out[name] = req.specifier
    return out


def _environment_packages(
    name: str = "environment.yml",
) -> tuple[dict[str, SpecifierSet], list[str]]:
    conda, pip = [], []
    for dep in _environment(name)["dependencies"]:
        if isinstance(dep, dict):
            pip += [p for p in dep.get("pip", []) if not p.strip().startswith("-")]
        elif Requirement(dep).name.lower() not in NOT_PACKAGES:
            conda.append(dep)
    return _parse(conda + pip, name), conda


def _pyproject_packages() -> dict[str, SpecifierSet]:
    project = _pyproject()["project"]
    return _parse(
        project["dependencies"] + project["optional-dependencies"]["dev"], "pyproject.toml"
    )


@pytest.mark.parametrize("name", ENV_FILES)
def test_environment_yml_has_the_same_packages_and_bounds_as_pyproject(name):
    env, _ = _environment_packages(name)
    pyproject = _pyproject_packages()
    missing = sorted(set(pyproject) - set(env))
    extra = sorted(set(env) - set(pyproject))
    assert not missing, f"in pyproject.toml but not in environment.yml: {missing}"
    assert not extra, f"in environment.yml but not in pyproject.toml (dependencies + dev): {extra}"
    differ = {n: (str(env[n]), str(pyproject[n])) for n in env if env[n] != pyproject[n]}
    assert not differ, f"bounds differ (environment.yml, pyproject.toml): {differ}"


@pytest.mark.parametrize("name", ENV_FILES)
def test_environment_yml_python_bound_matches_requires_python(name):
    pythons = [
        d
        for d in _environment(name)["dependencies"]
        if isinstance(d, str) and Requirement(d).name == "python"
    ]
    assert len(pythons) == 1, "environment.yml should pin python once"
    assert Requirement(pythons[0]).specifier == SpecifierSet(
        _pyproject()["project"]["requires-python"]
    )


@pytest.mark.parametrize("name", ENV_FILES)
def test_environment_yml_uses_conda_forge_and_installs_the_course_package(name):
    env = _environment(name)
    assert env["channels"] == ["conda-forge"]
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert "-e ." in pip, "the pip section should install the package itself (-e .)"
    assert "pip" in env["dependencies"]


def test_the_cpu_environment_takes_torch_from_the_cpu_index_and_differs_only_there():
    """environment-cpu.yml: PyTorch's CPU index before torch (F6); otherwise environment.yml."""
    cpu = _environment("environment-cpu.yml")
    pip = next(d["pip"] for d in cpu["dependencies"] if isinstance(d, dict))
    index = pip.index("--extra-index-url https://download.pytorch.org/whl/cpu")
    assert pip[index + 1].startswith("torch")
    default = _environment("environment.yml")
    pip_default = next(d["pip"] for d in default["dependencies"] if isinstance(d, dict))
    assert [p for p in pip if not p.startswith("--")] == pip_default
    assert [d for d in cpu["dependencies"] if isinstance(d, str)] == [
        d for d in default["dependencies"] if isinstance(d, str)
    ]


def test_console_script_course_is_declared_and_installed():
    assert _pyproject()["project"]["scripts"]["course"] == "course_utils.cli:main"
    eps = metadata.entry_points(group="console_scripts")
    course = [ep for ep in eps if ep.name == "course"]
    assert course and course[0].value == "course_utils.cli:main", (
        'the `course` command is not installed; run pip install -e ".[dev]"'
    )


def _course_executable() -> str:
    local = Path(sys.executable).parent / ("course.exe" if os.name == "nt" else "course")
    found = str(local) if local.exists() else shutil.which("course")
    assert found, 'the `course` command is not on PATH; run pip install -e ".[dev]"'
    return found


@pytest.mark.slow  # two fresh interpreters importing torch, jupyterlab, matplotlib...
@pytest.mark.parametrize("how", ["console script", "python -m"])
def test_course_doctor_runs_and_reports_profile_and_data(how, tmp_path):
    cmd = (
        [_course_executable(), "doctor"]
        if how == "console script"
        else [sys.executable, "-m", "course_utils.cli", "doctor"]
    )
    env = dict(os.environ, COURSE_PROFILE="ci", COURSE_DATA_DIR=str(tmp_path))
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=180, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "profile     Running the 'ci' profile" in done.stdout
    assert "tiny-shakespeare: bundled with course_utils" in done.stdout
    assert f"cache folder: {tmp_path}" in done.stdout
