"""Stored outputs that reproduce on any CPU (issue 34): no compared output of a solution
notebook prints a float at full precision or a rounding error as a value
(``course_utils.authoring.float_prints``)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from course_utils.authoring import float_prints

SOLUTIONS = sorted((Path(__file__).resolve().parents[1] / "solutions").glob("[0-9][0-9]_*.ipynb"))


def _notebook(tmp_path: Path, text: str, tags: list[str] | None = None) -> Path:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("print(...)")
    cell.metadata["tags"] = tags or []
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
    nb.cells = [cell]
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    return path


@pytest.mark.parametrize(
    "text",
    [
        "row sums: 0.9999998807907104\n",  # 02 cell 14, turn 4: differs on an Intel CPU
        "largest spread along any diagonal: 1.6e-14\n",  # 04 cell 45, turn 4
        "spread 4.2e-07\n",
    ],
)
def test_a_full_precision_or_rounding_error_print_is_flagged(tmp_path, text):
    assert float_prints.scan(_notebook(tmp_path, text))


@pytest.mark.parametrize(
    "text",
    [
        "below 1e-12 (float64 rounding)\n",
        "✓ spread below 1e-10\n",
        "val 2.479, 98.6%, N = 6,224, C = 1.87e+10\n",
    ],
)
def test_rounded_values_thresholds_and_large_numbers_pass(tmp_path, text):
    assert float_prints.scan(_notebook(tmp_path, text)) == []


def test_an_output_nbval_does_not_compare_is_not_flagged(tmp_path):
    path = _notebook(tmp_path, "0.9999998807907104\n", tags=["nbval-ignore-output"])
    assert float_prints.scan(path) == []


@pytest.mark.parametrize("solution", SOLUTIONS, ids=lambda p: p.stem)
def test_no_solution_prints_a_float_that_differs_across_cpus(solution):
    found = float_prints.scan(solution)
    assert not found, "\n".join(map(str, found))
