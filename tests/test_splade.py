"""pooling=splade (task=embedding, predict features, export sentence-transformers): the masked-LM head at every
token, max over the real tokens of log(1 + relu(logits)), a vocabulary-sized vector. Checked against
sentence-transformers' SpladePooling on the same logits, through fine-tuning from a checkpoint with an MLM head
(loaded, whatever load_head says), and refused in one line where there is no pre-trained MLM head."""

import json
import os

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import task_fixtures as testing
from bert_jax.errors import UserError
from bert_jax.models import BertConfig
from bert_jax.models.heads import splade_pool
from bert_jax.models.objectives.mlm import MaskedLM
from bert_jax.models.pretraining import BertForPreTraining
from bert_jax.pretrained import params_dir

from test_finetune_tasks import make_config
from test_tasks_embedding import TOPICS, pair_data  # noqa: F401  (the fixture)


@pytest.mark.slow     # importing sentence-transformers (torch) costs seconds
def test_splade_pool_is_sentence_transformers_max_of_log1p_relu_over_the_real_tokens():
  torch = pytest.importorskip("torch")
  pooling = pytest.importorskip("sentence_transformers.sparse_encoder.modules").SpladePooling("max", "relu")
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(3, 6, 11)).astype(np.float32) * 3
  mask = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [1, 1, 0, 0, 0, 0]], np.int32)
  got = np.asarray(splade_pool(jnp.asarray(logits), jnp.asarray(mask)))
  want = pooling({"token_embeddings": torch.tensor(logits), "attention_mask": torch.tensor(mask)})["sentence_embedding"]
  np.testing.assert_allclose(got, want.to_dense().numpy() if want.is_sparse else want.numpy(), atol=1e-6)
  # a padded token's logits do not count: making them huge changes nothing
  logits[1, 4] = 100.0
  np.testing.assert_allclose(np.asarray(splade_pool(jnp.asarray(logits), jnp.asarray(mask))), got, atol=0)
  assert got.min() >= 0 and got.shape == (3, 11)


def _mlm_checkpoint(directory, vocab, with_mlm=True):
  """A tiny BERT params dir with (or without) its pre-training MLM head, random weights."""
  words = open(vocab, encoding="utf-8").read().split()
  cfg = BertConfig(vocab_size=len(words), hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                   intermediate_size=128, max_position_embeddings=64, dtype="float32")
  ids = jnp.ones((1, 8), jnp.int32)
  params = flax.linen.unbox(BertForPreTraining(cfg, targets=(MaskedLM(),)).init(
      jax.random.key(0), ids, ids, jnp.zeros_like(ids), jnp.zeros((1, 2), jnp.int32))["params"])
  params = jax.tree.map(np.asarray, params)
  if not with_mlm:
    params = {"bert": params["bert"]}
  return params_dir.save_params_dir(directory, cfg, params, vocab)


@pytest.mark.slow
def test_features_with_splade_pooling_read_the_mlm_head_and_a_bare_encoder_is_one_error(tmp_path):
  from bert_jax.predict import FeatureExtractor
  vocab = testing.write_vocab(str(tmp_path / "vocab"), extra=TOPICS)
  ckpt = _mlm_checkpoint(str(tmp_path / "mlm"), vocab)
  fx = FeatureExtractor(ckpt, pooling="splade", normalize=False, batch_size=4)
  v = fx.encode(["the cat is here", "a dog", "the cat is here and a dog was seen"])
  assert v.shape == (3, fx.pre.config.vocab_size) and v.min() >= 0
  # by hand: the MLM head's logits at every token of the text alone
  cfg = fx.pre.config
  model = BertForPreTraining(cfg, targets=(MaskedLM(),))
  row = [fx.tokenizer.vocab["[CLS]"]] + fx.tokenizer.encode("a dog") + [fx.tokenizer.vocab["[SEP]"]]
  ids = jnp.asarray([row], jnp.int32)
  out = model.apply({"params": {"bert": fx.pre.params["bert"], "mlm": fx.pre.params["mlm"]}}, ids,
                    jnp.ones_like(ids), jnp.zeros_like(ids), jnp.arange(len(row))[None], deterministic=True)
  np.testing.assert_allclose(v[1], np.log1p(np.maximum(np.asarray(out["mlm_logits"][0]), 0)).max(0), atol=1e-5)
  bare = _mlm_checkpoint(str(tmp_path / "bare"), vocab, with_mlm=False)
  with pytest.raises(UserError, match=r"--pooling=splade reads the masked-LM head .* has none"):
    FeatureExtractor(bare, pooling="splade")


