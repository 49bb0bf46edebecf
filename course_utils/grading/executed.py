"""``--executed``: the notebook as the grader ran it, with its student markup kept inert."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from course_utils.checks import core
from course_utils.grading.plan import (
    Assignment,
)

# Outputs a viewer renders as markup (nbconvert's HTML export, JupyterLab): a student's
# <script> would run in the instructor's browser. --executed keeps them, inert, as text in the
# output's metadata (``grader_inert``), where no viewer renders them.
ACTIVE_MIMES = ("text/html", "text/markdown", "image/svg+xml", "application/javascript")


def inert(output: dict[str, Any]) -> dict[str, Any]:
    """``output`` without renderable markup (moved to ``metadata.grader_inert``)."""
    data = output.get("data")
    if not isinstance(data, dict) or not any(m in data for m in ACTIVE_MIMES):
        return output
    out = dict(output)
    out["data"] = {k: v for k, v in data.items() if k not in ACTIVE_MIMES}
    if not out["data"]:
        out["data"] = {"text/plain": "[markup output kept inert by the grader]"}
    meta = dict(output.get("metadata") or {})
    meta["grader_inert"] = {k: v for k, v in data.items() if k in ACTIVE_MIMES}
    out["metadata"] = meta
    return out


def write_executed(nb, executed, assignment: Assignment, out_dir: str, path: str) -> None:
    """The notebook as the grader ran it (capped outputs; check positions show verdicts).

    Each executed cell records its index in the submission (``metadata.grader.cell``), so the
    outputs can be compared with the submission's stored ones (the test suite does, nbval-style).
    """
    import nbformat

    out = nbformat.v4.new_notebook()
    out.metadata = {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
    }
    by_id = {g.id: g for g in assignment.exercises}
    for step, result in executed:
        if step.kind == "cell":
            cell = nbformat.v4.new_code_cell(nb["cells"][step.index]["source"])
            cell.metadata["grader"] = {"cell": step.index}  # its index in the submission
            cell.outputs = [nbformat.from_dict(inert(o)) for o in result.outputs]
            if result.status in ("timeout", "hung", "died"):
                cell.outputs.append(
                    nbformat.v4.new_output(
                        "stream", name="stderr", text=f"[grader] {result.status}: {result.evalue}\n"
                    )
                )
        else:
            g = by_id[step.exercise_id]
            verdict = core.CheckResult(
                g.id,
                g.exercise.title,
                result["status"],
                result["points"],
                result["max_points"],
                result["message"],
            )
            cell = nbformat.v4.new_code_cell(f'check("{g.id}", {g.exercise.function})')
            cell.metadata["tags"] = ["check"]
            cell.outputs = [
                nbformat.v4.new_output(
                    "stream",
                    name="stdout",
                    text=verdict.verdict_line() + "\n" + result["message"] + "\n",
                )
            ]
        out.cells.append(cell)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    parts = [p for p in Path(path).with_suffix("").parts[-2:] if p not in ("", ".", "/")]
    name = "__".join(parts) or "submission"
    nbformat.write(out, str(Path(out_dir) / f"{name}.ipynb"))
