"""Sharding: every mesh layout computes the same loss and gradients as one device; accumulation is exact;
the optimizer masks weight decay off LayerNorm and biases."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from bert_jax.models import BertConfig, BertForPreTraining
from bert_jax.engine import optimizers, sharding
from bert_jax.engine import train_step as ts

TINY = BertConfig.from_size("tiny", vocab_size=96, hidden_size=64, num_attention_heads=4, intermediate_size=128,
                            max_position_embeddings=64)


def run_config(optimizer="adamw", lr=1e-3, accum=1, nan_policy="stop"):
  """configs/pretrain.py (tiny, runlocal) with the few fields these tests vary: 100 steps, no warmup."""
  from configs import pretrain
  config = pretrain.get_config("size=tiny,runlocal")
  config.optimizer.name, config.optimizer.learning_rate = optimizer, lr
  config.grad_accum_steps, config.nan_policy = accum, nan_policy
  config.num_train_steps, config.warmup_steps = 100, 0
  return config


def make_batch(batch=16, length=32, preds=5, vocab=96, seed=0):
  rng = np.random.default_rng(seed)
  lengths = rng.integers(length // 2, length + 1, batch)
  mask = (np.arange(length)[None] < lengths[:, None]).astype(np.int32)
  ids = rng.integers(5, vocab, (batch, length)).astype(np.int32) * mask
  pos = np.stack([rng.choice(np.arange(1, l - 1), preds, replace=False) for l in lengths]).astype(np.int32)
  return dict(input_ids=ids, input_mask=mask,
              segment_ids=((np.arange(length)[None] >= lengths[:, None] // 2) & (mask > 0)).astype(np.int32),
              masked_lm_positions=pos, masked_lm_ids=rng.integers(5, vocab, (batch, preds)).astype(np.int32),
              masked_lm_weights=(rng.random((batch, preds)) > 0.2).astype(np.float32),
              next_sentence_labels=rng.integers(0, 2, batch).astype(np.int32))


def keep_gradients():
  """An optax transformation that leaves the params alone and keeps the gradients it was given as its state,
  so the real train step's gradients (sharded like the params) can be read from `state.opt_state`."""
  return optax.GradientTransformation(
      init=lambda params: jax.tree.map(jnp.zeros_like, params),
      update=lambda grads, state, params=None: (jax.tree.map(jnp.zeros_like, grads), grads))


def loss_and_grads(mesh, config, model_config=TINY, batch=None):
  """(loss, metric sums, gradients) of one train step (ts.make_train_step) on `batch`."""
  model = BertForPreTraining(model_config)
  state, shardings = ts.create_train_state(config, model, mesh, keep_gradients())
  step = ts.make_train_step(config, model, keep_gradients(), mesh, shardings)
  new_state, metrics = step(state, make_batch() if batch is None else batch)
  return float(metrics["loss_sum"]), jax.device_get(metrics), jax.device_get(new_state.opt_state)


@pytest.fixture(scope="module")
def reference():
  """Loss and gradients on one device (dropout on: random bits do not depend on the sharding)."""
  return loss_and_grads(sharding.make_mesh((1, 1, 1), devices=jax.devices()[:1]), run_config())


def assert_trees_close(a, b, rtol=2e-5, atol=2e-6):
  for (path, x), y in zip(jax.tree_util.tree_flatten_with_path(a)[0], jax.tree.leaves(b)):
    np.testing.assert_allclose(x, y, rtol=rtol, atol=atol, err_msg=jax.tree_util.keystr(path))


# (2, 2, 2) splits over all three axes at once; the pure data- and tensor-parallel layouts run in CI's full tier.
@pytest.mark.parametrize("shape", [pytest.param((8, 1, 1), marks=pytest.mark.slow), (2, 2, 2),
                                   pytest.param((1, 1, 8), marks=pytest.mark.slow)])
def test_mesh_layouts_match_single_device_loss_and_grads(reference, shape):
  assert len(jax.devices()) == 8
  mesh = sharding.make_mesh(shape)
  loss, sums, grads = loss_and_grads(mesh, run_config())
  ref_loss, ref_sums, ref_grads = reference
  np.testing.assert_allclose(loss, ref_loss, rtol=1e-6)
  np.testing.assert_allclose(sums["mlm_correct_sum"], ref_sums["mlm_correct_sum"])
  assert_trees_close(grads, ref_grads)


