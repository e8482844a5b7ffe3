"""Model tests: parameter counts, a NumPy reference forward pass, masking, layouts, dtypes, TF-free import."""

import os
import subprocess
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import erf

from bert_jax.models import (BertConfig, BertForPreTraining, BertForQuestionAnswering,
                             BertForSequenceClassification, BertForTokenClassification, count_params,
                             dummy_inputs, scan_params, unscan_params)

TINY = BertConfig.from_size("tiny", vocab_size=97, hidden_size=64, num_attention_heads=4,
                            intermediate_size=128, max_position_embeddings=64)


def _batch(cfg, batch=3, length=16, preds=4, seed=0):
  rng = np.random.default_rng(seed)
  ids = rng.integers(5, cfg.vocab_size, (batch, length)).astype(np.int32)
  lengths = rng.integers(length // 2, length + 1, batch)
  lengths[0] = length
  mask = (np.arange(length)[None] < lengths[:, None]).astype(np.int32)
  ids = ids * mask
  seg = ((np.arange(length)[None] >= lengths[:, None] // 2) & (mask > 0)).astype(np.int32)
  pos = np.stack([rng.choice(np.arange(1, l - 1), preds, replace=False) for l in lengths]).astype(np.int32)
  return dict(input_ids=ids, input_mask=mask, segment_ids=seg, masked_lm_positions=pos,
              masked_lm_ids=rng.integers(0, cfg.vocab_size, (batch, preds)).astype(np.int32),
              masked_lm_weights=(rng.random((batch, preds)) > 0.25).astype(np.float32),
              next_sentence_labels=rng.integers(0, 2, batch).astype(np.int32))


def _init(cfg, targets=("mlm", "nsp")):
  model = BertForPreTraining(cfg, targets=targets)
  params = nn.unbox(model.init(jax.random.key(0), *dummy_inputs(cfg))["params"])
  return model, params


def _apply(model, params, b, **kw):
  return model.apply({"params": params}, b["input_ids"], b["input_mask"], b["segment_ids"],
                     b["masked_lm_positions"], **kw)


@pytest.mark.parametrize("size,expected", [("base", 110_106_428), ("large", 336_226_108)])
def test_parameter_count_matches_hf_bert_for_pretraining(size, expected):
  cfg = BertConfig.from_size(size, vocab_size=30522)
  model = BertForPreTraining(cfg, targets=("mlm", "nsp"))
  shapes = jax.eval_shape(lambda: model.init(jax.random.key(0), *dummy_inputs(cfg)))
  assert count_params(nn.unbox(shapes["params"])) == expected


def test_size_table_heads_and_ffn():
  for size, (layers, hidden) in {"tiny": (2, 128), "mini": (4, 256), "small": (4, 512),
                                 "medium": (8, 512), "base": (12, 768), "large": (24, 1024)}.items():
    cfg = BertConfig.from_size(size)
    assert (cfg.num_hidden_layers, cfg.hidden_size) == (layers, hidden)
    assert cfg.num_attention_heads == hidden // 64 and cfg.intermediate_size == 4 * hidden


# ---- NumPy reference of BERT (post-LN) -------------------------------------------------------------------
def _ln(x, p, eps=1e-12):
  mu = x.mean(-1, keepdims=True)
  var = ((x - mu) ** 2).mean(-1, keepdims=True)
  return (x - mu) / np.sqrt(var + eps) * p["scale"] + p["bias"]


def _gelu(x):
  return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))


def _np_bert(p, cfg, ids, mask, seg, positions, pre_ln=False):
  p = jax.tree.map(np.asarray, p)
  e = p["bert"]["embeddings"]
  t = ids.shape[1]
  x = (e["word_embeddings"]["embedding"][ids] + e["position_embeddings"]["embedding"][:t][None]
       + e["token_type_embeddings"]["embedding"][seg])
  x = _ln(x, e["LayerNorm"])
  bias = np.where(mask[:, None, None, :] > 0, 0.0, -1e30)
  for i in range(cfg.num_hidden_layers):
    lp = p["bert"]["encoder"][f"layer_{i}"]
    a = lp["attention"]
    h_in = _ln(x, lp["attention_LayerNorm"]) if pre_ln else x
    q, k, v = (np.einsum("bte,ehd->bthd", h_in, a[n]["kernel"]) + a[n]["bias"] for n in ("query", "key", "value"))
    s = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(cfg.head_dim) + bias
    s = np.exp(s - s.max(-1, keepdims=True))
    s /= s.sum(-1, keepdims=True)
    ctx = np.einsum("bhqk,bkhd->bqhd", s, v)
    attn = np.einsum("bqhd,hde->bqe", ctx, a["output"]["kernel"]) + a["output"]["bias"]
    f = lp["ffn"]
    if pre_ln:
      x = x + attn
      h = _ln(x, lp["output_LayerNorm"])
      x = x + _gelu(h @ f["intermediate"]["kernel"] + f["intermediate"]["bias"]) @ f["output"]["kernel"] + f["output"]["bias"]
    else:
      x = _ln(x + attn, lp["attention_LayerNorm"])
      h = _gelu(x @ f["intermediate"]["kernel"] + f["intermediate"]["bias"]) @ f["output"]["kernel"] + f["output"]["bias"]
      x = _ln(x + h, lp["output_LayerNorm"])
  if pre_ln:
    x = _ln(x, p["bert"]["encoder"]["final_LayerNorm"])
  pooled = np.tanh(x[:, 0] @ p["bert"]["pooler"]["kernel"] + p["bert"]["pooler"]["bias"])
  m = p["mlm"]
  g = np.take_along_axis(x, positions[..., None], axis=1)
  g = _ln(_gelu(g @ m["transform"]["kernel"] + m["transform"]["bias"]), m["LayerNorm"])
  mlm = g @ e["word_embeddings"]["embedding"].T + m["output_bias"]
  nsp = pooled @ p["nsp"]["kernel"] + p["nsp"]["bias"]
  return x, pooled, mlm, nsp


@pytest.mark.parametrize("layer_norm_type", ["post", "pre"])
def test_forward_matches_numpy_reference(layer_norm_type):
  cfg = TINY.replace(layer_norm_type=layer_norm_type)
  model, params = _init(cfg)
  b = _batch(cfg)
  out = _apply(model, params, b)
  seq, pooled, mlm, nsp = _np_bert(params, cfg, b["input_ids"], b["input_mask"], b["segment_ids"],
                                   b["masked_lm_positions"], pre_ln=layer_norm_type == "pre")
  real = b["input_mask"] > 0
  np.testing.assert_allclose(np.asarray(out["sequence_output"])[real], seq[real], atol=2e-5, rtol=1e-4)
  np.testing.assert_allclose(out["pooled_output"], pooled, atol=2e-5, rtol=1e-4)
  np.testing.assert_allclose(out["mlm_logits"], mlm, atol=1e-4, rtol=1e-4)
  np.testing.assert_allclose(out["nsp_logits"], nsp, atol=2e-5, rtol=1e-4)
  assert out["mlm_logits"].shape == (3, 4, cfg.vocab_size) and out["mlm_logits"].dtype == jnp.float32


@pytest.mark.parametrize("encoder", ["transformer", "lstm"])
def test_padding_does_not_change_real_positions(encoder):
  cfg = TINY.replace(encoder=encoder)
  model, params = _init(cfg)
  b = _batch(cfg, length=12)
  padded = dict(b)
  for k in ("input_ids", "input_mask", "segment_ids"):
    padded[k] = np.pad(b[k], ((0, 0), (0, 9)))
  padded["input_ids"] = padded["input_ids"].copy()
  padded["input_ids"][:, 12:] = 7   # garbage ids under padding must not leak either
  o1, o2 = _apply(model, params, b), _apply(model, params, padded)
  real = b["input_mask"] > 0
  np.testing.assert_allclose(np.asarray(o2["sequence_output"])[:, :12][real],
                             np.asarray(o1["sequence_output"])[real], atol=1e-5)
  np.testing.assert_allclose(o2["mlm_logits"], o1["mlm_logits"], atol=1e-4)
  np.testing.assert_allclose(o2["nsp_logits"], o1["nsp_logits"], atol=1e-5)


def test_causal_lm_target_never_sees_future_tokens():
  cfg = TINY
  model, params = _init(cfg, targets=("lm",))
  b = _batch(cfg)
  out = _apply(model, params, b)
  changed = dict(b, input_ids=b["input_ids"].copy())
  changed["input_ids"][:, 6:] = (changed["input_ids"][:, 6:] + 11) % cfg.vocab_size
  out2 = _apply(model, params, changed)
  assert out["lm_logits"].shape == (3, 16, cfg.vocab_size)
  np.testing.assert_allclose(out2["lm_logits"][:, :6], out["lm_logits"][:, :6], atol=1e-5)
  assert np.abs(np.asarray(out2["lm_logits"][:, 6:]) - np.asarray(out["lm_logits"][:, 6:])).max() > 1e-3


def test_scanned_layout_equals_per_layer_layout():
  cfg = TINY
  model, params = _init(cfg)
  scanned_cfg = cfg.replace(scan_layers=True, remat_policy="dots_no_batch")
  scanned = scan_params(params)
  assert scanned["bert"]["encoder"]["layers"]["layer"]["attention"]["query"]["kernel"].shape == (2, 64, 4, 16)
  b = _batch(cfg)
  o1 = _apply(model, params, b)
  o2 = _apply(BertForPreTraining(scanned_cfg), scanned, b)
  np.testing.assert_allclose(o2["mlm_logits"], o1["mlm_logits"], atol=1e-5)
  back = unscan_params(scanned)
  jax.tree.map(np.testing.assert_array_equal, back, params)


def test_remat_gives_same_gradients():
  from bert_jax.models.pretraining import pretraining_loss
  cfg = TINY
  model, params = _init(cfg)
  b = _batch(cfg)

  def loss_fn(p, m):
    return pretraining_loss(_apply(m, p, b), b, ("mlm", "nsp"))[0]

  # Under jit, where remat acts (and 2 compiles instead of hundreds of op-by-op ones: 25 s -> 11 s on 2 cores).
  grad = jax.jit(jax.grad(loss_fn), static_argnums=1)
  g1 = grad(params, model)
  g2 = grad(params, BertForPreTraining(cfg.replace(remat_policy="full")))
  jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, atol=1e-6), g1, g2)


