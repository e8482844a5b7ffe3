"""The head as a serialized `jax.export` module (StableHLO): token ids in, the head's outputs out, the weights
inside. No TensorFlow.

    blob = export_stablehlo(head, batch="polymorphic")     # bytes; write as model.stablehlo
    exp = jax.export.deserialize(open("model.stablehlo", "rb").read())
    out = exp.call(input_ids, input_mask, segment_ids)     # int32 [batch, length] each -> {"probabilities": ...}

The inputs are head.inputs in order (a CRF tagger adds word_mask, window_continues, window_continued; multiple
choice takes [batch, choices, length] ids and choice_mask). The batch, the number of choices and the length are
symbolic (2 <= length <= max_position_embeddings), unless --batch gives a fixed batch.
Platforms: the module is lowered for cpu, cuda and tpu, so it runs where it is loaded.
"""

from __future__ import annotations

from typing import Callable, Dict, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.export import heads

PLATFORMS = ("cpu", "cuda", "tpu")


def input_specs(batch: str, max_positions: int, inputs=None):
  """int32 ShapeDtypeStructs of `inputs` ({name: named dims}, heads.ID_INPUTS by default: three [b, t]);
  `batch` "polymorphic" or a number. One symbol per dimension name, shared by every input."""
  # t >= 2 ([CLS] and [SEP]): the CRF's Viterbi scans over t - 1 steps, which shape polymorphism must know >= 1
  b, c, t = jax.export.symbolic_shape("b, c, t", constraints=[f"t <= {int(max_positions)}", "t >= 2"])
  dims = {"batch": b if batch == "polymorphic" else int(batch), "choices": c, "length": t}
  return [jax.ShapeDtypeStruct(tuple(dims[d] for d in shape), jnp.int32)
          for shape in (inputs or heads.ID_INPUTS).values()]


def export_stablehlo(head, batch: str = "polymorphic") -> bytes:
  """The serialized jax.export.Exported of head.apply_fn with the weights closed over."""
  params = jax.tree.map(jnp.asarray, head.params)
  fn = head.apply_fn()

  def served(*inputs):
    return fn(params, *inputs)

  specs = input_specs(batch, head.pre.config.max_position_embeddings, head.inputs)
  exp = jax.export.export(jax.jit(served), platforms=PLATFORMS)(*specs)
  return bytes(exp.serialize())


def runner(blob: bytes, names: Sequence[str] = tuple(heads.ID_INPUTS)
           ) -> Callable[[Dict[str, np.ndarray]], Dict[str, np.ndarray]]:
  """feats {names...} -> outputs (numpy), from a serialized module (names: head.inputs)."""
  exp = jax.export.deserialize(bytearray(blob))

  def run(feats):
    out = exp.call(*(jnp.asarray(feats[k], jnp.int32) for k in names))
    return {k: np.asarray(v) for k, v in out.items()}
  return run
