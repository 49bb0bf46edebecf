"""A class graded in shards (``course grade --shard K/N``) and merged (``course grade-merge``):
the split is stable, the merge refuses what does not belong together, and N shards run as
separate processes merge into the gradebook of one run, byte for byte.

The README's recipes (Slurm, Kubernetes, GitHub Actions) are run
with ``--dry-run``: every ``course grade`` line they show must parse and select its shard.
"""

from __future__ import annotations

import argparse
import copy
import filecmp
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from course_utils.grading import cli as grade_cli
from course_utils.grading import merge as mg
from course_utils.grading import shard as sh

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "grading"
SUBS = FIXTURES / "submissions"
README = ROOT / "README.md"
SECTION = "### A class on many machines"


# ----------------------------------------------------------------------------- the split


def test_shard_is_parsed_one_based_and_refused_out_of_range():
    assert sh.parse_shard("2/8") == (2, 8)
    assert sh.parse_shard(" 1 / 1 ") == (1, 1)
    for bad in ("0/3", "4/3", "3", "a/b", "1/0", "-1/3", ""):
        with pytest.raises(sh.ShardError):
            sh.parse_shard(bad)


def test_student_lands_in_the_same_shard_on_every_machine():
    # sha256 of the name: pinned values (Python's hash() would change per process)
    assert [sh.shard_of(f"s{i:02d}", 3) for i in range(6)] == [2, 3, 3, 1, 2, 3]
    assert sh.shard_of("josé", 10) == sh.shard_of("josé", 10)
    code = "from course_utils.grading.shard import shard_of; print(shard_of('alice', 7))"
    env = {**os.environ, "PYTHONHASHSEED": "123", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == str(sh.shard_of("alice", 7))


def test_a_late_submission_moves_no_other_student():
    names = [f"student{i:03d}" for i in range(200)]
    before = {names[i]: k for k in (1, 2, 3, 4) for i in sh.select(names, k, 4)}
    later = sorted([*names, "zoe-late"])
    after = {later[i]: k for k in (1, 2, 3, 4) for i in sh.select(later, k, 4)}
    assert all(after[n] == before[n] for n in names)
    sizes = [len(sh.select(names, k, 4)) for k in (1, 2, 3, 4)]
    assert sum(sizes) == 200 and min(sizes) >= 30  # 50 +- a few sqrt(50)


def test_shard_needs_a_seed_and_a_folder(capsys):
    base = ["grade", "x.ipynb", "--shard", "1/2"]
    from course_utils import cli as course_cli

    assert course_cli.main([*base, "--seed", "1"]) == 2
    assert "--shard-dir" in capsys.readouterr().err
    assert course_cli.main([*base, "--shard-dir", "d"]) == 2
    assert "--seed" in capsys.readouterr().err
    assert course_cli.main(["grade", "x.ipynb", "--shard", "3/2", "--seed", "1"]) == 2
    assert "between 1 and N" in capsys.readouterr().err


# ----------------------------------------------------------------------------- the merge's refusals


def _record(k: int, n: int, names: list[str], **over) -> dict:
    paths = [f"/class/{name}/03.ipynb" for name in names]
    mine = sh.select(names, k, n)
    rec = {
        "format": sh.RECORD_FORMAT,
        "shard": [k, n],
        "course": {"version": "0.1.0", "grader_version": 1, "digest": "abc"},
        "options": {"seed": 7, "cell_timeout": 120.0, "threads": 1},
        "class": {"count": len(paths), "digest": sh.list_digest(paths), "paths": paths},
        "indices": mine,
        "reports": [{"notebook": paths[i], "student": names[i]} for i in mine],
    }
    for key, value in over.items():
        rec[key] = value
    return rec


NAMES = [f"s{i:02d}" for i in range(6)]


def _records(n: int = 3) -> list[tuple[str, dict]]:
    return [(f"shard{k}", _record(k, n, NAMES)) for k in range(1, n + 1)]


def test_merge_puts_the_reports_in_the_order_of_the_class():
    recs = _records()
    out = mg.merged_reports(list(reversed(recs)))
    assert [r["student"] for r in out] == NAMES


def test_merge_refuses_a_missing_shard():
    with pytest.raises(sh.ShardError, match="missing shard 2/3"):
        mg.merged_reports([r for r in _records() if r[1]["shard"][0] != 2])


def test_merge_refuses_a_shard_given_twice():
    recs = _records()
    with pytest.raises(sh.ShardError, match="shard 1/3 given twice"):
        mg.merged_reports([*recs, ("copy", copy.deepcopy(recs[0][1]))])


def test_merge_refuses_shards_of_another_count():
    recs = _records()
    recs[1] = ("other", _record(2, 4, NAMES))
    with pytest.raises(sh.ShardError, match="of 3 shards"):
        mg.merged_reports(recs)


def test_merge_refuses_shards_graded_with_different_options():
    recs = _records()
    recs[2][1]["options"]["seed"] = 8
    with pytest.raises(sh.ShardError, match="different options: seed 7 vs 8"):
        mg.merged_reports(recs)


def test_merge_refuses_shards_of_different_course_versions():
    recs = _records()
    recs[1][1]["course"]["digest"] = "def"
    with pytest.raises(sh.ShardError, match="different course versions: digest"):
        mg.merged_reports(recs)


def test_merge_refuses_shards_of_different_classes():
    recs = _records()
    recs[1] = ("other", _record(2, 3, [*NAMES, "s99"]))
    with pytest.raises(sh.ShardError, match="different classes"):
        mg.merged_reports(recs)


def test_merge_of_an_unfinished_shard_says_so(tmp_path, capsys):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / sh.RECORD_NAME).write_text("{not json")
    from course_utils import cli as course_cli

    assert course_cli.main(["grade-merge", str(tmp_path / "a")]) == 2
    assert "no shard.json (did that shard finish?)" in capsys.readouterr().err
    assert course_cli.main(["grade-merge", str(tmp_path / "b")]) == 2
    assert "not a shard record" in capsys.readouterr().err


