"""``course site --out DIR``: the course as a static website, built and read offline.

**What a page shows.** One page per notebook, made from its **student version** (what
``course release`` writes into ``notebooks/``, computed here in memory from ``solutions/`` so a
checkout whose ``notebooks/`` holds a student's answers still gives the course's own pages):
the lessons, the exercise prompts with their stub cells and collapsed hints (``<details>``), and
no answers. Student versions carry no outputs, so every cell that is neither an exercise nor a
check takes the **stored outputs of the solution run**, cell by cell, by cell id (figures,
tables, the claims' printed numbers); exercise and check cells stay as the student version has
them (a check's PASSED line would only say the answer worked). Stored widget views are
replaced by their static picture (:func:`course_utils.authoring.execute.strip_widget_views`).
The index lists the notebooks with their lecture slides (README's notebook table) and has a
search box; each page links "Download notebook" (a copy of the student version in the site)
and, when ``[tool.course] repository`` names a GitHub repository
(:mod:`course_utils.authoring.project`), "Open in Colab"; without one the build says so.

**Offline.** Nothing is fetched at build or view time: pages embed their CSS and images,
MathJax 3 (its official ``es5`` build, as the ``django-static-mathjax`` package ships it: no
dependencies, nothing of Django is used) is copied into ``_static/mathjax`` and renders TeX
to SVG, which needs no web font, and the search index is a script (``search_index.js``), so the site works
from ``file://`` too. :func:`remote_sources` lists any ``<script src>``/``<link href>`` that
points off the site (the tests assert it is empty).

**Why nbconvert, not Sphinx + myst-nb.** nbconvert's HTML exporter is already installed (it
comes with JupyterLab), renders a notebook exactly as JupyterLab shows it, and needs no
theme; one small template (``site_assets/templates/course_site``) removes the three things
its ``lab`` template loads from a CDN (require.js, mermaid, the widget manager) and points
MathJax at the local copy. Sphinx would add a toolchain (Sphinx, myst-nb, a theme, jupyter-cache)
for what amounts to an index page and a search box, which are a few lines here.
"""

from __future__ import annotations

import argparse
import html
import importlib.util
import json
import re
import shutil
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from course_utils.authoring import execute, release, validate
from course_utils.authoring.cells import cell_role, cell_source
from course_utils.authoring.project import CourseSettings, read_settings

ASSETS = Path(__file__).with_name("site_assets")
TEMPLATE = "course_site"
STATIC = "_static"
MATHJAX_URL = f"{STATIC}/mathjax/tex-svg-full.js"
COLAB = "https://colab.research.google.com/github/{owner}/{repo}/blob/{branch}/notebooks/{name}"

EXIT_OK, EXIT_ERROR = 0, 2

_TABLE_ROW = re.compile(r"^\|\s*(\d\d)\s*\|\s*`([^`]+)`\s*\|\s*([^|]*?)\s*\|\s*(.*?)\s*\|\s*$")
_HEADING = re.compile(r'<h([1-3])[^>]*\bid="([^"]*)"[^>]*>(.*?)</h\1>', re.S)
_TAGS = re.compile(r"<[^>]+>")
_INVISIBLE = re.compile(r"<(script|style)\b.*?</\1>", re.S | re.I)
_FALLBACK_LINE = re.compile(r"^\[\d\d\.\w+\] using your [\w.]+\n?", re.M)
_DISPLAY_MATH = re.compile(r"\$\$.*?\$\$|\\\[.*?\\\]", re.S)
_INLINE_MATH = re.compile(r"\$([^$\n]{1,200})\$|\\\((.{1,200}?)\\\)")
_INLINE_TAGS = re.compile(r"</?(?:span|code|em|strong|b|i|a)\b[^>]*>", re.I)
_TOP_NAVS = re.compile(
    r'<nav class="course-nav">.*?</nav>(?:\s*<nav class="course-pager">.*?</nav>)?', re.S
)
_REMOTE = re.compile(
    r'<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)="(?:https?:)?//[^"]*"', re.I
)


