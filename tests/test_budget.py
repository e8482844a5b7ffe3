"""preset=budget and sequence packing: full rows with no padding, [SEP] between documents, every corpus token
kept, masking only over real tokens, the preset's fields and its ablation chain (experiments/budget_recipe.py)."""

import os
import random
import re

import numpy as np
import pytest

from bert_jax.errors import UserError
from bert_jax.input_pipeline import instances
from bert_jax.input_pipeline import masking
from bert_jax.input_pipeline import packing
from pretrain_data import pretrain_data

CLS, SEP, PAD, MASK, UNK = 2, 3, 0, 4, 1
SPECIALS = (PAD, UNK, CLS, SEP, MASK)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _unique_corpus(num_docs=40, seed=0):
  """Documents whose every token has its own id (>= 10), so a test can find each token in the rows."""
  rng = np.random.default_rng(seed)
  docs, next_id = [], 10
  for _ in range(num_docs):
    doc = []
    for _ in range(int(rng.integers(1, 6))):
      n = int(rng.integers(1, 30))
      doc.append(np.arange(next_id, next_id + n))
      next_id += n
    docs.append(doc)
  return docs


def test_packed_rows_are_full_length_with_cls_sep_and_no_padding():
  docs = [[np.array([10, 11, 12]), np.array([13, 14])], [np.array([20, 21])], [np.array([30, 31, 32, 33])]]
  corpus = instances.build_corpus(docs, max_num_tokens=10)
  packed = packing.pack_documents(corpus, 8)          # 6 body tokens per row; stream of 11 + 3 separators
  rows = packing.assemble(corpus, packed, 8, CLS, SEP, PAD)
  np.testing.assert_array_equal(rows["input_ids"], [
      [CLS, 10, 11, 12, 13, 14, SEP, SEP],            # doc 0 (two sentences, contiguous), [SEP], row's [SEP]
      [CLS, 20, 21, SEP, 30, 31, 32, SEP],            # doc 1, [SEP], doc 2 cut mid-sentence ...
      [CLS, 33, SEP, 10, 11, 12, 13, SEP]])           # ... continues; the last row wraps to the stream start
  assert (rows["input_mask"] == 1).all() and (rows["segment_ids"] == 0).all()
  assert (rows["next_sentence_labels"] == 0).all() and (rows["lengths"] == 8).all()
  stats = packing.PackStats()
  packing.pack_documents(corpus, 8, stats=stats)
  assert (stats.rows, stats.tokens, stats.document_separators, stats.wrapped_tokens) == (3, 11, 3, 4)


def test_packing_keeps_every_token_once_in_order_and_shuffles_whole_rows():
  corpus = instances.build_corpus(_unique_corpus(), max_num_tokens=61)
  order = list(range(corpus.num_documents))
  random.Random(3).shuffle(order)
  packed = packing.pack_documents(corpus, 32, document_order=order)
  rows = packing.assemble(corpus, packed, 32, CLS, SEP, PAD)
  body = rows["input_ids"][:, 1:-1].ravel()
  stream_len = corpus.tokens.size + corpus.num_documents
  body = body[:stream_len]                             # drop the wrap-around tail
  expected = []
  for d in order:
    expected += [int(t) for sent in corpus.document(d) for t in sent] + [SEP]
  np.testing.assert_array_equal(body, expected)       # document order, sentences contiguous, [SEP] between
  assert PAD not in rows["input_ids"]
  shuffled = packing.pack_documents(corpus, 32, document_order=order, rng=random.Random(0))
  assert sorted(shuffled.starts.tolist()) == packed.starts.tolist()
  assert shuffled.starts.tolist() != packed.starts.tolist()
  srows = packing.assemble(corpus, shuffled, 32, CLS, SEP, PAD)["input_ids"]
  assert sorted(map(tuple, srows)) == sorted(map(tuple, rows["input_ids"]))


def test_masking_packed_rows_selects_only_real_tokens_and_keeps_every_label():
  corpus = instances.build_corpus(_unique_corpus(num_docs=200), max_num_tokens=61)
  rows = packing.assemble(corpus, packing.pack_documents(corpus, 64), 64, CLS, SEP, PAD)
  cfg = masking.MaskingConfig(vocab_size=int(corpus.tokens.max()) + 1, mask_id=MASK, special_ids=SPECIALS,
                              masked_lm_prob=0.25, max_predictions_per_seq=16)
  out = masking.Masker(cfg)(rows["input_ids"], rows["input_mask"], np.random.default_rng(0))
  w = out["masked_lm_weights"] > 0
  pos = out["masked_lm_positions"]
  original = np.take_along_axis(rows["input_ids"], pos, axis=1)
  np.testing.assert_array_equal(out["masked_lm_ids"][w], original[w])          # no label lost or changed
  assert not np.isin(original[w], [CLS, SEP]).any()                            # never [CLS]/[SEP]
  n_real = (~np.isin(rows["input_ids"], SPECIALS)).sum(axis=1)
  # 25% of the real tokens, stochastically rounded, capped at 16: every row predicts 15 or 16 tokens here.
  k = w.sum(axis=1)
  low = np.minimum(16, np.floor(n_real * 0.25))
  assert ((k == low) | (k == np.minimum(16, low + 1))).all() and k.min() >= 14
  changed = out["input_ids"] != rows["input_ids"]
  rows_idx = np.broadcast_to(np.arange(len(pos))[:, None], pos.shape)
  allowed = np.zeros_like(changed)
  allowed[rows_idx[w], pos[w]] = True
  assert not (changed & ~allowed).any()                                        # only selected positions change


