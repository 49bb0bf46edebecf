"""Image data for the Vision Transformer (notebook 09): scikit-learn digits and CIFAR-10.

- :func:`load_digits_split`: the 1,797 8x8 digits bundled with scikit-learn (offline, always
  available), stratified 80/20 split by seed.
- :func:`load_cifar10`: the official python tarball, downloaded into the cache with its MD5
  checked (only with ``download=True``), read with ``tarfile`` + ``pickle`` (the official
  format) into uint8 tensors. Only ``numpy`` arrays and plain containers may be unpickled.
"""

from __future__ import annotations

import io
import os
import pickle
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from course_utils.data import cache

__all__ = [
    "ImageSplit",
    "load_digits_split",
    "CIFAR10_URL",
    "CIFAR10_MD5",
    "CIFAR10_FILE",
    "CIFAR10_CLASSES",
    "CIFAR10_MEAN",
    "CIFAR10_STD",
    "find_cifar10",
    "load_cifar10",
    "read_cifar10",
    "normalize",
    "augment_crop_flip",
    "MNIST_FILES",
    "find_mnist",
    "read_idx",
    "load_mnist",
]

CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CIFAR10_MD5 = "c58f30108f718f92721af3b95e74349a"
CIFAR10_FILE = "cifar-10-python.tar.gz"
CIFAR10_CLASSES = [
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
]
# per-channel statistics of the CIFAR-10 training images, in [0, 1] units
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
_FOLDER = "cifar-10-batches-py"


@dataclass
class ImageSplit:
    """Train and test images with integer labels.

    ``x_train`` (N, C, H, W), ``y_train`` (N,) long, ``x_test``, ``y_test``; ``classes`` names
    each label.
    """

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    classes: list[str]

    def to(self, device: torch.device | str) -> ImageSplit:
        """A copy with every tensor on ``device``."""
        return ImageSplit(
            **{
                f.name: (
                    getattr(self, f.name).to(device) if f.name != "classes" else list(self.classes)
                )
                for f in fields(self)
            }
        )

    def __repr__(self) -> str:
        return (
            f"ImageSplit(train {tuple(self.x_train.shape)} {self.x_train.dtype}, "
            f"test {tuple(self.x_test.shape)}, {len(self.classes)} classes)"
        )


