"""The prepared GPU check: one command for a lent GPU machine, about 8 minutes on one current
data-centre GPU. ``bash benchmarks/gpu.sh`` runs it; ``--dry-run`` prints the plan.

Stages (each timed; a failing stage is a row in the report, not a crash):

1. ``doctor``: the machine and the gpu profile's assumptions (``course doctor``).
2. ``paths``: every device code path once on the real device: notebook 08's training step under
   bf16 autocast with the fused AdamW, sampling with and without the KV cache; notebook 11's
   SDPA backends and the memory-adapted naive sweep limit; data parallelism with NCCL, one
   process per GPU, or a clear skip (with one GPU a multi-process NCCL run is impossible).
3. ``notebooks``: every solution notebook top to bottom in the profile, with training cut to
   ``--max-steps`` steps (``COURSE_MAX_STEPS``): a smoke of every cell on the device.
4. ``gpt-bar``: notebook 08's gpu recipe (``nb08.RECIPES.gpu``, nanoGPT's shakespeare-char
   size) on tiny-shakespeare; the bar is ``nb08.GPU_VAL_BAR``.
5. ``bench``: ``course bench attention mha`` on the device.

Writes ``OUT/gpu.json`` (everything), ``OUT/gpu.md`` (the summary table) and ``OUT/gpu.txt``
(the log). On a CPU it runs too (``--profile ci`` and small step counts: how the tests prove it).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from course_utils.lessons.nb08_gpt.recipe import GPU_VAL_BAR

STAGES = ("doctor", "paths", "notebooks", "gpt-bar", "bench")
BUDGET_S = {"doctor": 10, "paths": 60, "notebooks": 180, "gpt-bar": 200, "bench": 100}
# --card t4: Colab's / Kaggle's T4 (16 GB, fp16 + GradScaler, no bf16). Its budgets are an
# ESTIMATE until the check runs on one: the data-centre budgets times the ratio of peak
# throughput (T4: 65 TFLOPS fp16, 320 GB/s; A100: 312 TFLOPS bf16, 1555 GB/s; about 5x).
CARDS = {
    "datacentre": (1.0, "one current data-centre GPU (A100 / H100 class, bf16)"),
    "t4": (5.0, "a T4-class card (16 GB, fp16 + GradScaler): ESTIMATE, not yet measured"),
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="benchmarks/gpu.sh", description="the prepared GPU check (about 8 minutes)"
    )
    p.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")
    p.add_argument("--profile", default="gpu", choices=("ci", "cpu", "gpu"))
    p.add_argument("--device", default=None, help="default: the profile's device")
    p.add_argument("--stages", nargs="+", default=list(STAGES), choices=STAGES)
    p.add_argument(
        "--card",
        default="datacentre",
        choices=tuple(CARDS),
        help="the plan's time budgets for this class of card (t4: an estimate)",
    )
    p.add_argument("--max-steps", type=int, default=60, help="training steps in the smoke runs")
    p.add_argument(
        "--bar-steps", type=int, default=None, help="GPT bar steps (default: the recipe's)"
    )
    p.add_argument(
        "--nb-timeout",
        type=int,
        default=180,
        help="seconds one notebook may run in the notebooks stage before it is a failed row",
    )
    p.add_argument("--data", default=None, help="tinyshakespeare.txt (default: the data cache)")
    p.add_argument("--solutions", default="solutions", help="folder of the solution notebooks")
    p.add_argument("--out", default="benchmarks/results", help="where gpu.* are written")
    p.add_argument(
        "--quick", action="store_true", help="tiny benchmark sizes (course bench --quick)"
    )
    return p


def plan(opts: argparse.Namespace) -> list[str]:
    """What would run, one line per stage, with its time budget on the ``--card`` class."""
    factor, card = CARDS[getattr(opts, "card", "datacentre")]
    amp = "fp16 autocast + GradScaler" if factor > 1 else "bf16 autocast"
    lines = [
        f"GPU check: profile {opts.profile}, device {opts.device or 'the profile'}; "
        f"results in {opts.out}/gpu.json, gpu.md, gpu.txt",
        f"budgets for {card}",
    ]
    what = {
        "doctor": "course doctor (machine, precision and why, gpu profile estimates)",
        "paths": f"{amp} + fused AdamW step, KV-cache sampling, SDPA backends, "
        "naive-sweep memory limit, NCCL data parallelism (or a clear skip)",
        "notebooks": f"every notebook in {opts.solutions}/ with COURSE_MAX_STEPS={opts.max_steps}",
        "gpt-bar": f"notebook 08's {opts.profile} recipe, "
        f"{opts.bar_steps or 'all its'} steps: val <= {GPU_VAL_BAR}",
        "bench": "course bench attention mha" + (" --quick" if opts.quick else ""),
    }
    for name in opts.stages:
        lines.append(f"  {name:<10} ~{BUDGET_S[name] * factor:>4.0f} s  {what[name]}")
    lines.append(f"  total budget ~{sum(BUDGET_S[s] for s in opts.stages) * factor:.0f} s")
    return lines


# ----------------------------------------------------------------------------- stages


def stage_doctor(opts: argparse.Namespace) -> dict[str, Any]:
    from course_utils import doctor

    return {"report": doctor.report()}


def stage_paths(opts: argparse.Namespace) -> dict[str, Any]:
    """Every device code path once, small: what would crash on a GPU crashes here."""
    from dataclasses import replace

    import torch

    from course_utils.lessons.nb08_gpt import recipe as nb08
    from course_utils.lessons.nb11_attention_at_scale import recipe as nb11
    from course_utils.runtime import devices

    device = devices.resolve(opts.device)
    out: dict[str, Any] = {"device": str(device)}
    cfg = nb08.config(opts.profile)
    cfg = replace(cfg, device=str(device), eval_every=0, final_eval_batches=2)
    data = nb08.load_dataset(opts.data)
    model, hist = nb08.train_char_gpt(cfg, data, steps=opts.max_steps, progress=False)
    from course_utils.runtime import precision

    out["gpt_step"] = {
        "autocast": str(precision.autocast_for(cfg.autocast_dtype, device)),
        "precision": precision.choose(device).reason,
        "fused_adamw": device.type in ("cuda", "cpu"),
        "steps": hist.steps_done,
        "tokens_per_s": hist.tokens_per_second,
        "val": hist.final_val,
    }
    prompt = torch.tensor([data.encode("\n")])
    _, plain = nb08.time_generation(model, prompt, 40, use_cache=False, repeats=1)
    _, cached = nb08.time_generation(model, prompt, 40, use_cache=True, repeats=1)
    out["kv_cache_identical"] = bool(torch.equal(plain, cached))
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    q = torch.randn(1, 8, 256, 64, device=device, dtype=dtype)
    out["sdpa_kernel"] = nb11.sdpa_kernel_used(q, q, q)
    c11 = replace(nb11.config(), backend_lengths=(1024,), repeats=2)
    out["sdpa_backends"] = nb11.compare_backends(c11, device=device, dtype=dtype)
    out["naive_limit"] = nb11.naive_limit(nb11.config(), device, dtype)[1]
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    out["data_parallel"] = data_parallel_stage(gpus)
    return out


def data_parallel_stage(gpus: int) -> dict[str, Any]:
    """Notebook 11's data-parallel demo on the course GPT over NCCL when there are >= 2 GPUs
    (its parameters must equal one process's), else why it was skipped."""
    from course_utils.lessons.nb11_attention_at_scale import recipe as nb11
    from course_utils.runtime import distributed

    backend, note = distributed.data_parallel_backend(max(2, gpus))
    if backend != "nccl":
        return {"backend": "skipped", "note": note}
    demo = nb11.data_parallel_demo(
        world_size=gpus, steps=5, batch_size=8 * gpus, backend=backend, model="gpt"
    )
    return {"backend": backend, "note": note, "max_abs_diff": demo.max_abs_diff}


def stage_notebooks(opts: argparse.Namespace) -> dict[str, Any]:
    """Every solution notebook in the profile with training cut to ``--max-steps``, each in its
    own process under a wall-clock limit of ``--nb-timeout`` seconds (a slow notebook is a
    failed row, not the end of the check)."""
    from course_utils.authoring.claims import KEEP_GOING_ENV_VAR

    paths = sorted(Path(opts.solutions).glob("[0-9][0-9]_*.ipynb"))
    if not paths:
        raise FileNotFoundError(f"no solution notebooks in {opts.solutions!r}")
    rows = []
    # A smoke of every cell on the device: training stops after --max-steps, where the quality
    # claims (a loss bar, a fitted exponent, accuracy by length ...) cannot hold yet, so a
    # failed claim prints its cross and the run goes on instead of stopping the notebook there.
    env = {"COURSE_MAX_STEPS": str(opts.max_steps), KEEP_GOING_ENV_VAR: "1"}
    if opts.device:
        env["COURSE_DEVICE"] = opts.device
    with _environ(env):
        for path in paths:
            seconds, status = notebook_in_child(path, opts.profile, opts.nb_timeout)
            rows.append({"notebook": path.stem, "seconds": round(seconds, 1), "status": status})
            print(f"  {path.stem}: {seconds:.1f} s ({status})", flush=True)
    return {"rows": rows, "all_ok": all(r["status"] == "ok" for r in rows)}


_CHILD = (
    "import json, sys\n"
    "from pathlib import Path\n"
    "from course_utils.bench.notebooks import time_notebook\n"
    "s, status = time_notebook(Path(sys.argv[1]), timeout=int(sys.argv[3]), profile=sys.argv[2])\n"
    "print('GPU-CHECK-ROW ' + json.dumps([s, status]))\n"
)


def notebook_in_child(path: Path, profile: str, timeout_s: int) -> tuple[float, str]:
    """Seconds and "ok"/the error of one notebook run by :func:`time_notebook` in a child
    process (its own session, so its kernel goes with it), killed after ``timeout_s``."""
    t0 = time.perf_counter()
    cmd = [sys.executable, "-c", _CHILD, str(path), profile, str(timeout_s)]
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    ) as proc:
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return time.perf_counter() - t0, f"timed out after {timeout_s} s (--nb-timeout)"
    for line in out.splitlines():
        if line.startswith("GPU-CHECK-ROW "):
            seconds, status = json.loads(line.removeprefix("GPU-CHECK-ROW "))
            return float(seconds), str(status)
    tail = (err.strip().splitlines() or ["no output"])[-1][:120]
    return time.perf_counter() - t0, f"the child exited {proc.returncode}: {tail}"


