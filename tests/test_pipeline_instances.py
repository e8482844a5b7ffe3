"""Pair creation and masking: exact structure on tiny inputs, statistics over >= 10,000 generated examples."""

import random

import numpy as np
import pytest

from bert_jax.input_pipeline import instances
from bert_jax.input_pipeline import masking

CLS, SEP, PAD, MASK, UNK = 2, 3, 0, 4, 1
SPECIALS = (PAD, UNK, CLS, SEP, MASK)


def _random_corpus(num_docs=3000, seed=0, max_sentences=12, max_len=40, unique_tokens=False):
  rng = np.random.default_rng(seed)
  docs, next_id = [], 10
  for _ in range(num_docs):
    doc = []
    for _ in range(int(rng.integers(1, max_sentences))):
      n = int(rng.integers(1, max_len))
      if unique_tokens:  # every token position has its own id: lets a test locate it in the corpus
        doc.append(np.arange(next_id, next_id + n))
        next_id += n
      else:
        doc.append(rng.integers(5, 1000, n))
    docs.append(doc)
  return docs


@pytest.fixture(scope="module")
def unique_corpus():
  return instances.build_corpus(_random_corpus(unique_tokens=True), max_num_tokens=61)


@pytest.fixture(scope="module")
def nsp_pairs(unique_corpus):
  stats = instances.PairStats()
  pairs = instances.create_pairs(unique_corpus, 64, 0.1, "nsp", dupe_factor=2, rng=random.Random(1),
                                 stats=stats)
  return pairs, stats


def test_rows_are_cls_a_sep_b_sep_with_segment_ids_and_mask():
  docs = [[np.array([10, 11, 12]), np.array([13, 14])], [np.array([20, 21]), np.array([22])]]
  corpus = instances.build_corpus(docs, max_num_tokens=13)
  pairs = instances.Pairs(a_start=np.array([0]), a_end=np.array([3]), b_start=np.array([3]),
                          b_end=np.array([5]), next_sentence_labels=np.array([0]),
                          document=np.array([0]), b_document=np.array([0]))
  rows = instances.assemble(corpus, pairs, 16, CLS, SEP, PAD)
  np.testing.assert_array_equal(rows["input_ids"][0], [CLS, 10, 11, 12, SEP, 13, 14, SEP] + [PAD] * 8)
  np.testing.assert_array_equal(rows["segment_ids"][0], [0] * 5 + [1] * 3 + [0] * 8)
  np.testing.assert_array_equal(rows["input_mask"][0], [1] * 8 + [0] * 8)
  assert rows["lengths"][0] == 8


def test_truncation_counts_follow_googles_loop():
  def google(la, lb, m):
    a, b, da, db = la, lb, 0, 0
    while a + b > m:
      if a > b:
        a, da = a - 1, da + 1
      else:
        b, db = b - 1, db + 1
    return da, db
  for la in range(1, 40):
    for lb in range(1, 40):
      assert instances._truncation_counts(la, lb, 29) == google(la, lb, 29), (la, lb)


def test_random_next_is_half_and_always_from_another_document(unique_corpus, nsp_pairs):
  pairs, stats = nsp_pairs
  n = len(pairs)
  assert n >= 10_000
  labels = pairs.next_sentence_labels
  assert abs(labels.mean() - 0.5) < 0.015, labels.mean()
  rand = labels == 1
  assert np.all(pairs.b_document[rand] != pairs.document[rand])
  assert np.all(pairs.b_document[~rand] == pairs.document[~rand])
  # Token ids are unique positions: segments are contiguous spans of their document, and an actual next
  # B starts after A in the same document (only truncated tokens in between).
  tokens = unique_corpus.tokens
  doc_of_token = np.repeat(np.arange(unique_corpus.num_documents),
                           np.diff(unique_corpus.sentence_offsets[unique_corpus.document_offsets]))
  assert np.all(doc_of_token[pairs.a_start] == pairs.document)
  assert np.all(doc_of_token[pairs.b_end - 1] == pairs.b_document)
  assert np.all(pairs.b_start[~rand] >= pairs.a_end[~rand])
  assert np.all(pairs.a_end > pairs.a_start) and np.all(pairs.b_end > pairs.b_start)
  assert np.all((pairs.a_end - pairs.a_start) + (pairs.b_end - pairs.b_start) <= 61)
  assert tokens[pairs.a_start].min() >= 10