def test_splade_pooling_is_refused_for_a_classification_task(tmp_path):
  from bert_jax.finetune.data import make_task
  d = testing.write_classification(str(tmp_path / "cls"))
  vocab = testing.write_vocab(str(tmp_path / "vocab"))
  with pytest.raises(UserError, match=r"config.pooling='splade'; expected one of cls, first, mean, max, last "
                                      r"\(splade: task=embedding\)"):
    make_task(make_config("classification", d, vocab, pooling="splade"))


def test_fine_tuning_splade_from_a_checkpoint_without_an_mlm_head_is_refused(pair_data, tmp_path):  # noqa: F811
  from bert_jax.finetune import loop as finetune_loop
  data, vocab = pair_data
  bare = _mlm_checkpoint(str(tmp_path / "bare"), vocab, with_mlm=False)
  c = make_config("embedding", data, vocab, pooling="splade", init_checkpoint=bare, max_train_steps=1)
  with pytest.raises(ValueError, match=r"pooling=splade reads the pre-trained params\['mlm'\] .* has none"):
    finetune_loop.run(c, str(tmp_path / "run"))


@pytest.mark.slow
def test_splade_fine_tuning_loads_the_mlm_head_and_exports_a_sparse_encoder(pair_data, tmp_path):  # noqa: F811
  from bert_jax.export import export
  from bert_jax.finetune import loop as finetune_loop
  from bert_jax.finetune.predict import Predictor
  from bert_jax.predict import FeatureExtractor
  data, vocab = pair_data
  ckpt = _mlm_checkpoint(str(tmp_path / "mlm"), vocab)
  out = str(tmp_path / "run")
  c = make_config("embedding", data, vocab, pooling="splade", init_checkpoint=ckpt, num_train_epochs=2.0)
  results = finetune_loop.run(c, out)
  report = json.load(open(os.path.join(out, "init_report.json"), encoding="utf-8"))
  assert any(p.startswith("mlm/") for p in report["loaded"]), report["initialised"]
  assert not any(p.startswith("mlm/") for p in report["initialised"])
  assert 0 <= results["dev"]["recall@1"] <= results["dev"]["recall@10"] <= 1
  info = json.load(open(os.path.join(out, "best_checkpoint", "finetune_info.json"), encoding="utf-8"))
  assert info["sentence_embedding"]["pooling"] == "splade"
  texts = ["my cat", "a dog", "the river again"]
  v = FeatureExtractor(out).encode(texts)          # the recorded pipeline: splade, L2-normalised
  assert v.shape[1] == len(open(vocab, encoding="utf-8").read().split())
  np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
  rows = Predictor.from_workdir(out).predict(texts)
  np.testing.assert_allclose(np.array([r["embedding"] for r in rows]), v, atol=1e-5)
  pytest.importorskip("sentence_transformers")
  result = export("sentence-transformers", out, str(tmp_path / "st"))
  assert result["max_abs_diff"] <= 1e-5
  modules = json.load(open(tmp_path / "st" / "modules.json", encoding="utf-8"))
  assert [m["type"].rsplit(".", 1)[-1] for m in modules] == ["MLMTransformer", "SpladePooling", "Normalize"]
  from bert_jax.convert.hf import import_hf     # and back: the imported folder keeps the sparse pipeline
  import_hf(str(tmp_path / "st"), str(tmp_path / "back"))
  back = FeatureExtractor(str(tmp_path / "back"))
  assert (back.pooling, back.normalize) == ("splade", True)
  np.testing.assert_allclose(back.encode(texts), v, atol=1e-5)
  for fmt in ("onnx", "stablehlo", "savedmodel"):   # every format carries the MLM head too
    result = export(fmt, out, str(tmp_path / fmt))
    assert result["head"] == "features" and result["max_abs_diff"] <= 1e-4, fmt


