"""course_utils.data: generated tasks, batches, metrics, the downloader, text, digits, CIFAR-10.

Nothing here touches the network: downloads use file:// URLs or a patched ``urlopen``.
"""

from __future__ import annotations

import hashlib
import io
import pickle
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch

from course_utils import doctor
from course_utils.data import cache, images, tasks, text
from course_utils.data.tasks import (
    BOS,
    EOS,
    PAD,
    ReverseTask,
    SortTask,
    TranslationTask,
    Vocab,
    accuracy_by_length,
    alignment_matrix,
    alignment_score,
    batches,
    exact_match,
    make_reverse_data,
    make_sort_data,
    make_translation_data,
    token_accuracy,
)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    """Every test gets its own empty cache folder."""
    monkeypatch.setenv(cache.ENV_VAR, str(tmp_path / "cache"))


# --------------------------------------------------------------------------------------------
# Vocab
# --------------------------------------------------------------------------------------------
def test_vocab_reserves_pad_bos_eos_and_roundtrips():
    v = Vocab(["cat", "dog", "cat"])
    assert (v.pad_id, v.bos_id, v.eos_id) == (PAD, BOS, EOS) == (0, 1, 2)
    assert v.itos[:3] == ["<pad>", "<bos>", "<eos>"] and len(v) == 5
    ids = v.encode("cat dog", add_bos=True, add_eos=True)
    assert ids == [1, 3, 4, 2]
    assert v.decode(ids + [0, 0]) == ["cat", "dog"]
    assert v.decode(torch.tensor([3, 2, 4])) == ["cat"]  # stops at EOS
    assert v.decode_text([4, 3]) == "dog cat"


def test_vocab_unknown_token_raises_unless_unk():
    with pytest.raises(ValueError, match="not in the vocabulary"):
        Vocab(["a"]).encode(["b"])
    v = Vocab(["a"], unk=True)
    assert v.encode(["b"]) == [v.unk_id] and v.unk_id == 3


# --------------------------------------------------------------------------------------------
# The translation task
# --------------------------------------------------------------------------------------------
def test_translation_flips_adjective_noun_order_like_european_economic_area():
    task = TranslationTask()
    tgt, align = task.translate("the european economic area")
    assert tgt == ["la", "zone", "économique", "européenne"]
    assert align == [0, 3, 2, 1]


def test_translation_maps_one_past_tense_word_to_two_target_words():
    tgt, align = TranslationTask().translate("john saw my red car")
    assert tgt == ["jean", "a", "vu", "ma", "voiture", "rouge"]
    assert align == [0, 1, 1, 2, 4, 3]


def test_translation_articles_and_adjectives_agree_with_the_noun_gender():
    task = TranslationTask()
    assert task.translate("the green dog")[0] == ["le", "chien", "vert"]
    assert task.translate("the green door")[0] == ["la", "porte", "verte"]


def test_translation_rejects_unknown_words_and_dangling_adjectives():
    task = TranslationTask()
    with pytest.raises(ValueError, match="not in the dictionary"):
        task.translate("the purple cat")
    with pytest.raises(ValueError, match="ends before the noun"):
        task.translate("john sees the red")


def test_translation_task_options_turn_reordering_and_one_to_many_off():
    plain = TranslationTask(reorder=False, one_to_many=False)
    assert plain.translate("the red car")[1] == [0, 1, 2]
    assert "saw" not in plain.src_vocab
    for e in plain.sample(200, 3, 15, 0):
        assert e.alignment == sorted(e.alignment) and len(set(e.alignment)) == len(e.alignment)


def test_sampled_translations_really_reorder_and_expand():
    examples = TranslationTask().sample(300, 3, 15, 0)
    reordered = sum(any(b < a for a, b in zip(e.alignment, e.alignment[1:])) for e in examples)
    expanded = sum(len(set(e.alignment)) < len(e.alignment) for e in examples)
    assert reordered > 50 and expanded > 50
    for e in examples:  # every source word is translated, every target word is aligned
        assert sorted(set(e.alignment)) == list(range(len(e.src)))
        assert len(e.tgt) == len(e.alignment) >= len(e.src)