def test_short_seq_prob_makes_shorter_targets(unique_corpus):
  long_only = instances.create_pairs(unique_corpus, 64, 0.0, "nsp", rng=random.Random(0))
  short = instances.create_pairs(unique_corpus, 64, 0.5, "nsp", rng=random.Random(0))
  mean_len = lambda p: np.mean((p.a_end - p.a_start) + (p.b_end - p.b_start))
  assert mean_len(short) < mean_len(long_only) - 5
  assert len(short) > len(long_only)


def test_sop_pairs_are_consecutive_segments_swapped_half_the_time(unique_corpus):
  pairs = instances.create_pairs(unique_corpus, 64, 0.1, "sop", dupe_factor=2, rng=random.Random(2))
  assert len(pairs) >= 10_000
  labels = pairs.next_sentence_labels
  assert abs(labels.mean() - 0.5) < 0.015
  assert np.all(pairs.b_document == pairs.document)
  assert np.all(pairs.b_start[labels == 0] >= pairs.a_end[labels == 0])   # in order
  assert np.all(pairs.a_start[labels == 1] >= pairs.b_end[labels == 1])   # swapped


def test_nsp_with_one_document_is_a_clear_error():
  corpus = instances.build_corpus([[np.array([5, 6]), np.array([7, 8])]], max_num_tokens=10)
  with pytest.raises(ValueError, match="at least 2 documents"):
    instances.create_pairs(corpus, 13, pair_mode="nsp")


def test_single_sentence_documents_and_long_sentences_are_counted():
  docs = [[np.arange(5, 25)], [np.arange(5, 8), np.arange(5, 300)], [np.array([], int)], []]
  stats = instances.CorpusStats()
  corpus = instances.build_corpus(docs, max_num_tokens=61, stats=stats)
  assert stats.single_sentence_documents == 1 and stats.long_sentences == 1
  assert stats.empty_sentences == 1 and stats.empty_documents == 2
  assert corpus.num_documents == 2
  # "split": 295 tokens -> pieces of 61, nothing lost.
  assert corpus.tokens.size == 20 + 3 + 295
  stats_t = instances.CorpusStats()
  truncated = instances.build_corpus(docs, max_num_tokens=61, long_sentence_policy="truncate",
                                     stats=stats_t)
  assert stats_t.long_sentence_tokens_dropped == 295 - 61 and truncated.tokens.size == 20 + 3 + 61
  assert any("single-sentence" in line for line in stats.summary_lines())
  pstats = instances.PairStats()
  pairs = instances.create_pairs(corpus, 64, 0.0, "nsp", dupe_factor=50, rng=random.Random(0),
                                 stats=pstats)
  assert pstats.single_sentence_chunks_split > 0 and len(pairs) > 0


# ---------------------------------------------------------------------------------------------------------
# Masking.
# ---------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def rows():
  corpus = instances.build_corpus(_random_corpus(seed=3), max_num_tokens=125)
  pairs = instances.create_pairs(corpus, 128, 0.1, "nsp", dupe_factor=2, rng=random.Random(3))
  return instances.assemble(corpus, pairs, 128, CLS, SEP, PAD)


def _masker(**kw):
  return masking.Masker(masking.MaskingConfig(vocab_size=1000, mask_id=MASK, special_ids=SPECIALS, **kw))


