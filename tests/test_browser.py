"""The student's path in a real browser: JupyterLab served locally, driven by Playwright with the
system's Chromium (Debian's ``chromium``; Playwright's own browser download is not needed).

Student notebook 03 (released from the solution into a temporary folder, ``ci`` profile) gets
one correct answer (03.1) and one wrong answer (03.2, keys and values swapped); then
Run All, as a student would. Asserted: every code cell ran (the notebook, saved from the
browser, has an execution count in each), the verdict lines read PASSED and FAILED with the
hint and no traceback, the explorer's ``d`` renders as a slider with one live figure under it,
moving the slider changes that figure, and the browser console shows no errors.

The course site (``course site``, built once per session into a temporary folder) is opened too:
three pages from ``file://``, as a reader who downloaded it would: MathJax (bundled) typeset the
math, every figure loaded with a non-zero size, every hint is collapsed, nothing was requested
from the network and the console shows no errors; the index's search finds a section.

Screenshots go to ``$COURSE_BROWSER_SCREENSHOTS`` (default ``/tmp/course-browser-screenshots``),
outside the repository; CI keeps that folder. Without Chromium or Playwright the test fails
when ``CI`` is set (a CI machine must run it: ``.ci/run`` installs both) and is skipped with
the reason on a developer's machine. Budget: about two minutes.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest
from site_testing import built_site

from course_utils.authoring import release

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = "03_scaled_dot_product.ipynb"
SCREENSHOTS = Path(os.environ.get("COURSE_BROWSER_SCREENSHOTS", "/tmp/course-browser-screenshots"))
CHROMIUM = os.environ.get("COURSE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
RUN_ALL_TIMEOUT_S = 150

pytestmark = [pytest.mark.slow, pytest.mark.browser]

CORRECT_03_1 = '''def scaled_dot_product_attention(q, k, v, attn_mask=None):
    """softmax(q k^T / sqrt(Dk)) v over any leading batch dims."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights'''

WRONG_03_2 = '''def qkv_attention(queries, x, W_q, W_k, W_v):
    """Keys and values swapped: a classic slip the check names."""
    return sdpa(queries @ W_q, x @ W_v, x @ W_k)'''


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def _require_browser():
    """Playwright's sync API and the Chromium binary, or fail (CI) / skip (elsewhere)."""
    problems = []
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
        problems.append("the Python package `playwright` is not installed (pip install playwright)")
    if not (Path(CHROMIUM).is_file() and os.access(CHROMIUM, os.X_OK)):
        problems.append(
            f"no Chromium at {CHROMIUM} (apt-get install -y chromium, or set COURSE_CHROMIUM)"
        )
    if problems:
        reason = "browser test cannot run: " + "; ".join(problems)
        if _in_ci():
            pytest.fail(reason + " (CI is set: .ci/run installs both)")
        pytest.skip(reason)
    return sync_playwright


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _student_notebook(folder: Path) -> Path:
    """The released notebook 03 with a right answer to 03.1 and a wrong one to 03.2."""
    nb = nbformat.reads(release.release_file(REPO / "solutions" / NOTEBOOK), as_version=4)
    answers = {"ex-03-1": CORRECT_03_1, "ex-03-2": WRONG_03_2}
    for cell in nb.cells:
        if cell.get("id") in answers:
            cell.source = answers.pop(cell.id)
    assert not answers, f"exercise cells not found in {NOTEBOOK}: {sorted(answers)}"
    path = folder / NOTEBOOK
    nbformat.write(nb, path)
    return path


