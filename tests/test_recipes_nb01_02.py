"""The recipes of notebooks 01 and 02: profile-dependent sizes, the fast teacher-forced forward,
length-sorted batches, training, evaluation by length and the alignment helpers."""

from __future__ import annotations

import dataclasses

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

from course_utils.data.tasks import EOS, PAD, make_translation_data  # noqa: E402
from course_utils.lessons.nb01_rnn_bottleneck import recipe as nb01  # noqa: E402
from course_utils.lessons.nb02_additive_attention import recipe as nb02  # noqa: E402
from course_utils.modeling.models import Seq2SeqRNN  # noqa: E402


@pytest.fixture(scope="module")
def data():
    return make_translation_data(240, 40, 3, 9, seed=0)


@pytest.fixture()
def tiny(monkeypatch):
    monkeypatch.setenv("COURSE_PROFILE", "ci")
    return dataclasses.replace(
        nb01.recipe(),
        emb_dim=8,
        hidden_dim=12,
        steps=30,
        batch_size=16,
        lr=1e-2,
        warmup=3,
        hidden_sizes=(6, 12),
        buckets=((3, 5), (6, 9)),
    )


# ----------------------------------------------------------------------------- recipes


@pytest.mark.parametrize("profile", ["ci", "cpu", "gpu"])
def test_recipe_buckets_cover_the_source_lengths_of_every_profile(monkeypatch, profile):
    monkeypatch.setenv("COURSE_PROFILE", profile)
    r = nb01.recipe()
    assert r.profile == profile
    assert r.buckets[0][0] == r.min_len and r.buckets[-1][1] == r.max_len
    covered = [n for lo, hi in r.buckets for n in range(lo, hi + 1)]
    assert covered == list(range(r.min_len, r.max_len + 1))
    assert r.hidden_dim in r.hidden_sizes
    assert f"{r.steps} steps" in r.budget


def test_ci_recipe_is_smaller_than_cpu_recipe(monkeypatch):
    monkeypatch.setenv("COURSE_PROFILE", "ci")
    ci = nb01.recipe()
    monkeypatch.setenv("COURSE_PROFILE", "cpu")
    cpu = nb01.recipe()
    assert ci.steps < cpu.steps and ci.n_train < cpu.n_train and ci.max_len < cpu.max_len


def test_notebook_02_uses_notebook_01s_task_and_budget(monkeypatch):
    for profile in ("ci", "cpu"):
        monkeypatch.setenv("COURSE_PROFILE", profile)
        assert nb02.recipe() == nb01.recipe()


def test_build_model_is_seeded_whatever_ran_before(data, tiny):
    torch.manual_seed(1)
    a = nb01.build_model(data, tiny, attention=True)
    torch.manual_seed(2)
    torch.rand(10)
    b = nb01.build_model(data, tiny, attention=True)
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(p, q), name
    c = nb01.build_model(data, tiny, attention=True, seed=5)
    assert not torch.equal(a.out.weight, c.out.weight)


# ----------------------------------------------------------------------------- fast forward


@pytest.mark.parametrize("attention", [False, True])
def test_teacher_forced_logits_equal_the_model_forward_and_its_gradients(data, attention):
    torch.manual_seed(0)
    model = Seq2SeqRNN(
        len(data.src_vocab), len(data.tgt_vocab), 6, 10, attention=attention, attn_dim=7
    ).double()
    batch = data.train[:12]
    expected, expected_w = model(batch.src, batch.src_lengths, batch.tgt_in)
    got, got_w = nb01.teacher_forced_logits(
        model, batch.src, batch.src_lengths, batch.tgt_in, return_attention=True
    )
    torch.testing.assert_close(got, expected)
    if attention:
        torch.testing.assert_close(got_w, expected_w)
    else:
        assert got_w is None
    params = list(model.parameters())
    g_expected = torch.autograd.grad(expected.square().sum(), params, allow_unused=True)
    g_got = torch.autograd.grad(got.square().sum(), params, allow_unused=True)
    for e, g in zip(g_expected, g_got):
        if e is None:
            assert g is None or not g.any()
        else:
            torch.testing.assert_close(g, e)


# ----------------------------------------------------------------------------- batches


