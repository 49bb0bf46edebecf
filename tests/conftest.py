"""Suite-wide settings: one thread per test process.

CI runs ``pytest -n 2`` on 2 cores; with torch's default of one thread per core each worker
would oversubscribe the machine (measured: a small training test went from 11 s to 133 s).
Kernels and subprocesses started by the tests inherit ``OMP_NUM_THREADS`` from here.
"""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Every test runs with one torch thread and leaves the count as it found it (a test may
    change it, e.g. a benchmark's --threads, a notebook helper's one_thread)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
