"""``course grade-merge``: join the shards of a class into one gradebook.

    course grade-merge SHARD_DIR... [--json F] [--csv F] [--junit F] [--feedback DIR] ...
                       [--roster F] [--adjust F] [--deadline WHEN] [--similarity]
                       [--reproducible] [--fail-under P]

Each ``SHARD_DIR`` is a ``--shard-dir`` of ``course grade --shard K/N`` (or its
``shard.json``). The merge refuses, with one line naming the shards concerned, a missing
shard, a shard given twice, shards of different classes (submission lists), shards graded
with different options (seed, limits, sandbox, profile, references, ``--checks``) or by
different course versions.

What it writes is what one ``course grade`` of the whole class with the same options writes:
the reports in the order the submissions were given (shard 1's command line), the gradebook
steps that need the whole class (roster, ``--adjust``, the late policy, ``--similarity``)
applied once here, every report through the same writers. Byte for byte, with
``--reproducible`` on both sides (the same ``--seed`` is required anyway): what a run measures
rather than decides (wall times, peak memory, the sandbox's uid) differs between any two runs,
sharded or not. Without it, each submission keeps the measurements of the shard that graded it.
The exit code is the single run's (see ``course grade --help``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from course_utils.grading.shard import RECORD_FORMAT, RECORD_NAME, ShardError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``course grade-merge``: shard folders, then ``course grade``'s reports
    and gradebook inputs."""
    from course_utils.grading import cli as grade_cli

    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.description = (
        "join the shard records of course grade --shard K/N into the gradebook one run "
        "would have written"
    )
    parser.add_argument(
        "shards",
        nargs="+",
        metavar="SHARD_DIR",
        help="--shard-dir folders (or their shard.json), one per shard, in any order",
    )
    from course_utils.grading.writers import add_writer_arguments

    out = parser.add_argument_group("reports")
    add_writer_arguments(out)
    out.add_argument("-q", "--quiet", action="store_true", help="no summary")
    out.add_argument(
        "--similarity",
        action="store_true",
        help="compare each exercise's code across the whole class (as course grade "
        "--similarity; reads every notebook, where the shards read them)",
    )
    grade_cli._gradebook_arguments(
        parser.add_argument_group("gradebook: roster, regrades, late policy")
    )
    pol = parser.add_argument_group("policy")
    pol.add_argument(
        "--fail-under",
        type=float,
        metavar="P",
        help="exit 1 when a submission scores below P percent",
    )
    pol.add_argument(
        "--reproducible",
        action="store_true",
        help="leave out what is measured rather than decided (as course grade --reproducible)",
    )


_RECORD_KEYS = ("shard", "course", "options", "class", "indices", "reports")


def _read(target: str) -> tuple[str, dict[str, Any]]:
    path = Path(target)
    if path.is_dir():
        path = path / RECORD_NAME
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ShardError(f"{target}: no {RECORD_NAME} (did that shard finish?)") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ShardError(f"{target}: not a shard record ({type(exc).__name__}: {exc})") from None
    if not isinstance(record, dict) or record.get("format") != RECORD_FORMAT:
        raise ShardError(f"{target}: not a shard record of format {RECORD_FORMAT}")
    missing = [k for k in _RECORD_KEYS if k not in record]
    if missing:
        raise ShardError(f"{target}: a damaged shard record (no {', '.join(missing)})")
    return str(path), record


def _differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    keys = list(dict.fromkeys([*a, *b]))
    return [f"{k} {a.get(k)!r} vs {b.get(k)!r}" for k in keys if a.get(k) != b.get(k)]


def check_records(records: list[tuple[str, dict[str, Any]]]) -> None:
    """Raise :class:`ShardError` unless the records are exactly the N shards of one class,
    graded with the same options by the same course."""
    first_path, first = records[0]
    n = first["shard"][1]
    seen: dict[int, str] = {}
    for path, rec in records:
        k, n_here = rec["shard"]
        if n_here != n:
            raise ShardError(f"{path} is shard {k}/{n_here}, {first_path} is of {n} shards")
        if k in seen:
            raise ShardError(f"shard {k}/{n} given twice: {seen[k]} and {path}")
        seen[k] = path
        if rec["class"]["digest"] != first["class"]["digest"]:
            raise ShardError(
                f"{path} and {first_path} grade different classes "
                f"({rec['class']['count']} and {first['class']['count']} submissions, "
                "not the same list): give every shard the same submissions"
            )
        diff = _differences(first["options"], rec["options"])
        if diff:
            raise ShardError(
                f"{path} and {first_path} were graded with different options: " + "; ".join(diff)
            )
        diff = _differences(first["course"], rec["course"])
        if diff:
            raise ShardError(
                f"{path} and {first_path} were graded by different course versions: "
                + "; ".join(diff)
            )
    absent = [k for k in range(1, n + 1) if k not in seen]
    if absent:
        names = ", ".join(f"{k}/{n}" for k in absent)
        raise ShardError(f"missing shard{'s' if len(absent) > 1 else ''} {names}: nothing merged")


def merged_reports(records: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """The reports of every shard, in the order shard 1 was given the submissions; each
    submission exactly once (else :class:`ShardError`)."""
    check_records(records)
    order = next(rec for _, rec in records if rec["shard"][0] == 1)["class"]["paths"]
    positions: dict[str, list[int]] = {}  # a path given twice is graded twice, as in one run
    for i, p in enumerate(order):
        positions.setdefault(p, []).append(i)
    out: list[dict[str, Any] | None] = [None] * len(order)
    for path, rec in records:
        paths = rec["class"]["paths"]
        if len(rec["indices"]) != len(rec["reports"]):
            raise ShardError(
                f"{path}: {len(rec['indices'])} indices, {len(rec['reports'])} reports"
            )
        seen: dict[str, int] = {}
        nth = []  # the k-th occurrence of a path in this shard's list: its k-th place in shard 1's
        for p in paths:
            nth.append(seen.get(p, 0))
            seen[p] = nth[-1] + 1
        for i, rep in zip(rec["indices"], rec["reports"], strict=True):
            where = positions[paths[i]][nth[i]]
            if out[where] is not None:
                raise ShardError(f"{paths[i]} graded by two shards (the last: {path})")
            out[where] = rep
    lost = [order[i] for i, rep in enumerate(out) if rep is None]
    if lost:
        raise ShardError(f"{len(lost)} submissions graded by no shard, e.g. {lost[0]}")
    return [rep for rep in out if rep is not None]


def main(args: argparse.Namespace) -> int:
    """Run ``course grade-merge``; exit codes as ``course grade``'s."""
    from course_utils.grading import cli as grade_cli

    try:
        records = [_read(t) for t in args.shards]
        reports = merged_reports(records)
    except ShardError as exc:
        print(f"course grade-merge: {exc}", file=sys.stderr)
        return grade_cli.EXIT_BAD_INPUT
    where = records[0][1].get("where") or {}
    options = SimpleNamespace(checks_modules=(), reference_dir=where.get("reference_dir"))
    if args.similarity:
        try:
            options.checks_modules = grade_cli._resolve_checks(where.get("checks") or [])
        except FileNotFoundError as exc:
            print(f"course grade-merge: --similarity: {exc}", file=sys.stderr)
            return grade_cli.EXIT_BAD_INPUT
    problem = grade_cli._reports_out(args, reports, options)
    if problem:
        return problem
    if not args.quiet:
        grade_cli._print_summaries(reports)
    return grade_cli.exit_code(reports, args.fail_under)