def test_sampled_lengths_respect_min_and_max_and_cover_the_range():
    examples = TranslationTask().sample(400, 5, 11, 1)
    lengths = [len(e.src) for e in examples]
    assert min(lengths) == 5 and max(lengths) == 11
    assert set(lengths) == set(range(5, 12))


def test_every_length_from_one_upwards_can_be_generated():
    task = TranslationTask()
    for n in range(1, 30):
        assert len(task.sample(1, n, n, n)[0].src) == n


def test_sampling_is_deterministic_in_the_seed_and_generator():
    task = TranslationTask()
    a = task.sample(20, 3, 10, torch.Generator().manual_seed(5))
    b = task.sample(20, 3, 10, torch.Generator().manual_seed(5))
    c = task.sample(20, 3, 10, torch.Generator().manual_seed(6))
    assert a == b and a != c
    assert TranslationTask(seed=3).sample(5) == TranslationTask(seed=3).sample(5)


def test_bad_length_arguments_raise_clear_errors():
    with pytest.raises(ValueError, match="min_len <= max_len"):
        TranslationTask().sample(3, 5, 2)
    with pytest.raises(ValueError, match="distinct"):
        ReverseTask(vocab_size=2).sample(10, 1, 2, 0, unique=True)


def test_make_translation_data_shapes_and_teacher_forcing_layout():
    data = make_translation_data(300, 60, 3, 12, seed=0)
    tr = data.train
    n, s = tr.src.shape
    assert n == 300 and s == int(tr.src_lengths.max()) <= 12
    assert tr.tgt_in.shape == tr.tgt_out.shape == tr.alignment.shape
    assert (tr.tgt_in[:, 0] == BOS).all()
    for i in range(n):
        sl, tl = int(tr.src_lengths[i]), int(tr.tgt_lengths[i])
        assert (tr.src[i, sl:] == PAD).all() and (tr.src[i, :sl] > EOS).all()
        assert tr.tgt_out[i, tl - 1] == EOS and (tr.tgt_out[i, tl:] == PAD).all()
        assert torch.equal(tr.tgt_in[i, 1:tl], tr.tgt_out[i, : tl - 1])  # shifted by one
        assert (tr.alignment[i, tl - 1 :] == -1).all() and (tr.alignment[i, : tl - 1] < sl).all()
        ex = data.train_examples[i]
        assert data.src_vocab.decode(tr.src[i]) == ex.src
        assert data.tgt_vocab.decode(tr.tgt_out[i]) == ex.tgt


def test_train_and_test_sentences_never_overlap():
    data = make_translation_data(2000, 300, 2, 6, seed=1)
    train = {tuple(e.src) for e in data.train_examples}
    test = {tuple(e.src) for e in data.test_examples}
    assert not train & test
    assert len(train) == 2000 and len(test) == 300  # no duplicates inside a split either


def test_make_data_is_deterministic_and_seed_dependent():
    a = make_translation_data(100, 20, 3, 8, seed=4)
    b = make_translation_data(100, 20, 3, 8, seed=4)
    c = make_translation_data(100, 20, 3, 8, seed=5)
    assert torch.equal(a.train.src, b.train.src) and torch.equal(a.test.tgt_out, b.test.tgt_out)
    assert not torch.equal(a.train.src[:20, :3], c.train.src[:20, :3])


def test_test_split_can_use_longer_lengths_for_generalisation():
    data = make_translation_data(100, 40, 3, 8, seed=0, test_min_len=15, test_max_len=20)
    assert int(data.train.src_lengths.max()) <= 8
    assert int(data.test.src_lengths.min()) >= 15


