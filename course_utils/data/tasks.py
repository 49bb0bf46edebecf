"""Generated sequence-to-sequence tasks: a toy translation task, reverse and sort.

Nothing is downloaded: every example is drawn from a seeded generator.

The translation task is built so that attention has something to show (notebooks 01, 02, 10):

- a **dictionary**: each source word has a fixed translation (``cat`` -> ``chat``);
- **local reordering**: adjectives follow the noun in the target language and their order
  flips, as in "European Economic Area" -> "zone économique européenne"
  (``the european economic area`` -> ``la zone économique européenne``);
- **one-to-many words**: a past-tense verb becomes two target words (``saw`` -> ``a vu``);
- **agreement**: articles and adjectives take the noun's gender (``the`` -> ``le`` / ``la``),
  so a target word can depend on a source word further along;
- **length is a knob**: ``min_len`` / ``max_len`` count source tokens.

Every example carries its gold **alignment**: for each target token, the source position it
comes from, so notebooks can lay attention maps beside the truth.

Token ids: ``PAD = 0``, ``BOS = 1``, ``EOS = 2`` in every vocabulary. Sources carry no BOS/EOS;
``tgt_in`` is ``BOS + target`` and ``tgt_out`` is ``target + EOS`` (teacher forcing).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any, NamedTuple

import torch

__all__ = [
    "PAD",
    "BOS",
    "EOS",
    "Vocab",
    "Example",
    "TranslationTask",
    "ReverseTask",
    "SortTask",
    "Seq2SeqData",
    "TaskData",
    "encode_examples",
    "make_data",
    "make_translation_data",
    "make_reverse_data",
    "make_sort_data",
    "Batches",
    "batches",
    "take",
    "batch_length",
    "exact_match",
    "token_accuracy",
    "accuracy_by_length",
    "alignment_matrix",
    "alignment_score",
]

PAD, BOS, EOS = 0, 1, 2
SPECIALS = ("<pad>", "<bos>", "<eos>")
UNK_TOKEN = "<unk>"


# --------------------------------------------------------------------------------------------
# Vocabulary
# --------------------------------------------------------------------------------------------
class Vocab:
    """A token <-> id table with ``PAD = 0``, ``BOS = 1``, ``EOS = 2`` (and ``<unk>`` = 3 if asked).

    >>> v = Vocab(["cat", "dog"])
    >>> v.encode("cat dog", add_eos=True)
    [3, 4, 2]
    >>> v.decode([1, 3, 4, 2, 0])
    ['cat', 'dog']
    """

    def __init__(self, tokens: Iterable[str], *, unk: bool = False) -> None:
        itos = list(SPECIALS) + ([UNK_TOKEN] if unk else [])
        seen = set(itos)
        for tok in tokens:
            if tok not in seen:
                seen.add(tok)
                itos.append(tok)
        self.itos: list[str] = itos
        self.stoi: dict[str, int] = {t: i for i, t in enumerate(itos)}
        self.pad_id, self.bos_id, self.eos_id = PAD, BOS, EOS
        self.unk_id: int | None = self.stoi[UNK_TOKEN] if unk else None

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, token: object) -> bool:
        return token in self.stoi

    def __repr__(self) -> str:
        preview = ", ".join(self.itos[len(SPECIALS) : len(SPECIALS) + 8])
        return f"Vocab({len(self)} tokens: {preview}, ...)"

    @property
    def specials(self) -> set[int]:
        """Ids of the special tokens (PAD, BOS, EOS and UNK if present)."""
        return {i for i in (self.pad_id, self.bos_id, self.eos_id, self.unk_id) if i is not None}

    def encode(
        self, tokens: str | Iterable[str], *, add_bos: bool = False, add_eos: bool = False
    ) -> list[int]:
        """Token strings (or one whitespace-separated string) -> list of ids."""
        if isinstance(tokens, str):
            tokens = tokens.split()
        ids = []
        for tok in tokens:
            if tok in self.stoi:
                ids.append(self.stoi[tok])
            elif self.unk_id is not None:
                ids.append(self.unk_id)
            else:
                raise ValueError(
                    f"token {tok!r} is not in the vocabulary ({len(self)} tokens, e.g. "
                    f"{self.itos[len(SPECIALS) : len(SPECIALS) + 5]}); build the Vocab with unk=True "
                    "to map unknown tokens to <unk>"
                )
        return ([BOS] if add_bos else []) + ids + ([EOS] if add_eos else [])

    def decode(
        self,
        ids: Iterable[int] | torch.Tensor,
        *,
        strip_special: bool = True,
        stop_at_eos: bool = True,
    ) -> list[str]:
        """Ids (list or 1-D tensor) -> token strings; stops at the first EOS and drops PAD/BOS."""
        if isinstance(ids, torch.Tensor):
            if ids.dim() != 1:
                raise ValueError(f"expected a 1-D tensor of ids, got shape {tuple(ids.shape)}")
            ids = ids.tolist()
        out = []
        for i in ids:
            i = int(i)
            if stop_at_eos and i == EOS:
                break
            if strip_special and i in (PAD, BOS, EOS):
                continue
            if not 0 <= i < len(self.itos):
                raise ValueError(f"id {i} is outside the vocabulary (0..{len(self.itos) - 1})")
            out.append(self.itos[i])
        return out

    def decode_text(self, ids: Iterable[int] | torch.Tensor, **kwargs: Any) -> str:
        """Like :meth:`decode`, joined with spaces."""
        return " ".join(self.decode(ids, **kwargs))


class Example(NamedTuple):
    """One generated pair: source words, target words and the gold alignment.

    ``alignment[j]`` is the source position that target word ``j`` comes from.
    """

    src: list[str]
    tgt: list[str]
    alignment: list[int]


def _rng(
    generator: torch.Generator | random.Random | int | None, default_seed: int
) -> random.Random:
    """A Python RNG derived from a torch Generator, an int seed, or the task's default seed."""
    if isinstance(generator, random.Random):
        return generator
    if isinstance(generator, torch.Generator):
        return random.Random(int(torch.randint(0, 2**62, (1,), generator=generator)))
    if generator is None:
        return random.Random(default_seed)
    if isinstance(generator, int):
        return random.Random(generator)
    raise TypeError(
        f"expected a torch.Generator, an int seed or None, got {type(generator).__name__}"
    )


