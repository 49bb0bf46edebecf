"""``course site``: the static course website — offline pages, stored outputs of the lessons,
no answers (the no-answer rule checked on the HTML), the index's notebook table, search, the
download and Colab links."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
from site_testing import REPO, built_site

from course_utils import cli
from course_utils.authoring import leaks, release, site
from course_utils.authoring.project import CourseSettings, read_settings

SOLUTIONS = release.solution_paths(REPO / "solutions")
NB03 = REPO / "solutions" / "03_scaled_dot_product.ipynb"


def _load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _page_leaks(solution: dict, page: str, name: str) -> list[leaks.Leak]:
    """The leak detector of ``course release --check``, run on a page's visible text."""
    as_notebook = {
        "cells": [{"cell_type": "markdown", "id": "page", "source": site.page_text(page)}]
    }
    return leaks.find_leaks(solution, as_notebook, name)


# ------------------------------------------------------------------- pieces, no build


def test_readme_table_gives_every_notebook_its_slides_and_summary():
    table = site.readme_table((REPO / "README.md").read_text(encoding="utf-8"))
    assert sorted(table) == [p.stem for p in SOLUTIONS]
    assert table["03_scaled_dot_product"]["slides"] == "18–29"
    assert table["00_start_here"]["number"] == "00"
    assert "`1/sqrt(d)`" in table["03_scaled_dot_product"]["summary"]


def test_site_notebook_takes_solution_outputs_except_for_exercise_and_check_cells():
    solution = _load(NB03)
    student = json.loads(release.release_file(NB03))
    page = site.site_notebook(solution, student)
    sol_cells = {c["id"]: c for c in solution["cells"]}
    with_outputs = 0
    for cell in page["cells"]:
        if cell["cell_type"] != "code":
            continue
        if cell["id"] not in sol_cells or site.cell_role(cell) is not None:
            assert cell["outputs"] == [] and cell["execution_count"] is None, cell["id"]
        else:
            expected = site._without_fallback_lines(sol_cells[cell["id"]]["outputs"])
            assert cell["outputs"] == expected, cell["id"]
            with_outputs += bool(cell["outputs"])
    assert with_outputs >= 5
    # the sources are the student's (stubs, not answers), the install cell left out (F13)
    shown = [c["source"] for c in student["cells"] if not site._is_install_cell(c)]
    assert [c["source"] for c in page["cells"]] == shown
    assert all(c["outputs"] == [] for c in student["cells"] if c["cell_type"] == "code")


def test_a_page_has_no_install_cell_and_no_using_your_lines_under_stubs():
    """F13: fallback()'s "[03.1] using your …" lines came from the solution run; under a stub
    they say the opposite of what a student's run prints."""
    solution = _load(NB03)
    student = json.loads(release.release_file(NB03))
    assert any(site._is_install_cell(c) for c in student["cells"])
    page = site.site_notebook(solution, student)
    assert not any(site._is_install_cell(c) for c in page["cells"])
    texts = [
        "".join(o.get("text", ""))
        for c in page["cells"]
        for o in c.get("outputs", [])
        if o.get("output_type") == "stream"
    ]
    assert texts and not any(re.search(r"\] using your ", t) for t in texts)
    had = [o for c in solution["cells"] for o in c.get("outputs", []) if "using your" in "".join(o.get("text", ""))]  # fmt: skip
    assert had, "the solution run printed no 'using your' line: this test checks nothing"


def test_search_snippets_are_plain_text():
    assert site.plain_math(r"scale by $\sqrt{d_k}$ here $$ \text{mask}_{b} = x $$ end") == (
        "scale by sqrt d k here   end"
    )
    page = (
        '<h2 id="a">Exercise <code>torch</code></h2><p><span class="n">torch</span>'
        '<span class="o">.</span><span class="n">Tensor</span> $$x^2$$ and $\\alpha$</p>'
    )
    entry = site.Entry("05", "05_masked", "05 · Masked attention")
    (s,) = site.sections(page, entry)
    assert s["title"] == "05 · Masked attention"  # the number once
    assert "torch.Tensor" in s["text"] and "$" not in s["text"] and "alpha" in s["text"]


