"""ViT benchmark: the course ViT on scikit-learn digits, with an SVC and a small CNN beside it.

Stratified 80/20 split; test accuracy and wall time of each, trained in the same run with
notebook 09's recipe (``course_utils.recipes.nb09``). Target (cpu): ViT >= 98% in <= 30 s.
"""

from __future__ import annotations

import argparse
import time

from course_utils.bench.common import table

TARGET_ACC, TARGET_S = 0.98, 30.0


def _timed(fn, *args, **kwargs):
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0


def _accuracy(result) -> float:
    """Accuracy from whatever the recipe returns: a float, a dict or an object with one."""
    if isinstance(result, (int, float)):
        return float(result)
    if isinstance(result, tuple):
        for item in result:
            try:
                return _accuracy(item)
            except TypeError:
                continue
    if isinstance(result, dict):
        for key in ("test_acc", "test_accuracy", "accuracy", "acc"):
            if key in result:
                return float(result[key])
    for key in ("test_acc", "test_accuracy", "accuracy", "acc"):
        if hasattr(result, key):
            return float(getattr(result, key))
    raise TypeError(f"cannot read an accuracy from {type(result).__name__}")


def run(opts: argparse.Namespace) -> dict:
    """Train the three models on the same split and report accuracy and seconds."""
    from course_utils.data.images import load_digits_split
    from course_utils.recipes import nb09

    split = load_digits_split(seed=0)
    profile = "ci" if opts.quick else "cpu"
    rows = []
    for name, fn in (("ViT (course)", nb09.train_vit_digits), ("small CNN", nb09.train_small_cnn),
                     ("SVC (sklearn)", nb09.fit_svc)):
        kwargs = {"split": split}
        if fn is not nb09.fit_svc:
            kwargs["profile"] = profile
        result, seconds = _timed(fn, **kwargs)
        rows.append({"model": name, "test_acc": _accuracy(result), "seconds": seconds})
    print(table(rows, ["model", "test_acc", "seconds"]))
    vit = rows[0]
    summary = {"vit_acc": vit["test_acc"], "vit_s": vit["seconds"],
               "svc_acc": rows[2]["test_acc"], "cnn_acc": rows[1]["test_acc"]}
    if not opts.quick:
        summary["meets_target"] = bool(vit["test_acc"] >= TARGET_ACC and vit["seconds"] <= TARGET_S)
        print(f"target ViT >= {TARGET_ACC:.0%} in <= {TARGET_S:.0f} s: "
              f"{'met' if summary['meets_target'] else 'MISSED'}")
    return {"rows": rows, "summary": summary}
