"""The modernbert family: ModernBERT (Warner et al. 2024, answerdotai/ModernBERT), as Hugging Face's
`ModernBertModel` computes it.

    config = BertConfig.from_size("tiny", encoder="modernbert", vocab_size=..., intermediate_size=...)

* Embeddings: token embeddings, a LayerNorm (bias if `norm_bias`, eps `norm_eps`), dropout; no position table and
  no token types (`ModernBertEmbeddings`, params bert/embeddings/{word_embeddings, norm}).
* Each layer is pre-norm, layer 0's attention norm the identity (as HF: the embeddings' norm precedes it):
      x = x + Wo(attention(rotary(Wqkv(attn_norm(x)))));  x = x + Wo(act(input) * gate), (input, gate) = Wi(mlp_norm(x))
  Wqkv is fused [H, 3H] (query, key, value; each heads x head_dim), Wi [H, 2I] (input then gate, GeGLU), biases
  only with `attention_bias` / `mlp_bias`. Rotary in the rotate-half form at each example's own positions
  (layers.example_positions), θ = `global_rope_theta` (160,000) in global layers and `local_rope_theta` (10,000)
  in sliding ones. Layer i is global when `layer_types[i]` is "full_attention", or, without layer_types, when
  i % `global_attn_every_n_layers` == 0 (layers 0, 3, 6, ...); the others attend within `local_attention`
  tokens in all (|i - j| <= 64 for 128) through models/local_attention.py (linear in T). A token never attends
  outside its example (layers.example_mask, also in the sliding layers). A final norm ends the stack
  (encoder/final_norm). Params: encoder/layer_i/{attn_norm (i > 0), attn/{Wqkv, Wo}, mlp_norm, mlp/{Wi, Wo}}.
* Heads: the MLM head is HF's prediction head (dense [bias if classifier_bias], classifier_activation, norm)
  and the decoder tied to the word embeddings with a bias if `decoder_bias` (lm_head below; params mlm/*).
  pooled_output is HF's sequence-classification features: the [CLS] vector or the mean over real tokens
  (`classifier_pooling`), then the prediction head (params bert/pooler/{dense, norm}); token_output is the
  same head on every token (HF's token classification and QA read it), so task heads map onto HF's.

Dropout: `hidden_dropout_prob` after the embeddings' norm and inside the GeGLU (HF's embedding_dropout and
mlp_dropout), `attention_probs_dropout_prob` on attention probabilities and after Wo (HF's attention_dropout).
Conversion to and from transformers: bert_jax/convert/hf_modernbert.py.
"""

from __future__ import annotations

from typing import Any, Dict, Tuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.models import attention, axes, encoders, local_attention, rotary
from bert_jax.models.config import BertConfig
from bert_jax.models.layers import (ACTIVATIONS, activation, constrain, example_mask, example_positions,
                                    example_slots, example_starts, kernel_init, maybe_remat, ones_init, zeros_init)

LAYER_TYPES = ("full_attention", "sliding_attention")
POOLINGS = ("cls", "mean")
_ACT = (axes.ACT_BATCH, axes.ACT_LENGTH, axes.ACT_EMBED)


def layer_types(config: BertConfig) -> Tuple[str, ...]:
  """Each layer's attention: config.layer_types, else global every global_attn_every_n_layers from layer 0."""
  if config.layer_types:
    return tuple(config.layer_types)
  n = config.global_attn_every_n_layers
  return tuple("full_attention" if i % n == 0 else "sliding_attention" for i in range(config.num_hidden_layers))


def norm(config: BertConfig, name: str) -> nn.LayerNorm:
  """ModernBERT's LayerNorm: eps norm_eps, a bias only with norm_bias; statistics in float32."""
  return nn.LayerNorm(epsilon=config.norm_eps, use_bias=config.norm_bias, dtype=config.compute_dtype,
                      param_dtype=config.parameter_dtype, scale_init=ones_init((axes.EMBED,)),
                      bias_init=zeros_init((axes.EMBED,)), name=name)


def linear(config: BertConfig, features: int, names, use_bias: bool, name: str) -> nn.Dense:
  """A dense layer, kernel [in, out] (HF's Linear weight transposed), an optional zero-initialised bias."""
  return nn.Dense(features, use_bias=use_bias, dtype=config.compute_dtype, param_dtype=config.parameter_dtype,
                  kernel_init=kernel_init(config, names), bias_init=zeros_init((names[-1],)), name=name)


