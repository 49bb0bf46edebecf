"""The training loop's parts (#20.2): the config object, the hooks, the gradient scaler for
float16 autocast, and the loop against a hand-written nanoGPT-style reference loop."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn

from course_utils.modeling.models import ViT, ViTConfig
from course_utils.runtime import training
from course_utils.runtime.training import (
    TrainConfig,
    gradient_scaler,
    lr_schedule,
    param_groups,
    train,
)


def _data(seed: int = 0, n: int = 48):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=g)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5]]) + 0.3 + 0.1 * torch.randn(n, 1, generator=g)
    return x, y


def _mse(model, batch):
    x, y = batch
    return ((model(x) - y) ** 2).mean()


def _model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 1))


def _small_mse(model, batch):
    """A loss small enough that 65536 times its float16 gradients stay finite."""
    return _mse(model, batch) * 1e-4


def _batch(x, y):
    return lambda step: (
        x[step % 3 * 16 : (step % 3 + 1) * 16],
        y[step % 3 * 16 : (step % 3 + 1) * 16],
    )


def _params(model):
    return [p.detach().clone() for p in model.parameters()]


# ------------------------------------------------------------------ the loop against a reference
def test_train_equals_a_hand_written_nanogpt_loop_bit_for_bit():
    """AdamW over param_groups, warmup + cosine, clipping: the same floats as the plain loop."""
    x, y = _data()
    get = _batch(x, y)
    kw = dict(lr=0.02, warmup=2, min_lr=1e-3, weight_decay=0.1, betas=(0.9, 0.95))
    ours = _model()
    h = train(ours, get, steps=9, loss_fn=_mse, grad_clip=0.5, progress=False, **kw)

    ref = _model()
    opt = torch.optim.AdamW(param_groups(ref, 0.1), lr=0.02, betas=(0.9, 0.95))
    losses, norms = [], []
    for step in range(9):
        for group in opt.param_groups:
            group["lr"] = lr_schedule(step, lr=0.02, steps=9, warmup=2, min_lr=1e-3)
        loss = _mse(ref, get(step))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        params = [p for g in opt.param_groups for p in g["params"]]  # the norm's summing order
        norms.append(float(torch.nn.utils.clip_grad_norm_(params, 0.5)))
        opt.step()
        losses.append(loss.item())
    assert h.train_loss == losses and h.grad_norm == norms
    assert all(torch.equal(a, b) for a, b in zip(ours.parameters(), ref.parameters(), strict=True))


def test_a_config_object_and_keywords_give_the_same_run_and_keywords_override_it():
    x, y = _data()
    cfg = TrainConfig(steps=6, lr=0.05, warmup=2, log_every=2, progress=False)
    a = train(_model(), _batch(x, y), cfg, loss_fn=_mse)
    b = train(_model(), _batch(x, y), loss_fn=_mse, steps=6, lr=0.05, warmup=2, log_every=2,
              progress=False)  # fmt: skip
    assert a.train_loss == b.train_loss and a.step == [1, 3, 5]
    c = train(_model(), _batch(x, y), cfg, loss_fn=_mse, lr=0.01)
    assert c.lr[-1] == pytest.approx(lr_schedule(5, lr=0.01, steps=6, warmup=2))
    assert cfg.lr == 0.05  # the config itself is not changed
    with pytest.raises(ValueError, match="steps >= 1"):
        TrainConfig(steps=0)
    with pytest.raises(ValueError, match="log_every"):
        TrainConfig(steps=3, log_every=0)
    with pytest.raises(TypeError, match="stepz"):
        train(_model(), _batch(x, y), loss_fn=_mse, stepz=3)


def test_the_step_and_log_hooks_run_in_order_after_each_step():
    x, y = _data()
    events = []
    model = _model()

    def on_step(step, net):
        assert net is model and net.training
        events.append(("step", step))

    def on_log(step, history):
        assert history.step[-1] == step
        events.append(("log", step))

    def evaluate(net):
        events.append(("eval", len(events)))
        return 0.0

    train(model, _batch(x, y), loss_fn=_mse, steps=4, log_every=2, eval_fn=evaluate,
          eval_every=2, on_step=on_step, on_log=on_log, progress=False)  # fmt: skip
    kinds = [e if e[0] != "eval" else ("eval",) for e in events]
    assert kinds == [
        ("step", 0),
        ("log", 1), ("eval",), ("step", 1),
        ("step", 2),
        ("log", 3), ("eval",), ("step", 3),
    ]  # fmt: skip


# ------------------------------------------------------------------ the gradient scaler
def _spy_scaler(monkeypatch):
    made = []

    def spy(device, dtype):
        scaler = gradient_scaler(device, dtype)
        made.append(scaler)
        return scaler

    monkeypatch.setattr(training, "gradient_scaler", spy)
    return made


def _poison(model, at_steps):
    """Make the first layer's weight gradient infinite at the given steps (counted by calls)."""
    calls = {"n": -1}

    def hook(grad):
        calls["n"] += 1
        return grad * math.inf if calls["n"] in at_steps else grad

    model[0].weight.register_hook(hook)


