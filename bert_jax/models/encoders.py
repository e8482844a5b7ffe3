"""Encoders with one interface: `Encoder(config, deterministic)(x [B,T,H], input_mask [B,T], causal) -> [B,T,H]`.

- `TransformerEncoder`: BERT's post-LN Transformer (or pre-LN), optionally scanned over layers and
  rematerialised.
- `LstmEncoder`: a stacked bidirectional LSTM (ELMo-style), proving that targets and heads do not depend on
  the encoder being a Transformer.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.models import axes
from bert_jax.models.config import BertConfig
from bert_jax.models.layers import (FeedForward, SelfAttention, causal_mask, constrain, layer_norm,
                                    padding_mask)

_ACT = (axes.ACT_BATCH, axes.ACT_LENGTH, axes.ACT_EMBED)

_REMAT_POLICIES = {
    "full": None,   # save nothing: recompute the whole layer in the backward pass
    "dots": jax.checkpoint_policies.checkpoint_dots,
    "dots_no_batch": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
    "minimal": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


class TransformerLayer(nn.Module):
  """One Transformer block. Post-LN (BERT): x = LN(x + Attn(x)); x = LN(x + FFN(x)).
  Pre-LN: x = x + Attn(LN(x)); x = x + FFN(LN(x))."""

  config: BertConfig
  deterministic: bool = True
  causal: bool = False

  @nn.compact
  def __call__(self, x: jax.Array, input_mask: jax.Array):
    cfg = self.config
    mask = causal_mask(input_mask) if self.causal else padding_mask(input_mask)
    attention = SelfAttention(cfg, deterministic=self.deterministic, name="attention")
    ffn = FeedForward(cfg, name="ffn")
    drop = nn.Dropout(cfg.hidden_dropout_prob)
    attn_ln = layer_norm(cfg, "attention_LayerNorm")
    out_ln = layer_norm(cfg, "output_LayerNorm")
    if cfg.layer_norm_type == "post":
      h = attention(x, mask, input_mask, causal=self.causal)
      x = attn_ln(x + drop(h, deterministic=self.deterministic))
      x = constrain(x, _ACT)
      h = ffn(x)
      x = out_ln(x + drop(h, deterministic=self.deterministic))
    else:
      h = attention(attn_ln(x), mask, input_mask, causal=self.causal)
      x = x + drop(h, deterministic=self.deterministic)
      x = constrain(x, _ACT)
      h = ffn(out_ln(x))
      x = x + drop(h, deterministic=self.deterministic)
    return constrain(x, _ACT)


class _ScanCell(nn.Module):
  """Adapts TransformerLayer to nn.scan's (carry, x) -> (carry, y) signature."""

  config: BertConfig
  deterministic: bool = True
  causal: bool = False

  @nn.compact
  def __call__(self, carry, input_mask):
    layer_cls = _maybe_remat(TransformerLayer, self.config, in_scan=True)
    carry = layer_cls(self.config, self.deterministic, self.causal, name="layer")(carry, input_mask)
    return carry, None


def _maybe_remat(cls, config: BertConfig, in_scan: bool):
  if config.remat_policy == "none":
    return cls
  return nn.remat(cls, policy=_REMAT_POLICIES[config.remat_policy], prevent_cse=not in_scan)


class _SharedStack(nn.Module):
  """ALBERT's cross-layer sharing: one TransformerLayer applied `num_hidden_layers` times. Parameters live in
  `shared/layer/...` (no layer axis) either way; with `scan_layers` the L applications are one nn.scan whose
  parameters are broadcast, so XLA compiles the layer once."""

  config: BertConfig
  deterministic: bool = True
  causal: bool = False

  @nn.compact
  def __call__(self, x: jax.Array, input_mask: jax.Array) -> jax.Array:
    cfg = self.config
    layer_cls = _maybe_remat(TransformerLayer, cfg, in_scan=False)
    layer = layer_cls(cfg, self.deterministic, self.causal, name="layer")
    for _ in range(cfg.num_hidden_layers):
      x = layer(x, input_mask)
    return x