class ModernBertEmbeddings(nn.Module):
  """input_ids [B, T] -> [B, T, H]: token embeddings, norm, dropout (segment_ids are not read: no token types)."""

  config: BertConfig
  deterministic: bool = True

  def setup(self):
    cfg = self.config
    self.word_embeddings = nn.Embed(cfg.vocab_size, cfg.hidden_size, dtype=cfg.compute_dtype,
                                    param_dtype=cfg.parameter_dtype,
                                    embedding_init=kernel_init(cfg, (axes.VOCAB, axes.EMBED)), name="word_embeddings")
    self.norm = norm(cfg, "norm")
    self.dropout = nn.Dropout(cfg.hidden_dropout_prob)

  def __call__(self, input_ids: jax.Array, segment_ids: jax.Array = None, project: bool = True,
               input_mask: jax.Array = None) -> jax.Array:
    # no token types; no factorised projection (check_config refuses embedding_size); packed rows' positions are
    # the encoder's rotary ones (example_positions), so input_mask is not read here
    del segment_ids, project, input_mask
    length = input_ids.shape[-1]
    if length > self.config.max_position_embeddings:
      raise ValueError(f"sequence length {length} exceeds max_position_embeddings="
                       f"{self.config.max_position_embeddings}")
    x = self.dropout(self.norm(self.word_embeddings(input_ids)), deterministic=self.deterministic)
    return constrain(x, _ACT)

  def embedding_table(self) -> jax.Array:
    return self.word_embeddings.embedding


class ModernBertAttention(nn.Module):
  """Fused-QKV self-attention with rotary positions, global or sliding-window. [B, T, H] -> [B, T, H]."""

  config: BertConfig
  sliding: bool
  deterministic: bool = True

  @nn.compact
  def __call__(self, x: jax.Array, input_mask: jax.Array, positions: jax.Array) -> jax.Array:
    cfg = self.config
    b, t, h = x.shape
    nh, hd = cfg.num_attention_heads, cfg.head_dim
    qkv = linear(cfg, 3 * h, (axes.EMBED, axes.MLP), cfg.attention_bias, "Wqkv")(x).reshape(b, t, 3, nh, hd)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    theta = cfg.local_rope_theta if self.sliding else cfg.global_rope_theta
    cos, sin = rotary.cos_sin(positions, hd, theta)
    q, k = rotary.apply_rotary(q, cos, sin), rotary.apply_rotary(k, cos, sin)
    names = (axes.ACT_BATCH, axes.ACT_LENGTH, axes.ACT_HEADS, axes.ACT_KV)
    q, k, v = (constrain(a, names) for a in (q, k, v))
    rate = cfg.attention_probs_dropout_prob
    dropout = (not self.deterministic) and rate > 0.0
    drop_probs = lambda probs: nn.Dropout(rate)(probs, deterministic=False)  # noqa: E731
    if self.sliding:
      ctx = local_attention.sliding_window_attention(q, k, v, input_mask, cfg.local_attention // 2,
                                                     cfg.local_attention_impl, drop_probs if dropout else None,
                                                     packed=cfg.packed)
    else:
      ctx = attention.attend(
          q, k, v, example_mask(input_mask), input_mask, impl=cfg.attention_impl, platform=jax.default_backend(),
          dropout_rate=rate, deterministic=self.deterministic, remat=cfg.remat_policy != "none",
          scan=cfg.scan_layers, packed=cfg.packed, dropout_fn=drop_probs, seed=attention.layer_seed(self.scope.path))
    ctx = constrain(ctx, names).reshape(b, t, h)
    out = linear(cfg, h, (axes.MLP, axes.EMBED), cfg.attention_bias, "Wo")(ctx)
    return nn.Dropout(rate)(out, deterministic=self.deterministic)


class ModernBertMLP(nn.Module):
  """GeGLU: (input, gate) = Wi(x); Wo(dropout(act(input) * gate)). [B, T, H] -> [B, T, H]."""

  config: BertConfig
  deterministic: bool = True

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    cfg = self.config
    wi = linear(cfg, 2 * cfg.intermediate_size, (axes.EMBED, axes.MLP), cfg.mlp_bias, "Wi")(x)
    inp, gate = jnp.split(wi, 2, axis=-1)
    y = activation(cfg.hidden_act)(inp) * gate
    y = constrain(y, (axes.ACT_BATCH, axes.ACT_LENGTH, axes.ACT_MLP))
    y = nn.Dropout(cfg.hidden_dropout_prob)(y, deterministic=self.deterministic)
    return linear(cfg, cfg.hidden_size, (axes.MLP, axes.EMBED), cfg.mlp_bias, "Wo")(y)


