"""A character-level text corpus (notebook 08): tokenizer, splits and random batches.

Where the text comes from (:func:`load_text_corpus`), first match wins:

1. an explicit ``path`` (CI and the benchmarks pass ``../shared/data/tinyshakespeare.txt``);
2. ``tinyshakespeare.txt`` in the cache folder (``$COURSE_DATA_DIR``, default
   ``~/.cache/course_utils``);
3. the copy that ships with the package, ``course_utils/data/tinyshakespeare.txt.xz`` (364 kB,
   public domain), checked by SHA-256 after decompression: every profile trains on Shakespeare
   with no network and no data folder;
4. a download of tiny-shakespeare into the cache folder, checked by SHA-256 — only with
   ``download=True`` (only needed if the bundled copy was removed);
5. with ``allow_fallback=True``: a generated corpus built offline from the toy translation
   task, returned with a note saying so (only if the bundled copy is missing or damaged);
6. otherwise a ``FileNotFoundError`` saying exactly how to get the file.
"""

from __future__ import annotations

import functools
import hashlib
import lzma
import os
import random
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch

from course_utils.data import cache

__all__ = [
    "TINYSHAKESPEARE_URL",
    "TINYSHAKESPEARE_SHA256",
    "TINYSHAKESPEARE_FILE",
    "TextCorpus",
    "CharTokenizer",
    "CharDataset",
    "find_tinyshakespeare",
    "bundled_tinyshakespeare",
    "load_text_corpus",
    "fallback_corpus",
    "train_val_split",
    "get_batch",
]

TINYSHAKESPEARE_URL = (
    "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
)
TINYSHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
TINYSHAKESPEARE_FILE = "tinyshakespeare.txt"
BUNDLED_TINYSHAKESPEARE = Path(__file__).with_name("tinyshakespeare.txt.xz")


@dataclass
class TextCorpus:
    """A loaded text: ``text``, its ``name``, where it came from (``source``) and a ``note``.

    ``note`` is empty for tiny-shakespeare and explains the substitute for the fallback corpus.
    """

    text: str
    name: str
    source: str
    note: str = ""

    def __len__(self) -> int:
        return len(self.text)

    def __repr__(self) -> str:
        return f"TextCorpus({self.name!r}, {len(self.text):,} characters from {self.source})"


class CharTokenizer:
    """Characters <-> ids, one id per distinct character, in sorted order (as nanoGPT).

    >>> tok = CharTokenizer.from_text("hello")
    >>> tok.encode("hole"), tok.decode([2, 3, 1, 0])
    ([1, 3, 2, 0], 'lohe')
    """

    def __init__(self, chars: Iterable[str]) -> None:
        self.itos: list[str] = sorted(set(chars))
        if any(len(c) != 1 for c in self.itos):
            raise ValueError("expected single characters for a CharTokenizer")
        self.stoi: dict[str, int] = {c: i for i, c in enumerate(self.itos)}

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        """The tokenizer whose vocabulary is every character in ``text``."""
        return cls(set(text))

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, text: str) -> list[int]:
        """String -> list of ids (raises ``ValueError`` on a character not in the vocabulary)."""
        try:
            return [self.stoi[c] for c in text]
        except KeyError as exc:
            raise ValueError(
                f"character {exc.args[0]!r} is not in this tokenizer's vocabulary of "
                f"{self.vocab_size} characters"
            ) from None

    def decode(self, ids: Iterable[int] | torch.Tensor) -> str:
        """Ids (list or 1-D tensor) -> string."""
        if isinstance(ids, torch.Tensor):
            ids = ids.reshape(-1).tolist()
        return "".join(self.itos[int(i)] for i in ids)


def train_val_split(
    data: torch.Tensor, val_fraction: float = 0.1
) -> tuple[torch.Tensor, torch.Tensor]:
    """Split a 1-D token tensor into its first ``1 - val_fraction`` and the rest (nanoGPT: 90/10)."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"expected 0 < val_fraction < 1, got {val_fraction}")
    n = int(len(data) * (1 - val_fraction))
    return data[:n], data[n:]


def get_batch(
    data: torch.Tensor,
    block_size: int,
    batch_size: int,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random windows of a 1-D token tensor: ``x`` (B, T) and ``y`` (B, T), ``y`` = ``x`` shifted by one."""
    if data.dim() != 1:
        raise ValueError(f"expected a 1-D tensor of token ids, got shape {tuple(data.shape)}")
    if len(data) <= block_size:
        raise ValueError(
            f"expected more than block_size={block_size} tokens, got {len(data)}; "
            "use a longer text or a smaller block_size"
        )
    ix = torch.randint(len(data) - block_size, (batch_size,), generator=generator)
    offsets = torch.arange(block_size)
    x = data[ix[:, None] + offsets]
    y = data[ix[:, None] + offsets + 1]
    if device is not None:
        x, y = x.to(device), y.to(device)
    return x, y


