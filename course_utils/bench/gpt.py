"""GPT benchmark: the course GPT at nanoGPT's CPU size on tiny-shakespeare.

Reports training throughput (tokens/s), val loss and wall time, and the achieved FLOP/s of a
training step as a percentage of this machine's own matmul throughput measured in the same run
(the practical ceiling). The recipe is notebook 08's (``course_utils.recipes.nb08``).
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import torch

from course_utils.bench.common import median_time, table

NANOGPT_CPU_SECONDS = 65.0  # nanoGPT's CPU recipe: val 1.886 in about 65 s on a 2-core CPU
TARGET_LOSS = 1.80


def matmul_flops(device: torch.device, n: int = 1024) -> float:
    """Measured float32 matmul throughput (FLOP/s) of an (n, n) @ (n, n) product."""
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    return 2 * n**3 / median_time(lambda: a @ b, 0.5)


def flops_per_token(n_params: int, n_layer: int, n_embd: int, block_size: int) -> float:
    """Training FLOPs per token (forward + backward), as in nanoGPT's ``estimate_mfu``:
    6 N for the weights plus 12 L D T for attention's two (T, T) matmuls."""
    return 6 * n_params + 12 * n_layer * n_embd * block_size


def run(opts: argparse.Namespace) -> dict:
    """Train once with the cpu recipe (or a tiny one with --quick) and report the figures."""
    from course_utils.recipes import nb08

    device = torch.device(opts.device or "cpu")
    cfg = nb08.config("ci" if opts.quick else ("gpu" if device.type == "cuda" else "cpu"))
    cfg = dataclasses.replace(cfg, device=str(device))
    if opts.quick:
        cfg = dataclasses.replace(cfg, steps=20, eval_every=10, final_eval_batches=2)
    data = nb08.load_dataset(opts.data)
    peak = matmul_flops(device, 256 if opts.quick else 1024)
    t0 = time.perf_counter()
    model, hist = nb08.train_char_gpt(cfg, data, progress=False)
    wall = time.perf_counter() - t0
    steps = hist.steps_done
    tok_s = hist.tokens_per_second
    train_time = hist.wall_seconds  # the training loop with its evaluations, like nanoGPT's
    m = model.config
    achieved = tok_s * flops_per_token(model.num_params(), m.n_layer, m.n_embd, m.block_size)
    val = hist.final_val
    row = {"corpus": data.corpus.name,
           "size": f"{m.n_layer}x{m.n_head}x{m.n_embd} ctx{m.block_size}",
           "batch": cfg.batch_size, "steps": steps, "wall_s": train_time,
           "total_s": wall,
           "tokens/s": tok_s, "val_loss": val,
           "matmul_GFLOPs": peak / 1e9, "step_GFLOPs": achieved / 1e9,
           "%_of_matmul": 100 * achieved / peak}
    print(table([row], list(row)))
    summary = dict(row)
    if not opts.quick and device.type == "cpu":
        summary["target"] = (f"val <= {TARGET_LOSS} within {NANOGPT_CPU_SECONDS:.0f} s "
                             "(nanoGPT's CPU recipe: 1.886 in ~65 s)")
        summary["meets_target"] = bool(val <= TARGET_LOSS and train_time <= NANOGPT_CPU_SECONDS)
        print(f"target {summary['target']}: {'met' if summary['meets_target'] else 'MISSED'} "
              f"(val {val:.3f} in {train_time:.0f} s)")
    return {"rows": [row], "summary": summary}
