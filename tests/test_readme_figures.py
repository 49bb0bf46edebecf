"""The README's measured figures come from ``benchmarks/results`` (issue 35, newcomer F16):
every row of a benchmark table in the README is a row of ``benchmarks/results/cpu.md`` (the
README may show fewer columns), and the notebooks' summary line states ``cpu.json``'s count,
total and slowest notebook. Re-run ``course bench`` and copy the tables when they move."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
RESULTS = ROOT / "benchmarks" / "results"


def _tables(text: str) -> dict[str, list[dict[str, str]]]:
    """``**name**`` -> the rows (column -> cell) of the first table after that label."""
    out: dict[str, list[dict[str, str]]] = {}
    for m in re.finditer(r"^\*\*(\w+)\*\*", text, re.M):
        lines = text[m.end() :].splitlines()[1:]
        block = []
        for line in lines:
            if line.startswith("|"):
                block.append([c.strip() for c in line.strip().strip("|").split("|")])
            elif block or line.strip():
                break  # the table ends, or the label is not followed by a table
        if len(block) >= 3 and m.group(1) not in out:
            header = block[0]
            out[m.group(1)] = [dict(zip(header, row, strict=False)) for row in block[2:]]
    return out


README_TABLES = _tables(README[README.index("Every figure is a ratio") :])
RESULT_TABLES = _tables((RESULTS / "cpu.md").read_text(encoding="utf-8"))


def test_the_readme_shows_the_benchmark_tables():
    assert {"gpt", "attention", "mha", "vit", "notebooks"} <= set(README_TABLES)


@pytest.mark.parametrize("name", sorted(README_TABLES))
def test_every_readme_benchmark_row_is_in_the_results(name):
    measured = RESULT_TABLES[name]
    for row in README_TABLES[name]:
        assert any(all(r.get(k) == v for k, v in row.items()) for r in measured), (
            f"README's {name} row {row} is not in benchmarks/results/cpu.md"
        )


def test_the_notebooks_summary_line_is_the_measured_one():
    data = json.loads((RESULTS / "cpu.json").read_text(encoding="utf-8"))["benchmarks"]
    rows = [r for r in data["notebooks"]["rows"] if r["notebook"] != "TOTAL"]
    slowest = max(rows, key=lambda r: r["ci_s"])
    total = data["notebooks"]["summary"]["total_s"]
    expected = (
        f"{len(rows)} notebooks in the `ci` profile: {total:.0f} s in all, slowest "
        f"`{slowest['notebook']}` {slowest['ci_s']:.0f} s"
    )
    assert expected in README
    assert len(README_TABLES["notebooks"]) == len(rows) + 1  # and TOTAL
