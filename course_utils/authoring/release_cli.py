"""``course release``'s command line: write ``notebooks/``, ``--check`` it, ``--execute``
solutions first, or write a Classroom template (``--template``), the public copy (``--public``)
or the sealed package (``--seal``) instead.

Exit codes: 0 ok, 1 drift (``--check``) or notebooks kept because they hold a student's work,
2 invalid solutions or usage error.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from course_utils.authoring import release
from course_utils.authoring.execute import execute_solution
from course_utils.authoring.validate import ReleaseError

EXIT_OK, EXIT_DRIFT, EXIT_INVALID = 0, 1, 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``course release``."""
    parser.add_argument(
        "--solutions",
        default="solutions",
        metavar="DIR",
        help="folder of the solution notebooks NN_*.ipynb (default: solutions)",
    )
    parser.add_argument(
        "--notebooks",
        default="notebooks",
        metavar="DIR",
        help="folder the student notebooks are written to (default: notebooks)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 naming every student notebook that is out of date, "
        "missing or extra, and every solution line found in a student notebook",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="overwrite student notebooks even where exercise cells hold answers or cells "
        "were added (they are lost), and remove NN_*.ipynb notebooks without a solution",
    )
    parser.add_argument(
        "--execute",
        nargs="+",
        default=[],
        metavar="NOTEBOOK",
        help="first run these solution notebooks in place (fresh kernel, outputs "
        "stored, no timings), then release",
    )
    parser.add_argument(
        "--template",
        default=None,
        metavar="DIR",
        help="instead, write the GitHub Classroom template repository of one assignment "
        "(--notebook) into DIR: its student notebook, a student README.md and the workflow "
        "(.github/workflows/classroom.yml) filled from [tool.course]; no solutions/",
    )
    parser.add_argument(
        "--notebook",
        default=None,
        metavar="NN",
        help="the assignment of --template (e.g. 03 or 03_scaled_dot_product)",
    )
    parser.add_argument(
        "--public",
        default=None,
        metavar="DIR",
        help="instead, write the public student copy of the course into DIR (every file git "
        "tracks except solutions/): what the workflow's COURSE_REPO should point at",
    )
    _seal_arguments(parser)
    parser.add_argument(
        "--profile",
        choices=("ci", "cpu", "gpu"),
        default=None,
        help="COURSE_PROFILE for --execute (default: the environment's)",
    )
    parser.epilog = (
        "A notebook holding a student's answers is never overwritten without --force. "
        "Exit codes: 0 ok; 1 notebooks/ out of date (--check) or notebooks kept because they "
        "hold a student's work; 2 invalid solution notebooks or usage error."
    )


# -- sealing (issue 32; separate from --template) ----------------------------------------------
def _seal_arguments(parser: argparse.ArgumentParser) -> None:
    """``--seal DIR``: the student package of a graded class (:mod:`course_utils.authoring.seal`)."""
    parser.add_argument(
        "--seal",
        default=None,
        metavar="DIR",
        help="instead, write DIR/course_utils: the package for a graded class, its questions "
        "sealed (prompts and choices, no keys, no feedback); grade it with "
        "`course grade --keys <this checkout>`",
    )


def _seal(args: argparse.Namespace) -> int:
    """``course release --seal DIR``: write the sealed package, list what was sealed."""
    from course_utils.authoring.seal import seal_package

    for path in seal_package(args.seal):
        print(f"sealed    {path}")
    print(f"wrote     {Path(args.seal) / 'course_utils'} (graded questions sealed)")
    return EXIT_OK


def _check(args: argparse.Namespace) -> int:
    """``course release --check``: run every rule of :data:`CHECKS`, write nothing."""
    solutions, notebooks = Path(args.solutions), Path(args.notebooks)
    expected = release.plan(solutions)
    messages = [m for rule in release.CHECKS for m in rule(expected, solutions, notebooks)]
    if messages:
        print(
            f"{len(messages)} problem(s) with {notebooks}/ and {solutions}/ (instructors: run "
            "`course release`, then commit; reword an exercise whose prose gives a line away):",
            file=sys.stderr,
        )
        for m in messages:
            print(f"  {m}", file=sys.stderr)
        return EXIT_DRIFT
    print(f"{notebooks}/ is up to date with {solutions}/")
    return EXIT_OK


def _classroom(args: argparse.Namespace) -> int:
    """``--template DIR --notebook NN`` or ``--public DIR``."""
    from course_utils.authoring import template as tpl

    try:
        if args.public:
            root = Path(args.solutions).resolve().parent
            written = tpl.write_public_copy(root, args.public, force=args.force)
            print(f"wrote     {len(written)} files into {args.public} (no solutions/)")
            return EXIT_OK
        for path in release.write_template(
            args.solutions, args.template, args.notebook, force=args.force
        ):
            print(f"wrote     {path}")
    except tpl.TemplateError as exc:
        print(f"course release: {exc}", file=sys.stderr)
        return EXIT_INVALID
    return EXIT_OK


def main(args: argparse.Namespace) -> int:
    """Run ``course release``; returns the exit code."""
    try:
        if args.execute and args.check:
            print("course release: --execute and --check cannot be combined", file=sys.stderr)
            return EXIT_INVALID
        for nb_path in args.execute:
            print(f"executing {nb_path} ...", flush=True)
            try:
                execute_solution(nb_path, profile=args.profile)
            except Exception as exc:  # CellExecutionError, a dead kernel, a missing file
                print(f"course release: {nb_path} failed to run: {exc}", file=sys.stderr)
                return EXIT_INVALID
        if getattr(args, "seal", None):
            return _seal(args)
        if getattr(args, "template", None) or getattr(args, "public", None):
            return _classroom(args)
        if args.check:
            if args.force:
                print("course release: --force and --check cannot be combined", file=sys.stderr)
                return EXIT_INVALID
            return _check(args)
        result = release.write(args.solutions, args.notebooks, force=args.force)
        for line in result.log:
            print(line)
        if result.kept:
            print(
                f"\n{len(result.kept)} notebook(s) kept: replacing them would lose your work.",
                file=sys.stderr,
            )
            for name, cells in result.kept.items():
                print(f"  {Path(args.notebooks) / name}:", file=sys.stderr)
                for c in cells:
                    print(f"    {c}", file=sys.stderr)
            print(
                "To replace them anyway, copy them somewhere safe, then run "
                "`course release --force`.",
                file=sys.stderr,
            )
            return EXIT_DRIFT
        return EXIT_OK
    except ReleaseError as exc:
        print(
            f"course release: {len(exc.problems)} problem(s) in the solution notebooks:",
            file=sys.stderr,
        )
        for p in exc.problems:
            print(f"  {p}", file=sys.stderr)
        return EXIT_INVALID
