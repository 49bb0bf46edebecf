"""The ``course`` command: ``doctor``, ``release``, ``grade``, ``bench``, ``claims``, ``site``.

Each subcommand lives in its own module and exposes ``add_arguments(parser)`` and
``main(args) -> int``; this file only wires them together, importing lazily so that
``course doctor`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from course_utils.fast_nbformat import skip_iri_parser

# subcommand -> (module, one-line help)
SUBCOMMANDS = {
    "doctor": ("course_utils.doctor", "print versions, device, profile and optional data"),
    "release": (
        "course_utils.authoring.release",
        "write notebooks/ (student versions) from solutions/",
    ),
    "grade": ("course_utils.grading.cli", "grade submitted notebooks (the official grader)"),
    "bench": ("course_utils.bench", "run the benchmarks and print ratios against references"),
    "claims": (
        "course_utils.authoring.claims",
        "run solution notebooks and check every claim of the prose",
    ),
    "site": ("course_utils.authoring.site", "build the course website (static HTML, offline)"),
}


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with one subparser per subcommand."""
    parser = argparse.ArgumentParser(
        prog="course", description="Attention & Transformers, hands-on: course tools."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, (module, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module)
        importlib.import_module(module).add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``course`` console script; returns the process exit code."""
    skip_iri_parser()  # every subcommand that reads a notebook starts seconds faster
    argv = list(sys.argv[1:] if argv is None else argv)
    # Build only the subparser that is asked for, so one broken subcommand never hides the others.
    parser = argparse.ArgumentParser(prog="course")
    parser.add_argument(
        "command", choices=list(SUBCOMMANDS), help="one of: " + ", ".join(SUBCOMMANDS)
    )
    if not argv or argv[0] in ("-h", "--help"):
        build_parser().print_help()
        return 0 if argv else 2
    if argv[0] not in SUBCOMMANDS:
        parser.parse_args(argv[:1])  # prints the usage error and exits 2
    module_name, help_text = SUBCOMMANDS[argv[0]]
    module = importlib.import_module(module_name)
    sub = argparse.ArgumentParser(prog=f"course {argv[0]}", description=help_text)
    module.add_arguments(sub)
    args = sub.parse_args(argv[1:])
    return int(module.main(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
