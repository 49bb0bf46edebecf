"""Notebook 10's recipe: the closing comparison runs on notebook 01's task in every profile,
and the three contenders share one training budget."""

from __future__ import annotations

import pytest
import torch

from course_utils.recipes import nb01, nb10


@pytest.mark.parametrize("profile", ["ci", "cpu", "gpu"])
def test_task_and_rnn_sizes_are_notebook_01s(monkeypatch, profile):
    monkeypatch.setenv("COURSE_PROFILE", profile)
    r, cfg = nb01.recipe(), nb10.config()
    t = cfg.task
    assert (t.n_train, t.n_test, t.min_len, t.max_len, t.seed) == (
        r.n_train,
        r.n_test,
        r.min_len,
        r.max_len,
        r.seed,
    )
    assert (cfg.rnn.emb_dim, cfg.rnn.hidden_dim) == (r.emb_dim, r.hidden_dim)
    assert set(cfg.lr) == set(nb10.MODEL_NAMES)


def test_make_data_gives_notebook_01s_sentences(monkeypatch):
    monkeypatch.setenv("COURSE_PROFILE", "ci")
    ours, theirs = nb10.make_data(), nb01.make_data(nb01.recipe())
    assert torch.equal(ours.train.src, theirs.train.src)
    assert torch.equal(ours.test.tgt_out, theirs.test.tgt_out)


def test_every_contender_trains_on_the_same_budget_and_reports_its_figures(monkeypatch):
    monkeypatch.setenv("COURSE_PROFILE", "ci")
    from dataclasses import replace

    cfg = replace(nb10.config(), steps=6, eval_points=2, eval_subset=20, warmup=2)
    data = nb10.make_data(cfg)
    for name in nb10.MODEL_NAMES:
        run = nb10.train_model(name, cfg, data, progress=False)
        assert run.history.step[-1] == cfg.steps - 1  # the last step, counted from 0
        assert 0.0 <= run.exact_match <= 1.0 and run.train_time_s > 0
        assert len(run.curve_time_s) == len(run.curve_exact) == 2
        assert set(run.by_length) and run.n_params > 0
    with pytest.raises(ValueError, match="model name"):
        nb10.build_model("lstm", cfg, data)