def test_reverse_and_sort_targets_and_alignments():
    rev = ReverseTask(vocab_size=5).example("a b c d")
    assert rev.tgt == ["d", "c", "b", "a"] and rev.alignment == [3, 2, 1, 0]
    srt = SortTask(vocab_size=5).example("c a b a")
    assert srt.tgt == ["a", "a", "b", "c"] and srt.alignment == [1, 3, 2, 0]
    data = make_reverse_data(50, 10, 2, 6, seed=0, vocab_size=7)
    assert len(data.src_vocab) == 10 and data.src_vocab is data.tgt_vocab
    for e in data.train_examples:
        assert e.tgt == e.src[::-1]
    sdata = make_sort_data(50, 10, 2, 6, seed=0)
    for e in sdata.train_examples:
        assert [sdata.src_vocab.stoi[w] for w in e.tgt] == sorted(
            sdata.src_vocab.stoi[w] for w in e.src
        )


# --------------------------------------------------------------------------------------------
# Batches and metrics
# --------------------------------------------------------------------------------------------
def test_batches_cover_every_row_once_per_epoch_and_trim_padding():
    data = make_reverse_data(103, 10, 2, 9, seed=0).train
    it = batches(data, 10, torch.Generator().manual_seed(0))
    assert len(it) == 11
    seen = []
    for b in it:
        assert b.src.shape[1] == int(b.src_lengths.max())  # trimmed to the batch's longest
        seen += [tuple(r[:n].tolist()) for r, n in zip(b.src, b.src_lengths)]
    assert sorted(seen) == sorted(tuple(r[:n].tolist()) for r, n in zip(data.src, data.src_lengths))
    first_epoch = [b.src_lengths.tolist() for b in it]
    second_epoch = [b.src_lengths.tolist() for b in it]
    assert first_epoch != second_epoch  # a new shuffle each epoch


def test_batches_of_tensor_tuples_and_drop_last():
    x, y = torch.arange(10), torch.arange(10) * 2
    got = list(batches((x, y), 4, shuffle=False, drop_last=True))
    assert len(got) == 2 and torch.equal(got[1][0], torch.tensor([4, 5, 6, 7]))
    assert torch.equal(got[1][1], 2 * got[1][0])


def test_exact_match_and_token_accuracy_ignore_padding_and_tokens_after_eos():
    target = torch.tensor([[5, 6, EOS, PAD], [5, 6, 7, EOS]])
    pred = torch.tensor([[5, 6, EOS, 9, 9], [5, 8, 7, EOS, 3]])
    assert exact_match(pred, target).tolist() == [True, False]
    assert token_accuracy(pred, target).tolist() == pytest.approx([1.0, 0.75])
    short = torch.tensor([[5, 6], [5, 6]])  # too short: the missing EOS counts as wrong
    assert exact_match(short, target).tolist() == [False, False]


def test_accuracy_by_length_groups_by_length_and_by_buckets():
    target = torch.tensor([[5, EOS], [5, EOS], [5, EOS], [5, EOS]])
    pred = torch.tensor([[5, EOS], [6, EOS], [5, EOS], [5, EOS]])
    lengths = torch.tensor([3, 3, 7, 9])
    assert accuracy_by_length(pred, target, lengths) == {3: 0.5, 7: 1.0, 9: 1.0}
    assert accuracy_by_length(pred, target, lengths, [(1, 5), (6, 10)]) == {"1-5": 0.5, "6-10": 1.0}
    assert list(accuracy_by_length(pred, target, lengths, 2)) == ["3-6", "7-9"]
    with pytest.raises(ValueError, match="metric"):
        accuracy_by_length(pred, target, lengths, metric="bleu")