@dataclass(frozen=True)
class Entry:
    """One notebook of the site: ``03``, ``03_scaled_dot_product``, its title, lecture slides
    and what the student builds (README's notebook table; title from the first heading)."""

    number: str
    stem: str
    title: str
    slides: str = ""
    summary: str = ""

    @property
    def page(self) -> str:
        return f"{self.stem}.html"

    @property
    def ipynb(self) -> str:
        return f"{self.stem}.ipynb"


@dataclass
class BuildReport:
    """What :func:`build` wrote: the pages, notes for the user, the seconds it took."""

    out: Path
    pages: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0


# ------------------------------------------------------------------------ the notebooks


def readme_table(readme: str) -> dict[str, dict[str, str]]:
    """README's notebook table: ``stem -> {"number", "slides", "summary"}`` (markdown cells)."""
    rows = {}
    for line in readme.splitlines():
        m = _TABLE_ROW.match(line)
        if m:
            number, stem, slides, summary = m.groups()
            rows[stem] = {"number": number, "slides": slides, "summary": summary}
    return rows


def notebook_title(nb: Mapping[str, Any], fallback: str) -> str:
    """The text of the notebook's first ``# heading`` (``fallback`` when it has none)."""
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "markdown":
            for line in cell_source(cell).splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return fallback


def site_notebook(solution: Mapping[str, Any], student: Mapping[str, Any]) -> dict[str, Any]:
    """The notebook a page shows: ``student`` (a released student version, parsed) with the
    stored outputs and execution counts of ``solution``'s cells of the same id, for every code
    cell that is neither an exercise nor a check. Widget views become their static pictures.

    Two things of the solution run do not fit a page that shows the stubs, and are left out:
    the install cell (for Colab; the downloaded notebook keeps it), and the
    ``[NN.k] using your …`` lines ``fallback()`` printed because the solution was there.
    Neither input is modified."""
    page = json.loads(json.dumps(student))
    by_id = {c.get("id"): c for c in solution.get("cells", []) if c.get("cell_type") == "code"}
    page["cells"] = [c for c in page.get("cells", []) if not _is_install_cell(c)]
    for cell in page["cells"]:
        if cell.get("cell_type") != "code" or cell_role(cell) is not None:
            continue
        source_cell = by_id.get(cell.get("id"))
        if source_cell is not None:
            cell["outputs"] = _without_fallback_lines(source_cell.get("outputs", []))
            cell["execution_count"] = source_cell.get("execution_count")
    return execute.strip_widget_views(page)


def _is_install_cell(cell: Mapping[str, Any]) -> bool:
    from course_utils.authoring import install_cell

    tags = (cell.get("metadata") or {}).get("tags") or []
    return install_cell.TAG in tags or cell.get("id") == install_cell.CELL_ID


def _without_fallback_lines(outputs: list[Any]) -> list[Any]:
    """A copy of ``outputs`` without ``fallback()``'s "using your" lines (an emptied stream
    output is dropped)."""
    kept = []
    for out in json.loads(json.dumps(outputs)):
        if out.get("output_type") == "stream":
            text = out.get("text", "")
            text = "".join(text) if isinstance(text, list) else str(text)
            text = _FALLBACK_LINE.sub("", text)
            if not text:
                continue
            out["text"] = text
        kept.append(out)
    return kept


# ------------------------------------------------------------------------------ pages


def _link(href: str, text: str, **attrs: str) -> str:
    extra = "".join(
        f' {k.rstrip("_").replace("_", "-")}="{html.escape(v)}"' for k, v in attrs.items()
    )
    return f'<a href="{html.escape(href)}"{extra}>{html.escape(text)}</a>'


def colab_url(settings: CourseSettings, entry: Entry) -> str | None:
    """The "Open in Colab" address of ``entry``'s student version, or None without a GitHub
    repository configured (no URL is invented)."""
    github = settings.github()
    if github is None:
        return None
    owner, repo = github
    return COLAB.format(owner=owner, repo=repo, branch=settings.branch, name=entry.ipynb)