def test_reproducible_reports_leave_out_what_is_measured():
    rep = {
        "runtime_s": 17.2,
        "exercises": [{"id": "1", "runtime_s": 0.3}, {"id": "Q1"}],
        "sandbox": {"backend": "bwrap", "uid": 200480, "peak_memory_mb": 172.0, "cpu_s": 2.5},
        "grader_peak_rss_mb": 209.4,
    }
    out = grade_cli.strip_measurements(rep)
    assert out == {
        "runtime_s": 0.0,
        "exercises": [{"id": "1", "runtime_s": 0.0}, {"id": "Q1"}],
        "sandbox": {"backend": "bwrap"},
    }
    assert rep["runtime_s"] == 17.2  # the caller's report is untouched


# ----------------------------------------------------------------------------- real processes

# one submission per kind of outcome, named so that each of 3 shards gets one or two
CLASS = {
    "s00": "solution",  # shard 2: full marks
    "s01": "syntax_error",  # shard 3: one exercise lost
    "s02": "malformed",  # shard 3: bad input, never runs
    "s03": "reexport",  # shard 1: flagged
    "s04": None,  # shard 2: a missing file
}
WRITERS = {
    "--json": "grades.json",
    "--csv": "gradebook.csv",
    "--junit": "grades.xml",
    "--feedback": "feedback",
    "--classroom": "classroom.json",
    "--report": "report.md",
    "--class-report": "class",
}


def _writers(folder: Path) -> list[str]:
    return [x for opt, name in WRITERS.items() for x in (opt, str(folder / name))]


def _env() -> dict[str, str]:
    path = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path), "COURSE_PROFILE": "ci"}


def _same_tree(a: Path, b: Path) -> list[str]:
    """Files that differ between two trees (by content), or exist in one only."""
    cmp = filecmp.dircmp(a, b)
    out = [str(a / x) for x in cmp.left_only + cmp.right_only]
    out += [str(a / x) for x in cmp.common_files if (a / x).read_bytes() != (b / x).read_bytes()]
    for sub in cmp.common_dirs:
        out += _same_tree(a / sub, b / sub)
    return out


@pytest.mark.slow
def test_three_shards_merge_into_the_gradebook_of_one_run(tmp_path):
    paths = []
    for name, fixture in CLASS.items():
        (tmp_path / "class" / name).mkdir(parents=True)
        target = tmp_path / "class" / name / "99_fixture.ipynb"
        if fixture:
            shutil.copyfile(SUBS / f"{fixture}.ipynb", target)
        paths.append(str(target))
    assert [sh.shard_of(n, 3) for n in CLASS] == [2, 3, 3, 1, 2]
    common = [
        *paths,
        "--checks",
        str(FIXTURES / "grading_fixture_checks.py"),
        "--reference-dir",
        str(FIXTURES / "solutions"),
        "--assignment",
        "99_fixture",
        "--cell-timeout",
        "5",
        "--memory-mb",
        "2048",
        "--seed",
        "7",
        "--threads",
        "1",
        "--reproducible",
        "-q",
    ]
    course = [sys.executable, "-m", "course_utils.cli"]
    one = tmp_path / "one"
    single = subprocess.Popen([*course, "grade", *common, "-j", "2", *_writers(one)], env=_env())
    shards = [
        subprocess.Popen(
            [
                *course,
                "grade",
                *common,
                "--shard",
                f"{k}/3",
                "--shard-dir",
                str(tmp_path / f"shard{k}"),
                *_writers(tmp_path / f"shard{k}"),
            ],
            env=_env(),
        )
        for k in (1, 2, 3)
    ]
    codes = [p.wait(timeout=900) for p in shards]
    assert single.wait(timeout=900) == 2  # the malformed and the missing submission
    assert codes == [0, 2, 2]  # each shard's own exit code: shard 1 holds no bad input
    merged = tmp_path / "merged"
    order = [str(tmp_path / f"shard{k}") for k in (3, 1, 2)]  # any order
    code = subprocess.run(
        [*course, "grade-merge", *order, "--reproducible", "-q", *_writers(merged)], env=_env()
    ).returncode
    assert code == 2  # the single run's exit code
    assert _same_tree(one, merged) == []
    reports = json.loads((merged / "grades.json").read_text())
    assert [r["student"] for r in reports] == list(CLASS)
    assert sorted(p.name for p in (merged / "feedback").iterdir()) == [f"{n}.md" for n in CLASS]
    # a shard's own gradebook holds only its students
    assert [
        r["student"] for r in json.loads((tmp_path / "shard3" / "grades.json").read_text())
    ] == [
        "s01",
        "s02",
    ]


