"""ViT benchmark: the course ViT with an SVC and a small CNN beside it, trained in one run.

CPU (and ``--quick``): scikit-learn digits, stratified 80/20, notebook 09's recipe
(``course_utils.lessons.nb09_vit.recipe``). Target (cpu): ViT test accuracy >= ``nb09.CPU_ACC_BAR`` in
<= ``nb09.CPU_SECONDS_BAR`` seconds. GPU (``--device cuda``): CIFAR-10 from the cache when the
archive is there (target ``nb09.GPU_CIFAR10_ACC_BAR``), else digits with the gpu recipe.
"""

from __future__ import annotations

import argparse

from course_utils.bench.common import table
from course_utils.lessons.nb09_vit.recipe import CPU_ACC_BAR, CPU_SECONDS_BAR, GPU_CIFAR10_ACC_BAR


def run(opts: argparse.Namespace) -> dict:
    """Train the three models on the same split and report accuracy and seconds."""
    from course_utils.lessons.nb09_vit import recipe as nb09

    gpu = str(opts.device or "cpu").startswith("cuda")
    profile = "ci" if opts.quick else ("gpu" if gpu else "cpu")
    cfg = nb09.config(profile, dataset=None if gpu and not opts.quick else "digits")
    data = nb09.load_images(cfg)
    device = opts.device or "cpu"
    runs = [
        ("ViT (course)", nb09.train_vit(cfg, data, device=device, progress=False)),
        ("small CNN", nb09.train_small_cnn(data, cfg.cnn, device=device, progress=False)),
        ("SVC (sklearn)", nb09.fit_svc(data, **cfg.svc)),
    ]
    rows = [
        {
            "model": name,
            "dataset": cfg.dataset,
            "test_acc": run.accuracy,
            "seconds": run.wall_s,
            "cpu_s": run.cpu_s,
            "params": run.n_params,
        }
        for name, run in runs
    ]
    print(table(rows, ["model", "dataset", "test_acc", "seconds", "cpu_s", "params"]))
    vit = rows[0]
    summary = {
        "dataset": cfg.dataset,
        "vit_acc": vit["test_acc"],
        "vit_s": vit["seconds"],
        "svc_acc": rows[2]["test_acc"],
        "cnn_acc": rows[1]["test_acc"],
    }
    if opts.quick:
        return {"rows": rows, "summary": summary}
    if cfg.dataset == "cifar10":
        summary["target"] = f"CIFAR-10 ViT >= {GPU_CIFAR10_ACC_BAR:.0%}"
        summary["meets_target"] = bool(vit["test_acc"] >= GPU_CIFAR10_ACC_BAR)
    elif not gpu:
        summary["target"] = f"digits ViT >= {CPU_ACC_BAR:.0%} in <= {CPU_SECONDS_BAR:.0f} s"
        summary["meets_target"] = bool(
            vit["test_acc"] >= CPU_ACC_BAR and vit["seconds"] <= CPU_SECONDS_BAR
        )
    if "target" in summary:
        print(f"target {summary['target']}: {'met' if summary['meets_target'] else 'MISSED'}")
    return {"rows": rows, "summary": summary}