class ModernBertLayer(nn.Module):
  """One pre-norm layer; layer 0 has no attention norm (module docstring)."""

  config: BertConfig
  index: int
  deterministic: bool = True

  @nn.compact
  def __call__(self, x: jax.Array, input_mask: jax.Array, positions: jax.Array) -> jax.Array:
    cfg = self.config
    sliding = layer_types(cfg)[self.index] == "sliding_attention"
    h = x if self.index == 0 else norm(cfg, "attn_norm")(x)
    x = x + ModernBertAttention(cfg, sliding, self.deterministic, name="attn")(h, input_mask, positions)
    x = constrain(x, _ACT)
    x = x + ModernBertMLP(cfg, self.deterministic, name="mlp")(norm(cfg, "mlp_norm")(x))
    return constrain(x, _ACT)


class ModernBertEncoder(nn.Module):
  """num_hidden_layers ModernBertLayers and the final norm. [B, T, H], input_mask [B, T] -> [B, T, H]."""

  config: BertConfig
  deterministic: bool = True

  @nn.compact
  def __call__(self, x: jax.Array, input_mask: jax.Array, causal: bool = False) -> jax.Array:
    cfg = self.config
    if causal:
      raise ValueError("encoder='modernbert' is bidirectional; a causal target (lm) needs encoder='transformer'")
    positions = example_positions(input_mask)   # restart at each packed example, never a plain arange
    layer_cls = maybe_remat(ModernBertLayer, cfg, in_scan=False)   # remat_policy, as BERT's layers
    for i in range(cfg.num_hidden_layers):
      x = layer_cls(cfg, i, self.deterministic, name=f"layer_{i}")(x, input_mask, positions)
    return norm(cfg, "final_norm")(x)


class PredictionHead(nn.Module):
  """HF's ModernBertPredictionHead: norm(act(dense(x))), [..., H] -> [..., H] (dense bias if classifier_bias)."""

  config: BertConfig

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    cfg = self.config
    x = linear(cfg, cfg.hidden_size, (axes.EMBED, axes.MLP), cfg.classifier_bias, "dense")(x)
    return norm(cfg, "norm")(activation(cfg.classifier_activation)(x))


def pooled_features(config: BertConfig, x: jax.Array, input_mask: jax.Array) -> jax.Array:
  """[B, T, H] -> [B, H]: the [CLS] vector, or the mean over the real tokens (classifier_pooling). Packed rows
  (config.max_examples_per_row = K): [B, K, H], each example's own [CLS] or mean."""
  if config.packed:
    starts, _ = example_starts(input_mask, config.max_examples_per_row)
    if config.classifier_pooling == "cls":
      return jnp.take_along_axis(x, starts[..., None], axis=1)
    slots = example_slots(input_mask, config.max_examples_per_row).astype(jnp.float32)     # [B, T, K]
    total = jnp.einsum("btk,bth->bkh", slots, x.astype(jnp.float32))
    return (total / jnp.maximum(jnp.sum(slots, axis=1), 1)[..., None]).astype(x.dtype)
  if config.classifier_pooling == "cls":
    return x[:, 0]
  m = (input_mask > 0)[..., None]
  total = jnp.sum(jnp.where(m, x.astype(jnp.float32), 0.0), axis=1)
  return (total / jnp.maximum(jnp.sum(m, axis=1), 1)).astype(x.dtype)


# ---- the family ---------------------------------------------------------------------------------------------
def sliding_keys(seq_len: int, half: int) -> int:
  """Query-key pairs within |i - j| <= half in a row of seq_len tokens (edges clipped): sum over queries of
  min(i, half) + min(T - 1 - i, half) + 1."""
  t, w = seq_len, half
  below = t * (t - 1) // 2 if t - 1 <= w else w * (w + 1) // 2 + (t - 1 - w) * w   # sum_i min(i, w)
  return t + 2 * below