def _check_lengths(min_len: int, max_len: int, smallest: int = 1) -> None:
    if not (isinstance(min_len, int) and isinstance(max_len, int)):
        raise TypeError(f"expected integer lengths, got min_len={min_len!r}, max_len={max_len!r}")
    if min_len < smallest or max_len < min_len:
        raise ValueError(
            f"expected {smallest} <= min_len <= max_len, got min_len={min_len}, max_len={max_len}"
        )


class _Task:
    """Shared sampling logic: draw a length uniformly, then a sentence of exactly that length."""

    name = "task"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    src_vocab: Vocab
    tgt_vocab: Vocab

    def _sentence(self, length: int, rng: random.Random) -> list[str]:  # pragma: no cover
        raise NotImplementedError

    def translate(
        self, src: Sequence[str] | str
    ) -> tuple[list[str], list[int]]:  # pragma: no cover
        raise NotImplementedError

    def example(self, src: Sequence[str] | str) -> Example:
        """The :class:`Example` for a given source sentence (words or a string)."""
        words = src.split() if isinstance(src, str) else list(src)
        tgt, alignment = self.translate(words)
        return Example(words, tgt, alignment)

    def sample(
        self,
        n: int,
        min_len: int = 3,
        max_len: int = 12,
        generator: torch.Generator | int | None = None,
        *,
        unique: bool = False,
        exclude: set[tuple[str, ...]] | None = None,
    ) -> list[Example]:
        """Draw ``n`` examples whose source length is uniform in ``[min_len, max_len]``.

        ``unique=True`` never returns the same source twice, and ``exclude`` holds sources
        (tuples of words) that must not appear; both retry with a fresh length, so very short
        lengths (with few possible sentences) get rarer rather than repeated.
        """
        _check_lengths(min_len, max_len)
        rng = _rng(generator, self.seed)
        exclude = exclude if exclude is not None else set()
        seen: set[tuple[str, ...]] = set()
        out: list[Example] = []
        attempts, limit = 0, 50 * n + 1000
        while len(out) < n:
            attempts += 1
            if attempts > limit:
                raise ValueError(
                    f"could only draw {len(out)} distinct {self.name} sentences of length "
                    f"{min_len}..{max_len} (asked for {n}); widen the length range or ask for fewer"
                )
            words = self._sentence(rng.randint(min_len, max_len), rng)
            key = tuple(words)
            if key in exclude or (unique and key in seen):
                continue
            seen.add(key)
            out.append(self.example(words))
        return out


