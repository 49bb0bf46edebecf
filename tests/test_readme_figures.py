"""The README's measured figures come from ``benchmarks/results`` (issue 35, newcomer F16):
every row of a benchmark table in the README is a row of ``benchmarks/results/cpu.md`` (the
README may show fewer columns), and the notebooks' summary line states ``cpu.json``'s count,
total and slowest notebook, and covers every notebook of ``solutions/``. Re-run ``course bench``
and copy the tables when they move. The test counts the README gives for the quick and the slow
tier ("about N tests") are within 10% of what pytest collects (slow: it collects the suite)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
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


def test_every_solution_notebook_has_a_measured_row():
    data = json.loads((RESULTS / "cpu.json").read_text(encoding="utf-8"))["benchmarks"]
    measured = {r["notebook"] for r in data["notebooks"]["rows"]} - {"TOTAL"}
    notebooks = {p.stem for p in (ROOT / "solutions").glob("[0-9][0-9]_*.ipynb")}
    assert notebooks - measured == set(), "not in benchmarks/results (re-run course bench)"


def _stated_counts() -> tuple[int, int]:
    """(quick, slow): the "about N tests" of README step 5, in that order."""
    text = " ".join(README[README.index("**5. Run the tests**") :].split())
    found = [int(n.replace(",", "")) for n in re.findall(r"about ([\d,]+) tests", text)[:2]]
    assert len(found) == 2, "README step 5 gives no 'about N tests' for each tier"
    return found[0], found[1]


@pytest.mark.slow
def test_the_readme_test_counts_are_within_ten_percent_of_the_collected_ones():
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-m",
            "slow",
            "-p",
            "no:cacheprovider",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    m = re.search(r"(\d+)/(\d+) tests collected \((\d+) deselected\)", run.stdout)
    assert m, run.stdout[-2000:] + run.stderr[-2000:]
    slow, quick = int(m.group(1)), int(m.group(3))
    stated_quick, stated_slow = _stated_counts()
    assert abs(quick - stated_quick) <= 0.1 * stated_quick, (quick, stated_quick)
    assert abs(slow - stated_slow) <= 0.1 * stated_slow, (slow, stated_slow)


def test_the_readme_states_a_count_for_each_tier():
    quick, slow = _stated_counts()
    assert quick > slow > 0