def test_params_are_actually_sharded_on_the_mesh():
  mesh = sharding.make_mesh((2, 2, 2))
  state, _ = ts.create_train_state(run_config(), BertForPreTraining(TINY), mesh)
  q = state.params["bert"]["encoder"]["layer_0"]["attention"]["query"]["kernel"]   # (embed, heads, kv)
  assert q.sharding.spec == jax.sharding.PartitionSpec("fsdp", "tensor", None)
  assert q.addressable_shards[0].data.shape == (32, 2, 16)
  mu = state.opt_state[1].mu["bert"]["encoder"]["layer_0"]["attention"]["query"]["kernel"]
  assert mu.sharding.spec == q.sharding.spec      # optimizer moments follow their params


@pytest.mark.slow   # full tier: two more compiled steps (~10 s); the mesh equivalence above stays in the fast one
def test_gradient_accumulation_equals_full_batch():
  mesh = sharding.make_mesh((2, 2, 2))
  # Accumulation is layer-agnostic (one layer halves compile time); no dropout, whose bits differ per micro-batch.
  one_layer = TINY.replace(num_hidden_layers=1, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
  one = loss_and_grads(mesh, run_config(), one_layer)
  four = loss_and_grads(mesh, run_config(accum=4), one_layer)
  np.testing.assert_allclose(four[0], one[0], rtol=1e-5)
  for key in ("mlm_loss_sum", "mlm_weight_sum", "nsp_correct_sum"):
    np.testing.assert_allclose(four[1][key], one[1][key], rtol=1e-5)
  assert_trees_close(four[2], one[2], rtol=1e-4, atol=1e-6)


def test_adamw_mask_excludes_layernorm_and_biases():
  _, shardings = ts.param_shardings(BertForPreTraining(TINY), sharding.make_mesh((8, 1, 1)), None)
  abstract, _ = ts.param_shardings(BertForPreTraining(TINY), sharding.make_mesh((8, 1, 1)), None)
  flat = {jax.tree_util.keystr(p): m for p, m in
          jax.tree_util.tree_flatten_with_path(optimizers.decay_mask(abstract))[0]}
  decayed = {k for k, m in flat.items() if m}
  assert decayed and all(("kernel" in k or "embedding" in k) for k in decayed)
  assert not any("LayerNorm" in k or "bias" in k for k in decayed)
  assert "['bert']['encoder']['layer_0']['attention_LayerNorm']['scale']" in flat
  assert not flat["['mlm']['output_bias']"] and flat["['bert']['embeddings']['word_embeddings']['embedding']"]


def test_adamw_weight_decay_moves_only_masked_params():
  """With zero gradients, only decayed params change (by lr * wd * w); LayerNorm and biases stay put."""
  cfg = run_config(lr=0.1)
  cfg.optimizer.clip_norm = 0.0
  tx, _ = optimizers.optimizer_from_run_config(cfg)
  params = {"dense": {"kernel": jnp.ones((2, 2)), "bias": jnp.ones(2)}, "LayerNorm": {"scale": jnp.ones(2)}}
  upd, _ = tx.update(jax.tree.map(jnp.zeros_like, params), tx.init(params), params)
  np.testing.assert_allclose(upd["dense"]["kernel"], -0.1 * 0.01 * np.ones((2, 2)), rtol=1e-6)
  np.testing.assert_array_equal(upd["dense"]["bias"], 0.0)
  np.testing.assert_array_equal(upd["LayerNorm"]["scale"], 0.0)


def _assert_imports_leave_out(modules, absent):
  """Imports `modules` in a fresh interpreter and checks that none of `absent` got loaded on the way."""
  code = (f"import sys; import {', '.join(modules)}; "
          f"bad = [m for m in {tuple(absent)!r} if m in sys.modules]; assert not bad, bad")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  assert out.returncode == 0, out.stderr[-2000:]


def test_training_modules_import_without_tensorflow_or_ml_collections():
  """The GPU machines have JAX but neither TensorFlow nor ml_collections."""
  _assert_imports_leave_out(["bert_jax.engine.train_step", "bert_jax.engine.sharding",
                             "bert_jax.engine.optimizers", "bert_jax.engine.checkpoints",
                             "bert_jax.pretrain.flops", "bert_jax.pretrain.loop"],
                            ["tensorflow", "ml_collections"])


def test_finetune_loop_imports_without_tensorflow_sklearn_or_seqeval():
  """The fine-tuning loop and the vmapped runs (the tables' timing stage) run on the GPU machine, which has
  neither TensorFlow nor seqeval; scikit-learn and seqeval are imported only where a metric is computed."""
  _assert_imports_leave_out(["bert_jax.finetune.loop", "bert_jax.finetune.multirun", "bert_jax.evaluation.glue",
                             "bert_jax.evaluation.ner"], ["tensorflow", "sklearn", "seqeval"])
