"""The transformer family: BERT's post-LN Transformer (Devlin et al. 2019), or pre-LN (`layer_norm_type="pre"`),
optionally scanned over layers (`scan_layers`), rematerialised (`remat_policy`) and, with albert.py, sharing one
layer's parameters across the stack (`share_layers`, ALBERT).

Parameters live in `encoder/layer_0 .. layer_{L-1}`; stacked along a leading `layers` axis in
`encoder/layers/layer/...` when scanned (see `bert_jax.models.params.scan_params`); in `encoder/shared/layer/...`
when shared; pre-LN adds `encoder/final_LayerNorm`.

Conversion: the post-LN layer is BERT's, and `CHECKPOINT_NAMES` gives each of its modules' names in Google's TF1
checkpoints (under bert/encoder/layer_i), Hugging Face's BertLayer (bert.encoder.layer.i) and UER-py's
transformer (encoder.transformer.i). No released checkpoint in those formats holds the pre-LN variant.
"""

from __future__ import annotations

from typing import Tuple

import flax.linen as nn
import jax

from bert_jax.models import axes, encoders
from bert_jax.models.config import BertConfig
from bert_jax.models.encoders import albert
from bert_jax.models.layers import (FeedForward, ScanCell, SelfAttention, constrain, layer_norm, maybe_remat,
                                    self_attention_mask)

_ACT = (axes.ACT_BATCH, axes.ACT_LENGTH, axes.ACT_EMBED)


class TransformerLayer(nn.Module):
  """One Transformer block. Post-LN (BERT): x = LN(x + Attn(x)); x = LN(x + FFN(x)).
  Pre-LN: x = x + Attn(LN(x)); x = x + FFN(LN(x))."""

  config: BertConfig
  deterministic: bool = True
  causal: bool = False

  @nn.compact
  def __call__(self, x: jax.Array, input_mask: jax.Array):
    cfg = self.config
    mask = self_attention_mask(input_mask, packed=cfg.packed, causal=self.causal)
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


class TransformerEncoder(nn.Module):
  """A stack of `num_hidden_layers` TransformerLayers. [B, T, H] -> [B, T, H] (parameters: module docstring)."""

  config: BertConfig
  deterministic: bool = True

  @nn.compact
  def __call__(self, x: jax.Array, input_mask: jax.Array, causal: bool = False) -> jax.Array:
    cfg = self.config
    if cfg.share_layers:
      x = albert.shared_layers(TransformerLayer, cfg, self.deterministic, causal, x, input_mask)
    elif cfg.scan_layers:
      stack = nn.scan(ScanCell, variable_axes={"params": 0}, split_rngs={"params": True, "dropout": True},
                      in_axes=nn.broadcast, length=cfg.num_hidden_layers,
                      metadata_params={nn.PARTITION_NAME: axes.LAYERS})
      x, _ = stack(TransformerLayer, cfg, self.deterministic, causal, name="layers")(x, input_mask)
    else:
      layer_cls = maybe_remat(TransformerLayer, cfg, in_scan=False)
      for i in range(cfg.num_hidden_layers):
        x = layer_cls(cfg, self.deterministic, causal, name=f"layer_{i}")(x, input_mask)
    if cfg.layer_norm_type == "pre":
      x = layer_norm(cfg, "final_LayerNorm")(x)
    return x


# Each module of a post-LN layer under Google's TF1 scope bert/encoder/layer_i/, Hugging Face's
# bert.encoder.layer.i. and UER-py's encoder.transformer.i. (UER's converter to Hugging Face, whose renames
# bert_jax.convert.uer follows).
CHECKPOINT_NAMES: Tuple[encoders.LayerParam, ...] = (
    encoders.LayerParam(("attention", "query"), "attention/self/query", "attention.self.query",
                        "self_attn.linear_layers.0", "qkv"),
    encoders.LayerParam(("attention", "key"), "attention/self/key", "attention.self.key",
                        "self_attn.linear_layers.1", "qkv"),
    encoders.LayerParam(("attention", "value"), "attention/self/value", "attention.self.value",
                        "self_attn.linear_layers.2", "qkv"),
    encoders.LayerParam(("attention", "output"), "attention/output/dense", "attention.output.dense",
                        "self_attn.final_linear", "out"),
    encoders.LayerParam(("attention_LayerNorm",), "attention/output/LayerNorm", "attention.output.LayerNorm",
                        "layer_norm_1", "layer_norm"),
    encoders.LayerParam(("ffn", "intermediate"), "intermediate/dense", "intermediate.dense",
                        "feed_forward.linear_1", "dense"),
    encoders.LayerParam(("ffn", "output"), "output/dense", "output.dense", "feed_forward.linear_2", "dense"),
    encoders.LayerParam(("output_LayerNorm",), "output/LayerNorm", "output.LayerNorm", "layer_norm_2",
                        "layer_norm"),
)


@encoders.register
class TransformerFamily(encoders.EncoderFamily):
  """BERT's Transformer: identical layers (so scannable) that ALBERT's sharing may share."""

  name = "transformer"
  module = TransformerEncoder
  scans = True
  shares = True
  packs = True   # layers.self_attention_mask: block-diagonal on packed rows (the embeddings restart positions)

  @classmethod
  def checkpoint_names(cls, config: BertConfig) -> Tuple[encoders.LayerParam, ...]:
    if config.layer_norm_type != "post":
      raise ValueError(f"layer_norm_type={config.layer_norm_type!r}: only BERT's post-LN Transformer has Google, "
                       "Hugging Face and UER equivalents")
    return CHECKPOINT_NAMES

  @classmethod
  def params(cls, config: BertConfig) -> int:
    """L layers of kernels + biases + LayerNorms: Q, K, V and output 4 (H^2 + H), FFN 2 H I + I + H, two
    LayerNorms 4 H; 7,087,872 per BERT-base layer. A shared layer counts L times (ALBERT costs BERT's FLOPs);
    pre-LN's final LayerNorm (2 H, once per token) is not counted."""
    h, i = config.hidden_size, config.intermediate_size
    per_layer = 4 * (h * h + h) + 2 * h * i + i + h + 4 * h
    return config.num_hidden_layers * per_layer

  @classmethod
  def flops_per_sequence(cls, config: BertConfig, seq_len: int) -> float:
    """6 x params x T for the dense layers, + 12 x L x T^2 x H for attention's scores QK^T and probs x V (forward
    4 T^2 H per layer, the same for any head count)."""
    h, layers = config.hidden_size, config.num_hidden_layers
    return 6.0 * cls.params(config) * seq_len + 12.0 * layers * seq_len ** 2 * h
