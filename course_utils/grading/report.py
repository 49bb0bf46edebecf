"""The grading report as one typed schema: :class:`Report` and :class:`ReportEntry`.

The grader hands its reports over as plain dicts (the JSON of ``course grade --json``; the
keys are documented in :mod:`course_utils.grading`). Every report writer first turns each
one into a :class:`Report` with :meth:`Report.from_dict`, and that is where student text is
made safe, once, for every writer:

- lone surrogates (a file name that is not UTF-8, a ``"\\ud800"`` in a notebook's JSON)
  become U+FFFD, so no writer fails to encode them;
- control characters other than newline and tab become ``?`` (ANSI escapes, NUL, carriage
  returns, bidirectional overrides); names and ids lose newlines and tabs too;
- a line that starts with ``::`` (a GitHub Actions workflow command such as
  ``::add-mask::`` or ``::stop-commands::``) gets a space between the colons.

Keys a writer does not know (``kernel``, ``cells``, ``sandbox``, ``similarity``, an
exercise's ``mistake``...) are kept as they are, in their order, so the JSON report is the
grader's own.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")
_CONTROL_TEXT = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_CONTROL_NAME = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_WORKFLOW_COMMAND = re.compile(r"^(\s*):(?=:)", re.M)

#: ``error_kind`` values of a submission whose notebook never ran: no score to export.
UNGRADED_KINDS = ("bad_input", "usage", "busy")


def fix_surrogates(text: str) -> str:
    """``text`` encodable as UTF-8: a name read with ``surrogateescape`` (bytes that are not
    UTF-8) decoded again with replacement characters, any other lone surrogate as U+FFFD."""
    if not _SURROGATE.search(text):
        return text
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)


def clean_text(value: Any) -> str:
    """Student text (a message, a note) safe for every report: see the module docstring."""
    text = _CONTROL_TEXT.sub("?", fix_surrogates(str(value)))
    return _WORKFLOW_COMMAND.sub(r"\1: ", text)


def clean_name(value: Any) -> str:
    """A name or id on one line: :func:`clean_text` with newlines and tabs as ``?`` too."""
    text = _CONTROL_NAME.sub("?", fix_surrogates(str(value)))
    return _WORKFLOW_COMMAND.sub(r"\1: ", text)


def _points(value: Any) -> float | int:
    """A point count as a finite number (a NaN or a string never reaches a gradebook)."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float)):
        return value if math.isfinite(value) else 0
    try:
        x = float(value)
    except (TypeError, ValueError):
        return 0
    return x if math.isfinite(x) else 0


def _clean_any(value: Any) -> Any:
    """Strings inside nested dicts and lists cleaned (keys too), everything else as is."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_name(k): _clean_any(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean_any(v) for v in value]
    return value


@dataclass
class ReportEntry:
    """One exercise or question of a report."""

    id: str
    title: str
    points: float
    max_points: float
    status: str
    message: str = ""
    flags: list[str] = field(default_factory=list)
    runtime_s: float = 0.0
    kind: str | None = None  # "question" for a graded question, else absent
    mistake: str | None = None  # the named mistake a failed check recognised
    extra: dict[str, Any] = field(default_factory=dict)
    order: list[str] = field(default_factory=list, repr=False)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ReportEntry:
        known = {f.name for f in dataclasses.fields(cls)} - {"extra", "order"}
        return cls(
            id=clean_name(d.get("id", "")),
            title=clean_name(d.get("title", "")),
            points=_points(d.get("points", 0)),
            max_points=_points(d.get("max_points", 0)),
            status=clean_name(d.get("status", "error")),
            message=clean_text(d.get("message") or ""),
            flags=[clean_text(f) for f in d.get("flags") or []],
            runtime_s=_points(d.get("runtime_s", 0.0)),
            kind=d.get("kind"),
            mistake=clean_text(d["mistake"]) if d.get("mistake") else None,
            extra={k: _clean_any(v) for k, v in d.items() if k not in known},
            order=list(d),
        )

    def to_dict(self) -> dict[str, Any]:
        return _ordered(self, ("kind", "mistake"))


@dataclass
class Report:
    """One submission's report (the schema of :mod:`course_utils.grading`)."""

    notebook: str
    student: str = ""
    assignment: str | None = None
    total: float = 0
    max: float = 0
    percent: float = 0.0
    exercises: list[ReportEntry] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    error_kind: str | None = None
    runtime_s: float = 0.0
    seed: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    order: list[str] = field(default_factory=list, repr=False)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | Report) -> Report:
        """The typed, cleaned form of a grader's report dict (a Report is returned as is)."""
        if isinstance(d, Report):
            return d
        known = {f.name for f in dataclasses.fields(cls)} - {"extra", "order"}
        return cls(
            notebook=clean_name(d.get("notebook", "")),
            student=clean_name(d.get("student") or ""),
            assignment=clean_name(d["assignment"]) if d.get("assignment") else d.get("assignment"),
            total=_points(d.get("total", 0)),
            max=_points(d.get("max", 0)),
            percent=_points(d.get("percent", 0.0)),
            exercises=[ReportEntry.from_dict(e) for e in d.get("exercises") or []],
            flags=[clean_text(f) for f in d.get("flags") or []],
            notes=[clean_text(n) for n in d.get("notes") or []],
            error=clean_text(d["error"]) if d.get("error") else d.get("error"),
            error_kind=d.get("error_kind"),
            runtime_s=_points(d.get("runtime_s", 0.0)),
            seed=d.get("seed"),
            extra={k: _clean_any(v) for k, v in d.items() if k not in known},
            order=list(d),
        )

    def to_dict(self) -> dict[str, Any]:
        """The report dict again, keys in the grader's order (new keys last)."""
        return _ordered(self, ())

    @property
    def graded(self) -> bool:
        """False when the notebook never ran (damaged, another assignment, machine busy, a
        missing file): a gradebook leaves its score blank rather than writing 0."""
        return self.error_kind not in UNGRADED_KINDS and not self.extra.get("missing")

    @property
    def name(self) -> str:
        """The student, else the notebook."""
        return self.student or self.notebook


def _ordered(obj: Any, optional: tuple[str, ...]) -> dict[str, Any]:
    """``obj``'s fields and extras as a dict in its source order; ``optional`` fields only
    when set or present in the source."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        if f.name in ("extra", "order"):
            continue
        value = getattr(obj, f.name)
        if f.name in optional and value is None and f.name not in obj.order:
            continue
        if f.name == "exercises":
            value = [e.to_dict() for e in value]
        values[f.name] = value
    values.update(obj.extra)
    out = {k: values.pop(k) for k in obj.order if k in values}
    out.update(values)
    return out


def as_reports(items: list[Any]) -> list[Report]:
    """Typed, cleaned reports from grader dicts or Reports."""
    return [Report.from_dict(r) for r in items]