def test_alignment_matrix_and_score_compare_attention_with_gold():
    align = torch.tensor([0, 2, 1, -1])
    m = alignment_matrix(align, 3)
    assert m.shape == (4, 3) and m.sum() == 3 and m[1, 2] == 1 and m[3].sum() == 0
    assert alignment_score(m[:3] + 0.01, align[:3]) == 1.0
    weights = torch.tensor([[0.9, 0.1, 0.0], [0.1, 0.2, 0.7], [0.5, 0.3, 0.2], [0.3, 0.3, 0.4]])
    assert alignment_score(weights, align) == pytest.approx(2 / 3)
    assert alignment_matrix(torch.tensor([[0, 1], [1, -1]])).shape == (2, 2, 2)


# --------------------------------------------------------------------------------------------
# The downloader
# --------------------------------------------------------------------------------------------
def _source(tmp_path: Path, payload: bytes = b"hello course\n" * 1000) -> tuple[str, bytes]:
    src = tmp_path / "remote.bin"
    src.write_bytes(payload)
    return src.as_uri(), payload


def test_cache_dir_follows_course_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.ENV_VAR, str(tmp_path / "elsewhere"))
    assert cache.cache_dir() == tmp_path / "elsewhere"
    assert not cache.cache_dir().exists() and cache.cache_dir(create=True).is_dir()
    monkeypatch.delenv(cache.ENV_VAR)
    assert cache.cache_dir() == Path.home() / ".cache" / "course_utils"


def test_download_verifies_checksum_and_writes_the_file(tmp_path):
    url, payload = _source(tmp_path)
    dest = tmp_path / "out" / "file.bin"
    got = cache.download(
        url, dest, sha256=hashlib.sha256(payload).hexdigest(), md5=hashlib.md5(payload).hexdigest()
    )
    assert got == dest and dest.read_bytes() == payload


def test_download_checksum_mismatch_raises_and_leaves_no_partial_file(tmp_path):
    url, _ = _source(tmp_path)
    dest = tmp_path / "out" / "file.bin"
    with pytest.raises(cache.ChecksumError, match="expected 0000"):
        cache.download(url, dest, sha256="0" * 64)
    assert not dest.exists()
    assert list(dest.parent.iterdir()) == []  # no temporary file either


def test_download_cache_hit_does_not_touch_the_network(tmp_path, monkeypatch):
    url, payload = _source(tmp_path)
    dest = tmp_path / "file.bin"
    sha = hashlib.sha256(payload).hexdigest()
    cache.download(url, dest, sha256=sha)

    def no_network(*args, **kwargs):
        raise AssertionError("urlopen called on a cache hit")

    monkeypatch.setattr(cache, "urlopen", no_network)
    assert cache.download(url, dest, sha256=sha) == dest


def test_download_replaces_a_corrupted_cached_file(tmp_path):
    url, payload = _source(tmp_path)
    dest = tmp_path / "file.bin"
    dest.write_bytes(b"truncated")
    cache.download(url, dest, sha256=hashlib.sha256(payload).hexdigest())
    assert dest.read_bytes() == payload


def test_download_failure_is_a_clear_error_saying_where_to_put_the_file(tmp_path, monkeypatch):
    def offline(*args, **kwargs):
        raise OSError("network unreachable")

    monkeypatch.setattr(cache, "urlopen", offline)
    dest = tmp_path / "file.bin"
    with pytest.raises(cache.DownloadError, match=f"copy it to {dest}"):
        cache.download("https://example.invalid/file.bin", dest)
    assert not dest.exists() and list(tmp_path.iterdir()) == []


def test_describe_optional_data_reports_missing_and_present_data(tmp_path, monkeypatch):
    lines = doctor.describe_optional_data()
    assert any("tiny-shakespeare: bundled with course_utils" in line for line in lines)
    _without_the_bundled_copy(monkeypatch, tmp_path)
    lines = doctor.describe_optional_data()
    assert any("tiny-shakespeare: not found" in line for line in lines)
    assert any("CIFAR-10: not cached" in line for line in lines)
    assert not any("MISSING" in line for line in lines)  # `course doctor` treats MISSING as failure
    folder = cache.cache_dir(create=True)
    (folder / text.TINYSHAKESPEARE_FILE).write_text("First Citizen:\n")
    (folder / images.CIFAR10_FILE).write_bytes(b"x")
    lines = doctor.describe_optional_data()
    assert any(line.startswith("tiny-shakespeare: found at") for line in lines)
    assert any(line.startswith("CIFAR-10: cached at") for line in lines)


