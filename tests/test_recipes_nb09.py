"""Notebook 09's recipe: configs per profile, the training functions at tiny sizes, the
spectrogram generator and the maths behind the pictures (rollout, position similarity)."""

from __future__ import annotations

import io
import math
import pickle
import tarfile
from dataclasses import replace

import numpy as np
import pytest
import torch

from course_utils.data import images
from course_utils.data.images import CIFAR10_FILE, ImageSplit, load_digits_split
from course_utils.lessons.nb09_vit import recipe as nb09
from course_utils.lessons.nb09_vit import train as nb09_train
from course_utils.modeling.layers import record_attention
from course_utils.modeling.models import ViT, ViTConfig


@pytest.fixture(scope="module")
def tiny_digits() -> ImageSplit:
    """300 training and 100 test digits: enough to see learning, seconds to train."""
    d = load_digits_split(seed=0)
    return ImageSplit(d.x_train[:300], d.y_train[:300], d.x_test[:100], d.y_test[:100], d.classes)


def test_configs_follow_the_profile(monkeypatch):
    for name in ("ci", "cpu", "gpu"):
        monkeypatch.setenv("COURSE_PROFILE", name)
        cfg = nb09.config(dataset="digits")
        assert cfg.profile == name and cfg.dataset == "digits"
        assert cfg.vit.num_patches == 16 and cfg.vit.num_tokens == 17  # 2x2 patches of 8x8
    assert nb09.config("ci").train.epochs < nb09.config("cpu").train.epochs
    cifar = nb09.config("gpu", dataset="cifar10")
    assert (cifar.vit.image_size, cifar.vit.in_channels, cifar.vit.patch_size) == (32, 3, 4)
    assert cifar.train.augment.kind == "crop_flip" and cifar.train.autocast_dtype is not None
    with pytest.raises(ValueError, match="profile"):
        nb09.config("laptop")


def test_gpu_profile_uses_digits_when_cifar10_is_absent(monkeypatch, tmp_path):
    monkeypatch.setenv("COURSE_DATA_DIR", str(tmp_path))
    assert nb09.config("gpu").dataset == "digits"


@pytest.mark.slow
def test_train_vit_learns_tiny_digits_and_reports_times(tiny_digits):
    cfg = nb09.config("ci", dataset="digits")
    tc = replace(cfg.train, epochs=10, eval_every_epochs=5, augment=nb09.Augment(kind="none"))
    vit = replace(cfg.vit, n_layers=1, d_model=32, d_ff=64)
    run = nb09.train_vit(cfg, tiny_digits, vit=vit, train_cfg=tc, progress=False)
    assert isinstance(run.model, ViT) and run.steps == 10 * 5
    assert run.accuracy > 0.5  # chance is 0.1
    assert run.wall_s > 0 and run.cpu_s > 0 and run.n_params == run.model.num_params()
    assert run.history.eval["test accuracy"][-1] == run.accuracy
    assert "test accuracy" in run.summary()


@pytest.mark.slow
def test_train_vit_is_deterministic_for_a_seed(tiny_digits):
    cfg = nb09.config("ci", dataset="digits")
    tc = replace(cfg.train, epochs=1)
    vit = replace(cfg.vit, n_layers=1, d_model=16, d_ff=32)
    a, b = (
        nb09.train_vit(cfg, tiny_digits, vit=vit, train_cfg=tc, seed=3, progress=False)
        for _ in range(2)
    )
    for pa, pb in zip(a.model.parameters(), b.model.parameters(), strict=True):
        assert torch.equal(pa, pb)


