"""A sentence-transformers folder: the Hugging Face BERT folder (convert.hf, encoder only) plus modules.json,
1_Pooling/config.json (+ 2_Dense for the pooler, + 3_Normalize) from the head's pooling and normalisation; for
pooling=splade a SparseEncoder folder (the masked-LM folder, MLMTransformer + 1_SpladePooling + 2_Normalize).

    write_st(head, "export/st")            # then SentenceTransformer("export/st").encode(texts)
"""

from __future__ import annotations

import os
from typing import Dict, Sequence

import numpy as np

from bert_jax.convert import hf, mapping, st_modules
from bert_jax.errors import UserError


def write_st(head, output: str) -> None:
  if head.kind != "features":
    raise UserError("sentence-transformers exports sentence features; the head is " + head.kind)
  if head.pooling == "cls" and "pooler" not in head.pre.params["bert"]:
    raise UserError(f"--pooling=cls reads the pooler, which {head.pre.directory} lacks; use first or mean")
  try:
    if head.pooling == "splade":   # SparseEncoder: the masked-LM folder, then SpladePooling
      hf.write_hf(head.pre, output, heads="mlm")
      st_modules.write_sparse_pipeline(output, head.pre.config.vocab_size, head.normalize, head.max_seq_length)
      return
    hf.write_hf(head.pre, output, heads="none")
    st_modules.write_pipeline(output, head.pre.config.hidden_size, head.pooling, head.normalize,
                              head.max_seq_length, pooler=head.pre.params["bert"].get("pooler"))
  except (mapping.ConversionError, st_modules.PipelineError) as e:
    raise UserError(f"sentence-transformers: {e}") from None


def runner(folder: str):
  """(texts, pairs) -> ({"embedding": SentenceTransformer(folder).encode(texts)}, None)."""
  import sentence_transformers   # torch: only for this check, an optional dependency

  sparse = os.path.exists(os.path.join(folder, st_modules.SPLADE_DIR))
  model = (sentence_transformers.SparseEncoder if sparse else sentence_transformers.SentenceTransformer)(
      folder, device="cpu")

  def run(texts: Sequence[str], pairs=None):
    del pairs
    v = model.encode(list(texts), convert_to_tensor=True, batch_size=32, show_progress_bar=False)
    v = v.to_dense() if getattr(v, "is_sparse", False) else v
    out: Dict[str, np.ndarray] = {"embedding": v.cpu().numpy()}
    return out, None
  return run
