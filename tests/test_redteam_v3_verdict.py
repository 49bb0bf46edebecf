"""The third red team's verdict cases (``shared/reviews/turn4/redteam-v3.md``), one test per id.

Each case builds the red team's submission ("what I did" column) from the course's own released
notebooks. Fast tests run the trusted side's review (:mod:`course_utils.grading.policy`) on it;
``test_redteam_v3_verdict_batch`` grades them all in the sandbox with ``course grade
--zero-flagged`` (slow) and the per-case slow tests read that batch.
"""

from __future__ import annotations

import copy
import inspect
import json
import os
import sys
from pathlib import Path

import pytest
import torch

from course_utils import checks
from course_utils.checks import core
from course_utils.grading import grader as gr
from course_utils.grading import harvest as hv
from course_utils.grading import plan as pl
from course_utils.grading import policy
from course_utils.grading import reports as rp

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions"
STUDENT = ROOT / "notebooks"
NB00, NB06 = "00_start_here.ipynb", "06_multi_head.ipynb"

HARVEST_REWRITE_CELL = """\
def _strip(lines):
    text = "".join(lines)
    if "<course-grader>" in text:
        text = text.replace("profile=True", "profile=False")
        text = text.replace('rules.get("forbids", ())', "()")
        text = text.replace(
            "collect_outputs(exercise, candidate, cases, watch)",
            "collect_outputs(exercise, exercise.reference, cases, watch)",
        )
    return text.splitlines(True)


get_ipython().input_transformers_cleanup.append(_strip)
"""
REHOME_CELL = """\
import importlib
import types


def _rehome(modname):
    m = importlib.import_module(modname)
    fresh = types.ModuleType(modname.replace(".", "_") + "_mine")
    fresh.__dict__["__name__"] = fresh.__name__
    exec(compile(open(m.__file__).read(), "/submission/mylib_x.py", "exec"), fresh.__dict__)
    return fresh
"""
THREAD_CELL = """\
import queue
import threading

_jobs, _done = queue.Queue(), queue.Queue()


def _worker():
    while True:
        f, a = _jobs.get()
        _done.put(f(*a))


threading.Thread(target=_worker, daemon=True).start()


def _remote(f, *a):
    _jobs.put((f, a))
    return _done.get()
"""
HELPER_SOFTMAX = """\
def _stable_softmax(x):
    shifted = x - x.amax(dim=-1, keepdim=True)
    e = shifted.exp()
    return e / e.sum(dim=-1, keepdim=True)
"""
REF = 'from course_utils.checks import fallback\n_ref = fallback("00.1", None)\n'