def stage_gpt_bar(opts: argparse.Namespace) -> dict[str, Any]:
    from course_utils.lessons.nb08_gpt import recipe as nb08

    cfg = nb08.config(opts.profile)
    if opts.device:
        from dataclasses import replace

        cfg = replace(cfg, device=opts.device)
    data = nb08.load_dataset(opts.data)
    _, hist = nb08.train_char_gpt(cfg, data, steps=opts.bar_steps, progress=sys.stderr.isatty())
    judged = opts.profile == "gpu" and data.corpus.name == "tinyshakespeare" and not opts.bar_steps
    return {
        "corpus": data.corpus.name,
        "summary": hist.summary(),
        "val": hist.final_val,
        "wall_s": hist.wall_seconds,
        "bar": GPU_VAL_BAR,
        "met": (hist.final_val <= GPU_VAL_BAR) if judged else None,
    }


def stage_bench(opts: argparse.Namespace) -> dict[str, Any]:
    out = Path(opts.out) / "gpu-bench.json"
    cmd = [sys.executable, "-m", "course_utils.cli", "bench", "attention", "mha"]
    cmd += ["--json", str(out), "--out", str(opts.out)]
    if opts.device:
        cmd += ["--device", opts.device]
    if opts.quick:
        cmd.append("--quick")
    env = {**os.environ, "COURSE_PROFILE": opts.profile}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr[-400:]}")
    print(proc.stdout, flush=True)
    return {"command": " ".join(cmd[1:]), "json": str(out)}