# --------------------------------------------------------------------------------------------
# The toy translation task
# --------------------------------------------------------------------------------------------
# source noun -> (target noun, gender)
NOUNS: dict[str, tuple[str, str]] = {
    "cat": ("chat", "m"),
    "dog": ("chien", "m"),
    "book": ("livre", "m"),
    "tree": ("arbre", "m"),
    "bird": ("oiseau", "m"),
    "garden": ("jardin", "m"),
    "boat": ("bateau", "m"),
    "car": ("voiture", "f"),
    "house": ("maison", "f"),
    "area": ("zone", "f"),
    "city": ("ville", "f"),
    "apple": ("pomme", "f"),
    "river": ("rivière", "f"),
    "flower": ("fleur", "f"),
    "table": ("table", "f"),
    "door": ("porte", "f"),
}
# source adjective -> (masculine, feminine); all go after the noun in French
ADJECTIVES: dict[str, tuple[str, str]] = {
    "red": ("rouge", "rouge"),
    "green": ("vert", "verte"),
    "black": ("noir", "noire"),
    "white": ("blanc", "blanche"),
    "blue": ("bleu", "bleue"),
    "economic": ("économique", "économique"),
    "european": ("européen", "européenne"),
    "fast": ("rapide", "rapide"),
    "slow": ("lent", "lente"),
    "happy": ("heureux", "heureuse"),
    "cold": ("froid", "froide"),
    "grey": ("gris", "grise"),
}
DETERMINERS: dict[str, tuple[str, str]] = {
    "the": ("le", "la"),
    "a": ("un", "une"),
    "this": ("ce", "cette"),
    "my": ("mon", "ma"),
}
NAMES: dict[str, str] = {
    "john": "jean",
    "peter": "pierre",
    "anna": "anne",
    "james": "jacques",
    "london": "londres",
    "paris": "paris",
}
# one word -> one word
VERBS: dict[str, list[str]] = {
    "sees": ["voit"],
    "eats": ["mange"],
    "likes": ["aime"],
    "follows": ["suit"],
    "finds": ["trouve"],
    "takes": ["prend"],
}
# one word -> two words (passé composé)
PAST_VERBS: dict[str, list[str]] = {
    "saw": ["a", "vu"],
    "ate": ["a", "mangé"],
    "liked": ["a", "aimé"],
    "followed": ["a", "suivi"],
    "found": ["a", "trouvé"],
    "took": ["a", "pris"],
}
CONJUNCTIONS: dict[str, str] = {"and": "et"}