def test_gradient_scaler_is_enabled_for_float16_only():
    assert gradient_scaler("cpu", torch.float16).is_enabled()
    for dtype in (None, torch.bfloat16, torch.float32):
        assert not gradient_scaler("cpu", dtype).is_enabled()
    assert not gradient_scaler("meta", torch.float16).is_enabled()


def test_float16_autocast_scales_the_loss_and_skips_a_step_with_inf_gradients(monkeypatch):
    made = _spy_scaler(monkeypatch)
    x, y = _data()
    model = _model()
    _poison(model, at_steps={2})
    weights = []
    h = train(model, _batch(x, y), loss_fn=_small_mse, steps=5, lr=0.01,
              autocast_dtype=torch.float16,
              on_step=lambda step, net: weights.append(_params(net)), progress=False)  # fmt: skip
    (scaler,) = made
    assert scaler.is_enabled()
    assert scaler.get_scale() == 65536.0 / 2  # halved once, by the overflow at step 2
    skipped = all(torch.equal(a, b) for a, b in zip(weights[1], weights[2], strict=True))
    moved = not all(torch.equal(a, b) for a, b in zip(weights[2], weights[3], strict=True))
    assert skipped and moved  # the step with inf gradients was skipped, the next one was taken
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert math.isinf(h.grad_norm[2]) and h.train_loss[-1] < h.train_loss[0]


def test_float16_gradients_are_unscaled_before_clipping(monkeypatch):
    """The recorded norm (before clipping) is the true gradient's, not 65536 times it."""
    _spy_scaler(monkeypatch)
    x, y = _data()
    h16 = train(_model(), _batch(x, y), loss_fn=_small_mse, steps=1,
                autocast_dtype=torch.float16, progress=False)  # fmt: skip
    h32 = train(_model(), _batch(x, y), loss_fn=_small_mse, steps=1, progress=False)
    assert h16.grad_norm[0] < 1e-2  # scaled by 65536 it would be far above 1
    assert h16.grad_norm[0] == pytest.approx(h32.grad_norm[0], rel=0.05)


@pytest.mark.filterwarnings("ignore:In CPU autocast:UserWarning")  # float32: autocast is off
@pytest.mark.parametrize("dtype", [None, torch.bfloat16, torch.float32])
def test_bfloat16_and_float32_train_without_a_scaler(monkeypatch, dtype):
    """No scaling: an inf gradient is not skipped but reaches AdamW (and ruins the weights)."""
    made = _spy_scaler(monkeypatch)
    x, y = _data()
    model = _model()
    _poison(model, at_steps={1})
    train(model, _batch(x, y), loss_fn=_mse, steps=2, lr=0.01, autocast_dtype=dtype,
          progress=False)  # fmt: skip
    (scaler,) = made
    assert not scaler.is_enabled() and scaler.get_scale() == 1.0
    assert not torch.isfinite(model[0].weight).all()


# ------------------------------------------------------------------ no_weight_decay
def test_param_groups_do_not_decay_the_vits_position_embedding_and_class_token():
    vit = ViT(ViTConfig(d_model=16, n_layers=1, n_heads=2))
    decay, keep = param_groups(vit, 0.05)
    ids = lambda group: {id(p) for p in group["params"]}  # noqa: E731
    assert {id(vit.pos_embed), id(vit.cls_token)} <= ids(keep)
    assert not {id(vit.pos_embed), id(vit.cls_token)} & ids(decay)
    assert id(vit.head.weight) in ids(decay) and id(vit.patch_embed.proj.weight) in ids(decay)
    assert len(ids(decay)) + len(ids(keep)) == len(list(vit.parameters()))
    mean_pool = ViT(ViTConfig(d_model=16, n_layers=1, n_heads=2, pool="mean"))
    assert id(mean_pool.pos_embed) in ids(param_groups(mean_pool, 0.05)[1])


def test_no_weight_decay_names_of_a_submodule_carry_its_prefix():
    class Table(nn.Module):
        def __init__(self):
            super().__init__()
            self.codes = nn.Parameter(torch.zeros(4, 3))
            self.proj = nn.Linear(3, 3)

        def no_weight_decay(self):
            return {"codes"}

    model = nn.Sequential(nn.Linear(3, 3), Table())
    assert training.no_weight_decay_names(model) == {"1.codes"}
    decay, keep = param_groups(model, 0.1)
    assert [p.shape for p in decay["params"]] == [(3, 3), (3, 3)]
    assert any(p is model[1].codes for p in keep["params"])


def test_a_run_stopped_by_its_time_budget_still_logs_and_evaluates_its_last_step(monkeypatch):
    clock = iter(range(10**4))  # every reading of the clock is one second later
    monkeypatch.setattr(training.time, "perf_counter", lambda: float(next(clock)))
    x, y = _data()
    logged = []
    h = train(_model(), _batch(x, y), loss_fn=_mse, steps=100, log_every=50, time_budget_s=8.5,
              eval_fn=lambda m: 1.0, on_log=lambda step, hist: logged.append(step),
              progress=False)  # fmt: skip
    assert h.stopped_by == "time budget" and 0 < h.steps_done < 50
    assert logged == h.step == [h.steps_done - 1] and h.eval_step == [h.steps_done - 1]