def test_bfloat16_compute_within_bf16_tolerance_of_float32():
  cfg = TINY
  model, params = _init(cfg)
  b = _batch(cfg)
  o32 = _apply(model, params, b)
  o16 = _apply(BertForPreTraining(cfg.replace(dtype="bfloat16")), params, b)
  assert o16["sequence_output"].dtype == jnp.bfloat16
  assert o16["mlm_logits"].dtype == jnp.float32
  # LayerNorm'd activations are O(1); bf16 keeps 8 bits of mantissa (~0.4% relative) per op.
  diff = np.abs(np.asarray(o16["sequence_output"], np.float32) - np.asarray(o32["sequence_output"]))
  assert diff.mean() < 0.02 and diff.max() < 0.25
  np.testing.assert_allclose(o16["mlm_logits"], o32["mlm_logits"], atol=0.1)


def test_dropout_is_active_only_when_not_deterministic():
  model, params = _init(TINY)
  b = _batch(TINY)
  o1 = _apply(model, params, b, deterministic=False, rngs={"dropout": jax.random.key(1)})
  o2 = _apply(model, params, b, deterministic=False, rngs={"dropout": jax.random.key(2)})
  o3 = _apply(model, params, b)
  o4 = _apply(model, params, b)
  assert np.abs(np.asarray(o1["mlm_logits"]) - np.asarray(o2["mlm_logits"])).max() > 1e-3
  np.testing.assert_array_equal(o3["mlm_logits"], o4["mlm_logits"])


