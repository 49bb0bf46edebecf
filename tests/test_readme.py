"""The README's quick start is in a newcomer's order and agrees with what CI runs."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _section(title: str) -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def test_quick_start_goes_venv_cpu_torch_setup_start_tests():
    quick = _section("Quick start")
    steps = [
        "python -m venv .venv",
        "pip install torch --index-url https://download.pytorch.org/whl/cpu",
        'pip install -e ".[dev]"',
        "jupyter lab notebooks/",
        'python -m pytest -n 2 -m "not slow"',
        "python -m pytest -n 2 -m slow",
    ]
    positions = [quick.find(step) for step in steps]
    assert -1 not in positions, dict(zip(steps, positions))
    assert positions == sorted(positions), "quick start steps out of order"
    assert "--allow-root" in quick  # containers running as root


def test_the_readme_test_commands_are_the_ones_ci_runs_quick_tier_first():
    ci = (ROOT / ".ci" / "run").read_text()
    quick = ci.find('\npython -m pytest -n 2 -m "not slow"')
    slow = ci.find("\npython -m pytest -n 2 -m slow")
    assert 0 < quick < slow, "CI runs the README's quick tier, then its slow tier"
    readme = _section("Quick start")
    assert '\npython -m pytest -n 2 -m "not slow"\n' in readme
    assert "\npython -m pytest -n 2 -m slow\n" in readme


def test_the_virtual_environment_is_ignored_by_git():
    assert ".venv/" in (ROOT / ".gitignore").read_text().splitlines()


def test_instructors_see_the_nbval_command():
    assert "pytest --nbval-lax" in _section("Instructors")


def test_the_nbval_paragraph_calls_it_a_self_check_and_sends_grading_to_course_grade():
    """Newcomer F12: the paragraph said both that a notebook patching the checks "still fails"
    and that it can print a forged verdict. Both are true of different attacks; it now says
    which, and that nbval is a self-check while grades come from ``course grade``."""
    text = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    start = text.index("nbval is a **self-check**")
    paragraph = text[start : text.index("Grade a batch of submissions", start)]
    assert "never a grade" in paragraph and "Grades come from `course grade`" in paragraph
    assert (
        "a forged `PASSED` verdict" in paragraph and "a check patched to stay silent" in paragraph
    )
    assert "still fails" not in paragraph
