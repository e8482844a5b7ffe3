"""Parameter-tree utilities: scanned <-> per-layer layouts, counting, dummy inputs for init."""

from __future__ import annotations

import re
from typing import Any, Mapping

import flax
import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.models.config import BertConfig

_LAYER_RE = re.compile(r"^layer_(\d+)$")


def _encoder_parents(params: Mapping[str, Any]):
  """Yields the dicts that hold an encoder (params['bert']['encoder'] for every model in this package)."""
  if "encoder" in params and isinstance(params["encoder"], Mapping):
    yield params
  for v in params.values():
    if isinstance(v, Mapping):
      yield from _encoder_parents(v)


def scan_params(params: Mapping[str, Any]) -> dict:
  """Per-layer layout (encoder/layer_0..L-1) -> scanned layout (encoder/layers/layer, leading axis L)."""
  params = flax.core.unfreeze(params) if isinstance(params, flax.core.FrozenDict) else _copy(params)
  for parent in list(_encoder_parents(params)):
    enc = parent["encoder"]
    idx = sorted(int(m.group(1)) for k in enc if (m := _LAYER_RE.match(k)))
    if not idx:
      continue
    if idx != list(range(len(idx))):
      raise ValueError(f"encoder layers are not numbered 0..{len(idx) - 1}: {idx}")
    layers = [enc.pop(f"layer_{i}") for i in idx]
    enc["layers"] = {"layer": jax.tree.map(lambda *xs: jnp.stack(xs), *layers)}
  return params


def unscan_params(params: Mapping[str, Any]) -> dict:
  """Scanned layout -> per-layer layout (the interchange format of checkpoints and converters)."""
  params = flax.core.unfreeze(params) if isinstance(params, flax.core.FrozenDict) else _copy(params)
  for parent in list(_encoder_parents(params)):
    enc = parent["encoder"]
    if "layers" not in enc:
      continue
    stacked = enc.pop("layers")["layer"]
    n = jax.tree.leaves(stacked)[0].shape[0]
    for i in range(n):
      enc[f"layer_{i}"] = jax.tree.map(lambda x, i=i: x[i], stacked)
  return params


def _copy(tree):
  if isinstance(tree, Mapping):
    return {k: _copy(v) for k, v in tree.items()}
  return tree


def count_params(params) -> int:
  """Number of scalars; the tied MLM decoder is the embedding table, so it is counted once."""
  return int(sum(np.prod(x.shape) for x in jax.tree.leaves(params)))


def dummy_inputs(config: BertConfig, batch_size: int = 1, seq_len: int = 8, max_predictions: int = 2):
  """Arguments for `model.init`: (input_ids, input_mask, segment_ids, masked_lm_positions)."""
  del config
  ids = jnp.zeros((batch_size, seq_len), jnp.int32)
  return ids, jnp.ones_like(ids), jnp.zeros_like(ids), jnp.zeros((batch_size, max_predictions), jnp.int32)