class TranslationTask(_Task):
    """A toy English -> French-like translation task (see the module docstring).

    Grammar of a source sentence of ``L`` tokens: one noun phrase when ``L <= 4``, otherwise
    clauses ``NP VERB NP`` joined by ``and``. A noun phrase is a name (1 token) or
    ``DET ADJ* NOUN`` (2 to 4 tokens).

    Args:
        seed: default seed for :meth:`sample` when no generator is given.
        reorder: adjectives follow the noun, in flipped order (off: keep source order).
        one_to_many: allow past-tense verbs that become two target words.

    >>> task = TranslationTask()
    >>> task.translate("the european economic area saw my red car")[0]
    ['la', 'zone', 'économique', 'européenne', 'a', 'vu', 'ma', 'voiture', 'rouge']
    """

    name = "translation"

    def __init__(self, seed: int = 0, *, reorder: bool = True, one_to_many: bool = True) -> None:
        super().__init__(seed)
        self.reorder = reorder
        self.one_to_many = one_to_many
        self.verbs = dict(VERBS, **(PAST_VERBS if one_to_many else {}))
        src = (
            list(DETERMINERS)
            + list(ADJECTIVES)
            + list(NOUNS)
            + list(NAMES)
            + list(self.verbs)
            + list(CONJUNCTIONS)
        )
        tgt: list[str] = []
        for m, f in DETERMINERS.values():
            tgt += [m, f]
        tgt += [w for w, _ in NOUNS.values()]
        for m, f in ADJECTIVES.values():
            tgt += [m, f]
        tgt += list(NAMES.values())
        for words in self.verbs.values():
            tgt += words
        tgt += list(CONJUNCTIONS.values())
        self.src_vocab = Vocab(src)
        self.tgt_vocab = Vocab(tgt)

    def __repr__(self) -> str:
        return (
            f"TranslationTask(seed={self.seed}, reorder={self.reorder}, "
            f"one_to_many={self.one_to_many}: {len(self.src_vocab)} source / "
            f"{len(self.tgt_vocab)} target tokens)"
        )

    # sentence generation --------------------------------------------------------------------
    def _noun_phrase(self, size: int, rng: random.Random) -> list[str]:
        if size == 1:
            return [rng.choice(list(NAMES))]
        adjectives = rng.sample(list(ADJECTIVES), size - 2)
        return [rng.choice(list(DETERMINERS)), *adjectives, rng.choice(list(NOUNS))]

    def _sentence(self, length: int, rng: random.Random) -> list[str]:
        if length <= 4:
            return self._noun_phrase(length, rng)
        words: list[str] = []
        remaining = length
        while remaining > 0:
            if words:
                words.append("and")
                remaining -= 1
            # a clause has 3..9 tokens; leave either nothing or room for "and" + a clause
            sizes = [
                s
                for s in range(3, min(9, remaining) + 1)
                if remaining - s == 0 or remaining - s >= 4
            ]
            size = rng.choice(sizes)
            left = rng.choice([a for a in range(1, 5) if 1 <= size - 1 - a <= 4])
            words += self._noun_phrase(left, rng)
            words.append(rng.choice(list(self.verbs)))
            words += self._noun_phrase(size - 1 - left, rng)
            remaining -= size
        return words

    # translation (the single source of truth for targets and alignments) ----------------------
    def translate(self, src: Sequence[str] | str) -> tuple[list[str], list[int]]:
        """Translate source words; returns ``(target words, alignment)``.

        ``alignment[j]`` is the position in ``src`` that target word ``j`` comes from.
        Raises ``ValueError`` on a word outside the dictionary or a dangling article/adjective.
        """
        words = src.split() if isinstance(src, str) else list(src)
        tgt: list[str] = []
        align: list[int] = []
        pending: list[int] = []  # positions of a determiner and adjectives waiting for their noun
        for i, w in enumerate(words):
            if w in DETERMINERS or w in ADJECTIVES:
                if w in DETERMINERS and pending:
                    raise ValueError(f"unexpected determiner {w!r} at position {i} in {words}")
                pending.append(i)
                continue
            if w in NOUNS:
                noun, gender = NOUNS[w]
                g = 0 if gender == "m" else 1
                det = [p for p in pending if words[p] in DETERMINERS]
                adjs = [p for p in pending if words[p] in ADJECTIVES]
                for p in det:
                    tgt.append(DETERMINERS[words[p]][g])
                    align.append(p)
                if not self.reorder:
                    for p in adjs:
                        tgt.append(ADJECTIVES[words[p]][g])
                        align.append(p)
                tgt.append(noun)
                align.append(i)
                if self.reorder:
                    for p in reversed(adjs):
                        tgt.append(ADJECTIVES[words[p]][g])
                        align.append(p)
                pending = []
                continue
            if w in NAMES:
                out = [NAMES[w]]
            elif w in self.verbs:
                out = self.verbs[w]
            elif w in CONJUNCTIONS:
                out = [CONJUNCTIONS[w]]
            else:
                raise ValueError(
                    f"{w!r} is not in the dictionary of this task; known words: "
                    f"{', '.join(self.src_vocab.itos[len(SPECIALS) :])}"
                )
            if pending:
                raise ValueError(
                    f"expected a noun after {[words[p] for p in pending]}, got {w!r} at position {i}"
                )
            tgt += out
            align += [i] * len(out)
        if pending:
            raise ValueError(f"the sentence ends before the noun of {[words[p] for p in pending]}")
        return tgt, align


# --------------------------------------------------------------------------------------------
# Reverse and sort
# --------------------------------------------------------------------------------------------
def _symbols(vocab_size: int) -> list[str]:
    if vocab_size < 1:
        raise ValueError(f"expected vocab_size >= 1, got {vocab_size}")
    letters = [chr(ord("a") + i) for i in range(min(vocab_size, 26))]
    return letters + [f"s{i}" for i in range(26, vocab_size)]


