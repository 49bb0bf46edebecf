"""The nbval-style comparison the notebook tests apply to the grader's run (no kernel here)."""

from __future__ import annotations

import copy
from pathlib import Path

import nbformat
from nbval_compare import NOT_COMPARED_TAGS, mismatches

SOLUTION = Path(__file__).resolve().parents[1] / "solutions" / "03_scaled_dot_product.ipynb"


def _stored() -> nbformat.NotebookNode:
    return nbformat.read(SOLUTION, as_version=4)


def _as_the_grader_ran_it(nb) -> nbformat.NotebookNode:
    """What ``course grade --executed`` writes when every output came out as stored."""
    run = nbformat.v4.new_notebook()
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            new = nbformat.v4.new_code_cell(cell.source)
            new.metadata["grader"] = {"cell": i}
            new.outputs = copy.deepcopy(cell.outputs)
            run.cells.append(new)
    return run


def _compared_with_text(nb) -> int:
    for i, cell in enumerate(nb.cells):
        tags = cell.metadata.get("tags", [])
        if cell.cell_type == "code" and not any(t in tags for t in NOT_COMPARED_TAGS):
            if any(o.get("output_type") == "stream" for o in cell.outputs):
                return i
    raise AssertionError("no compared cell with printed text in the solution")


def test_identical_outputs_match():
    nb = _stored()
    assert mismatches(nb, _as_the_grader_ran_it(nb)) == []


def test_a_changed_number_is_a_mismatch_that_names_the_cell():
    nb = _stored()
    run = _as_the_grader_ran_it(nb)
    i = _compared_with_text(nb)
    (ran,) = [c for c in run.cells if c.metadata["grader"]["cell"] == i]
    stream = next(o for o in ran.outputs if o.output_type == "stream")
    stream.text = stream.text + "0.123\n"
    problems = mismatches(nb, run)
    assert len(problems) == 1 and problems[0].startswith(f"cell {i} ")


def test_a_compared_cell_the_grader_did_not_run_is_a_mismatch():
    nb = _stored()
    run = _as_the_grader_ran_it(nb)
    i = _compared_with_text(nb)
    run.cells = [c for c in run.cells if c.metadata["grader"]["cell"] != i]
    assert mismatches(nb, run) == [f"cell {i}: not executed by the grader"]


def test_ignored_cells_and_figures_are_not_compared():
    nb = _stored()
    run = _as_the_grader_ran_it(nb)
    for cell in run.cells:
        source = nb.cells[cell.metadata["grader"]["cell"]]
        if "nbval-ignore-output" in source.metadata.get("tags", []):
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="other\n")]
        # a headless kernel shows no figure
        cell.outputs = [o for o in cell.outputs if "image/png" not in o.get("data", {})]
    assert mismatches(nb, run) == []