def load_digits_split(seed: int = 0, test_fraction: float = 0.2) -> ImageSplit:
    """scikit-learn's digits as float images in [0, 1]: x (N, 1, 8, 8), y (N,) long.

    Stratified split (every digit keeps its share in both halves), deterministic in ``seed``.
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
    y = digits.target.astype(np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(
        x, y, test_size=test_fraction, stratify=y, random_state=seed
    )
    return ImageSplit(
        torch.from_numpy(x_tr),
        torch.from_numpy(y_tr),
        torch.from_numpy(x_te),
        torch.from_numpy(y_te),
        [str(i) for i in range(10)],
    )


# --------------------------------------------------------------------------------------------
# CIFAR-10
# --------------------------------------------------------------------------------------------
class _ArrayUnpickler(pickle.Unpickler):
    """Unpickles numpy arrays and plain containers only (the CIFAR batches need nothing else)."""

    _ALLOWED = {
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy._core.numeric", "_frombuffer"),
        ("_codecs", "encode"),
    }  # how protocol-2 pickles written by Python 3 store bytes

    def find_class(self, module: str, name: str):  # noqa: ANN201 (pickle API)
        if module.startswith("numpy.core"):  # files pickled by numpy 1.x
            module = "numpy._core" + module[len("numpy.core") :]
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(
                f"refusing to load {module}.{name} from a CIFAR-10 batch: this does not look like "
                "the official CIFAR-10 python archive"
            )
        return super().find_class(module, name)


def _unpickle(raw: bytes) -> dict:
    obj = _ArrayUnpickler(io.BytesIO(raw), encoding="bytes").load()
    if not isinstance(obj, dict):
        raise ValueError(f"expected a dict in a CIFAR-10 batch, got {type(obj).__name__}")
    return {(k.decode() if isinstance(k, bytes) else k): v for k, v in obj.items()}


def _member_reader(path: Path) -> tuple[Callable[[str], bytes], Callable[[], None]]:
    """A function reading ``cifar-10-batches-py/<name>`` from a tarball or an extracted folder."""
    if path.is_dir():
        folder = path / _FOLDER if (path / _FOLDER).is_dir() else path
        return (lambda name: (folder / name).read_bytes()), (lambda: None)
    tar = tarfile.open(path, "r:*")
    members = {Path(m.name).name: m for m in tar.getmembers() if m.isfile()}

    def read(name: str) -> bytes:
        if name not in members:
            raise ValueError(f"{path} has no {_FOLDER}/{name}: is it the CIFAR-10 python archive?")
        f = tar.extractfile(members[name])
        assert f is not None
        return f.read()

    return read, tar.close


def _batch(read: Callable[[str], bytes], name: str) -> tuple[torch.Tensor, torch.Tensor]:
    d = _unpickle(read(name))
    data = np.asarray(d["data"], dtype=np.uint8)
    if data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise ValueError(f"expected {name} data of shape (N, 3072), got {data.shape}")
    x = torch.from_numpy(data.copy()).reshape(-1, 3, 32, 32)
    y = torch.tensor(list(d["labels"]), dtype=torch.long)
    return x, y


def read_cifar10(path: str | os.PathLike) -> ImageSplit:
    """Read the CIFAR-10 python archive (tarball or extracted folder) into uint8 tensors.

    Returns x (N, 3, 32, 32) uint8 and y (N,) long: 50,000 training and 10,000 test images
    for the real file. No checksum is checked here (see :func:`load_cifar10`).
    """
    path = Path(path)
    read, close = _member_reader(path)
    try:
        parts = [_batch(read, f"data_batch_{i}") for i in range(1, 6)]
        x_test, y_test = _batch(read, "test_batch")
        try:
            meta = _unpickle(read("batches.meta"))
            classes = [c.decode() if isinstance(c, bytes) else str(c) for c in meta["label_names"]]
        except (ValueError, KeyError, FileNotFoundError):
            classes = list(CIFAR10_CLASSES)
    finally:
        close()
    return ImageSplit(
        torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts]), x_test, y_test, classes
    )


def find_cifar10() -> Path | None:
    """The cached CIFAR-10 tarball if present (in ``$COURSE_DATA_DIR`` or the default cache)."""
    path = cache.cache_dir() / CIFAR10_FILE
    return path if path.is_file() else None


def load_cifar10(path: str | os.PathLike | None = None, *, download: bool = False) -> ImageSplit:
    """CIFAR-10 as uint8 tensors: x (N, 3, 32, 32), y (N,).

    Order: explicit ``path`` (tarball or extracted folder) -> the cached tarball ->
    download into the cache with its MD5 checked (only with ``download=True``) -> a
    ``FileNotFoundError`` saying how to get it.
    """
    if path is not None:
        p = Path(path).expanduser()
        if not p.exists():
            raise FileNotFoundError(f"no CIFAR-10 archive at {p} (from path=...). " + _how_to_get())
        return read_cifar10(p)
    found = find_cifar10()
    if found is not None:
        return read_cifar10(found)
    if download:
        dest = cache.download(
            CIFAR10_URL,
            cache.cache_dir(create=True) / CIFAR10_FILE,
            md5=CIFAR10_MD5,
            progress=True,
            timeout=120,
        )
        return read_cifar10(dest)
    raise FileNotFoundError(f"CIFAR-10 is not in {cache.cache_dir()}. " + _how_to_get())


def _how_to_get() -> str:
    return (
        f"Call load_cifar10(download=True) to fetch {CIFAR10_URL} (170 MB, MD5-checked) into "
        f"{cache.cache_dir()}, or copy {CIFAR10_FILE} there yourself (set {cache.ENV_VAR} to "
        "choose another folder), or pass path=..."
    )


# --------------------------------------------------------------------------------------------
# MNIST (only from the cache: the course never downloads it by itself)
# --------------------------------------------------------------------------------------------
MNIST_FILES = {
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}
_MNIST_FOLDERS = ("", "mnist", "MNIST/raw")  # under the cache; the last is torchvision's layout


def _mnist_file(folder: Path, stem: str) -> Path | None:
    for name in (stem + ".gz", stem):
        if (folder / name).is_file():
            return folder / name
    return None


def find_mnist() -> Path | None:
    """The cache folder holding MNIST's four idx files (``.gz`` or not), if any.

    Looked for in ``$COURSE_DATA_DIR`` (or the default cache), its ``mnist/`` and torchvision's
    ``MNIST/raw/``.
    """
    root = cache.cache_dir()
    for sub in _MNIST_FOLDERS:
        folder = root / sub if sub else root
        if all(_mnist_file(folder, stem) for stem in MNIST_FILES.values()):
            return folder
    return None


def read_idx(path: str | os.PathLike) -> torch.Tensor:
    """Read one idx file (MNIST's format, gzipped or not) of unsigned bytes into a uint8 tensor."""
    import gzip

    path = Path(path)
    raw = (gzip.open if path.suffix == ".gz" else open)(path, "rb").read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise ValueError(f"{path} is not an idx file of unsigned bytes")
    ndim = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(shape)):
        raise ValueError(f"{path}: header says shape {shape}, found {data.size} values")
    return torch.from_numpy(data.copy()).reshape(shape)


