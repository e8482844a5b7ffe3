"""The ONNX export: the graph (onnx_graph.py) written to model.onnx and run back in onnxruntime.

    write_onnx(head, "export/model.onnx", batch="polymorphic")
    run = runner("export/model.onnx")         # {input_ids, input_mask, segment_ids} int64 -> outputs

The model takes token ids (int64 [batch, length]; head.inputs: a CRF tagger also word_mask and its window
flags, multiple choice [batch, choices, length] and choice_mask); the tokenizer is the vocab.txt and signature.json's
"tokenizer" entry beside it (the same WordPiece as predict; tokenization.FullTokenizer reproduces it).
"""

from __future__ import annotations

from typing import Dict

import numpy as np
import onnx
import onnxruntime as ort

from bert_jax.export import onnx_graph


def write_onnx(head, path: str, batch: str = "polymorphic") -> None:
  """ValueError for a model or head the graph writer does not cover (onnx_graph's docstring)."""
  model = onnx_graph.build_onnx(head.pre.config, head.params, head)
  if batch != "polymorphic":
    for inp in model.graph.input:
      inp.type.tensor_type.shape.dim[0].dim_value = int(batch)
  onnx.save(model, path)


def runner(path: str):
  """feats -> outputs (numpy float32) through an onnxruntime CPU session."""
  opts = ort.SessionOptions()
  opts.log_severity_level = 3
  sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
  names = [o.name for o in sess.get_outputs()]
  inputs = [i.name for i in sess.get_inputs()]

  def run(feats: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    out = sess.run(names, {k: np.asarray(feats[k], np.int64) for k in inputs})
    return dict(zip(names, out))
  return run
