"""Suite-wide settings: one thread per test process.

CI runs ``pytest -n 2`` on 2 cores; with torch's default of one thread per core each worker
would oversubscribe the machine (measured: a small training test went from 11 s to 133 s).
Kernels and subprocesses started by the tests inherit ``OMP_NUM_THREADS`` from here.
"""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
# the suite is an author's run: a failed claim says "fix the prose or the experiment"
# (course_utils.authoring.claims; tests of the student's message unset it)
os.environ.setdefault("COURSE_CLAIMS_AUTHOR", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from course_utils.fast_nbformat import skip_iri_parser  # noqa: E402

skip_iri_parser()  # as `course ...` does: nbformat without jsonschema's IRI grammar

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Every test runs with one torch thread and leaves the count as it found it (a test may
    change it, e.g. a benchmark's --threads, a notebook helper's one_thread)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# the tests that take tens of seconds (the fixture and hostile grading batches, the browser, each
# notebook's execution), in the order they should start: the longest first, so that under
# ``-n 2`` the two workers finish together instead of one waiting on a late batch
_LONG_FIRST = (
    "test_sandbox.py",
    "test_grading.py",
    "test_browser.py",
    "test_notebooks.py",
)


def pytest_collection_modifyitems(config, items):
    """Start the long tests first (a stable sort: every xdist worker collects the same order)."""

    def rank(item) -> int:
        name = item.path.name
        if item.get_closest_marker("slow") is None:
            return len(_LONG_FIRST) + 1
        return _LONG_FIRST.index(name) if name in _LONG_FIRST else len(_LONG_FIRST)

    items.sort(key=rank)


def _is_capstone(item) -> bool:
    """A test of the capstone's checks (its exercise ids are 13.k, its module nb13_...)."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    texts = [str(getattr(v, "id", v)) for v in params.values()] + [item.path.name]
    return any(t.startswith("13.") or "nb13" in t or "capstone" in t for t in texts)


@pytest.fixture(autouse=True)
def _capstone_in_ci_size(request, monkeypatch):
    """The capstone's checks train a model of the active profile's size; with no profile set
    (a developer's `pytest`) that is `cpu`, minutes per test. Its tests pin `ci` unless a
    profile is set, so the README's test command stays a few minutes on any machine."""
    if "COURSE_PROFILE" not in os.environ and _is_capstone(request.node):
        monkeypatch.setenv("COURSE_PROFILE", "ci")
    yield
