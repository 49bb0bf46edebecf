"""Memory rules judged from a measurement the kernel cannot forge (the second red team's A7).

Exercise 11.1 asks for tiled attention that never builds the full (T, S) score matrix. Its
check watches the tensors torch returns (``AllocationTracker``, inside the kernel), which a
notebook can switch off (``torch._C.DisableTorchFunction``). So, after 11.1's check passes,
the grader runs one more case: the student's function on a large (T = S = 4096) problem drawn
at grading time, and reads the **sandbox's memory cgroup** around it: the peak is reset just
before the request (v1 ``memory.max_usage_in_bytes``, v2 ``memory.peak`` on kernels that can
reset it) and read after. The full matrix is 64 MiB per copy in float32 (a softmax keeps at
least two); a tiled loop needs a few MiB. Over :attr:`MemoryProbe.max_extra_mb` the exercise
fails. The large case's values are checked here too (against the grader's own reference), so
an answer that skips the work for large inputs fails on its values.

Where the grader has no memory cgroup (not root, no delegated cgroup v2: CI, Classroom), the
rule stays the in-kernel tracker's, best effort, and the entry says so.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from course_utils.checks.core import FAILED, PASSED


@dataclass(frozen=True)
class MemoryProbe:
    """One large case whose extra memory (measured by the cgroup) is bounded."""

    exercise_id: str
    T: int
    S: int
    Dk: int
    Dv: int
    block: int
    max_extra_mb: float


PROBES = {"11.1": MemoryProbe("11.1", T=4096, S=4096, Dk=64, Dv=64, block=128, max_extra_mb=48.0)}

_KERNEL = """
def _probe(user_ns, p):
    import json, os
    result = {"status": "missing"}
    try:
        import numpy as np
        import torch
        fn = user_ns.get(p["function"])
        if fn is not None:
            g = torch.Generator().manual_seed(p["seed"])
            q = torch.randn(p["T"], p["Dk"], generator=g)
            k = torch.randn(p["S"], p["Dk"], generator=g)
            v = torch.randn(p["S"], p["Dv"], generator=g)
            with torch.no_grad():
                out = fn(q, k, v, p["block"], causal=False)
            del q, k, v
            out = torch.as_tensor(out).detach().cpu().float().contiguous().numpy()
            np.savez(os.path.join(p["out"], "outputs.npz"), a0=out)
            result = {"status": "ran"}
    except BaseException as exc:
        result = {"status": "error", "message": type(exc).__name__ + ": " + str(exc)[:300]}
    finally:
        with open(os.path.join(p["out"], "result.json"), "w") as fh:
            json.dump(result, fh)


_probe(_user_ns, _params)
"""


def probe_code(function: str, probe: MemoryProbe, seed: int, out_dir: str) -> str:
    params = {
        "function": function,
        "seed": int(seed),
        "out": out_dir,
        "T": probe.T,
        "S": probe.S,
        "Dk": probe.Dk,
        "Dv": probe.Dv,
        "block": probe.block,
    }
    return (
        f"exec(compile({_KERNEL!r}, '<course-grader>', 'exec'), "
        f"{{'__builtins__': __builtins__, '_user_ns': globals(), '_params': {params!r}}})"
    )


class PeakMeter:
    """The peak of a memory cgroup since :meth:`reset` (``None`` where it cannot be reset)."""

    def __init__(self, cgroups: Any) -> None:
        dirs = getattr(cgroups, "dirs", {}) or {}
        self.path: Path | None = dirs.get("memory")
        self.v2 = "v2" in dirs
        self.fd: int | None = None
        self.base = 0

    def reset(self) -> bool:
        """Start a measurement; False when this cgroup's peak cannot be reset."""
        if self.path is None:
            return False
        try:
            if self.v2:  # a per-file-descriptor reset (Linux 6.12+): read back on this fd
                self.fd = os.open(self.path / "memory.peak", os.O_RDWR)
                os.write(self.fd, b"reset\n")
                self.base = int((self.path / "memory.current").read_text())
            else:
                (self.path / "memory.max_usage_in_bytes").write_text("0")
                self.base = int((self.path / "memory.usage_in_bytes").read_text())
            return True
        except (OSError, ValueError):
            self.close()
            return False

    def extra_mb(self) -> float | None:
        """MiB above the usage at :meth:`reset`."""
        try:
            if self.v2 and self.fd is not None:
                peak = int(os.pread(self.fd, 64, 0).split()[0])
            elif self.path is not None:
                peak = int((self.path / "memory.max_usage_in_bytes").read_text())
            else:
                return None
            return max(0, peak - self.base) / 2**20
        except (OSError, ValueError, IndexError):
            return None
        finally:
            self.close()

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def expected_output(exercise: Any, probe: MemoryProbe, seed: int):
    """The reference's output on the large case, computed here."""
    import torch

    g = torch.Generator().manual_seed(int(seed))
    q = torch.randn(probe.T, probe.Dk, generator=g)
    k = torch.randn(probe.S, probe.Dk, generator=g)
    v = torch.randn(probe.S, probe.Dv, generator=g)
    with torch.no_grad():
        return exercise.reference(q, k, v, probe.block, causal=False)


