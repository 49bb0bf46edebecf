"""Each LMS export read back the way that LMS's importer reads it (issue 35: "a test imports
each LMS export into that LMS's documented column format").

The readers below restate, in Python, the rules each export module cites in its docstring:

- Canvas: ``app/models/gradebook_importer.rb`` (header ``Student``, ``ID``, [``SIS User ID``,
  ``SIS Login ID``], ``Section``, then assignments ``Name`` / ``Name (id)``; a
  ``Points Possible`` row; students by ID, SIS ids, then name);
- Moodle: MoodleDocs "Grade import" and ``grade/import/csv/classes/load_data.php`` (one
  identity column mapped to useremail / useridnumber / username, grade and feedback columns
  mapped to an item; a blank identity keeps the previous row's student);
- Gradescope: the roster's unique Email (else SID) and the ``Total Score`` column.

So a change of column name, order or row shape that the LMS would refuse (or, worse, read
into the wrong student) fails here. No notebook is executed.
"""

from __future__ import annotations

import argparse
import csv
import io
import re
from pathlib import Path

import pytest
import test_report_writers as rw

from course_utils.grading import roster as rs
from course_utils.grading.exports import canvas, gradescope, moodle
from course_utils.grading.writers import WRITERS, WriteContext, write_requested

ROSTER = (
    "student,name,email,canvas_id,sis_user_id,sis_login_id,section,sid,username,id_number\n"
    "alice,Alice Liddell,alice@uni.edu,101,S1,alice,A,1001,aliddell,ID1\n"
    "bob,Bob Stone,bob@uni.edu,102,S2,bob,B,1002,bstone,ID2\n"
    "eve,Eve Nakamura,eve@uni.edu,103,S3,eve,A,1003,enaka,ID3\n"
)

# what each LMS holds about its students: its own ids -> the student
LMS_USERS = {
    "canvas": {
        "101": "alice",
        "102": "bob",
        "103": "eve",
        "sis:S2": "bob",
        "name:Eve Nakamura": "eve",
    },
    "gradescope": {"alice@uni.edu": "alice", "bob@uni.edu": "bob", "eve@uni.edu": "eve"},
    "moodle": {"alice@uni.edu": "alice", "bob@uni.edu": "bob", "eve@uni.edu": "eve"},
}


def entry(ex_id, points, max_points, status="passed"):
    """One graded item, as the report writers' tests build it (points first here)."""
    return rw.entry(ex_id, status, points, max_points)


report = rw.report  # one report builder for the writers' and the LMS formats' tests


def batch():
    """alice 4/4, bob 2.5/4, eve's notebook never ran (blank, not 0)."""
    eve = report("eve", [entry("00.1", 0, 2, "error"), entry("00.2", 0, 2, "error")])
    eve.update(error="not valid JSON", error_kind="bad_input")
    return [
        report("alice", [entry("00.1", 2, 2), entry("00.2", 2, 2)]),
        report("bob", [entry("00.1", 2, 2), entry("00.2", 0.5, 2, "failed")]),
        eve,
    ]


def export(tmp_path: Path, lms: str, roster_text: str = ROSTER, reports=None, bom=False):
    (tmp_path / "roster.csv").write_text(roster_text, encoding="utf-8")
    ctx = WriteContext(roster=rs.Roster.read(tmp_path / "roster.csv"), bom=bom)
    values = {w.dest: None for w in WRITERS.values()}
    values[WRITERS[lms].dest] = str(tmp_path / f"{lms}.csv")
    assert write_requested(argparse.Namespace(**values), reports or batch(), ctx)
    return (tmp_path / f"{lms}.csv").read_bytes(), ctx.warnings


# ----------------------------------------------------------------------------- Canvas

TITLE_AND_ID = re.compile(r"\A(.*)\s+\((\d+)\)\Z")  # Assignment.title_and_id
DERIVED = re.compile(
    r"Current Score|Current Points|Current Grade|Final Score|Final Points|Final Grade"
)


