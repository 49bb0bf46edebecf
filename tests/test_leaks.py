"""The no-answer rule (course_utils.authoring.leaks): a solution line found anywhere in the student
notebook is reported with its notebook, exercise and cell; trivial lines are not; `course
release --check` fails on a leak."""

from __future__ import annotations

import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook
from test_release import NAME, REGISTRY, cell, run_cli, toy_notebook, write_nb

from course_utils.authoring import leaks, release

LEAKED = "shifted = x - x.amax(dim=-1, keepdim=True)"


def student_and_leaks(nb) -> list[leaks.Leak]:
    return leaks.find_leaks(nb, release.release_notebook(nb, NAME, REGISTRY), NAME)


def with_cell(new_cell, at: int = 2):
    nb = toy_notebook()
    nb.cells.insert(at, new_cell)
    return nb


def test_the_toy_notebook_keeps_the_rule():
    assert student_and_leaks(toy_notebook()) == []


def test_a_solution_line_in_a_markdown_code_span_is_a_leak():
    nb = with_cell(new_markdown_cell(f"Hint: write `{LEAKED}` first.", id="prompt"))
    (leak,) = student_and_leaks(nb)
    assert (leak.notebook, leak.exercise, leak.cell_id, leak.cell_type) == (
        NAME,
        "42.1",
        "prompt",
        "markdown",
    )
    assert leak.line == LEAKED
    assert "42_toy.ipynb" in leak.message() and "'prompt'" in leak.message()


def test_a_leak_is_found_whatever_the_whitespace_and_in_a_fenced_block():
    squeezed = "shifted=x-x.amax(dim=-1,\n    keepdim=True)"
    nb = with_cell(new_markdown_cell(f"```python\n{squeezed}\n```", id="block"))
    assert [leak.cell_id for leak in student_and_leaks(nb)] == ["block"]


def test_the_expression_of_an_assignment_or_return_alone_is_a_leak():
    nb = with_cell(new_markdown_cell("Use `x - x.amax(dim=-1, keepdim=True)`.", id="expr"))
    (leak,) = student_and_leaks(nb)
    assert leak.line == "x - x.amax(dim=-1, keepdim=True)"
    nb = with_cell(
        new_code_cell("y = shifted.exp() / shifted.exp().sum(dim=-1, keepdim=True)", id="later"),
        at=5,
    )
    (leak,) = student_and_leaks(nb)
    assert (leak.cell_id, leak.cell_type) == ("later", "code")


def test_a_solution_line_in_another_code_cell_is_a_leak_even_with_a_comment():
    nb = with_cell(new_code_cell(f"{LEAKED}  # the trick", id="demo-cell"), at=5)
    (leak,) = student_and_leaks(nb)
    assert leak.cell_id == "demo-cell" and leak.exercise == "42.1"


def test_each_leaking_cell_is_reported_once_per_line():
    nb = toy_notebook()
    nb.cells.insert(2, new_markdown_cell(f"`{LEAKED}`", id="a"))
    nb.cells.insert(6, new_code_cell(f"{LEAKED}\n{LEAKED}", id="b"))
    assert sorted(leak.cell_id for leak in student_and_leaks(nb)) == ["a", "b"]


def test_trivial_lines_are_not_flagged():
    solution = (
        "def f(x, mask):\n"
        "    ### BEGIN SOLUTION\n"
        "    out = x  # short\n"
        "    for position in range(len(x)):\n"
        "        pass\n"
        "    # a comment that happens to be long enough\n"
        "    return output_tensor, attention_weights\n"
        "    ### END SOLUTION"
    )
    nb = toy_notebook()
    ex = cell(nb, "ex-42-1")
    ex["source"] = solution.replace("def f(x, mask)", "def softmax(x, mask)")
    prose = (
        "`out = x`, `for position in range(len(x)):` then `pass`; "
        "a comment that happens to be long enough; `return output_tensor, attention_weights`"
    )
    nb.cells.insert(2, new_markdown_cell(prose, id="prose"))
    assert student_and_leaks(nb) == []


def test_a_line_also_in_the_exercise_scaffold_is_not_flagged():
    nb = toy_notebook()
    ex = cell(nb, "ex-42-1")
    ex["source"] = (
        "def softmax(x):\n"
        "    total = x.exp().sum(dim=-1)\n"
        "    ### BEGIN SOLUTION\n"
        "    total = x.exp().sum(dim=-1)\n"
        "    return x.exp() / total[..., None]\n"
        "    ### END SOLUTION"
    )
    nb.cells.insert(2, new_markdown_cell("`total = x.exp().sum(dim=-1)`", id="scaffold"))
    assert student_and_leaks(nb) == []


def test_needles_drop_comments_but_keep_hashes_inside_strings():
    assert leaks.needles("y = torch.exp(x)  # no overflow") == ["y = torch.exp(x)", "torch.exp(x)"]
    assert leaks.needles('label = "#" + name_of_thing') == [
        'label = "#" + name_of_thing',
        '"#" + name_of_thing',
    ]
    assert leaks.needles("return out, w") == []
    assert leaks.needles("        for t in range(T):") == []


@pytest.fixture
def dirs(tmp_path, monkeypatch):
    """solutions/ with the toy notebook, an empty notebooks/; the fake registry stands in."""
    monkeypatch.setattr(release, "load_registry", lambda: REGISTRY)
    write_nb(tmp_path / "solutions" / NAME, toy_notebook())
    return tmp_path / "solutions", tmp_path / "notebooks"


def test_leaks_per_notebook_maps_every_solution_and_release_check_fails_on_a_leak(dirs, capsys):
    solutions, notebooks = dirs
    assert run_cli("--solutions", solutions, "--notebooks", notebooks) == 0
    assert release.leaks_per_notebook(solutions) == {NAME: []}
    assert run_cli("--solutions", solutions, "--notebooks", notebooks, "--check") == 0

    nb = toy_notebook()
    nb.cells.insert(2, new_markdown_cell(f"`{LEAKED}`", id="prompt"))
    write_nb(solutions / NAME, nb)
    assert run_cli("--solutions", solutions, "--notebooks", notebooks) == 0  # release writes
    capsys.readouterr()
    assert run_cli("--solutions", solutions, "--notebooks", notebooks, "--check") == 1
    err = capsys.readouterr().err
    assert "no-answer rule" in err and "exercise 42.1" in err and "'prompt'" in err
    (leak,) = release.leaks_per_notebook(solutions)[NAME]
    assert leak.cell_id == "prompt"


def test_a_notebook_without_exercises_has_no_leaks():
    nb = new_notebook(cells=[new_markdown_cell("# nothing", id="t"), new_code_cell("1", id="c")])
    assert leaks.find_leaks(nb, nb, "x.ipynb") == []
