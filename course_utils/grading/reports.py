"""Writing grading reports: JSON, JUnit XML, Markdown feedback, CSV gradebook, GitHub Classroom.

Every writer takes the list of per-submission reports made by
:func:`course_utils.grading.grader.grade_submission`. None of them ever includes solution
code: only ids, titles, points, statuses and the grader's messages (hints, the student's own
exception messages).
"""

from __future__ import annotations

import csv
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from course_utils.grading.plan import id_key

STATUS_LABEL = {
    "passed": "passed",
    "failed": "failed",
    "not_attempted": "not attempted",
    "error": "error",
    "timeout": "timeout",
}
STATUS_ICON = {"passed": "✅", "failed": "❌", "not_attempted": "⬜", "error": "💥", "timeout": "⏱️"}
_XML_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _xml_text(text: Any) -> str:
    return _XML_BAD.sub("?", str(text))


def _num(x: float) -> str:
    return f"{x:g}"


def write_json(reports: list[dict[str, Any]], path: str | Path) -> None:
    """One submission: its report object. Several: a JSON array of report objects."""
    data: Any = reports[0] if len(reports) == 1 else reports
    Path(path).write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def write_junit(reports: list[dict[str, Any]], path: str | Path) -> None:
    """JUnit XML: one ``testsuite`` per submission, one ``testcase`` per exercise, named by id.

    passed -> success; failed / not_attempted -> ``failure``; error / timeout -> ``error``.
    A submission that could not be graded at all gets one ``error`` test case named
    ``notebook``.
    """
    root = ET.Element("testsuites", name="course grade")
    total_tests = total_fail = total_err = 0
    total_time = 0.0
    for rep in reports:
        cases = rep["exercises"]
        suite = ET.SubElement(
            root, "testsuite", name=one_line(_xml_text(rep.get("student") or rep["notebook"]))
        )
        props = ET.SubElement(suite, "properties")
        for key in ("notebook", "assignment", "total", "max", "seed"):
            ET.SubElement(props, "property", name=key, value=one_line(_xml_text(rep.get(key))))
        n_fail = n_err = 0
        for ex in cases:
            case = ET.SubElement(
                suite,
                "testcase",
                name=_xml_text(ex["id"]),
                classname=one_line(
                    _xml_text(
                        f"{rep.get('assignment') or 'notebook'}.{rep.get('student') or ''}".rstrip(
                            "."
                        )
                    )
                ),
                time=f"{float(ex.get('runtime_s', 0.0)):.3f}",
            )
            label = (
                f"{ex['title']}: {STATUS_LABEL.get(ex['status'], ex['status'])} "
                f"({_num(ex['points'])}/{_num(ex['max_points'])} points)"
            )
            if ex["status"] in ("failed", "not_attempted"):
                n_fail += 1
                node = ET.SubElement(case, "failure", message=_xml_text(label), type=ex["status"])
                node.text = _xml_text(ex["message"])
            elif ex["status"] in ("error", "timeout"):
                n_err += 1
                node = ET.SubElement(case, "error", message=_xml_text(label), type=ex["status"])
                node.text = _xml_text(ex["message"])
            else:
                out = ET.SubElement(case, "system-out")
                out.text = _xml_text(label)
        if not cases and rep.get("error"):
            n_err += 1
            case = ET.SubElement(
                suite,
                "testcase",
                name="notebook",
                classname=_xml_text(rep.get("student") or ""),
                time="0",
            )
            node = ET.SubElement(
                case,
                "error",
                message=_xml_text(rep["error"]),
                type=rep.get("error_kind") or "error",
            )
            node.text = _xml_text(rep["error"])
        n = max(len(cases), 1 if (not cases and rep.get("error")) else 0)
        suite.set("tests", str(n))
        suite.set("failures", str(n_fail))
        suite.set("errors", str(n_err))
        suite.set("skipped", "0")
        suite.set("time", f"{float(rep.get('runtime_s', 0.0)):.3f}")
        total_tests += n
        total_fail += n_fail
        total_err += n_err
        total_time += float(rep.get("runtime_s", 0.0))
    root.set("tests", str(total_tests))
    root.set("failures", str(total_fail))
    root.set("errors", str(total_err))
    root.set("time", f"{total_time:.3f}")
    ET.ElementTree(root).write(str(path), encoding="utf-8", xml_declaration=True)


