"""``course release --template DIR --notebook NN`` and ``--public DIR`` (issue 35, newcomer F2,
F17): one assignment's Classroom template with the workflow filled from ``[tool.course]``,
the placeholder refused, a student README, no silent overwrite; the public copy without
``solutions/``; the workflow shipped as package data (checked in a built wheel).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from course_utils.authoring import template as tpl

ROOT = Path(__file__).resolve().parents[1]
REPO_URL = "https://github.com/newbie-prof/attention-course"


def _course(tmp_path: Path, repository: str | None) -> Path:
    """A small course: pyproject with [tool.course], solutions/ with notebook 00 and 03."""
    course = tmp_path / "course"
    (course / "solutions").mkdir(parents=True)
    for name in ("00_start_here.ipynb", "03_scaled_dot_product.ipynb"):
        shutil.copy(ROOT / "solutions" / name, course / "solutions" / name)
    table = f'[tool.course]\nrepository = "{repository}"\nbranch = "v1.2"\n' if repository else ""
    (course / "pyproject.toml").write_text(f'[project]\nname = "x"\n\n{table}', encoding="utf-8")
    return course


def course_release(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-m", "course_utils.cli", "release", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def test_a_per_assignment_template_has_the_workflow_filled_from_tool_course(tmp_path):
    course = _course(tmp_path, REPO_URL)
    r = course_release("--template", str(tmp_path / "t"), "--notebook", "03", cwd=course)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "t"
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert files == [".github/workflows/classroom.yml", "03_scaled_dot_product.ipynb", "README.md"]
    text = (out / ".github/workflows/classroom.yml").read_text(encoding="utf-8")
    env = yaml.safe_load(text)["env"]
    assert env == {"COURSE_REPO": REPO_URL, "COURSE_REF": "v1.2", "NOTEBOOK": "03_scaled_dot_product.ipynb", "ASSIGNMENT_PREFIX": "", "COURSE_KEYS_REPO": ""}  # fmt: skip
    assert "OWNER" not in "\n".join(line.split("#")[0] for line in text.splitlines())
    # the rest of the workflow is the course's, byte for byte
    shipped = tpl.classroom_workflow()
    assert len(text.splitlines()) == len(shipped.splitlines())
    readme = (out / "README.md").read_text(encoding="utf-8")
    assert "course grade 03_scaled_dot_product.ipynb --student <your GitHub login>" in readme
    assert "%env COURSE_STUDENT=<your GitHub login>" in readme
    assert f"pip install git+{REPO_URL}@v1.2" in readme and readme.startswith("# 03")
    assert "BEGIN SOLUTION" not in (out / "03_scaled_dot_product.ipynb").read_text()
    # an existing folder is not overwritten without --force
    again = course_release("--template", str(out), "--notebook", "03", cwd=course)
    assert again.returncode == 2 and "--force" in again.stderr
    forced = course_release("--template", str(out), "--notebook", "03", "--force", cwd=course)
    assert forced.returncode == 0, forced.stderr


def test_a_template_gives_the_grader_the_keys_checkout_and_the_classroom_prefix(tmp_path):
    """Issue 32: [tool.course] keys_repository and assignment_prefix fill the workflow, so that
    the Classroom grader judges sealed questions with the instructor's keys (never shipped in
    the template) and personal numbers for the login in the repository's name."""
    course = _course(tmp_path, REPO_URL)
    keys = "https://github.com/teacher/attention-course-keys"
    with (course / "pyproject.toml").open("a", encoding="utf-8") as f:
        f.write(f'keys_repository = "{keys}"\nassignment_prefix = "attn-03-"\n')
    r = course_release("--template", str(tmp_path / "t"), "--notebook", "03", cwd=course)
    assert r.returncode == 0, r.stderr
    text = (tmp_path / "t" / ".github/workflows/classroom.yml").read_text(encoding="utf-8")
    env = yaml.safe_load(text)["env"]
    assert env["COURSE_KEYS_REPO"] == keys and env["ASSIGNMENT_PREFIX"] == "attn-03-"
    for path in (tmp_path / "t").rglob("*"):  # the template holds no key: no questions module
        assert path.name != "questions.py"
    bad = course / "pyproject.toml"
    bad.write_text(bad.read_text().replace(keys, "git@github.com:teacher/keys"), encoding="utf-8")
    r = course_release("--template", str(tmp_path / "u"), "--notebook", "03", cwd=course)
    assert r.returncode != 0 and "keys_repository" in r.stderr


@pytest.mark.parametrize("repository", [None, "https://github.com/OWNER/attention-course"])
def test_the_placeholder_or_no_repository_is_refused(tmp_path, repository):
    course = _course(tmp_path, repository)
    r = course_release("--template", str(tmp_path / "t"), "--notebook", "00", cwd=course)
    assert r.returncode == 2 and "[tool.course] repository" in r.stderr
    assert not (tmp_path / "t").exists()


def test_the_assignment_must_be_chosen(tmp_path):
    course = _course(tmp_path, REPO_URL)
    r = course_release("--template", str(tmp_path / "t"), cwd=course)
    assert r.returncode == 2 and "--notebook NN" in r.stderr and "00, 03" in r.stderr


def test_the_public_copy_has_no_solutions(tmp_path, monkeypatch):
    course = _course(tmp_path, REPO_URL)
    (course / "notebooks").mkdir()
    (course / "notebooks" / "00_start_here.ipynb").write_text("{}", encoding="utf-8")
    sealed = []
    monkeypatch.setattr(tpl, "PUBLIC_COPY_HOOKS", [sealed.append])
    written = tpl.write_public_copy(course, tmp_path / "public")
    rel = {p.relative_to(tmp_path / "public").as_posix() for p in written}
    assert rel == {"pyproject.toml", "notebooks/00_start_here.ipynb"}
    assert sealed == [tmp_path / "public"]
    with pytest.raises(tpl.TemplateError, match="inside the course"):
        tpl.write_public_copy(course, course / "pub")


def test_the_shipped_workflow_is_the_documented_one():
    assert tpl.classroom_workflow() == (ROOT / ".github/classroom/autograde.yml").read_text(
        encoding="utf-8"
    ), "course_utils/authoring/classroom/autograde.yml and .github/classroom/autograde.yml differ"


@pytest.mark.slow
def test_a_built_wheel_ships_the_classroom_workflow(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", ".venv", "notebooks", "solutions", "tests", "benchmarks", "build", "*.egg-info"))  # fmt: skip
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path / "dist"),
            str(src),
        ],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("course_utils-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "course_utils/authoring/classroom/autograde.yml" in names
    assert "course_utils/grading/exports/canvas.py" in names
