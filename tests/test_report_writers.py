"""The typed report and the writer registry (issue 35; issue 30's "every report writer
survives any student text").

Every registered writer is run on hostile reports (lone surrogates, a name that is not
UTF-8, control characters, GitHub Actions workflow commands, formula cells, NaN points);
one writer's failure never costs another its file; files are replaced atomically; feedback
names never collide. The LMS exports are read back the way each LMS documents its import.
Fast: no notebook is executed (the class report's browser test is in test_class_report.py).
"""

from __future__ import annotations

import argparse
import copy
import csv
import io
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from course_utils.grading import cli as grade_cli
from course_utils.grading import reports as rp
from course_utils.grading import roster as rs
from course_utils.grading.report import Report, clean_name, clean_text
from course_utils.grading.writers import WRITERS, WriteContext, write_requested

FIXTURES = Path(__file__).parent / "fixtures" / "reports"
NON_UTF8 = b"jos\xe9".decode("utf-8", "surrogateescape")  # a Latin-1 file name on Linux
HOSTILE = (
    "::add-mask::secret\n  ::stop-commands::x\n\x1b[2J\x00\r\u202eevil\ud800 =cmd|' /C calc'!A0"
)


def entry(ex_id, status="passed", points=1, max_points=1, message="ok", **over):
    e = {
        "id": ex_id,
        "title": f"Item {ex_id}",
        "points": points,
        "max_points": max_points,
        "status": status,
        "message": message,
        "flags": [],
        "runtime_s": 0.1,
    }
    e.update(over)
    return e


def report(student, exercises, **over):
    total = sum(e["points"] for e in exercises)
    mx = sum(e["max_points"] for e in exercises)
    rep = {
        "notebook": f"subs/{student}/00_start_here.ipynb",
        "student": student,
        "assignment": "00_start_here",
        "total": total,
        "max": mx,
        "percent": round(100 * total / mx, 2) if mx else 0.0,
        "exercises": exercises,
        "flags": [],
        "notes": [],
        "error": None,
        "error_kind": None,
        "kernel": {"status": "ok", "detail": ""},
        "cells": {"executed": 3, "errors": []},
        "output": {"bytes_seen": 0, "bytes_kept": 0, "truncated": False},
        "seed": 1,
        "runtime_s": 2.0,
        "sandbox": {"backend": "bwrap", "isolated": True, "peak_memory_mb": 170.0},
    }
    rep.update(over)
    return rep


def hostile_batch() -> list[dict]:
    evil = report(
        NON_UTF8 + "\n::error::x",
        [
            entry("00.1", "failed", 0, 2, HOSTILE, mistake=HOSTILE),
            entry("00.2", "error", float("nan"), 1, HOSTILE, flags=[HOSTILE]),
        ],
        notes=[HOSTILE],
        error=HOSTILE,
        flags=[HOSTILE],
    )
    evil["notebook"] = f"subs/{NON_UTF8}/=HYPERLINK(1).ipynb"
    evil["similarity"] = {"00.1": {"course": 0.9, "peer": 0.2, "peer_with": HOSTILE}}
    broken = report("eve", [entry("00.1", "error", 0, 2, "not valid JSON — damaged")])
    broken.update(error="not valid JSON — damaged", error_kind="bad_input")
    return [evil, report("alice", [entry("00.1", points=2, max_points=2)]), broken]


def _all_text(path: Path) -> str:
    files = sorted(path.rglob("*")) if path.is_dir() else [path]
    return "".join(f.read_bytes().decode("utf-8") for f in files if f.is_file())


def _args(tmp_path: Path, names) -> argparse.Namespace:
    values = {w.dest: None for w in WRITERS.values()}
    for name in names:
        w = WRITERS[name]
        values[w.dest] = str(tmp_path / (name + ("" if w.directory else ".out")))
    return argparse.Namespace(**values)