# --------------------------------------------------------------------------------------------
# Text
# --------------------------------------------------------------------------------------------
def test_tinyshakespeare_checksum_constant_matches_the_shared_copy():
    shared = Path(__file__).resolve().parents[2] / "shared" / "data" / "tinyshakespeare.txt"
    if not shared.exists():  # a fresh clone has no shared folder; the constant is still fixed
        assert len(text.TINYSHAKESPEARE_SHA256) == 64
        return
    assert cache.file_hash(shared) == text.TINYSHAKESPEARE_SHA256


def _without_the_bundled_copy(monkeypatch, tmp_path):
    """As if the package had been installed without its tiny-shakespeare.txt.xz."""
    monkeypatch.setattr(text, "BUNDLED_TINYSHAKESPEARE", tmp_path / "absent.txt.xz")
    text._bundled_text.cache_clear()
    monkeypatch.setattr(text, "_bundled_text", text._bundled_text.__wrapped__)


def test_tinyshakespeare_ships_with_the_package_and_loads_offline_by_default():
    # no cache folder, no download, no network: the bundled copy, checked by its SHA-256
    corpus = text.load_text_corpus(allow_fallback=True)
    assert corpus.name == "tinyshakespeare" and corpus.note == ""
    assert "bundled" in corpus.source and len(corpus.text) == 1_115_394
    assert corpus.text.startswith("First Citizen:")
    assert hashlib.sha256(corpus.text.encode()).hexdigest() == text.TINYSHAKESPEARE_SHA256


def test_a_damaged_bundled_copy_is_never_used(tmp_path, monkeypatch):
    import lzma

    bad = tmp_path / "tinyshakespeare.txt.xz"
    bad.write_bytes(lzma.compress(b"First Citizen:\nedited\n"))
    monkeypatch.setattr(text, "BUNDLED_TINYSHAKESPEARE", bad)
    text._bundled_text.cache_clear()
    try:
        assert text.bundled_tinyshakespeare() is None
        assert text.load_text_corpus(allow_fallback=True).name == "toy-translation"
    finally:
        text._bundled_text.cache_clear()


def test_text_explicit_path_wins_over_the_cache(tmp_path):
    folder = cache.cache_dir(create=True)
    (folder / text.TINYSHAKESPEARE_FILE).write_text("from the cache\n")
    mine = tmp_path / "mine.txt"
    mine.write_text("my own text\n")
    assert text.load_text_corpus(mine).text == "my own text\n"
    assert text.load_text_corpus().text == "from the cache\n"


def test_text_missing_explicit_path_raises_instead_of_falling_back(tmp_path):
    with pytest.raises(FileNotFoundError, match="no text file at"):
        text.load_text_corpus(tmp_path / "nope.txt", allow_fallback=True)


def test_text_missing_everywhere_raises_with_instructions(tmp_path, monkeypatch):
    _without_the_bundled_copy(monkeypatch, tmp_path)
    with pytest.raises(FileNotFoundError) as err:
        text.load_text_corpus()
    msg = str(err.value)
    assert "download=True" in msg and cache.ENV_VAR in msg and "path=" in msg


def test_text_download_fetches_into_the_cache_with_checksum(tmp_path, monkeypatch):
    _without_the_bundled_copy(monkeypatch, tmp_path)
    body = b"ROMEO:\nA toy play.\n" * 50
    src = tmp_path / "input.txt"
    src.write_bytes(body)
    monkeypatch.setattr(text, "TINYSHAKESPEARE_URL", src.as_uri())
    monkeypatch.setattr(text, "TINYSHAKESPEARE_SHA256", hashlib.sha256(body).hexdigest())
    corpus = text.load_text_corpus(download=True)
    assert corpus.text == body.decode() and corpus.name == "tinyshakespeare"
    assert (cache.cache_dir() / text.TINYSHAKESPEARE_FILE).read_bytes() == body