def test_weight_average_is_the_model_at_decay_0_and_the_start_at_decay_1(tiny_digits):
    """``TrainConfig.ema``: the model returned is the moving average of the weights."""
    cfg = nb09.config("ci", dataset="digits")
    tc = replace(cfg.train, epochs=1, batch_size=100, warmup_epochs=0)  # 3 steps
    vit = replace(cfg.vit, n_layers=1, d_model=16, d_ff=32)

    def run(ema):
        return nb09.train_vit(
            cfg, tiny_digits, vit=vit, train_cfg=replace(tc, ema=ema), seed=5, progress=False
        )

    plain, follow, frozen = run(None), run(0.0), run(1.0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(5)
        start = ViT(vit)
    for p, f, z, s0 in zip(
        plain.model.parameters(),
        follow.model.parameters(),
        frozen.model.parameters(),
        start.parameters(),
        strict=True,
    ):
        assert torch.equal(p, f)  # decay 0: the average is the last weights
        assert torch.equal(z, s0)  # decay 1: the average never moves from the start
    assert frozen.accuracy == nb09.accuracy(frozen.model, tiny_digits.x_test, tiny_digits.y_test)
    assert plain.steps == follow.steps == 3


@pytest.mark.slow
def test_small_cnn_baseline_learns(tiny_digits):
    cnn = nb09.config("ci").cnn
    cnn = replace(
        cnn, d_model=8, train=replace(cnn.train, epochs=8, augment=nb09.Augment(kind="none"))
    )
    run = nb09.train_small_cnn(tiny_digits, cnn, progress=False)
    assert run.model(tiny_digits.x_test[:2]).shape == (2, 10)
    assert run.accuracy > 0.5


def test_svc_baseline_fits_digits(tiny_digits):
    run = nb09.fit_svc(tiny_digits)
    assert run.accuracy > 0.85
    sub = nb09.fit_svc(tiny_digits, max_train=50)
    assert len(sub.model.support_) <= 50


def test_train_vit_digits_uses_the_profile_recipe(monkeypatch):
    captured = {}

    def fake_train_vit(cfg, data, *, seed, progress):
        captured.update(cfg=cfg, data=data, seed=seed)
        return "run"

    monkeypatch.setattr(nb09_train, "train_vit", fake_train_vit)
    assert nb09.train_vit_digits(nb09.config("cpu"), seed=4) == "run"
    assert captured["cfg"].profile == "cpu" and captured["seed"] == 4
    assert captured["data"].x_train.shape[1:] == (1, 8, 8)


def test_the_vit_initialises_itself_with_xavier_scale_weights_and_a_zero_head():
    model = ViT(ViTConfig(d_model=32, n_heads=2, n_layers=1))
    w = model.patch_embed.proj.weight  # (32, 4): xavier bound sqrt(6 / 36)
    assert w.abs().max() <= (6 / 36) ** 0.5 and w.std() > 0.1
    assert torch.count_nonzero(model.head.weight) == 0


def test_affine_augmentation_keeps_shape_and_identity_is_exact():
    x = torch.rand(5, 1, 8, 8)
    g = torch.Generator().manual_seed(0)
    out = nb09.augment_affine(x, g)
    assert out.shape == x.shape and not torch.allclose(out, x)
    same = nb09.augment_affine(x, g, rotate=0.0, zoom=0.0, shift=0.0)
    torch.testing.assert_close(same, x)
    with pytest.raises(ValueError, match="B, C, H, W"):
        nb09.augment_affine(torch.rand(8, 8))


def test_spectrograms_have_every_class_and_are_reproducible():
    x, y = nb09.make_spectrograms(120, n_freq=16, n_time=24, seed=1)
    assert x.shape == (120, 1, 16, 24) and y.shape == (120,)
    assert set(y.tolist()) == set(range(len(nb09.SPECTROGRAM_CLASSES)))
    x2, y2 = nb09.make_spectrograms(120, n_freq=16, n_time=24, seed=1)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    assert (x >= 0).all() and torch.isfinite(x).all()


def test_chirps_rise_and_fall():
    x, y = nb09.make_spectrograms(400, noise=0.0, seed=0)
    ridge = x[:, 0].argmax(dim=1).float()  # (n, T): loudest frequency per frame
    freqs = torch.arange(x.shape[2]).float().view(1, -1, 1)
    centre = (x[:, 0] * freqs).sum(1) / x[:, 0].sum(1).clamp(min=1e-6)  # (n, T)
    active = x[:, 0].amax(dim=1) > 0.5  # frames where the sound is on
    for label, sign in ((1, 1.0), (2, -1.0)):
        for i in torch.nonzero(y == label).flatten()[:10]:
            c = centre[i][active[i]]
            assert sign * (c[-1] - c[0]) > 2, (label, ridge[i])


@pytest.mark.slow
def test_spectrogram_vit_trains():
    sc = nb09.config("ci").spectrogram
    sc = replace(sc, n_train=200, n_test=100, train=replace(sc.train, epochs=2))
    run = nb09.train_vit_spectrograms(sc, progress=False)
    assert run.model.config.image_size == (16, 24)
    batches_per_epoch = math.ceil(200 / sc.train.batch_size)
    assert 0.0 <= run.accuracy <= 1.0 and run.steps == 2 * batches_per_epoch


def test_attention_rollout_rows_sum_to_one_and_one_layer_is_its_mixed_map():
    g = torch.Generator().manual_seed(0)
    layers = [torch.rand(2, 3, 5, 5, generator=g).softmax(-1) for _ in range(3)]
    r = nb09.attention_rollout(layers)
    assert r.shape == (2, 5, 5)
    torch.testing.assert_close(r.sum(-1), torch.ones(2, 5))
    one = nb09.attention_rollout(layers[:1])
    torch.testing.assert_close(one, 0.5 * layers[0].mean(1) + 0.5 * torch.eye(5))
    plain = nb09.attention_rollout(layers, residual=False)
    a = [w.mean(1) for w in layers]
    torch.testing.assert_close(plain, a[2] @ a[1] @ a[0])
    with pytest.raises(ValueError, match="at least one"):
        nb09.attention_rollout([])


def test_position_similarity_is_a_cosine_map_on_the_grid():
    model = ViT(ViTConfig(image_size=(8, 12), patch_size=4, d_model=16, n_heads=2, n_layers=1))
    sim = nb09.position_similarity(model)
    assert sim.shape == (2, 3, 2, 3)
    for r in range(2):
        for c in range(3):
            assert sim[r, c, r, c] == pytest.approx(1.0, abs=1e-5)
    assert sim.abs().max() <= 1 + 1e-5


def _fake_cifar(path, n_per_batch: int = 8) -> None:
    """A tiny archive in the official CIFAR-10 python layout (random pixels and labels)."""
    rng = np.random.default_rng(0)
    with tarfile.open(path, "w:gz") as tar:
        for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
            obj = {
                b"data": rng.integers(0, 256, (n_per_batch, 3072), dtype=np.uint8),
                b"labels": rng.integers(0, 10, n_per_batch).tolist(),
            }
            raw = pickle.dumps(obj, protocol=2)
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))


