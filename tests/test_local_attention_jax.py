"""local_attention_impl=jax: the sliding layers through jax.nn.dot_product_attention(local_window_size=...)
equal the blocked kernel within 1e-5 (fp32, CPU: XLA) on real queries, with padding and packed rows, alone and
in the model; a config it cannot serve (attention dropout) is one line naming the field."""

import logging

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from bert_jax.engine.train_step import build_model_config
from bert_jax.errors import UserError
from bert_jax.models import BertModel, dummy_inputs
from bert_jax.models import local_attention as la
from test_modernbert import _padded_and_packed_ids, _qkv, _tiny   # the blocked tests' model, q, k, v and masks

TOL = 1e-5


_blocked = jax.jit(la.blocked_attention, static_argnums=4)
_jax_path = jax.jit(la.jax_attention, static_argnums=(4, 5))


@pytest.mark.parametrize("t,half", [(37, 4), (300, 64)])
def test_jax_path_equals_blocked_on_real_queries_with_padding_and_packed_rows(t, half):
  q, k, v = _qkv(2, t)
  ids = _padded_and_packed_ids(t)
  blocked = np.asarray(_blocked(q, k, v, ids, half))
  ours = np.asarray(_jax_path(q, k, v, ids, half, True))
  real = np.asarray(ids) > 0
  np.testing.assert_allclose(ours[real], blocked[real], atol=TOL, rtol=TOL)
  assert np.all(np.isfinite(ours))              # padding queries too (they may feed a gradient)
  # unpacked rows (0/1) with the [B, 1, 1, T] key mask
  unpacked = jnp.asarray((np.asarray(ids) > 0).astype(np.int32)).at[0].set(1)
  blocked = np.asarray(_blocked(q, k, v, unpacked, half))
  ours = np.asarray(_jax_path(q, k, v, unpacked, half, False))
  real = np.asarray(unpacked) > 0
  np.testing.assert_allclose(ours[real], blocked[real], atol=TOL, rtol=TOL)


@pytest.mark.slow   # two whole models; the layer-level equality stays fast
def test_model_with_the_jax_path_equals_the_blocked_model(caplog):
  cfg = _tiny(num_hidden_layers=2, global_attn_every_n_layers=2)   # a global and a sliding layer (window 8, T 40)
  rng = np.random.default_rng(0)
  ids = rng.integers(5, 64, (2, 40)).astype(np.int32)
  mask = np.ones((2, 40), np.int32)
  mask[1, 27:] = 0
  params = BertModel(cfg).init(jax.random.key(0), jnp.asarray(ids), jnp.asarray(mask))["params"]
  outs = {}
  with caplog.at_level(logging.INFO, logger=la.log.name):
    for impl in ("blocked", "jax"):
      model = BertModel(cfg.replace(local_attention_impl=impl))
      apply = jax.jit(lambda p, i, m, model=model: model.apply({"params": p}, i, m)["sequence_output"])
      outs[impl] = np.asarray(apply(params, jnp.asarray(ids), jnp.asarray(mask)))
  real = mask.astype(bool)
  np.testing.assert_allclose(outs["jax"][real], outs["blocked"][real], atol=TOL, rtol=TOL)
  assert any("jax.nn.dot_product_attention(local_window_size=(4, 4))" in r.getMessage() for r in caplog.records)


@pytest.mark.slow   # three compiles of the model (~6 s; 12 s on a loaded machine)
def test_packed_model_with_the_jax_path_equals_each_example_alone():
  cfg = _tiny(num_hidden_layers=2, global_attn_every_n_layers=2, local_attention_impl="jax")
  rng = np.random.default_rng(1)
  a, b = rng.integers(5, 64, 11), rng.integers(5, 64, 9)
  params = BertModel(cfg).init(jax.random.key(0), *dummy_inputs(cfg, seq_len=24)[:3])["params"]

  def run(c, ids, mask):
    apply = jax.jit(lambda p, i, m: BertModel(c).apply({"params": p}, i, m)["sequence_output"])
    return np.asarray(apply(params, jnp.asarray([ids]), jnp.asarray([mask]))[0])

  packed = run(cfg.replace(max_examples_per_row=2), np.r_[a, b, [0] * 4], np.r_[[1] * 11, [2] * 9, [0] * 4])
  alone_a = run(cfg, np.r_[a, [0] * 13], np.r_[[1] * 11, [0] * 13])
  alone_b = run(cfg, np.r_[b, [0] * 15], np.r_[[1] * 9, [0] * 15])
  np.testing.assert_allclose(packed[:11], alone_a[:11], atol=2e-5)
  np.testing.assert_allclose(packed[11:20], alone_b[:9], atol=2e-5)


def test_jax_path_with_attention_dropout_is_one_line_naming_the_field():
  assert la.resolve_local("jax", 8192, 64).path == "jax"
  with pytest.raises(ValueError, match=r"local_attention_impl='jax' with attention_probs_dropout_prob=0.1") as e:
    _tiny(local_attention_impl="jax", attention_probs_dropout_prob=0.1)
  assert "\n" not in str(e.value)
  fields = ml_collections.ConfigDict(dict(size="tiny", encoder="modernbert", local_attention_impl="jax",
                                          attention_probs_dropout_prob=0.1))
  with pytest.raises(UserError, match=r"^config.model: BertConfig.local_attention_impl='jax'"):
    build_model_config(fields, 100)          # a run's plan: the one `error:` line
  q, k, v = _qkv(1, 20)
  with pytest.raises(ValueError, match="no attention dropout"):
    la.sliding_window_attention(q, k, v, jnp.ones((1, 20)), 4, "jax", dropout_fn=lambda p: p)