# ---- inference-free sparse retrieval (embedding.query_encoder=idf) -------------------------------------------
def test_bm25_idf_is_lucenes_over_the_distinct_tokens_of_each_passage_and_zero_for_the_special_tokens():
  from bert_jax.finetune.tasks.embedding import bm25_idf
  rows = [[5, 6, 6, 2], [5, 7], [5, 8, 8, 8]]      # df: 5 -> 3, 6 -> 1, 7 -> 1, 8 -> 1, 2 -> 1 (skipped)
  idf = bm25_idf(rows, 10, skip_ids=(0, 2))
  n = 3.0
  lucene = lambda df: np.log(1 + (n - df + 0.5) / (df + 0.5))  # noqa: E731
  np.testing.assert_allclose(idf[[5, 6, 7, 8]], [lucene(3), lucene(1), lucene(1), lucene(1)], rtol=1e-6)
  np.testing.assert_allclose(idf[[1, 3, 9]], lucene(0), rtol=1e-6)    # never seen: the highest weight
  assert idf[0] == idf[2] == 0.0 and idf.dtype == np.float32
  assert idf[5] < idf[6]                                                # a token in every passage weighs least


def test_idf_query_encoder_is_the_set_of_the_query_tokens_at_their_weights_and_gets_no_gradient():
  from bert_jax.finetune.tasks.embedding import IdfQueryEncoder
  table = np.arange(8, dtype=np.float32) / 2
  enc = IdfQueryEncoder(8, lambda key, shape: jnp.asarray(table))
  ids = jnp.asarray([[2, 5, 5, 3, 0, 0], [2, 7, 3, 0, 0, 0]], jnp.int32)
  mask = jnp.asarray([[1, 1, 1, 1, 0, 0], [1, 1, 1, 0, 0, 0]], jnp.int32)
  params = enc.init(jax.random.key(0), ids, mask)["params"]
  v = np.asarray(enc.apply({"params": params}, ids, mask))
  want = np.zeros((2, 8), np.float32)
  want[0, [2, 5, 3]] = table[[2, 5, 3]]     # 5 twice counts once; the padding (id 0) not at all
  want[1, [2, 7, 3]] = table[[2, 7, 3]]
  np.testing.assert_array_equal(v, want)
  grad = jax.grad(lambda p: enc.apply({"params": p}, ids, mask).sum())(params)
  assert not np.any(np.asarray(grad["idf"]))


def test_an_inference_free_bi_encoder_gives_a_text_the_same_vector_in_a_training_row_and_alone():
  from bert_jax.finetune.tasks.embedding import BiEncoder
  cfg = BertConfig(vocab_size=16, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                   intermediate_size=64, max_position_embeddings=16, dtype="float32")
  idf = np.linspace(0.5, 2.0, 16).astype(np.float32)
  model = BiEncoder(cfg, "splade", True, query_encoder="idf", idf_init=lambda key, shape: jnp.asarray(idf))
  rng = np.random.default_rng(0)
  ids = jnp.asarray(rng.integers(5, 16, size=(3, 2, 6)), jnp.int32)      # (query, positive) rows
  mask = jnp.ones_like(ids).at[:, :, 4:].set(0)
  params = model.init(jax.random.key(0), ids[:, 0], mask[:, 0])["params"]
  np.testing.assert_array_equal(params["query_encoder"]["idf"], idf)       # the table the task computed
  pair = np.asarray(model.apply({"params": params}, ids, mask)["embeddings"])
  assert pair.shape == (3, 2, 16)
  flat_ids, flat_mask = ids.reshape(6, 1, 6), mask.reshape(6, 1, 6)
  role = jnp.asarray([0, 1] * 3, jnp.int32)
  alone = np.asarray(model.apply({"params": params}, flat_ids, flat_mask, text_role=role)["embeddings"])
  np.testing.assert_allclose(alone.reshape(3, 2, 16), pair, atol=1e-6)
  q = np.zeros(16, np.float32)                 # the first query by hand: its tokens at their IDF, unit length
  q[np.asarray(ids[0, 0, :4])] = idf[np.asarray(ids[0, 0, :4])]
  np.testing.assert_allclose(pair[0, 0], q / np.linalg.norm(q), atol=1e-6)
  passages = np.asarray(model.apply({"params": params}, flat_ids, flat_mask)["embeddings"])   # no role: passages
  np.testing.assert_allclose(passages[1::2], alone[1::2], atol=1e-6)
  assert not np.allclose(passages[0::2], alone[0::2])


