"""The claim helper: a claim fails the notebook when it stops holding, skips by profile, and
``course claims`` reports every claim of a notebook run."""

from __future__ import annotations

import json

import nbformat
import pytest

from course_utils.authoring import claims
from course_utils.authoring.claims import ClaimFailed, Held, claim


@pytest.fixture
def profile(monkeypatch):
    def set_profile(name):
        monkeypatch.setenv("COURSE_PROFILE", name)

    return set_profile


def test_a_claim_that_holds_prints_it(profile, capsys):
    profile("cpu")
    held = claim("two is bigger than one", 2 > 1)
    assert held and isinstance(held, Held)
    assert capsys.readouterr().out == "✓ two is bigger than one\n"


def test_a_claim_that_fails_raises_with_the_statement_and_detail(profile):
    profile("cpu")
    with pytest.raises(ClaimFailed, match=r"flat with length.*spread 7\.0"):
        claim("attention stays flat with length", False, detail="spread 7.0")


def test_a_claim_is_an_assertion_so_nbval_and_the_grader_see_a_failing_cell(profile):
    profile("ci")
    with pytest.raises(AssertionError):
        claim("made in ci", False, profiles="ci")


def test_a_claim_not_made_in_this_profile_is_skipped_and_its_evidence_not_computed(profile, capsys):
    profile("ci")
    called = []
    assert (
        claim("the KV cache is faster", lambda: called.append(1) or False, profiles=("cpu", "gpu"))
        is None
    )
    assert called == []
    out = capsys.readouterr().out
    assert "not checked in the 'ci' profile" in out and "the KV cache is faster" in out


def test_callable_evidence_is_evaluated_where_the_claim_is_made(profile):
    profile("gpu")
    with pytest.raises(ClaimFailed):
        claim("never", lambda: False, profiles=("gpu",))


@pytest.mark.parametrize("bad", [(), ("laptop",), "GPU"])
def test_unknown_profiles_are_an_error(profile, bad):
    profile("cpu")
    with pytest.raises(ValueError, match="profiles"):
        claim("x", True, profiles=bad)


def test_ambiguous_evidence_is_an_error_not_a_silent_pass(profile):
    import torch

    profile("cpu")
    with pytest.raises(TypeError, match="must be a bool"):
        claim("all positive", torch.tensor([1.0, -1.0]) > 0)


def test_an_empty_statement_is_an_error(profile):
    with pytest.raises(ValueError):
        claim("  ", True)


def test_claims_are_logged_as_json_lines(profile, tmp_path, monkeypatch):
    log = tmp_path / "claims.jsonl"
    monkeypatch.setenv(claims.LOG_ENV_VAR, str(log))
    profile("ci")
    claim("a", True)
    claim("b", True, profiles=("cpu",), detail="d")
    with pytest.raises(ClaimFailed):
        claim("c", False, profiles=("ci", "cpu"))
    records = claims.read_log(log)
    assert [(r["statement"], r["status"]) for r in records] == [
        ("a", "held"),
        ("b", "skipped"),
        ("c", "failed"),
    ]
    assert records[1]["profiles"] == ["cpu"] and records[1]["detail"] == "d"
    assert all(json.loads(line) for line in log.read_text().splitlines())


def _notebook(tmp_path, sources):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    path = tmp_path / "07_fixture.ipynb"
    nbformat.write(nb, path)
    return path


@pytest.mark.slow
def test_course_claims_runs_a_notebook_and_reports_each_claim(tmp_path, capsys):
    path = _notebook(
        tmp_path,
        [
            "from course_utils.authoring.claims import claim",
            "claim('held everywhere', True)",
            "claim('only on a laptop', False, profiles=('cpu',))",
            "claim('fails in ci', 1 > 2, profiles='ci', detail='1 vs 2')",
            "print('never reached')",
        ],
    )
    before = path.read_bytes()
    from course_utils import cli

    code = cli.main(["claims", "--profile", "ci", str(path)])
    out = capsys.readouterr().out
    assert code == 1
    assert "1 held, 1 failed, 1 not made in this profile" in out
    assert "✗ fails in ci  [1 vs 2]" in out and "stopped: " in out and "ClaimFailed" in out
    assert path.read_bytes() == before  # the stored notebook is not touched

    ok = _notebook(
        tmp_path, ["from course_utils.authoring.claims import claim", "claim('fine', True)"]
    )
    assert cli.main(["claims", "--profile", "cpu", str(ok)]) == 0


def test_course_claims_names_the_known_notebooks_when_one_is_missing(tmp_path, capsys):
    from course_utils import cli

    (tmp_path / "03_x.ipynb").write_text("{}")
    assert cli.main(["claims", "--solutions", str(tmp_path), "42"]) == 2
    assert "known: 03_x" in capsys.readouterr().out


def test_a_held_claim_shows_nothing_as_the_last_expression_of_a_cell(capsys):
    held = claim("three is odd", 3 % 2 == 1)
    assert held._ipython_display_() is None and repr(held) == "Held()"
    assert capsys.readouterr().out == "✓ three is odd\n"


def test_keep_going_prints_a_failed_claim_and_does_not_raise(
    profile, capsys, monkeypatch, tmp_path
):
    from course_utils.authoring import claims as c

    profile("cpu")
    log = tmp_path / "log.jsonl"
    monkeypatch.setenv(c.LOG_ENV_VAR, str(log))
    monkeypatch.setenv(c.KEEP_GOING_ENV_VAR, "1")
    assert claim("never", False, detail="0 vs 1") is None
    assert capsys.readouterr().out == "✗ never (0 vs 1)\n"
    assert c.read_log(log)[0]["status"] == "failed"
    monkeypatch.setenv(c.KEEP_GOING_ENV_VAR, "0")
    with pytest.raises(ClaimFailed):
        claim("never", False)