class ReverseTask(_Task):
    """Reverse a random sequence of ``vocab_size`` symbols (``a b c`` -> ``c b a``).

    Source and target share one vocabulary. ``alignment[j] = L - 1 - j``.
    """

    name = "reverse"

    def __init__(self, vocab_size: int = 10, seed: int = 0) -> None:
        super().__init__(seed)
        self.symbols = _symbols(vocab_size)
        self.src_vocab = self.tgt_vocab = Vocab(self.symbols)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(vocab_size={len(self.symbols)}, seed={self.seed})"

    def _sentence(self, length: int, rng: random.Random) -> list[str]:
        return [rng.choice(self.symbols) for _ in range(length)]

    def translate(self, src: Sequence[str] | str) -> tuple[list[str], list[int]]:
        """``(reversed words, alignment)``."""
        words = src.split() if isinstance(src, str) else list(src)
        n = len(words)
        return words[::-1], [n - 1 - j for j in range(n)]


class SortTask(ReverseTask):
    """Sort a random sequence of symbols by vocabulary id (``c a b`` -> ``a b c``).

    ``alignment[j]`` is the source position of the j-th smallest symbol (stable for ties).
    """

    name = "sort"

    def translate(self, src: Sequence[str] | str) -> tuple[list[str], list[int]]:
        """``(sorted words, alignment)``."""
        words = src.split() if isinstance(src, str) else list(src)
        order = sorted(range(len(words)), key=lambda i: (self.src_vocab.stoi[words[i]], i))
        return [words[i] for i in order], order


# --------------------------------------------------------------------------------------------
# Tensors
# --------------------------------------------------------------------------------------------
@dataclass
class Seq2SeqData:
    """Padded tensors for ``N`` pairs (PAD = 0).

    Attributes:
        src: (N, S) source ids, no BOS/EOS.
        src_lengths: (N,) number of real source tokens.
        tgt_in: (N, T) ``BOS + target`` (decoder input under teacher forcing).
        tgt_out: (N, T) ``target + EOS`` (what the decoder must predict).
        tgt_lengths: (N,) real tokens in ``tgt_out`` (EOS included).
        alignment: (N, T) source position of each ``tgt_out`` token; -1 at EOS and PAD.

    Indexing (``data[idx]`` with an int, slice, index tensor or bool mask) returns a
    ``Seq2SeqData`` trimmed to the longest sequence it holds.
    """

    src: torch.Tensor
    src_lengths: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    tgt_lengths: torch.Tensor
    alignment: torch.Tensor

    def __len__(self) -> int:
        return self.src.shape[0]

    def __getitem__(self, idx: Any) -> Seq2SeqData:
        if isinstance(idx, int):
            idx = [idx]
        out = {f.name: getattr(self, f.name)[idx] for f in fields(self)}
        s = int(out["src_lengths"].max()) if len(out["src_lengths"]) else 0
        t = int(out["tgt_lengths"].max()) if len(out["tgt_lengths"]) else 0
        for key in ("src",):
            out[key] = out[key][:, :s]
        for key in ("tgt_in", "tgt_out", "alignment"):
            out[key] = out[key][:, :t]
        return Seq2SeqData(**out)

    def to(self, device: torch.device | str) -> Seq2SeqData:
        """A copy with every tensor on ``device``."""
        return Seq2SeqData(**{f.name: getattr(self, f.name).to(device) for f in fields(self)})

    @property
    def device(self) -> torch.device:
        return self.src.device