def test_text_fallback_corpus_is_offline_and_says_so(tmp_path, monkeypatch):
    _without_the_bundled_copy(monkeypatch, tmp_path)
    corpus = text.load_text_corpus(allow_fallback=True)
    assert corpus.name == "toy-translation" and "tiny-shakespeare was not found" in corpus.note
    assert len(corpus.text) > 100_000 and " = " in corpus.text
    assert text.fallback_corpus().text == corpus.text  # deterministic


def test_fallback_note_warns_that_a_relative_data_dir_depends_on_the_working_folder(
    monkeypatch, tmp_path
):
    _without_the_bundled_copy(monkeypatch, tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COURSE_DATA_DIR", "../shared/data")  # the classic mistake in a kernel
    corpus = text.load_text_corpus(allow_fallback=True)
    assert corpus.name == "toy-translation"
    assert "relative path" in corpus.note and str(tmp_path) in corpus.note
    assert str((tmp_path / "../shared/data").resolve()) in corpus.note


def test_char_tokenizer_roundtrip_and_unknown_character():
    tok = text.CharTokenizer.from_text("hello world")
    assert tok.vocab_size == 8 and tok.itos[0] == " "
    assert tok.decode(tok.encode("low hero")) == "low hero"
    assert tok.decode(torch.tensor(tok.encode("he"))) == "he"
    with pytest.raises(ValueError, match="'z'"):
        tok.encode("z")


def test_char_dataset_split_and_batches_are_shifted_windows():
    ds = text.CharDataset("abcdefghij" * 100)
    assert len(ds.train_data) == 900 and len(ds.val_data) == 100
    g = torch.Generator().manual_seed(0)
    x, y = ds.get_batch("train", 8, 4, g)
    assert x.shape == y.shape == (4, 8)
    assert torch.equal(x[:, 1:], y[:, :-1])
    for row in x:
        s = ds.decode(row)
        assert s in "abcdefghij" * 3
    x2, _ = ds.get_batch("train", 8, 4, torch.Generator().manual_seed(0))
    assert torch.equal(x, x2)
    with pytest.raises(ValueError, match="more than block_size"):
        text.get_batch(torch.arange(5), 8, 2)


# --------------------------------------------------------------------------------------------
# Images
# --------------------------------------------------------------------------------------------
def test_digits_split_is_stratified_scaled_and_seeded():
    a = images.load_digits_split(seed=0)
    assert a.x_train.shape[1:] == (1, 8, 8) and a.x_train.dtype == torch.float32
    assert len(a.x_train) + len(a.x_test) == 1797 and len(a.x_test) == 360
    assert 0.0 <= float(a.x_train.min()) and float(a.x_train.max()) == 1.0
    train_share = torch.bincount(a.y_train, minlength=10) / len(a.y_train)
    test_share = torch.bincount(a.y_test, minlength=10) / len(a.y_test)
    assert (train_share - test_share).abs().max() < 0.01
    b = images.load_digits_split(seed=0)
    c = images.load_digits_split(seed=1)
    assert torch.equal(a.y_test, b.y_test) and not torch.equal(a.y_test, c.y_test)


def _fake_cifar(path: Path, n_per_batch: int = 4) -> dict[str, np.ndarray]:
    """A tiny archive in the official layout: 5 training batches, a test batch, the meta file."""
    rng = np.random.default_rng(0)
    arrays = {}
    with tarfile.open(path, "w:gz") as tar:

        def add(name: str, obj: dict) -> None:
            raw = pickle.dumps(obj, protocol=2)
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))

        for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
            data = rng.integers(0, 256, (n_per_batch, 3072), dtype=np.uint8)
            labels = rng.integers(0, 10, n_per_batch).tolist()
            arrays[name] = data
            add(name, {b"batch_label": name.encode(), b"data": data, b"labels": labels})
        add("batches.meta", {b"label_names": [c.encode() for c in images.CIFAR10_CLASSES]})
    return arrays


