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
        claim("In the `ci` profile, made in ci", False, profiles="ci")


def test_a_claim_not_made_in_this_profile_is_skipped_and_its_evidence_not_computed(profile, capsys):
    profile("ci")
    called = []
    statement = "In the `cpu` and `gpu` profiles, the KV cache is faster"
    assert claim(statement, lambda: called.append(1) or False, profiles=("cpu", "gpu")) is None
    assert called == []
    out = capsys.readouterr().out
    assert out.startswith("· not tested in this `ci` run (the sentence is about the `cpu` and ")
    assert out.rstrip().endswith(statement)


def test_callable_evidence_is_evaluated_where_the_claim_is_made(profile):
    profile("gpu")
    with pytest.raises(ClaimFailed):
        claim("In the `gpu` profile, never", lambda: False, profiles=("gpu",))


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
    claim("In the `cpu` profile, b", True, profiles=("cpu",), detail="d")
    with pytest.raises(ClaimFailed):
        claim("In the `ci` and `cpu` profiles, c", False, profiles=("ci", "cpu"))
    records = claims.read_log(log)
    assert [(r["statement"], r["status"]) for r in records] == [
        ("a", "held"),
        ("In the `cpu` profile, b", "skipped"),
        ("In the `ci` and `cpu` profiles, c", "failed"),
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
def test_course_claims_runs_a_notebook_and_reports_each_claim(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(claims.AUTHOR_ENV_VAR)  # the runner itself makes it an author's run
    path = _notebook(
        tmp_path,
        [
            "from course_utils.authoring.claims import claim",
            "claim('held everywhere', True)",
            "claim('In the `cpu` profile, only on a laptop', False, profiles=('cpu',))",
            "claim('In the `ci` profile, fails in ci', 1 > 2, profiles='ci', detail='1 vs 2')",
            "print('never reached')",
        ],
    )
    before = path.read_bytes()
    from course_utils import cli

    code = cli.main(["claims", "--profile", "ci", str(path)])
    out = capsys.readouterr().out
    assert code == 1
    assert "1 held, 1 failed, 1 not made in this profile" in out
    assert "✗ In the `ci` profile, fails in ci  [1 vs 2]" in out and "stopped: " in out
    assert "ClaimFailed" in out and "Fix the prose or the experiment" in out  # an author's run
    assert path.read_bytes() == before  # the stored notebook is not touched

    ok = _notebook(
        tmp_path, ["from course_utils.authoring.claims import claim", "claim('fine', True)"]
    )
    assert cli.main(["claims", "--profile", "cpu", str(ok)]) == 0


@pytest.mark.slow
def test_course_claims_prints_no_kernel_log_lines(tmp_path, capfd):
    """Newcomer F15: ``course claims`` printed the kernel app's "[IPKernelApp] WARNING | Kernel
    is running over TCP without encryption" and "Parent appears to have exited" around its
    result. The kernel inherits this process's stderr, so capfd sees whatever it logs."""
    from course_utils import cli

    path = _notebook(
        tmp_path, ["from course_utils.authoring.claims import claim", "claim('quiet', True)"]
    )
    assert cli.main(["claims", "--profile", "ci", str(path)]) == 0
    out, err = capfd.readouterr()
    assert "✓ quiet" in out
    assert "IPKernelApp" not in out + err, err


def test_course_claims_help_explains_every_option_and_the_exit_codes():
    """Newcomer F17: ``--solutions DIR`` had no help text and ``--timeout`` read TIMEOUT while
    ``course grade`` says S for seconds."""
    import argparse

    parser = argparse.ArgumentParser(prog="course claims")
    claims.add_arguments(parser)
    options = [a for a in parser._actions if a.option_strings and a.dest != "help"]
    assert options and all(a.help for a in options), [a.dest for a in options if not a.help]
    text = parser.format_help()
    assert "--solutions DIR" in text and "--timeout S" in text
    assert "Exit codes: 0" in " ".join(text.split())


def test_every_course_subcommand_option_has_help_text():
    """Newcomer F17, across the ``course`` command: no option without a sentence."""
    import argparse
    import importlib

    from course_utils.cli import SUBCOMMANDS

    missing = []
    for name, (module, _) in SUBCOMMANDS.items():
        parser = argparse.ArgumentParser(prog=f"course {name}")
        importlib.import_module(module).add_arguments(parser)
        missing += [f"{name} {a.dest}" for a in parser._actions if a.dest != "help" and not a.help]
    assert missing == []


def test_course_subcommands_name_folders_dir_seconds_s_and_counts_n():
    """Newcomer F17: metavars mixed S, TIMEOUT, THREADS and SOLUTIONS with DIR."""
    import argparse
    import importlib

    from course_utils.cli import SUBCOMMANDS

    expected = {"solutions": "DIR", "out": "DIR", "root": "DIR", "threads": "N"}
    odd = []
    for name, (module, _) in SUBCOMMANDS.items():
        parser = argparse.ArgumentParser(prog=f"course {name}")
        importlib.import_module(module).add_arguments(parser)
        for a in parser._actions:
            want = "S" if "timeout" in a.dest else expected.get(a.dest)
            if a.option_strings and want and a.metavar != want:
                odd.append(f"{name} {a.option_strings[0]} {a.metavar or a.dest.upper()}")
    assert odd == []


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


# ------------------------------------------------------- visibly scoped, in every run


@pytest.mark.parametrize(
    ("profiles", "words"),
    [
        (("cpu",), "In the `cpu` profile, "),
        ("gpu", "In the `gpu` profile, "),
        (("gpu", "cpu"), "In the `cpu` and `gpu` profiles, "),
        (("ci", "cpu"), "In the `ci` and `cpu` profiles, "),
        (("ci", "cpu", "gpu"), ""),
    ],
)
def test_scope_names_the_profiles_in_course_order(profiles, words):
    assert claims.scope(profiles) == words


@pytest.mark.parametrize("where", ["ci", "cpu"])
def test_a_limited_claim_without_its_scope_is_refused_in_every_run(profile, where):
    profile(where)  # refused where it would be checked and where it would be skipped
    with pytest.raises(ValueError, match=r"start its statement with 'In the `cpu` profile, '"):
        claim("the model fits the training text better", True, profiles=("cpu",))
    with pytest.raises(ValueError, match="In the `cpu` and `gpu` profiles, "):
        claim("In the `cpu` profile, wrong scope", True, profiles=("cpu", "gpu"))


def test_a_claim_made_everywhere_needs_no_scope(profile, capsys):
    profile("ci")
    assert claim("fits the training text better", True)
    assert capsys.readouterr().out == "✓ fits the training text better\n"


def test_the_static_rule_finds_unscoped_limited_claims():
    source = """
on_cpu = ("cpu",)
claim("everywhere", True)
claim("In the `cpu` profile, fine", True, profiles=on_cpu)
claim(f"In the `cpu` and `gpu` profiles, fine at {n}", ok, profiles=("cpu", "gpu"))
claim("bare sentence", ok, profiles=("cpu", "gpu"))
claims.claim(f"{n} heads help", ok, profiles=on_cpu)
claim(text, ok, profiles="gpu")
claim("In the `cpu` profile, unknown", ok, profiles=somewhere)
"""
    problems = claims.unscoped_claims(source)
    assert len(problems) == 4, problems
    assert "bare sentence" in problems[0] and "'In the `cpu` and `gpu` profiles, '" in problems[0]
    assert "heads help" in problems[1] and "'In the `cpu` profile, '" in problems[1]
    assert "claim(text" in problems[2] and "not a literal subset" in problems[3]


def test_a_claim_hidden_under_a_profile_test_is_found():
    source = """
if r.profile != "ci":
    claim("fits the training text better", gap > 0)
if data.name == "digits":  # a condition on the data, not on the profile: allowed
    claim("reaches 98%", acc >= 0.98)
"""
    problems = claims.unscoped_claims(source)
    assert len(problems) == 1 and "r.profile" in problems[0] and "profiles=" in problems[0]


def _code(path) -> str:
    """A notebook's code cells as one module (IPython magics and shell lines dropped)."""
    nb = nbformat.read(path, as_version=4)
    cells = [c.source for c in nb.cells if c.cell_type == "code"]
    keep = [
        ln for src in cells for ln in src.splitlines() if not ln.lstrip().startswith(("%", "!"))
    ]
    return "\n".join(keep)


SOLUTIONS = sorted(
    (claims.Path(__file__).resolve().parents[1] / "solutions").glob("[0-9][0-9]_*.ipynb")
)


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.stem)
def test_every_profile_limited_claim_of_the_course_is_visibly_scoped(path):
    """The rule of the claims module, on every solution notebook: a claim made in fewer than all
    profiles starts with the words that say which (its ✓ / · line is what the reader sees);
    a claim made everywhere is graded in ``ci`` by tests/test_notebooks.py."""
    assert claims.unscoped_claims(_code(path)) == []


def test_the_solutions_are_found():
    assert len(SOLUTIONS) >= 12


# ------------------------------------------------------- who reads a failure


def test_a_failure_in_a_students_run_speaks_to_the_student(profile, monkeypatch):
    profile("cpu")
    monkeypatch.delenv(claims.AUTHOR_ENV_VAR, raising=False)
    with pytest.raises(ClaimFailed) as info:
        claim("the model fits the training text", False, detail="gap -0.1", exercises="08.1")
    text = str(info.value)
    assert text.startswith("your run differs from the course's: the model fits the training text")
    assert "gap -0.1" in text and "check exercise 08.1" in text and "machine's load" in text
    assert "Fix the prose" not in text


def test_a_students_failure_without_named_exercises_points_at_the_ones_above(profile, monkeypatch):
    profile("cpu")
    monkeypatch.setenv(claims.AUTHOR_ENV_VAR, "0")
    with pytest.raises(ClaimFailed, match=r"your run differs.*exercises above this cell"):
        claim("attention stays flat", False)


def test_a_failure_in_an_authors_run_says_fix_the_prose(profile, monkeypatch):
    profile("cpu")
    monkeypatch.setenv(claims.AUTHOR_ENV_VAR, "1")
    with pytest.raises(ClaimFailed) as info:
        claim("attention stays flat", False, exercises=("05.1", "05.3"))
    text = str(info.value)
    assert "Fix the prose or the experiment" in text and "your run differs" not in text


def test_exercise_ids_are_checked(profile):
    profile("cpu")
    with pytest.raises(ValueError, match="ids like"):
        claim("x", True, exercises="exercise 8")