def encode_examples(examples: Sequence[Example], src_vocab: Vocab, tgt_vocab: Vocab) -> Seq2SeqData:
    """Encode and pad a list of :class:`Example` into a :class:`Seq2SeqData`."""
    n = len(examples)
    if n == 0:
        raise ValueError("expected at least one example to encode, got an empty list")
    s_max = max(len(e.src) for e in examples)
    t_max = max(len(e.tgt) for e in examples) + 1
    src = torch.full((n, s_max), PAD, dtype=torch.long)
    tgt_in = torch.full((n, t_max), PAD, dtype=torch.long)
    tgt_out = torch.full((n, t_max), PAD, dtype=torch.long)
    alignment = torch.full((n, t_max), -1, dtype=torch.long)
    src_lengths = torch.empty(n, dtype=torch.long)
    tgt_lengths = torch.empty(n, dtype=torch.long)
    for i, e in enumerate(examples):
        s_ids = src_vocab.encode(e.src)
        t_ids = tgt_vocab.encode(e.tgt)
        src[i, : len(s_ids)] = torch.tensor(s_ids, dtype=torch.long)
        tgt_in[i, : len(t_ids) + 1] = torch.tensor([BOS] + t_ids, dtype=torch.long)
        tgt_out[i, : len(t_ids) + 1] = torch.tensor(t_ids + [EOS], dtype=torch.long)
        if e.alignment:
            alignment[i, : len(e.alignment)] = torch.tensor(e.alignment, dtype=torch.long)
        src_lengths[i] = len(s_ids)
        tgt_lengths[i] = len(t_ids) + 1
    return Seq2SeqData(src, src_lengths, tgt_in, tgt_out, tgt_lengths, alignment)


@dataclass
class TaskData:
    """Train and test splits of a generated task, with their vocabularies and raw examples.

    ``train_examples[i]`` / ``test_examples[i]`` hold the words behind row ``i`` (labels for
    attention heatmaps). No source sentence appears in both splits.
    """

    train: Seq2SeqData
    test: Seq2SeqData
    src_vocab: Vocab
    tgt_vocab: Vocab
    train_examples: list[Example]
    test_examples: list[Example]
    task: _Task

    def __repr__(self) -> str:
        def span(d: Seq2SeqData) -> str:
            return f"{len(d)} pairs, source length {int(d.src_lengths.min())}..{int(d.src_lengths.max())}"

        return (
            f"TaskData({self.task!r}; train: {span(self.train)}; test: {span(self.test)}; "
            f"vocab {len(self.src_vocab)} -> {len(self.tgt_vocab)})"
        )


def make_data(
    task: _Task,
    n_train: int,
    n_test: int,
    min_len: int,
    max_len: int,
    seed: int = 0,
    *,
    test_min_len: int | None = None,
    test_max_len: int | None = None,
) -> TaskData:
    """Draw a train and a test split from ``task`` with no source sentence in both.

    The test lengths default to the train lengths; pass ``test_min_len`` / ``test_max_len``
    to test length generalisation. Deterministic in ``seed``.
    """
    if n_train < 1 or n_test < 1:
        raise ValueError(f"expected n_train >= 1 and n_test >= 1, got {n_train} and {n_test}")
    test_min_len = min_len if test_min_len is None else test_min_len
    test_max_len = max_len if test_max_len is None else test_max_len
    rng = random.Random(seed)
    test = task.sample(n_test, test_min_len, test_max_len, rng, unique=True)
    held_out = {tuple(e.src) for e in test}
    train = task.sample(n_train, min_len, max_len, rng, unique=True, exclude=held_out)
    return TaskData(
        train=encode_examples(train, task.src_vocab, task.tgt_vocab),
        test=encode_examples(test, task.src_vocab, task.tgt_vocab),
        src_vocab=task.src_vocab,
        tgt_vocab=task.tgt_vocab,
        train_examples=train,
        test_examples=test,
        task=task,
    )


def make_translation_data(
    n_train: int = 5000,
    n_test: int = 500,
    min_len: int = 3,
    max_len: int = 20,
    seed: int = 0,
    **kwargs: Any,
) -> TaskData:
    """The toy translation task as tensors (see :class:`TranslationTask`).

    ``kwargs``: ``reorder``, ``one_to_many`` (task options) and ``test_min_len``,
    ``test_max_len`` (see :func:`make_data`).
    """
    task_kw = {k: kwargs.pop(k) for k in ("reorder", "one_to_many") if k in kwargs}
    return make_data(
        TranslationTask(seed=seed, **task_kw), n_train, n_test, min_len, max_len, seed, **kwargs
    )


def make_reverse_data(
    n_train: int = 5000,
    n_test: int = 500,
    min_len: int = 3,
    max_len: int = 12,
    seed: int = 0,
    vocab_size: int = 10,
    **kwargs: Any,
) -> TaskData:
    """The reverse task as tensors (see :class:`ReverseTask`)."""
    return make_data(
        ReverseTask(vocab_size, seed), n_train, n_test, min_len, max_len, seed, **kwargs
    )


