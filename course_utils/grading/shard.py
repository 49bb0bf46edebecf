"""``course grade --shard K/N``: grade one part of a class, on any machine, and merge later.

A class of 1,000 is graded on the engines an instructor already has (a Slurm job array, a
Kubernetes Indexed Job, a GitHub Actions matrix; recipes in ``docs/grading-at-scale.md``):
every job gets the *same* command line, the whole class's submissions and its own ``K``;
it grades the students of shard ``K`` of ``N`` and writes its usual reports plus one shard
record, ``DIR/shard.json`` (``--shard-dir DIR``). ``course grade-merge`` joins the records
into the gradebook one single run would have written (:mod:`course_utils.grading.merge`).

How students are split: by a **stable hash of the student's name** (the name every report
gives the student: the notebook's stem, or its folder with one folder per student, i.e. the
roster's ``student`` column), ``sha256(name) mod N``. Not Python's ``hash()`` (salted per
process), not the position in the list: a student's shard depends on the name and ``N``
only, so it is the same on every machine, whatever the shell's glob order or locale, and a
late submission added to the class moves nobody else. The price is balance: shards differ in
size by about ``sqrt(n/N)`` students (1,000 over 10: 100 ± 10), where round-robin over a sorted
list would give equal sizes but move students whenever one is added or removed.

The names themselves are computed over the whole list (as ``course grade`` does without
shards), and so is every other batch-wide decision: whether folders name students (personal
question seeds), and the order of the merged gradebook.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

#: the shard record's format; ``course grade-merge`` refuses records of another format
RECORD_FORMAT = 1
RECORD_NAME = "shard.json"

_SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


class ShardError(ValueError):
    """A ``--shard`` value or a set of shard records that cannot be used (one line)."""


def parse_shard(text: str) -> tuple[int, int]:
    """``"K/N"`` -> ``(K, N)`` with ``1 <= K <= N`` (1-based, as ``--shard 1/3`` in Jest or
    Playwright; a Slurm array ``--array=1-N`` gives K directly)."""
    m = _SHARD.match(text or "")
    if not m:
        raise ShardError(f"--shard {text!r}: expected K/N, e.g. --shard 2/8")
    k, n = int(m.group(1)), int(m.group(2))
    if n < 1 or not 1 <= k <= n:
        raise ShardError(f"--shard {text}: K must be between 1 and N (N >= 1)")
    return k, n


def shard_of(student: str, n: int) -> int:
    """The shard (1..n) of a student: a stable hash of the name, the same on every machine."""
    raw = student.encode("utf-8", "surrogateescape")
    return int.from_bytes(hashlib.sha256(raw).digest()[:8], "big") % n + 1


def select(names: list[str], k: int, n: int) -> list[int]:
    """Indices (into ``names``) of the students of shard ``k`` of ``n``."""
    return [i for i, name in enumerate(names) if shard_of(name, n) == k]


def _file_digest(h: Any, path: Path) -> None:
    try:
        h.update(path.read_bytes())
    except OSError:
        h.update(b"<unreadable>")


def course_digest() -> str:
    """What grades: the installed ``course_utils`` sources (every ``.py`` file, path and
    content). Two shards graded by different course versions differ here."""
    import course_utils

    root = Path(course_utils.__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        h.update(str(path.relative_to(root)).encode() + b"\0")
        _file_digest(h, path)
    return h.hexdigest()[:16]


def _tree_digest(folders: list[Path], pattern: str) -> str:
    h = hashlib.sha256()
    for folder in folders:
        for path in sorted(Path(folder).glob(pattern)):
            h.update(path.name.encode("utf-8", "surrogateescape") + b"\0")
            _file_digest(h, path)
    return h.hexdigest()[:16]


def options_fingerprint(args: Any, options: Any) -> dict[str, Any]:
    """Every option that changes a grade or a report's content, as the shard ran it: merged
    shards must agree on all of it. ``-j`` is left out (it changes how fast, not what); the
    threads each submission gets are in (its CPU quota and torch threads: cores / ``-j`` by
    default, so give ``--threads`` when the machines differ), and so is the resolved sandbox
    backend (``--sandbox auto`` may resolve differently on two machines)."""
    from course_utils.grading.plan import reference_dirs

    checks = [Path(p) for p in getattr(args, "checks", []) if p.endswith(".py") or os.sep in p]
    return {
        "assignment": args.assignment,
        "checks": [Path(c).stem for c in getattr(args, "checks", [])],
        "checks_digest": _tree_digest([p.parent for p in checks], "*.py") if checks else "",
        "references_digest": _tree_digest(reference_dirs(args.reference_dir), "*.ipynb"),
        "keys": getattr(args, "keys", None),
        "student": getattr(args, "student", None),
        "profile": os.environ.get("COURSE_PROFILE", ""),
        "sandbox": options.sandbox,
        "image": getattr(options, "image", None),
        "gpu": args.gpu,
        "seed": args.seed,
        "cell_timeout": args.cell_timeout,
        "timeout": args.timeout,
        "memory_mb": args.memory_mb,
        "max_output_kb": args.max_output_kb,
        "max_procs": args.max_procs,
        "disk_mb": args.disk_mb,
        "cpu_seconds": args.cpu_seconds,
        "zero_flagged": args.zero_flagged,
        # the plan's tail run or not (--all-cells, or --executed): cells.not_run differs
        "all_cells": options.runs_tail,
        "threads": options.threads,
    }


def where_from(args: Any) -> dict[str, Any]:
    """Where this shard found its ``--checks`` and references (absolute paths; not compared
    between shards, whose machines may mount them elsewhere): what ``grade-merge
    --similarity`` reads the notebooks and the course's code with."""
    if args is None:
        return {"checks": [], "reference_dir": None}
    checks = [
        str(Path(c).resolve()) if c.endswith(".py") or os.sep in c else c
        for c in getattr(args, "checks", [])
    ]
    ref = getattr(args, "reference_dir", None)
    return {"checks": checks, "reference_dir": str(Path(ref).resolve()) if ref else None}


def list_digest(paths: list[str]) -> str:
    """The class: the sorted list of submission paths (the order the shell globbed them in,
    which may depend on the locale, does not count)."""
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(p.encode("utf-8", "surrogateescape") + b"\0")
    return h.hexdigest()[:16]


def write_record(
    directory: str | Path,
    k: int,
    n: int,
    paths: list[str],
    indices: list[int],
    reports: list[dict[str, Any]],
    fingerprint: dict[str, Any],
    fingerprint_args: Any = None,
) -> Path:
    """``DIR/shard.json``: the shard's identity, the class it belongs to, the options it was
    graded with and its reports as graded (before roster, adjustments, late policy and
    similarity, which the merge applies once to the whole class). Written atomically."""
    from course_utils.cli import version
    from course_utils.grading.grader import GRADER_VERSION
    from course_utils.grading.reports import write_atomic

    record = {
        "format": RECORD_FORMAT,
        "shard": [k, n],
        "course": {
            "version": version(),
            "grader_version": GRADER_VERSION,
            "digest": course_digest(),
        },
        "options": fingerprint,
        "where": where_from(fingerprint_args),
        "class": {"count": len(paths), "digest": list_digest(paths), "paths": paths},
        "indices": indices,
        "reports": reports,
    }
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / RECORD_NAME
    # ensure_ascii: a lone surrogate in a student's text travels as \\udXXX, losslessly
    write_atomic(target, json.dumps(record, ensure_ascii=True) + "\n")
    return target