def canvas_import(raw: bytes, users: dict[str, str]):
    """gradebook_importer.rb, as far as a file decides: the header check, the student columns,
    the Points Possible row, assignment titles and ids, and how a row finds its student."""
    text = raw.decode("utf-8")  # Ruby's CSV keeps a byte-order mark in the first cell
    rows = [r for r in csv.reader(io.StringIO(text)) if any(c.strip() for c in r)]
    header = rows[0]
    # row_has_student_headers? and update_column_count
    assert len(header) > 3 and re.search("Student", header[0]) and re.search("ID", header[1])
    student_columns, sis_user, sis_login = 3, None, None
    if re.search(r"SIS\s+Login\s+ID", header[2]):
        sis_login, student_columns = 2, 4
    elif re.search(r"SIS\s+User\s+ID", header[2]) and re.search(r"SIS\s+Login\s+ID", header[3]):
        sis_user, sis_login, student_columns = 2, 3, 5
    assert re.search("Section", header[student_columns - 1]), "Invalid header row"
    titles = header[student_columns:]
    while titles and DERIVED.search(titles[-1]):
        titles.pop()
    assignments = []
    for name in titles:
        m = TITLE_AND_ID.match(name)
        assignments.append({"title": m.group(1) if m else name, "id": m.group(2) if m else None})
    grades: dict[str, dict[str, str]] = {}
    for row in rows[1:]:
        if re.search("Points Possible", row[0]):
            for a, value in zip(assignments, row[student_columns:]):
                a["points_possible"] = value
            continue
        student = users.get(row[1])
        for col in (sis_user, sis_login):  # then the SIS ids Canvas holds for its users
            if student is None and col is not None and row[col]:
                student = users.get(f"sis:{row[col]}")
        student = student or users.get(f"name:{row[0]}")
        assert student, f"Canvas would list {row[0]!r} as a student it does not know"
        grades[student] = {a["title"]: g for a, g in zip(assignments, row[student_columns:])}
    return assignments, grades


def test_canvas_reads_the_export_as_its_gradebook_importer_does(tmp_path):
    raw, warnings = export(tmp_path, "canvas")
    assert not warnings
    assignments, grades = canvas_import(raw, LMS_USERS["canvas"])
    assert assignments == [{"title": "00_start_here", "id": None, "points_possible": "4"}]
    assert grades == {
        "alice": {"00_start_here": "4"},
        "bob": {"00_start_here": "2.5"},
        "eve": {"00_start_here": ""},  # never ran: blank, not 0
    }


def test_canvas_updates_the_assignment_the_roster_names_by_id(tmp_path):
    roster = ROSTER.replace("id_number\n", "id_number,canvas_assignment_id\n").replace(
        "ID1\n", "ID1,5577\n"
    )
    raw, _ = export(tmp_path, "canvas", roster)
    assignments, _ = canvas_import(raw, LMS_USERS["canvas"])
    assert assignments[0]["title"] == "00_start_here" and assignments[0]["id"] == "5577"


def test_canvas_finds_a_student_by_sis_id_then_by_name(tmp_path):
    roster = ROSTER.replace(",102,S2,", ",,S2,").replace(",103,S3,eve,", ",,,,")
    raw, _ = export(tmp_path, "canvas", roster)
    users = {k: v for k, v in LMS_USERS["canvas"].items() if k not in ("102", "103")}
    assert canvas_import(raw, users)[1] == {
        "alice": {"00_start_here": "4"},
        "bob": {"00_start_here": "2.5"},
        "eve": {"00_start_here": ""},
    }


def test_canvas_header_survives_the_byte_order_mark(tmp_path):
    raw, _ = export(tmp_path, "canvas", bom=True)
    assert raw.startswith(b"\xef\xbb\xbfStudent,ID,SIS User ID,SIS Login ID,Section,")
    assert canvas_import(raw, LMS_USERS["canvas"])[1]["alice"] == {"00_start_here": "4"}


def test_canvas_header_is_the_documented_one():
    assert canvas.HEADER == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]


# ----------------------------------------------------------------------------- Gradescope


def gradescope_import(raw: bytes, users_by_email: dict[str, str], users_by_sid: dict[str, str]):
    rows = list(csv.DictReader(io.StringIO(raw.decode("utf-8-sig"))))
    assert rows and {"Name", "Email", "SID", "Total Score"} <= set(rows[0])
    scores = {}
    for row in rows:
        student = users_by_email.get(row["Email"]) or users_by_sid.get(row["SID"])
        assert student, f"Gradescope would report {row['Name']!r} as not on the roster"
        assert student not in scores, "two rows for one roster member"
        scores[student] = row["Total Score"]
    return scores


