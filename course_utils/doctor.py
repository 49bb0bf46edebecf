"""``course doctor``: what this machine has, which profile runs, and whether optional data is here."""

from __future__ import annotations

import argparse
import importlib
import platform

PACKAGES = ("torch", "numpy", "matplotlib", "sklearn", "jupyterlab", "ipywidgets", "nbval", "tqdm")


def _version(name: str) -> str:
    try:
        return getattr(importlib.import_module(name), "__version__", "installed")
    except Exception as exc:  # a broken install should be reported, not crash the doctor
        return f"MISSING ({type(exc).__name__}: {exc})"


def report() -> list[str]:
    """The doctor's report as lines of text."""
    import torch

    from course_utils import profiles

    lines = [f"python      {platform.python_version()} ({platform.platform()})"]
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
    lines += _gpu_profile_lines()
    lines += _data_lines()
    return lines


def _gpu_profile_lines() -> list[str]:
    """The gpu profile's assumptions and per-notebook estimates (course_utils.gpu_plan)."""
    from course_utils import gpu_plan

    return [f"gpu profile {line}" for line in gpu_plan.doctor_lines()]


def _data_lines() -> list[str]:
    try:
        from course_utils.data import cache
    except ImportError:
        return ["data        (course_utils.data not available)"]
    return [f"data        {line}" for line in cache.describe_optional_data()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``course doctor`` takes no options."""


def main(args: argparse.Namespace) -> int:
    """Print the report; exit 0 when the core packages import, 1 otherwise."""
    lines = report()
    print("\n".join(lines))
    return 1 if any("MISSING" in line for line in lines) else 0
