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


class SegmentedRNN(nn.Module):
  """One direction of an LSTM layer over rows that may hold several examples: the carry restarts from zeros at
  every example's first token (reading left to right) or last token (`reverse`: right to left), so no state
  passes between examples and padding (a run of its own, after the last example) reaches nothing real.
  x [B, T, H], example_ids [B, T] (input_mask: 0/1 unpacked, 1..K packed) -> [B, T, units], in the input order.
  Parameters `cell/...`, as flax's nn.RNN keeps them."""

  cell: nn.RNNCellBase
  reverse: bool = False

  @nn.compact
  def __call__(self, x: jax.Array, example_ids: jax.Array) -> jax.Array:
    ids = example_ids.astype(jnp.int32)
    if self.reverse:   # the whole row backwards: each example's last token comes first, padding before it
      x, ids = x[:, ::-1], ids[:, ::-1]
    restart = ids != jnp.pad(ids, ((0, 0), (1, 0)), constant_values=-1)[:, :-1]   # [B, T]: an example begins

    def step(cell, carry, inputs):
      x_t, restart_t = inputs
      carry = jax.tree_util.tree_map(lambda c: jnp.where(restart_t[:, None], jnp.zeros_like(c), c), carry)
      return cell(carry, x_t)

    carry = self.cell.initialize_carry(jax.random.key(0), x[:, 0].shape)   # zeros (OptimizedLSTMCell)
    scan = nn.scan(step, variable_broadcast="params", split_rngs={"params": False}, in_axes=1, out_axes=1)
    _, y = scan(self.cell, carry, (x, restart))
    return y[:, ::-1] if self.reverse else y


class LstmEncoder(nn.Module):
  """Stacked bidirectional LSTM (ELMo-style): H/2 units per direction, padding-aware. [B,T,H] -> [B,T,H].
  input_mask [B, T] 0/1, or on packed rows the example ids 1..K (0 = padding): each example is its own sequence
  in both directions (SegmentedRNN restarts the carry at its ends)."""

  config: BertConfig
  deterministic: bool = True

  @nn.compact
  def __call__(self, x: jax.Array, input_mask: jax.Array, causal: bool = False) -> jax.Array:
    cfg = self.config
    if causal:
      raise ValueError("the bidirectional lstm encoder sees future tokens; it cannot serve a causal LM "
                       "target (use encoder='transformer')")
    units = cfg.hidden_size // 2
    for i in range(cfg.num_hidden_layers):
      # parent=None: the cell is adopted by its SegmentedRNN (params forward_i/cell, backward_i/cell).
      cell = lambda: nn.OptimizedLSTMCell(  # noqa: E731
          units, dtype=cfg.compute_dtype, param_dtype=cfg.parameter_dtype, parent=None)
      forward = SegmentedRNN(cell(), name=f"forward_{i}")
      backward = SegmentedRNN(cell(), reverse=True, name=f"backward_{i}")
      h = jnp.concatenate([forward(x, input_mask), backward(x, input_mask)], axis=-1)
      h = nn.Dropout(cfg.hidden_dropout_prob)(h, deterministic=self.deterministic)
      x = h if i == 0 else x + h   # residual between layers keeps deep stacks trainable
    x = layer_norm(cfg, "LayerNorm")(x)
    return x * (input_mask > 0)[..., None].astype(x.dtype)


@encoders.register
class LstmFamily(encoders.EncoderFamily):
  """Each layer is its own recurrence (nothing to scan or share); H/2 units per direction."""

  name = "lstm"
  module = LstmEncoder
  packs = True   # SegmentedRNN restarts both directions at every example's ends; positions restart in the embeddings

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