@pytest.mark.slow
def test_gpu_profile_trains_on_cifar10_when_the_archive_is_cached(monkeypatch, tmp_path):
    monkeypatch.setenv("COURSE_DATA_DIR", str(tmp_path))
    _fake_cifar(tmp_path / CIFAR10_FILE)
    cfg = nb09.config("gpu")
    assert cfg.dataset == "cifar10" and cfg.svc["max_train"] < 50_000
    data = nb09.load_images(cfg)
    assert data.x_train.shape == (40, 3, 32, 32) and data.x_train.dtype == torch.float32
    assert abs(float(data.x_train.mean())) < 0.5  # standardised per channel
    vit = replace(cfg.vit, d_model=16, n_heads=2, d_ff=32, n_layers=1)
    tc = replace(cfg.train, epochs=1, batch_size=16, warmup_epochs=0)  # crop+flip, bf16 autocast
    run = nb09.train_vit(cfg, data, vit=vit, train_cfg=tc, device="cpu", progress=False)
    assert run.steps == 3 and 0.0 <= run.accuracy <= 1.0
    cnn = replace(cfg.cnn, d_model=4, train=replace(tc))
    assert 0.0 <= nb09.train_small_cnn(data, cnn, device="cpu", progress=False).accuracy <= 1.0
    assert 0.0 <= nb09.fit_svc(data, **{**cfg.svc, "max_train": 30}).accuracy <= 1.0


def test_run_model_batches_and_returns_weights_on_the_cpu():
    model = ViT(ViTConfig(d_model=16, n_heads=2, n_layers=2)).eval()
    x = torch.rand(7, 1, 8, 8)
    logits, weights = nb09.run_model_with_attention(model, x, batch_size=3)
    with torch.no_grad(), record_attention(model) as ref_weights:
        ref_logits = model(x)
    torch.testing.assert_close(logits, ref_logits)
    torch.testing.assert_close(nb09.run_model(model, x, batch_size=3), ref_logits)
    assert len(weights) == 2 and weights[0].shape == (7, 2, 17, 17)
    torch.testing.assert_close(weights[1], ref_weights[1])
    doubled = nb09.run_model(model, x, forward=lambda m, b: 2 * m(b), batch_size=4)
    torch.testing.assert_close(doubled, 2 * ref_logits)


def _write_idx(path, array: np.ndarray) -> None:
    """An idx file of unsigned bytes (MNIST's format), gzipped."""
    import gzip

    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(
        int(n).to_bytes(4, "big") for n in array.shape
    )
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def _fake_mnist(folder, n_train: int = 30, n_test: int = 12) -> None:
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    for key, stem in images.MNIST_FILES.items():
        n = n_train if "train" in key else n_test
        shape = (n, 28, 28) if key.startswith("x") else (n,)
        _write_idx(
            folder / f"{stem}.gz", rng.integers(0, 256 if key.startswith("x") else 10, shape)
        )


