"""Span masking (SpanBERT): the span-length law, whole words, the masking rate, 80/10/10 per span, and the
masking_strategy field through the data plan, the offline tool and the online (tf.data) masking."""

import numpy as np
import pytest
from scipy import stats

from bert_jax.errors import UserError
from bert_jax.input_pipeline import data_plan, masking

from configs import pretrain as pretrain_config
from pretrain_data import pretrain_data

MASK = 4
SPECIALS = (0, 1, 2, 3, 4)     # [PAD] [UNK] [CLS] [SEP] [MASK]
VOCAB = 1000


def _masker(**kw):
  return masking.Masker(masking.MaskingConfig(vocab_size=VOCAB, mask_id=MASK, special_ids=SPECIALS, **kw))


def _rows(n, length, seed=0):
  rng = np.random.default_rng(seed)
  ids = rng.integers(len(SPECIALS), VOCAB, (n, length)).astype(np.int32)
  ids[:, 0], ids[:, -1] = 2, 3
  return ids, np.ones_like(ids)


def _chi2_pvalue(lengths, probs):
  observed = np.bincount(lengths, minlength=probs.size + 1)[1:]
  assert observed.sum() == lengths.size          # no length outside 1..max
  return stats.chisquare(observed, probs * lengths.size).pvalue


def _realised_lengths(span_id, word_start):
  """{(row, span): length in words} from the per-token span ids and a word-start mask."""
  rows, cols = np.nonzero((span_id >= 0) & word_start)
  keys = rows.astype(np.int64) * 10_000 + span_id[rows, cols]
  uniq, counts = np.unique(keys, return_counts=True)
  return dict(zip(uniq.tolist(), counts.tolist()))


@pytest.mark.parametrize("geo_p,max_length,rows", [(0.2, 10, 1500), (0.5, 4, 600)])
def test_span_lengths_follow_the_truncated_geometric_law(geo_p, max_length, rows):
  ids, mask = _rows(rows, 256)   # ~10,000 spans each
  m = _masker(strategy="span", span_geo_p=geo_p, span_max_length=max_length, max_predictions_per_seq=64)
  selected, span_id, drawn = m.select_spans(ids, mask, np.random.default_rng(1))
  lengths = drawn[drawn > 0]
  assert lengths.size > 8_000
  law = masking.span_length_probs(geo_p, max_length)
  assert _chi2_pvalue(lengths, law) > 1e-3
  # The same sample rejects near-miss laws: the untruncated geometric, a 10% larger p, the uniform.
  clipped = geo_p * (1 - geo_p) ** np.arange(max_length)     # untruncated, lengths > max counted as max
  clipped[-1] = (1 - geo_p) ** (max_length - 1)
  wrong = [masking.span_length_probs(geo_p * 1.1, max_length), clipped, np.full(max_length, 1.0 / max_length)]
  for probs in wrong:
    assert _chi2_pvalue(lengths, probs) < 1e-6
  # What is masked is what was drawn: with one-token words every span but a row's last has its drawn length
  # (no overlap, no clipping at the sequence end); the last one stops at the number to predict.
  realised = _realised_lengths(span_id, np.ones_like(selected))
  n_spans = (drawn > 0).sum(axis=1)
  for key, n in realised.items():
    row, span = divmod(key, 10_000)
    if span < n_spans[row] - 1:
      assert n == drawn[row, span], (row, span)
    else:
      assert 1 <= n <= drawn[row, span]
  assert np.array_equal(selected, span_id >= 0)


def _first_cut(realised, drawn):
  """[B]: the index of each row's first span shorter than drawn (the budget cut it), or its span count."""
  n_spans = (drawn > 0).sum(axis=1)
  first = n_spans.copy()
  for key, n in realised.items():
    row, span = divmod(key, 10_000)
    if n < drawn[row, span]:
      first[row] = min(first[row], span)
  return first, n_spans


