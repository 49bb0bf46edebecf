"""``course grade-merge --similarity`` (and ``course grade --similarity``): the merge reads
every notebook of the class from the shard records, fingerprints each exercise's code and adds
``similarity`` to each report and ``sim_*`` columns to the gradebook.

copydetect is optional, so the pipeline is tested with a small stand-in that has its interface
(``CodeFingerprint(...).hashes``, ``compare_files``) and its meaning (the share of one text's
k-grams found in the other); one test runs the real copydetect where it is installed.
"""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest

from course_utils import cli as course_cli
from course_utils.grading import cli as grade_cli
from course_utils.grading import shard as sh
from course_utils.grading.grader import GradeOptions, lost_report

ROOT = Path(__file__).resolve().parents[1]
NB03 = "03_scaled_dot_product.ipynb"


def _fake_copydetect() -> types.ModuleType:
    """copydetect's two names, by the same idea: k-grams of the code with comments and
    whitespace dropped (copydetect also renames identifiers; not needed here), minus the
    boilerplate's."""
    mod = types.ModuleType("copydetect")

    class CodeFingerprint:
        def __init__(self, file, k, win_size, boilerplate=None, language=None, fp=None):
            text = re.sub(r"\s+", "", re.sub(r"#[^\n]*", "", fp.read()))
            grams = {hash(text[i : i + k]) for i in range(max(0, len(text) - k + 1))}
            self.hashes = grams - set(boilerplate or [])

    def compare_files(a, b):
        both = len(a.hashes & b.hashes)
        return both, (both / len(a.hashes), both / len(b.hashes)), None

    mod.CodeFingerprint, mod.compare_files = CodeFingerprint, compare_files
    return mod


def _class(tmp_path: Path) -> list[str]:
    """alice hands in the solution, bob alice's notebook, carol the untouched student one."""
    sources = {
        "alice": ROOT / "solutions" / NB03,
        "bob": ROOT / "solutions" / NB03,
        "carol": ROOT / "notebooks" / NB03,
    }
    paths = []
    for name, src in sources.items():
        (tmp_path / "class" / name).mkdir(parents=True)
        paths.append(str(shutil.copyfile(src, tmp_path / "class" / name / NB03)))
    return paths


def _shards(tmp_path: Path, paths: list[str]) -> list[str]:
    """Two shard records of the class, with reports made without a kernel (each submission
    'not graded'): the merge's similarity reads the notebooks, never the grades."""
    names = [Path(p).parent.name for p in paths]
    where = SimpleNamespace(checks=[], reference_dir=str(ROOT / "solutions"))
    out = []
    for k in (1, 2):
        mine = sh.select(names, k, 2)
        reports = [lost_report(paths[i], GradeOptions(), "a test's stand-in") for i in mine]
        for i, rep in zip(mine, reports, strict=True):
            rep["student"] = names[i]
        folder = tmp_path / f"shard{k}"
        sh.write_record(folder, k, 2, paths, mine, reports, {"seed": 1}, where)
        out.append(str(folder))
    return out


def _merge(tmp_path: Path, shards: list[str]) -> tuple[int, dict[str, dict], list[dict]]:
    out = tmp_path / "out"
    code = course_cli.main(
        ["grade-merge", *shards, "--similarity", "-q"]
        + ["--json", str(out / "grades.json"), "--csv", str(out / "gradebook.csv")]
    )
    if not (out / "grades.json").exists():
        return code, {}, []
    reports = json.loads((out / "grades.json").read_text(encoding="utf-8"))
    rows = list(csv.DictReader(io.StringIO((out / "gradebook.csv").read_text("utf-8-sig"))))
    return code, {r["student"]: r for r in reports}, rows


def _check_class(code: int, by: dict[str, dict], rows: list[dict]) -> None:
    assert code == grade_cli.exit_code(list(by.values()), None)
    assert set(by) == {"alice", "bob", "carol"}
    for ex in ("03.1", "03.2"):
        alice, bob, carol = (by[s]["similarity"][ex] for s in ("alice", "bob", "carol"))
        # alice and bob hand in the same code, and it is the solution's
        assert alice["peer"] == bob["peer"] == 1.0
        assert alice["peer_with"] == "bob" and bob["peer_with"] == "alice"
        assert alice["course"] == 1.0
        # carol's exercise cell is the starter code, which is boilerplate: nothing of hers
        assert carol == {"course": 0.0, "peer": 0.0, "peer_with": None}
    row = {r["student"]: r for r in rows}
    assert row["alice"]["sim_03.1_peer"] == "1.00" and row["alice"]["sim_03.1_peer_with"] == "bob"
    assert row["carol"]["sim_03.2_course"] == "0.00"


def test_SIMILARITY_grade_merge_adds_similarity_to_reports_and_gradebook(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "copydetect", _fake_copydetect())
    shards = _shards(tmp_path, _class(tmp_path))
    _check_class(*_merge(tmp_path, shards))


def test_SIMILARITY_without_copydetect_is_a_clear_error_and_no_gradebook(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setitem(sys.modules, "copydetect", None)  # import copydetect -> ImportError
    shards = _shards(tmp_path, _class(tmp_path))
    code, by, _ = _merge(tmp_path, shards)
    assert code == grade_cli.EXIT_BAD_INPUT and by == {}
    assert "--similarity needs copydetect" in capsys.readouterr().err


def test_SIMILARITY_with_the_real_copydetect(tmp_path):
    pytest.importorskip("copydetect")
    shards = _shards(tmp_path, _class(tmp_path))
    _check_class(*_merge(tmp_path, shards))
