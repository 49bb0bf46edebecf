"""Run a notebook top to bottom in a fresh kernel of this interpreter (as nbval does)."""

from __future__ import annotations

from pathlib import Path

import nbformat

# "1" in the environment of the authoring tools' runs: a failed claim speaks to the author
AUTHOR_ENV_VAR = "COURSE_CLAIMS_AUTHOR"


def run_notebook(
    nb: nbformat.NotebookNode, *, folder: str | Path, profile: str | None = None, timeout: int = 600
) -> nbformat.NotebookNode:
    """Execute ``nb`` in place in a fresh kernel whose working directory is ``folder``.

    ``profile`` sets ``COURSE_PROFILE`` for the run (default: the current environment's). The
    kernel is this interpreter's (as ``pytest --nbval-current-env``) whatever "python3"
    kernelspec the machine has, and inherits this process's environment, plus
    ``COURSE_CLAIMS_AUTHOR=1``: only authoring tools run notebooks this way (``course claims``,
    ``course release --execute``, the benchmarks), so a failed claim speaks to the author (see
    :mod:`course_utils.authoring.claims`). Cell timings are not recorded. Raises nbclient's
    ``CellExecutionError`` at the first failing cell.
    """
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient
    from nbval.kernel import CURRENT_ENV_KERNEL_NAME, NbvalKernelspecManager

    from course_utils.runtime.profiles import using_environment, using_profile

    with using_profile(profile), using_environment({AUTHOR_ENV_VAR: "1"}):
        km = KernelManager(
            kernel_name=CURRENT_ENV_KERNEL_NAME, kernel_spec_manager=NbvalKernelspecManager()
        )
        NotebookClient(
            nb,
            km=km,
            timeout=timeout,
            record_timing=False,
            # the kernel app's own log lines ("running over TCP without encryption", "Parent
            # appears to have exited") are noise around an author's results; its errors stay
            extra_arguments=["--IPKernelApp.log_level=ERROR"],
            resources={"metadata": {"path": str(Path(folder).resolve())}},
        ).execute()
    return nb