def _jupyter_dirs(base: Path) -> dict[str, str]:
    """Private Jupyter config/data/runtime folders: no user settings leak in, no news fetched,
    and every notebook cell stays in the page (no windowing) so the test can read them all."""
    config, settings = base / "config", base / "settings"
    (config / "labconfig").mkdir(parents=True)
    (config / "labconfig" / "page_config.json").write_text(
        json.dumps(
            {
                "disabledExtensions": {
                    "@jupyterlab/apputils-extension:announcements": True,
                    "@jupyterlab/extensionmanager-extension": True,
                }
            }
        )
    )
    tracker = settings / "@jupyterlab" / "notebook-extension"
    tracker.mkdir(parents=True)
    (tracker / "tracker.jupyterlab-settings").write_text(
        json.dumps({"windowingMode": "none", "autoStartDefaultKernel": True})
    )
    return {
        "JUPYTER_CONFIG_DIR": str(config),
        "JUPYTER_DATA_DIR": str(base / "data"),
        "JUPYTER_RUNTIME_DIR": str(base / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(settings),
        "JUPYTERLAB_WORKSPACES_DIR": str(base / "workspaces"),
        "IPYTHONDIR": str(base / "ipython"),
    }


@pytest.fixture
def lab(tmp_path):
    """A JupyterLab server on a free local port, serving a folder with the notebook."""
    work = tmp_path / "work"
    work.mkdir()
    path = _student_notebook(work)
    port, token = _free_port(), "course-browser-test"
    env = dict(os.environ, COURSE_PROFILE="ci", PYTHONHASHSEED="0")
    env.pop("MPLBACKEND", None)  # the kernel draws inline, as in a student's JupyterLab
    env.update(_jupyter_dirs(tmp_path / "jupyter"))
    log = (tmp_path / "lab.log").open("w")
    cmd = [
        sys.executable,
        "-m",
        "jupyter",
        "lab",
        "--no-browser",
        "--allow-root",
        "--ip=127.0.0.1",
        f"--port={port}",
        f"--ServerApp.token={token}",
        f"--ServerApp.root_dir={work}",
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]
    server = subprocess.Popen(cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    pytest.fail(
                        "JupyterLab did not start:\n" + (tmp_path / "lab.log").read_text()[-4000:]
                    )
                time.sleep(0.5)
        yield base, token, path
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def _shot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


@pytest.fixture
def playwright_api():
    """Playwright's sync API, checked before any server starts."""
    return _require_browser()


def test_run_all_in_jupyterlab_reaches_the_end_with_verdicts_and_a_live_slider(playwright_api, lab):
    sync_playwright = playwright_api
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    base, token, path = lab
    for old in SCREENSHOTS.glob("*.png"):  # this test's own; the site test's are in site/
        old.unlink()
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            page = context.new_page()
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
            page.goto(f"{base}/lab/tree/{NOTEBOOK}?token={token}", wait_until="domcontentloaded")
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
            # JupyterLab may ask which kernel to start (it did on a loaded machine): the default
            kernel_dialog = page.get_by_role("dialog").filter(has_text="Select Kernel")
            try:
                kernel_dialog.get_by_role("button", name="Select").click(timeout=5_000)
            except PlaywrightTimeout:
                pass
            page.wait_for_selector(
                ".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=60_000
            )
            _shot(page, "01-opened")

            page.get_by_role("menuitem", name="Run", exact=True).click()
            page.get_by_role("menuitem", name="Run All Cells", exact=True).click()

            # every code cell gets an execution count once Run All has gone through it
            page.wait_for_function(
                """() => {
                    const prompts = [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')];
                    return prompts.length > 0 && prompts.every(p => /\\[\\d+\\]/.test(p.textContent));
                }""",
                timeout=RUN_ALL_TIMEOUT_S * 1000,
            )
            page.wait_for_selector(
                ".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=60_000
            )
            _shot(page, "02-run-all")

            outputs = page.locator(".jp-OutputArea-output").all_inner_texts()
            text = "\n".join(outputs)
            assert "[03.1] Scaled dot-product attention: PASSED (3/3 points)" in text
            assert (
                "[03.2] Attention with learned query, key and value projections: FAILED (0/3 points)"
                in text
            )
            assert "Likely mistake:" in text and "Hint:" in text
            assert "[03.2] your qkv_attention failed its check: using the verified" in text
            assert "Traceback" not in text and "course_utils/checks" not in text
            page.locator(
                ".jp-OutputArea-output", has_text="[03.2]"
            ).first.scroll_into_view_if_needed()
            _shot(page, "03-verdicts")

            # the explorer: d is a slider, scale toggle buttons, one live figure under them
            widget = page.locator(".jp-OutputArea-output .widget-vbox").first
            widget.scroll_into_view_if_needed()
            slider = widget.locator(".widget-slider").first
            assert slider.locator(".noUi-handle").count() == 1, "d is not rendered as a slider"
            assert widget.locator(".widget-toggle-buttons").count() == 1
            cell_output = page.locator(".jp-Cell", has=widget).locator(".jp-OutputArea")
            assert cell_output.locator("img").count() == 1, (
                "a static preview beside the live figure"
            )
            image = widget.locator("img")
            before = image.get_attribute("src")
            _shot(page, "04-slider-before")
            slider.locator(".noUi-handle").focus()
            page.keyboard.press("ArrowLeft")
            page.wait_for_function(
                "([el, before]) => el.getAttribute('src') !== before",
                arg=[image.element_handle(), before],
                timeout=30_000,
            )
            assert cell_output.locator("img").count() == 1
            _shot(page, "05-slider-moved")

            # what the browser saved: every code cell ran
            page.keyboard.press("Control+s")
            page.wait_for_timeout(1500)
        except Exception:
            _shot(page, "99-failure")  # what the browser showed when the test failed
            raise
        finally:
            browser.close()
    saved = nbformat.read(path, as_version=4)
    not_run = [c.id for c in saved.cells if c.cell_type == "code" and c.execution_count is None]
    assert not not_run, f"cells that never ran: {not_run}"
    assert not errors, "browser console errors:\n" + "\n".join(errors)


SITE_PAGES = ("03_scaled_dot_product", "05_masked_attention", "09_vit")
MATHJAX_DONE = """() => new Promise(done => {
    const wait = () => (window.MathJax && MathJax.startup && MathJax.startup.promise
        ? MathJax.startup.promise.then(() => done(true), () => done(false))
        : setTimeout(wait, 100));
    wait();
})"""


def _site_page_facts(page) -> dict:
    return page.evaluate(
        """() => ({
            math: document.querySelectorAll('mjx-container svg').length,
            mathErrors: document.querySelectorAll('[data-mjx-error], mjx-merror').length,
            rawDisplayMath: document.body.innerText.includes('$$'),
            images: [...document.querySelectorAll('.jp-OutputArea-output img')].map(
                i => [i.complete, i.naturalWidth, i.naturalHeight]),
            details: document.querySelectorAll('details').length,
            openDetails: document.querySelectorAll('details[open]').length,
        })"""
    )


@pytest.mark.xdist_group("course-site")
def test_course_site_pages_render_offline_with_math_figures_and_collapsed_hints(playwright_api):
    sync_playwright = playwright_api
    site_dir = built_site().out
    shots = SCREENSHOTS / "site"
    shots.mkdir(parents=True, exist_ok=True)
    for old in shots.glob("*.png"):
        old.unlink()
    errors: list[str] = []
    remote: list[str] = []
    page = None
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_context(viewport={"width": 1300, "height": 1000}).new_page()
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
            page.on(
                "request",
                lambda r: (
                    remote.append(r.url) if not r.url.startswith(("file:", "data:")) else None
                ),
            )
            for stem in SITE_PAGES:
                page.goto((site_dir / f"{stem}.html").as_uri(), wait_until="load")
                assert page.evaluate(MATHJAX_DONE), f"{stem}: MathJax did not load"
                facts = _site_page_facts(page)
                page.screenshot(path=str(shots / f"{stem}.png"), full_page=False)
                assert facts["math"] > 5 and facts["mathErrors"] == 0, (stem, facts)
                assert not facts["rawDisplayMath"], f"{stem}: display math left as TeX"
                assert facts["images"], f"{stem}: no figure"
                assert all(ok and w > 0 and h > 0 for ok, w, h in facts["images"]), (stem, facts)
                assert facts["details"] > 0 and facts["openDetails"] == 0, (stem, facts)
                assert page.get_by_role("link", name="Download notebook").count() == 1
            page.goto((site_dir / "index.html").as_uri(), wait_until="load")
            page.fill("#course-search", "causal mask")
            page.wait_for_selector("#course-search-results li a", timeout=10_000)
            page.screenshot(path=str(shots / "index-search.png"), full_page=False)
            assert page.locator("#course-search-results li").count() > 0
        except Exception:
            if page is not None:  # what the browser showed when the test failed
                page.screenshot(path=str(shots / "99-failure.png"), full_page=True)
            raise
        finally:
            browser.close()
    assert not remote, "the site requested from the network:\n" + "\n".join(remote)
    assert not errors, "browser console errors:\n" + "\n".join(errors)