def make_sort_data(
    n_train: int = 5000,
    n_test: int = 500,
    min_len: int = 3,
    max_len: int = 12,
    seed: int = 0,
    vocab_size: int = 10,
    **kwargs: Any,
) -> TaskData:
    """The sort task as tensors (see :class:`SortTask`)."""
    return make_data(SortTask(vocab_size, seed), n_train, n_test, min_len, max_len, seed, **kwargs)


# --------------------------------------------------------------------------------------------
# Batches
# --------------------------------------------------------------------------------------------
def batch_length(data: Any) -> int:
    """Rows of a batch (dim 0): a tensor, a tuple/list/dict of tensors that agree, or an
    object with ``__len__``; a ValueError when the parts disagree."""
    if isinstance(data, torch.Tensor):
        return data.shape[0]
    if isinstance(data, (tuple, list)):
        if not data:
            raise ValueError("expected a non-empty tuple of tensors")
        n = batch_length(data[0])
        for d in data[1:]:
            if batch_length(d) != n:
                raise ValueError(
                    f"tensors in a batch disagree on the batch size: {n} vs {batch_length(d)}"
                )
        return n
    if isinstance(data, dict):
        return batch_length(list(data.values()))
    return len(data)


def take(data: Any, idx: Any) -> Any:
    """Rows ``idx`` of a batch: a tensor, a tuple/list/dict of tensors, or anything indexable."""
    if isinstance(data, torch.Tensor):
        return data[idx]
    if isinstance(data, tuple):
        return tuple(take(d, idx) for d in data)
    if isinstance(data, list):
        return [take(d, idx) for d in data]
    if isinstance(data, dict):
        return {k: take(v, idx) for k, v in data.items()}
    return data[idx]


class Batches:
    """Mini-batches over ``data`` (re-iterable: every ``iter()`` is a new epoch).

    ``data`` is a :class:`Seq2SeqData`, a tensor, or a tuple/dict of tensors sharing dim 0.
    With ``shuffle`` each epoch draws a fresh permutation from ``generator``.
    """

    def __init__(
        self,
        data: Any,
        batch_size: int,
        generator: torch.Generator | None = None,
        *,
        shuffle: bool = True,
        drop_last: bool = False,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"expected batch_size >= 1, got {batch_size}")
        self.data, self.batch_size = data, batch_size
        self.generator = generator if generator is not None else torch.Generator().manual_seed(0)
        self.shuffle, self.drop_last = shuffle, drop_last
        self.n = batch_length(data)

    def __len__(self) -> int:
        return self.n // self.batch_size if self.drop_last else math.ceil(self.n / self.batch_size)

    def __iter__(self) -> Iterator[Any]:
        order = (
            torch.randperm(self.n, generator=self.generator)
            if self.shuffle
            else torch.arange(self.n)
        )
        for start in range(0, self.n, self.batch_size):
            idx = order[start : start + self.batch_size]
            if self.drop_last and len(idx) < self.batch_size:
                return
            yield take(self.data, idx)


def batches(
    data: Any,
    batch_size: int,
    generator: torch.Generator | None = None,
    *,
    shuffle: bool = True,
    drop_last: bool = False,
) -> Batches:
    """Mini-batches of ``batch_size`` rows (see :class:`Batches`); pass it to ``training.train``."""
    return Batches(data, batch_size, generator, shuffle=shuffle, drop_last=drop_last)


