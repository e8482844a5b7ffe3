"""Building blocks shared by the encoders and targets: initialisers, dense layers, attention, FFN, and the
rematerialisation and nn.scan adapters any encoder family's layer stack may use."""

from __future__ import annotations

import functools
from typing import Any

import flax.linen as nn
from flax.linen.dtypes import promote_dtype
import jax
import jax.numpy as jnp

from bert_jax.models import attention, axes
from bert_jax.models.config import BertConfig

Array = jax.Array


def kernel_init(config: BertConfig, names):
  """Truncated normal(stddev=initializer_range), as Google BERT, with logical axis names."""
  return nn.with_logical_partitioning(nn.initializers.truncated_normal(config.initializer_range), names)


def zeros_init(names):
  return nn.with_logical_partitioning(nn.initializers.zeros_init(), names)


def ones_init(names):
  return nn.with_logical_partitioning(nn.initializers.ones_init(), names)


def constrain(x: Array, names) -> Array:
  """Sharding constraint by logical names; a no-op outside a mesh + rules context."""
  return nn.with_logical_constraint(x, names)


# hidden_act names -> functions: the one list of what the model computes (the converters check against it).
ACTIVATIONS = {
    "gelu": functools.partial(jax.nn.gelu, approximate=False),   # BERT's exact erf GELU
    **{n: functools.partial(jax.nn.gelu, approximate=True) for n in ("gelu_new", "gelu_tanh", "gelu_pytorch_tanh")},
    "relu": jax.nn.relu,
    "silu": jax.nn.silu,
    "swish": jax.nn.silu,
    "tanh": jnp.tanh,
}


def activation(name: str):
  if name in ACTIVATIONS:
    return ACTIVATIONS[name]
  raise ValueError(f"unknown hidden_act {name!r}; expected gelu, gelu_new, relu, silu or tanh")


def layer_norm(config: BertConfig, name: str) -> nn.LayerNorm:
  """LayerNorm with BERT's eps; statistics in float32 even for bf16 activations."""
  return nn.LayerNorm(epsilon=config.layer_norm_eps, dtype=config.compute_dtype,
                      param_dtype=config.parameter_dtype, scale_init=ones_init((axes.EMBED,)),
                      bias_init=zeros_init((axes.EMBED,)), name=name)


def dense(config: BertConfig, features: int, names, name: str, bias_axis=None, bias_value: float = 0.0) -> nn.Dense:
  """BERT's dense layer: kernel_init, a bias starting at bias_value (zeros unless asked), logical axis names."""
  bias_names = (bias_axis or names[-1],)
  bias_init = zeros_init(bias_names) if not bias_value else nn.with_logical_partitioning(
      nn.initializers.constant(bias_value), bias_names)
  return nn.Dense(features, dtype=config.compute_dtype, param_dtype=config.parameter_dtype,
                  kernel_init=kernel_init(config, names), bias_init=bias_init, name=name)


# Packed rows. `input_mask` [B, T] is BERT's 0/1 mask on an unpacked row; a packed row holds several examples
# and its input_mask numbers them: 0 = padding, k >= 1 = a token of the row's k-th example (Graphcore's packed
# BERT and the Pallas kernels' SegmentIds use the same convention). Every value test is therefore `> 0` or an
# equality between ids, never arithmetic on the mask; on an unpacked row the helpers below reduce to BERT's.
def example_mask(input_mask: Array) -> Array:
  """[B, T] example ids -> boolean [B, 1, T, T]: a query attends to the real keys of its own example only
  (block-diagonal). On unpacked rows it equals padding_mask broadcast over queries."""
  ids = input_mask.astype(jnp.int32)
  return ((ids[:, :, None] == ids[:, None, :]) & (ids[:, None, :] > 0))[:, None]


def example_positions(input_mask: Array) -> Array:
  """[B, T] example ids -> int32 [B, T] positions that restart at 0 where each example starts (a token whose
  id differs from its left neighbour's). Real tokens of an unpacked row get 0..n-1 (padding is a run of its
  own and restarts too: it is never read)."""
  ids = input_mask.astype(jnp.int32)
  length = ids.shape[-1]
  index = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), ids.shape)
  previous = jnp.pad(ids, ((0, 0), (1, 0)), constant_values=-1)[:, :-1]
  start = jnp.where(ids != previous, index, 0)
  return index - jax.lax.cummax(start, axis=1)


def example_starts(input_mask: Array, max_examples: int) -> tuple:
  """[B, T] example ids -> (int32 [B, K] the position of each example's first token ([CLS]), bool [B, K] whether
  the row holds example k+1); K = max_examples. An absent example's start is 0 (read, then weighted 0)."""
  slot = example_slots(input_mask, max_examples)                                  # [B, T, K]
  return jnp.argmax(slot, axis=1).astype(jnp.int32), jnp.any(slot, axis=1)


def example_slots(input_mask: Array, max_examples: int) -> Array:
  """[B, T] example ids -> bool [B, T, K]: token t belongs to example k+1 (pooling over each example's tokens)."""
  return input_mask.astype(jnp.int32)[:, :, None] == jnp.arange(1, max_examples + 1, dtype=jnp.int32)


def self_attention_mask(input_mask: Array, packed: bool, causal: bool = False) -> Array:
  """The boolean mask a bidirectional (or causal) encoder layer attends under: BERT's padding mask
  [B, 1, 1, T] on unpacked rows, the block-diagonal example_mask [B, 1, T, T] on packed ones."""
  mask = example_mask(input_mask) if packed else padding_mask(input_mask)
  if causal:
    length = input_mask.shape[-1]
    mask = mask & jnp.tril(jnp.ones((length, length), dtype=bool))[None, None]
  return mask


