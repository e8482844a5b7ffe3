"""ALBERT's cross-layer sharing (Lan et al. 2020): one layer's parameters serve all `num_hidden_layers`
applications (`BertConfig.share_layers`), and the names that layer has in ALBERT's checkpoints.

Sharing is a documented extension of the transformer family, not a family of its own (it has no registry line):
- a saved ALBERT model says `encoder: "transformer", share_layers: true` in its model_config.json; an "albert"
  family would give the `encoder` field a second spelling of the same modules, and those files must keep loading;
- the shared layer is exactly a TransformerLayer, post- or pre-LN: sharing is a way of stacking layers, not a
  layer. `shared_layers` takes the layer class, and each family states whether its layers may be shared
  (`EncoderFamily.shares`; the registry refuses share_layers for the others, naming the families that can);
- ALBERT's other half, factorised embeddings (`embedding_size`), belongs to the embeddings
  (models/embeddings.py) and serves ELECTRA-Small too; an ALBERT checkpoint with one group per layer
  (num_hidden_groups = num_hidden_layers) is the plain transformer family with factorised embeddings.

Parameters: `encoder/shared/layer/...`, with no layer axis, whether or not `scan_layers` folds the L
applications into one nn.scan (whose parameters are then broadcast, so XLA compiles the layer once).
"""

from __future__ import annotations

from typing import Any, List, Tuple

import flax.linen as nn
import jax

from bert_jax.models.config import BertConfig
from bert_jax.models.encoders import LayerParam
from bert_jax.models.layers import ScanCell, maybe_remat

# ---- conversion names ----------------------------------------------------------------------------------------
# Where ALBERT's checkpoints keep layer `inner` of layer group `group`: transformers' AlbertModel and
# google-research/albert's TF variables (the names transformers' TF converter renames).
HF_LAYER = "albert.encoder.albert_layer_groups.{group}.albert_layers.{inner}"
GOOGLE_LAYER = "bert/encoder/transformer/group_{group}/inner_group_{inner}"

# A TransformerLayer's modules under those scopes (the same parameters as BERT's layer, other names). UER's ALBERT
# (parameter_sharing) is refused by bert_jax.convert.uer, so there is no UER column.
LAYER_NAMES: Tuple[LayerParam, ...] = (
    LayerParam(("attention", "query"), "attention_1/self/query", "attention.query", None, "qkv"),
    LayerParam(("attention", "key"), "attention_1/self/key", "attention.key", None, "qkv"),
    LayerParam(("attention", "value"), "attention_1/self/value", "attention.value", None, "qkv"),
    LayerParam(("attention", "output"), "attention_1/output/dense", "attention.dense", None, "out"),
    LayerParam(("attention_LayerNorm",), "LayerNorm", "attention.LayerNorm", None, "layer_norm"),
    LayerParam(("ffn", "intermediate"), "ffn_1/intermediate/dense", "ffn", None, "dense"),
    LayerParam(("ffn", "output"), "ffn_1/intermediate/output/dense", "ffn_output", None, "dense"),
    LayerParam(("output_LayerNorm",), "LayerNorm_1", "full_layer_layer_norm", None, "layer_norm"),
)


def checkpoint_layers(config: BertConfig, groups: int = 0, inner: int = 1) -> List[Tuple[Tuple[str, ...], int, int]]:
  """(our layer's path under the encoder, ALBERT layer group, inner layer) for each of our layers.

  share_layers: the one shared layer is group 0's. groups > 0: a source of `groups` groups of `inner` layers
  each, unrolled into this per-layer config (num_hidden_layers = source layers x inner): layer k = (i, j) =
  divmod(k, inner) reads inner layer j of the group source layer i runs, int(i / (source layers / groups)) as
  in transformers' AlbertTransformer (one source tensor feeds several of ours; the outputs are the same).
  Otherwise one group per layer."""
  if config.share_layers:
    return [(("shared", "layer"), 0, 0)]
  if groups:
    per_group = (config.num_hidden_layers // inner) / groups
    return [((f"layer_{k}",), int((k // inner) / per_group), k % inner) for k in range(config.num_hidden_layers)]
  return [((f"layer_{i}",), i, 0) for i in range(config.num_hidden_layers)]


# ---- the shared stack ----------------------------------------------------------------------------------------
class SharedStack(nn.Module):
  """One `layer_cls` layer applied `num_hidden_layers` times, unrolled. [B, T, H] -> [B, T, H]."""

  layer_cls: Any
  config: BertConfig
  deterministic: bool = True
  causal: bool = False

  @nn.compact
  def __call__(self, x: jax.Array, input_mask: jax.Array) -> jax.Array:
    cfg = self.config
    layer = maybe_remat(self.layer_cls, cfg, in_scan=False)(cfg, self.deterministic, self.causal, name="layer")
    for _ in range(cfg.num_hidden_layers):
      x = layer(x, input_mask)
    return x


def shared_layers(layer_cls, config: BertConfig, deterministic: bool, causal: bool, x: jax.Array,
                  input_mask: jax.Array, name: str = "shared") -> jax.Array:
  """x [B, T, H] through `num_hidden_layers` applications of one shared `layer_cls` layer, created as the
  calling module's child `name`: an nn.scan broadcasting its parameters when config.scan_layers (one compiled
  layer), else SharedStack. Call it inside a compact __call__."""
  if config.scan_layers:
    stack = nn.scan(ScanCell, variable_broadcast="params", split_rngs={"params": False, "dropout": True},
                    in_axes=nn.broadcast, length=config.num_hidden_layers)
    x, _ = stack(layer_cls, config, deterministic, causal, name=name)(x, input_mask)
    return x
  return SharedStack(layer_cls, config, deterministic, causal, name=name)(x, input_mask)