def test_query_encoder_idf_needs_splade_pooling_and_a_known_value(pair_data, tmp_path):  # noqa: F811
  from bert_jax.finetune.data import make_task
  data, vocab = pair_data
  with pytest.raises(ValueError, match=r"embedding.query_encoder='idf' .* need pooling=splade, lexical or lexical_log "
                                       r"\(pooling='mean'\)"):
    make_task(make_config("embedding", data, vocab, **{"embedding.query_encoder": "idf"}))
  with pytest.raises(ValueError, match=r"embedding.query_encoder='bm25'; expected '' .* or 'idf'"):
    make_task(make_config("embedding", data, vocab, pooling="splade", **{"embedding.query_encoder": "bm25"}))


@pytest.mark.slow
def test_inference_free_fine_tuning_keeps_its_idf_and_exports_a_router(pair_data, tmp_path):  # noqa: F811
  from bert_jax.export import export
  from bert_jax.finetune import loop as finetune_loop
  from bert_jax.finetune.predict import Predictor
  from bert_jax.finetune.tasks.embedding import bm25_idf, read_corpus
  from bert_jax.input_pipeline import tokenization
  from bert_jax.predict import FeatureExtractor
  from bert_jax.predict.__main__ import main as predict_main
  data, vocab = pair_data
  ckpt = _mlm_checkpoint(str(tmp_path / "mlm"), vocab)
  out = str(tmp_path / "run")
  c = make_config("embedding", data, vocab, pooling="splade", init_checkpoint=ckpt, num_train_epochs=2.0,
                  **{"embedding.query_encoder": "idf"})
  results = finetune_loop.run(c, out)
  assert 0 <= results["dev"]["recall@1"] <= results["dev"]["recall@10"] <= 1
  report = json.load(open(os.path.join(out, "init_report.json"), encoding="utf-8"))
  assert "query_encoder/idf" in report["initialised"]
  info = json.load(open(os.path.join(out, "best_checkpoint", "finetune_info.json"), encoding="utf-8"))
  assert info["sentence_embedding"]["query_encoder"] == "idf"
  # the table: BM25 idf over the training passages (corpus.txt and the positives), unchanged by training
  tok = tokenization.load_tokenizer(vocab)
  passages = list(dict.fromkeys(read_corpus(data, "train") + [l.split("\t")[1].rstrip("\n")
                                                           for l in open(os.path.join(data, "train.tsv"))]))
  special = [tok.vocab[t] for t in ("[CLS]", "[SEP]", "[PAD]")]
  want_idf = bm25_idf([tok.encode(p) for p in passages], len(tok.vocab), special)
  fx = FeatureExtractor(out)
  np.testing.assert_array_equal(fx.query_idf, want_idf)     # not moved, not decayed
  texts = ["my cat", "a dog and a dog", "the river again"]
  q = fx.encode_queries(texts)
  by_hand = np.zeros_like(q)
  for i, t in enumerate(texts):
    ids = tok.encode(t)
    by_hand[i, ids] = want_idf[ids]
  np.testing.assert_allclose(q, by_hand / np.linalg.norm(by_hand, axis=1, keepdims=True), atol=1e-6)
  d = fx.encode(texts)                                   # passages: SPLADE through the model, not the table
  assert d.shape == q.shape and not np.allclose(d, q)
  rows = Predictor.from_workdir(out).predict(texts)      # raw-text prediction embeds passages
  np.testing.assert_allclose(np.array([r["embedding"] for r in rows]), d, atol=1e-5)
  (tmp_path / "texts.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
  assert predict_main(["features", "--model", out, "--input", str(tmp_path / "texts.txt"),
                       "--output", str(tmp_path / "q.npy"), "--queries"]) == 0
  np.testing.assert_allclose(np.load(tmp_path / "q.npy"), q, atol=0)
  result = export("onnx", out, str(tmp_path / "onnx"))   # the document encoder, with the table beside it
  assert result["max_abs_diff"] <= 1e-4 and "query_idf.json" in result["files"]
  table = json.load(open(tmp_path / "onnx" / "query_idf.json", encoding="utf-8"))
  assert table["cat"] == pytest.approx(float(want_idf[tok.vocab["cat"]]), rel=1e-6)
  assert "[CLS]" not in table
  sig = json.load(open(tmp_path / "onnx" / "signature.json", encoding="utf-8"))
  assert "query_idf.json" in sig["outputs"]["query_embedding"]
  pytest.importorskip("sentence_transformers")
  result = export("sentence-transformers", out, str(tmp_path / "st"))   # queries and passages both checked
  assert result["max_abs_diff"] <= 1e-5
  from sentence_transformers import SparseEncoder
  st = SparseEncoder(str(tmp_path / "st"), device="cpu")
  np.testing.assert_allclose(st.encode_query(texts, convert_to_tensor=True).to_dense().numpy(), q, atol=1e-5)
  np.testing.assert_allclose(st.encode_document(texts, convert_to_tensor=True).to_dense().numpy(), d, atol=1e-5)
  from bert_jax.convert.hf import import_hf     # and back: the Router's two routes come back as one model
  import_hf(str(tmp_path / "st"), str(tmp_path / "back"))
  back = FeatureExtractor(str(tmp_path / "back"))
  assert (back.pooling, back.normalize) == ("splade", True)
  np.testing.assert_array_equal(back.query_idf, fx.query_idf)
  np.testing.assert_allclose(back.encode_queries(texts), q, atol=1e-6)
  np.testing.assert_allclose(back.encode(texts), d, atol=1e-5)


# ---- pooling=lexical: a learned weight per token of the text, no expansion -----------------------------------
def test_lexical_pool_sums_each_tokens_weight_at_its_id_over_the_real_tokens():
  from bert_jax.models.heads import lexical_pool
  ids = jnp.asarray([[2, 5, 5, 3, 0], [2, 7, 3, 4, 4]], jnp.int32)
  mask = jnp.asarray([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]], jnp.int32)
  w = jnp.asarray([[0.5, 1.0, 2.0, 0.25, 9.0], [1.0, 3.0, 0.0, 9.0, 9.0]], jnp.float32)
  v = np.asarray(lexical_pool(w, ids, mask, 8))
  want = np.zeros((2, 8), np.float32)
  want[0, 2], want[0, 5], want[0, 3] = 0.5, 3.0, 0.25       # 5 twice: 1 + 2; the padding's 9 nowhere
  want[1, 2], want[1, 7], want[1, 3] = 1.0, 3.0, 0.0
  np.testing.assert_array_equal(v, want)
  # lexical_log: log(1 + the sum), so 5's two tokens (3.0) weigh log 4, not 3
  np.testing.assert_allclose(np.asarray(lexical_pool(w, ids, mask, 8, saturate=True)), np.log1p(want), rtol=1e-6)