class TransformerEncoder(nn.Module):
  """A stack of `num_hidden_layers` TransformerLayers. [B, T, H] -> [B, T, H].

  Parameters live in `layer_0 .. layer_{L-1}`, or stacked along a leading `layers` axis in
  `layers/layer/...` when `config.scan_layers` (see `bert_jax.models.params.scan_params`). With
  `config.share_layers` (ALBERT) one layer's parameters, in `shared/layer/...`, serve every layer.
  """

  config: BertConfig
  deterministic: bool = True

  @nn.compact
  def __call__(self, x: jax.Array, input_mask: jax.Array, causal: bool = False) -> jax.Array:
    cfg = self.config
    if cfg.share_layers and cfg.scan_layers:
      stack = nn.scan(_ScanCell, variable_broadcast="params", split_rngs={"params": False, "dropout": True},
                      in_axes=nn.broadcast, length=cfg.num_hidden_layers)
      x, _ = stack(cfg, self.deterministic, causal, name="shared")(x, input_mask)
    elif cfg.share_layers:
      x = _SharedStack(cfg, self.deterministic, causal, name="shared")(x, input_mask)
    elif cfg.scan_layers:
      stack = nn.scan(_ScanCell, variable_axes={"params": 0}, split_rngs={"params": True, "dropout": True},
                      in_axes=nn.broadcast, length=cfg.num_hidden_layers,
                      metadata_params={nn.PARTITION_NAME: axes.LAYERS})
      x, _ = stack(cfg, self.deterministic, causal, name="layers")(x, input_mask)
    else:
      layer_cls = _maybe_remat(TransformerLayer, cfg, in_scan=False)
      for i in range(cfg.num_hidden_layers):
        x = layer_cls(cfg, self.deterministic, causal, name=f"layer_{i}")(x, input_mask)
    if cfg.layer_norm_type == "pre":
      x = layer_norm(cfg, "final_LayerNorm")(x)
    return x


class LstmEncoder(nn.Module):
  """Stacked bidirectional LSTM (ELMo-style): H/2 units per direction, padding-aware. [B,T,H] -> [B,T,H]."""

  config: BertConfig
  deterministic: bool = True

  @nn.compact
  def __call__(self, x: jax.Array, input_mask: jax.Array, causal: bool = False) -> jax.Array:
    cfg = self.config
    if causal:
      raise ValueError("the bidirectional lstm encoder sees future tokens; it cannot serve a causal LM "
                       "target (use encoder='transformer')")
    lengths = jnp.sum(input_mask, axis=-1).astype(jnp.int32)
    units = cfg.hidden_size // 2
    for i in range(cfg.num_hidden_layers):
      # parent=None: the cell is adopted by its nn.RNN wrapper (params forward_i/cell, backward_i/cell).
      cell = lambda: nn.OptimizedLSTMCell(  # noqa: E731
          units, dtype=cfg.compute_dtype, param_dtype=cfg.parameter_dtype, parent=None)
      forward = nn.RNN(cell(), name=f"forward_{i}")
      backward = nn.RNN(cell(), reverse=True, keep_order=True, name=f"backward_{i}")
      h = jnp.concatenate([forward(x, seq_lengths=lengths), backward(x, seq_lengths=lengths)], axis=-1)
      h = nn.Dropout(cfg.hidden_dropout_prob)(h, deterministic=self.deterministic)
      x = h if i == 0 else x + h   # residual between layers keeps deep stacks trainable
    x = layer_norm(cfg, "LayerNorm")(x)
    return x * input_mask[..., None].astype(x.dtype)


ENCODERS = {"transformer": TransformerEncoder, "lstm": LstmEncoder}


def make_encoder(config: BertConfig, deterministic: bool, name: str = "encoder") -> nn.Module:
  return ENCODERS[config.encoder](config, deterministic=deterministic, name=name)
