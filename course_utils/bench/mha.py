"""MultiHeadAttention benchmark: the course's module against ``nn.MultiheadAttention``.

Both get the same weights (``MultiHeadAttention.from_torch``) and outputs are compared before
timing; forward+backward per shape, timed in alternation (the median of 7 paired
ratios course/torch is the figure; target <= 1.10).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn

from course_utils.bench.common import paired_times, sync, table
from course_utils.modeling.layers import MultiHeadAttention

SHAPES = [(8, 64, 128, 4), (4, 256, 256, 8), (2, 1024, 256, 8), (1, 2048, 512, 8)]
QUICK_SHAPES = [(2, 32, 64, 4), (1, 64, 64, 4)]
TARGET = 1.10


def run(opts: argparse.Namespace) -> dict:
    """Forward+backward time of both modules per (B, T, D, H), self-attention, causal and not."""
    device = torch.device(opts.device or "cpu")
    rows = []
    for B, T, D, H in QUICK_SHAPES if opts.quick else SHAPES:
        torch.manual_seed(0)
        ref = nn.MultiheadAttention(D, H, batch_first=True).to(device)
        ours = MultiHeadAttention.from_torch(ref).to(device)
        x = torch.randn(B, T, D, device=device, requires_grad=True)
        for causal in (False, True):
            mask = torch.ones(T, T, dtype=torch.bool, device=device).triu(1) if causal else None

            def torch_step(mask=mask, causal=causal, ref=ref, x=x):
                y, _ = ref(x, x, x, attn_mask=mask, is_causal=causal, need_weights=False)
                y.sum().backward()
                sync(device)
                return y

            def ours_step(causal=causal, ours=ours, x=x):
                y = ours(x, is_causal=causal)
                y.sum().backward()
                sync(device)
                return y

            err = (torch_step() - ours_step()).abs().max().item()
            if err > 1e-4:
                raise AssertionError(f"course MHA differs from nn.MultiheadAttention by {err:.2e}")
            t_ref, t_ours, ratio = paired_times(
                torch_step,
                ours_step,
                rounds=2 if opts.quick else 7,
                min_run_time=0.02 if opts.quick else 0.1,
            )
            rows.append(
                {
                    "B": B,
                    "T": T,
                    "D": D,
                    "H": H,
                    "causal": causal,
                    "torch_ms": 1e3 * t_ref,
                    "course_ms": 1e3 * t_ours,
                    "course/torch": ratio,
                }
            )
    print(table(rows, ["B", "T", "D", "H", "causal", "torch_ms", "course_ms", "course/torch"]))
    worst = max(r["course/torch"] for r in rows)
    geo = torch.tensor([r["course/torch"] for r in rows]).log().mean().exp().item()
    verdict = "meets" if worst <= TARGET else "misses"
    print(
        f"course/torch: geometric mean {geo:.3f}, worst {worst:.3f} ({verdict} the <= {TARGET} target)"
    )
    summary = {"geomean_ratio": geo, "worst_ratio": worst, "target_ratio": TARGET}
    if not opts.quick:
        summary["target"] = f"course/torch <= {TARGET} on every shape (worst {worst:.3f})"
        summary["meets_target"] = bool(worst <= TARGET)
    return {"rows": rows, "summary": summary}