# ----------------------------------------------------------------------------- the recipes


def _doc_commands(prefix: str) -> list[str]:
    """Every ``course <prefix>`` command of the README section's code blocks, continuation
    lines joined, a YAML ``- run:`` and a trailing ``|| [ $? -le 2 ]`` removed."""
    text = README.read_text(encoding="utf-8").split(SECTION, 1)[1].split("\n### ", 1)[0]
    blocks = re.findall(r"```[a-z]*\n(.*?)```", text, re.S)
    out = []
    for block in blocks:
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.strip().removeprefix("- ").removeprefix("run: ").strip()
            line = re.sub(r"\s*\|\|.*$", "", line)
            if line.startswith(f"course {prefix} "):
                out.append(line)
    return out


RECIPE_ENV = {
    "SLURM_ARRAY_TASK_ID": "2",
    "SLURM_ARRAY_JOB_ID": "4242",
    "SLURM_ARRAY_TASK_COUNT": "3",
    "JOB_COMPLETION_INDEX": "1",
    "SHARDS": "3",
    "GRADING_SEED": "4242",
}


def test_every_recipe_grades_its_shard_in_a_dry_run(tmp_path):
    commands = _doc_commands("grade")
    assert len(commands) == 3, commands  # one per engine
    for name in ("alice", "bob", "carol", "dave"):
        (tmp_path / "submissions" / name).mkdir(parents=True)
        shutil.copyfile(
            ROOT / "notebooks" / "03_scaled_dot_product.ipynb",
            tmp_path / "submissions" / name / "03_scaled_dot_product.ipynb",
        )
    # GitHub's ${{ matrix.shard }} and ${{ github.run_id }} as the runner expands them
    env = {**_env(), **RECIPE_ENV}
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "course").write_text(f'#!/bin/sh\nexec {sys.executable} -m course_utils.cli "$@"\n')
    (shim / "course").chmod(0o755)
    env["PATH"] = f"{shim}{os.pathsep}{env['PATH']}"
    for command in commands:
        command = command.replace("${{ matrix.shard }}", "2").replace(
            "${{ github.run_id }}", "4242"
        )
        out = subprocess.run(
            ["bash", "-c", f"{command} --dry-run"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
        )
        assert out.returncode == 0, (command, out.stderr)
        assert "of 4 submissions" in out.stdout, (command, out.stdout)


def test_every_merge_recipe_parses():
    commands = _doc_commands("grade-merge")
    assert commands
    for command in commands:
        parser = argparse.ArgumentParser(prog="course grade-merge")
        mg.add_arguments(parser)
        words = command.split()[2:]
        args = parser.parse_args(words)  # SystemExit on a bad option
        assert args.shards and args.json


def test_merge_follows_shard_ones_order_when_another_shard_globbed_differently():
    recs = _records()
    k, rec = recs[1]
    perm = list(reversed(range(len(NAMES))))  # shard 2's shell listed the class backwards
    rec["class"]["paths"] = [rec["class"]["paths"][j] for j in perm]
    names = [NAMES[j] for j in perm]
    rec["indices"] = sh.select(names, 2, 3)
    rec["reports"] = [
        {"notebook": rec["class"]["paths"][i], "student": names[i]} for i in rec["indices"]
    ]
    out = mg.merged_reports(recs)
    assert [r["student"] for r in out] == NAMES


def test_merge_keeps_a_submission_given_twice_twice():
    names = ["s00", "s00", "s03"]  # the same notebook twice on the command line: two reports
    recs = []
    for k in (1, 2, 3):
        rec = _record(k, 3, names)
        recs.append((f"shard{k}", rec))
    out = mg.merged_reports(recs)
    assert [r["student"] for r in out] == names