def test_task_heads_shapes_and_shared_encoder_tree():
  cfg = TINY
  b = _batch(cfg)
  args = (b["input_ids"], b["input_mask"], b["segment_ids"])
  for head, key, shape in ((BertForSequenceClassification(cfg, 3), "logits", (3, 3)),
                           (BertForSequenceClassification(cfg, 1), "logits", (3, 1)),
                           (BertForTokenClassification(cfg, 5), "logits", (3, 16, 5)),
                           (BertForQuestionAnswering(cfg), "start_logits", (3, 16))):
    v = head.init(jax.random.key(0), *args)
    assert set(v["params"]) - {"bert"} and "bert" in v["params"]
    assert head.apply(v, *args)[key].shape == shape
  _, pre = _init(cfg)
  cls_params = nn.unbox(BertForSequenceClassification(cfg, 3).init(jax.random.key(0), *args)["params"])
  assert jax.tree.structure(cls_params["bert"]) == jax.tree.structure(pre["bert"])


def test_bad_configs_and_targets_raise_clear_errors():
  with pytest.raises(ValueError, match="num_attention_heads"):
    BertConfig(hidden_size=100, num_attention_heads=3)
  with pytest.raises(ValueError, match="encoder"):
    BertConfig(encoder="gru")
  with pytest.raises(ValueError, match="unknown model size"):
    BertConfig.from_size("huge")
  b = _batch(TINY)
  for targets, msg in ((("mlm", "xyz"), "unknown pre-training targets"), (("lm", "mlm"), "causal"),
                       (("nsp", "sop"), "pick one")):
    with pytest.raises(ValueError, match=msg):
      BertForPreTraining(TINY, targets=targets).init(jax.random.key(0), *dummy_inputs(TINY))
  with pytest.raises(ValueError, match="causal"):
    BertForPreTraining(TINY.replace(encoder="lstm"), targets=("lm",)).init(jax.random.key(0), *dummy_inputs(TINY))


def test_google_and_hf_json_configs_round_trip(tmp_path):
  cfg = BertConfig.from_size("mini", vocab_size=21128)
  path = tmp_path / "bert_config.json"
  cfg.to_google_json(str(path))
  back = BertConfig.from_google_json(str(path))
  assert back.to_google_dict() == cfg.to_google_dict()
  cfg.to_json_file(str(tmp_path / "ours.json"))   # written atomically: no temp file stays beside it
  assert BertConfig.from_json_file(str(tmp_path / "ours.json")) == cfg
  assert sorted(os.listdir(tmp_path)) == ["bert_config.json", "ours.json"]
  (tmp_path / "bad.json").write_text('{"hidden_size": 8}')
  with pytest.raises(ValueError, match="bad.json.*vocab_size"):
    BertConfig.from_json_file(str(tmp_path / "bad.json"))


def test_models_import_without_tensorflow():
  code = ("import sys, bert_jax.models, bert_jax.models.losses; "
          "bad = [m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'tensorflow_text', 'tf_keras')]; "
          "assert not bad, bad; print('ok')")
  res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=".")
  assert res.returncode == 0 and "ok" in res.stdout, res.stderr[-2000:]