def test_a_page_links_its_neighbours_and_lists_its_sections():
    prev = site.Entry("02", "02_a", "02 · A")
    nxt = site.Entry("04", "04_b", "04 · B")
    pager = site.pager_html(prev, nxt)
    assert 'href="02_a.html"' in pager and 'rel="next"' in pager and "04 · B" in pager
    assert site.pager_html(None, None) == ""
    toc = site.toc_html('<h1 id="t">T</h1><h2 id="x-1">One<a class="anchor-link">¶</a></h2><h3 id="y">Two</h3>')  # fmt: skip
    assert 'href="#x-1"' in toc and ">One<" in toc and 'href="#t"' not in toc
    assert "<details" not in toc  # every <details> on a page is a collapsed hint


def test_a_stored_widget_view_becomes_its_static_picture():
    view = "application/vnd.jupyter.widget-view+json"
    solution = {
        "cells": [
            {
                "cell_type": "code",
                "id": "w",
                "source": "explore()",
                "metadata": {},
                "execution_count": 3,
                "outputs": [
                    {
                        "output_type": "display_data",
                        "metadata": {},
                        "data": {view: {"model_id": "x"}, "image/png": "iVBOR", "text/plain": "p"},
                    }
                ],
            }
        ]
    }
    student = {"cells": [dict(solution["cells"][0], outputs=[], execution_count=None)]}
    page = site.site_notebook(solution, student)
    assert page["cells"][0]["outputs"][0]["data"] == {"image/png": "iVBOR", "text/plain": "p"}


def test_remote_sources_finds_loads_from_the_network_but_not_plain_links():
    page = (
        '<script src="_static/a.js"></script><a href="https://arxiv.org/abs/1706.03762">paper</a>'
        '<script src="https://cdn.example/x.js"></script><link href="//cdn.example/y.css">'
    )
    assert site.remote_sources(page) == [
        '<script src="https://cdn.example/x.js"',
        '<link href="//cdn.example/y.css"',
    ]


def test_colab_url_only_for_a_configured_github_repository():
    entry = site.Entry("03", "03_scaled_dot_product", "Scaled")
    assert site.colab_url(CourseSettings(), entry) is None
    assert site.colab_url(CourseSettings("https://gitlab.com/a/b"), entry) is None
    assert site.colab_url(CourseSettings("https://github.com/ann/course.git", "v2"), entry) == (
        "https://colab.research.google.com/github/ann/course/blob/v2/notebooks/"
        "03_scaled_dot_product.ipynb"
    )
    nav = site.nav_html(entry, CourseSettings("https://github.com/ann/course"))
    assert "Open in Colab" in nav and "/blob/main/notebooks/03_scaled_dot_product.ipynb" in nav
    assert 'href="notebooks/03_scaled_dot_product.ipynb"' in nav and "Download notebook" in nav
    assert "Colab" not in site.nav_html(entry, CourseSettings())


def test_settings_are_read_from_tool_course_in_pyproject(tmp_path):
    assert read_settings(tmp_path) == CourseSettings(None, "main")
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\n\n[tool.course]\nrepository = "https://github.com/a/b"\n'
        'branch = "spring"\n'
    )
    assert read_settings(tmp_path) == CourseSettings("https://github.com/a/b", "spring")
    (tmp_path / "pyproject.toml").write_text('[tool.course]\nrepository = "git@github.com:a/b"\n')
    with pytest.raises(ValueError, match="https://"):
        read_settings(tmp_path)


def test_the_leak_check_on_html_finds_an_answer_in_a_page():
    # a page made from the solution itself must fail the rule the site's pages pass
    solution = _load(NB03)
    entry = site.Entry("03", NB03.stem, "03")
    page = site.render_page(site.site_notebook(solution, solution), entry, CourseSettings())
    found = _page_leaks(solution, page, NB03.name)
    assert found and {leak.exercise for leak in found} >= {"03.1", "03.2"}


def test_site_is_a_course_subcommand():
    assert cli.SUBCOMMANDS["site"][0] == "course_utils.authoring.site"
    parser = cli.build_parser()
    args = parser.parse_args(["site", "--out", "x", "--only", "03"])
    assert args.out == "x" and args.only == ["03"]


# ----------------------------------------------------------------- the built site


@pytest.fixture(scope="module")
def built():
    return built_site()


@pytest.mark.slow
@pytest.mark.xdist_group("course-site")
def test_every_notebook_has_a_page_and_the_index_links_them(built):
    out = built.out
    assert built.pages == ["index.html"] + [f"{p.stem}.html" for p in SOLUTIONS]
    index = (out / "index.html").read_text(encoding="utf-8")
    for path in SOLUTIONS:
        assert f'href="{path.stem}.html"' in index
        assert (out / "notebooks" / path.name).read_text() == release.release_file(path)
    assert "<td>18–29</td>" in index and "Scaled dot-product attention" in index
    assert 'id="course-search"' in index