def test_packed_text_pipeline_gives_full_rows(tmp_path, tiny_vocab):
  from bert_jax.input_pipeline import pretrain_dataset
  text = tmp_path / "corpus.txt"
  text.write_text("the cat sat on the mat .\nthe dog sat .\n\na cat is a dog .\nhello world !\n\n"
                  "bert model train ##ing data .\n", encoding="utf-8")
  it = pretrain_dataset.make_pretraining_dataset(pretrain_data(str(text), 4, str(tiny_vocab), seed=0,
                                                               pack_sequences=True),
                                                 max_seq_length=12, max_predictions_per_seq=3, process_index=0,
                                                 process_count=1)
  b = next(it)
  assert b["input_ids"].shape == (4, 12)
  assert (b["input_mask"] == 1).all() and (b["next_sentence_labels"] == 0).all()
  assert (b["input_ids"][:, 0] == CLS).all() and (b["input_ids"][:, -1] == SEP).all()
  assert (b["masked_lm_weights"].sum(axis=1) >= 1).all()
  (tmp_path / "x.tfrecord").write_bytes(b"")
  with pytest.raises(UserError, match="pack_sequences"):
    pretrain_dataset.make_pretraining_dataset(pretrain_data(str(tmp_path / "x.tfrecord"), 4, str(tiny_vocab),
                                                            pack_sequences=True), 12, 3,
                                              input_format="tfrecord", process_index=0, process_count=1)


def _budget_config():
  import sys
  sys.path.insert(0, ROOT)
  from configs import pretrain as pretrain_config
  return pretrain_config.get_config("size=tiny,preset=budget")


def test_budget_preset_fields_and_warmup_follow_num_train_steps():
  c = _budget_config()
  assert tuple(c.targets) == ("mlm",) and c.data.pack_sequences
  assert c.model.layer_norm_type == "pre"
  assert c.model.hidden_dropout_prob == 0.0 and c.model.attention_probs_dropout_prob == 0.0
  assert c.optimizer.learning_rate == 1e-3 and c.optimizer.end_learning_rate == 0.0
  assert c.optimizer.schedule == "linear"
  assert c.data.max_predictions_per_seq >= round(c.data.masked_lm_prob * (c.data.max_seq_length - 2))
  c.num_train_steps = 600          # what --config.num_train_steps=600 does: the warmup follows (5%)
  assert c.warmup_steps == 30
  c.warmup_steps = 7               # and can still be set on its own
  assert c.warmup_steps == 7 and c.num_train_steps == 600


def test_every_budget_preset_line_is_commented():
  src = open(os.path.join(ROOT, "configs", "presets.py"), encoding="utf-8").read()
  block = src.split('"budget": {', 1)[1].split("\n    },", 1)[0]
  assigns = [l for l in block.split("\n") if re.match(r'\s+"[\w.]+": ', l)]
  assert len(assigns) >= 10
  # A line without its own comment must be the twin of the line above (the two dropout fields).
  uncommented = [l.strip() for l in assigns if "#" not in l]
  assert uncommented == ['"model.attention_probs_dropout_prob": 0.0,']


def test_every_preset_choice_has_a_leave_one_out_ablation_arm():
  import sys
  sys.path.insert(0, ROOT)
  from experiments import budget_recipe

  def flat(c, prefix=""):
    out = {}
    for k, v in c.items():
      out.update(flat(v, prefix + k + ".") if hasattr(v, "items") else {prefix + k: v})
    return out

  s = budget_recipe.settings(quick=False)
  budget = flat(budget_recipe.make_config("budget", "x.txt", "v.txt", s))
  default = flat(budget_recipe.make_config("defaults", "x.txt", "v.txt", s))
  assert flat(_budget_config())["model.layer_norm_type"] == budget["model.layer_norm_type"] == "pre"
  changed = {k for k, v in budget.items() if default.get(k) != v}
  # The warmup follows the step count (5%) and the prediction slots follow the masking rate.
  assert changed - {"warmup_steps", "data.max_predictions_per_seq"} == {
      "targets", "data.pack_sequences", "model.layer_norm_type", "model.hidden_dropout_prob",
      "model.attention_probs_dropout_prob", "optimizer.learning_rate", "data.masked_lm_prob"}
  varied = set()
  for key in budget_recipe.ARM_KEYS:
    if budget_recipe.arm_base(key) != "budget" or key == "budget":
      continue
    arm = flat(budget_recipe.make_config(key, "x.txt", "v.txt", s))
    diff = {k for k, v in arm.items() if budget[k] != v}
    assert diff == {f for f, _ in budget_recipe.arm_overrides(key)}, key     # the arm changes only its own rows
    varied |= diff
  assert changed - {"warmup_steps", "data.max_predictions_per_seq"} <= varied


def test_packing_with_nsp_target_is_a_user_error(tmp_path, tiny_vocab):
  from bert_jax.pretrain.plan import resolve_pretrain
  c = _budget_config()
  c.targets = ("mlm", "nsp")
  (tmp_path / "corpus.txt").write_text("the cat sat .\n\nthe dog sat .\n", encoding="utf-8")
  c.data.input_files, c.data.vocab_file = str(tmp_path / "corpus.txt"), str(tiny_vocab)
  with pytest.raises(UserError, match="pack_sequences=true makes rows without sentence pairs.*targets"):
    resolve_pretrain(c, None)