def nav_html(entry: Entry | None, settings: CourseSettings) -> str:
    """The bar at the top of a page: the index, search, the download and Colab links."""
    items = [
        f'<span class="course-nav-title">{_link("index.html", "Attention & Transformers")}</span>',
        _link("index.html#search", "Search"),
    ]
    if entry is not None:
        items.append(_link(f"notebooks/{entry.ipynb}", "Download notebook", download=entry.ipynb))
        colab = colab_url(settings, entry)
        if colab:
            items.append(_link(colab, "Open in Colab", class_="course-colab"))
    return '<nav class="course-nav">' + "".join(items) + "</nav>"


def _exporter():
    from nbconvert import HTMLExporter

    return HTMLExporter(
        template_name=TEMPLATE,
        extra_template_basedirs=[str(ASSETS / "templates")],
        mathjax_url=MATHJAX_URL,
    )


def render_page(
    nb: Mapping[str, Any],
    entry: Entry,
    settings: CourseSettings,
    exporter=None,
    neighbours: tuple[Entry | None, Entry | None] = (None, None),
) -> str:
    """The HTML page of notebook ``nb`` (a parsed ``.ipynb``) for ``entry``: the nav bar,
    a table of contents of its sections, and links to the previous and next notebooks
    (``neighbours``) at the top and the bottom."""
    import nbformat

    node = nbformat.reads(json.dumps(nb), as_version=4)  # sources as strings, as nbconvert wants
    node.metadata["title"] = entry.title
    pager = pager_html(*neighbours)
    resources = {"course_nav": nav_html(entry, settings) + pager, "metadata": {"name": entry.title}}
    body, _ = (exporter or _exporter()).from_notebook_node(node, resources=resources)
    # after the nav bar and the pager (nbconvert rewrites their attributes' order)
    top = _TOP_NAVS.search(body)
    if top:
        body = body[: top.end()] + toc_html(body) + body[top.end() :]
    return body.replace("</body>", pager + "\n</body>", 1)


def pager_html(prev: Entry | None, nxt: Entry | None) -> str:
    """Links to the previous and the next notebook (``rel=prev`` / ``rel=next``)."""
    items = []
    if prev is not None:
        items.append(_link(prev.page, f"← {prev.title}", rel="prev", class_="course-prev"))
    if nxt is not None:
        items.append(_link(nxt.page, f"{nxt.title} →", rel="next", class_="course-next"))
    return '<nav class="course-pager">' + "".join(items) + "</nav>" if items else ""


def toc_html(page: str) -> str:
    """The page's table of contents: a link to every ``h2`` and ``h3`` section."""
    items = []
    for m in _HEADING.finditer(_INVISIBLE.sub(" ", page)):
        level, anchor = m.group(1), html.unescape(m.group(2))
        if level == "1":
            continue
        text = " ".join(page_text(_INLINE_TAGS.sub("", m.group(3))).replace("¶", "").split())
        items.append(f'<li class="toc-h{level}">{_link("#" + anchor, text)}</li>')
    if not items:
        return ""
    return (
        '<nav class="course-toc" aria-label="On this page"><strong>On this page</strong><ul>'
        + "".join(items)
        + "</ul></nav>"
    )


def page_text(page: str) -> str:
    """The visible text of an HTML page: scripts and styles dropped, tags removed, entities
    decoded (what a reader sees; the no-answer rule is checked on it)."""
    return html.unescape(_TAGS.sub(" ", _INVISIBLE.sub(" ", page)))