def test_selection_rate_and_80_10_10_over_10k_examples(rows):
  ids, mask = rows["input_ids"], rows["input_mask"]
  assert ids.shape[0] >= 10_000
  rng = np.random.default_rng(0)
  # Before the cap: a cap above any possible count.
  out = _masker(max_predictions_per_seq=128)(ids, mask, rng)
  real = (mask > 0) & ~np.isin(ids, SPECIALS)
  rate = out["masked_lm_weights"].sum() / real.sum()
  assert abs(rate - 0.15) < 0.005, rate
  # With Google's cap of 20 per sequence.
  capped = _masker(max_predictions_per_seq=10)(ids, mask, rng)
  assert capped["masked_lm_weights"].sum(axis=1).max() == 10
  out = _masker(max_predictions_per_seq=20)(ids, mask, rng)
  w = out["masked_lm_weights"] > 0
  pos, labels = out["masked_lm_positions"], out["masked_lm_ids"]
  rows_idx = np.broadcast_to(np.arange(ids.shape[0])[:, None], pos.shape)
  assert np.array_equal(labels[w], ids[rows_idx[w], pos[w]])             # labels are the original ids
  assert not np.isin(labels[w], SPECIALS).any()                          # never a special token
  assert np.all(mask[rows_idx[w], pos[w]] == 1)                          # never padding
  new = out["input_ids"][rows_idx[w], pos[w]]
  frac_mask = np.mean(new == MASK)
  frac_same = np.mean(new == labels[w])
  frac_random = 1 - frac_mask - frac_same
  # (A random draw equal to the original counts as "unchanged": 1 in ~995, far below the tolerance.)
  assert abs(frac_mask - 0.8) < 0.01 and abs(frac_same - 0.1) < 0.01 and abs(frac_random - 0.1) < 0.01, (
      frac_mask, frac_same, frac_random)
  assert not np.isin(new[(new != MASK) & (new != labels[w])], SPECIALS).any()
  # Only selected positions change; positions are sorted and padding entries are zeros.
  changed = out["input_ids"] != ids
  assert np.all(changed.sum(axis=1) <= w.sum(axis=1))
  assert np.all(np.diff(pos, axis=1)[w[:, 1:]] > 0)
  assert np.all(pos[~w] == 0) and np.all(labels[~w] == 0)


def test_masking_is_deterministic_for_a_seed(rows):
  a = _masker()(rows["input_ids"][:500], rows["input_mask"][:500], np.random.default_rng(7))
  b = _masker()(rows["input_ids"][:500], rows["input_mask"][:500], np.random.default_rng(7))
  c = _masker()(rows["input_ids"][:500], rows["input_mask"][:500], np.random.default_rng(8))
  assert all(np.array_equal(a[k], b[k]) for k in a)
  assert not np.array_equal(a["masked_lm_positions"], c["masked_lm_positions"])


def _words_are_whole(selected, cont, mask, ids):
  """True when every word (a start token and its continuations) is entirely selected or not at all.
  Special tokens and padding are words of their own (a "##" piece right after [SEP] starts a word)."""
  b, t = selected.shape
  special = np.isin(ids, SPECIALS) | (mask == 0)
  prev_special = np.concatenate([np.ones((b, 1), bool), special[:, :-1]], axis=1)
  starts = ~cont | special | prev_special
  word = np.cumsum(starts, axis=1)
  key = (np.arange(b)[:, None] * (t + 1) + word)[mask > 0]
  sel = selected[mask > 0]
  n_sel = np.bincount(key, weights=sel, minlength=b * (t + 1))
  n_all = np.bincount(key, minlength=b * (t + 1))
  return np.all((n_sel == 0) | (n_sel == n_all))


