"""The modernbert encoder family: sliding-window attention (blocked against the dense masked reference, packed
rows, lengths off the block grid), the packed-rows contract, its config rules (one error line each), its layer
pattern, parameter and FLOPs counts, and that BERT's model is untouched by the family hooks."""

import logging

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.models import BertConfig, BertForPreTraining, BertModel, dummy_inputs, encoders
from bert_jax.models import local_attention as la
from bert_jax.models.encoders import modernbert


def _tiny(**kw):
  fields = dict(vocab_size=64, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=48,
                encoder="modernbert", local_attention=8, max_position_embeddings=128, hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0)
  fields.update(kw)
  return BertConfig(**fields)


def _padded_and_packed_ids(t):
  """input_mask [2, t]: row 1 right-padded, row 0 a packed row of two examples, then padding."""
  ids = np.ones((2, t), np.int32)
  ids[1, t - 5:] = 0                            # right padding
  ids[0, t // 3:] = 2                           # a packed row: two examples, then padding
  ids[0, t - 3:] = 0
  return jnp.asarray(ids)


def _qkv(b, t, n=2, d=8, seed=0):
  k1, k2, k3 = jax.random.split(jax.random.key(seed), 3)
  return tuple(jax.random.normal(k, (b, t, n, d), jnp.float32) for k in (k1, k2, k3))


@pytest.mark.parametrize("t,half", [(37, 4), (9, 1)])
def test_blocked_sliding_window_equals_dense_masked_reference_on_real_queries(t, half):
  q, k, v = _qkv(2, t)
  ids = _padded_and_packed_ids(t)
  dense = la.dense_attention(q, k, v, ids, half)
  blocked = la.blocked_attention(q, k, v, ids, half)
  real = np.asarray(ids) > 0
  np.testing.assert_allclose(np.asarray(blocked)[real], np.asarray(dense)[real], atol=2e-6, rtol=1e-5)


def test_window_is_plus_minus_half_inclusive_and_stays_inside_the_example():
  m = np.asarray(la.window_mask(jnp.asarray([[1, 1, 1, 1, 1, 2, 2, 0]]), 2))[0, 0]
  assert m[0].tolist() == [True, True, True, False, False, False, False, False]
  assert m[4].tolist() == [False, False, True, True, True, False, False, False]   # not into example 2
  assert m[5].tolist() == [False] * 5 + [True, True, False]                       # nor into padding


def test_blocked_path_builds_no_length_squared_array():
  t, half = 512, 16
  q, k, v = _qkv(1, t)
  jaxpr = jax.make_jaxpr(lambda q, k, v, m: la.blocked_attention(q, k, v, m, half))(q, k, v, jnp.ones((1, t)))
  biggest = max(np.prod(var.aval.shape) for eqn in jaxpr.eqns for var in eqn.outvars)
  assert biggest <= 2 * t * 3 * half * 1, biggest            # [B, N, T/half, half, 3 half] scores at most
  assert biggest < t * t


def test_resolve_local_falls_back_to_dense_only_when_the_window_covers_the_row(caplog):
  assert la.resolve_local("auto", 1024, 64).path == "blocked"
  assert la.resolve_local("auto", 100, 64).path == "dense"
  assert la.resolve_local("dense", 8192, 64).path == "dense"
  with pytest.raises(ValueError, match="local_attention_impl"):
    la.resolve_local("flash", 10, 2)
  q, k, v = _qkv(1, 6)
  with caplog.at_level(logging.INFO, logger=la.log.name):
    la.sliding_window_attention(q, k, v, jnp.ones((1, 6)), 40)
    la.sliding_window_attention(q, k, v, jnp.ones((1, 6)), 40)
  assert sum("dense masked" in r.getMessage() for r in caplog.records) <= 1


def test_packed_row_equals_each_example_alone():
  cfg = _tiny(num_hidden_layers=2, global_attn_every_n_layers=2)   # a global and a sliding layer
  model = BertModel(cfg)
  rng = np.random.default_rng(0)
  a, b = rng.integers(5, 64, 11), rng.integers(5, 64, 9)
  params = model.init(jax.random.key(0), *dummy_inputs(cfg, seq_len=24)[:3])["params"]
  apply = jax.jit(lambda ids, mask: model.apply({"params": params}, ids, mask)["sequence_output"])
  run = lambda ids, mask: np.asarray(apply(jnp.asarray([ids]), jnp.asarray([mask]))[0])  # noqa: E731
  packed = run(np.r_[a, b, [0] * 4], np.r_[[1] * 11, [2] * 9, [0] * 4])
  alone_a = run(np.r_[a, [0] * 13], np.r_[[1] * 11, [0] * 13])
  alone_b = run(np.r_[b, [0] * 15], np.r_[[1] * 9, [0] * 15])
  np.testing.assert_allclose(packed[:11], alone_a[:11], atol=2e-5)
  np.testing.assert_allclose(packed[11:20], alone_b[:9], atol=2e-5)


def test_layer_pattern_from_n_and_from_layer_types():
  assert modernbert.layer_types(_tiny(num_hidden_layers=7)) == (
      "full_attention", "sliding_attention", "sliding_attention", "full_attention", "sliding_attention",
      "sliding_attention", "full_attention")
  cfg = _tiny(num_hidden_layers=2, layer_types=["sliding_attention", "full_attention"])
  assert modernbert.layer_types(cfg) == ("sliding_attention", "full_attention")
  fields = {k: v for k, v in _tiny().to_dict().items() if k != "hidden_act"}
  d = BertConfig.from_dict(dict(fields, hidden_activation="silu", rope_parameters={
      "full_attention": {"rope_type": "default", "rope_theta": 80000.0},
      "sliding_attention": {"rope_type": "default", "rope_theta": 500.0}}))
  assert d.hidden_act == "silu"
  assert (d.global_rope_theta, d.local_rope_theta) == (80000.0, 500.0)


@pytest.mark.parametrize("fields,message", [
    (dict(layer_types=("full_attention", "sliding", "full_attention")), "BertConfig.layer_types has 'sliding'"),
    (dict(layer_types=("full_attention",)), "one per layer"),
    (dict(local_attention=7), "BertConfig.local_attention=7; expected a positive even"),
    (dict(local_attention=0), "BertConfig.local_attention=0"),
    (dict(local_attention=256), "BertConfig.local_attention=256; expected at most max_position_embeddings=128"),
    (dict(position_embedding_type="absolute"), "BertConfig.position_embedding_type='absolute'.*rotary"),
    (dict(classifier_pooling="max"), "BertConfig.classifier_pooling"),
    (dict(embedding_size=16), "BertConfig.embedding_size=16"),
    (dict(scan_layers=True), "BertConfig.scan_layers=True"),
    (dict(encoder="transformer", position_embedding_type="rotary"),
     "BertConfig.position_embedding_type='rotary'; encoder='transformer' has absolute positions.*modernbert"),
])
def test_bad_config_is_one_line_naming_the_field(fields, message):
  if fields.get("encoder") == "transformer":
    with pytest.raises(ValueError, match=message) as e:
      BertConfig(**fields)
    assert "\n" not in str(e.value)
    return
  with pytest.raises(ValueError, match=message) as e:
    _tiny(**fields)
  assert "\n" not in str(e.value)


def test_family_parameter_count_matches_the_initialised_encoder():
  for kw in (dict(), dict(norm_bias=True, attention_bias=True, mlp_bias=True)):
    cfg = _tiny(**kw)
    counted = encoders.abstract_param_count(modernbert.ModernBertEncoder, cfg)
    final_norm = cfg.hidden_size * (2 if cfg.norm_bias else 1)
    assert modernbert.ModernBertFamily.params(cfg) == counted - final_norm


def test_flops_count_the_window_not_the_whole_row():
  for t, w in ((1, 3), (5, 3), (7, 3), (300, 64), (8192, 64)):
    brute = sum(1 for i in range(min(t, 400)) for j in range(min(t, 400)) if abs(i - j) <= w) if t <= 400 else None
    if brute is not None:
      assert modernbert.sliding_keys(t, w) == brute
  cfg = _tiny(num_hidden_layers=3, local_attention=128, max_position_embeddings=8192)
  f1k, f8k = (modernbert.ModernBertFamily.flops_per_sequence(cfg, t) for t in (1024, 8192))
  dense = 6.0 * modernbert.ModernBertFamily.params(cfg) * 8192
  assert f8k - dense == pytest.approx(12 * 32 * (8192 ** 2 + 2 * modernbert.sliding_keys(8192, 64)))
  # the sliding layers' attention per token is flat in T (129 keys a query, less at the row's ends)
  per_token = [modernbert.sliding_keys(t, 64) / t for t in (1024, 8192)]
  assert 129 * 0.9 < per_token[0] < per_token[1] <= 129
  all_global_attention = 12 * 32 * 3 * 8192 ** 2
  assert (f8k - dense) < 0.35 * all_global_attention and f1k < f8k


def test_mlm_head_follows_the_family_and_bert_keeps_its_own():
  mb = BertForPreTraining(_tiny(), targets=("mlm",))
  shapes = jax.eval_shape(lambda: mb.init(jax.random.key(0), *dummy_inputs(_tiny(), seq_len=8)))["params"]
  assert set(shapes["mlm"]) == {"transform", "LayerNorm", "output_bias"}
  assert set(shapes["mlm"]["transform"]) == {"kernel"} and set(shapes["mlm"]["LayerNorm"]) == {"scale"}
  assert set(shapes["bert"]["embeddings"]) == {"word_embeddings", "norm"}     # no position / token-type tables
  assert "attn_norm" not in shapes["bert"]["encoder"]["layer_0"] and "attn_norm" in shapes["bert"]["encoder"]["layer_1"]
  bert = BertConfig.from_size("tiny", vocab_size=64)
  bshapes = jax.eval_shape(lambda: BertForPreTraining(bert).init(jax.random.key(0), *dummy_inputs(bert)))["params"]
  assert set(bshapes["mlm"]["transform"]) == {"kernel", "bias"} and set(bshapes["mlm"]["LayerNorm"]) == {"scale", "bias"}
  assert set(bshapes["bert"]["embeddings"]) == {"word_embeddings", "position_embeddings", "token_type_embeddings",
                                                "LayerNorm"}
  assert set(bshapes["bert"]["pooler"]) == {"kernel", "bias"}


@pytest.mark.slow   # compiling the gradient of a rematerialised model
def test_training_step_gradients_are_finite_with_dropout_and_remat():
  cfg = _tiny(num_hidden_layers=2, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, remat_policy="full",
              global_attn_every_n_layers=2)
  model = BertForPreTraining(cfg, targets=("mlm",))
  ids, mask, seg, pos = dummy_inputs(cfg, batch_size=1, seq_len=20, max_predictions=2)
  params = nn.unbox(model.init(jax.random.key(0), ids, mask, seg, pos)["params"])

  def loss(p):
    out = model.apply({"params": p}, ids + 7, mask, seg, pos, deterministic=False,
                      rngs={"dropout": jax.random.key(1)})
    return jnp.mean(out["mlm_logits"] ** 2)

  grads = jax.jit(jax.grad(loss))(params)
  assert all(bool(jnp.all(jnp.isfinite(g))) for g in jax.tree.leaves(grads))
  assert float(jnp.abs(grads["bert"]["encoder"]["layer_1"]["attn"]["Wqkv"]["kernel"]).sum()) > 0