# case id -> (base notebook, cells inserted after the imports, {exercise id: new cell source},
#             files written next to the notebook)
CASES: dict[str, tuple[str, list[str], dict[str, str], dict[str, str]]] = {
    "HARVEST_REWRITE": ("stub00", [HARVEST_REWRITE_CELL], {}, {}),
    "HARVEST_REWRITE_06": ("stub06", [HARVEST_REWRITE_CELL], {}, {}),
    "REHOME_ALL": (
        "stub00",
        [REHOME_CELL],
        {"00.1": 'softmax = _rehome("course_utils.modeling.attention").softmax\n'},
        {},
    ),
    "REHOME_ALL_06": (
        "stub06",
        [REHOME_CELL],
        {
            "06.2": 'split_heads = _rehome("course_utils.modeling.layers").split_heads\n',
            "06.3": 'merge_heads = _rehome("course_utils.modeling.layers").merge_heads\n',
            "06.4": 'MultiHeadAttention = _rehome("course_utils.modeling.layers")'
            ".MultiHeadAttention\n",
        },
        {},
    ),
    "W_REHOME": (
        "sol00",
        [],
        {
            "00.1": REF + "import types\n"
            "softmax = types.FunctionType(\n"
            '    _ref.__code__.replace(co_filename="/submission/mine.py"),\n'
            '    dict(_ref.__globals__, __name__="__main__"),\n'
            ")\n"
        },
        {},
    ),
    "W_MAP": (
        "sol00",
        [],
        {
            "00.1": REF + "import sys\n\n\ndef softmax(x):\n"
            "    p = sys.getprofile()\n"
            "    list(map(sys.setprofile, [None]))\n"
            "    try:\n        return _ref(x)\n    finally:\n        sys.setprofile(p)\n"
        },
        {},
    ),
    "W_THREAD": (
        "sol00",
        [THREAD_CELL],
        {
            "00.1": REF + "\n\ndef softmax(x):\n    return _remote(_ref, x) * 1.0\n",
            "00.2": "def logsumexp(x):\n    return _remote(torch.logsumexp, x, -1) + 0.0\n",
        },
        {},
    ),
    "W_DISPATCH": (
        "sol00",
        [],
        {
            "00.2": "def logsumexp(x):\n"
            "    with torch._C.DisableTorchFunction(), torch._C._DisableTorchDispatch():\n"
            "        r = torch.logsumexp(x, -1)\n"
            "    return r + 0.0\n"
        },
        {},
    ),
    "W_FX": (
        "sol00",
        [],
        {
            "00.1": REF
            + "_gm = torch.fx.symbolic_trace(_ref)\n\n\ndef softmax(x):\n    return _gm(x)\n"
        },
        {},
    ),
    "W_JIT": ("sol00", [], {"00.1": REF + "softmax = torch.jit.script(_ref)\n"}, {}),
    "PYFILE": ("sol00", [], {"00.1": "from mine import softmax\n"}, {"mine.py": "<reference>"}),
    "NUMPY": (
        "sol00",
        [],
        {
            "00.2": "import scipy.special\n\n\ndef logsumexp(x):\n"
            "    return torch.from_numpy(scipy.special.logsumexp(x.numpy(), -1))\n"
        },
        {},
    ),
    "HELPER_FP": (
        "sol00",
        [],
        {"00.1": HELPER_SOFTMAX + "\n\ndef softmax(x):\n    return _stable_softmax(x)\n"},
        {},
    ),
    "HELPER_FP_OTHER_CELL": (
        "sol00",
        [HELPER_SOFTMAX],
        {"00.1": "def softmax(x):\n    return _stable_softmax(x)\n"},
        {},
    ),
}
HONEST = {"HELPER_FP", "HELPER_FP_OTHER_CELL"}


def _base(kind: str) -> dict:
    folder = SOLUTIONS if kind.startswith("sol") else STUDENT
    name = NB00 if kind.endswith("00") else NB06
    return json.loads((folder / name).read_text(encoding="utf-8"))


def _cell(source: str, k: int) -> dict:
    return {
        "cell_type": "code",
        "id": f"rt4-{k}",
        "metadata": {},
        "outputs": [],
        "execution_count": None,
        "source": source,
    }


def build(case: str, dest: Path | None = None) -> dict:
    """The red team's submission for ``case`` (written to ``dest/<notebook>`` when given)."""
    kind, extra, replace, files = CASES[case]
    nb = copy.deepcopy(_base(kind))
    for c in nb["cells"]:  # as read_notebook gives them
        c["source"] = "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
    for ex_id, src in replace.items():
        i = next(i for i, c in enumerate(nb["cells"]) if pl.course_meta(c) == (ex_id, "exercise"))
        nb["cells"][i]["source"] = src
    imports = next(
        i
        for i, c in enumerate(nb["cells"])
        if c["cell_type"] == "code" and "import" in "".join(c["source"])
    )
    for k, src in enumerate(extra):
        nb["cells"].insert(imports + 1 + k, _cell(src, k))
    if dest is not None:
        dest.mkdir(parents=True, exist_ok=True)
        (dest / (NB00 if kind.endswith("00") else NB06)).write_text(json.dumps(nb), "utf-8")
        for name, text in files.items():
            if text == "<reference>":
                text = "import torch\n\n\n" + inspect.getsource(checks.get("00.1").reference)
            (dest / name).write_text(text, encoding="utf-8")
    return nb


def review(case: str) -> policy.Review:
    nb = build(case)
    kind = CASES[case][0]
    ref = json.loads((SOLUTIONS / (NB00 if kind.endswith("00") else NB06)).read_text("utf-8"))
    table = pl.exercise_table()
    assignment = pl.resolve_assignment(
        "x.ipynb",
        nb,
        dirs=[SOLUTIONS],
        table=table,
        forced=(NB00 if kind.endswith("00") else NB06)[:-6],
    )
    plan = pl.build_plan(nb, assignment)
    local = policy.local_module_names(CASES[case][3])
    return policy.review(nb, plan.exercise_cells, ref, local)