RUNNERS: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
    "doctor": stage_doctor,
    "paths": stage_paths,
    "notebooks": stage_notebooks,
    "gpt-bar": stage_gpt_bar,
    "bench": stage_bench,
}


@contextlib.contextmanager
def _environ(values: dict[str, str]):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# ----------------------------------------------------------------------------- driver


def run(
    opts: argparse.Namespace, after_stage: Callable[[dict[str, Any]], None] | None = None
) -> dict[str, Any]:
    """Run the chosen stages under the profile; returns the report. ``after_stage(report)`` is
    called after each stage, so a run stopped part-way (a lease's time limit) still leaves what
    it measured."""
    from course_utils.bench.common import machine_info

    report: dict[str, Any] = {"plan": plan(opts), "stages": {}}
    with _environ({"COURSE_PROFILE": opts.profile}):
        report["machine"] = machine_info(opts.device)
        for name in opts.stages:
            print(f"== {name}", flush=True)
            t0 = time.perf_counter()
            try:
                result = RUNNERS[name](opts)
                failed = [r["notebook"] for r in result.get("rows", []) if r["status"] != "ok"]
                status = f"FAILED: {len(failed)} failed: {', '.join(failed)}" if failed else "ok"
            except Exception as exc:  # a failing stage is a row in the report
                result = {"error": traceback.format_exc(limit=8)}
                status = f"FAILED: {type(exc).__name__}: {str(exc).strip()[:120]}"
            seconds = time.perf_counter() - t0
            report["stages"][name] = {"status": status, "seconds": seconds, **result}
            print(f"   {name}: {status} in {seconds:.1f} s", flush=True)
            if after_stage is not None:
                after_stage(report)
    return report


