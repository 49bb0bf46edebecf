"""The class at a glance: ``course grade --class-report DIR`` writes ``DIR/index.html``.

One offline page (no script, no network: every plot is inline SVG) with:

- the score distribution of each assignment (a histogram of percentages, in tenths);
- the pass rate of each exercise and question;
- the named mistakes and misconceptions, ranked by how many students made them (the
  ``mistake`` of a failed exercise or question: the same names the students' feedback uses);
- the hardest cases: the check cases named in failure messages, by how many students failed
  them;
- the submissions that could not be graded.

Student text never reaches the page unescaped: every string goes through :func:`html.escape`
after the report's own cleaning (:class:`course_utils.grading.report.Report`).
"""

from __future__ import annotations

import html
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from course_utils.grading.plan import id_key
from course_utils.grading.report import Report, as_reports
from course_utils.grading.reports import write_atomic

_CASE = re.compile(r"case '([^']{1,120})'")
_MISCONCEPTION = re.compile(r"is a common misconception — ([^.]{1,160})\.")
BAR_W, ROW_H = 360, 22

CSS = """
body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}
h1{font-size:1.6rem}h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #ddd}
table{border-collapse:collapse}td,th{padding:.2rem .6rem;border-bottom:1px solid #eee;text-align:left}
td.n{text-align:right}svg text{font-size:12px;font-family:system-ui,sans-serif}
.muted{color:#666}
"""


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _assignment(rep: Report) -> str:
    return rep.assignment or Path(rep.notebook).stem