@encoders.register
class ModernBertFamily(encoders.EncoderFamily):
  """ModernBERT: rotary, GeGLU, pre-norm without biases, alternating global and sliding-window layers."""

  name = "modernbert"
  module = ModernBertEncoder
  packs = True   # example_mask in every layer (sliding ones too), rotary example_positions, per-example pooling
  embeddings = ModernBertEmbeddings
  positions = "rotary"

  @classmethod
  def check_config(cls, config: BertConfig) -> None:
    if config.position_embedding_type not in ("", "rotary"):
      raise ValueError(f"BertConfig.position_embedding_type={config.position_embedding_type!r}; encoder="
                       "'modernbert' has rotary positions and no learned position table: expected 'rotary' "
                       "(or leave it unset)")
    window = config.local_attention
    if window <= 0 or window % 2:
      raise ValueError(f"BertConfig.local_attention={window}; expected a positive even number of tokens (the "
                       "whole window: 128 = +-64)")
    if window > config.max_position_embeddings:
      raise ValueError(f"BertConfig.local_attention={window}; expected at most max_position_embeddings="
                       f"{config.max_position_embeddings}")
    if config.layer_types:
      bad = [t for t in config.layer_types if t not in LAYER_TYPES]
      if bad:
        raise ValueError(f"BertConfig.layer_types has {bad[0]!r}; expected each of {LAYER_TYPES}")
      if len(config.layer_types) != config.num_hidden_layers:
        raise ValueError(f"BertConfig.layer_types has {len(config.layer_types)} entries; expected one per layer "
                         f"(num_hidden_layers={config.num_hidden_layers})")
    if config.global_attn_every_n_layers < 1:
      raise ValueError(f"BertConfig.global_attn_every_n_layers={config.global_attn_every_n_layers}; expected >= 1")
    if config.classifier_pooling not in POOLINGS:
      raise ValueError(f"BertConfig.classifier_pooling={config.classifier_pooling!r}; expected one of {POOLINGS}")
    for field in ("hidden_act", "classifier_activation"):
      if getattr(config, field) not in ACTIVATIONS:
        raise ValueError(f"BertConfig.{field}={getattr(config, field)!r}; expected one of {tuple(ACTIVATIONS)}")
    if config.head_dim % 2:
      raise ValueError(f"BertConfig.num_attention_heads={config.num_attention_heads}; rotary positions need an "
                       f"even head size, got hidden_size / heads = {config.head_dim}")
    if config.embedding_size:
      raise ValueError(f"BertConfig.embedding_size={config.embedding_size}; encoder='modernbert' has no "
                       "factorised embeddings: expected 0")
    if config.local_attention_impl not in local_attention.IMPLS:
      raise ValueError(f"BertConfig.local_attention_impl={config.local_attention_impl!r}; expected one of "
                       f"{local_attention.IMPLS}")
    if config.local_attention_impl == "jax" and config.attention_probs_dropout_prob > 0:
      raise ValueError(f"BertConfig.local_attention_impl='jax' with attention_probs_dropout_prob="
                       f"{config.attention_probs_dropout_prob}: jax.nn.dot_product_attention has no attention "
                       "dropout; set attention_probs_dropout_prob=0 or local_attention_impl=blocked")

  @classmethod
  def pool(cls, config: BertConfig, sequence_output: jax.Array, input_mask: jax.Array, deterministic: bool
           ) -> Dict[str, jax.Array]:
    head = PredictionHead(config, name="pooler")
    return {"pooled_output": head(pooled_features(config, sequence_output, input_mask)),
            "token_output": head(sequence_output)}

  @classmethod
  def lm_head(cls, config: BertConfig) -> Dict[str, Any]:
    return {"dense_bias": config.classifier_bias, "act": config.classifier_activation, "norm_eps": config.norm_eps,
            "norm_bias": config.norm_bias, "decoder_bias": config.decoder_bias}

  @classmethod
  def params(cls, config: BertConfig) -> int:
    """L layers: Wqkv 3 H^2, Wo H^2, Wi 2 H I, Wo I H, the norms' H (2 H with bias) and the switched-on biases;
    layer 0 has no attention norm; the final norm is once per token, not counted."""
    h, i, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    norm_size = h * (2 if config.norm_bias else 1)
    per_layer = 4 * h * h + 3 * h * i + 2 * norm_size
    per_layer += 4 * h if config.attention_bias else 0
    per_layer += 2 * i + h if config.mlp_bias else 0
    return layers * per_layer - (norm_size if layers else 0)

  @classmethod
  def flops_per_sequence(cls, config: BertConfig, seq_len: int) -> float:
    """6 x params x T for the dense layers, + 12 x H x (query-key pairs) per layer for QK^T and probs x V (4 H
    FLOPs forward per pair): T^2 in a global layer, the pairs within +-local_attention/2 in a sliding one
    (sliding_keys; ~129 T for a window of 128), counting the work the window asks for, not the blocked kernel's
    3 x half keys per query."""
    h = config.hidden_size
    pairs = {"full_attention": seq_len * seq_len,
             "sliding_attention": sliding_keys(seq_len, config.local_attention // 2)}
    attn = sum(pairs[t] for t in layer_types(config))
    return 6.0 * cls.params(config) * seq_len + 12.0 * h * attn
