"""Attention benchmark: time and peak extra memory against sequence length.

Four implementations of one attention computation, (B, H, T, D) with T == S, causal and not:
the course's manual ``scaled_dot_product_attention`` (materialises the (T, T) weights), its
fast path ``fast_attention`` (through SDPA), PyTorch's ``F.scaled_dot_product_attention`` (the
reference every ratio is against) and the course's ``tiled_attention`` (online softmax over key
blocks). Outputs are cross-checked before anything is timed.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import torch.nn.functional as F

from course_utils.bench.common import median_time, sync, table
from course_utils.memory import peak_extra_memory
from course_utils.modeling.attention import (
    fast_attention,
    scaled_dot_product_attention,
    tiled_attention,
)
from course_utils.scaling import fit_exponent

IMPLS = {
    "manual": lambda q, k, v, c: scaled_dot_product_attention(q, k, v, is_causal=c)[0],
    "fast": lambda q, k, v, c: fast_attention(q, k, v, is_causal=c),
    "sdpa": lambda q, k, v, c: F.scaled_dot_product_attention(q, k, v, is_causal=c),
    "tiled": lambda q, k, v, c: tiled_attention(q, k, v, block_size=128, causal=c),
}


def _inputs(n: int, device, *, heads: int, dim: int, grad: bool):
    g = torch.Generator().manual_seed(n)
    qkv = [torch.randn(1, heads, n, dim, generator=g).to(device) for _ in range(3)]
    return [t.requires_grad_(grad) for t in qkv]


def cross_check(sizes, device, heads, dim) -> None:
    """Every implementation equals SDPA (float64, causal and not) before timing."""
    for n in sizes[:3]:
        q, k, v = (t.double() for t in _inputs(n, device, heads=heads, dim=dim, grad=False))
        for causal in (False, True):
            ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            for name, fn in IMPLS.items():
                err = (fn(q, k, v, causal) - ref).abs().max().item()
                if err > 1e-9:
                    raise AssertionError(f"{name} differs from SDPA by {err:.2e} at n={n}")


def run(opts: argparse.Namespace) -> dict:
    """Time forward and forward+backward, and peak extra memory of the forward, per size."""
    device = torch.device(opts.device or "cpu")
    heads, dim = 4, 64
    sizes = [64, 128, 256] if opts.quick else [64, 128, 256, 512, 1024, 2048, 4096]
    min_time = 0.05 if opts.quick else 0.3
    cross_check(sizes, device, heads, dim)
    rows = []
    for causal in (False, True):
        for n in sizes:
            q, k, v = _inputs(n, device, heads=heads, dim=dim, grad=True)
            row = {"n": n, "causal": causal}
            for name, fn in IMPLS.items():

                def fwd(fn=fn, q=q, k=k, v=v, causal=causal):
                    with torch.no_grad():
                        out = fn(q, k, v, causal)
                    sync(device)
                    return out

                def fwd_bwd(fn=fn, q=q, k=k, v=v, causal=causal):
                    fn(q, k, v, causal).sum().backward()
                    sync(device)

                row[f"{name}_fwd_ms"] = 1e3 * median_time(fwd, min_time)
                row[f"{name}_fb_ms"] = 1e3 * median_time(fwd_bwd, min_time)
                row[f"{name}_mem_mb"] = peak_extra_memory(fwd, device) / 2**20
            for name in ("manual", "fast", "tiled"):
                row[f"{name}/sdpa_fwd"] = row[f"{name}_fwd_ms"] / row["sdpa_fwd_ms"]
                row[f"{name}/sdpa_fb"] = row[f"{name}_fb_ms"] / row["sdpa_fb_ms"]
            rows.append(row)
    cols = [
        "n",
        "causal",
        "sdpa_fwd_ms",
        "manual/sdpa_fwd",
        "fast/sdpa_fwd",
        "tiled/sdpa_fwd",
        "sdpa_fb_ms",
        "manual/sdpa_fb",
        "tiled/sdpa_fb",
        "manual_mem_mb",
        "sdpa_mem_mb",
        "tiled_mem_mb",
    ]
    print(table(rows, cols))
    summary = _summary(rows)
    print(
        "log-log slopes (time, forward, non-causal): "
        + ", ".join(f"{k}={v:.2f}" for k, v in summary["time_slopes"].items())
    )
    print(
        "log-log slopes (peak memory): "
        + ", ".join(f"{k}={v:.2f}" for k, v in summary["memory_slopes"].items())
    )
    summary["plot"] = _plot(rows, Path(opts.out) / "attention.png")
    if device.type == "cuda":
        summary["sdpa_backends"] = backend_times(device, sizes, heads, dim, min_time)
    elif not opts.quick:  # notebook 11's cpu bar (DESIGN.md)
        ratio = summary["at_largest_n"]["tiled_mem/sdpa_mem"]
        summary["target"] = (
            f"tiled attention's extra memory <= 2x SDPA's at n = "
            f"{summary['largest_n']} (measured {ratio:.2f}x) and slope ~1"
        )
        summary["meets_target"] = bool(ratio <= 2.0 and summary["memory_slopes"]["tiled"] < 1.3)
    return {"rows": rows, "summary": summary, "columns": cols}


def backend_times(device, sizes, heads, dim, min_time) -> list[dict]:
    """On a GPU: forward time of F.scaled_dot_product_attention under each SDPA backend
    (flash, memory-efficient, cuDNN, math), half precision; a backend that refuses the
    inputs is reported as unavailable rather than failing the run."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    rows = []
    for n in sizes:
        q, k, v = (t.half() for t in _inputs(n, device, heads=heads, dim=dim, grad=False))
        row = {"n": n}
        for backend in (
            SDPBackend.FLASH_ATTENTION,
            SDPBackend.EFFICIENT_ATTENTION,
            SDPBackend.CUDNN_ATTENTION,
            SDPBackend.MATH,
        ):
            try:
                with sdpa_kernel(backend):

                    def fwd(q=q, k=k, v=v):
                        F.scaled_dot_product_attention(q, k, v, is_causal=True)
                        sync(device)

                    row[f"{backend.name.lower()}_ms"] = 1e3 * median_time(fwd, min_time)
            except RuntimeError:
                row[f"{backend.name.lower()}_ms"] = "unavailable"
        rows.append(row)
    print(table(rows, list(rows[0])))
    return rows


