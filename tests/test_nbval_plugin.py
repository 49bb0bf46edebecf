"""The course's pytest plugin (course_utils.authoring.nbval_strict): declared as a pytest11 entry point,
it marks the kernels of an nbval run as strict and leaves every other run alone."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from course_utils import checks
from course_utils.authoring import nbval_strict

try:
    import tomllib
except ImportError:  # Python 3.10
    from pip._vendor import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def _config(**options):
    return SimpleNamespace(option=SimpleNamespace(**options))


def test_the_plugin_is_a_pytest11_entry_point_of_the_package():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    # the entry point's name is the module's, so `-p course_utils.authoring.nbval_strict` is the same plugin
    assert project["entry-points"]["pytest11"] == {
        "course_utils.authoring.nbval_strict": "course_utils.authoring.nbval_strict"
    }
    assert checks.STRICT_ENV == nbval_strict.STRICT_ENV == "COURSE_STRICT_CHECKS"


@pytest.mark.parametrize("flag", ["nbval", "nbval_lax"])
def test_nbval_runs_get_strict_kernels_and_the_environment_is_restored(monkeypatch, flag):
    monkeypatch.delenv(nbval_strict.STRICT_ENV, raising=False)
    config = _config(**{flag: True})
    nbval_strict.pytest_configure(config)
    assert os.environ[nbval_strict.STRICT_ENV] == "1" and checks.is_strict()
    assert "strict" in nbval_strict.pytest_report_header(config)
    nbval_strict.pytest_unconfigure(config)
    assert nbval_strict.STRICT_ENV not in os.environ


def test_other_runs_and_an_explicit_choice_are_left_alone(monkeypatch):
    monkeypatch.delenv(nbval_strict.STRICT_ENV, raising=False)
    plain = _config(nbval=False, nbval_lax=False)
    nbval_strict.pytest_configure(plain)
    assert nbval_strict.STRICT_ENV not in os.environ
    assert nbval_strict.pytest_report_header(plain) is None
    nbval_strict.pytest_configure(_config())  # -p no:nbval: the options do not exist
    assert nbval_strict.STRICT_ENV not in os.environ
    monkeypatch.setenv(nbval_strict.STRICT_ENV, "0")
    config = _config(nbval_lax=True)
    nbval_strict.pytest_configure(config)
    nbval_strict.pytest_unconfigure(config)
    assert os.environ[nbval_strict.STRICT_ENV] == "0"
