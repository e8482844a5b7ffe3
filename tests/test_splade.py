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
