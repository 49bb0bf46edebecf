"""``course grade --class-report DIR``: the class at a glance, for a batch of 10 generated
submissions (reports made from the recorded fixtures, no notebook executed).

The numbers are checked in Python (ranking of named mistakes, pass rates, hardest cases);
then the page is opened in Chromium from ``file://`` (as tests/test_browser.py opens the
site): its plots are drawn, the ranking is in order, nothing is requested from the network
and the console shows no errors. Without Chromium or Playwright the browser part is skipped
with the reason (fails under CI).
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest

from course_utils.grading import class_report as cr

FIXTURES = Path(__file__).parent / "fixtures" / "reports"


def ten_submissions() -> list[dict]:
    """alice (all right), carol (logsumexp wrong, misconception c), eve (damaged), and seven
    more variations: 4 make carol's mistake, 2 the global-max one, 5 answer (c)."""
    sys.path.insert(0, str(FIXTURES))
    try:
        from make import batch
    finally:
        sys.path.pop(0)
    alice, carol, eve = batch()
    out = [alice, carol, eve]
    for i in range(7):
        rep = copy.deepcopy(carol if i < 3 else alice)
        rep["student"] = f"student{i}"
        rep["notes"] = []
        if i >= 5:  # the global max in softmax
            ex = rep["exercises"][0]
            ex.update(
                status="failed",
                points=0,
                mistake="max subtracted over the whole tensor instead of per row",
                message="case 'rows of very different scale': 'softmax(x)' contains NaN. "
                "Likely mistake: max subtracted over the whole tensor instead of per row",
            )
            rep["total"] = sum(e["points"] for e in rep["exercises"])
            rep["percent"] = round(100 * rep["total"] / rep["max"], 2)
        if i == 3:  # misconception (c) only
            q = rep["exercises"][2]
            q.update(carol["exercises"][2])
            rep["total"] -= 1
            rep["percent"] = 75.0
        out.append(rep)
    return out


def test_class_report_ranks_mistakes_and_cases():
    s = cr.summarise(cr.as_reports(ten_submissions()))
    assert s["n"] == 10 and len(s["ungraded"]) == 1
    ranked = s["mistakes"].most_common()
    assert ranked[0] == (("00.Q1", "a huge logit simply wins"), 5)
    assert ranked[1] == (("00.2", "the maximum is not added back"), 4)
    assert dict(ranked)[("00.1", "max subtracted over the whole tensor instead of per row")] == 2
    assert s["items"][("00_start_here", "00.1")] == (7, 9)
    assert s["cases"][("00.2", "large logits")] == 4


def test_class_report_html_escapes_student_text(tmp_path):
    reps = ten_submissions()
    reps[0]["student"] = "<script>alert(1)</script>"
    reps[2]["student"] = "<img src=x onerror=alert(1)>"
    page = cr.write_class_report(reps, tmp_path).read_text(encoding="utf-8")
    assert "<script>" not in page and "<img" not in page
    assert "Content-Security-Policy" in page


def _browser():
    sys.path.insert(0, str(Path(__file__).parent))
    from test_browser import CHROMIUM, CHROMIUM_ARGS, _require_browser

    return _require_browser(), CHROMIUM, CHROMIUM_ARGS


@pytest.mark.browser
def test_class_report_opens_in_chromium_with_its_plots(tmp_path):
    sync_playwright, chromium, args = _browser()
    path = cr.write_class_report(ten_submissions(), tmp_path / "class")
    errors: list[str] = []
    remote: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=args, headless=True)
        try:
            page = browser.new_context(viewport={"width": 1200, "height": 900}).new_page()
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on(
                "request",
                lambda r: (
                    remote.append(r.url) if not r.url.startswith(("file:", "data:")) else None
                ),
            )
            page.goto(path.as_uri(), wait_until="load")
            facts = page.evaluate(
                """() => ({
                    hist: [...document.querySelectorAll('svg.histogram')].map(
                        s => [s.getBoundingClientRect().width, s.querySelectorAll('rect').length]),
                    passBars: document.querySelectorAll('svg.pass-rates rect').length,
                    mistakeRows: [...document.querySelectorAll('table.mistakes tr')].slice(1).map(
                        r => [r.cells[2].innerText, Number(r.cells[3].innerText)]),
                    caseRows: document.querySelectorAll('table.cases tr').length - 1,
                    text: document.body.innerText,
                })"""
            )
            page.screenshot(path=str(tmp_path / "class-report.png"), full_page=True)
        finally:
            browser.close()
    assert facts["hist"] == [[facts["hist"][0][0], 10]] and facts["hist"][0][0] > 100
    assert facts["passBars"] == 3
    counts = [k for _, k in facts["mistakeRows"]]
    assert counts == sorted(counts, reverse=True) and counts[0] == 5
    assert facts["mistakeRows"][0][0] == "a huge logit simply wins"
    assert facts["caseRows"] >= 2 and "10 submissions, 9 graded" in facts["text"]
    assert not remote and not errors, (remote, errors)