def kinds(flags: list[str]) -> set[str]:
    return {f.split(": ")[1] for f in flags if f.startswith("policy: ")}


# ----------------------------------------------------------------------------- fast: the review


def test_HARVEST_REWRITE_input_transformers_flag_every_exercise():
    r = review("HARVEST_REWRITE")
    assert "ipython_hooks" in kinds(r.notebook)
    assert all("ipython_hooks" in kinds(r.flags_for(x)) for x in ("00.1", "00.2"))
    assert "ipython_hooks" in kinds(review("HARVEST_REWRITE_06").flags_for("06.4"))


def test_REHOME_ALL_recompiled_course_modules_are_flagged():
    r = review("REHOME_ALL")
    assert "code_rewrite" in kinds(r.flags_for("00.1"))
    r06 = review("REHOME_ALL_06")
    assert all("code_rewrite" in kinds(r06.flags_for(x)) for x in ("06.2", "06.3", "06.4"))


def test_W_REHOME_code_object_with_another_file_name_is_flagged():
    assert "code_rewrite" in kinds(review("W_REHOME").flags_for("00.1"))
    found = policy.scan("import gc\nref = [o for o in gc.get_objects() if callable(o)]\n")
    assert ("code_rewrite", "gc.get_objects") in found


def test_W_MAP_profiler_switched_off_through_map_is_flagged():
    r = review("W_MAP")
    assert "tracing" in kinds(r.flags_for("00.1")) and "tracing" in kinds(r.notebook)


def test_W_THREAD_worker_thread_flags_every_exercise():
    r = review("W_THREAD")
    assert all("threads" in kinds(r.flags_for(x)) for x in ("00.1", "00.2"))


def test_W_DISPATCH_private_torch_guards_are_flagged():
    assert "torch_private" in kinds(review("W_DISPATCH").flags_for("00.2"))
    sub = "class T(torch.Tensor):\n    @classmethod\n    def __torch_dispatch__(cls, f, t, a, k=None):\n        pass\n"
    assert ("torch_private", "__torch_dispatch__") in policy.scan(sub)


def test_W_FX_JIT_traced_or_scripted_references_are_flagged():
    assert "fx_jit" in kinds(review("W_FX").flags_for("00.1"))
    assert "fx_jit" in kinds(review("W_JIT").flags_for("00.1"))


def test_PYFILE_importing_a_pasted_module_is_flagged():
    assert "local_code" in kinds(review("PYFILE").flags_for("00.1"))
    assert ("local_code", "%run") in policy.scan("%run mine.py\n")


def test_NUMPY_round_trip_in_the_exercise_is_flagged_not_in_plots():
    assert "numpy" in kinds(review("NUMPY").flags_for("00.2"))
    nb = build("HELPER_FP")
    nb["cells"].append(
        _cell(
            "import numpy as np\nimport matplotlib.pyplot as plt\nplt.plot(np.array([1, 2]))\n", 99
        )
    )
    ex = {
        "00.1": [i for i, c in enumerate(nb["cells"]) if pl.course_meta(c) == ("00.1", "exercise")]
    }
    assert policy.review(nb, ex, None).flags_for("00.1") == []


def test_v2_A7_full_matrix_hidden_from_the_tracker_is_flagged():
    """The second red team's ``nb11_fullmatrix_hidden``: the full (T, S) scores under
    ``torch._C.DisableTorchFunction`` (so the in-kernel tracker sees nothing): flagged on the
    trusted side, so ``--zero-flagged`` takes 11.1's points (memory rule included)."""
    src = (
        "import math\n\n\ndef tiled_attention(q, k, v, block_size=128, causal=False):\n"
        "    with torch._C.DisableTorchFunction():\n"
        "        s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])\n"
        "        if causal:\n"
        "            T, S = s.shape[-2:]\n"
        "            s = s.masked_fill(torch.ones(T, S, dtype=torch.bool).triu(1), -math.inf)\n"
        "        return torch.softmax(s, dim=-1) @ v\n"
    )
    nb = {"cells": [_cell(src, 0)]}
    r = policy.review(nb, {"11.1": [0]}, None)
    assert "torch_private" in kinds(r.flags_for("11.1"))
    entry = {"status": "passed", "points": 4, "message": "ok", "flags": r.flags_for("11.1")}
    assert gr.apply_flag_policy(entry, zero_flagged=True)["points"] == 0