def test_whole_word_masking_never_splits_a_word(rows):
  ids, mask = rows["input_ids"], rows["input_mask"]
  rng = np.random.default_rng(1)
  cont_table = np.zeros(1000, bool)
  cont_table[rng.choice(np.arange(5, 1000), 400, replace=False)] = True   # ~40% "##" pieces
  cont = cont_table[ids] & (mask > 0)
  out = _masker(whole_word_mask=True, max_predictions_per_seq=20)(ids, mask, rng, cont)
  w = out["masked_lm_weights"] > 0
  selected = np.zeros_like(ids, dtype=bool)
  rows_idx = np.broadcast_to(np.arange(ids.shape[0])[:, None], w.shape)
  selected[rows_idx[w], out["masked_lm_positions"][w]] = True
  assert _words_are_whole(selected, cont, mask, ids)
  assert w.sum(axis=1).max() <= 20
  real = (mask > 0) & ~np.isin(ids, SPECIALS)
  assert 0.13 < w.sum() / real.sum() < 0.152       # greedy whole words fill close to 15%
  # Without whole-word masking the same flags are split often.
  plain = _masker(max_predictions_per_seq=20)(ids, mask, rng)
  sel2 = np.zeros_like(selected)
  w2 = plain["masked_lm_weights"] > 0
  sel2[rows_idx[w2], plain["masked_lm_positions"][w2]] = True
  assert not _words_are_whole(sel2, cont, mask, ids)


def test_jieba_whole_word_masking_keeps_chinese_words_whole(tmp_path):
  jieba = pytest.importorskip("jieba")
  from bert_jax.input_pipeline import shard_builder  # pylint: disable=g-import-not-at-top
  from data import sample_corpora  # pylint: disable=g-import-not-at-top
  from bert_jax.input_pipeline import tokenization  # pylint: disable=g-import-not-at-top
  chars = sorted({c for s in sample_corpora.chinese_review_sentences("neg", 400) for c in s
                  if tokenization.is_chinese_char(ord(c))})
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars) + "\n", encoding="utf-8")
  tok = tokenization.FullTokenizer(str(vocab))
  docs = [[s] for s in sample_corpora.chinese_review_sentences("neg", 400)]
  ids, conts, _ = shard_builder.tokenize_documents(docs, tok, shard_builder.Config(chinese_wwm=True))
  # Flags follow jieba: within a jieba word of CJK characters, all but the first are continuations.
  jieba.setLogLevel(60)
  for doc, doc_cont, doc_ids in list(zip(docs, conts, ids))[:50]:
    words = [w for w in jieba.lcut(doc[0]) if all(tokenization.is_chinese_char(ord(c)) for c in w)]
    flags = "".join("c" if c else "s" for c in doc_cont[0])
    for w in words:
      if len(w) > 1:
        assert "s" + "c" * (len(w) - 1) in flags
  corpus = instances.build_corpus(ids, 61, continuation=conts)
  pairs = instances.create_pairs(corpus, 64, 0.1, "nsp", dupe_factor=30, rng=random.Random(0))
  rows = instances.assemble(corpus, pairs, 64, tok.vocab["[CLS]"], tok.vocab["[SEP]"], 0)
  assert len(pairs) >= 10_000
  m = masking.Masker(masking.MaskingConfig.from_vocab(tok.vocab, max_predictions_per_seq=10,
                                                      whole_word_mask=True))
  out = m(rows["input_ids"], rows["input_mask"], np.random.default_rng(0), rows["continuation"])
  w = out["masked_lm_weights"] > 0
  selected = np.zeros_like(rows["input_ids"], dtype=bool)
  r = np.broadcast_to(np.arange(len(pairs))[:, None], w.shape)
  selected[r[w], out["masked_lm_positions"][w]] = True
  assert rows["continuation"].mean() > 0.2          # many multi-character words
  assert _words_are_whole(selected, rows["continuation"], rows["input_mask"], rows["input_ids"])


def test_unmask_restores_the_original_ids(rows):
  out = _masker()(rows["input_ids"][:100], rows["input_mask"][:100], np.random.default_rng(0))
  restored = masking.unmask(out["input_ids"], out["masked_lm_positions"], out["masked_lm_ids"],
                            out["masked_lm_weights"])
  np.testing.assert_array_equal(restored, rows["input_ids"][:100])