def read_output(out_dir: Path):
    """The probe's output array, read as the harvest reads (no links, caps, no pickles)."""
    from course_utils.grading import harvest as hv

    raw = hv.parse_result_json(hv.read_capped(str(out_dir), "result.json", 1 << 16))
    if not isinstance(raw, dict) or raw.get("status") != "ran":
        message = str(raw.get("message", "")) if isinstance(raw, dict) else ""
        return None, message or "your function did not run on the large case"
    arrays = hv.load_arrays(
        hv.read_capped(str(out_dir), "outputs.npz", hv.MAX_OUTPUTS_BYTES), {"a0"}
    )
    return arrays.get("a0"), ""


def judge_probe(
    entry: dict[str, Any], probe: MemoryProbe, extra_mb: float | None, got, expected, why: str
) -> None:
    """Fail ``entry`` when the large case's values are wrong or its memory is over the bound."""
    import numpy as np

    case = f"a large case (T = {probe.T}, S = {probe.S}, drawn at grading time)"
    if got is None:
        entry.update(status=FAILED, points=0, message=f"{case}: {why}")
        return
    exp = expected.float().numpy()
    if got.shape != exp.shape or not np.allclose(got, exp, atol=1e-4, rtol=1e-4):
        entry.update(
            status=FAILED,
            points=0,
            message=f"{case}: your output differs from the reference (shape {tuple(got.shape)})",
        )
        return
    if extra_mb is not None and extra_mb > probe.max_extra_mb:
        full = probe.T * probe.S * 4 / 2**20
        entry.update(
            status=FAILED,
            points=0,
            message=(
                f"{case}: the values are right, but the sandbox's memory grew by "
                f"{extra_mb:.0f} MB while it ran (the full (T, S) score matrix is {full:.0f} MB "
                f"in float32; a tiled loop needs a few MB, the bound is "
                f"{probe.max_extra_mb:g} MB): tiled attention must never build it"
            ),
        )
        return


def run_probe(run: Any, g: Any, entry: dict[str, Any], limit: float):
    """After exercise ``g`` passed: its large case, measured by the sandbox's memory cgroup.
    Returns the kernel's result (the caller stops the run when the kernel was lost)."""
    probe = PROBES.get(g.id)
    if probe is None or g.module is not None or entry.get("status") != PASSED:
        return None
    sandbox = run.sandbox
    meter = PeakMeter(getattr(sandbox, "cgroups", None))
    seed = secrets.randbits(32)
    out_dir = sandbox.result_dir(f"{g.id}-probe-{secrets.token_hex(8)}")
    if not meter.reset():
        run.report["notes"].append(
            f"{g.id}'s memory rule: no memory cgroup whose peak the grader can reset on this "
            "machine; judged inside the kernel only (best effort)"
        )
        return None
    code = probe_code(g.exercise.function, probe, seed, sandbox.inside(out_dir))
    r = run.kernel.execute(code, limit, silent=True, keep_outputs=False)
    extra = meter.extra_mb()
    if r.status != "ok":
        entry.update(
            status=FAILED,
            points=0,
            message=f"the large case (T = {probe.T}) did not finish ({r.status}: {r.evalue})"[:500],
        )
        return r
    try:
        got, why = read_output(out_dir)
    except Exception as exc:  # anything the kernel left is the student's
        got, why = None, f"its result is unusable ({type(exc).__name__})"
    judge_probe(entry, probe, extra, got, expected_output(g.exercise, probe, seed), why)
    if extra is not None:
        run.report["notes"].append(
            f"{g.id}'s large case (T = {probe.T}): the sandbox's memory grew by {extra:.1f} MB "
            f"(bound {probe.max_extra_mb:g} MB, measured by its cgroup)"
        )
    return r


def describe() -> str:
    """One line per probe (for the README and reports)."""
    return "; ".join(
        f"{p.exercise_id}: T = {p.T}, S = {p.S}, at most {p.max_extra_mb:g} MB extra"
        for p in PROBES.values()
    )