def test_HELPER_FP_honest_helpers_are_not_flagged_by_the_policy():
    for case in HONEST:
        r = review(case)
        assert kinds(r.flags_for("00.1")) == set(), r.flags_for("00.1")
    # the helper in another cell has the solution's shape: a review note, never zeroed
    other = review("HELPER_FP_OTHER_CELL").flags_for("00.1")
    entry = {"status": "passed", "points": 2, "message": "ok", "flags": other}
    assert gr.apply_flag_policy(dict(entry), zero_flagged=True)["points"] == 2


def test_HELPER_FP_check_cell_and_grader_rules_are_the_same():
    """The watch's rules the grader sends are the check cell's (``core.make_watch``): the
    reference's shapes only, no solution notebook shapes."""
    ex = checks.get("00.1")
    from course_utils.checks import guard

    assert hv.guard_params("00.1")["shapes"] == sorted(guard.reference_shapes(ex.reference))
    ns = {"torch": torch}
    exec(HELPER_SOFTMAX + "\n\ndef softmax(x):\n    return _stable_softmax(x)\n", ns)
    assert core.check(ex, ns["softmax"], own_work=True).status == "passed"


def test_SOLUTION_SHAPES_hash_oracle_never_reaches_the_kernel():
    from course_utils.checks import guard

    sol = json.loads((SOLUTIONS / NB00).read_text("utf-8"))
    cell = next(c for c in sol["cells"] if pl.course_meta(c) == ("00.1", "exercise"))
    shapes = set(guard.source_shapes(pl.python_source("".join(cell["source"]))))
    code = hv.harvest_code(exercise_id="00.1", function="softmax", seed=1, out_dir="/x")
    sent = set(guard.reference_shapes(checks.get("00.1").reference))
    assert shapes and not any(s in code for s in shapes - sent)


def test_I1_kernel_flag_text_is_never_copied():
    ex = checks.get("00.1")
    forged = [
        "calls_reference: <script>alert(1)</script> the grader says 2/2",
        "shortcut: ::error::forged",
        "made_up: anything",
    ]
    out = gr.trusted_flags(forged, ex)
    assert out == [
        "calls_reference: softmax calls the course's own implementation",
        "shortcut: the run-time watch saw a shortcut while softmax ran (see the message)",
    ]


def test_FEEDBACK_NAMES_jose_and_jos_bang_get_their_own_files(tmp_path):
    def rep(name, pts):
        return {
            "notebook": f"{name}/00.ipynb",
            "student": name,
            "total": pts,
            "max": 4,
            "percent": 25.0 * pts,
            "exercises": [],
            "flags": [],
            "notes": [],
            "error": None,
        }

    paths = rp.write_feedback([rep("josé", 4), rep("jos!", 0)], tmp_path)
    assert len({p.name for p in paths}) == 2
    assert "josé" in paths[0].read_text("utf-8") and "4 / 4" in paths[0].read_text("utf-8")
    assert "jos!" in paths[1].read_text("utf-8") and "0 / 4" in paths[1].read_text("utf-8")


def test_every_solution_and_student_notebook_passes_the_review():
    """No false positive on the course's own notebooks, every cell reviewed (no reference)."""
    for folder in (SOLUTIONS, STUDENT):
        for path in sorted(folder.glob("*.ipynb")):
            nb = json.loads(path.read_text("utf-8"))
            ex: dict[str, list[int]] = {}
            for i, c in enumerate(nb["cells"]):
                x, role = pl.course_meta(c)
                if x and role == "exercise":
                    ex.setdefault(x, []).append(i)
            r = policy.review(nb, ex, None)
            assert r.notebook == [] and not any(r.exercise.values()), (path.name, r)


