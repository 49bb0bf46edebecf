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
except ImportError:  # Python 3.10: pytest's own dependency (never pip's vendored copy:
    # importing pip turns setuptools' distutils shim off, test_python_versions.py)
    import tomli as tomllib

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


def _stream(text):
    return {"output_type": "stream", "name": "stdout", "text": text}


def test_a_check_cell_passes_only_with_its_passed_verdict_in_its_output():
    src = 'check("03.1", scaled_dot_product_attention)'
    assert nbval_strict.check_ids(src) == ["03.1"]
    passed = [_stream("[03.1] Scaled dot-product attention: PASSED (3/3 points)\n")]
    assert nbval_strict.missing_verdicts(src, passed) == []
    for outputs in (
        [],  # nothing printed (check redefined, output swallowed)
        [_stream("[03.1] Scaled dot-product attention: not attempted (0/3 points)\n")],
        [_stream("[00.1] Numerically stable softmax: PASSED (2/2 points)\n")],  # another id
    ):
        assert nbval_strict.missing_verdicts(src, outputs) == ["03.1"]
    assert nbval_strict.missing_verdicts("x = 1", []) == []  # not a check cell


def test_only_pytests_own_environment_turns_the_verdicts_off(monkeypatch):
    monkeypatch.setenv(nbval_strict.STRICT_ENV, "1")
    assert nbval_strict.is_strict()
    monkeypatch.setenv(nbval_strict.STRICT_ENV, "0")
    assert not nbval_strict.is_strict()
