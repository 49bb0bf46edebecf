"""``course doctor``: what this machine has, which profile runs, whether the grader's sandbox
and the browser tests can run here, and whether optional data is here.

On a machine without CUDA the gpu profile's section is folded into one line
(``course doctor --gpu`` prints it in full).
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import shutil
import sys
from pathlib import Path

# Python versions: what CI gates on, what CI also runs (not gating yet), what pyproject allows.
TESTED_PYTHONS = ("3.10", "3.11", "3.13")  # .github/workflows/ci.yml, job test's matrix
ALSO_RUN_PYTHONS: tuple[str, ...] = ()  # run by CI without gating on them (none now)
ALLOWED_PYTHONS = ("3.10", "3.11", "3.12", "3.13")

PACKAGES = ("torch", "numpy", "matplotlib", "sklearn", "jupyterlab", "ipywidgets", "nbval", "tqdm")


def _version(name: str) -> str:
    try:
        return getattr(importlib.import_module(name), "__version__", "installed")
    except Exception as exc:  # a broken install should be reported, not crash the doctor
        return f"MISSING ({type(exc).__name__}: {exc})"


def report(full_gpu: bool = True) -> list[str]:
    """The doctor's report as lines of text; ``full_gpu=False`` folds the gpu profile's
    section into one line when there is no CUDA GPU."""
    import torch

    from course_utils.runtime import profiles

    lines = [f"python      {platform.python_version()} ({platform.platform()})"]
    lines.append(f"            {python_support()}")
    lines += [f"{name:<11} {_version(name)}" for name in PACKAGES]
    cuda = torch.cuda.is_available()
    mps = getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()
    if cuda:
        device = f"CUDA ({torch.cuda.get_device_name(0)})"
    elif mps:
        device = "MPS (Apple GPU)"
    else:
        device = f"CPU ({torch.get_num_threads()} threads)"
    lines.append(f"device      {device}")
    lines.append(f"profile     {profiles.describe().splitlines()[0]}")
    slow = profiles.slow_gpu_problem(cuda)
    if slow:
        lines.append(f"            WARNING: {slow}")
    if full_gpu or cuda:
        lines += _gpu_profile_lines()
        lines += precision_lines()
    else:
        lines.append(
            "gpu profile not for this machine (no CUDA GPU); `course doctor --gpu` lists its "
            "per-notebook estimates"
        )
    lines += sandbox_lines()
    lines.append(f"chromium    {chromium_line()}")
    lines += _data_lines()
    return lines


def python_support(version: tuple[int, int] | None = None) -> str:
    """Whether this Python is one the course's CI tests, one it merely allows, or neither."""
    major, minor = version or sys.version_info[:2]
    v = f"{major}.{minor}"
    if v in TESTED_PYTHONS:
        return f"Python {v}: supported (CI runs the quick tier on {', '.join(TESTED_PYTHONS)})"
    if v in ALSO_RUN_PYTHONS:
        return (
            f"Python {v}: allowed; CI runs the quick tier on it but does not gate on it yet "
            f"(known failures; gated: {', '.join(TESTED_PYTHONS)})"
        )
    if v in ALLOWED_PYTHONS:
        return f"Python {v}: allowed but not tested in CI (tested: {', '.join(TESTED_PYTHONS)})"
    return f"Python {v}: NOT supported (use one of {', '.join(TESTED_PYTHONS)})"


def _cgroup_line() -> str:
    root = Path("/sys/fs/cgroup")
    controllers = root / "cgroup.controllers"
    if controllers.is_file():
        have = controllers.read_text().split()
        need = [c for c in ("memory", "pids") if c not in have]
        v = "v2" + (f", missing {', '.join(need)}" if need else " with memory and pids")
    elif (root / "memory").is_dir():
        v = "v1 (memory" + (", pids)" if (root / "pids").is_dir() else "; no pids)")
    else:
        return "none mounted: the grader falls back to a memory watchdog"
    writable = os.access(root, os.W_OK) or os.access(root / "memory", os.W_OK)
    return v + ("" if writable else "; not writable here (the grader uses a watchdog instead)")


def _userns_line() -> str:
    knobs = {
        "/proc/sys/kernel/unprivileged_userns_clone": "unprivileged user namespaces",
        "/proc/sys/user/max_user_namespaces": "max user namespaces",
    }
    parts = []
    for path, label in knobs.items():
        try:
            parts.append(f"{label} {Path(path).read_text().strip()}")
        except OSError:
            continue
    return ", ".join(parts) or "no namespace settings readable"


def sandbox_lines() -> list[str]:
    """The grader's sandbox on this machine: bubblewrap (probed), namespaces, cgroups, root."""
    lines = []
    if not sys.platform.startswith("linux"):
        return ["sandbox     not Linux: course grade runs unsandboxed (--sandbox docker/podman)"]
    from course_utils.grading.sandbox import bwrap_problem

    problem = bwrap_problem()
    exe = shutil.which("bwrap")
    if problem is None:
        lines.append(
            f"sandbox     bubblewrap works ({exe}): course grade sandboxes each submission"
        )
    else:
        lines.append(f"sandbox     NOT READY: {problem}; course grade would run unsandboxed")
    who = "root" if os.geteuid() == 0 else "not root (bwrap uses user namespaces)"
    lines.append(f"            user {who}; {_userns_line()}")
    lines.append(f"            cgroups {_cgroup_line()}")
    return lines