def test_length_batches_visit_each_sentence_at_most_once_per_epoch(data):
    gen = torch.Generator().manual_seed(0)
    batches = nb01.length_batches(data.train, 16, gen, pool=4)
    seen = []
    for batch in batches:
        assert len(batch) == 16
        seen += [tuple(row.tolist()) for row in batch.src]
    assert len(seen) == len(batches) * 16 == 240
    assert len(set(seen)) == len(seen)  # the split has no duplicate sources


def test_length_batches_group_similar_lengths(data):
    gen = torch.Generator().manual_seed(0)
    spans = [
        int(b.tgt_lengths.max() - b.tgt_lengths.min())
        for b in nb01.length_batches(data.train, 16, gen, pool=8)
    ]
    full = int(data.train.tgt_lengths.max() - data.train.tgt_lengths.min())
    assert sum(spans) / len(spans) < full / 2


def test_length_batches_shuffle_differently_each_epoch_but_reproducibly(data):
    def epochs(seed):
        batches = nb01.length_batches(data.train, 16, torch.Generator().manual_seed(seed))
        return [[b.src[0].tolist() for b in batches] for _ in range(2)]

    first, second = epochs(0)
    assert first != second
    assert epochs(0) == [first, second]


def test_length_batches_reject_a_batch_larger_than_the_data(data):
    with pytest.raises(ValueError, match="batch_size"):
        nb01.length_batches(data.test, 1000, torch.Generator())


# ----------------------------------------------------------------------------- training


def test_train_seq2seq_lowers_the_loss_and_leaves_eval_mode(data, tiny):
    model = nb01.build_model(data, tiny, attention=False)
    history = nb01.train_seq2seq(model, data, tiny, progress=False)
    assert history.step[-1] == tiny.steps - 1
    assert history.train_loss[-1] < history.train_loss[0] - 0.3  # from ln(V) ~ 4.2
    assert not model.training


def test_train_seq2seq_accepts_a_notebook_forward(data, tiny):
    calls = []

    def forward(model, src, src_lengths, tgt_in):
        calls.append(src.shape)
        return model(src, src_lengths, tgt_in)  # a (logits, attention) pair is fine

    model = nb01.build_model(data, tiny, attention=True)
    nb01.train_seq2seq(model, data, tiny, forward_fn=forward, steps=2, progress=False)
    assert len(calls) == 2


# ----------------------------------------------------------------------------- evaluation


def _oracle(split):
    def decode(model, src, src_lengths, max_len):
        rows = [
            next(i for i in range(len(split)) if torch.equal(split.src[i, : s.shape[0]], s))
            for s in src
        ]
        return split.tgt_out[rows], None

    return decode


def test_evaluate_by_length_scores_a_perfect_decoder_100_percent(data, tiny):
    model = nb01.build_model(data, tiny, attention=False)
    report = nb01.evaluate_by_length(model, data.test, tiny.buckets, decode_fn=_oracle(data.test))
    assert set(report.exact.values()) == {1.0} and set(report.token.values()) == {1.0}
    assert report.overall_exact == 1.0 and report.gap() == 0.0
    assert sum(report.counts.values()) == len(data.test)
    assert list(report.exact) == ["3-5", "6-9"]
    assert "6-9" in report.table("oracle") and "oracle" in report.table("oracle")


def test_evaluate_by_length_scores_an_empty_output_zero(data, tiny):
    model = nb01.build_model(data, tiny, attention=False)

    def silent(model, src, src_lengths, max_len):
        return torch.full((src.shape[0], 1), EOS)

    report = nb01.evaluate_by_length(model, data.test, tiny.buckets, decode_fn=silent)
    assert report.overall_exact == 0.0
    assert report.predictions.shape == (len(data.test), data.test.tgt_out.shape[1] + 5)
    assert (report.predictions[:, 1:] == PAD).all()


def test_gap_is_shortest_minus_longest_bucket_in_points():
    report = nb01.LengthReport(
        exact={"3-5": 0.9, "6-8": 0.5, "9-11": 0.2},
        token={"3-5": 1.0, "6-8": 0.9, "9-11": 0.8},
        counts={"3-5": 1, "6-8": 1, "9-11": 1},
        overall_exact=0.5,
        overall_token=0.9,
        predictions=torch.zeros(3, 1),
    )
    assert report.gap() == pytest.approx(70.0)
    assert report.gap("token") == pytest.approx(20.0)