def test_cifar_reader_reads_the_official_layout_into_uint8_tensors(tmp_path):
    arrays = _fake_cifar(tmp_path / "cifar.tar.gz")
    split = images.load_cifar10(tmp_path / "cifar.tar.gz")
    assert split.x_train.shape == (20, 3, 32, 32) and split.x_train.dtype == torch.uint8
    assert split.x_test.shape == (4, 3, 32, 32) and split.y_test.dtype == torch.long
    assert split.classes == images.CIFAR10_CLASSES
    # row-major (C, H, W): the first 1024 bytes are the red channel
    assert split.x_train[0, 0].flatten().tolist() == arrays["data_batch_1"][0, :1024].tolist()
    assert split.x_train[4, 2, 31, 31] == arrays["data_batch_2"][0, 3071]


def test_cifar_loader_uses_the_cache_and_the_md5_checked_download(tmp_path, monkeypatch):
    archive = tmp_path / "remote.tar.gz"
    _fake_cifar(archive)
    with pytest.raises(FileNotFoundError, match="download=True"):
        images.load_cifar10()
    monkeypatch.setattr(images, "CIFAR10_URL", archive.as_uri())
    monkeypatch.setattr(images, "CIFAR10_MD5", cache.file_hash(archive, "md5"))
    assert len(images.load_cifar10(download=True).x_train) == 20
    assert images.find_cifar10() == cache.cache_dir() / images.CIFAR10_FILE
    monkeypatch.setattr(cache, "urlopen", None)  # a second load reads the cache only
    assert len(images.load_cifar10().x_test) == 4


def test_cifar_reader_refuses_pickles_that_are_not_plain_arrays(tmp_path):
    path = tmp_path / "evil.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        raw = pickle.dumps({b"data": Path("x"), b"labels": []})
        info = tarfile.TarInfo("cifar-10-batches-py/data_batch_1")
        info.size = len(raw)
        tar.addfile(info, io.BytesIO(raw))
    with pytest.raises(pickle.UnpicklingError, match="refusing"):
        images.read_cifar10(path)


def test_cifar_normalize_and_augment_keep_shapes():
    x = torch.randint(0, 256, (6, 3, 32, 32), dtype=torch.uint8)
    xn = images.normalize(x)
    assert xn.dtype == torch.float32 and xn.shape == x.shape
    g = torch.Generator().manual_seed(0)
    xa = images.augment_crop_flip(xn, padding=4, generator=g)
    assert xa.shape == xn.shape
    same = images.augment_crop_flip(xn, padding=0, generator=torch.Generator().manual_seed(0))
    assert all(torch.equal(a, b) or torch.equal(a, b.flip(-1)) for a, b in zip(same, xn))


def test_data_package_exports_and_tasks_module_names():
    import course_utils.data as data

    assert data.tasks is tasks and data.PAD == 0 and callable(data.make_translation_data)


def test_fallback_note_in_the_graders_sandbox_names_the_grading_machines_folders_student_B_25(
    monkeypatch, tmp_path
):
    from course_utils.grading.sandbox import SANDBOX_ENV

    monkeypatch.setenv("HOME", "/home/student")  # what the kernel sees inside the sandbox
    monkeypatch.setenv(SANDBOX_ENV, "1")
    monkeypatch.setenv("COURSE_DATA_DIR", str(tmp_path))  # empty: no tiny-shakespeare
    _without_the_bundled_copy(monkeypatch, tmp_path)
    note = text.load_text_corpus(allow_fallback=True).note
    assert "course grade" in note and "the machine that grades" in note
    assert "/home/student" not in note