@pytest.mark.parametrize("name", list(WRITERS))
def test_every_writer_survives_any_student_text(tmp_path, name):
    roster = rs.Roster({"alice": {"student": "alice", "email": "a@x.org", "sid": "1"}})
    ctx = WriteContext(roster=roster)
    assert write_requested(_args(tmp_path, [name]), hostile_batch(), ctx)
    target = tmp_path / (name + ("" if WRITERS[name].directory else ".out"))
    text = _all_text(target)  # decodes as UTF-8: no lone surrogate reached the file
    assert text
    assert not re.search(r"(?m)^\s*::", text), "a GitHub Actions workflow command survived"
    assert not re.search("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\u202e]", text), "a control character"
    if name in ("json", "junit", "csv", "classroom", "report"):  # the name is in the file
        assert "jos\ufffd" in text
    if name == "feedback":  # the name is the file's
        assert any(p.name.startswith("jos_") for p in target.iterdir())
    assert not list(tmp_path.rglob("*.tmp")), "a temporary file was left behind"


def test_the_typed_report_round_trips_the_graders_dict_in_its_order():
    rep = report("alice", [entry("00.1", mistake="global max", kind=None)])
    rep["grader_peak_rss_mb"] = 12.5
    again = Report.from_dict(copy.deepcopy(rep)).to_dict()
    assert list(again) == list(rep) and again == rep
    assert list(again["exercises"][0]) == list(rep["exercises"][0])


def test_cleaning_rules():
    assert clean_text("a\n::set-output name=x::1") == "a\n: :set-output name=x::1"
    assert clean_name("a\nb\tc") == "a?b?c"
    assert clean_name(NON_UTF8) == "jos\ufffd"
    assert clean_text("x\ud800y") == "x\ufffdy"
    assert rp.terminal_safe("  ::error::boom") == "  : :error::boom"


def test_one_writer_failing_costs_no_other_its_file(tmp_path, monkeypatch, capsys):
    import dataclasses

    def boom(reports, path, ctx):
        raise RuntimeError("disk on fire")

    monkeypatch.setitem(WRITERS, "junit", dataclasses.replace(WRITERS["junit"], write=boom))
    args = _args(tmp_path, ["json", "junit", "csv", "feedback"])
    assert write_requested(args, hostile_batch()) is False
    assert (tmp_path / "json.out").is_file() and (tmp_path / "csv.out").is_file()
    assert len(list((tmp_path / "feedback").glob("*.md"))) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--junit" in err and "disk on fire" in err


def test_a_report_is_replaced_atomically(tmp_path, monkeypatch):
    import os

    target = tmp_path / "g.json"
    target.write_text("previous")

    def fail(src, dst):
        raise OSError("no space left")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError):
        rp.write_json(hostile_batch(), target)
    assert target.read_text() == "previous" and not list(tmp_path.glob("*.tmp"))


def test_feedback_file_names_never_collide_and_are_stable(tmp_path):
    names = ["josé", "jos!", "jos_", "Alice", "alice", "con", "..", "jos!"]
    reps = [report(n, [entry("00.1")]) for n in names]
    paths = rp.write_feedback(reps, tmp_path / "a")
    stems = [p.stem for p in paths]
    assert len({s.casefold() for s in stems}) == len(names)
    assert stems[0] == "josé" and stems[2] == "jos_" and stems[1].startswith("jos_-")
    assert stems[7] == stems[1] + "-2"
    again = rp.write_feedback(list(reversed(reps[:-1])), tmp_path / "b")
    assert sorted(p.name for p in again) == sorted(p.name for p in paths[:-1])


def test_csv_has_maxima_notes_a_bom_option_and_blanks_for_ungraded(tmp_path):
    reps = hostile_batch()[1:]
    reps[0]["notes"] = ["the check cell of 00.1 was edited; the reference check was used"]
    rp.write_csv(reps, tmp_path / "g.csv", bom=True)
    raw = (tmp_path / "g.csv").read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf")
    rows = list(csv.DictReader(io.StringIO(raw.decode("utf-8-sig"))))
    assert rows[0]["max_00.1"] == "2" and "check cell of 00.1 was edited" in rows[0]["notes"]
    assert rows[1]["total"] == "" and rows[1]["00.1"] == "" and rows[1]["percent"] == ""
    rp.write_csv(reps, tmp_path / "plain.csv")
    assert not (tmp_path / "plain.csv").read_bytes().startswith(b"\xef\xbb\xbf")