def test_evaluate_by_length_defaults_to_the_models_greedy_decode(data, tiny):
    model = nb01.build_model(data, tiny, attention=True)
    report = nb01.evaluate_by_length(model, data.test, tiny.buckets)
    tokens, _ = model.greedy_decode(
        data.test.src, data.test.src_lengths, data.test.tgt_out.shape[1] + 5
    )
    assert torch.equal(report.predictions[:, : tokens.shape[1]], tokens)


def test_hidden_size_sweep_reuses_a_trained_model(data, tiny):
    main = nb01.build_model(data, tiny, attention=False)
    history = nb01.train_seq2seq(main, data, dataclasses.replace(tiny, steps=2), progress=False)
    sweep = nb01.hidden_size_sweep(
        data, dataclasses.replace(tiny, steps=2), trained={12: (main, history)}, progress=False
    )
    assert list(sweep) == [6, 12]
    assert sweep[12].history is history
    assert sweep[6].parameters < sweep[12].parameters == nb01.count_parameters(main)


# ----------------------------------------------------------------------------- notebook 02


def test_greedy_translate_equals_the_models_greedy_decode(data, tiny):
    model = nb01.build_model(data, tiny, attention=True)
    batch = data.test[:8]
    tokens, weights = nb02.greedy_translate(model, batch.src, batch.src_lengths, 12)
    expected, expected_w = model.greedy_decode(batch.src, batch.src_lengths, 12)
    assert torch.equal(tokens, expected)
    torch.testing.assert_close(weights, expected_w)


def test_greedy_translate_uses_the_given_step(data, tiny):
    model = nb01.build_model(data, tiny, attention=True)
    calls = []

    def step(model, prev_token, state, enc_states, src_mask):
        calls.append(prev_token.shape)
        return model.decode_step(prev_token, state, enc_states, src_mask)

    nb02.greedy_translate(model, data.test.src[:3], data.test.src_lengths[:3], 4, step_fn=step)
    assert 1 <= len(calls) <= 4


def test_greedy_translate_needs_an_attention_model(data, tiny):
    model = nb01.build_model(data, tiny, attention=False)
    with pytest.raises(ValueError, match="attention=True"):
        nb02.greedy_translate(model, data.test.src[:2], data.test.src_lengths[:2], 4)


def test_translate_examples_keep_one_attention_row_per_output_word(data, tiny):
    model = nb01.build_model(data, tiny, attention=True)
    examples = nb02.showcase_examples(data, n=4)
    translations = nb02.translate_examples(model, data, examples)
    assert len(translations) == len(examples)
    for t, ex in zip(translations, examples):
        assert t.source == ex.src and t.reference == ex.tgt
        assert t.weights.shape == (len(t.output), len(ex.src))
        torch.testing.assert_close(t.weights.sum(-1), torch.ones(len(t.output)))
        assert t.correct == (t.output == ex.tgt + ["<eos>"])


def test_showcase_starts_with_the_lecture_sentence_then_reordered_one_to_many_sentences(data):
    examples = nb02.showcase_examples(data, n=5)
    assert " ".join(examples[0].src) == nb02.LECTURE_SENTENCE
    assert examples[0].tgt[:4] == ["la", "zone", "économique", "européenne"]
    for ex in examples:
        assert nb02.reordered(ex) and nb02.one_to_many(ex)
    assert len(examples) == 5


def test_reordered_and_one_to_many_read_the_gold_alignment(data):
    task = data.task
    assert nb02.reordered(task.example("my red car")) and not nb02.one_to_many(
        task.example("my red car")
    )
    assert nb02.one_to_many(task.example("john saw paris"))
    assert not nb02.reordered(task.example("john saw paris"))


def test_alignment_accuracy_is_a_fraction_and_needs_attention(data, tiny):
    model = nb01.build_model(data, tiny, attention=True)
    acc = nb02.alignment_accuracy(model, data.test)
    assert 0.0 <= acc <= 1.0
    with pytest.raises(ValueError, match="attention"):
        nb02.alignment_accuracy(nb01.build_model(data, tiny, attention=False), data.test)


