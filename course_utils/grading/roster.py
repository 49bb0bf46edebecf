"""The instructor's inputs to a batch besides the notebooks: a roster, manual adjustments and
a late policy. All three are files (or flags) read again on every run, so a regrade or a
re-run of ``course grade`` gives the same adjusted gradebook.

Roster (``--roster students.csv``), one row per student, a header naming its columns:
``student`` (the name ``course grade`` gives the submission: the notebook's stem, or its
folder when every notebook is named alike) and any of ``name``, ``email``, ``canvas_id``,
``sis_user_id``, ``sis_login_id``, ``section``, ``sid`` (Gradescope), ``username`` and
``id_number`` (Moodle), ``submitted_at`` (ISO 8601, for the late policy). The LMS exports
take their identities from it.

Adjustments (``--adjust adjustments.csv``): ``student,item,points,reason``. ``item`` is an
exercise or question id; ``points`` is a new score (``1.5``) or a change (``+1``, ``-0.5``),
kept between 0 and the item's maximum. Each adjustment is recorded in the report (the
entry's ``adjusted`` and a note), so every export and the feedback show it.

Late policy (``--deadline WHEN --late-penalty P [--late-unit day|hour] [--late-max M]``):
a submission whose roster ``submitted_at`` is after the deadline loses ``P`` percent of its
total per started unit late, at most ``M`` percent. The time comes from the roster only:
a git commit date is chosen by whoever commits (``git commit --date``), so the grader never
reads lateness from a student's repository; export the submission times from GitHub
Classroom or the LMS into the roster.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROSTER_COLUMNS = (
    "student",
    "name",
    "email",
    "canvas_id",
    "sis_user_id",
    "sis_login_id",
    "section",
    "sid",
    "username",
    "id_number",
    "submitted_at",
)


class InputError(ValueError):
    """A roster, adjustment file or late policy that cannot be used (one line)."""


def _read_csv(path: str | Path, required: tuple[str, ...], what: str) -> list[dict[str, str]]:
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            rows = list(csv.DictReader(fh))
            header = [h.strip() for h in (rows[0].keys() if rows else [])]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise InputError(f"{what} {path}: {exc}") from None
    missing = [c for c in required if rows and c not in header]
    if missing:
        raise InputError(f"{what} {path}: no column {', '.join(missing)}")
    return [{(k or "").strip(): (v or "").strip() for k, v in row.items()} for row in rows]


@dataclass
class Roster:
    """Student name -> identity columns (see the module docstring)."""

    rows: dict[str, dict[str, str]] = field(default_factory=dict)

    @classmethod
    def read(cls, path: str | Path) -> Roster:
        rows = _read_csv(path, ("student",), "--roster")
        out: dict[str, dict[str, str]] = {}
        for row in rows:
            if row.get("student"):
                out[row["student"]] = row
        return cls(out)

    def get(self, student: str, column: str) -> str:
        return (self.rows.get(student) or {}).get(column, "")


def parse_time(text: str, what: str) -> datetime:
    """An ISO 8601 time; without a zone, UTC."""
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InputError(f"{what}: {text!r} is not an ISO 8601 time") from None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def _retotal(rep: dict[str, Any]) -> None:
    total = sum(float(e.get("points", 0)) for e in rep.get("exercises", []))
    late = (rep.get("late") or {}).get("penalty_percent", 0.0)
    total *= 1 - late / 100.0
    total = round(total, 4)
    rep["total"] = int(total) if float(total).is_integer() else total
    rep["percent"] = round(100.0 * total / rep["max"], 2) if rep.get("max") else 0.0


def read_adjustments(path: str | Path) -> list[dict[str, str]]:
    rows = _read_csv(path, ("student", "item", "points"), "--adjust")
    for row in rows:
        value = row["points"]
        try:
            float(value)
        except ValueError:
            raise InputError(f"--adjust {path}: points {value!r} is not a number") from None
    return rows


def apply_adjustments(reports: list[dict[str, Any]], rows: list[dict[str, str]]) -> list[str]:
    """Apply manual adjustments to the reports in place; returns warnings (an adjustment that
    matched no student or item)."""
    by_student = {r.get("student"): r for r in reports}
    warnings = []
    for row in rows:
        rep = by_student.get(row["student"])
        entry = next((e for e in (rep or {}).get("exercises", []) if e["id"] == row["item"]), None)
        if entry is None:
            warnings.append(f"--adjust: no item {row['item']!r} for student {row['student']!r}")
            continue
        before = float(entry["points"])
        value = row["points"]
        after = before + float(value) if value[:1] in "+-" else float(value)
        after = min(max(after, 0.0), float(entry["max_points"]))
        after = int(after) if after.is_integer() else after
        entry["points"] = after
        entry["adjusted"] = {"from": before, "reason": row.get("reason", "")}
        reason = f" ({row['reason']})" if row.get("reason") else ""
        rep["notes"].append(
            f"{entry['id']} adjusted by the instructor: {before:g} -> {after:g}{reason}"
        )
        _retotal(rep)
    return warnings


@dataclass(frozen=True)
class LatePolicy:
    deadline: datetime
    penalty_percent: float
    unit_hours: float = 24.0
    max_percent: float = 100.0

    def penalty(self, submitted: datetime) -> tuple[float, float]:
        """(hours late, penalty in percent) for a submission at ``submitted``."""
        late_h = (submitted - self.deadline).total_seconds() / 3600.0
        if late_h <= 0:
            return 0.0, 0.0
        units = math.ceil(late_h / self.unit_hours)
        return late_h, min(self.max_percent, units * self.penalty_percent)


def apply_late_policy(
    reports: list[dict[str, Any]], policy: LatePolicy, roster: Roster | None
) -> list[str]:
    """Scale the totals of late submissions in place (times from the roster's
    ``submitted_at``); returns warnings (a student without a time)."""
    if roster is None:
        raise InputError("--deadline needs --roster with a submitted_at column")
    warnings = []
    for rep in reports:
        stamp = roster.get(rep.get("student") or "", "submitted_at")
        if not stamp:
            warnings.append(f"late policy: no submitted_at for {rep.get('student')!r}; not applied")
            continue
        hours, pct = policy.penalty(
            parse_time(stamp, f"--roster submitted_at of {rep.get('student')}")
        )
        if pct:
            rep["late"] = {
                "submitted_at": stamp,
                "hours_late": round(hours, 2),
                "penalty_percent": pct,
            }
            rep["notes"].append(
                f"submitted {hours:.1f} h after the deadline: -{pct:g}% of the total"
            )
            _retotal(rep)
    return warnings