def test_honest_variants_stay_unflagged():
    honest = [
        "import functools\n\n\n@functools.lru_cache\ndef f(n):\n    return n\n",
        "ys = [x * 2 for x in range(3)]\n",
        "class M(torch.nn.Module):\n    def forward(self, x):\n        return getattr(self, 'w' + '1')(x)\n",
        "with torch.no_grad():\n    y = torch.softmax(torch.randn(3), -1)\n",
        "%matplotlib inline\nimport math\nx = math.sqrt(2)\n",
        "import numpy as np\nimport matplotlib.pyplot as plt\nplt.imshow(np.array(a.detach()))\n",
        "import gc\n\ngc.collect()\n",
    ]
    nb = {"cells": [_cell(src, k) for k, src in enumerate(honest)]}
    r = policy.review(nb, {"00.1": [1, 2, 3]}, None)
    assert r.notebook == [] and r.flags_for("00.1") == [], r


def test_policy_cost_is_bounded():
    import time

    cell = "!true\n" * 600 + "x = 1\n" * 200_000
    t0 = time.process_time()
    found = policy.scan(cell)
    assert time.process_time() - t0 < 5 and ("unreviewed", "1203 KB in one cell") in found
    assert policy.review({"cells": [_cell(cell, 0)]}, {"00.1": [0]}).notebook


# ----------------------------------------------------------------------------- slow: graded


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    from course_utils.grading.sandbox import bwrap_problem

    if bwrap_problem():
        pytest.skip("needs bubblewrap")
    base = tmp_path_factory.mktemp("rt4v")
    paths = []
    for case, (kind, *_rest) in CASES.items():
        build(case, base / case)
        paths.append(str(base / case / (NB00 if kind.endswith("00") else NB06)))
    out = base / "grades.json"
    from course_utils import cli as course_cli

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "path", list(sys.path))
        mp.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
        mp.setenv("COURSE_PROFILE", "ci")
        course_cli.main(
            ["grade", *paths, "--sandbox", "bwrap", "-j", "2", "-q", "--zero-flagged"]
            + ["--memory-mb", "3072", "--json", str(out)]
        )
    reports = json.loads(out.read_text(encoding="utf-8"))
    return {Path(r["notebook"]).parent.name: r for r in reports}


def _ex(report: dict, ex_id: str) -> dict:
    return next(e for e in report["exercises"] if e["id"] == ex_id)


def _zeroed(graded, case: str, ids: tuple[str, ...], kind: str) -> None:
    for x in ids:
        e = _ex(graded[case], x)
        assert e["points"] == 0, e
        assert any(f.startswith(f"policy: {kind}") for f in e["flags"]), e


@pytest.mark.slow
def test_HARVEST_REWRITE_graded(graded):
    _zeroed(graded, "HARVEST_REWRITE", ("00.1", "00.2"), "ipython_hooks")
    _zeroed(graded, "HARVEST_REWRITE_06", ("06.1", "06.2", "06.3", "06.4"), "ipython_hooks")


@pytest.mark.slow
def test_REHOME_ALL_graded(graded):
    _zeroed(graded, "REHOME_ALL", ("00.1",), "code_rewrite")
    _zeroed(graded, "REHOME_ALL_06", ("06.2", "06.3", "06.4"), "code_rewrite")


@pytest.mark.slow
@pytest.mark.parametrize(
    "case,ids,kind",
    [
        ("W_REHOME", ("00.1",), "code_rewrite"),
        ("W_MAP", ("00.1",), "tracing"),
        ("W_THREAD", ("00.1", "00.2"), "threads"),
        ("W_DISPATCH", ("00.2",), "torch_private"),
        ("W_FX", ("00.1",), "fx_jit"),
        ("W_JIT", ("00.1",), "fx_jit"),
        ("PYFILE", ("00.1",), "local_code"),
        ("NUMPY", ("00.2",), "numpy"),
    ],
)
def test_W_routes_PYFILE_NUMPY_graded(graded, case, ids, kind):
    _zeroed(graded, case, ids, kind)


@pytest.mark.slow
def test_HELPER_FP_graded_same_verdict_as_the_check_cell(graded):
    """The honest helper softmax: PASSED in the check cell, 2/2 from ``course grade
    --zero-flagged`` (its shape-twin in another cell: a review note, points kept)."""
    for case in sorted(HONEST):
        e = _ex(graded[case], "00.1")
        assert e["status"] == "passed" and e["points"] == 2, e
        assert not [f for f in e["flags"] if not f.startswith("review:")], e