def test_instructor_report_lists_tampering_and_does_not_call_an_unparsed_notebook_unsandboxed():
    reps = hostile_batch()[1:]
    reps[0]["notes"] = ["the check cell of 00.1 was edited; the reference check was used"]
    reps[1]["kernel"] = {"status": "not_started", "detail": ""}
    reps[1]["sandbox"] = None
    text = rp.instructor_report(reps)
    assert "check cell of 00.1 was edited" in text
    assert "not sandboxed" not in text and "1 submission(s) never ran" in text


def test_feedback_says_a_grading_error_once():
    rep = hostile_batch()[2]
    assert rp.feedback_markdown(rep).count("not valid JSON") == 1


# ----------------------------------------------------------------------------- regrades, late


def test_adjustments_survive_a_rerun_and_stay_within_the_maximum(tmp_path):
    adjust = tmp_path / "adjust.csv"
    adjust.write_text(
        "student,item,points,reason\nalice,00.1,-0.5,style\nbob,00.1,+5,regrade\nzed,00.9,1,x\n",
        encoding="utf-8",
    )
    for _ in range(2):  # a re-run grades afresh and applies the same file: the same result
        reps = [
            report("alice", [entry("00.1", points=2, max_points=2), entry("00.2")]),
            report("bob", [entry("00.1", "failed", 0, 2, "no"), entry("00.2")]),
        ]
        warnings = rs.apply_adjustments(reps, rs.read_adjustments(adjust))
        assert reps[0]["total"] == 2.5 and reps[0]["percent"] == 83.33
        assert reps[1]["total"] == 3 and reps[1]["exercises"][0]["points"] == 2
        assert "adjusted by the instructor: 2 -> 1.5 (style)" in reps[0]["notes"][0]
        assert len(warnings) == 1 and "zed" in warnings[0]


def test_late_policy_from_roster_times(tmp_path):
    roster_file = tmp_path / "roster.csv"
    roster_file.write_text(
        "student,submitted_at\nalice,2026-03-01T23:00:00Z\nbob,2026-03-02T05:00:00+00:00\n",
        encoding="utf-8",
    )
    roster = rs.Roster.read(roster_file)
    policy = rs.LatePolicy(rs.parse_time("2026-03-02T00:00Z", "d"), 10.0, 24.0, 15.0)
    assert policy.penalty(rs.parse_time("2026-03-03T01:00Z", "x")) == (25.0, 15.0)  # capped
    reps = [report("alice", [entry("00.1", points=2, max_points=2)]), report("bob", [entry("00.1", points=2, max_points=2)]), report("carl", [entry("00.1")])]  # fmt: skip
    warnings = rs.apply_late_policy(reps, policy, roster)
    assert reps[0]["total"] == 2 and "late" not in reps[0]
    assert reps[1]["late"]["penalty_percent"] == 10 and reps[1]["total"] == 1.8
    assert len(warnings) == 1 and "carl" in warnings[0]
    with pytest.raises(rs.InputError):
        rs.apply_late_policy(reps, policy, None)


# ----------------------------------------------------------------------------- LMS formats

ROSTER = (
    "student,name,email,canvas_id,sis_user_id,sis_login_id,section,sid,username,id_number\n"
    "alice,Alice Liddell,alice@uni.edu,101,S1,alice,A,1001,aliddell,ID1\n"
    "eve,Eve Nakamura,eve@uni.edu,102,S2,eve,A,1002,enaka,ID2\n"
)


def _export(tmp_path, name) -> list[list[str]]:
    (tmp_path / "roster.csv").write_text(ROSTER, encoding="utf-8")
    ctx = WriteContext(roster=rs.Roster.read(tmp_path / "roster.csv"))
    batch = hostile_batch()[1:]
    assert write_requested(_args(tmp_path, [name]), batch, ctx), ctx.warnings
    assert not ctx.warnings
    raw = (tmp_path / f"{name}.out").read_bytes().decode("utf-8-sig")
    assert "\r\n" in raw  # RFC 4180 line ends
    return list(csv.reader(io.StringIO(raw)))