def test_lexical_features_of_a_model_without_a_term_weight_head_are_term_frequencies(tmp_path):
  from bert_jax.predict import FeatureExtractor
  vocab = testing.write_vocab(str(tmp_path / "vocab"), extra=TOPICS)
  bare = _mlm_checkpoint(str(tmp_path / "bare"), vocab, with_mlm=False)   # no MLM head needed
  fx = FeatureExtractor(bare, pooling="lexical", normalize=False)
  v = fx.encode(["the cat saw the cat", "a dog"])
  tok = fx.tokenizer
  want = np.zeros_like(v)
  for i, t in enumerate(["the cat saw the cat", "a dog"]):
    for j in [tok.vocab["[CLS]"]] + tok.encode(t) + [tok.vocab["[SEP]"]]:
      want[i, j] += 1
  np.testing.assert_allclose(v, want, atol=1e-6)
  assert v[0, tok.vocab["cat"]] == 2
  saturated = FeatureExtractor(bare, pooling="lexical_log", normalize=False).encode(["the cat saw the cat", "a dog"])
  np.testing.assert_allclose(saturated, np.log1p(want), atol=1e-6)
  assert saturated[0, tok.vocab["cat"]] == pytest.approx(np.log(3.0))


@pytest.mark.parametrize("fmt", ["onnx", "stablehlo"])
def test_lexical_log_exports_carry_the_log_and_reproduce_predict(tmp_path, fmt):
  pytest.importorskip("onnxruntime" if fmt == "onnx" else "jax")
  from bert_jax.export import export
  vocab = testing.write_vocab(str(tmp_path / "vocab"), extra=TOPICS)
  bare = _mlm_checkpoint(str(tmp_path / "bare"), vocab, with_mlm=False)
  result = export(fmt, bare, str(tmp_path / fmt), pooling="lexical_log", normalize=False)
  assert result["head"] == "features" and result["max_abs_diff"] <= 1e-4
  signature = json.load(open(os.path.join(tmp_path, fmt, "signature.json"), encoding="utf-8"))
  assert signature["head"]["pooling"] == "lexical_log", signature