def _slope(rows: list[dict], key: str) -> float:
    """Growth exponent of ``row[key]`` against n over all the rows (see :func:`fit_exponent`)."""
    return fit_exponent({r["n"]: r[key] for r in rows}, last=len(rows))


def _summary(rows) -> dict:
    plain = [r for r in rows if not r["causal"]]
    big = [r for r in plain if r["n"] >= 256]
    big = big if len(big) >= 2 else plain
    last = plain[-1]
    return {
        "largest_n": last["n"],
        "time_slopes": {m: _slope(big, f"{m}_fwd_ms") for m in IMPLS},
        "memory_slopes": {m: _slope(big, f"{m}_mem_mb") for m in IMPLS},
        "at_largest_n": {
            "manual/sdpa_fwd": last["manual/sdpa_fwd"],
            "tiled/sdpa_fwd": last["tiled/sdpa_fwd"],
            "manual_mem_mb": last["manual_mem_mb"],
            "sdpa_mem_mb": last["sdpa_mem_mb"],
            "tiled_mem_mb": last["tiled_mem_mb"],
            "tiled_mem/sdpa_mem": last["tiled_mem_mb"] / max(last["sdpa_mem_mb"], 1e-9),
        },
    }


def _plot(rows, path: Path) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plain = [r for r in rows if not r["causal"]]
    ns = [r["n"] for r in plain]
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4))
    for m in IMPLS:
        ax_t.loglog(ns, [r[f"{m}_fwd_ms"] for r in plain], "o-", label=m)
        ax_m.loglog(ns, [max(r[f"{m}_mem_mb"], 1e-3) for r in plain], "o-", label=m)
    for ax, what in ((ax_t, "forward time (ms)"), (ax_m, "peak extra memory (MB)")):
        ref = [r["sdpa_fwd_ms"] if ax is ax_t else r["manual_mem_mb"] for r in plain]
        ax.loglog(ns, [ref[-1] * (n / ns[-1]) ** 2 for n in ns], "k:", label="slope 2 (n²)")
        ax.loglog(ns, [ref[-1] * (n / ns[-1]) for n in ns], "k--", label="slope 1 (n)")
        ax.set_xlabel("sequence length n")
        ax.set_ylabel(what)
        ax.legend(fontsize=8)
    ax_t.set_title("Attention time against n (non-causal)")
    ax_m.set_title("Attention peak extra memory against n")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return str(path)