def test_threat_model_claims_are_pinned_by_named_tests():
    """The README's threat model names the tests that pin its claims: each one exists."""
    import re

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("### Threat model", 1)[1].split("\n### ", 1)[0]
    named = set(re.findall(r"`(test_\w+)`", section))
    defined = {
        m
        for path in (ROOT / "tests").glob("test_*.py")
        for m in re.findall(r"^def (test_\w+)", path.read_text(encoding="utf-8"), re.M)
    }
    assert len(named) >= 15 and named <= defined, sorted(named - defined)
    for claim in ("Guaranteed", "trusted side", "Every student gets a report", "--zero-flagged"):
        assert claim in section
    kinds_in_readme = set(re.findall(r"^\| `(\w+)` \|", section, re.M))
    assert kinds_in_readme == set(policy.WHY) - {"unreviewed"}


def test_HELPER_FP_grader_refuses_the_same_course_code_as_the_check_cell():
    """The keys the grader sends the kernel's watch are the check cell's (own_work_keys: the
    reference and every course implementation of the exercise's concepts), for every
    exercise: 12.2's beam search or 04.5's relative bias are refused by both or by neither."""
    for ex in checks.EXERCISES:
        sent = hv.guard_params(ex.id)["reference"]
        assert sent == [list(k) for k in core.own_work_keys(ex)], ex.id


def test_ISSUE29_one_notebook_size_cap(tmp_path):
    """``plan.MAX_NOTEBOOK_BYTES`` is the grader's admission cap too: one number."""
    assert gr.MAX_SUBMISSION_BYTES == pl.MAX_NOTEBOOK_BYTES == 32 << 20
    big = tmp_path / "big.ipynb"
    with open(big, "wb") as fh:
        fh.truncate(pl.MAX_NOTEBOOK_BYTES + 1)
    assert "too large" in gr.admit(big)
    with pytest.raises(pl.BadSubmission, match="too large"):
        pl.read_notebook(big)


# ----------------------------------------------------------------------------- v2 A7: cgroup


def test_v2_A7_memory_rule_is_judged_from_the_measured_peak():
    """``measure.judge_probe``: right values within the bound pass; over the bound (what the
    sandbox's cgroup measured, not what the kernel says) or wrong values fail."""
    import numpy as np

    from course_utils.grading import measure

    probe = measure.PROBES["11.1"]
    small = measure.MemoryProbe("11.1", T=64, S=64, Dk=8, Dv=8, block=16, max_extra_mb=48.0)
    expected = measure.expected_output(checks.get("11.1"), small, 5)
    got = expected.float().numpy().copy()
    for extra, wrong, status in (
        (20.0, False, "passed"),
        (134.5, False, "failed"),
        (1.0, True, "failed"),
    ):
        entry = {"status": "passed", "points": 4, "message": "ok"}
        value = got + 1.0 if wrong else got
        measure.judge_probe(entry, probe, extra, value, expected, "")
        assert entry["status"] == status, (extra, wrong, entry)
    entry = {"status": "passed", "points": 4, "message": "ok"}
    measure.judge_probe(entry, probe, None, None, expected, "your function did not run")
    assert entry["points"] == 0 and "did not run" in entry["message"]
    assert not measure.PeakMeter(None).reset()  # no cgroup: the in-kernel tracker only
    assert probe.T * probe.S * 4 / 2**20 > probe.max_extra_mb  # one full matrix is over it
    assert np.isfinite(got).all()


def _nb11(dest: Path, exercise_source: str | None) -> Path:
    nb = json.loads((SOLUTIONS / "11_attention_at_scale.ipynb").read_text("utf-8"))
    keep = []
    for c in nb["cells"]:
        src = "".join(c["source"])
        if c["cell_type"] != "code":
            continue
        if pl.course_meta(c) == ("11.1", "exercise"):
            keep.append(dict(c, source=exercise_source or src))
            break
        if src.lstrip().startswith(("import", "from")):
            keep.append(c)
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / "11_attention_at_scale.ipynb"
    path.write_text(json.dumps(dict(nb, cells=keep)), encoding="utf-8")
    return path


