"""The lstm family: a stacked bidirectional LSTM (ELMo-style, Peters et al. 2018), proving that the targets and
heads do not depend on the encoder being a Transformer.

Parameters: `encoder/forward_i/cell/...` and `encoder/backward_i/cell/...` per layer (H/2 units each), then
`encoder/LayerNorm`. No Google, Hugging Face or UER BERT checkpoint holds such an encoder (UER's own lstm and
bilstm encoders are not BERT models, and import-uer refuses them), so it has no checkpoint names: conversion
refuses it with the family's statement below.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.models import encoders
from bert_jax.models.config import BertConfig
from bert_jax.models.layers import layer_norm


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
    lengths = jnp.sum(input_mask > 0, axis=-1).astype(jnp.int32)   # unpacked rows only (LstmFamily.packs)
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
    return x * (input_mask > 0)[..., None].astype(x.dtype)


@encoders.register
class LstmFamily(encoders.EncoderFamily):
  """Each layer is its own recurrence (nothing to scan or share); H/2 units per direction."""

  name = "lstm"
  module = LstmEncoder
  # packs stays False: nn.RNN's seq_lengths cut right padding only, so a packed row's second example would
  # start from the first one's state (and the backward pass the other way round); packed rows are refused.

  @classmethod
  def check_config(cls, config: BertConfig) -> None:
    if config.hidden_size % 2:
      raise ValueError(f"BertConfig.hidden_size={config.hidden_size}; the lstm encoder needs an even hidden_size "
                       "(two directions of H/2)")

  @classmethod
  def params(cls, config: BertConfig) -> int:
    """Per layer and direction, flax's OptimizedLSTMCell: 4 gates (i, f, g, o), each an input kernel [H, H/2]
    (no bias) and a recurrent kernel [H/2, H/2] + bias [H/2]; every layer reads H (the embeddings, then the two
    directions concatenated). Plus the final LayerNorm, 2 H. BERT-tiny's size (L2/H128): 197,888."""
    h, units = config.hidden_size, config.hidden_size // 2
    per_direction = 4 * (h * units + units * units + units)
    return config.num_hidden_layers * 2 * per_direction + 2 * h

  @classmethod
  def flops_per_sequence(cls, config: BertConfig, seq_len: int) -> float:
    """The input and recurrent matmuls of 4 gates, 2 directions and L layers at every one of the T steps (the
    recurrence runs over padding too): 6 x T x L x 2 x 4 (H x H/2 + (H/2)^2). Gate biases, nonlinearities and
    the LayerNorm are not counted (the usual MFU convention; 0.5% of the matmuls at H=128)."""
    h, units = config.hidden_size, config.hidden_size // 2
    return 6.0 * seq_len * config.num_hidden_layers * 2 * 4 * (h * units + units * units)

  @classmethod
  def checkpoint_names(cls, config: BertConfig):
    raise ValueError("encoder='lstm' has no counterpart in Google's, Hugging Face's or UER's BERT checkpoints "
                     "(only the transformer family converts)")