def sections(page: str, entry: Entry, limit: int = 3000) -> list[dict[str, str]]:
    """Search entries of one page: one per ``h1``-``h3`` heading with the text up to the next
    (at most ``limit`` characters)."""
    body = _INVISIBLE.sub(" ", _INLINE_TAGS.sub("", page))  # "torch.Tensor", not "torch . Tensor"
    found = list(_HEADING.finditer(body))
    entries = []
    title = entry.title if entry.title.startswith(entry.number) else f"{entry.number} {entry.title}"
    for i, m in enumerate(found):
        end = found[i + 1].start() if i + 1 < len(found) else len(body)
        text = " ".join(plain_math(page_text(body[m.end() : end])).split())
        heading = " ".join(plain_math(page_text(m.group(3))).replace("¶", "").split())
        entries.append(
            {
                "page": entry.page,
                "anchor": html.unescape(m.group(2)),
                "title": title,
                "heading": heading,
                "text": text[:limit],
            }
        )
    return entries


def plain_math(text: str) -> str:
    """Text for a search snippet: display math dropped, inline math kept as its plain
    symbols (``$\\sqrt{d_k}$`` -> ``sqrt d k``)."""
    text = _DISPLAY_MATH.sub(" ", text)

    def inline(m: re.Match) -> str:
        tex = re.sub(r"\\([A-Za-z]+)", r" \1 ", m.group(1) or m.group(2) or "")
        return " ".join(re.sub(r"[{}_^\\]", " ", tex).split())

    return _INLINE_MATH.sub(inline, text)


def remote_sources(page: str) -> list[str]:
    """Every ``<script>``/``<link>``/``<img>``/``<iframe>`` of ``page`` that loads from the
    network (empty for an offline page). Plain links (``<a href>``) are not loads."""
    return [m.group(0) for m in _REMOTE.finditer(page)]