def test_canvas_export_is_canvas_gradebook_import_format(tmp_path):
    # Canvas Instructor Guide, "How do I import grades in the Gradebook?": header Student, ID,
    # SIS User ID, SIS Login ID, Section, then assignment columns ("Name" creates one,
    # "Name (id)" updates one); an optional "Points Possible" row; blank leaves a grade as is.
    rows = _export(tmp_path, "canvas")
    assert rows[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "00_start_here"]
    assert rows[1][0] == "Points Possible" and rows[1][5] == "2"
    by_id = {r[1]: r for r in rows[2:]}
    assert by_id["101"] == ["Alice Liddell", "101", "S1", "alice", "A", "2"]
    assert by_id["102"][5] == ""  # eve's notebook never ran: no grade, not 0


def test_gradescope_export_is_gradescopes_score_upload_format(tmp_path):
    # Gradescope Help, "Uploading scores for an offline assignment": Name, SID, Email,
    # Total Score; rows are matched by Email (else SID).
    rows = _export(tmp_path, "gradescope")
    assert rows[0] == ["Name", "SID", "Email", "Total Score"]
    assert rows[1] == ["Alice Liddell", "1001", "alice@uni.edu", "2"]
    assert rows[2][2] == "eve@uni.edu" and rows[2][3] == ""


def test_moodle_export_is_moodles_grade_import_format(tmp_path):
    # MoodleDocs "Import grades" (CSV): one identity column (Email address / ID number /
    # Username) and grade columns mapped to grade items; "Assignment: X (Real)" and
    # "(Feedback)" are the headers of Moodle's own plain-text export.
    rows = _export(tmp_path, "moodle")
    assert rows[0] == [
        "First name",
        "Last name",
        "ID number",
        "Username",
        "Email address",
        "Assignment: 00_start_here (Real)",
        "Assignment: 00_start_here (Feedback)",
    ]
    assert rows[1][:6] == ["Alice", "Liddell", "ID1", "aliddell", "alice@uni.edu", "2"]
    assert rows[2][5] == "" and rows[2][6].startswith("not graded: not valid JSON")


def test_an_lms_export_without_identities_warns(tmp_path):
    ctx = WriteContext()
    assert write_requested(_args(tmp_path, ["canvas"]), hostile_batch()[1:], ctx)
    assert ctx.warnings and "cannot match" in ctx.warnings[0]


# ----------------------------------------------------------------------------- the command line


def test_course_grade_options_come_from_the_registry():
    parser = argparse.ArgumentParser(prog="course grade")
    grade_cli.add_arguments(parser)
    text = parser.format_help()
    for w in WRITERS.values():
        assert f"--{w.name} {'DIR' if w.directory else 'F'}" in text
    for flag in ("--bom", "--roster", "--adjust", "--deadline", "--late-penalty"):
        assert flag in text
    assert "bubblewrap by default" not in text  # one wording of the sandbox default (F17)


def test_existing_outputs_match_the_recorded_fixtures(tmp_path):
    """JSON, JUnit, CSV, Classroom, feedback and --report of a fixed batch, byte for byte, as
    recorded in tests/fixtures/reports (regenerate with ``python tests/fixtures/reports/make.py``
    only for a deliberate change, and say which in the commit)."""
    import sys

    sys.path.insert(0, str(FIXTURES))
    try:
        from make import write_all
    finally:
        sys.path.pop(0)
    write_all(tmp_path)
    expected = sorted(p.relative_to(FIXTURES / "expected") for p in (FIXTURES / "expected").rglob("*") if p.is_file())  # fmt: skip
    got = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert got == expected
    for rel in expected:
        assert (tmp_path / rel).read_bytes() == (FIXTURES / "expected" / rel).read_bytes(), rel


def test_json_output_is_valid_and_junit_parses(tmp_path):
    rp.write_json(hostile_batch(), tmp_path / "g.json")
    data = json.loads((tmp_path / "g.json").read_text(encoding="utf-8"))
    assert data[0]["exercises"][1]["points"] == 0  # NaN never reaches a gradebook
    rp.write_junit(hostile_batch(), tmp_path / "g.xml")
    assert ET.parse(tmp_path / "g.xml").getroot().get("tests") == "4"
