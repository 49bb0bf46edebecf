"""ViT benchmark: the course ViT on scikit-learn digits, with an SVC and a small CNN beside it.

Stratified 80/20 split; test accuracy and wall time of each, trained in the same run with
notebook 09's recipe (``course_utils.recipes.nb09``). Target (cpu): ViT >= 98% in <= 30 s.
"""

from __future__ import annotations

import argparse

from course_utils.bench.common import table

TARGET_ACC, TARGET_S = 0.98, 30.0


def run(opts: argparse.Namespace) -> dict:
    """Train the three models on the same split and report accuracy and seconds."""
    from course_utils.data.images import load_digits_split
    from course_utils.recipes import nb09

    split = load_digits_split(seed=0)
    profile = "ci" if opts.quick else "cpu"
    cfg = nb09.config(profile, dataset="digits")
    runs = [("ViT (course)", nb09.train_vit_digits(cfg, progress=False)),
            ("small CNN", nb09.train_small_cnn(split, cfg.cnn, progress=False)),
            ("SVC (sklearn)", nb09.fit_svc(split))]
    rows = [{"model": name, "test_acc": run.accuracy, "seconds": run.wall_s,
             "cpu_s": run.cpu_s, "params": run.n_params} for name, run in runs]
    print(table(rows, ["model", "test_acc", "seconds", "cpu_s", "params"]))
    vit = rows[0]
    summary = {"vit_acc": vit["test_acc"], "vit_s": vit["seconds"],
               "svc_acc": rows[2]["test_acc"], "cnn_acc": rows[1]["test_acc"]}
    if not opts.quick:
        summary["meets_target"] = bool(vit["test_acc"] >= TARGET_ACC and vit["seconds"] <= TARGET_S)
        print(f"target ViT >= {TARGET_ACC:.0%} in <= {TARGET_S:.0f} s: "
              f"{'met' if summary['meets_target'] else 'MISSED'}")
    return {"rows": rows, "summary": summary}
