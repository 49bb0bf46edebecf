"""Notebook 12's claims at other seeds: one line per seed with every measured quantity the
notebook's claims rest on (issue 34: a ranking holds across >= 3 seeds or is scoped to its seed).

    python -m course_utils.lessons.nb12_image_captioning.seeds --profile ci --seeds 0,1,2,3

Each seed draws its own scenes (``Sizes.seed``) and trains both captioners with it, then
measures what the notebook measures: digit names in seen places and in held-out cells, words
right on the novel scenes, exact captions, the attention share against chance, and section 6's
beam search on the trained model and on its early checkpoint.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import torch

from course_utils.lessons.nb12_image_captioning import recipe as nb12

A0, A6 = "beam 4, α = 0.0", "beam 4, α = 0.6"  # nb12.score_decoders' beam rows


def measure(profile: str, seed: int) -> dict[str, object]:
    """Every quantity behind notebook 12's claims, for one seed of ``profile``'s recipe."""
    cfg = replace(nb12.config(profile), seed=seed)
    data = nb12.make_data(cfg)
    att = nb12.train_captioner(cfg, data, seed=seed, progress=False, checkpoints=(cfg.early_step,))
    pool = nb12.train_captioner(cfg, data, pooled=True, seed=seed, progress=False)
    held, rest = nb12.digit_name_accuracy(nb12.greedy_captions(att.model, data.test), data.test)
    share, chance = nb12.attention_on_named_digit(att.model, data.test)
    splits = {"iid": data.test_iid, "novel": data.test}
    models = {"trained": att.model, "early": nb12.at_checkpoint(att, cfg.early_step)}
    beam = {
        (m, s): nb12.score_decoders(model, split[: cfg.beam_scenes])
        for m, model in models.items()
        for s, split in splits.items()
    }

    def every_split(model, test) -> bool:
        return all(test(beam[model, s]) for s in splits)

    return {
        "seed": seed,
        "seen places": round(rest, 3),
        "held-out cell": round(held, 3),
        "novel per word (att, pool)": (round(att.per_word, 3), round(pool.per_word, 3)),
        "iid exact (att, pool)": (round(att.exact_iid, 3), round(pool.exact_iid, 3)),
        "novel exact (att, pool)": (round(att.exact, 3), round(pool.exact, 3)),
        "share / chance": round(share / chance, 2),
        "beam changed (early, trained)": tuple(
            sum(beam[m, s][A0][4] for s in splits) for m in ("early", "trained")
        ),
        "early: beam log P above greedy's": every_split(
            "early", lambda r: r[A0][3] > r["greedy"][3]
        ),
        "early: a0 shorter than greedy": every_split("early", lambda r: r[A0][2] < r["greedy"][2]),
        "early: a0.6 longer than a0": every_split("early", lambda r: r[A6][2] > r[A0][2]),
        "early: a0.6 more words than a0": every_split("early", lambda r: r[A6][1] > r[A0][1]),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="ci", choices=("ci", "cpu", "gpu"))
    parser.add_argument("--seeds", default="0,1,2,3", help="comma-separated seeds")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # as the notebook
    for seed in (int(s) for s in args.seeds.split(",")):
        print(measure(args.profile, seed), flush=True)


if __name__ == "__main__":
    main()
