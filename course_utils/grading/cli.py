"""``course grade``: the official grader's command line.

    course grade SUBMISSION.ipynb... [--json F] [--junit F] [--feedback DIR] [--csv F]
                 [--classroom F] [--canvas F] [--gradescope F] [--moodle F]
                 [--class-report DIR] [--roster F] [--adjust F] [--deadline WHEN] [-j N] [--reference-dir DIR] [--assignment NAME]
                 [--cell-timeout S] [--timeout S] [--memory-mb M] [--max-output-kb K]
                 [--fail-under P] [--seed N] [--checks MODULE] [--executed DIR]
                 [--shard K/N --shard-dir DIR] [--threads N] [--reproducible] [--dry-run]

Each submission runs in a fresh, resource-limited kernel; verdicts are decided in the grading
process (see :mod:`course_utils.grading`). Exit codes (the highest that applies):

- ``0`` every submission was graded (and, with ``--fail-under P``, scored at least P percent);
- ``1`` a submission scored below ``--fail-under``;
- ``2`` usage error or bad input: a file that is missing, not valid JSON, not a notebook, or
  a notebook of another assignment (the others are still graded and reported, that one
  with zero points);
- ``3`` the grading machine failed: no kernel could start, the installed course lacks a
  check an assignment needs, or a grading process died (in a batch each submission has its
  own process, so a submission that kills it loses only its own report); or a kernel did not
  start in time twice because the machine was busy (``error_kind`` ``busy``: grade it again).
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_BELOW, EXIT_BAD_INPUT, EXIT_GRADER = 0, 1, 2, 3

EPILOG = """\
exit codes (the highest that applies):
  0  every submission graded (and at least --fail-under percent, if given)
  1  a submission scored below --fail-under
  2  usage error or bad input: missing file, malformed JSON, not a notebook, a notebook of
     another assignment (the other submissions are still graded and reported)
  3  the grading machine failed: no kernel could start, a check is missing from the course,
     or a grading process died (possibly killed by its submission; the others are reported),
     or a kernel did not start in time twice on a busy machine (error_kind busy: regrade)

what the grader does:
  Each submission runs top to bottom in a fresh python3 kernel in its own sandbox (--sandbox
  auto: bubblewrap when installed, else none, which every report says; it sees only a copy of its folder, no network, no other
  submission or process), with COURSE_PROFILE from this environment (default ci), under
  limits on all its processes together (--memory-mb, --max-procs, --disk-mb,
  --cpu-seconds), a per-cell and a total time limit and a cap on stored output. Check
  cells are restored from the reference notebook (solutions/<name>.ipynb, or notebooks/),
  so edited, moved or deleted check cells change nothing. At each check the kernel only
  computes outputs on inputs drawn at grade time; this process compares them with the
  verified implementation. Answers that merely re-export the course's own implementation
  are flagged for review (points kept unless --zero-flagged).

