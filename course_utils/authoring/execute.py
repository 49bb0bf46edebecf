"""Run a notebook top to bottom in a fresh kernel of this interpreter (as nbval does), and
``course release --execute``: store a solution's outputs in place, minus timings and live
widget views."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import nbformat

from course_utils.authoring.author_env import AUTHOR_ENV_VAR
from course_utils.authoring.release import VOLATILE_CELL_METADATA, render


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


def execute_solution(path: str | Path, *, profile: str | None = None, timeout: int = 600) -> None:
    """Run a solution notebook top to bottom in a fresh kernel and store its outputs in place.

    ``profile`` sets ``COURSE_PROFILE`` for the run (default: the current environment's).
    Cell timings are not recorded, so re-running changes only what the code prints. The kernel
    is this interpreter's (as ``pytest --nbval-current-env``) and runs in the notebook's
    folder, as under nbval and in JupyterLab.
    """
    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    run_notebook(nb, folder=path.parent, profile=profile, timeout=timeout)
    for cell in nb.cells:
        for key in VOLATILE_CELL_METADATA:
            cell.metadata.pop(key, None)
    strip_widget_views(nb)
    path.write_text(render(nb), encoding="utf-8")


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def strip_widget_views(nb: Mapping[str, Any]) -> Mapping[str, Any]:
    """Drop live-widget views from stored outputs (in place; returns ``nb``).

    A stored widget cannot be replayed: JupyterLab would show "model not found" and other
    readers the widget's text repr. An output that also holds a static picture (every
    :mod:`course_utils.widgets` explorer does) keeps the picture and its note; one that holds
    nothing else is removed. The saved widget state goes too.
    """
    for cell in nb.get("cells", []):
        kept = []
        for out in cell.get("outputs", []) or []:
            data = out.get("data")
            if isinstance(data, Mapping) and WIDGET_VIEW in data:
                rest = {k: v for k, v in data.items() if k != WIDGET_VIEW}
                if not any(k.startswith("image/") for k in rest):
                    continue
                out["data"] = rest
            kept.append(out)
        if "outputs" in cell:
            cell["outputs"] = kept
    nb.get("metadata", {}).pop("widgets", None)
    return nb