FULL_MATRIX_HIDDEN = (
    "import math\n\n\ndef tiled_attention(q, k, v, block_size=128, causal=False):\n"
    "    with torch._C.DisableTorchFunction():\n"
    "        s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])\n"
    "        if causal:\n"
    "            T, S = s.shape[-2:]\n"
    "            s = s.masked_fill(torch.ones(T, S, dtype=torch.bool).triu(1), -math.inf)\n"
    "        return torch.softmax(s, dim=-1) @ v\n"
)


@pytest.mark.slow
def test_v2_A7_graded_by_the_sandboxs_memory_cgroup(tmp_path):
    """The second red team's nb11 full-matrix notebook (the tracker hidden with
    ``DisableTorchFunction``) loses 11.1 without ``--zero-flagged``: the sandbox's cgroup saw
    the (T, S) matrix on the large case; the solution keeps it."""
    from course_utils.grading.sandbox import bwrap_problem

    if bwrap_problem() or os.geteuid() != 0 or not Path("/sys/fs/cgroup/memory").is_dir():
        pytest.skip("needs bubblewrap, root and a cgroup v1 memory controller")
    paths = [_nb11(tmp_path / "honest", None), _nb11(tmp_path / "full", FULL_MATRIX_HIDDEN)]
    reports = [
        gr.grade_submission(
            p, gr.GradeOptions(sandbox="bwrap", assignment="11_attention_at_scale", memory_mb=3072)
        )
        for p in paths
    ]
    honest, full = (_ex(r, "11.1") for r in reports)
    assert honest["status"] == "passed" and honest["points"] == 4, honest
    assert any("measured by its cgroup" in n for n in reports[0]["notes"]), reports[0]["notes"]
    assert full["points"] == 0 and "the sandbox's memory grew by" in full["message"], full


def test_ISSUE29_grader_is_split_into_modules_with_one_job_each():
    """grading/grader.py (1,091 lines, ~8 jobs) is intake / runner / judge / executed plus the
    entry point; no function of them is over 80 lines (ruff's C901 keeps them simple)."""
    import ast

    import course_utils.grading as grading

    folder = Path(grading.__file__).parent
    jobs = ("grader", "intake", "runner", "judge", "executed", "state", "policy", "measure")
    for name in jobs:
        tree = ast.parse((folder / f"{name}.py").read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assert node.end_lineno - node.lineno < 80, (name, node.name)
    assert len((folder / "grader.py").read_text(encoding="utf-8").splitlines()) < 400
    from course_utils.grading import intake, judge, runner

    assert gr.admit is intake.admit and gr.apply_flag_policy is judge.apply_flag_policy
    assert gr.make_sandbox is runner.make_sandbox


def test_HELPER_FP_grader_verdict_is_the_check_cells_verdict():
    """The judge's step 3 is the check cell's (``core.verdict``): the same status, points and
    message for right values, a named mistake, and a shortcut the watch saw."""
    from course_utils.grading import harvest as hvm
    from course_utils.grading import judge

    ex = checks.get("00.1")
    cases = ex.make_cases(7)
    opts = gr.GradeOptions()

    def naive(x):
        e = torch.exp(x)
        return e / e.sum(dim=-1, keepdim=True)

    for candidate in (ex.reference, naive):
        outputs = [ex.call(candidate, c) for c in cases]
        entry = {"status": "error", "points": 0, "message": "", "flags": []}
        judge._verdict(entry, ex, cases, hvm.Harvest("passed", outputs=outputs), opts, [0], None)
        in_cell = core.verdict(ex, cases, "passed", outputs, "")
        assert (entry["status"], entry["points"], entry["message"]) == (
            in_cell.status,
            in_cell.points,
            in_cell.message,
        )

    def forbidden(x):
        return torch.softmax(x, -1)

    in_cell = core.check(ex, forbidden, seed=7, own_work=True)
    shortcut = hvm.Harvest("error", in_cell.message, flags=["shortcut: x"])
    entry = {"status": "error", "points": 0, "message": "", "flags": []}
    judge._verdict(entry, ex, cases, shortcut, opts, [0], None)
    assert in_cell.status == entry["status"] == "failed" and entry["points"] == 0