def index_html(entries: list[Entry], settings: CourseSettings) -> str:
    """The index page: the notebook table (number, title, slides, what you build) and search."""
    rows = []
    for e in entries:
        summary = re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(e.summary))
        rows.append(
            f"<tr><td>{e.number}</td><td>{_link(e.page, e.title)}</td>"
            f"<td>{html.escape(e.slides)}</td><td>{summary}</td></tr>"
        )
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<title>Attention &amp; Transformers, hands-on</title>
<link rel="stylesheet" href="{STATIC}/site.css">
<script src="{STATIC}/search_index.js"></script>
<script src="{STATIC}/search.js"></script>
</head>
<body>
{nav_html(None, settings)}
<main class="course-index">
<h1>Attention &amp; Transformers, hands-on</h1>
<p>The course's notebooks with their stored outputs, exercise prompts and hints; the answers
are yours to write. The lecture slides are those of CS231n Lecture 8, "Attention and
Transformers".</p>
<table>
<thead><tr><th>#</th><th>notebook</th><th>lecture slides</th><th>what you build</th></tr></thead>
<tbody>
{chr(10).join(rows)}
</tbody>
</table>
<h2 id="search">Search</h2>
<input id="course-search" type="search" placeholder="Search the notebooks" aria-label="Search">
<ul id="course-search-results"></ul>
</main>
</body>
</html>
"""


# ------------------------------------------------------------------------------ build


def mathjax_folder() -> Path:
    """MathJax 3's ``es5`` build, as the ``django-static-mathjax`` package ships it (its
    import name is ``mathjax``; only its files are used)."""
    spec = importlib.util.find_spec("mathjax")
    hint = "the site needs MathJax, bundled: pip install -e '.[site]' (django-static-mathjax)"
    if spec is None or not spec.origin:
        raise RuntimeError(hint)
    folder = Path(spec.origin).parent / "static" / "mathjax" / "es5"
    if not (folder / "tex-svg-full.js").is_file():
        raise RuntimeError(f"no tex-svg-full.js in {folder}: {hint}")
    return folder


def entries_for(root: Path) -> list[tuple[Entry, Path]]:
    """Every solution notebook of the course at ``root`` with its :class:`Entry`."""
    readme = root / "README.md"
    table = readme_table(readme.read_text(encoding="utf-8")) if readme.is_file() else {}
    found = []
    for path in release.solution_paths(root / "solutions"):
        nb = json.loads(path.read_text(encoding="utf-8"))
        row = table.get(path.stem, {})
        title = notebook_title(nb, path.stem)
        found.append(
            (
                Entry(
                    path.stem[:2], path.stem, title, row.get("slides", ""), row.get("summary", "")
                ),
                path,
            )
        )
    return found


def _static(out: Path) -> None:
    static = out / STATIC
    static.mkdir(parents=True, exist_ok=True)
    for f in (ASSETS / "static").iterdir():
        shutil.copy2(f, static / f.name)
    target = static / "mathjax"
    if not (target / "tex-svg-full.js").is_file():  # the SVG build: CommonHTML's fonts left out
        ignore = shutil.ignore_patterns("*chtml*")
        shutil.copytree(mathjax_folder(), target, ignore=ignore, dirs_exist_ok=True)


def build(root: str | Path, out: str | Path, only: list[str] | None = None) -> BuildReport:
    """Write the site of the course at ``root`` (``solutions/``, ``README.md``,
    ``pyproject.toml``) into ``out``; ``only`` restricts it to notebooks whose stem starts with
    one of the given prefixes (``["03"]``). Returns what was written."""
    start = time.perf_counter()
    root, out = Path(root), Path(out)
    settings = read_settings(root)
    report = BuildReport(out)
    if settings.github() is None:
        what = settings.repository or "no [tool.course] repository in pyproject.toml"
        report.notes.append(
            f"no 'Open in Colab' links: {what} (set [tool.course] repository to the course's "
            "GitHub URL; README: Read it online / Run it on Colab)"
        )
    out.mkdir(parents=True, exist_ok=True)
    _static(out)
    (out / "notebooks").mkdir(exist_ok=True)
    exporter = _exporter()
    entries = entries_for(root)
    registry = validate.load_registry()
    search: list[dict[str, str]] = []
    for i, (entry, path) in enumerate(entries):
        if only and not any(entry.stem.startswith(p) for p in only):
            continue
        neighbours = (
            entries[i - 1][0] if i > 0 else None,
            entries[i + 1][0] if i + 1 < len(entries) else None,
        )
        student_text = release.release_file(path, registry)
        (out / "notebooks" / entry.ipynb).write_text(student_text, encoding="utf-8")
        solution = json.loads(path.read_text(encoding="utf-8"))
        nb = site_notebook(solution, json.loads(student_text))
        page = render_page(nb, entry, settings, exporter, neighbours)
        (out / entry.page).write_text(page, encoding="utf-8")
        search.extend(sections(page, entry))
        report.pages.append(entry.page)
    (out / STATIC / "search_index.js").write_text(
        "window.COURSE_SEARCH = " + json.dumps(search, ensure_ascii=False) + ";\n",
        encoding="utf-8",
    )
    (out / "index.html").write_text(index_html([e for e, _ in entries], settings), encoding="utf-8")
    report.pages.insert(0, "index.html")
    report.seconds = time.perf_counter() - start
    return report


# -------------------------------------------------------------------------------- CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``course site``."""
    parser.add_argument(
        "--out", default="site", metavar="DIR", help="folder to write the site to (default: site)"
    )
    parser.add_argument(
        "--root",
        default=".",
        metavar="DIR",
        help="the course checkout (solutions/, README.md, pyproject.toml; default: .)",
    )
    parser.add_argument(
        "--only",
        nargs="+",
        default=None,
        metavar="NN",
        help="build only the notebooks whose names start with these (e.g. 03 08)",
    )


def main(args: argparse.Namespace) -> int:
    """Run ``course site``; returns the exit code (0 ok, 2 a problem, named)."""
    try:
        report = build(args.root, args.out, args.only)
    except (release.ReleaseError, RuntimeError, ValueError, OSError) as exc:
        print(f"course site: {exc}", file=sys.stderr)
        return EXIT_ERROR
    for note in report.notes:
        print(f"note: {note}")
    print(
        f"wrote {len(report.pages)} pages to {report.out} in {report.seconds:.0f} s; "
        f"open {report.out / 'index.html'}"
    )
    return EXIT_OK
