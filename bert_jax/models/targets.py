"""The layers of the pre-training objectives' heads: BERT's LM head (MLM, causal LM, ELECTRA's discriminator
MLM) and the sentence-pair classifier (NSP, SOP). Which objective uses which, its loss and its name are the
objective's own (models/objectives/).

Each head is a small module on top of the encoder output with no knowledge of which encoder produced it.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.models import axes, encoders
from bert_jax.models.config import BertConfig
from bert_jax.models.layers import activation, constrain, dense, layer_norm, ones_init, zeros_init


def gather_positions(sequence: jax.Array, positions: jax.Array) -> jax.Array:
  """sequence [B, T, H], positions [B, P] -> [B, P, H]. The MLM head runs on P << T positions only."""
  return jnp.take_along_axis(sequence, positions[..., None].astype(jnp.int32), axis=1)


class LanguageModelHead(nn.Module):
  """BERT's MLM head: dense(E) + act + LayerNorm + decoder tied to the word embeddings + output bias.

  hidden [B, P, H], table [V, E] -> logits [B, P, V] in float32 (bf16 inputs, f32 accumulation); E = H
  except with factorised embeddings (ALBERT's MLM head transforms H -> E).
  """

  config: BertConfig

  @nn.compact
  def __call__(self, hidden: jax.Array, table: jax.Array) -> jax.Array:
    cfg = self.config
    width = table.shape[-1]
    own = encoders.family(cfg.encoder).lm_head(cfg)
    if own is not None:
      return self._family_head(hidden, table, own)
    h = dense(cfg, width, (axes.EMBED, axes.MLP) if width == cfg.hidden_size else (axes.EMBED, None),
              "transform", bias_axis=axes.MLP if width == cfg.hidden_size else None)(hidden)
    h = activation(cfg.hidden_act)(h)
    h = layer_norm(cfg, "LayerNorm")(h)
    # Pin [B, P, H] to (batch, -, replicated H) before the tied decoder: without it, XLA's partitioner
    # (jax 0.10.2, Shardy and GSPMD) computes wrong gradients on a data x fsdp x tensor = 2x2x2 mesh with
    # the default rules (the forward is right). Also the layout the decoder matmul wants anyway.
    h = constrain(h, (axes.ACT_BATCH, axes.ACT_LENGTH, axes.ACT_EMBED))
    bias = self.param("output_bias", zeros_init((axes.VOCAB,)), (cfg.vocab_size,), cfg.parameter_dtype)
    logits = jnp.einsum("bph,vh->bpv", h.astype(cfg.compute_dtype), table.astype(cfg.compute_dtype),
                        preferred_element_type=jnp.float32)
    return logits + bias.astype(jnp.float32)

  def _family_head(self, hidden: jax.Array, table: jax.Array, own: dict) -> jax.Array:
    """The head as the encoder family states it (EncoderFamily.lm_head; ModernBERT's: biases optional, its own
    activation and eps); the same parameter names as BERT's head, less the biases switched off."""
    cfg = self.config
    width = table.shape[-1]
    h = nn.Dense(width, use_bias=own["dense_bias"], dtype=cfg.compute_dtype, param_dtype=cfg.parameter_dtype,
                 kernel_init=nn.with_logical_partitioning(nn.initializers.truncated_normal(cfg.initializer_range),
                                                          (axes.EMBED, axes.MLP)),
                 bias_init=zeros_init((axes.MLP,)), name="transform")(hidden)
    h = activation(own["act"])(h)
    h = nn.LayerNorm(epsilon=own["norm_eps"], use_bias=own["norm_bias"], dtype=cfg.compute_dtype,
                     param_dtype=cfg.parameter_dtype, scale_init=ones_init((axes.EMBED,)),
                     bias_init=zeros_init((axes.EMBED,)), name="LayerNorm")(h)
    h = constrain(h, (axes.ACT_BATCH, axes.ACT_LENGTH, axes.ACT_EMBED))
    logits = jnp.einsum("bph,vh->bpv", h.astype(cfg.compute_dtype), table.astype(cfg.compute_dtype),
                        preferred_element_type=jnp.float32)
    if own["decoder_bias"]:
      bias = self.param("output_bias", zeros_init((axes.VOCAB,)), (cfg.vocab_size,), cfg.parameter_dtype)
      logits = logits + bias.astype(jnp.float32)
    return logits


def sentence_pair_head(config: BertConfig, name: str) -> nn.Dense:
  """NSP / SOP classifier on the pooled [CLS] vector: [B, H] -> [B, 2] (params {kernel [H, 2], bias [2]})."""
  return dense(config, 2, (axes.MLP, None), name)