def test_span_masking_takes_whole_words_and_counts_spans_in_words():
  ids, mask = _rows(600, 128, seed=3)
  rng = np.random.default_rng(4)
  cont = rng.random(ids.shape) < 0.4           # ~1.7 tokens per word
  cont[:, 0] = cont[:, 1] = False
  m = _masker(strategy="span", max_predictions_per_seq=40, masked_lm_prob=0.2)
  selected, span_id, drawn = m.select_spans(ids, mask, rng, cont)
  cand = np.ones_like(selected)
  cand[:, 0] = cand[:, -1] = False
  word_start = cand & ~(cont & np.roll(cand, 1, axis=1))
  word = np.cumsum(word_start, axis=1)
  for r in range(0, 600, 7):                   # every word wholly in or out, one span id per word
    for w in np.unique(word[r][cand[r]]):
      in_word = cand[r] & (word[r] == w)
      assert len(set(span_id[r][in_word].tolist())) == 1
  realised = _realised_lengths(span_id, word_start)   # in words
  first_cut, n_spans = _first_cut(realised, drawn)
  inner = {key: n for key, n in realised.items() if key % 10_000 < first_cut[key // 10_000]}
  assert len(inner) > 1000
  assert all(n == drawn[key // 10_000, key % 10_000] for key, n in inner.items())
  # After the cut a row fills its budget with a few short spans: most spans keep their drawn length.
  assert (n_spans - first_cut).mean() < 2.0
  assert sum(n_spans) - len(inner) < 0.3 * sum(n_spans)
  # Whole words may leave a row under its budget (only when no free word fits), never over it.
  k = np.minimum(np.maximum(np.floor(cand.sum(1) * 0.2), 1), 40)
  assert np.all(selected.sum(axis=1) <= k + 1)


@pytest.mark.parametrize("tokens_per_word", [1.0, 1.7, 3.0])
def test_span_masking_of_whole_words_selects_the_number_to_predict(tokens_per_word):
  """The rate is masked_lm_prob as with token masking: a span the budget cuts (its next word would pass the
  number to predict) no longer ends the row (that selected ~14.5% instead of 15% at 1.7 tokens per word)."""
  ids, mask = _rows(4000, 128, seed=7)
  rng = np.random.default_rng(8)
  cont = rng.random(ids.shape) < 1 - 1 / tokens_per_word
  cont[:, 0] = cont[:, 1] = False
  kw = dict(max_predictions_per_seq=128, masked_lm_prob=0.15)
  span_sel, k = _masker(strategy="span", **kw).select(ids, mask, np.random.default_rng(9), cont)
  token_sel, _ = _masker(strategy="token", **kw).select(ids, mask, np.random.default_rng(9), cont)
  real = 126 * ids.shape[0]
  span_rate, token_rate = span_sel.sum() / real, token_sel.sum() / real
  assert abs(token_rate - 0.15) < 0.001
  if tokens_per_word < 2:     # short words always leave one that fits: exactly the number to predict
    assert np.array_equal(span_sel.sum(axis=1), k)
  assert abs(span_rate - token_rate) < 0.0015, (span_rate, token_rate)
  assert np.all(span_sel.sum(axis=1) <= k)


def test_span_masking_keeps_the_rate_and_80_10_10_per_span():
  ids, mask = _rows(2500, 128, seed=5)
  m = _masker(strategy="span", max_predictions_per_seq=128)
  rng = np.random.default_rng(6)
  out = m(ids, mask, rng)
  real = (mask > 0) & ~np.isin(ids, SPECIALS)
  assert abs(out["masked_lm_weights"].sum() / real.sum() - 0.15) < 0.003
  # Spans: maximal runs of masked positions that share a fate. Re-derive each span from select_spans with
  # the same seed (same draws), then classify its tokens.
  _, span_id, _ = m.select_spans(ids, mask, np.random.default_rng(6))
  w = out["masked_lm_weights"] > 0
  pos = out["masked_lm_positions"]
  rows = np.broadcast_to(np.arange(ids.shape[0])[:, None], pos.shape)
  new = out["input_ids"][rows[w], pos[w]]
  old = ids[rows[w], pos[w]]
  sid = span_id[rows[w], pos[w]]
  assert np.all(sid >= 0)
  fate = np.where(new == MASK, 0, np.where(new == old, 2, 1))
  key = rows[w].astype(np.int64) * 1000 + sid
  uniq, inverse = np.unique(key, return_inverse=True)
  per_span_min = np.full(uniq.size, 9)
  per_span_max = np.full(uniq.size, -1)
  np.minimum.at(per_span_min, inverse, fate)
  np.maximum.at(per_span_max, inverse, fate)
  mixed = per_span_min != per_span_max
  # A random replacement equal to the original (p ~ 1/995) is the only way a span can look mixed.
  assert mixed.mean() < 0.01
  shares = np.bincount(per_span_min[~mixed], minlength=3) / (~mixed).sum()
  assert abs(shares[0] - 0.8) < 0.02 and abs(shares[1] - 0.1) < 0.015 and abs(shares[2] - 0.1) < 0.015
  token_shares = np.bincount(fate, minlength=3) / fate.size
  assert abs(token_shares[0] - 0.8) < 0.02


def _config(**data):
  c = pretrain_config.get_config("size=tiny,runlocal")
  for k, v in data.items():
    c.data[k] = v
  return c


@pytest.mark.parametrize("data,expected", [
    ({}, "token"),
    ({"masking_strategy": "span"}, "span"),
    ({"do_whole_word_mask": True}, "whole_word"),
    ({"chinese_whole_word_mask": True}, "whole_word"),
    ({"chinese_whole_word_mask": True, "masking_strategy": "span"}, "span"),
])
def test_data_plan_resolves_the_masking_strategy_and_its_aliases(data, expected):
  assert data_plan.resolve_masking_strategy(_config(**data)) == expected


@pytest.mark.parametrize("data,message", [
    ({"masking_strategy": "spans"}, "config.data.masking_strategy='spans'"),
    ({"masking_strategy": "span", "do_whole_word_mask": True}, "drop do_whole_word_mask"),
    ({"masking_strategy": "span", "span_geo_p": 0.0}, "config.data.span_geo_p=0.0"),
    ({"masking_strategy": "span", "span_max_length": 0}, "config.data.span_max_length=0"),
])
def test_data_plan_rejects_a_bad_masking_strategy(data, message):
  with pytest.raises(UserError, match=message.replace("(", r"\(").replace(".", r"\.")):
    data_plan.resolve_masking_strategy(_config(**data))


_DOCS = ("the quick brown fox jumps over the lazy dog . a stitch in time saves nine .\n"
         "unbelievable things happen when nobody is watching the unwatchable .\n\n"
         "another document talks about pre-training encoders with spans of words .\n"
         "masked language models predict the missing pieces of running text .\n\n") * 12


def _vocab(tmp_path):
  words = sorted(set(_DOCS.replace("\n", " ").split()))
  toks = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words + ["un", "##believ", "##able"]
  path = tmp_path / "vocab.txt"
  path.write_text("\n".join(toks) + "\n")
  return str(path)


def _runs(weights_positions):
  """Lengths of the maximal runs of consecutive masked positions, over all rows."""
  out = []
  for pos in weights_positions:
    pos = np.sort(pos)
    if pos.size:
      breaks = np.flatnonzero(np.diff(pos) != 1)
      out += np.diff(np.r_[-1, breaks, pos.size - 1]).tolist()
  return np.asarray(out)


@pytest.mark.slow   # TensorFlow's import and two tf.data pipelines
def test_offline_tool_and_online_masking_make_spans(tmp_path):
  """create_pretraining_data --masking_strategy=span writes spans and word boundaries; the training pipeline
  re-masks the same records by spans inside tf.data (runs of masked tokens much longer than token masking's)."""
  from bert_jax.input_pipeline import create_pretraining_data as cpd
  from bert_jax.input_pipeline import pretrain_dataset, tfrecord_io
  corpus = tmp_path / "corpus.txt"
  corpus.write_text(_DOCS)
  vocab = _vocab(tmp_path)
  out = str(tmp_path / "span.tfrecord")
  assert cpd.main([f"--input_file={corpus}", f"--output_file={out}", f"--vocab_file={vocab}",
                   "--masking_strategy=span", "--max_seq_length=48", "--max_predictions_per_seq=12",
                   "--masked_lm_prob=0.25", "--dupe_factor=4", "--progress=false"]) == 0
  from bert_jax.errors import UserError
  with pytest.raises(UserError, match="--do_whole_word_mask is the old name"):   # one `error:` line from the CLI
    cpd.main([f"--input_file={corpus}", f"--output_file={out}", f"--vocab_file={vocab}",
              "--masking_strategy=span", "--do_whole_word_mask", "--progress=false"])
  ds = pretrain_dataset.make_pretraining_dataset(
      pretrain_data(out, 16, vocab, masking="static"), max_seq_length=48, max_predictions_per_seq=12,
      is_training=False, process_index=0, process_count=1)
  static = [b["masked_lm_positions"][i][b["masked_lm_weights"][i] > 0] for b in ds for i in range(16)]
  assert pretrain_dataset._has_feature(out, tfrecord_io.CONTINUATION_FEATURE)
  dyn = {}
  for strategy in ("token", "span"):
    ds = pretrain_dataset.make_pretraining_dataset(
        pretrain_data(out, 16, vocab, masking="dynamic", masked_lm_prob=0.25, masking_strategy=strategy),
        max_seq_length=48, max_predictions_per_seq=12, is_training=False, process_index=0, process_count=1)
    dyn[strategy] = [b["masked_lm_positions"][i][b["masked_lm_weights"][i] > 0] for b in ds for i in range(16)]
  mean_static, mean_span, mean_token = (_runs(x).mean() for x in (static, dyn["span"], dyn["token"]))
  # 9 maskable tokens at 25% of ~40: token masking's runs average ~1.3 tokens, spans ~2.5+.
  assert mean_static > 1.8 and mean_span > 1.8 and mean_token < 1.6, (mean_static, mean_span, mean_token)