# --------------------------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------------------------
def _align_pred(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    if pred.dim() != 2 or target.dim() != 2 or pred.shape[0] != target.shape[0]:
        raise ValueError(
            f"expected pred (N, T') and target (N, T) with the same N, got {tuple(pred.shape)} "
            f"and {tuple(target.shape)}"
        )
    t = target.shape[1]
    if pred.shape[1] >= t:
        return pred[:, :t]
    fill = torch.full((pred.shape[0], t - pred.shape[1]), -1, dtype=pred.dtype, device=pred.device)
    return torch.cat([pred, fill], dim=1)


def exact_match(pred: torch.Tensor, target: torch.Tensor, pad_id: int = PAD) -> torch.Tensor:
    """(N,) bool: every non-PAD target token (EOS included) predicted right.

    pred (N, T') token ids (any length; extra tokens after the target's end are ignored),
    target (N, T) e.g. ``tgt_out``.
    """
    pred = _align_pred(pred, target)
    real = target != pad_id
    return ((pred == target) | ~real).all(dim=1)


def token_accuracy(pred: torch.Tensor, target: torch.Tensor, pad_id: int = PAD) -> torch.Tensor:
    """(N,) float: fraction of non-PAD target tokens predicted right, per sequence."""
    pred = _align_pred(pred, target)
    real = target != pad_id
    correct = ((pred == target) & real).sum(dim=1).float()
    return correct / real.sum(dim=1).clamp(min=1).float()


def accuracy_by_length(
    pred: torch.Tensor,
    target: torch.Tensor,
    lengths: torch.Tensor,
    buckets: int | Sequence[tuple[int, int]] | None = None,
    *,
    metric: str = "exact",
    pad_id: int = PAD,
) -> dict[Any, float]:
    """Mean accuracy per input-length bucket, for plotting accuracy vs length.

    pred (N, T'), target (N, T), lengths (N,) e.g. ``src_lengths``.
    ``buckets=None``: one bucket per length, keys are ints. An int ``k``: ``k`` equal-width
    buckets over the observed lengths; a list of inclusive ``(lo, hi)`` pairs: those buckets.
    Bucket keys are then labels ``"lo-hi"`` (or the int when ``lo == hi``), in order; empty
    buckets are left out. ``metric``: ``"exact"`` (:func:`exact_match`) or ``"token"``.
    """
    if metric == "exact":
        scores = exact_match(pred, target, pad_id).float()
    elif metric == "token":
        scores = token_accuracy(pred, target, pad_id)
    else:
        raise ValueError(f"expected metric 'exact' or 'token', got {metric!r}")
    lengths = torch.as_tensor(lengths).to(scores.device)
    if lengths.shape != scores.shape:
        raise ValueError(
            f"expected lengths of shape ({scores.shape[0]},), got {tuple(lengths.shape)}"
        )
    if buckets is None:
        return {int(n): scores[lengths == n].mean().item() for n in torch.unique(lengths).tolist()}
    if isinstance(buckets, int):
        lo, hi = int(lengths.min()), int(lengths.max())
        width = max(1, math.ceil((hi - lo + 1) / buckets))
        buckets = [(a, min(a + width - 1, hi)) for a in range(lo, hi + 1, width)]
    out: dict[Any, float] = {}
    for lo, hi in buckets:
        sel = (lengths >= lo) & (lengths <= hi)
        if sel.any():
            out[lo if lo == hi else f"{lo}-{hi}"] = scores[sel].mean().item()
    return out


def alignment_matrix(
    alignment: Sequence[int] | torch.Tensor, src_len: int | None = None
) -> torch.Tensor:
    """Gold alignment as a 0/1 matrix: (T,) -> (T, S), or (N, T) -> (N, T, S); -1 rows stay 0."""
    a = torch.as_tensor(alignment, dtype=torch.long)
    if a.dim() not in (1, 2):
        raise ValueError(f"expected alignment of shape (T,) or (N, T), got {tuple(a.shape)}")
    s = int(a.max()) + 1 if src_len is None else src_len
    s = max(s, 1)
    valid = a >= 0
    out = torch.zeros(*a.shape, s)
    out.scatter_(-1, a.clamp(min=0).unsqueeze(-1), valid.unsqueeze(-1).float())
    return out


def alignment_score(weights: torch.Tensor, alignment: torch.Tensor) -> float:
    """Fraction of target tokens whose strongest attention falls on the gold source position.

    weights (T, S) or (N, T, S) attention (rows = target tokens), alignment (T,) or (N, T) with
    -1 where there is no gold position (EOS, PAD); those rows are ignored.
    """
    a = torch.as_tensor(alignment, dtype=torch.long, device=weights.device)
    if weights.dim() != a.dim() + 1 or weights.shape[:-1] != a.shape:
        raise ValueError(
            f"expected weights (..., T, S) and alignment (..., T) with matching T, got "
            f"{tuple(weights.shape)} and {tuple(a.shape)}"
        )
    valid = a >= 0
    if not valid.any():
        raise ValueError("the alignment has no gold positions (all -1)")
    hits = (weights.argmax(dim=-1) == a) & valid
    return (hits.sum() / valid.sum()).item()
