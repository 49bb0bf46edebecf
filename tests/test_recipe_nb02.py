"""Notebook 02's additions: train short / test long data, the dot-product score, Bahdanau's
bidirectional encoder, and the breakdown of alignment misses."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from course_utils.data.tasks import TranslationTask
from course_utils.lessons.nb01_rnn_bottleneck import recipe as nb01
from course_utils.lessons.nb02_additive_attention import recipe as nb02


@pytest.fixture(scope="module")
def small():
    r = nb01.Recipe(
        n_train=200,
        n_test=40,
        min_len=3,
        max_len=11,
        buckets=((3, 5), (6, 8), (9, 11)),
        emb_dim=8,
        hidden_dim=12,
        steps=3,
        batch_size=16,
        lr=1e-2,
        warmup=1,
        hidden_sizes=(12,),
        profile="ci",
    )
    return r, nb02.make_data(r)


def test_training_sentences_are_shorter_than_the_longest_test_sentences(small):
    r, data = small
    assert int(data.train.src_lengths.max()) <= nb02.train_max_len(r) < r.max_len
    assert int(data.test.src_lengths.max()) == r.max_len
    train = {tuple(e.src) for e in data.train_examples}
    assert not train & {tuple(e.src) for e in data.test_examples}


def test_buckets_split_at_the_longest_training_sentence(small):
    r, _ = small
    assert nb02.seen_and_unseen(r) == (["3-5", "6-8"], ["9-11"])
    with pytest.raises(ValueError, match="both seen and unseen"):
        nb02.seen_and_unseen(nb01.Recipe(**{**r.__dict__, "buckets": ((3, 6), (7, 11))}))


def test_dot_product_attention_is_scaled_dot_product_attention_of_the_projections():
    torch.manual_seed(0)
    att = nb02.DotProductAttention(5, 7, 4).double()
    s, h = torch.randn(3, 5).double(), torch.randn(3, 6, 7).double()
    values = torch.randn(3, 6, 2).double()
    mask = torch.arange(6)[None, :] < torch.tensor([[6], [2], [4]])
    context, weights = att(s, h, values, mask=mask)
    q, k = att.W_query(s)[:, None, :], att.W_key(h)  # (B, 1, A), (B, S, A)
    ref = F.scaled_dot_product_attention(q, k, values, attn_mask=mask[:, None, :])[:, 0]
    torch.testing.assert_close(context, ref)
    assert torch.all(weights[~mask] == 0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, dtype=torch.float64))


def test_the_bidirectional_encoder_reads_each_sentence_both_ways_and_ignores_padding(small):
    r, data = small
    model = nb02.build_model(data, r, attention=True, bidirectional=True).double()
    batch = data.test[torch.arange(5)]
    enc, c = model.encode(batch.src, batch.src_lengths)
    H = model.hidden_dim
    assert enc.shape == (*batch.src.shape, H) and c.shape == (5, H)
    for i in range(5):
        n = int(batch.src_lengths[i])
        alone, h_n = model.encoder(model.src_embed(batch.src[i : i + 1, :n]))  # no padding
        torch.testing.assert_close(enc[i, :n], alone[0])
        assert torch.all(enc[i, n:] == 0)
        torch.testing.assert_close(c[i], torch.cat([h_n[0, 0], h_n[1, 0]]))
        # forward half of c = state after the last word; backward half = after the first word
        torch.testing.assert_close(c[i, : H // 2], alone[0, n - 1, : H // 2])
        torch.testing.assert_close(c[i, H // 2 :], alone[0, 0, H // 2 :])


@pytest.mark.parametrize(
    "kw", [dict(score="dot"), dict(bidirectional=True), dict(score="dot", bidirectional=True)]
)
def test_the_fast_teacher_forced_forward_equals_the_models_own(small, kw):
    r, data = small
    model = nb02.build_model(data, r, attention=True, **kw).double()
    b = data.train[torch.arange(8)]
    logits, weights = model(b.src, b.src_lengths, b.tgt_in)
    fast, fast_w = nb02.teacher_forced_logits(
        model, b.src, b.src_lengths, b.tgt_in, return_attention=True
    )
    torch.testing.assert_close(fast, logits)
    torch.testing.assert_close(fast_w, weights)


def test_variants_keep_the_seeded_weights_of_the_parts_they_share(small):
    r, data = small
    base = nb02.build_model(data, r, attention=True)
    dot = nb02.build_model(data, r, attention=True, score="dot")
    bi = nb02.build_model(data, r, attention=True, bidirectional=True)
    assert isinstance(dot.attention, nb02.DotProductAttention)
    assert isinstance(bi, nb02.BidirectionalSeq2SeqRNN)
    torch.testing.assert_close(dot.decoder_cell.weight_ih, base.decoder_cell.weight_ih)
    torch.testing.assert_close(bi.attention.v, base.attention.v)
    torch.testing.assert_close(bi.out.weight, base.out.weight)


def test_bad_variants_are_refused(small):
    r, data = small
    with pytest.raises(ValueError, match="'additive' or 'dot'"):
        nb02.build_model(data, r, attention=True, score="cosine")
    with pytest.raises(ValueError, match="needs attention=True"):
        nb02.build_model(data, r, attention=False, score="dot")
    with pytest.raises(ValueError, match="even hidden_dim"):
        nb02.build_model(data, r, attention=True, bidirectional=True, hidden_dim=7)


def test_misses_are_classified_by_where_the_strongest_weight_goes():
    task = TranslationTask()
    ex = task.example("the european economic area saw my red car and the cat saw john")
    # target: la zone économique européenne a vu ma voiture rouge et le chat a vu jean
    assert ex.tgt[0] == "la" and "et" in ex.tgt
    strongest = torch.tensor([list(ex.alignment)])
    assert nb02.count_misses([ex], strongest).misses == 0
    strongest[0, 0] = 3  # "la" looks at "area", its noun
    et = ex.tgt.index("et")
    strongest[0, et] = ex.alignment[et] + 1  # "et" looks at the next clause
    vu = ex.tgt.index("vu")
    strongest[0, vu] = 0  # "vu" looks at "the": neither kind
    m = nb02.count_misses([ex], strongest)
    assert (m.words, m.misses, m.article_to_noun, m.et_ahead, m.other) == (len(ex.tgt), 3, 1, 1, 1)
    assert m.share("article_to_noun") == pytest.approx(1 / 3)
    assert m.accuracy == pytest.approx(1 - 3 / len(ex.tgt))
    strongest[0, 0] = 1  # an adjective of its phrase, not the noun: "other"
    assert nb02.count_misses([ex], strongest).article_to_noun == 0


def test_miss_breakdown_of_a_model_adds_up(small):
    r, data = small
    model = nb02.build_model(data, r, attention=True)
    m = nb02.miss_breakdown(model, data)
    assert m.words == sum(len(e.tgt) for e in data.test_examples)
    assert m.article_to_noun + m.et_ahead + m.other == m.misses <= m.words
    with pytest.raises(ValueError, match="with attention"):
        nb02.miss_breakdown(nb02.build_model(data, r, attention=False), data)


def test_early_stops_counts_wrong_outputs_that_end_before_the_reference():
    from types import SimpleNamespace

    from course_utils.data.tasks import EOS, PAD, Seq2SeqData

    target = torch.tensor([[5, 6, 7, EOS], [5, 6, 7, EOS], [5, 6, EOS, PAD], [5, 6, 7, EOS]])
    pred = torch.tensor(
        [
            [5, 6, EOS, PAD, PAD],  # wrong, too short
            [5, 6, 7, 8, EOS],  # wrong, too long
            [5, 6, EOS, PAD, PAD],  # right
            [5, 9, 7, EOS, PAD],  # wrong, right length
        ]
    )
    n = len(target)
    split = Seq2SeqData(
        src=torch.ones(n, 3, dtype=torch.long),
        src_lengths=torch.tensor([3, 3, 3, 9]),
        tgt_in=target,
        tgt_out=target,
        tgt_lengths=(target != PAD).sum(1),
        alignment=torch.zeros_like(target),
    )
    report = SimpleNamespace(predictions=pred)
    assert nb02.early_stops(report, split, (3, 5)) == pytest.approx(1 / 2)
    assert nb02.early_stops(report, split, (9, 9)) == 0.0
    assert torch.isnan(torch.tensor(nb02.early_stops(report, split, (6, 8))))


def test_attention_parameters_are_the_additive_modules_weights(small):
    r, data = small
    model = nb02.build_model(data, r, attention=True)
    W_q, W_k, v = nb02.attention_parameters(model)
    assert W_q is model.attention.W_query.weight and W_k is model.attention.W_key.weight
    assert v is model.attention.v
    with pytest.raises(ValueError, match="additive attention"):
        nb02.attention_parameters(nb02.build_model(data, r, attention=True, score="dot"))