def load_mnist(folder: str | os.PathLike | None = None) -> ImageSplit:
    """MNIST as uint8 tensors: x (N, 1, 28, 28), y (N,) long (60,000 train, 10,000 test).

    From ``folder`` or the cache (:func:`find_mnist`); a ``FileNotFoundError`` saying where to
    put the files otherwise. Nothing is downloaded.
    """
    found = Path(folder) if folder is not None else find_mnist()
    if found is None:
        names = ", ".join(stem + ".gz" for stem in MNIST_FILES.values())
        raise FileNotFoundError(
            f"MNIST is not in {cache.cache_dir()}: copy {names} there (or into its mnist/ "
            f"folder; set {cache.ENV_VAR} to choose another folder)"
        )
    parts = {}
    for key, stem in MNIST_FILES.items():
        path = _mnist_file(found, stem)
        if path is None:
            raise FileNotFoundError(f"no {stem}(.gz) in {found}")
        parts[key] = read_idx(path)
    x_train, x_test = parts["x_train"].unsqueeze(1), parts["x_test"].unsqueeze(1)
    return ImageSplit(
        x_train,
        parts["y_train"].long(),
        x_test,
        parts["y_test"].long(),
        [str(i) for i in range(10)],
    )


def normalize(
    x: torch.Tensor, mean: tuple[float, ...] = CIFAR10_MEAN, std: tuple[float, ...] = CIFAR10_STD
) -> torch.Tensor:
    """uint8 (or [0, 1] float) images (B, C, H, W) -> float, standardised per channel."""
    if x.dim() != 4 or x.shape[1] != len(mean):
        raise ValueError(f"expected images (B, {len(mean)}, H, W), got {tuple(x.shape)}")
    xf = x.float() / 255.0 if x.dtype == torch.uint8 else x.float()
    m = torch.tensor(mean, device=x.device).view(1, -1, 1, 1)
    s = torch.tensor(std, device=x.device).view(1, -1, 1, 1)
    return (xf - m) / s


def augment_crop_flip(
    x: torch.Tensor, padding: int = 4, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Random crop (after zero padding) and random horizontal flip, per image: (B, C, H, W) -> same.

    ``generator`` must live on ``x.device`` (or be None).
    """
    if x.dim() != 4:
        raise ValueError(f"expected images (B, C, H, W), got {tuple(x.shape)}")
    b, _, h, w = x.shape
    dev = x.device
    xp = F.pad(x, (padding, padding, padding, padding))
    oy = torch.randint(0, 2 * padding + 1, (b,), generator=generator, device=dev)
    ox = torch.randint(0, 2 * padding + 1, (b,), generator=generator, device=dev)
    rows = (oy[:, None] + torch.arange(h, device=dev))[:, :, None]  # (B, H, 1)
    cols = (ox[:, None] + torch.arange(w, device=dev))[:, None, :]  # (B, 1, W)
    out = xp[torch.arange(b, device=dev)[:, None, None], :, rows, cols]  # (B, H, W, C)
    out = out.permute(0, 3, 1, 2)
    flip = torch.rand(b, generator=generator, device=dev) < 0.5
    return torch.where(flip[:, None, None, None], out.flip(-1), out).contiguous()