def feedback_markdown(rep: dict[str, Any]) -> str:
    """The Markdown feedback for one student (scores, statuses, hints; never solution code)."""
    title = rep.get("assignment") or md_code(Path(rep["notebook"]).stem)
    lines = [f"# Feedback: {title}", ""]
    lines.append(f"**Notebook:** {md_code(Path(rep['notebook']).name)}  ")
    lines.append(
        f"**Score:** {_num(rep['total'])} / {_num(rep['max'])} points"
        + (f" ({rep['percent']:g}%)" if rep.get("max") else "")
    )
    lines.append("")
    if rep.get("error"):
        lines += [
            "> **The notebook could not be graded completely:** " + _md_inline(rep["error"]),
            "",
        ]
    if rep["exercises"]:
        lines += ["| exercise | title | status | points |", "|---|---|---|---|"]
        for ex in rep["exercises"]:
            icon = STATUS_ICON.get(ex["status"], "")
            lines.append(
                f"| {ex['id']} | {_md_text(ex['title'])} | {icon} "
                f"{STATUS_LABEL.get(ex['status'], ex['status'])} | "
                f"{_num(ex['points'])} / {_num(ex['max_points'])} |"
            )
        lines.append("")
        details = [ex for ex in rep["exercises"] if ex["status"] != "passed" or ex.get("flags")]
        if details:
            lines += ["## What to look at", ""]
            for ex in details:
                lines.append(
                    f"### {ex['id']} · {_md_text(ex['title'])} — "
                    f"{STATUS_LABEL.get(ex['status'], ex['status'])}"
                )
                lines.append("")
                lines.append(_md_block(ex["message"]))
                lines.append("")
    kernel = rep.get("kernel", {})
    notes = list(rep.get("notes", []))
    if kernel.get("status") not in (None, "ok", "not_started") and kernel.get("detail"):
        notes.insert(0, kernel["detail"])
    errors = rep.get("cells", {}).get("errors", [])
    if errors:
        shown = ", ".join(f"cell {e['cell'] + 1} ({e['ename'][:100]})" for e in errors[:10])
        more = f" and {len(errors) - 10} more" if len(errors) > 10 else ""
        notes.append(f"cells that raised an error while grading: {shown}{more}")
    if notes:
        lines += ["## Notes from the grader", ""] + [f"- {_md_inline(n)}" for n in notes] + [""]
    lines += [
        "---",
        "",
        "Check your work before submitting: "
        f"{md_code('course grade ' + Path(rep['notebook']).name)}. The grader runs your notebook top to bottom in a "
        "fresh kernel with the check cells restored, so restart your kernel and run all "
        "cells first.",
        "",
    ]
    return "\n".join(lines)


_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")


def terminal_safe(text: Any) -> str:
    """Student text for a terminal: control characters (ANSI escapes, carriage returns,
    bidirectional overrides) shown as ``?``, so it cannot redraw or disguise the summary."""
    return _CONTROL.sub("?", str(text))


def one_line(text: Any) -> str:
    """A name (file, student) on one line: every control character, newline and tab included,
    shown as ``?``, so no name can add a line to a summary, a CSV row or a JUnit name."""
    return re.sub("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]", "?", str(text))


