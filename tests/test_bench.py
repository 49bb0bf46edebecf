"""Smoke tests of ``course bench --quick``: every benchmark runs end to end and writes its JSON.

No timing is asserted here (targets live in the benchmarks' own output); what is asserted is
that each benchmark cross-checks its implementations, produces its table's columns and records
the machine it ran on.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from course_utils import bench
from course_utils.cli import main

REPO = Path(__file__).resolve().parents[1]
SHAKESPEARE = REPO.parent / "shared" / "data" / "tinyshakespeare.txt"


def _bench(tmp_path: Path, *names: str, extra: tuple[str, ...] = ()) -> dict:
    out = tmp_path / "bench.json"
    code = main(
        [
            "bench",
            *names,
            "--quick",
            "--threads",
            "1",
            "--out",
            str(tmp_path),
            "--json",
            str(out),
            *extra,
        ]
    )
    assert code == 0
    return json.loads(out.read_text())


def test_bench_records_the_machine_and_rejects_unknown_names(tmp_path, capsys):
    assert main(["bench", "no-such-benchmark"]) == 2
    assert "unknown benchmark" in capsys.readouterr().err


def test_quick_run_without_out_never_writes_into_the_committed_results(
    tmp_path, monkeypatch, capsys
):
    results = tmp_path / "benchmarks" / "results"
    results.mkdir(parents=True)
    (results / "attention.png").write_bytes(b"committed")
    monkeypatch.chdir(tmp_path)
    seen = []

    def fake_run(opts):  # stands in for a benchmark that saves a plot into opts.out
        seen.append(Path(opts.out).resolve())
        (Path(opts.out) / "attention.png").write_bytes(b"new")
        return {"rows": [], "summary": {}}

    monkeypatch.setitem(bench.BENCHMARKS, "fake", "fake_bench_module")
    monkeypatch.setitem(sys.modules, "fake_bench_module", SimpleNamespace(run=fake_run))
    assert main(["bench", "fake", "--quick", "--threads", "1"]) == 0
    assert (results / "attention.png").read_bytes() == b"committed"
    assert seen[0] != results.resolve() and not seen[0].is_relative_to(tmp_path)
    # a full run, or --quick with an explicit --out, does write where it is told
    assert main(["bench", "fake", "--threads", "1"]) == 0
    assert seen[1] == results.resolve()
    assert (results / "attention.png").read_bytes() == b"new"
    assert main(["bench", "fake", "--quick", "--threads", "1", "--out", str(results)]) == 0
    assert seen[2] == results.resolve()
    capsys.readouterr()


@pytest.mark.slow
def test_attention_and_mha_benchmarks_report_ratios_to_pytorch(tmp_path):
    report = _bench(tmp_path, "attention", "mha")
    machine = report["machine"]
    assert {"cpu", "cores", "threads", "torch", "device", "dtype"} <= set(machine)
    att = report["benchmarks"]["attention"]
    assert {r["n"] for r in att["rows"]} == {64, 128, 256}
    assert all(r["manual/sdpa_fwd"] > 0 and r["tiled_mem_mb"] > 0 for r in att["rows"])
    # the naive path holds the (T, T) weights: its memory grows faster than the tiled one's
    assert att["summary"]["memory_slopes"]["manual"] > att["summary"]["memory_slopes"]["tiled"]
    assert Path(att["summary"]["plot"]).exists()
    mha = report["benchmarks"]["mha"]
    assert all(r["course/torch"] > 0 for r in mha["rows"])


@pytest.mark.slow
def test_gpt_benchmark_trains_and_reports_throughput_and_flops(tmp_path):
    extra = ("--data", str(SHAKESPEARE)) if SHAKESPEARE.exists() else ()
    rows = _bench(tmp_path, "gpt", extra=extra)["benchmarks"]["gpt"]["rows"]
    # the nanoGPT reference first, then the course recipe within the reference's wall time
    assert [r["recipe"] for r in rows] == ["nanoGPT CPU recipe", "course cpu recipe"]
    assert rows[0]["batch"] == 12 and rows[0]["lr"] == 1e-3
    for row in rows:
        assert row["tokens/s"] > 0 and 0 < row["%_of_matmul"] < 100
        assert row["val_loss"] < 5.0  # finite and below a uniform guess over ~65 characters


@pytest.mark.slow
def test_vit_benchmark_trains_the_vit_and_both_baselines(tmp_path):
    rows = _bench(tmp_path, "vit")["benchmarks"]["vit"]["rows"]
    assert [r["model"] for r in rows] == ["ViT (course)", "small CNN", "SVC (sklearn)"]
    assert all(0.5 < r["test_acc"] <= 1.0 for r in rows)


@pytest.mark.slow
@pytest.mark.notebook
def test_notebooks_benchmark_times_a_solution_notebook(tmp_path):
    report = _bench(tmp_path, "notebooks", extra=("--solutions", str(REPO / "solutions")))
    rows = report["benchmarks"]["notebooks"]["rows"]
    assert rows[0]["notebook"] == "00_start_here" and rows[0]["status"] == "ok"
    assert rows[-1]["notebook"] == "TOTAL"


def test_markdown_report_has_the_machine_each_table_and_the_verdicts():
    from course_utils.bench import markdown_report

    report = {
        "machine": {
            "cpu": "Test CPU",
            "cores": 2,
            "threads": 2,
            "torch": "2.x",
            "python": "3.11",
            "device": "cpu",
            "dtype": "float32",
        },
        "benchmarks": {
            "mha": {
                "wall_s": 3.0,
                "rows": [{"T": 64, "course/torch": 1.04321}],
                "summary": {"target": "course/torch <= 1.1", "meets_target": True},
            },
            "gpt": {
                "wall_s": 9.0,
                "rows": [{"recipe": "x", "val_loss": 1.9, "n": 1}],
                "columns": ["recipe", "val_loss"],
                "summary": {"target": "val <= 1.80", "meets_target": False},
            },
        },
    }
    text = markdown_report(report)
    assert text.startswith("Machine: Test CPU, 2 cores")
    assert "| T | course/torch |" in text and "| 64 | 1.04 |" in text
    assert "| recipe | val_loss |" in text and "| n |" not in text  # the chosen columns only
    assert "course/torch <= 1.1 — **met**" in text and "val <= 1.80 — **missed**" in text