@pytest.mark.slow
@pytest.mark.xdist_group("course-site")
def test_no_page_loads_anything_from_the_network(built):
    pages = sorted(built.out.glob("*.html"))
    assert len(pages) == len(SOLUTIONS) + 1
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert site.remote_sources(text) == [], page.name
        srcs = re.findall(r'<script[^>]*\bsrc="([^"]+)"', text)
        assert srcs and all(not re.match(r"(https?:)?//", s) for s in srcs), page.name
        for src in srcs:  # every script a page loads is in the site
            assert (built.out / src.split("?")[0]).is_file(), (page.name, src)
    mathjax = built.out / "_static" / "mathjax"
    assert (mathjax / "tex-svg-full.js").is_file()


@pytest.mark.slow
@pytest.mark.xdist_group("course-site")
def test_no_solution_line_appears_on_any_page(built):
    for path in SOLUTIONS:
        page = (built.out / f"{path.stem}.html").read_text(encoding="utf-8")
        found = _page_leaks(_load(path), page, path.name)
        assert not found, "\n".join(leak.message() for leak in found)


@pytest.mark.slow
@pytest.mark.xdist_group("course-site")
def test_pages_show_stored_figures_math_prompts_and_collapsed_hints(built):
    page = (built.out / "03_scaled_dot_product.html").read_text(encoding="utf-8")
    solution_pngs = sum(
        "image/png" in o.get("data", {})
        for c in _load(NB03)["cells"]
        if site.cell_role(c) is None
        for o in c.get("outputs", [])
    )
    assert solution_pngs > 0 and page.count("<img") >= solution_pngs
    assert "data:image/png;base64," in page
    assert "<details" in page and "<details open" not in page
    assert 'class="course-toc"' in page and page.count('class="course-pager"') == 2
    assert (
        'href="02_additive_attention.html"' in page and 'href="04_self_cross_position.html"' in page
    )
    assert "] using your " not in site.page_text(page)  # no stub outputs (F13)
    assert "this cell installs it" not in page  # the install cell is hidden on the site (F13)
    assert "Exercise 03.1: implement scaled_dot_product_attention" in page
    assert "PASSED" not in site.page_text(page)  # check cells as the student has them
    assert "$\\sqrt{d}$" in page or "\\sqrt{d}" in page  # math left for MathJax
    assert "Download notebook" in page


@pytest.mark.slow
@pytest.mark.xdist_group("course-site")
def test_search_index_has_sections_of_every_page(built):
    text = (built.out / "_static" / "search_index.js").read_text(encoding="utf-8")
    assert text.startswith("window.COURSE_SEARCH = ")
    entries = json.loads(text[len("window.COURSE_SEARCH = ") :].rstrip().rstrip(";"))
    assert {e["page"] for e in entries} == {f"{p.stem}.html" for p in SOLUTIONS}
    mine = [e for e in entries if e["page"] == "03_scaled_dot_product.html"]
    assert "Learning objectives" in [e["heading"] for e in mine]
    page = (built.out / "03_scaled_dot_product.html").read_text(encoding="utf-8")
    ids = {html.unescape(i) for i in re.findall(r'<h[1-3][^>]*\bid="([^"]*)"', page)}
    assert len(mine) > 5 and all(e["anchor"] in ids for e in mine)  # each result links a heading
    assert not any("$$" in e["text"] or "torch . " in e["text"] for e in entries)  # clean snippets
    assert not any(re.match(r"(\d\d) \1", e["title"]) for e in entries)  # "05 05 · …" (F13)


@pytest.mark.slow
def test_course_site_command_builds_one_notebook_and_says_there_is_no_colab_link(tmp_path, capsys):
    out = tmp_path / "site"
    assert cli.main(["site", "--root", str(REPO), "--out", str(out), "--only", "00"]) == 0
    printed = capsys.readouterr().out
    assert (out / "00_start_here.html").is_file() and (out / "index.html").is_file()
    assert not (out / "01_rnn_bottleneck.html").exists()
    if read_settings(REPO).github() is None:
        assert "no 'Open in Colab' links" in printed
    assert "wrote 2 pages" in printed