class CharDataset:
    """A text as character ids with a 90/10 train/val split.

    Attributes: ``tokenizer``, ``data`` (N,) long, ``train_data``, ``val_data``, ``corpus``.
    """

    def __init__(
        self,
        text: str | TextCorpus,
        val_fraction: float = 0.1,
        tokenizer: CharTokenizer | None = None,
    ) -> None:
        self.corpus = text if isinstance(text, TextCorpus) else TextCorpus(text, "text", "a string")
        self.tokenizer = tokenizer or CharTokenizer.from_text(self.corpus.text)
        self.data = torch.tensor(self.tokenizer.encode(self.corpus.text), dtype=torch.long)
        self.train_data, self.val_data = train_val_split(self.data, val_fraction)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    def __len__(self) -> int:
        return len(self.data)

    def __repr__(self) -> str:
        return (
            f"CharDataset({self.corpus.name!r}: {len(self.data):,} characters, vocab "
            f"{self.vocab_size}, train {len(self.train_data):,} / val {len(self.val_data):,})"
        )

    def get_batch(
        self,
        split: str,
        block_size: int,
        batch_size: int,
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(x, y)`` each (B, T) from the ``"train"`` or ``"val"`` split."""
        if split not in ("train", "val"):
            raise ValueError(f"expected split 'train' or 'val', got {split!r}")
        data = self.train_data if split == "train" else self.val_data
        return get_batch(data, block_size, batch_size, generator, device)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text)

    def decode(self, ids: Iterable[int] | torch.Tensor) -> str:
        return self.tokenizer.decode(ids)


def find_tinyshakespeare() -> Path | None:
    """The cached ``tinyshakespeare.txt`` if present (``$COURSE_DATA_DIR`` or the default cache)."""
    path = cache.cache_dir() / TINYSHAKESPEARE_FILE
    return path if path.is_file() else None


def bundled_tinyshakespeare() -> TextCorpus | None:
    """The tiny-shakespeare copy shipped in the package, or ``None`` if it is missing or damaged.

    The text is decompressed and checked against :data:`TINYSHAKESPEARE_SHA256`, so a truncated or
    edited file is never used silently (the caller then falls back or raises).
    """
    text = _bundled_text()
    if text is None:
        return None
    return TextCorpus(text, "tinyshakespeare", f"{BUNDLED_TINYSHAKESPEARE.name} (bundled)")


@functools.lru_cache(maxsize=1)
def _bundled_text() -> str | None:
    try:
        raw = lzma.decompress(BUNDLED_TINYSHAKESPEARE.read_bytes())
    except (OSError, lzma.LZMAError):
        return None
    if hashlib.sha256(raw).hexdigest() != TINYSHAKESPEARE_SHA256:
        return None
    return raw.decode("utf-8")


def fallback_corpus(n_lines: int = 4000, seed: int = 0) -> TextCorpus:
    """An offline substitute corpus: toy-translation pairs, one per line (``english = french``).

    About 80 characters a line, so the default is roughly 300k characters: enough for a
    character-level model to learn spelling, word order and the agreement rules.
    """
    return TextCorpus(
        text=_generated_text(n_lines, seed),
        name="toy-translation",
        source="generated (course_utils.data.text.fallback_corpus)",
        note=(
            "tiny-shakespeare was not found (the copy bundled with course_utils is missing or "
            "damaged), so this is a generated substitute: sentences of "
            "the toy translation task with their translations. " + _how_to_get()
        ),
    )


@functools.lru_cache(maxsize=4)
def _generated_text(n_lines: int, seed: int) -> str:
    from course_utils.data.tasks import TranslationTask

    task = TranslationTask(seed=seed)
    lines = [
        f"{' '.join(e.src)} = {' '.join(e.tgt)}."
        for e in task.sample(n_lines, 3, 12, random.Random(seed))
    ]
    return "\n".join(lines) + "\n"


def _how_to_get() -> str:
    if os.environ.get("COURSE_GRADER_SANDBOX"):  # grading.sandbox.SANDBOX_ENV
        # the sandbox's home folder is not the student's: name the folders that count
        return (
            "This notebook is being graded by `course grade` in its sandbox, which sees "
            f"tiny-shakespeare only when the machine that grades has {TINYSHAKESPEARE_FILE} in "
            f"its {cache.ENV_VAR} folder or in ~/.cache/course_utils of the user who runs "
            "`course grade` (it is shown to the sandbox read-only)."
        )
    folder = cache.cache_dir()
    relative = (
        ""
        if folder.is_absolute()
        else (
            f" ({cache.ENV_VAR} is a relative path, so it was looked up from this process's folder "
            f"{Path.cwd()}; a Jupyter kernel runs in the notebook's folder: use an absolute path)"
        )
    )
    return (
        f"To use tiny-shakespeare: pass path='.../tinyshakespeare.txt', or put "
        f"{TINYSHAKESPEARE_FILE} in {folder.resolve()}{relative} (set {cache.ENV_VAR} to choose "
        f"another folder), or call load_text_corpus(download=True) to fetch it from "
        f"{TINYSHAKESPEARE_URL}."
    )


def _read(path: Path, name: str) -> TextCorpus:
    return TextCorpus(path.read_text(encoding="utf-8"), name, str(path))


def load_text_corpus(
    path: str | os.PathLike | None = None, *, download: bool = False, allow_fallback: bool = False
) -> TextCorpus:
    """Find a text corpus (see the module docstring for the order) and return a :class:`TextCorpus`.

    Raises ``FileNotFoundError`` (with instructions) when nothing is found, and when an
    explicit ``path`` does not exist — a path given on purpose is never silently replaced.
    """
    if path is not None:
        p = Path(path).expanduser()
        if not p.is_file():
            raise FileNotFoundError(
                f"no text file at {p} (from path=...). Check the path; " + _how_to_get()
            )
        return _read(p, p.stem)
    found = find_tinyshakespeare()
    if found is not None:
        return _read(found, "tinyshakespeare")
    bundled = bundled_tinyshakespeare()
    if bundled is not None:
        return bundled
    if download:
        dest = cache.download(
            TINYSHAKESPEARE_URL,
            cache.cache_dir(create=True) / TINYSHAKESPEARE_FILE,
            sha256=TINYSHAKESPEARE_SHA256,
        )
        return _read(dest, "tinyshakespeare")
    if allow_fallback:
        return fallback_corpus()
    raise FileNotFoundError(f"tiny-shakespeare is not in {cache.cache_dir()}. " + _how_to_get())