def summary_markdown(report: dict[str, Any]) -> str:
    """The table of stages (status, seconds, budget) and the GPT bar, as Markdown."""
    m = report.get("machine", {})
    lines = [
        f"GPU check on {m.get('gpu') or m.get('cpu', '?')} (device {m.get('device', '?')}, "
        f"torch {m.get('torch', '?')})",
        "",
        "| stage | status | seconds | budget (s) |",
        "|---|---|---|---|",
    ]
    for name, st in report["stages"].items():
        lines.append(f"| {name} | {st['status']} | {st['seconds']:.1f} | {BUDGET_S[name]} |")
    bar = report["stages"].get("gpt-bar")
    if bar and "val" in bar:
        verdict = {True: "met", False: "MISSED", None: "not judged"}[bar["met"]]
        lines += [
            "",
            f"GPT bar: val {bar['val']:.3f} (<= {bar['bar']}: {verdict}), {bar['summary']}",
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Parse, print the plan, run (unless ``--dry-run``), write ``OUT/gpu.*``; exit 1 when a
    stage failed or the GPT bar was missed."""
    opts = parser().parse_args(argv)
    print("\n".join(plan(opts)), flush=True)
    if opts.dry_run:
        return 0
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    log = io.StringIO()

    def write(report: dict[str, Any]) -> None:
        (out / "gpu.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
        (out / "gpu.md").write_text(summary_markdown(report))
        (out / "gpu.txt").write_text(log.getvalue())

    with contextlib.redirect_stdout(_Tee(sys.stdout, log)):
        report = run(opts, after_stage=write)
    write(report)
    print(summary_markdown(report))
    failed = any(st["status"] != "ok" for st in report["stages"].values())
    missed = report["stages"].get("gpt-bar", {}).get("met") is False
    return 1 if failed or missed else 0


class _Tee(io.TextIOBase):
    def __init__(self, *streams) -> None:
        self.streams = streams

    def write(self, s: str) -> int:
        for stream in self.streams:
            stream.write(s)
        return len(s)

    def flush(self) -> None:
        for stream in self.streams:
            stream.flush()


if __name__ == "__main__":
    raise SystemExit(main())
