"""A sentence-transformers folder: the Hugging Face BERT folder (convert.hf, encoder only) plus modules.json,
1_Pooling/config.json (+ 2_Dense for the pooler, + 3_Normalize) from the head's pooling and normalisation; for
pooling=splade a SparseEncoder folder (the masked-LM folder, MLMTransformer + 1_SpladePooling + 2_Normalize),
and for an inference-free one (embedding.query_encoder=idf) a SparseEncoder Router (query: SparseStaticEmbedding
with the IDF table; document: the masked-LM folder, SpladePooling).

    write_st(head, "export/st")            # then SentenceTransformer("export/st").encode(texts)
"""

from __future__ import annotations

import os
from typing import Dict, Sequence

import numpy as np

from bert_jax.convert import hf, mapping, st_modules
from bert_jax.errors import UserError
from bert_jax.models.heads import LEXICAL_POOLINGS


def write_st(head, output: str) -> None:
  if head.kind != "features":
    raise UserError("sentence-transformers exports sentence features; the head is " + head.kind)
  if head.pooling == "cls" and "pooler" not in head.pre.params["bert"]:
    raise UserError(f"--pooling=cls reads the pooler, which {head.pre.directory} lacks; use first or mean")
  if head.pooling in LEXICAL_POOLINGS:
    raise UserError(f"sentence-transformers has no module for pooling={head.pooling} (a learned weight per token, "
                    "summed per vocabulary entry); export onnx, stablehlo or savedmodel")
  try:
    if head.query_idf is not None:   # inference-free: a Router, IDF queries and SPLADE documents
      hf.write_hf(head.pre, os.path.join(output, st_modules.DOCUMENT_DIR), heads="mlm")
      st_modules.write_inference_free_pipeline(output, head.pre.config.vocab_size, head.normalize,
                                               head.max_seq_length, head.query_idf)
      return
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

  router = os.path.exists(os.path.join(folder, st_modules.ROUTER_CONFIG))
  sparse = router or os.path.exists(os.path.join(folder, st_modules.SPLADE_DIR))
  model = (sentence_transformers.SparseEncoder if sparse else sentence_transformers.SentenceTransformer)(
      folder, device="cpu")

  def dense(v):
    v = v.to_dense() if getattr(v, "is_sparse", False) else v
    return v.cpu().numpy()

  def run(texts: Sequence[str], pairs=None):
    del pairs
    kw = dict(convert_to_tensor=True, batch_size=32, show_progress_bar=False)
    if router:   # passages through the document route; queries through the IDF table
      return {"embedding": dense(model.encode_document(list(texts), **kw)),
              "query_embedding": dense(model.encode_query(list(texts), **kw))}, None
    out: Dict[str, np.ndarray] = {"embedding": dense(model.encode(list(texts), **kw))}
    return out, None
  return run