def chromium_line() -> str:
    """Whether the browser tests (tests/test_browser.py, the class report) can drive Chromium."""
    exe = os.environ.get("COURSE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not (Path(exe).is_file() and os.access(exe, os.X_OK)):
        return "not found (browser tests skip; apt-get install -y chromium, or set COURSE_CHROMIUM)"
    try:
        importlib.import_module("playwright")
    except ImportError:
        return f"{exe}; the Python package playwright is missing (browser tests skip)"
    return f"{exe} with playwright (browser tests run)"


def _gpu_profile_lines() -> list[str]:
    """The gpu profile's assumptions and per-notebook estimates (course_utils.gpu_plan), each
    with what runs, written from the lesson's recipe table (``Lesson.what_on_gpu``)."""
    from course_utils import gpu_plan, lessons

    def what(key: str) -> str:
        return lessons.get(key).what_on_gpu()

    return [f"gpu profile {line}" for line in gpu_plan.doctor_lines(what)]


def precision_lines() -> list[str]:
    """Which mixed precision this machine's GPU gets and why, and whether the gpu profile's
    estimated memory fits it (:mod:`course_utils.runtime.precision`, :mod:`course_utils.gpu_plan`)."""
    import torch

    from course_utils import gpu_plan
    from course_utils.runtime import precision

    if not torch.cuda.is_available():
        return [
            "precision   fp32 here (no CUDA GPU); on a GPU: bf16 where the card has it, "
            "else fp16 with a gradient scaler (a T4)"
        ]
    chosen = precision.choose("cuda:0")
    total = torch.cuda.get_device_properties(0).total_memory
    key, peak = max(gpu_plan.estimates().items(), key=lambda kv: kv[1].memory_gb)
    if peak.memory_gb * 1e9 <= total:
        fit = f"the gpu profile fits (largest estimate: notebook {key}, {peak.memory_gb:g} GB)"
    else:
        fit = (
            f"notebook {key}'s estimate ({peak.memory_gb:g} GB) does not fit: its sweep stops "
            "where memory runs out and says so"
        )
    return [
        f"precision   {chosen.label}: {chosen.reason}",
        f"gpu memory  {total / 1e9:.1f} GB: {fit}",
    ]


def _data_lines() -> list[str]:
    return [f"data        {line}" for line in describe_optional_data()]


def _size(path: Path) -> str:
    """A file's size for humans (kB or MB)."""
    n = path.stat().st_size
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"


def describe_optional_data() -> list[str]:
    """Lines for ``course doctor``: the cache folder and whether each optional data set is here."""
    from course_utils.data import images, text
    from course_utils.data.cache import ENV_VAR, cache_dir

    lines = [f"cache folder: {cache_dir()} (set {ENV_VAR} to change it)"]
    shakespeare = text.find_tinyshakespeare()
    if shakespeare is not None:
        lines.append(f"tiny-shakespeare: found at {shakespeare} ({_size(shakespeare)})")
    elif text.bundled_tinyshakespeare() is not None:
        lines.append(
            f"tiny-shakespeare: bundled with course_utils ({_size(text.BUNDLED_TINYSHAKESPEARE)} "
            "compressed, checksum verified)"
        )
    else:
        lines.append(
            "tiny-shakespeare: not found, and the bundled copy is missing or damaged (notebook 08 "
            'then uses a generated corpus); get it with `python -c "from course_utils.data.text '
            'import load_text_corpus; load_text_corpus(download=True)"` or put '
            "tinyshakespeare.txt in the cache folder"
        )
    cifar = images.find_cifar10()
    if cifar is not None:
        lines.append(f"CIFAR-10: cached at {cifar} ({_size(cifar)})")
    else:
        lines.append(
            "CIFAR-10: not cached (only the gpu profile of notebook 09 uses it; "
            "load_cifar10(download=True) fetches 170 MB)"
        )
    mnist = images.find_mnist()
    if mnist is not None:
        lines.append(f"MNIST: cached in {mnist} (notebook 09's cpu and gpu profiles use it)")
    else:
        lines.append(
            "MNIST: not cached (optional: notebook 09 then uses scikit-learn's 8x8 digits; copy "
            "the four idx files, e.g. train-images-idx3-ubyte.gz, into the cache folder)"
        )
    lines.append("digits: bundled with scikit-learn (always available)")
    return lines


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``course doctor [--gpu]``."""
    parser.add_argument(
        "--gpu",
        action="store_true",
        help="print the gpu profile's assumptions and per-notebook estimates even without CUDA",
    )


def main(args: argparse.Namespace) -> int:
    """Print the report; exit 0 when the core packages import, 1 otherwise."""
    lines = report(full_gpu=getattr(args, "gpu", False))
    print("\n".join(lines))
    return 1 if any("MISSING" in line for line in lines) else 0
