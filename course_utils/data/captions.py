"""Notebook 12's captioning task: scenes of 2-4 handwritten digits and their captions.

Offline and seeded. Each scene is a ``canvas x canvas`` image cut into a 2 x 2 grid of cells;
2 to 4 cells hold one of scikit-learn's 8x8 digits (bundled, no download) at a random offset
inside the cell. The caption reads the digits in reading order (left to right, top to bottom)
and names the relation between consecutive ones with a small grammar::

    "a seven left of a two above a one"

``left of``: the next digit is in the same row, further right; ``above``: it is in the row below.

Two test splits. The **novel** split (``data.test``) is compositional: in training, digit
``d`` never sits in cell ``d % 4`` (cells are numbered 0 1 / 2 3); every novel test scene puts
at least one digit in its held-out cell, so each of its captions names a (digit, position) pair
no training scene shows. The **in-distribution** split (``data.test_iid``) draws its scenes
like the training scenes (no digit in its held-out cell). Both test splits draw their digits
from other handwritten samples than the training scenes.

    data = make_caption_data(n_train=2000, n_test=500, seed=0)   # n_test_iid defaults to n_test
    data.train.images (N, 1, H, W), data.train.captions (N, T): words, EOS, PAD
    data.train.noun_patches (N, T, P): for each word that names a digit, that digit's patches
    data.vocab.decode(tokens) -> "a seven left of a two"
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from course_utils.data.tasks import BOS, EOS, PAD
from course_utils.data.tasks import Vocab as TokenVocab

__all__ = [
    "PAD",
    "BOS",
    "EOS",
    "DIGIT_NAMES",
    "WORDS",
    "Vocab",
    "Scene",
    "CaptionSplit",
    "CaptionData",
    "held_out_cell",
    "is_held_out",
    "caption_words",
    "render",
    "digit_patches",
    "make_caption_data",
]

DIGIT_NAMES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
WORDS = ("a", *DIGIT_NAMES, "left", "of", "above")
GRID = 2  # cells per side
DIGIT = 8  # scikit-learn's digits are 8 x 8


class Vocab(TokenVocab):
    """The captions' words as :class:`course_utils.data.tasks.Vocab` numbers every vocabulary:
    PAD 0, BOS 1, EOS 2, then :data:`WORDS`; ``decode`` gives the caption as one string."""

    def __init__(self) -> None:
        super().__init__(WORDS)

    def decode(self, ids, **kwargs) -> str:  # type: ignore[override]
        """Ids (a list or 1-D tensor) -> the words up to the first EOS, PAD and BOS dropped."""
        return " ".join(super().decode(ids, **kwargs))

    def is_noun(self, token_id: int) -> bool:
        """True for the ids of the digit names."""
        return self.itos[int(token_id)] in DIGIT_NAMES


@dataclass(frozen=True)
class Scene:
    """Which digit sits in which cell: ``digits[c]`` in 0..9, or -1 for an empty cell c."""

    digits: tuple[int, ...]  # length GRID * GRID, cells numbered row-major

    def occupied(self) -> list[int]:
        """The occupied cells in reading order."""
        return [c for c, d in enumerate(self.digits) if d >= 0]


def held_out_cell(digit: int) -> int:
    """The cell where ``digit`` never appears in training: ``digit % 4``."""
    return digit % (GRID * GRID)


def is_held_out(scene: Scene) -> bool:
    """True when some digit of ``scene`` sits in its held-out cell (a test-only combination)."""
    return any(d >= 0 and c == held_out_cell(d) for c, d in enumerate(scene.digits))


def caption_words(scene: Scene) -> tuple[list[str], list[int]]:
    """The caption of ``scene`` and, per word, the cell of the digit it names (-1 if none).

    Digits in reading order; between two consecutive ones "left of" when the second is in
    the same row, "above" when it is in a lower row.
    """
    words: list[str] = []
    cells: list[int] = []
    previous = None
    for c in scene.occupied():
        if previous is not None:
            rel = ["left", "of"] if c // GRID == previous // GRID else ["above"]
            words += rel
            cells += [-1] * len(rel)
        words += ["a", DIGIT_NAMES[scene.digits[c]]]
        cells += [-1, c]
        previous = c
    return words, cells


def render(
    scene: Scene, glyphs: list[torch.Tensor], offsets: list[tuple[int, int]], canvas: int
) -> torch.Tensor:
    """The image (1, canvas, canvas) in [0, 1]: ``glyphs[i]`` (8, 8) pasted at ``offsets[i]``
    (row, col inside its cell) in the i-th occupied cell."""
    cell = canvas // GRID
    img = torch.zeros(1, canvas, canvas)
    for glyph, (dy, dx), c in zip(glyphs, offsets, scene.occupied(), strict=True):
        y, x = (c // GRID) * cell + dy, (c % GRID) * cell + dx
        img[0, y : y + DIGIT, x : x + DIGIT] = glyph
    return img


def digit_patches(
    glyph: torch.Tensor, cell: int, offset: tuple[int, int], canvas: int, patch: int
) -> torch.Tensor:
    """(P,) bool over the image's ``(canvas/patch)**2`` patches (row-major): True where the
    patch holds ink of ``glyph`` (8, 8) pasted at ``offset`` in ``cell``."""
    ink = torch.zeros(canvas, canvas, dtype=torch.bool)
    size = canvas // GRID
    y, x = (cell // GRID) * size + offset[0], (cell % GRID) * size + offset[1]
    ink[y : y + DIGIT, x : x + DIGIT] = glyph > 0.05
    g = canvas // patch
    return ink.reshape(g, patch, g, patch).any(dim=3).any(dim=1).reshape(g * g)


@dataclass
class CaptionSplit:
    """Images (N, 1, H, W), captions (N, T) (words, EOS, PAD), noun_patches (N, T, P) bool,
    digits (N, 4) (the digit in each cell, -1 empty) and lengths (N,) (words + EOS)."""

    images: torch.Tensor
    captions: torch.Tensor
    noun_patches: torch.Tensor
    digits: torch.Tensor
    lengths: torch.Tensor

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def __getitem__(self, idx) -> CaptionSplit:
        return CaptionSplit(
            self.images[idx],
            self.captions[idx],
            self.noun_patches[idx],
            self.digits[idx],
            self.lengths[idx],
        )

    def to(self, device) -> CaptionSplit:
        """The same split with every tensor on ``device``."""
        return CaptionSplit(*(t.to(device) for t in vars(self).values()))


@dataclass
class CaptionData:
    """The splits, the vocabulary and the geometry (canvas and patch size in pixels).

    ``test``: the novel-combination scenes (each with a digit in its held-out cell);
    ``test_iid``: scenes drawn like the training ones (none), with unseen handwritten samples.
    """

    train: CaptionSplit
    test: CaptionSplit
    vocab: Vocab
    canvas: int
    patch: int
    test_iid: CaptionSplit


def _glyph_pools(seed: int) -> tuple[dict[int, torch.Tensor], dict[int, torch.Tensor]]:
    """Per digit, the 8x8 images (in [0, 1]) reserved for training and for testing (80/20)."""
    from sklearn.datasets import load_digits

    d = load_digits()
    images = torch.tensor(d.images, dtype=torch.float32) / 16.0
    labels = torch.tensor(d.target)
    g = torch.Generator().manual_seed(seed)
    train, test = {}, {}
    for k in range(10):
        idx = (labels == k).nonzero().flatten()
        idx = idx[torch.randperm(len(idx), generator=g)]
        cut = int(0.8 * len(idx))
        train[k], test[k] = images[idx[:cut]], images[idx[cut:]]
    return train, test


def _draw_scene(g: torch.Generator, held_out: bool) -> Scene:
    """A random scene with 2-4 digits: held-out (some digit in its held-out cell) or not
    (no digit in its held-out cell). Rejection sampling."""
    while True:
        n = int(torch.randint(2, GRID * GRID + 1, (1,), generator=g))
        cells = torch.randperm(GRID * GRID, generator=g)[:n].tolist()
        digits = [-1] * (GRID * GRID)
        for c in cells:
            digits[c] = int(torch.randint(0, 10, (1,), generator=g))
        scene = Scene(tuple(digits))
        if is_held_out(scene) == held_out:
            return scene


def _make_split(
    n: int, pools: dict[int, torch.Tensor], held_out: bool, canvas: int, patch: int, g, vocab
) -> CaptionSplit:
    max_words = 4 * 2 + 3 * 2  # four "a <digit>" and three "left of"
    T = max_words + 1
    P = (canvas // patch) ** 2
    slack = canvas // GRID - DIGIT
    images = torch.zeros(n, 1, canvas, canvas)
    captions = torch.full((n, T), PAD, dtype=torch.long)
    nouns = torch.zeros(n, T, P, dtype=torch.bool)
    digits = torch.full((n, GRID * GRID), -1, dtype=torch.long)
    lengths = torch.zeros(n, dtype=torch.long)
    for i in range(n):
        scene = _draw_scene(g, held_out)
        glyphs, offsets = [], []
        for c in scene.occupied():
            pool = pools[scene.digits[c]]
            glyphs.append(pool[int(torch.randint(0, len(pool), (1,), generator=g))])
            offsets.append(tuple(int(v) for v in torch.randint(0, slack + 1, (2,), generator=g)))
        images[i] = render(scene, glyphs, offsets, canvas)
        words, cells = caption_words(scene)
        ids = vocab.encode(words) + [EOS]
        captions[i, : len(ids)] = torch.tensor(ids)
        lengths[i] = len(ids)
        where = dict(zip(scene.occupied(), zip(glyphs, offsets, strict=True), strict=True))
        for t, c in enumerate(cells):
            if c >= 0:
                nouns[i, t] = digit_patches(where[c][0], c, where[c][1], canvas, patch)
        digits[i] = torch.tensor(scene.digits)
    return CaptionSplit(images, captions, nouns, digits, lengths)


def make_caption_data(
    n_train: int,
    n_test: int,
    *,
    n_test_iid: int | None = None,
    canvas: int = 24,
    patch: int = 4,
    seed: int = 0,
) -> CaptionData:
    """The seeded captioning task: ``n_train`` training scenes (no digit in its held-out cell),
    ``n_test`` novel test scenes (each with at least one) and ``n_test_iid`` (default
    ``n_test``) in-distribution test scenes (none); the test splits' handwritten samples are
    disjoint from the training ones. ``canvas`` (pixels per side, even, cells at least 8 wide) and ``patch`` (the
    encoder's patch size, dividing ``canvas``) fix the geometry."""
    if canvas % GRID or canvas // GRID < DIGIT or canvas % patch:
        raise ValueError(
            f"expected an even canvas >= {GRID * DIGIT} divisible by patch, got canvas={canvas}, "
            f"patch={patch}"
        )
    vocab = Vocab()
    train_pool, test_pool = _glyph_pools(seed)
    g = torch.Generator().manual_seed(seed + 1)
    train = _make_split(n_train, train_pool, False, canvas, patch, g, vocab)
    test = _make_split(n_test, test_pool, True, canvas, patch, g, vocab)
    n_iid = n_test if n_test_iid is None else n_test_iid
    test_iid = _make_split(n_iid, test_pool, False, canvas, patch, g, vocab)  # after: same test
    return CaptionData(train, test, vocab, canvas, patch, test_iid)