def test_plot_alignment_labels_the_words_and_marks_the_gold_alignment(data, tiny):
    import matplotlib.pyplot as plt

    model = nb01.build_model(data, tiny, attention=True)
    t = nb02.translate_examples(model, data, nb02.showcase_examples(data, n=1))[0]
    ax = nb02.plot_alignment(t)
    assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel()
    assert [tick.get_text() for tick in ax.get_xticklabels()] == t.source
    assert [tick.get_text() for tick in ax.get_yticklabels()] == t.output
    assert len(ax.collections) == 1  # the gold-alignment circles
    plt.close(ax.figure)


# ----------------------------------------------------------------------------- notebook 01's experiments


def test_fit_trains_with_the_given_loop_and_records_a_validation_curve(data, tiny):
    from course_utils.lessons.nb01_rnn_bottleneck.exercises import train_loop

    model = nb01.build_model(data, tiny, attention=False)
    history = nb01.fit(model, data, tiny, train_loop)
    assert len(history.train_loss) == tiny.steps
    assert len(history.val_loss) == tiny.steps // tiny.eval_every == len(history.val_steps)
    assert history.val_steps[-1] == tiny.eval_every * len(history.val_loss)
    assert history.val_loss[-1] < history.val_loss[0]
    assert not model.training


def test_fit_hands_the_loop_the_schedule_of_train_seq2seq(data, tiny):
    """Same batches, optimizer and learning rates: fit + the reference loop and train_seq2seq
    end with the same weights."""
    from course_utils.lessons.nb01_rnn_bottleneck.exercises import train_loop

    a = nb01.build_model(data, tiny, attention=False)
    b = nb01.build_model(data, tiny, attention=False)
    nb01.fit(a, data, tiny, train_loop)
    nb01.train_seq2seq(b, data, tiny, progress=False)
    for (name, pa), pb in zip(a.named_parameters(), b.parameters(), strict=True):
        assert torch.allclose(pa, pb, atol=1e-5), name


def test_reverse_source_reverses_each_sentence_and_keeps_padding_at_the_end(data):
    split = data.test[:8]
    rev = nb01.reverse_source(split)
    for row in range(8):
        n = int(split.src_lengths[row])
        assert rev.src[row, :n].tolist() == split.src[row, :n].flip(0).tolist()
        assert (rev.src[row, n:] == PAD).all()
    assert torch.equal(rev.tgt_out, split.tgt_out) and torch.equal(
        rev.src_lengths, split.src_lengths
    )
    # the gold alignment follows the words: target word j still comes from the same source word
    words = split.src.gather(1, split.alignment.clamp(min=0))
    rev_words = rev.src.gather(1, rev.alignment.clamp(min=0))
    keep = split.alignment >= 0
    assert torch.equal(words[keep], rev_words[keep])
    assert torch.equal(nb01.reverse_source(rev).src, split.src)


def test_probe_reads_a_context_that_holds_the_words_and_not_one_that_does_not(data, tiny):
    """An encoder whose c is (nearly) the one-hot of the words lets the linear probe read every
    word; a constant c leaves it at the position-only baseline."""

    class Oracle(torch.nn.Module):
        hidden_dim = 9 * len(data.src_vocab)

        def encode(self, src, lengths):
            onehot = torch.nn.functional.one_hot(src, len(data.src_vocab)).float()  # (B, S, V)
            onehot = torch.nn.functional.pad(onehot, (0, 0, 0, 9 - src.shape[1]))
            return None, onehot.flatten(1)

    class Blind(Oracle):
        hidden_dim = 4

        def encode(self, src, lengths):
            return None, torch.ones(src.shape[0], 4)

    r = dataclasses.replace(tiny, min_len=3, max_len=9)
    seeing, blind = nb01.probe_context(Oracle(), data, r), nb01.probe_context(Blind(), data, r)
    # (not 100%: a few test words never occur at that position in the 240 training sentences)
    assert all(v > 0.8 for v in seeing.by_bucket.values()), seeing.by_bucket
    assert blind.by_bucket == pytest.approx(blind.baseline)
    assert all(seeing.by_bucket[k] > blind.by_bucket[k] + 0.3 for k in seeing.by_bucket)
    assert all(v < 1.0 for v in blind.by_bucket.values())
    assert set(seeing.grid) <= set(range(3, 10)) and all(
        len(v) == L for L, v in seeing.grid.items()
    )
