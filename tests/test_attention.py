"""Attention paths: the selection rules, Pallas flash attention (TPU kernel, interpret mode) against the
einsum reference, and the cuDNN-dropout path's lowering (cross-lowered for CUDA on this CPU host)."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.pallas import tpu as pltpu

from bert_jax.models import BertConfig, attention
from bert_jax.models.attention import choose_attention, resolve_attention

NONE = frozenset()   # "every fused path verified": the intended rules, without the device gate


@pytest.mark.parametrize("platform,rate,det,dtype,hd,t,impl,unverified,want", [
    # auto, intended rules (device gate lifted)
    ("gpu", 0.1, False, "bfloat16", 64, 512, "auto", NONE, "cudnn_dropout"),
    ("gpu", 0.1, True, "bfloat16", 64, 512, "auto", NONE, "cudnn"),         # evaluation: no dropout
    ("gpu", 0.0, False, "bfloat16", 64, 128, "auto", NONE, "cudnn"),
    ("gpu", 0.1, False, "float32", 64, 128, "auto", NONE, "einsum"),        # cuDNN needs bf16/fp16
    ("gpu", 0.0, False, "float32", 64, 128, "auto", NONE, "dpa_auto"),
    ("gpu", 0.1, False, "bfloat16", 256, 128, "auto", NONE, "einsum"),      # head_dim > 128
    ("gpu", 0.1, False, "bfloat16", 64, 127, "auto", NONE, "einsum"),       # odd length
    ("tpu", 0.0, False, "bfloat16", 64, 512, "auto", NONE, "pallas_flash"),
    ("tpu", 0.1, True, "bfloat16", 64, 128, "auto", NONE, "pallas_flash"),
    ("tpu", 0.1, False, "bfloat16", 64, 512, "auto", NONE, "einsum"),       # TPU kernel has no dropout
    ("tpu", 0.0, False, "bfloat16", 64, 192, "auto", NONE, "xla"),          # not a multiple of 128
    ("cpu", 0.1, False, "float32", 64, 128, "auto", NONE, "einsum"),
    ("cpu", 0.1, True, "float32", 64, 128, "auto", NONE, "xla"),
    # auto with the shipped gate: unverified fused paths are not picked
    ("gpu", 0.1, False, "bfloat16", 64, 512, "auto", attention.UNVERIFIED_ON_DEVICE, "einsum"),
    ("gpu", 0.0, False, "bfloat16", 64, 512, "auto", attention.UNVERIFIED_ON_DEVICE, "dpa_auto"),
    ("tpu", 0.0, False, "bfloat16", 64, 512, "auto", attention.UNVERIFIED_ON_DEVICE, "xla"),
    # explicit choices opt in past the gate, but keep BERT's dropout and the platform rules
    ("gpu", 0.1, False, "bfloat16", 64, 512, "cudnn_dropout", attention.UNVERIFIED_ON_DEVICE, "cudnn_dropout"),
    ("gpu", 0.1, False, "bfloat16", 64, 512, "cudnn", NONE, "einsum"),
    ("gpu", 0.1, False, "bfloat16", 64, 512, "xla", NONE, "einsum"),
    ("cpu", 0.0, False, "float32", 64, 128, "cudnn", NONE, "xla"),
    ("cpu", 0.0, False, "float32", 64, 128, "pallas_flash", NONE, "xla"),
    ("cpu", 0.0, False, "float32", 64, 128, "einsum", NONE, "einsum"),
])
def test_choose_attention_rules(platform, rate, det, dtype, hd, t, impl, unverified, want):
  assert choose_attention(platform, rate, det, dtype, hd, t, impl, unverified=unverified) == want


def test_cudnn_dropout_refused_under_remat_or_scan_and_unknown_impl_rejected():
  # both would pair a forward kernel run with a backward run of another mask (see attention.py)
  choice = resolve_attention("gpu", 0.1, False, "bfloat16", 64, 128, "cudnn_dropout", remat=True)
  assert choice.path == "einsum" and "remat" in choice.reason
  choice = resolve_attention("gpu", 0.1, False, "bfloat16", 64, 128, "cudnn_dropout", scan=True)
  assert choice.path == "einsum" and "scan_layers" in choice.reason
  assert choose_attention("gpu", 0.1, True, "bfloat16", 64, 128, "cudnn_dropout", scan=True) == "cudnn_dropout"
  with pytest.raises(ValueError, match="attention_impl='flash'"):
    choose_attention("gpu", 0.1, False, "bfloat16", 64, 128, "flash")
  with pytest.raises(ValueError, match="attention_impl"):
    BertConfig.from_size("tiny", attention_impl="flash")


def test_fused_kernel_that_fails_while_tracing_falls_back_with_one_warning(caplog):
  # on this CPU host JAX's cuDNN module raises "cuDNN is not detected": the call must still give the
  # reference result (deterministic, so xla) and say why, once
  q, k, v, input_mask = _qkv_and_mask(b=2, t=16, n=2, h=8, lengths=(16, 9), dtype=jnp.bfloat16)
  mask = (input_mask > 0)[:, None, None, :]
  call = lambda: attention.attend(q, k, v, mask, input_mask, impl="cudnn_dropout", platform="gpu",
                                  dropout_rate=0.1, deterministic=True)
  with caplog.at_level("WARNING", logger="bert_jax.models.attention"):
    out = call()
    call()
  real = input_mask[:, :, None, None].astype(jnp.float32)
  np.testing.assert_allclose(np.asarray(out, np.float32) * real,
                             np.asarray(attention.einsum_attention(q, k, v, mask), np.float32) * real,
                             atol=2e-2)
  lines = [r.getMessage() for r in caplog.records if "cudnn_dropout failed while tracing" in r.getMessage()]
  assert len(lines) == 1 and "-> xla" in lines[0]


def _qkv_and_mask(b=1, t=128, n=1, h=32, lengths=(100,), dtype=jnp.float32):
  keys = jax.random.split(jax.random.key(0), 3)
  q, k, v = (jax.random.normal(kk, (b, t, n, h), dtype) for kk in keys)
  input_mask = jnp.asarray((np.arange(t)[None] < np.array(lengths)[:, None]).astype(np.int32))
  return q, k, v, input_mask


@pytest.mark.slow   # the Pallas interpreter on CPU
def test_pallas_flash_interpret_matches_einsum_forward_and_grads_with_padding():
  q, k, v, input_mask = _qkv_and_mask()
  mask = (input_mask > 0)[:, None, None, :]
  real = input_mask[:, :, None, None].astype(jnp.float32)          # padded query rows are never used
  cot = jax.random.normal(jax.random.key(1), q.shape)

  def loss(fn):
    return lambda q, k, v: jnp.sum(fn(q, k, v) * cot * real)

  flash = lambda q, k, v: attention.attend(q, k, v, mask, input_mask, impl="pallas_flash", platform="tpu",
                                           dropout_rate=0.1, deterministic=True)
  ref = lambda q, k, v: attention.einsum_attention(q, k, v, mask)
  with pltpu.force_tpu_interpret_mode():     # the TPU kernel, run by Pallas' interpreter on this CPU
    np.testing.assert_allclose(flash(q, k, v) * real, ref(q, k, v) * real, atol=2e-5)
    got = jax.grad(loss(flash), (0, 1, 2))(q, k, v)
  want = jax.grad(loss(ref), (0, 1, 2))(q, k, v)
  for g, w, name in zip(got, want, "qkv"):
    np.testing.assert_allclose(g, w, atol=5e-5, err_msg=f"d{name}")
  # a padded key must get no gradient from real queries (the padding mask reaches the kernel)
  assert float(jnp.abs(got[2][0, 100:]).max()) == 0.0


def _cuda_lowering_text(fn, *args, monkeypatch):
  """StableHLO of fn's gradient lowered for CUDA on this CPU host (JAX's cuDNN version probe is the only
  thing that needs a GPU, so it is stubbed)."""
  from jax._src.cudnn import fused_attention_stablehlo as cudnn_fa
  monkeypatch.setattr(cudnn_fa, "check_cudnn_version", lambda: 91000)
  return jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",)).as_text()


def test_encoder_on_gpu_lowers_to_cudnn_fused_dropout_with_a_seed_per_layer(monkeypatch):
  from bert_jax.models.encoders import make_encoder
  cfg = BertConfig.from_size("tiny", vocab_size=64, hidden_size=64, num_attention_heads=2,
                             intermediate_size=128, dtype="bfloat16", attention_impl="cudnn_dropout",
                             attention_probs_dropout_prob=0.1)
  encoder = make_encoder(cfg, False)
  x = jnp.ones((2, 16, 64), jnp.bfloat16)
  input_mask = jnp.asarray([[1] * 16, [1] * 10 + [0] * 6], jnp.int32)
  params = jax.eval_shape(lambda: make_encoder(cfg, True).init(jax.random.key(0), x, input_mask))
  monkeypatch.setattr(jax, "default_backend", lambda: "gpu")

  def loss(params):
    out = encoder.apply(params, x, input_mask, rngs={"dropout": jax.random.key(1)})
    return jnp.sum(out.astype(jnp.float32))

  text = _cuda_lowering_text(jax.grad(loss), params, monkeypatch=monkeypatch)
  forward = re.findall(r"custom_call @__cudnn\$fmhaSoftmaxDropout\(.*", text)
  backward = re.findall(r"custom_call @__cudnn\$fmhaSoftmaxDropoutBackward\(.*", text)
  assert len(forward) == 2 and len(backward) == 2                 # one per layer, both directions
  for call in forward + backward:
    assert "\\22dropout_rate\\22: 0.1" in call and "PADDING" in call
  seeds = {re.search(r"\\22seed\\22: (\d+)", c).group(1) for c in forward}
  assert len(seeds) == 2                                           # layers draw different masks
  assert "tensor<2x2x16x16x" not in text                         # no [B, N, T, T] probabilities
