"""data.packing=documents: whole documents packed best-fit into rows, each its own [CLS] ... [SEP] block with
its own example id (so its own attention block and positions); the plan packs the model and refuses pairs."""

import jax
import numpy as np
import pytest

from bert_jax.errors import UserError
from bert_jax.input_pipeline import instances, packing
from bert_jax.models import BertConfig, BertForPreTraining
from bert_jax.models.objectives.mlm import MaskedLM
from pretrain_data import pretrain_data

from test_budget import CLS, SEP, _budget_config, _unique_corpus


def test_documents_are_packed_whole_each_in_its_own_block_and_every_token_kept_once():
  docs = _unique_corpus(num_docs=30)
  corpus = instances.build_corpus(docs, max_num_tokens=1000)
  rows = packing.pack_whole_documents(corpus, 64, 4, CLS, SEP)
  ids, mask = rows.input_ids, rows.input_mask
  assert ids.shape[1] == 64 and mask.max() <= 4
  seen = []
  for r in range(len(rows)):
    for k in range(1, mask[r].max() + 1):
      where = np.flatnonzero(mask[r] == k)
      assert where.size and np.all(np.diff(where) == 1)                 # contiguous block
      block = ids[r, where]
      assert block[0] == CLS and block[-1] == SEP
      seen.append(block[1:-1])
  tokens = np.concatenate(seen)
  np.testing.assert_array_equal(np.sort(tokens), np.sort(corpus.tokens))  # every token exactly once
  # pieces of one document stay in document order within the piece, and no piece mixes two documents
  assert all(np.all(np.diff(p) == 1) for p in seen)
  assert (mask > 0).mean() > 0.8                                          # rows come out nearly full


def test_a_document_longer_than_a_row_is_cut_into_row_sized_pieces():
  corpus = instances.build_corpus([[np.arange(10, 40)]], max_num_tokens=100)
  rows = packing.pack_whole_documents(corpus, 12, 8, CLS, SEP)
  out = packing.assemble_documents(corpus, rows, 12, CLS, SEP)
  assert int(out["input_mask"].max(axis=1).sum()) == 3            # 30 tokens, 10 per piece: 3 examples
  pieces = [ids[m > 0] for ids, m in zip(out["input_ids"], out["input_mask"])]
  assert sum((p != CLS).sum() - (p == SEP).sum() for p in pieces) == 30


def test_document_rows_through_the_reader_are_masked_only_at_real_tokens(tmp_path, tiny_vocab):
  from bert_jax.input_pipeline import pretrain_dataset
  text = tmp_path / "corpus.txt"
  text.write_text("the cat sat on the mat .\nthe dog sat .\n\na cat is a dog .\nhello world !\n\n"
                  "bert model train ##ing data .\n\nthe mat .\n", encoding="utf-8")
  it = pretrain_dataset.make_pretraining_dataset(
      pretrain_data(str(text), 2, str(tiny_vocab), seed=0, packing="documents", max_examples_per_row=4),
      max_seq_length=24, max_predictions_per_seq=3, process_index=0, process_count=1)
  b = next(it)
  assert b["input_ids"].shape == (2, 24) and b["input_mask"].max() >= 2      # several documents in a row
  w = b["masked_lm_weights"] > 0
  pos = b["masked_lm_positions"][w]
  rows = np.nonzero(w)[0]
  assert (b["input_mask"][rows, pos] > 0).all()


def test_the_plan_packs_the_model_for_documents_and_refuses_pairs_and_a_zero_cap(tmp_path, tiny_vocab):
  from bert_jax.pretrain.plan import resolve_pretrain
  c = _budget_config()
  c.data.pack_sequences = False
  c.data.packing, c.data.max_examples_per_row = "documents", 4
  (tmp_path / "corpus.txt").write_text("the cat sat .\n\nthe dog sat .\n", encoding="utf-8")
  c.data.input_files, c.data.vocab_file = str(tmp_path / "corpus.txt"), str(tiny_vocab)
  plan = resolve_pretrain(c, None)
  assert plan.model.max_examples_per_row == 4 and plan.data.packing == "documents"
  assert "max_examples_per_row" not in plan.model.to_dict()      # never saved with the model
  c.targets = ("mlm", "nsp")
  with pytest.raises(UserError, match="data.packing=documents makes rows without sentence pairs"):
    resolve_pretrain(c, None)
  c.targets, c.data.max_examples_per_row = ("mlm",), 0
  with pytest.raises(UserError, match="max_examples_per_row=0; expected an integer >= 1"):
    resolve_pretrain(c, None)
  c.data.max_examples_per_row, c.data.packing = 4, "rows"
  with pytest.raises(UserError, match="data.packing='rows'; expected one of pairs, stream, documents"):
    resolve_pretrain(c, None)


def test_masked_lm_logits_of_a_packed_row_equal_each_document_alone():
  cfg = BertConfig(vocab_size=40, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                   intermediate_size=64, max_position_embeddings=32)
  rng = np.random.default_rng(0)
  a, b = rng.integers(5, 40, 7), rng.integers(5, 40, 9)
  alone = np.zeros((2, 16), np.int32)
  alone[0, :7], alone[1, :9] = a, b
  amask = (alone > 0).astype(np.int32)
  row = np.zeros((1, 16), np.int32)
  row[0, :7], row[0, 7:16] = a, b
  rmask = np.array([[1] * 7 + [2] * 9], np.int32)
  model = BertForPreTraining(cfg, targets=(MaskedLM(),))
  pos_alone = np.array([[1, 3], [2, 8]], np.int32)
  params = jax.jit(model.init)(jax.random.key(0), alone, amask, np.zeros_like(alone), pos_alone)
  want = jax.jit(model.apply)(params, alone, amask, np.zeros_like(alone), pos_alone)["mlm_logits"]
  packed = BertForPreTraining(cfg.replace(max_examples_per_row=2), targets=(MaskedLM(),))
  got = jax.jit(packed.apply)(params, row, rmask, np.zeros_like(row),
                              np.array([[1, 3, 9, 15]], np.int32))["mlm_logits"]
  np.testing.assert_allclose(np.asarray(got)[0], np.asarray(want).reshape(4, -1), atol=1e-5)
