"""What the sandbox costs: grade one notebook alternately with and without it, in one run.

    python -m course_utils.grading.sandbox_cost [NOTEBOOK] [--rounds N] [--sandbox bwrap]

Default notebook: ``solutions/03_scaled_dot_product.ipynb``. Each round grades it once with
``--sandbox none`` and once with the sandbox (order alternating, same seed), and the result is
the ratio of the median wall times (kernel start, every cell, every check, teardown). Both
must score the same, or the figure means nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from course_utils.grading.grader import GradeOptions, grade_submission


def measure(path: str, rounds: int, sandbox: str) -> dict:
    """Median wall seconds per backend and their ratio (sandboxed / none)."""
    times: dict[str, list[float]] = {"none": [], sandbox: []}
    totals: dict[str, set] = {"none": set(), sandbox: set()}
    for r in range(rounds):
        order = ["none", sandbox] if r % 2 == 0 else [sandbox, "none"]
        for backend in order:
            opts = GradeOptions(sandbox=backend, seed=1234 + r, threads=1)
            t0 = time.perf_counter()
            rep = grade_submission(path, opts)
            times[backend].append(time.perf_counter() - t0)
            totals[backend].add((rep["total"], rep["max"], rep["error"]))
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "notebook": path,
        "rounds": rounds,
        "median_s": med,
        "ratio": med[sandbox] / med["none"],
        "scores": {k: sorted(map(str, v)) for k, v in totals.items()},
    }


def main(argv: list[str] | None = None) -> int:
    """Print the medians and the ratio; exit 1 when the two backends scored differently."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebook", nargs="?", default="solutions/03_scaled_dot_product.ipynb")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sandbox", default="bwrap", choices=("bwrap", "docker", "podman"))
    args = parser.parse_args(argv)
    if not Path(args.notebook).is_file():
        print(f"sandbox_cost: {args.notebook}: no such file", file=sys.stderr)
        return 2
    res = measure(args.notebook, args.rounds, args.sandbox)
    for backend, sec in res["median_s"].items():
        print(
            f"{backend:>6}: median {sec:.1f} s over {args.rounds} gradings  {res['scores'][backend]}"
        )
    print(f"sandbox cost: {args.sandbox} / none = {res['ratio']:.2f}x")
    return 0 if res["scores"]["none"] == res["scores"][args.sandbox] else 1


if __name__ == "__main__":
    sys.exit(main())
