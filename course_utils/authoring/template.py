"""GitHub Classroom: one template repository per assignment, and the public copy of the course.

``course release --template DIR --notebook NN`` writes a template repository for one
assignment (one repository per assignment, the way GitHub Classroom hands out work):

- the student version of notebook ``NN`` (what ``course release`` writes into notebooks/);
- ``.github/workflows/classroom.yml``: the course's Classroom workflow (shipped with the
  package, ``course_utils/authoring/classroom/autograde.yml``) with ``COURSE_REPO`` and
  ``COURSE_REF`` filled from ``[tool.course]`` (repository, branch) and ``NOTEBOOK`` set to
  the assignment; a repository still holding the ``OWNER`` placeholder is refused;
- ``README.md`` for the student: what to do, how to check before pushing, how it is graded.

An existing, non-empty ``DIR`` is refused unless ``--force``.

``course release --public DIR`` writes the public copy of the course that the workflow's
``COURSE_REPO`` should point at: every file git tracks, without ``solutions/``. The package
still holds the verified implementations and the answer keys of the graded questions; a
course that must keep them secret registers a sealing step in :data:`PUBLIC_COPY_HOOKS`
(each is called with the copy's folder before it is reported written).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable
from importlib import resources
from pathlib import Path

from course_utils.authoring.project import CourseSettings, read_settings

PLACEHOLDER = "OWNER"
PUBLIC_COPY_HOOKS: list[Callable[[Path], None]] = []
_SKIP_PUBLIC = ("solutions", ".git")


class TemplateError(Exception):
    """A template or public copy that cannot be written; the message is one line."""


def classroom_workflow() -> str:
    """The Classroom workflow as shipped in the package (a wheel install has it too)."""
    return (
        resources.files("course_utils.authoring")
        .joinpath("classroom", "autograde.yml")
        .read_text(encoding="utf-8")
    )


def fill_workflow(
    text: str,
    repository: str,
    ref: str,
    notebook: str,
    *,
    keys_repository: str = "",
    assignment_prefix: str = "",
) -> str:
    """The workflow with its settings (``COURSE_REPO``, ``COURSE_REF``, ``NOTEBOOK``, and for
    the graded questions ``COURSE_KEYS_REPO`` and ``ASSIGNMENT_PREFIX``, quoted) replaced,
    comments kept; refuses a repository with the ``OWNER`` placeholder."""
    if not repository or PLACEHOLDER in repository:
        raise TemplateError(
            f"the course repository is {repository or 'unset'!r}: set [tool.course] repository "
            "in pyproject.toml to the public copy of the course (course release --public DIR)"
        )
    settings = [("COURSE_REPO", repository), ("COURSE_REF", ref), ("NOTEBOOK", notebook)]
    settings += [
        ("COURSE_KEYS_REPO", json.dumps(keys_repository)),
        ("ASSIGNMENT_PREFIX", json.dumps(assignment_prefix)),
    ]
    for key, value in settings:
        pattern = re.compile(rf"^(  {key}: )\S+", re.M)
        if not pattern.search(text):
            raise TemplateError(f"the Classroom workflow has no {key} line")
        text = pattern.sub(lambda m, v=value: m.group(1) + v, text, count=1)
    return text


def _title(notebook_text: str, fallback: str) -> str:
    """The notebook's first Markdown heading, without its ``#``."""
    for cell in json.loads(notebook_text).get("cells", []):
        if cell.get("cell_type") == "markdown":
            source = "".join(cell.get("source", []))
            m = re.search(r"^#+\s+(.+)$", source, re.M)
            if m:
                return m.group(1).strip()
    return fallback


