"""The head as a serialized `jax.export` module (StableHLO): token ids in, the head's outputs out, the weights
inside. No TensorFlow.

    blob = export_stablehlo(head, batch="polymorphic")     # bytes; write as model.stablehlo
    exp = jax.export.deserialize(open("model.stablehlo", "rb").read())
    out = exp.call(input_ids, input_mask, segment_ids)     # int32 [batch, length] each -> {"probabilities": ...}

The batch and the length are symbolic (length <= max_position_embeddings), unless --batch gives a fixed batch.
Platforms: the module is lowered for cpu, cuda and tpu, so it runs where it is loaded.
"""

from __future__ import annotations

from typing import Callable, Dict

import jax
import jax.numpy as jnp
import numpy as np

PLATFORMS = ("cpu", "cuda", "tpu")


def input_specs(batch: str, max_positions: int):
  """Three int32 [b, t] ShapeDtypeStructs; `batch` "polymorphic" or a number."""
  b = "b" if batch == "polymorphic" else str(int(batch))
  shape = jax.export.symbolic_shape(f"{b}, t", constraints=[f"t <= {int(max_positions)}"])
  return [jax.ShapeDtypeStruct(shape, jnp.int32) for _ in range(3)]


def export_stablehlo(head, batch: str = "polymorphic") -> bytes:
  """The serialized jax.export.Exported of head.apply_fn with the weights closed over."""
  params = jax.tree.map(jnp.asarray, head.params)
  fn = head.apply_fn()

  def served(input_ids, input_mask, segment_ids):
    return fn(params, input_ids, input_mask, segment_ids)

  exp = jax.export.export(jax.jit(served), platforms=PLATFORMS)(*input_specs(batch, head.pre.config
                                                                             .max_position_embeddings))
  return bytes(exp.serialize())


def runner(blob: bytes) -> Callable[[Dict[str, np.ndarray]], Dict[str, np.ndarray]]:
  """feats {input_ids, input_mask, segment_ids} -> outputs (numpy), from a serialized module."""
  exp = jax.export.deserialize(bytearray(blob))

  def run(feats):
    out = exp.call(*(jnp.asarray(feats[k], jnp.int32) for k in ("input_ids", "input_mask", "segment_ids")))
    return {k: np.asarray(v) for k, v in out.items()}
  return run
