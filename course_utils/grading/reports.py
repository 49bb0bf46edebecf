"""Writing grading reports: JSON, JUnit XML, Markdown feedback, CSV gradebook, GitHub Classroom.

Every writer takes the list of per-submission reports made by
:func:`course_utils.grading.grader.grade_submission`. None of them ever includes solution
code: only ids, titles, points, statuses and the grader's messages (hints, the student's own
exception messages).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import tempfile
import unicodedata
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from course_utils.grading.plan import id_key
from course_utils.grading.report import Report, as_reports, clean_name, clean_text

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


def _dicts(reports: list[Any]) -> list[dict[str, Any]]:
    """The reports through the typed schema (:class:`Report`): cleaned, as dicts."""
    return [r.to_dict() for r in as_reports(reports)]


def write_atomic(path: str | Path, data: str | bytes, encoding: str = "utf-8") -> None:
    """Write ``path`` all at once: a temporary file beside it, then a rename, so a reader
    (or a crash half-way) never sees half a report."""
    path = Path(path)
    raw = data.encode(encoding) if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:40]}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_json(reports: list[dict[str, Any]], path: str | Path) -> None:
    """One submission: its report object. Several: a JSON array of report objects."""
    reports = _dicts(reports)
    data: Any = reports[0] if len(reports) == 1 else reports
    write_atomic(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def write_junit(reports: list[dict[str, Any]], path: str | Path) -> None:
    """JUnit XML: one ``testsuite`` per submission, one ``testcase`` per exercise, named by id.

    passed -> success; failed / not_attempted -> ``failure``; error / timeout -> ``error``.
    A submission that could not be graded at all gets one ``error`` test case named
    ``notebook``.
    """
    reports = _dicts(reports)
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
            _junit_lost_case(suite, rep)
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
    buf = io.BytesIO()
    ET.ElementTree(root).write(buf, encoding="utf-8", xml_declaration=True)
    write_atomic(path, buf.getvalue())


def _junit_lost_case(suite: ET.Element, rep: dict[str, Any]) -> None:
    """The one ``error`` test case of a submission that could not be graded at all."""
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


def feedback_markdown(rep: dict[str, Any]) -> str:
    """The Markdown feedback for one student (scores, statuses, hints; never solution code).

    An exercise whose message only repeats why the notebook could not be graded is not
    listed again under "What to look at": the error is said once, at the top."""
    rep = _dicts([rep])[0]
    title = rep.get("assignment") or md_code(Path(rep["notebook"]).stem)
    lines = [f"# Feedback: {title}", ""]
    if rep.get("student"):  # the file says whose it is (FEEDBACK-NAMES)
        lines.append(f"**Student:** {md_code(rep['student'])}  ")
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
        details = [
            ex
            for ex in rep["exercises"]
            if (ex["status"] != "passed" or ex.get("flags"))
            and not (rep.get("error") and ex["message"] == rep["error"] and not ex.get("flags"))
        ]
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


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")


def terminal_safe(text: Any) -> str:
    """Student text for a terminal: control characters (ANSI escapes, carriage returns,
    bidirectional overrides) shown as ``?``, so it cannot redraw or disguise the summary;
    lone surrogates (a name that is not UTF-8) as U+FFFD, so printing it cannot fail; a
    line starting with ``::`` split, so the GitHub Actions log runs no workflow command."""
    return clean_text(text)


def one_line(text: Any) -> str:
    """A name (file, student) on one line: every control character, newline and tab included,
    shown as ``?``, so no name can add a line to a summary, a CSV row or a JUnit name (and
    :func:`terminal_safe`'s other rules)."""
    return clean_name(text)


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


_RESERVED = {
    "con",
    "prn",
    "aux",
    "nul",
    *(f"com{i}" for i in range(10)),
    *(f"lpt{i}" for i in range(10)),
}


def feedback_stem(student: str) -> str:
    """A file name for ``student``'s feedback that no other name maps to.

    Letters and digits of any script are kept (``josé`` stays ``josé``); when anything had
    to change (``jos!`` -> ``jos_``), or the name is reserved on Windows, a short hash of the
    original name is appended (``jos_-3f2a91``), so two students never share a file and a
    re-run gives every student the same file again."""
    name = unicodedata.normalize("NFC", clean_name(student or "submission"))
    stem = re.sub(r"[^\w.-]+", "_", name).strip(".")[:80] or "submission"
    if stem != name or stem.casefold() in _RESERVED:
        digest = hashlib.sha256(name.encode("utf-8", "replace")).hexdigest()[:6]
        stem = f"{stem}-{digest}"
    return stem


def write_feedback(reports: list[Any], directory: str | Path) -> list[Path]:
    """One ``<student>.md`` per submission in ``directory`` (see :func:`feedback_stem`; names
    that still meet, the same student twice or ``Alice`` and ``alice`` on a case-insensitive
    disk, get ``-2``, ``-3`` in sorted order, whatever the order of the batch); returns the
    paths in the order of ``reports``."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    reports = _dicts(reports)
    stems = [feedback_stem(rep.get("student") or "submission") for rep in reports]
    names: dict[int, str] = {}
    used: set[str] = set()
    for i in sorted(range(len(stems)), key=lambda i: (stems[i].casefold(), stems[i], i)):
        name, k = stems[i], 2
        while name.casefold() in used:
            name, k = f"{stems[i]}-{k}", k + 1
        used.add(name.casefold())
        names[i] = name
    paths = []
    for i, rep in enumerate(reports):
        path = out / f"{names[i]}.md"
        write_atomic(path, feedback_markdown(rep))
        paths.append(path)
    return paths


def _one_line_clip(text: Any, n: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def problems(rep: dict[str, Any]) -> list[str]:
    """What the instructor should know about a submission besides its score, one line each:
    its error, its flags (an answer re-exporting the course's code) and the grader's notes
    (an edited check cell, not sandboxed, a cell out of memory...)."""
    found = [rep["error"]] if rep.get("error") else []
    found += list(rep.get("flags") or [])
    found += [n for n in rep.get("notes") or [] if n not in found]
    return [_one_line_clip(p) for p in found]


def write_csv(reports: list[Any], path: str | Path, bom: bool = False) -> None:
    """The gradebook: one row per submission, one column per exercise id (points).

    After the columns of earlier versions come ``notes`` (every flag and grader note: an
    edited check cell, not sandboxed...) and ``max_<id>``, each exercise's maximum. A
    submission whose notebook never ran (damaged, another assignment) has blank points, not
    0. ``bom``: start with a UTF-8 byte-order mark, so that Excel reads it as UTF-8."""
    reports = as_reports(reports)
    ids = sorted({ex.id for rep in reports for ex in rep.exercises}, key=id_key)
    sim_cols = list(dict.fromkeys(k for rep in reports for k in similarity_columns(rep.to_dict())))
    fields = ["student", "notebook", "assignment", "total", "max", "percent", *ids]
    fields += ["flags", "error", "runtime_s", *sim_cols, "notes", *(f"max_{i}" for i in ids)]
    buf = io.StringIO(newline="")
    writer = csv.DictWriter(buf, fieldnames=fields)
    writer.writeheader()
    for rep in reports:
        writer.writerow({k: csv_safe(v) for k, v in _csv_row(rep).items()})
    write_atomic(path, ("\ufeff" if bom else "") + buf.getvalue())


def _csv_row(rep: Report) -> dict[str, Any]:
    d = rep.to_dict()
    graded = rep.graded
    row = {
        "student": one_line(rep.student),
        "notebook": one_line(rep.notebook),
        "assignment": rep.assignment or "",
        "total": _num(rep.total) if graded else "",
        "max": _num(rep.max),
        "percent": f"{rep.percent:g}" if graded else "",
        "flags": " | ".join(rep.flags),
        "error": rep.error or "",
        "runtime_s": f"{rep.runtime_s:.1f}",
        "notes": " | ".join(p for p in problems(d) if p != rep.error and p not in rep.flags),
    }
    for ex in rep.exercises:
        row[ex.id] = _num(ex.points) if graded else ""
        row[f"max_{ex.id}"] = _num(ex.max_points)
    row.update(similarity_columns(d))
    return row


def classroom_result(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """The GitHub Classroom autograding result of a run (``version: 1``).

    The format read by ``classroom-resources/autograding-grading-reporter``: ``status``
    (``pass`` / ``fail`` / ``error``), ``max_score`` and one test per exercise with
    ``name``, ``status``, ``score``, ``message``, ``test_code``, ``filename``, ``line_no`` and
    ``execution_time``. The workflow base64-encodes it into ``<RUNNER>_RESULTS``.
    """
    reports = _dicts(reports)
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
    write_atomic(path, json.dumps(classroom_result(reports), ensure_ascii=False) + "\n")


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
    and (with ``--similarity``) the exercises whose code resembles the course's or a peer's.

    The "problem" column holds the error, the flags and the grader's notes (an edited check
    cell among them); "not sandboxed" counts only submissions whose code did run."""
    reports = _dicts(reports)
    lines = ["# Grading report", ""]
    lines += ["| student | assignment | score | sandbox | peak memory | problem |"]
    lines += ["|---|---|---|---|---|---|"]
    for rep in reports:
        box = rep.get("sandbox") or {}
        lines.append(
            f"| {md_code(rep.get('student') or '', True)} | {_md_text(rep.get('assignment') or '')} "
            f"| {_num(rep['total'])} / {_num(rep['max'])} | {_md_text(box.get('backend', '-'))} "
            f"| {box.get('peak_memory_mb', 0):.0f} MB | "
            f"{'<br>'.join(md_code(p, True) for p in problems(rep))} |"
        )
    lines.append("")
    ran = [r for r in reports if (r.get("kernel") or {}).get("status") != "not_started"]
    unsandboxed = [r for r in ran if not (r.get("sandbox") or {}).get("isolated")]
    if unsandboxed:
        lines += [
            f"**{len(unsandboxed)} submission(s) were not sandboxed** (``--sandbox none``): "
            "their code ran as the grader's user.",
            "",
        ]
    never = len(reports) - len(ran)
    if never:
        lines += [f"{never} submission(s) never ran (see the problem column).", ""]
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
    write_atomic(path, instructor_report(reports))