@pytest.mark.slow
def test_lexical_fine_tuning_trains_the_term_weights_and_exports_them(pair_data, tmp_path):  # noqa: F811
  from bert_jax.export import export
  from bert_jax.finetune import loop as finetune_loop
  from bert_jax.predict import FeatureExtractor
  data, vocab = pair_data
  bare = _mlm_checkpoint(str(tmp_path / "bare"), vocab, with_mlm=False)
  out = str(tmp_path / "run")
  c = make_config("embedding", data, vocab, pooling="lexical", init_checkpoint=bare, num_train_epochs=2.0,
                  **{"optimizer.learning_rate": 1e-3})
  results = finetune_loop.run(c, out)
  assert 0 <= results["dev"]["recall@1"] <= results["dev"]["recall@10"] <= 1
  report = json.load(open(os.path.join(out, "init_report.json"), encoding="utf-8"))
  assert {"term_weight/kernel", "term_weight/bias"} <= set(report["initialised"])
  fx = FeatureExtractor(out)
  assert (fx.pooling, fx.normalize, fx.query_idf) == ("lexical", True, None)
  assert np.any(np.asarray(fx.params["term_weight"]["kernel"]) != 0)        # trained away from the init
  texts = ["my cat", "a dog and a dog", "the river again"]
  v = fx.encode(texts)
  tok = fx.tokenizer
  for row, t in zip(v, texts):   # no expansion: only the text's own tokens carry weight
    own = set([tok.vocab["[CLS]"], tok.vocab["[SEP]"]] + tok.encode(t))
    assert set(np.flatnonzero(row)) <= own
  for fmt in ("onnx", "stablehlo"):
    result = export(fmt, out, str(tmp_path / fmt))
    assert result["head"] == "features" and result["max_abs_diff"] <= 1e-4, fmt
  with pytest.raises(UserError, match=r"sentence-transformers has no module for pooling=lexical"):
    export("sentence-transformers", out, str(tmp_path / "st"))