def md_code(text: Any, table: bool = False) -> str:
    """Student text as one inline Markdown code span: nothing in it renders (no heading,
    link, image, HTML, emphasis); whitespace collapsed, pipes escaped for tables."""
    text = " ".join(terminal_safe(text).split()) or " "
    run = max((len(m) for m in re.findall("`+", text)), default=0)
    fence = "`" * (run + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    span = f"{fence}{pad}{text}{pad}{fence}"
    return span.replace("|", "\\|") if table else span


def _md_inline(text: str) -> str:
    return md_code(text)


def _md_cell(text: str) -> str:
    return md_code(text, table=True)


def _md_block(text: str) -> str:
    """Student text as a fenced block whose fence is longer than any backtick or tilde run
    inside it, so it cannot close the fence and write Markdown after it."""
    text = terminal_safe(str(text).strip()) or "(no message)"
    run = max((len(m) for m in re.findall("`+", text)), default=0)
    fence = "`" * max(3, run + 1)
    return f"{fence}text\n{text}\n{fence}"


def _md_text(text: Any) -> str:
    """Trusted text (titles from the registry) for a table cell or heading: one line, every
    ASCII punctuation character backslash-escaped."""
    text = " ".join(terminal_safe(text).split())
    return re.sub(r"([!-/:-@\[-`{-~])", r"\\\1", text)


def csv_safe(value: Any) -> Any:
    """A CSV cell a spreadsheet will not run: text starting with ``= + - @``, tab or CR
    (and their full-width forms) gets a leading apostrophe; numbers are left alone."""
    if value is None or isinstance(value, (int, float)):
        return value
    text = str(value)
    if text.startswith(_FORMULA_START):
        return "'" + text
    return text


def write_feedback(reports: list[dict[str, Any]], directory: str | Path) -> list[Path]:
    """One ``<student>.md`` per submission in ``directory``; returns the paths."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    used: set[str] = set()
    for rep in reports:
        stem = re.sub(r"[^A-Za-z0-9._-]+", "_", rep.get("student") or "submission") or "submission"
        name, k = stem, 2
        while name in used:
            name, k = f"{stem}-{k}", k + 1
        used.add(name)
        path = out / f"{name}.md"
        path.write_text(feedback_markdown(rep), encoding="utf-8")
        paths.append(path)
    return paths


def write_csv(reports: list[dict[str, Any]], path: str | Path) -> None:
    """The gradebook: one row per submission, one column per exercise id (points)."""
    ids = sorted({ex["id"] for rep in reports for ex in rep["exercises"]}, key=id_key)
    sim_cols = list(dict.fromkeys(k for rep in reports for k in similarity_columns(rep)))
    fields = [
        "student",
        "notebook",
        "assignment",
        "total",
        "max",
        "percent",
        *ids,
        "flags",
        "error",
        "runtime_s",
        *sim_cols,
    ]
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        for rep in reports:
            row = {
                "student": one_line(rep.get("student") or ""),
                "notebook": one_line(rep["notebook"]),
                "assignment": rep.get("assignment") or "",
                "total": _num(rep["total"]),
                "max": _num(rep["max"]),
                "percent": f"{rep.get('percent', 0.0):g}",
                "flags": " | ".join(rep.get("flags", [])),
                "error": rep.get("error") or "",
                "runtime_s": f"{rep.get('runtime_s', 0.0):.1f}",
            }
            for ex in rep["exercises"]:
                row[ex["id"]] = _num(ex["points"])
            for key, value in similarity_columns(rep).items():
                row[key] = value
            writer.writerow({k: csv_safe(v) for k, v in row.items()})


def classroom_result(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """The GitHub Classroom autograding result of a run (``version: 1``).

    The format read by ``classroom-resources/autograding-grading-reporter``: ``status``
    (``pass`` / ``fail`` / ``error``), ``max_score`` and one test per exercise with
    ``name``, ``status``, ``score``, ``message``, ``test_code``, ``filename``, ``line_no`` and
    ``execution_time``. The workflow base64-encodes it into ``<RUNNER>_RESULTS``.
    """
    tests = []
    any_error = False
    all_pass = True
    max_score = 0.0
    for rep in reports:
        if (
            rep.get("error_kind") in ("bad_input", "grader", "busy", "usage")
            or not rep["exercises"]
        ):
            any_error = True
        multi = len(reports) > 1
        for ex in rep["exercises"]:
            max_score += float(ex["max_points"])
            passed = ex["status"] == "passed"
            all_pass = all_pass and passed
            status = (
                "pass" if passed else ("error" if ex["status"] in ("error", "timeout") else "fail")
            )
            name = f"{ex['id']} {ex['title']}"
            tests.append(
                {
                    "name": f"{rep.get('student')}: {name}" if multi else name,
                    "status": status,
                    "score": float(ex["points"]),
                    "message": f"{STATUS_LABEL.get(ex['status'], ex['status'])} "
                    f"({_num(ex['points'])}/{_num(ex['max_points'])} points): {ex['message']}",
                    "test_code": f"course grade {Path(rep['notebook']).name}  # exercise {ex['id']}",
                    "filename": rep["notebook"],
                    "line_no": 0,
                    "execution_time": f"{float(ex.get('runtime_s', 0.0)):.2f}s",
                }
            )
        if not rep["exercises"] and rep.get("error"):
            tests.append(
                {
                    "name": f"{Path(rep['notebook']).name}",
                    "status": "error",
                    "score": 0,
                    "message": rep["error"],
                    "test_code": "",
                    "filename": rep["notebook"],
                    "line_no": 0,
                    "execution_time": "0.00s",
                }
            )
    status = "error" if any_error else ("pass" if all_pass and tests else "fail")
    return {
        "version": 1,
        "status": status,
        "max_score": int(max_score) if max_score.is_integer() else max_score,
        "tests": tests,
    }


def write_classroom(reports: list[dict[str, Any]], path: str | Path) -> None:
    """:func:`classroom_result` as JSON (the workflow base64-encodes the file)."""
    Path(path).write_text(
        json.dumps(classroom_result(reports), ensure_ascii=False) + "\n", encoding="utf-8"
    )


def similarity_columns(rep: dict[str, Any]) -> dict[str, str]:
    """``sim_<id>_course``, ``sim_<id>_peer`` and ``sim_<id>_peer_with`` for the gradebook."""
    out: dict[str, str] = {}
    for ex_id, sim in sorted((rep.get("similarity") or {}).items(), key=lambda kv: id_key(kv[0])):
        out[f"sim_{ex_id}_course"] = f"{sim.get('course', 0.0):.2f}"
        out[f"sim_{ex_id}_peer"] = f"{sim.get('peer', 0.0):.2f}"
        out[f"sim_{ex_id}_peer_with"] = sim.get("peer_with") or ""
    return out


def instructor_report(reports: list[dict[str, Any]]) -> str:
    """The instructor's Markdown summary: one row per submission, how it was sandboxed,
    and (with ``--similarity``) the exercises whose code resembles the course's or a peer's."""
    lines = ["# Grading report", ""]
    lines += ["| student | assignment | score | sandbox | peak memory | problem |"]
    lines += ["|---|---|---|---|---|---|"]
    for rep in reports:
        box = rep.get("sandbox") or {}
        lines.append(
            f"| {md_code(rep.get('student') or '', True)} | {_md_text(rep.get('assignment') or '')} "
            f"| {_num(rep['total'])} / {_num(rep['max'])} | {_md_text(box.get('backend', '-'))} "
            f"| {box.get('peak_memory_mb', 0):.0f} MB | "
            f"{md_code(rep['error'], True) if rep.get('error') else ''} |"
        )
    lines.append("")
    unsandboxed = [r for r in reports if not (r.get("sandbox") or {}).get("isolated")]
    if unsandboxed:
        lines += [
            f"**{len(unsandboxed)} submission(s) were not sandboxed** (``--sandbox none`` or "
            "not graded at all): their code ran as the grader's user.",
            "",
        ]
    rows = []
    for rep in reports:
        for ex_id, sim in (rep.get("similarity") or {}).items():
            rows.append((max(sim.get("course", 0), sim.get("peer", 0)), rep, ex_id, sim))
    if rows:
        lines += [
            "## Similarity",
            "",
            "Share of each exercise's code (identifiers and literals normalised, the starter "
            "code ignored) also found in the course's own source and solutions (*course*) or in "
            "another submission of this batch (*peer*, with whom). High values are a reason to "
            "read the code, not a verdict. Highest first:",
            "",
            "| student | exercise | course | peer | peer with |",
            "|---|---|---|---|---|",
        ]
        for _, rep, ex_id, sim in sorted(rows, key=lambda r: -r[0])[:200]:
            lines.append(
                f"| {md_code(rep.get('student') or '', True)} | {_md_text(ex_id)} | "
                f"{sim.get('course', 0):.2f} | {sim.get('peer', 0):.2f} | "
                f"{md_code(sim.get('peer_with') or '-', True)} |"
            )
        lines.append("")
    return "\n".join(lines)


def write_instructor_report(reports: list[dict[str, Any]], path: str | Path) -> None:
    """:func:`instructor_report` into ``path``."""
    Path(path).write_text(instructor_report(reports), encoding="utf-8")