def test_gradescope_reads_the_export_by_email_then_sid(tmp_path):
    raw, warnings = export(tmp_path, "gradescope")
    assert not warnings
    by_sid = {"1001": "alice", "1002": "bob", "1003": "eve"}
    assert gradescope_import(raw, LMS_USERS["gradescope"], by_sid) == {
        "alice": "4",
        "bob": "2.5",
        "eve": "",
    }
    no_email = ROSTER.replace("bob@uni.edu", "")
    raw, warnings = export(tmp_path, "gradescope", no_email)
    assert gradescope_import(raw, LMS_USERS["gradescope"], by_sid)["bob"] == "2.5"  # by SID
    assert gradescope.HEADER == ["Name", "SID", "Email", "Total Score"]


# ----------------------------------------------------------------------------- Moodle

COLUMN = re.compile(r"\A(?P<module>[^:]+): (?P<item>.+) \((?P<extra>Real|Feedback)\)\Z")
MAP_TO = {"Email address": "useremail", "ID number": "useridnumber", "Username": "username"}


def moodle_import(raw: bytes, map_from: str, users: dict[str, str]):
    """load_data.php's prepare_import_grade_data, for one identity column and one item:
    studentid is NOT reset between rows, a first row without one aborts the import."""
    rows = list(csv.reader(io.StringIO(raw.decode("utf-8-sig"))))
    header = rows[0]
    assert map_from in MAP_TO, f"Moodle cannot identify users by {map_from!r}"
    items = {}
    for i, name in enumerate(header):
        m = COLUMN.match(name)
        if m:
            items.setdefault(m["item"], {})[m["extra"]] = i
    assert len(items) == 1, header
    ((item, cols),) = items.items()
    assert set(cols) == {"Real", "Feedback"}  # MoodleDocs Note 3: feedback comes with grades
    key = header.index(map_from)
    grades, feedback, studentid = {}, {}, None
    for line in rows[1:]:
        if len(line) <= 1:
            continue
        if line[key].strip():
            studentid = users.get(line[key].strip())
            assert studentid, "User not found: Moodle aborts the whole import"
        assert studentid, "no user mapping for the first row: Moodle aborts the whole import"
        value = line[cols["Real"]].strip()
        grades[studentid] = None if value in ("", "-") else float(value)
        feedback[studentid] = line[cols["Feedback"]]
    return item, grades, feedback


def test_moodle_reads_the_export_by_the_identity_it_is_mapped_to(tmp_path):
    raw, warnings = export(tmp_path, "moodle")
    assert not warnings
    for map_from, users in (
        ("Email address", LMS_USERS["moodle"]),
        ("ID number", {"ID1": "alice", "ID2": "bob", "ID3": "eve"}),
        ("Username", {"aliddell": "alice", "bstone": "bob", "enaka": "eve"}),
    ):
        item, grades, feedback = moodle_import(raw, map_from, users)
        assert item == "00_start_here"
        assert grades == {"alice": 4.0, "bob": 2.5, "eve": None}  # eve: "no grade"
        assert feedback["bob"] == "00.1 2/2; 00.2 0.5/2"
        assert feedback["eve"].startswith("not graded: not valid JSON")
    assert moodle.IDENTITY[:2] == ["First name", "Last name"]


def test_moodle_leaves_out_a_student_without_identity_so_no_grade_lands_on_another(tmp_path):
    """A row with a blank identity would keep the previous row's student in Moodle's importer:
    bob's grade would have been written into alice's gradebook."""
    roster = ROSTER.replace("bob@uni.edu,102,S2,bob,B,1002,bstone,ID2", ",102,S2,bob,B,1002,,")
    raw, warnings = export(tmp_path, "moodle", roster)
    _, grades, _ = moodle_import(raw, "Email address", LMS_USERS["moodle"])
    assert grades == {"alice": 4.0, "eve": None}
    assert any("bob" in w for w in warnings)


def test_moodle_warns_when_an_identity_column_is_blank_in_some_rows(tmp_path):
    roster = ROSTER.replace("1001,aliddell,ID1", "1001,,ID1")  # alice has no username
    raw, warnings = export(tmp_path, "moodle", roster)
    assert len(warnings) == 1 and "Username is blank in some rows" in warnings[0]
    assert "identify users by Email address or ID number" in warnings[0]
    assert moodle_import(raw, "Email address", LMS_USERS["moodle"])[1]["alice"] == 4.0
    with pytest.raises(AssertionError, match="first row"):
        moodle_import(raw, "Username", {"bstone": "bob", "enaka": "eve"})