def student_readme(name: str, title: str, settings: CourseSettings) -> str:
    """The README of a student's assignment repository."""
    install = f"pip install git+{settings.repository}@{settings.branch}"
    return f"""# {title}

Your assignment is the notebook [`{name}`]({name}). Solve the exercises and answer the
questions in it, then commit and push: that is your submission.

## Work on it

1. Install the course package (Python 3.10 or newer; the CPU build of PyTorch is enough):

   ```bash
   {install}
   ```

2. Open the notebook in JupyterLab (`jupyter lab {name}`), or in Colab.
3. Each exercise ends with a check cell that tells you at once whether your code passes,
   and names the likely mistake when it does not.
4. Some questions ask for a number that is **personal**: your run draws it from a seed made
   from your GitHub login. Put `%env COURSE_STUDENT=<your GitHub login>` in the notebook's
   first cell before you run it; the grader uses the same login.

## Check before you push

```bash
course grade {name} --student <your GitHub login>
```

This is the grader GitHub runs on every push: your notebook top to bottom in a fresh kernel,
with the check cells restored. Restart the kernel and run all cells before you commit.

## How it is graded

- Every push runs the **Autograding Tests** workflow; its summary shows your points and the
  feedback for each exercise ("Points N/M" in GitHub Classroom).
- Edits to the check cells change nothing: the grader restores them.
- Graded questions may be **sealed**: `answer()` then only records your answer, and the
  grader judges it with your instructor's keys (they are not in this repository or in the
  course package you install).
- Do not edit `.github/workflows/`: the final grade is computed again by your instructor,
  on the notebook you pushed, after the deadline.
"""


def _pick(plan: dict[str, str], notebook: str | None) -> str:
    if not notebook:
        raise TemplateError(
            "one template per assignment: choose it with --notebook NN "
            f"(one of {', '.join(n[:2] for n in plan)})"
        )
    matches = [n for n in plan if n == notebook or n.startswith(notebook.removesuffix(".ipynb"))]
    if len(matches) != 1:
        raise TemplateError(
            f"--notebook {notebook}: {'no' if not matches else 'more than one'} notebook "
            f"matches; one of {', '.join(sorted(plan))}"
        )
    return matches[0]


def _prepare(out: Path, force: bool) -> None:
    if out.exists() and any(out.iterdir()):
        if not force:
            raise TemplateError(f"{out} exists and is not empty: pass --force to overwrite it")
        if (out / "solutions").exists():
            raise TemplateError(f"{out / 'solutions'} exists: a student template has no solutions")
    out.mkdir(parents=True, exist_ok=True)


def write_assignment_template(
    plan: dict[str, str],
    template: str | Path,
    notebook: str | None,
    settings: CourseSettings,
    *,
    force: bool = False,
) -> list[Path]:
    """Write one assignment's template repository (see the module docstring); ``plan`` is
    :func:`course_utils.authoring.release.plan`'s file name -> student notebook text."""
    name = _pick(plan, notebook)
    workflow = fill_workflow(
        classroom_workflow(),
        settings.repository or "",
        settings.branch,
        name,
        keys_repository=settings.keys_repository,
        assignment_prefix=settings.assignment_prefix,
    )
    out = Path(template)
    _prepare(out, force)
    files = {
        name: plan[name],
        ".github/workflows/classroom.yml": workflow,
        "README.md": student_readme(name, _title(plan[name], Path(name).stem), settings),
    }
    written = []
    for rel, text in files.items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def settings_for(solutions: str | Path) -> CourseSettings:
    """``[tool.course]`` of the course whose ``solutions/`` folder this is."""
    try:
        return read_settings(Path(solutions).resolve().parent)
    except (ValueError, OSError) as exc:
        raise TemplateError(str(exc)) from None


def _tracked_files(root: Path) -> list[Path]:
    """The files git tracks under ``root`` (every file, when it is not a git checkout)."""
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z"],
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout
        return [root / p for p in out.decode("utf-8", "surrogateescape").split("\0") if p]
    except (OSError, subprocess.SubprocessError):
        return [p for p in root.rglob("*") if p.is_file() and ".git" not in p.parts]


def write_public_copy(root: str | Path, out: str | Path, *, force: bool = False) -> list[Path]:
    """The public student copy of the course in ``out``: git's files without ``solutions/``,
    then every :data:`PUBLIC_COPY_HOOKS` sealing step. Returns the files written."""
    root, out = Path(root).resolve(), Path(out)
    if out.resolve() == root or root in out.resolve().parents:
        raise TemplateError(f"{out} is inside the course: choose a folder outside it")
    _prepare(out, force)
    written = []
    for src in _tracked_files(root):
        rel = src.relative_to(root)
        if rel.parts[0] in _SKIP_PUBLIC or not src.is_file():
            continue
        dst = out / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
        written.append(dst)
    for hook in PUBLIC_COPY_HOOKS:
        hook(out)
    return written
