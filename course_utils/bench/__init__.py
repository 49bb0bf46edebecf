"""``course bench``: the course's implementations measured against PyTorch and the machine.

Each benchmark is a module here with ``run(opts) -> dict`` returning ``{"rows": [...],
"summary": {...}}`` and printing its table; ``course bench`` runs the ones named (all by
default), records the machine, and writes everything as JSON. Ratios are measured in one
process against a reference (``F.scaled_dot_product_attention``, ``nn.MultiheadAttention``,
the machine's own matmul throughput), never as bare absolute times.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

BENCHMARKS = {
    "attention": "course_utils.bench.attention",
    "mha": "course_utils.bench.mha",
    "gpt": "course_utils.bench.gpt",
    "vit": "course_utils.bench.vit",
    "notebooks": "course_utils.bench.notebooks",
    "grading": "course_utils.bench.grading",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``course bench``."""
    parser.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help=f"benchmarks to run (default: all): {', '.join(BENCHMARKS)}",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny sizes: a smoke test of every benchmark (no targets judged)",
    )
    parser.add_argument("--json", metavar="F", help="write all results as JSON to F")
    parser.add_argument(
        "--markdown",
        metavar="F",
        help="write the tables as Markdown to F (the README's Performance section is this file)",
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        default=None,
        help="folder for plots (default: benchmarks/results when it exists, else .; "
        "with --quick a fresh temporary folder, so a smoke test never touches the "
        "committed results)",
    )
    parser.add_argument(
        "--data",
        metavar="PATH",
        default=None,
        help="tiny-shakespeare text for the gpt benchmark "
        "(e.g. ../shared/data/tinyshakespeare.txt)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        metavar="N",
        help="torch threads (default: all cores); pinned for every benchmark",
    )
    parser.add_argument("--device", default=None, help="cpu or cuda (default: the profile's)")
    parser.add_argument(
        "--solutions",
        default="solutions",
        metavar="DIR",
        help="folder of solution notebooks for the notebooks benchmark",
    )


def main(args: argparse.Namespace) -> int:
    """Run the chosen benchmarks; exit 0, or 2 on an unknown name."""
    import torch

    from course_utils.bench.common import machine_info

    names = args.names or list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        print(
            f"unknown benchmark(s): {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}",
            file=sys.stderr,
        )
        return 2
    threads = args.threads or os.cpu_count() or 1
    torch.set_num_threads(threads)
    args.out = output_folder(args.out, quick=args.quick)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    report = {"machine": machine_info(args.device), "quick": bool(args.quick), "benchmarks": {}}
    print("machine: " + ", ".join(f"{k}={v}" for k, v in report["machine"].items()))
    for name in names:
        print(f"\n=== {name} ===")
        t0 = time.perf_counter()
        module = importlib.import_module(BENCHMARKS[name])
        result = module.run(args)
        result["wall_s"] = round(time.perf_counter() - t0, 2)
        report["benchmarks"][name] = result
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2, default=str) + "\n")
        print(f"\nwrote {args.json}")
    if args.markdown:
        Path(args.markdown).write_text(markdown_report(report))
        print(f"wrote {args.markdown}")
    return 0


def output_folder(out: str | None, *, quick: bool) -> str:
    """Where plots go: ``out`` when given; else a new temporary folder for ``--quick`` (a
    smoke test must not overwrite the committed ``benchmarks/results``); else
    ``benchmarks/results`` when it exists (a full run updates it), else ``.``."""
    if out is not None:
        return out
    if quick:
        return tempfile.mkdtemp(prefix="course-bench-quick-")
    return "benchmarks/results" if Path("benchmarks/results").is_dir() else "."


def markdown_report(report: dict) -> str:
    """``report`` (what ``--json`` writes) as Markdown: the machine, then one table per
    benchmark with its target verdict."""
    from course_utils.bench.common import markdown_table

    m = report["machine"]
    lines = [
        f"Machine: {m['cpu']}, {m['cores']} cores ({m['threads']} torch threads), "
        f"torch {m['torch']}, Python {m['python']}, device {m['device']}, {m['dtype']}"
        + (f", {m['gpu']}" if m.get("gpu") else "")
        + ".",
        "",
    ]
    for name, result in report["benchmarks"].items():
        rows = result.get("rows", [])
        lines.append(f"**{name}** ({result.get('wall_s', 0):.0f} s)")
        lines.append("")
        if rows:
            columns = result.get("columns") or list(dict.fromkeys(k for row in rows for k in row))
            lines += [markdown_table(rows, columns), ""]
        summary = result.get("summary", {})
        if "meets_target" in summary:
            verdict = "met" if summary["meets_target"] else "missed"
            lines += [f"Target: {summary.get('target', '')} — **{verdict}**.", ""]
    return "\n".join(lines)