examples:
  course grade notebooks/00_start_here.ipynb                 # a student checks their work
  course grade submissions/*.ipynb --assignment 00_start_here -j 4 \\
      --csv gradebook.csv --feedback feedback/ --json grades.json --junit grades.xml
  course grade submissions/*.ipynb --sandbox docker --image course-grade:latest \\
      --similarity --report report.md --csv gradebook.csv   # in containers, with copying
  course grade submissions/*/00_start_here.ipynb --roster students.csv \
      --adjust regrades.csv --deadline 2026-03-01T23:59Z --late-penalty 10 \
      --canvas canvas.csv --csv gradebook.csv --bom --class-report class/   # the LMS, the class
  course grade submissions/*/00_start_here.ipynb --shard 2/8 --shard-dir shards/2 \
      --seed 4242 --threads 1 --reproducible    # one of 8 machines; then: course grade-merge
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``course grade``, one argument group each."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    parser.add_argument(
        "submissions", nargs="+", metavar="SUBMISSION.ipynb", help="notebooks to grade"
    )
    _report_arguments(parser.add_argument_group("reports"))
    _gradebook_arguments(parser.add_argument_group("gradebook: roster, regrades, late policy"))
    _reference_arguments(parser.add_argument_group("what to grade against"))
    _limit_arguments(parser.add_argument_group("limits"))
    _sandbox_arguments(parser.add_argument_group("sandbox"))
    _policy_arguments(parser.add_argument_group("policy"))
    _scale_arguments(parser.add_argument_group("a class on many machines (shards)"))


def _scale_arguments(scale) -> None:
    """Shards (``--shard K/N``), what makes two runs comparable, and a dry run."""
    scale.add_argument(
        "--shard",
        metavar="K/N",
        help="grade only shard K of N (1 <= K <= N) of the submissions given: every shard gets "
        "the same command line and the whole class; students are split by a stable hash of "
        "their name; needs --shard-dir and --seed; join with course grade-merge",
    )
    scale.add_argument(
        "--shard-dir",
        metavar="DIR",
        help="where the shard writes its record for course grade-merge (DIR/shard.json)",
    )
    scale.add_argument(
        "--reproducible",
        action="store_true",
        help="leave out of every report what is measured rather than decided (wall times, "
        "peak memory, processes and disk, CPU seconds, the sandbox's uid, the grader's "
        "memory): two gradings with the same --seed, or shards and their merge, then write "
        "the same bytes",
    )
    scale.add_argument(
        "--dry-run",
        action="store_true",
        help="check the command line and print which submissions this run (or shard) would "
        "grade, then stop: nothing is graded or written",
    )


def _report_arguments(out) -> None:
    """Where the reports go: one option per registered writer
    (:data:`course_utils.grading.writers.WRITERS`), then the similarity report."""
    from course_utils.grading.writers import add_writer_arguments

    add_writer_arguments(out)
    out.add_argument(
        "--executed",
        metavar="DIR",
        help="also save each notebook as the grader executed it (capped outputs)",
    )
    out.add_argument(
        "--all-cells",
        action="store_true",
        help="also run the notebook's own unchanged cells after the last check (they decide "
        "no grade and are skipped by default; --executed runs them too)",
    )
    out.add_argument("-q", "--quiet", action="store_true", help="no progress bar or summary")
    out.add_argument(
        "--similarity",
        action="store_true",
        help="compare each exercise's code with the course's own source and solutions and "
        "across the batch (copydetect); adds columns to --csv/--json and a section to "
        "--report",
    )


def _gradebook_arguments(book) -> None:
    """The instructor's inputs to the gradebook: roster, manual adjustments, late policy."""
    book.add_argument(
        "--bom",
        action="store_true",
        help="start every CSV with a UTF-8 byte-order mark (Excel then reads it as UTF-8)",
    )
    book.add_argument(
        "--roster",
        metavar="F",
        help="CSV: student,name,email,canvas_id,sis_user_id,sis_login_id,section,sid,"
        "username,id_number,submitted_at (any subset after student); identities for the LMS "
        "exports, submission times for --deadline",
    )
    book.add_argument(
        "--adjust",
        metavar="F",
        help="CSV: student,item,points,reason; manual regrades applied on every run "
        "(points 1.5 sets, +1 / -0.5 changes; kept within 0..max)",
    )
    book.add_argument(
        "--deadline", metavar="WHEN", help="ISO 8601 deadline (times from --roster submitted_at)"
    )
    book.add_argument(
        "--late-penalty",
        type=float,
        default=0.0,
        metavar="P",
        help="percent of the total lost per started --late-unit after --deadline",
    )
    book.add_argument(
        "--late-unit", choices=("day", "hour"), default="day", help="unit of --late-penalty"
    )
    book.add_argument(
        "--late-max", type=float, default=100.0, metavar="P", help="largest late penalty (percent)"
    )


def _reference_arguments(what) -> None:
    """The references and checks a submission is graded against."""
    what.add_argument(
        "--reference-dir",
        metavar="DIR",
        help="folder of reference notebooks (default: ./solutions, ./notebooks, "
        "then the course checkout's); only check cells and positions are read",
    )
    what.add_argument(
        "--assignment",
        metavar="NAME",
        help="grade every submission as this assignment (e.g. 00_start_here); "
        "default: by file name, else by the exercise ids inside",
    )
    what.add_argument(
        "--checks",
        metavar="MODULE",
        action="append",
        default=[],
        help="extra exercise module (importable name or path to a .py file) "
        "exposing EXERCISES; repeatable",
    )
    what.add_argument(
        "--keys",
        metavar="CHECKOUT",
        help="grade the questions with the keys of this course checkout (the instructor's): "
        "needed when the installed package's questions are sealed (course release --seal)",
    )
    what.add_argument(
        "--student",
        metavar="ID",
        help="the student's identity, for questions whose numbers are personal (one "
        "submission); in a batch each submission's folder name is its student's identity. "
        '"(default)" is the default seed\'s, the one the solution notebooks answer for',
    )


def _limit_arguments(lim) -> None:
    """Parallelism, time, memory and output limits."""
    lim.add_argument(
        "-j",
        "--jobs",
        type=int,
        default=None,
        metavar="N",
        help="grade N submissions in parallel (processes; default: one per CPU core, at most "
        "as many as the machine's RAM holds at --memory-mb each)",
    )
    lim.add_argument(
        "--threads",
        type=int,
        default=0,
        metavar="N",
        help="CPUs (and torch threads) of one submission (default: cores / -j, at most 4); "
        "give it on every shard of a class, whose machines may differ",
    )
    lim.add_argument(
        "--cell-timeout",
        type=float,
        default=120.0,
        metavar="S",
        help="seconds per cell and per check (default 120)",
    )
    lim.add_argument(
        "--timeout",
        type=float,
        default=900.0,
        metavar="S",
        help="seconds per submission, all cells together (default 900)",
    )
    lim.add_argument(
        "--memory-mb",
        type=int,
        default=6144,
        metavar="M",
        help="memory of one submission in MiB, all its processes together (a cgroup, else "
        "a watchdog), and the address-space limit of each process (default 6144; 0 = none). "
        "Virtual memory: torch alone maps about 1 GB",
    )
    lim.add_argument(
        "--max-output-kb",
        type=int,
        default=1024,
        metavar="K",
        help="output kept per submission in KiB; the rest is counted and dropped (default 1024)",
    )
    lim.add_argument(
        "--gpu",
        action="store_true",
        help="leave CUDA devices visible to the kernel (lifts the memory limit: "
        "CUDA maps far more virtual memory than any sane limit)",
    )


def _sandbox_arguments(box) -> None:
    """How each submission is isolated, and its other limits."""
    box.add_argument(
        "--sandbox",
        choices=("auto", "bwrap", "docker", "podman", "none"),
        default="auto",
        help="how each submission is isolated (default auto: bubblewrap when installed, "
        "else none, which every report then says)",
    )
    box.add_argument(
        "--max-procs",
        type=int,
        default=256,
        metavar="N",
        help="processes and threads of one submission together (default 256)",
    )
    box.add_argument(
        "--disk-mb",
        type=int,
        default=1024,
        metavar="M",
        help="MiB one submission may write, all files together (default 1024)",
    )
    box.add_argument(
        "--cpu-seconds",
        type=float,
        default=0.0,
        metavar="S",
        help="CPU seconds of one submission, all processes together (default: none; "
        "the wall-time limits always apply)",
    )
    box.add_argument(
        "--image",
        default=None,
        metavar="IMAGE",
        help="container image for --sandbox docker/podman (default course-grade:latest, "
        "built from .github/classroom/Dockerfile)",
    )


def _policy_arguments(pol) -> None:
    """Pass marks, seeds and what flagged answers earn."""
    pol.add_argument(
        "--fail-under",
        type=float,
        metavar="P",
        help="exit 1 when a submission scores below P percent",
    )
    pol.add_argument(
        "--seed",
        type=int,
        metavar="N",
        help="seed of the check inputs (default: drawn at random at grade time)",
    )
    pol.add_argument(
        "--zero-flagged",
        action="store_true",
        help="give 0 points to answers flagged as re-exporting the course's own "
        "implementation (default: keep the points, flag for review)",
    )


def _resolve_checks(specs: list[str]) -> tuple[str, ...]:
    """Module names for ``--checks``; a path to a .py file puts its folder on the path of
    this process and of the kernels (PYTHONPATH)."""
    names = []
    for spec in specs:
        if spec.endswith(".py") or os.sep in spec:
            p = Path(spec).resolve()
            if not p.is_file():
                raise FileNotFoundError(f"--checks {spec}: no such file")
            folder = str(p.parent)
            if folder not in sys.path:
                sys.path.insert(0, folder)
            parts = [folder] + [x for x in os.environ.get("PYTHONPATH", "").split(os.pathsep) if x]
            os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
            names.append(p.stem)
        else:
            names.append(spec)
    return tuple(names)


def _grade_one(path: str, options) -> dict[str, Any]:
    """Grade one submission; a crash of the grader itself becomes a report, never an exception."""
    from course_utils.grading.grader import grade_submission

    try:
        return grade_submission(path, options)
    except Exception as exc:  # pragma: no cover - a bug in the grader; keep the batch going
        from course_utils.grading.grader import lost_report

        detail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-4))
        report = lost_report(path, options, f"internal error {type(exc).__name__}: {exc}")
        report["notes"].append(detail[-2000:])
        return report


def grade_all(
    paths: list[str], options, jobs: int = 1, progress: bool = True
) -> list[dict[str, Any]]:
    """Grade ``paths``, ``jobs`` at a time, and return the reports in the given order.

    One submission is graded in this process. Several are graded each in its own fresh
    process (at most ``jobs`` at once), so that a submission that kills its grading process
    costs its own report only, never the others'.
    """
    from tqdm import tqdm

    bar = tqdm(
        total=len(paths),
        desc="grading",
        unit="nb",
        file=sys.stderr,
        disable=not progress or len(paths) < 2,
        dynamic_ncols=True,
    )
    try:
        if len(paths) < 2:
            reports = [_grade_one(p, options) for p in paths]
            bar.update(len(paths))
            return reports
        return _grade_isolated(paths, options, max(1, jobs), bar)
    finally:
        bar.close()


MAX_REPORT_BYTES = 32 << 20


def _worker(path: str, options, conn) -> None:
    """Entry point of a grading process: grade one submission, send its report back over a
    pipe only this process and the parent hold (no file a kernel could reach)."""
    import json

    report = _grade_one(path, options)
    conn.send_bytes(json.dumps(report).encode("utf-8"))
    conn.close()


def _grade_isolated(paths: list[str], options, jobs: int, bar) -> list[dict[str, Any]]:
    import dataclasses
    import json
    import multiprocessing as mp
    import tempfile
    import time
    from multiprocessing.connection import wait

    from course_utils.grading.confine import (
        BATCH_PREFIX,
        hold_lock,
        is_mount,
        remove_tree,
        unmount,
    )
    from course_utils.grading.grader import lost_report

    # Never fork a process that may hold torch threads: workers come from a fresh fork
    # server that imports the grader (and torch) once, or are spawned.
    if "forkserver" in mp.get_all_start_methods():
        ctx = mp.get_context("forkserver")
        # and whatever a worker imports after it (preload: 1.7 s of CPU per submission saved)
        ctx.set_forkserver_preload(["course_utils.grading.grader", "course_utils.grading.preload"])
    else:
        ctx = mp.get_context("spawn")
    results: dict[int, dict[str, Any]] = {}
    todo = list(enumerate(paths))
    running: dict[int, tuple[Any, Any]] = {}
    started: dict[int, float] = {}
    # a grading process past every limit it enforces itself is killed: the batch finishes
    overdue = options.timeout + 2 * options.startup_timeout + 300
    # the workers' sandboxes live here: removed by this process even if a worker is killed
    tmpdir = tempfile.mkdtemp(prefix=BATCH_PREFIX)
    lock = hold_lock(tmpdir)  # a running batch: no other grader's start-up removes it
    options = dataclasses.replace(options, box_parent=tmpdir)
    try:
        while todo or running:
            while todo and len(running) < jobs:
                i, path = todo.pop(0)
                reader, writer = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_worker, args=(path, options, writer), name=f"grade-{i}")
                proc.start()
                writer.close()
                running[i] = (proc, reader)
                started[i] = time.monotonic()
            waitables = [r for _, r in running.values()] + [p.sentinel for p, _ in running.values()]
            wait(waitables, timeout=1.0)
            for i, (proc, reader) in list(running.items()):
                report = None
                try:
                    if reader.poll():
                        report = json.loads(reader.recv_bytes(MAX_REPORT_BYTES))
                except (EOFError, OSError, ValueError):
                    report = None
                if report is None and proc.is_alive():
                    if time.monotonic() - started[i] < overdue:
                        continue
                    proc.kill()
                proc.join(timeout=30)
                if proc.is_alive():
                    proc.kill()
                    proc.join()
                reader.close()
                if not isinstance(report, dict):
                    report = lost_report(paths[i], options, f"exit code {proc.exitcode}")
                results[i] = report
                del running[i]
                bar.update(1)
    finally:
        try:
            for proc, _ in running.values():  # interrupted (Ctrl-C): leave nothing behind
                proc.kill()
            for box in Path(tmpdir).glob("cg-*"):  # a killed worker's box may be mounted
                if is_mount(box):
                    unmount(box)
            os.close(lock)
            remove_tree(tmpdir)  # iterative, through handles, never raises
        except BaseException:  # noqa: BLE001 - clean-up never costs the batch its reports
            pass
    return [results[i] for i in range(len(paths))]


def exit_code(reports: list[dict[str, Any]], fail_under: float | None) -> int:
    """The documented exit code for a set of reports (see the module docstring)."""
    code = EXIT_OK
    for rep in reports:
        kind = rep.get("error_kind")
        if kind in ("grader", "busy"):
            code = max(code, EXIT_GRADER)
        elif kind in ("bad_input", "usage"):
            code = max(code, EXIT_BAD_INPUT)
        if fail_under is not None and float(rep.get("percent", 0.0)) < fail_under:
            code = max(code, EXIT_BELOW)
    return code


def _indent(text: str, prefix: str) -> str:
    return "\n".join(prefix + line for line in str(text).splitlines())


def display_name(rep: dict[str, Any]) -> str:
    """The submission as the terminal names it, on one line: its file name, prefixed by the
    student (the folder) when the student is not the file's stem."""
    from course_utils.grading.grader import terminal_name

    name = terminal_name(Path(rep["notebook"]).name)
    student = terminal_name(rep.get("student") or "")
    if student and student != terminal_name(Path(rep["notebook"]).stem):
        return f"{student}/{name}"
    return name


def student_names(notebooks: list[str]) -> list[str]:
    """Each submission's student: the notebook's stem, or, when stems repeat (one folder
    per student, every notebook named alike), the folder; ``folder/stem`` if those repeat too.
    Names are one line (control characters shown as ``?``). They depend on the whole list, so
    a shard computes them over the whole class (:mod:`course_utils.grading.shard`)."""
    from collections import Counter

    from course_utils.grading.grader import terminal_name

    paths = [Path(os.path.abspath(nb)) for nb in notebooks]
    stems = Counter(p.stem for p in paths)
    folders = Counter(p.parent.name for p in paths)
    names = []
    for p in paths:
        if stems[p.stem] == 1:
            name = p.stem
        elif folders[p.parent.name] == 1:
            name = p.parent.name
        else:
            name = f"{p.parent.name}/{p.stem}"
        names.append(terminal_name(name))
    return names


def name_students(reports: list[dict[str, Any]]) -> None:
    """Name each report's student (:func:`student_names` over the reports' notebooks)."""
    for rep, name in zip(reports, student_names([r["notebook"] for r in reports]), strict=True):
        rep["student"] = name


def _summary(rep: dict[str, Any], detailed: bool) -> str:
    """What the terminal shows for one report; hints and notes in full when ``detailed``."""
    from course_utils.grading.reports import STATUS_LABEL, terminal_safe

    name = display_name(rep)
    if rep.get("missing"):
        return f"{name}: no such file (nothing graded)"
    head = f"{name}: {rep['total']:g}/{rep['max']:g} points"
    if rep.get("assignment"):
        head += f" ({rep['assignment']})"
    lines = [head]
    if rep.get("error"):
        lines.append(_indent(terminal_safe(rep["error"]), "  ! "))
    for ex in rep["exercises"]:
        status = STATUS_LABEL.get(ex["status"], ex["status"])
        line = f"  [{ex['id']}] {ex['title']}: {status} ({ex['points']:g}/{ex['max_points']:g})"
        lines.append(line)
        if detailed and ex["status"] != "passed" and ex["message"]:
            lines.append(_indent(terminal_safe(ex["message"]), "      "))
        if ex.get("flags"):
            lines.append(f"      flagged: {terminal_safe('; '.join(ex['flags']))}")
    errors = (rep.get("cells") or {}).get("errors") or []
    if errors:  # a cell that raised explains many a lost point: say which, even in a batch
        where = ", ".join(f"{e['cell'] + 1} ({e['ename']})" for e in errors[:5])
        more = f" and {len(errors) - 5} more" if len(errors) > 5 else ""
        lines.append(f"  cells that raised: {terminal_safe(where)}{more}")
        if detailed:
            lines.extend(
                _indent(terminal_safe(f"cell {e['cell'] + 1}: {e['ename']}: {e['evalue']}"), "    ")
                for e in errors[:5]
            )
    if detailed:
        lines.extend(_indent(terminal_safe(n), "  note: ") for n in rep.get("notes", []))
    return "\n".join(lines)


def _usage_problem(args: argparse.Namespace) -> str:
    """What is wrong with the numbers and folders given on the command line ("" if nothing)."""
    for name in ("cell_timeout", "timeout"):
        if getattr(args, name) <= 0:
            return f"--{name.replace('_', '-')} must be positive"
    if min(args.max_procs, args.disk_mb, args.cpu_seconds) < 0:
        return "--max-procs, --disk-mb and --cpu-seconds must be >= 0"
    if args.jobs < 1 or args.memory_mb < 0 or args.max_output_kb < 0:
        return "-j must be >= 1, --memory-mb and --max-output-kb >= 0"
    if getattr(args, "threads", 0) < 0:
        return "--threads must be >= 1 (0: cores / -j)"
    if args.reference_dir and not Path(args.reference_dir).is_dir():
        return f"--reference-dir {args.reference_dir}: no such folder"
    if getattr(args, "student", None) and len(args.submissions) > 1:
        return "--student names one submission's student (in a batch: each folder's name)"
    return _shard_problem(args)


def _shard_problem(args: argparse.Namespace) -> str:
    """What is wrong with ``--shard``/``--shard-dir`` ("" if nothing)."""
    from course_utils.grading.shard import ShardError, parse_shard

    shard = getattr(args, "shard", None)
    if not shard:
        return "--shard-dir needs --shard K/N" if getattr(args, "shard_dir", None) else ""
    try:
        parse_shard(shard)
    except ShardError as exc:
        return str(exc)
    if not args.shard_dir:
        return "--shard needs --shard-dir DIR (where course grade-merge finds the shard)"
    if args.seed is None:
        return (
            "--shard needs --seed N, the same in every shard (each shard would otherwise draw "
            "its own check inputs): e.g. the job array's id"
        )
    return ""


def _shard_indices(args: argparse.Namespace, names: list[str]) -> list[int]:
    """The submissions this run grades: all of them, or those of ``--shard K/N``."""
    if not getattr(args, "shard", None):
        return list(range(len(names)))
    from course_utils.grading.shard import parse_shard, select

    return select(names, *parse_shard(args.shard))


def _dry_run(
    args: argparse.Namespace, paths: list[str], names: list[str], chosen: list[int], missing
) -> int:
    """``--dry-run``: what would be graded, one line each; exit 2 when a file is missing."""
    where = f"shard {args.shard}" if getattr(args, "shard", None) else "this run"
    print(f"{where}: {len(chosen)} of {len(paths)} submissions")
    for i in chosen:
        print(f"  {names[i]}: {terminal_safe_path(paths[i])}")
    return EXIT_BAD_INPUT if any(paths[i] in missing for i in chosen) else EXIT_OK


def terminal_safe_path(path: str) -> str:
    from course_utils.grading.reports import terminal_safe

    return terminal_safe(path)


def strip_measurements(rep: dict[str, Any]) -> dict[str, Any]:
    """``rep`` without what is measured rather than decided (``--reproducible``): wall
    times become 0, the sandbox's peaks, CPU seconds and uid and the grader's own memory are
    left out. What remains depends only on the notebook, the options and the seed."""
    rep = dict(rep)
    rep["runtime_s"] = 0.0
    rep["exercises"] = [
        {**e, "runtime_s": 0.0} if "runtime_s" in e else e for e in rep.get("exercises") or []
    ]
    rep.pop("grader_peak_rss_mb", None)
    if isinstance(rep.get("sandbox"), dict):
        box = rep["sandbox"]
        rep["sandbox"] = {k: v for k, v in box.items() if k not in MEASURED_SANDBOX_KEYS}
    return rep


#: the sandbox's measurements (``--reproducible`` leaves them out)
MEASURED_SANDBOX_KEYS = ("uid", "peak_memory_mb", "peak_procs", "peak_disk_mb", "cpu_s")


def default_jobs(memory_mb: int, max_procs: int = 256) -> int:
    """``-j`` when not given: one grading process per CPU core this process may use, fewer
    when :func:`host_problem` would refuse that many (RAM at ``memory_mb`` each, the host's
    file table at ``max_procs`` processes each), and at least 1."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    for jobs in range(max(1, cores), 1, -1):
        if not host_problem(jobs, memory_mb, max_procs, sandboxed=True):
            return jobs
    return 1


def host_problem(jobs: int, memory_mb: int, max_procs: int, sandboxed: bool) -> str:
    """What makes a batch unsafe for the host it runs on ("" if nothing): ``-j`` memory
    limits adding up to more than the machine's RAM, or ``-j x --max-procs`` processes with
    ``MAX_OPEN_FILES`` descriptors each able to take a quarter of the host's file table
    (ENFILE; ``--max-procs 0`` counts as the host's thread limit)."""
    from course_utils.grading.kernel import MAX_OPEN_FILES

    try:
        ram_mb = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") >> 20
    except (ValueError, OSError, AttributeError):
        ram_mb = 0
    if ram_mb and memory_mb and jobs * memory_mb > ram_mb:
        return (
            f"-j {jobs} x --memory-mb {memory_mb} = {jobs * memory_mb} MiB is more than this "
            f"machine's {ram_mb} MiB of RAM; lower -j or --memory-mb"
        )
    if not sandboxed:
        return ""
    try:
        file_max = int(Path("/proc/sys/fs/file-max").read_text().split()[0])
        threads_max = int(Path("/proc/sys/kernel/threads-max").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return ""  # not Linux: no such table to protect
    files = jobs * (max_procs or threads_max) * MAX_OPEN_FILES
    if files > file_max // 4:
        return (
            f"-j {jobs} x --max-procs {max_procs or threads_max} x {MAX_OPEN_FILES} open files "
            f"= {files} could fill a quarter of the host's file table (fs.file-max "
            f"{file_max}); lower -j or --max-procs"
        )
    return ""


def _write_reports(args: argparse.Namespace, reports: list[dict], context=None) -> bool:
    """Write every report the command line asks for, through the writer registry (each
    independently: one that fails stops no other); False when any could not be written."""
    from course_utils.grading.writers import WriteContext, write_requested

    context = context or WriteContext(bom=getattr(args, "bom", False))
    return write_requested(args, reports, context)


def _apply_gradebook(args: argparse.Namespace, reports: list[dict]):
    """Roster, ``--adjust`` and the late policy applied to the reports in place; returns the
    writers' context, or a one-line problem (str)."""
    from course_utils.grading import roster as rs
    from course_utils.grading.writers import WriteContext

    context = WriteContext(bom=getattr(args, "bom", False))
    try:
        if getattr(args, "roster", None):
            context.roster = rs.Roster.read(args.roster)
        if getattr(args, "adjust", None):
            context.warnings += rs.apply_adjustments(reports, rs.read_adjustments(args.adjust))
        if getattr(args, "deadline", None):
            policy = rs.LatePolicy(
                rs.parse_time(args.deadline, "--deadline"),
                args.late_penalty,
                24.0 if args.late_unit == "day" else 1.0,
                args.late_max,
            )
            context.warnings += rs.apply_late_policy(reports, policy, context.roster)
    except rs.InputError as exc:
        return str(exc)
    return context


def _load_checks(args: argparse.Namespace) -> tuple[list, str]:
    """The ``--checks`` modules, and what is wrong with them or with ``--assignment`` ("")."""
    from course_utils.grading.plan import exercise_table, known_assignments, reference_dirs

    try:
        modules = _resolve_checks(args.checks)
        table = exercise_table(modules)  # fail early and clearly on a broken --checks module
    except Exception as exc:
        return [], f"cannot load --checks: {type(exc).__name__}: {exc}"
    if args.assignment:
        known = known_assignments(reference_dirs(args.reference_dir), table)
        if Path(args.assignment).stem not in known:
            return modules, (
                f"--assignment {args.assignment}: unknown; known: "
                f"{', '.join(sorted(known)) or 'none'}"
            )
    return modules, ""


def no_workflow_commands(text: str) -> str:
    """``text`` with no line a CI runner would execute: GitHub Actions reads a stdout line
    that starts, after blanks, with ``::`` as a workflow command (``::add-mask::``,
    ``::error``, ``::stop-commands::``), so such a line gets a visible ``|`` first (GH-CMDS)."""
    import re

    parts = re.split(r"(\r\n|\r|\n)", text)  # a runner reads lines as .NET does: \r ends one too
    for k in range(0, len(parts), 2):
        stripped = parts[k].lstrip()
        if stripped.startswith("::"):
            parts[k] = parts[k][: len(parts[k]) - len(stripped)] + "| " + stripped
    return "".join(parts)


def _print_summaries(reports: list[dict]) -> None:
    """The terminal summary: every report (a lone missing file has had its one line)."""
    detailed = len(reports) == 1
    for rep in reports:
        if rep.get("missing") and len(reports) == 1:
            continue  # the one error line above says it all
        print(no_workflow_commands(_summary(rep, detailed)))
    if len(reports) > 1:
        graded = [r for r in reports if not r.get("error")]
        print(f"{len(reports)} submissions, {len(graded)} graded without problems")


def _reports_out(args: argparse.Namespace, reports: list[dict], options) -> int:
    """Similarity, the gradebook inputs and every requested report; an exit code when one of
    them failed (0 when all went well)."""
    if args.similarity:
        from course_utils.grading.similarity import add_similarity

        try:
            add_similarity(reports, options)
        except ImportError as exc:
            print(f"course grade: --similarity needs copydetect ({exc})", file=sys.stderr)
            return EXIT_BAD_INPUT
    from course_utils.grading.grader import clean_text

    reports[:] = [clean_text(rep) for rep in reports]  # SURROGATE: writers get clean str only
    if getattr(args, "reproducible", False):
        reports[:] = [strip_measurements(rep) for rep in reports]
    context = _apply_gradebook(args, reports)
    if isinstance(context, str):
        print(f"course grade: {context}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if not _write_reports(args, reports, context):
        return EXIT_BAD_INPUT
    return 0


def _question_options(args: argparse.Namespace, options, paths: list[str]) -> None:
    """``--keys`` and the student's identity (``--student``, or in a batch each submission's
    folder name) into ``options`` (``_usage_problem`` refused ``--student`` with a batch)."""
    options.keys = getattr(args, "keys", None)
    options.student = getattr(args, "student", None)
    folders = {Path(p).resolve().parent for p in paths}
    # one folder per student: only then does a folder's name say whose submission it is
    options.student_by_folder = options.student is None and len(folders) == len(paths) > 1
    if options.student is None and len(paths) > 1 and not options.student_by_folder:
        print(
            "course grade: the submissions do not sit in one folder each, so personal "
            "questions are graded for the default seed (put each in a folder named after "
            "its student)",
            file=sys.stderr,
        )


def _choose_sandbox(args: argparse.Namespace, options) -> int | None:
    """Set ``options.sandbox``; the exit code when the sandbox or the host refuses the batch."""
    from course_utils.grading.grader import make_sandbox_check

    problem, options.sandbox = make_sandbox_check(args.sandbox)
    if problem:
        print(f"course grade: --sandbox {args.sandbox}: {problem}", file=sys.stderr)
        return EXIT_GRADER
    problem = host_problem(args.jobs, args.memory_mb, args.max_procs, options.sandbox != "none")
    if problem:
        print(f"course grade: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return None


def _grade_class(
    args: argparse.Namespace, options, paths: list[str], missing: list[str]
) -> list[dict[str, Any]] | int:
    """Grade the class (or its ``--shard``) and name each student over the whole class;
    the shard's record written. ``--dry-run``: its exit code, nothing graded."""
    names = student_names(paths)  # over the whole class, shard or not
    chosen = _shard_indices(args, names)
    if args.dry_run:
        return _dry_run(args, paths, names, chosen, missing)
    mine = [paths[i] for i in chosen]
    present = [p for p in mine if p not in missing]
    graded = iter(grade_all(present, options, jobs=args.jobs, progress=not args.quiet))
    reports = [_grade_one(p, options) if p in missing else next(graded) for p in mine]
    for rep, i in zip(reports, chosen, strict=True):
        if rep["notebook"] in missing:
            rep["missing"] = True  # graded without a kernel: zero, one line in the summary
        rep["student"] = names[i]
    if args.shard:
        from course_utils.grading import shard as sh

        k, n = sh.parse_shard(args.shard)
        fingerprint = sh.options_fingerprint(args, options)
        sh.write_record(args.shard_dir, k, n, paths, chosen, reports, fingerprint, args)
    return reports


def main(args: argparse.Namespace) -> int:
    """Run ``course grade``; returns the exit code documented above."""
    from course_utils.grading.grader import GradeOptions

    if args.jobs is None:
        args.jobs = default_jobs(args.memory_mb, args.max_procs)
    problem = _usage_problem(args)
    if problem:
        print(f"course grade: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    modules, problem = _load_checks(args)
    if problem:
        print(f"course grade: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    cpus = os.cpu_count() or 1
    options = GradeOptions(
        reference_dir=args.reference_dir,
        assignment=args.assignment,
        checks_modules=modules,
        cell_timeout=args.cell_timeout,
        timeout=args.timeout,
        memory_mb=args.memory_mb,
        max_output_kb=args.max_output_kb,
        seed=args.seed,
        threads=args.threads or max(1, min(4, cpus // args.jobs)),
        gpu=args.gpu,
        zero_flagged=args.zero_flagged,
        executed_dir=args.executed,
        all_cells=args.all_cells,
        max_procs=args.max_procs,
        disk_mb=args.disk_mb,
        cpu_s=args.cpu_seconds,
    )
    if args.image:
        options.image = args.image
    code = _choose_sandbox(args, options)
    if code is not None:
        return code
    if options.sandbox == "none" and not args.quiet:
        print(
            "course grade: not sandboxed (--sandbox none"
            + (", bubblewrap not available" if args.sandbox == "auto" else "")
            + "): fine for checking your own work, not for grading others'",
            file=sys.stderr,
        )
    if options.sandbox != "none":
        from course_utils.grading.confine import remove_stale

        remove_stale()  # boxes and cgroups of graders killed from outside (own prefixes only)
    paths = [str(p) for p in args.submissions]
    _question_options(args, options, paths)
    missing = [p for p in paths if not os.path.lexists(p)]
    for p in missing:
        print(f"course grade: {p}: no such file", file=sys.stderr)
    if missing and len(missing) == len(paths):
        return EXIT_BAD_INPUT
    reports = _grade_class(args, options, paths, missing)
    if isinstance(reports, int):
        return reports  # --dry-run
    problem = _reports_out(args, reports, options)
    if problem:
        return problem
    if not args.quiet:
        _print_summaries(reports)
    return exit_code(reports, args.fail_under)