def padding_mask(input_mask: Array) -> Array:
  """[B, T] 0/1 -> boolean [B, 1, 1, T]: every query may attend to every real key."""
  return (input_mask > 0)[:, None, None, :]


class DenseGeneral(nn.Module):
  """Contracts the last `num_in_axes` input axes with a kernel [*in, *features], plus a bias [*features].

  Unlike flax's nn.DenseGeneral (which initialises a flattened 2-D kernel and reshapes it), the kernel is
  created at its full rank, so its logical axis names match its rank; flax's version fails under a global
  mesh (jax.set_mesh) because the names are applied to the 2-D kernel. Same init values, same param names.
  """

  config: BertConfig
  features: tuple
  num_in_axes: int
  kernel_names: tuple
  bias_names: tuple

  @nn.compact
  def __call__(self, x: Array) -> Array:
    cfg = self.config
    n = self.num_in_axes
    kernel = self.param("kernel", kernel_init(cfg, self.kernel_names), x.shape[-n:] + tuple(self.features),
                        cfg.parameter_dtype)
    bias = self.param("bias", zeros_init(self.bias_names), tuple(self.features), cfg.parameter_dtype)
    x, kernel, bias = promote_dtype(x, kernel, bias, dtype=cfg.compute_dtype)
    contract = (tuple(range(x.ndim - n, x.ndim)), tuple(range(n)))
    y = jax.lax.dot_general(x, kernel, (contract, ((), ())))
    return y + bias


class SelfAttention(nn.Module):
  """Multi-head self-attention. Inputs [B, T, H] -> [B, T, H].

  The kernel is chosen per call by `attention.resolve_attention` from `config.attention_impl`, the
  platform, the dtype and whether attention dropout is active (see bert_jax/models/attention.py): the
  einsum/softmax path that materialises [B, heads, T, T] probabilities (needed for flax dropout),
  `jax.nn.dot_product_attention` (XLA or cuDNN), cuDNN fused attention with in-kernel dropout, or Pallas
  flash attention on TPUs.
  """

  config: BertConfig
  deterministic: bool = True

  @nn.compact
  def __call__(self, x: Array, mask: Array, input_mask: Array, causal: bool = False) -> Array:
    cfg = self.config
    nh, hd = cfg.num_attention_heads, cfg.head_dim
    proj = functools.partial(DenseGeneral, cfg, (nh, hd), 1, (axes.EMBED, axes.HEADS, axes.KV),
                             (axes.HEADS, axes.KV))
    q = proj(name="query")(x)
    k = proj(name="key")(x)
    v = proj(name="value")(x)
    qkv_names = (axes.ACT_BATCH, axes.ACT_LENGTH, axes.ACT_HEADS, axes.ACT_KV)
    q, k, v = (constrain(t, qkv_names) for t in (q, k, v))
    rate = cfg.attention_probs_dropout_prob
    ctx = attention.attend(
        q, k, v, mask, input_mask, impl=cfg.attention_impl, platform=jax.default_backend(),
        dropout_rate=rate, deterministic=self.deterministic, causal=causal,
        remat=cfg.remat_policy != "none", scan=cfg.scan_layers, packed=cfg.packed,
        dropout_fn=lambda probs: nn.Dropout(rate)(probs, deterministic=False),
        seed=attention.layer_seed(self.scope.path))
    ctx = constrain(ctx, qkv_names)
    out = DenseGeneral(cfg, (cfg.hidden_size,), 2, (axes.HEADS, axes.KV, axes.EMBED), (axes.EMBED,),
                       name="output")(ctx)
    return out


class FeedForward(nn.Module):
  """Position-wise FFN: dense(4H) + GELU + dense(H). [B, T, H] -> [B, T, H]."""

  config: BertConfig

  @nn.compact
  def __call__(self, x: Array) -> Array:
    cfg = self.config
    h = dense(cfg, cfg.intermediate_size, (axes.EMBED, axes.MLP), "intermediate")(x)
    h = activation(cfg.hidden_act)(h)
    h = constrain(h, (axes.ACT_BATCH, axes.ACT_LENGTH, axes.ACT_MLP))
    return dense(cfg, cfg.hidden_size, (axes.MLP, axes.EMBED), "output")(h)


# config.remat_policy -> what a rematerialised layer keeps from its forward pass (models.config.REMAT_POLICIES).
_REMAT_POLICIES = {
    "full": None,   # save nothing: recompute the whole layer in the backward pass
    "dots": jax.checkpoint_policies.checkpoint_dots,
    "dots_no_batch": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
    "minimal": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


def maybe_remat(cls, config: BertConfig, in_scan: bool):
  """`cls` rematerialised by config.remat_policy ("none": as is). Inside nn.scan, CSE across iterations cannot
  undo the remat, so prevent_cse (which costs fusions) is off there."""
  if config.remat_policy == "none":
    return cls
  return nn.remat(cls, policy=_REMAT_POLICIES[config.remat_policy], prevent_cse=not in_scan)


class ScanCell(nn.Module):
  """Adapts an encoder layer, `layer_cls(config, deterministic, causal, name=...)(x [B,T,H], input_mask [B,T])`,
  to nn.scan's (carry, x) -> (carry, y) signature; its parameters live under `layer`."""

  layer_cls: Any
  config: BertConfig
  deterministic: bool = True
  causal: bool = False

  @nn.compact
  def __call__(self, carry, input_mask):
    layer_cls = maybe_remat(self.layer_cls, self.config, in_scan=True)
    carry = layer_cls(self.config, self.deterministic, self.causal, name="layer")(carry, input_mask)
    return carry, None