def test_mnist_is_found_in_the_cache_and_used_by_cpu_not_ci(monkeypatch, tmp_path):
    monkeypatch.setenv("COURSE_DATA_DIR", str(tmp_path))
    assert images.find_mnist() is None and nb09.config("cpu").dataset == "digits"
    with pytest.raises(FileNotFoundError, match="MNIST is not in"):
        images.load_mnist()
    _fake_mnist(tmp_path / "MNIST" / "raw")  # torchvision's layout
    assert images.find_mnist() == tmp_path / "MNIST" / "raw"
    raw = images.load_mnist()
    assert raw.x_train.shape == (30, 1, 28, 28) and raw.x_train.dtype == torch.uint8
    assert raw.y_test.shape == (12,) and raw.y_test.dtype == torch.long
    assert nb09.config("ci").dataset == "digits"  # ci never needs data files
    cfg = nb09.config("cpu")
    assert cfg.dataset == "mnist" and cfg.vit.grid_size == (7, 7)
    data = nb09.load_images(replace(cfg, n_train=20, n_test=5))
    assert data.x_train.shape == (20, 1, 28, 28) and data.x_test.shape == (5, 1, 28, 28)
    assert 0.0 <= float(data.x_train.min()) and float(data.x_train.max()) <= 1.0
    text = nb09.dataset_description(cfg, data)
    assert "MNIST" in text and "7 \\times 7" in text and "N = 49" in text


def test_read_idx_rejects_other_files(tmp_path):
    bad = tmp_path / "bad"
    bad.write_bytes(b"not an idx file")
    with pytest.raises(ValueError, match="idx"):
        images.read_idx(bad)
    short = tmp_path / "short.gz"
    _write_idx(short, np.zeros((3, 2)))
    raw = short.read_bytes()
    import gzip

    (tmp_path / "cut").write_bytes(gzip.decompress(raw)[:-1])
    with pytest.raises(ValueError, match="header says"):
        images.read_idx(tmp_path / "cut")


def test_dataset_description_follows_the_digits_split():
    cfg = nb09.config("ci", dataset="digits")
    text = nb09.dataset_description(cfg, load_digits_split(seed=0))
    assert "1,437 training and 360 test" in text and "4 \\times 4" in text and "N = 16" in text


def test_grid_distance_and_similarity_by_distance():
    d = nb09.grid_distance((2, 3))
    assert d.shape == (6, 6) and d[0, 5] == pytest.approx(5**0.5) and d[0, 1] == 1
    model = ViT(ViTConfig(image_size=8, patch_size=2, d_model=16, n_heads=2, n_layers=1))
    dists, means = nb09.similarity_by_distance(model)
    assert dists[0] == pytest.approx(1.0) and dists == sorted(dists) and len(dists) == len(means)
    assert dists[-1] == pytest.approx(18**0.5)  # corner to corner of a 4x4 grid


def test_position_distance_correlation_sees_a_grid_and_not_noise():
    cfg = ViTConfig(image_size=16, patch_size=2, d_model=64, n_heads=2, n_layers=1)
    model = ViT(cfg)
    dist = nb09.grid_distance(cfg.grid_size)  # (64, 64): one bump per grid cell, 64 = d_model
    smooth = torch.exp(-0.5 * (dist / 1.5) ** 2)  # nearby patches get nearby vectors
    with torch.no_grad():
        model.pos_embed[0, 1:] = smooth
    assert nb09.position_distance_correlation(model) < -0.5
    noise = nb09.initial_vit(replace(cfg, d_model=256, d_ff=256), seed=0)
    assert abs(nb09.position_distance_correlation(noise)) < 0.15


def test_initial_vit_is_where_train_vit_starts(tiny_digits):
    cfg = nb09.config("ci", dataset="digits")
    vit = replace(cfg.vit, n_layers=1, d_model=16, d_ff=32)
    start = nb09.initial_vit(vit, seed=5)
    again = nb09.initial_vit(vit, seed=5)
    for a, b in zip(start.parameters(), again.parameters(), strict=True):
        assert torch.equal(a, b)
    assert torch.count_nonzero(start.head.weight) == 0  # Xavier recipe: a zero head
    plain = nb09.initial_vit(vit, seed=5, xavier_init=False)
    assert plain.patch_embed.proj.weight.std() < 0.05  # the default N(0, 0.02^2)
    tc = replace(cfg.train, epochs=1, batch_size=300, lr=0.0, min_lr=0.0, warmup_epochs=0)
    run = nb09.train_vit(cfg, tiny_digits, vit=vit, train_cfg=tc, seed=5, progress=False)
    torch.testing.assert_close(run.model.pos_embed, start.pos_embed)  # lr 0: never moved
