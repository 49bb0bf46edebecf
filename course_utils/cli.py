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
        "course_utils.authoring.release_cli",
        "write notebooks/ (student versions) from solutions/",
    ),
    "grade": ("course_utils.grading.cli", "grade submitted notebooks (the official grader)"),
    "grade-merge": (
        "course_utils.grading.merge",
        "join the shards of course grade --shard K/N into one gradebook",
    ),
    "bench": ("course_utils.bench", "run the benchmarks and print ratios against references"),
    "claims": (
        "course_utils.authoring.claims",
        "run solution notebooks and check every claim of the prose",
    ),
    "site": ("course_utils.authoring.site", "build the course website (static HTML, offline)"),
}


# the commands that run notebooks: COURSE_PROFILE=gpu without CUDA refuses to start them
RUNS_NOTEBOOKS = ("grade", "claims", "bench")
EXIT_USAGE = 2
GLOBAL_HELP = """\
options before COMMAND:
  --version      print the course's version and exit
  --allow-slow   run COURSE_PROFILE=gpu on a machine without CUDA anyway (COURSE_ALLOW_SLOW=1)
"""


def version() -> str:
    """The installed distribution's version (the package's own when not installed)."""
    try:
        from importlib.metadata import version as dist_version

        return dist_version("course_utils")
    except Exception:  # noqa: BLE001 - running from a checkout without installing
        from course_utils import __version__

        return __version__


def environment_problem(command: str, argv: list[str]) -> str:
    """A one-line reason not to start ``command`` ("" when none): an invalid
    ``COURSE_PROFILE``, or the gpu profile on a machine without CUDA for a command that
    runs notebooks (``course release --execute`` included)."""
    import os

    value = os.environ.get("COURSE_PROFILE", "").strip().lower()
    if value and value not in ("ci", "cpu", "gpu"):
        return f"COURSE_PROFILE={value!r} is not a profile; choose one of ci, cpu, gpu"
    runs = command in RUNS_NOTEBOOKS or (command == "release" and "--execute" in argv)
    if value == "gpu" and runs:
        from course_utils.runtime import profiles

        return profiles.slow_gpu_problem()
    return ""


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with one subparser per subcommand."""
    parser = argparse.ArgumentParser(
        prog="course",
        description="Attention & Transformers, hands-on: course tools.",
        epilog=GLOBAL_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
    if argv[:1] == ["--version"]:
        print(f"course {version()}")
        return 0
    if argv[:1] == ["--allow-slow"]:
        import os

        os.environ["COURSE_ALLOW_SLOW"] = "1"  # the notebooks' kernels inherit it
        argv = argv[1:]
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
    problem = environment_problem(argv[0], argv[1:])
    if problem:
        print(f"course {argv[0]}: {problem}", file=sys.stderr)
        return EXIT_USAGE
    module_name, help_text = SUBCOMMANDS[argv[0]]
    module = importlib.import_module(module_name)
    sub = argparse.ArgumentParser(prog=f"course {argv[0]}", description=help_text)
    module.add_arguments(sub)
    args = sub.parse_args(argv[1:])
    return int(module.main(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