def histogram_svg(percents: list[float], label: str) -> str:
    """Bars of how many submissions scored 0-9 %, 10-19 %, ... 90-100 %."""
    bins = [0] * 10
    for p in percents:
        bins[min(9, max(0, int(p // 10)))] += 1
    top = max(bins) or 1
    w, h, pad = 34, 120, 20
    parts = [
        f'<svg class="histogram" role="img" aria-label="{_e(label)}" width="{10 * w + 2 * pad}" '
        f'height="{h + 3 * pad}" xmlns="http://www.w3.org/2000/svg">'
    ]
    for i, n in enumerate(bins):
        bh = round(h * n / top)
        x, y = pad + i * w, pad + h - bh
        parts.append(
            f'<rect x="{x + 2}" y="{y}" width="{w - 4}" height="{bh}" fill="#4a7bd0">'
            f"<title>{i * 10}-{min(100, i * 10 + 9 + (i == 9))} %: {n}</title></rect>"
        )
        parts.append(f'<text x="{x + w / 2}" y="{y - 4}" text-anchor="middle">{n or ""}</text>')
        parts.append(
            f'<text x="{x + w / 2}" y="{pad + h + 14}" text-anchor="middle">{i * 10}</text>'
        )
    parts.append(f'<text x="{pad}" y="{h + 3 * pad - 4}">percent of the points</text></svg>')
    return "".join(parts)


def bars_svg(rows: list[tuple[str, float, str]], label: str, css_class: str) -> str:
    """Horizontal bars: (name, value in 0..1, text at the bar's end)."""
    left = 260
    height = ROW_H * len(rows) + 8
    parts = [
        f'<svg class="{css_class}" role="img" aria-label="{_e(label)}" '
        f'width="{left + BAR_W + 90}" height="{height}" xmlns="http://www.w3.org/2000/svg">'
    ]
    for i, (name, value, text) in enumerate(rows):
        y = 4 + i * ROW_H
        short = name if len(name) <= 36 else name[:35] + "…"
        parts.append(f'<text x="{left - 6}" y="{y + 15}" text-anchor="end">{_e(short)}</text>')
        parts.append(
            f'<rect x="{left}" y="{y + 2}" width="{round(BAR_W * max(0.0, min(1.0, value)))}" '
            f'height="{ROW_H - 6}" fill="#d0704a"><title>{_e(name)}: {_e(text)}</title></rect>'
        )
        parts.append(
            f'<text x="{left + round(BAR_W * max(0.0, min(1.0, value))) + 6}" y="{y + 15}">'
            f"{_e(text)}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _mistake(entry) -> str | None:
    if entry.mistake:
        return entry.mistake
    m = _MISCONCEPTION.search(entry.message or "")
    return m.group(1) if m else None


def summarise(reports: list[Report]) -> dict[str, Any]:
    """The numbers behind the page (also handy for tests)."""
    graded = [r for r in reports if r.graded]
    scores: dict[str, list[float]] = defaultdict(list)
    items: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    titles: dict[tuple[str, str], str] = {}
    mistakes: dict[tuple[str, str], set[str]] = defaultdict(set)
    cases: dict[tuple[str, str], set[str]] = defaultdict(set)
    for rep in graded:
        a = _assignment(rep)
        scores[a].append(float(rep.percent))
        for ex in rep.exercises:
            key = (a, ex.id)
            titles[key] = ex.title
            items[key][0] += ex.status == "passed"
            items[key][1] += 1
            if ex.status == "passed":
                continue
            name = _mistake(ex)
            if name:
                mistakes[(ex.id, name)].add(rep.student)
            for case in set(_CASE.findall(ex.message or "")):
                cases[(ex.id, case)].add(rep.student)
    return {
        "scores": dict(scores),
        "items": {k: tuple(v) for k, v in items.items()},
        "titles": titles,
        "mistakes": Counter({k: len(v) for k, v in mistakes.items()}),
        "cases": Counter({k: len(v) for k, v in cases.items()}),
        "ungraded": [r for r in reports if not r.graded],
        "n": len(reports),
    }


def _section_scores(s: dict[str, Any]) -> list[str]:
    out = ["<h2 id='scores'>Score distribution</h2>"]
    for a, percents in sorted(s["scores"].items()):
        mean = sum(percents) / len(percents)
        out.append(
            f"<h3>{_e(a)}</h3><p class='muted'>{len(percents)} graded, mean {mean:.0f} %, "
            f"median {sorted(percents)[len(percents) // 2]:.0f} %</p>"
        )
        out.append(histogram_svg(percents, f"score distribution of {a}"))
    return out


def _section_items(s: dict[str, Any]) -> list[str]:
    rows = []
    for (a, ex_id), (passed, n) in sorted(
        s["items"].items(), key=lambda kv: (kv[0][0], id_key(kv[0][1]))
    ):
        rows.append((f"{ex_id} {s['titles'][(a, ex_id)]}", passed / n, f"{passed}/{n} passed"))
    out = ["<h2 id='items'>Pass rate per exercise and question</h2>"]
    return out + [bars_svg(rows, "pass rate per exercise", "pass-rates") if rows else "<p>none</p>"]


def _ranked(counter: Counter, n: int, heading: str, anchor: str, what: str) -> list[str]:
    out = [f"<h2 id='{anchor}'>{heading}</h2>"]
    if not counter:
        return out + [f"<p>No {what} recorded.</p>"]
    top = counter.most_common(30)
    rows = [(f"{ex_id}: {name}", k / max(n, 1), f"{k} students") for (ex_id, name), k in top]
    out.append(bars_svg(rows, heading, anchor))
    out.append(
        f"<table class='{anchor}'><tr><th>#</th><th>item</th><th>{what}</th><th>students</th></tr>"
    )
    for i, ((ex_id, name), k) in enumerate(top, 1):
        out.append(
            f"<tr><td class='n'>{i}</td><td>{_e(ex_id)}</td><td>{_e(name)}</td>"
            f"<td class='n'>{k}</td></tr>"
        )
    return out + ["</table>"]


def class_report_html(reports: list[Any]) -> str:
    """The whole page."""
    reps = as_reports(reports)
    s = summarise(reps)
    body = [
        f"<h1>The class at a glance</h1><p>{s['n']} submissions, {s['n'] - len(s['ungraded'])} graded.</p>"
    ]
    body += _section_scores(s) + _section_items(s)
    body += _ranked(
        s["mistakes"], s["n"], "Named mistakes and misconceptions", "mistakes", "mistake"
    )
    body += _ranked(s["cases"], s["n"], "Hardest cases", "cases", "case")
    if s["ungraded"]:
        body.append("<h2 id='ungraded'>Not graded</h2><ul>")
        body += [f"<li>{_e(r.student)}: {_e(r.error or r.error_kind)}</li>" for r in s["ungraded"]]
        body.append("</ul>")
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; "
        "style-src 'unsafe-inline'; img-src data:\">"
        f"<title>Class report</title><style>{CSS}</style></head><body>"
        + "\n".join(body)
        + "</body></html>\n"
    )


def write_class_report(reports: list[Any], directory: str | Path) -> Path:
    """``directory/index.html``; returns its path."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "index.html"
    write_atomic(path, class_report_html(reports))
    return path
