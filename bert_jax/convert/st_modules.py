"""sentence-transformers folders: the pipeline after the transformer (modules.json: Pooling, Normalize, and a
tanh Dense over [CLS] standing for BERT's pooler), read on import and written on export.

    read_pipeline(folder)     # {"pooling": "mean", "normalize": True, "max_seq_length": 256, "source": ...} | None
    write_pipeline(output, hidden_size, pooling, normalize, max_seq_length, dense=None)

Our pooling names (models.heads.POOLINGS) against sentence-transformers' Pooling modes: first = the [CLS] token
(pooling_mode_cls_token), mean, max, last (pooling_mode_lasttoken). Our "cls" is BERT's pooler (dense + tanh
over [CLS]); a folder writes it as Pooling(cls_token) followed by a Dense module with tanh holding the pooler's
weights, and that pair reads back as "cls". `import-hf` records the pipeline in convert_info.json
("sentence_embedding"), and `predict features` uses it by default.
"""

from __future__ import annotations

import json
import os
from typing import Dict, Optional

import numpy as np
from safetensors.numpy import load_file, save_file

from bert_jax import fileio

MODULES = "modules.json"
POOLING_DIR, DENSE_DIR, NORMALIZE_DIR = "1_Pooling", "2_Dense", "3_Normalize"
SPLADE_DIR = "1_SpladePooling"
ST_CONFIG = "config_sentence_transformers.json"
_SPARSE = "sentence_transformers.sparse_encoder.models."   # sentence-transformers 5's names (6 maps them)
_MODES = {"first": "pooling_mode_cls_token", "mean": "pooling_mode_mean_tokens", "max": "pooling_mode_max_tokens",
          "last": "pooling_mode_lasttoken"}
_ALL_MODES = tuple(_MODES.values()) + ("pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens")
_TANH = "torch.nn.modules.activation.Tanh"


class PipelineError(ValueError):
  """A modules.json pipeline this package cannot reproduce (the message says which module)."""


def _read(path: str):
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def find_modules(folder: str) -> Optional[str]:
  """modules.json of a sentence-transformers folder: in `folder`, or one level up when `folder` is the
  transformer's own subfolder (0_Transformer/)."""
  for d in (folder, os.path.dirname(os.path.normpath(folder))):
    path = os.path.join(d, MODULES)
    if os.path.isfile(path):
      return path
  return None


def _check_splade_pooling(directory: str) -> None:
  """PipelineError unless the SpladePooling module in `directory` is max / relu (the one splade_pool computes)."""
  cfg = _read(os.path.join(directory, "config.json"))
  said = (cfg.get("pooling_strategy", "max"), cfg.get("activation_function", "relu"))
  if said != ("max", "relu"):
    raise PipelineError(f"{directory}/config.json: SpladePooling {said[0]} / {said[1]}; supported: max / relu "
                        "(SPLADE's log(1 + relu) max-pooled)")


def _write_splade_pooling(directory: str, vocab_size: int) -> None:
  fileio.makedirs(directory)
  fileio.write_json_atomic(os.path.join(directory, "config.json"),
                           {"pooling_strategy": "max", "activation_function": "relu",
                            "word_embedding_dimension": int(vocab_size)})


def read_pipeline(folder: str) -> Optional[Dict]:
  """The sentence pipeline of a sentence-transformers folder, or None when it has no modules.json. Raises
  PipelineError for modules we cannot run (a Dense that is not the pooler's tanh over [CLS], weighted means)."""
  modules_path = find_modules(folder)
  if modules_path is None:
    return None
  root = os.path.dirname(modules_path)
  entries = _read(modules_path)
  out = {"pooling": "mean", "normalize": False, "source": MODULES}
  saw_dense = False
  for e in sorted(entries, key=lambda e: int(e.get("idx", 0))):
    kind = str(e.get("type", "")).rsplit(".", 1)[-1]
    sub = os.path.join(root, str(e.get("path", "")))
    if kind == "SpladePooling":
      _check_splade_pooling(sub)
      out["pooling"] = "splade"
      continue
    if kind in ("Transformer", "MLMTransformer"):
      cfg = os.path.join(sub, "sentence_bert_config.json")
      if not os.path.isfile(cfg):
        cfg = os.path.join(root, "sentence_bert_config.json")
      if os.path.isfile(cfg) and _read(cfg).get("max_seq_length"):
        out["max_seq_length"] = int(_read(cfg)["max_seq_length"])
    elif kind == "Pooling":
      cfg = _read(os.path.join(sub, "config.json"))
      on = [m for m in _ALL_MODES if cfg.get(m)]
      mine = [k for k, m in _MODES.items() if m in on]
      if len(on) != 1 or not mine:
        raise PipelineError(f"{sub}/config.json pools by {on or 'nothing'}; supported: exactly one of "
                            f"{', '.join(_MODES.values())}")
      out["pooling"] = mine[0]
    elif kind == "Dense":
      cfg = _read(os.path.join(sub, "config.json"))
      if out["pooling"] != "first" or cfg.get("activation_function") != _TANH or saw_dense:
        raise PipelineError(f"{sub}: a Dense module other than a tanh over [CLS] (BERT's pooler) is not supported")
      saw_dense = True
      out["pooling"] = "cls"   # read back only when its weights are the pooler's (write_pipeline's own pair)
    elif kind == "Normalize":
      out["normalize"] = True
    else:
      raise PipelineError(f"{modules_path}: module {e.get('type')!r} is not supported (Transformer, Pooling, "
                          "Dense(tanh, the pooler), Normalize; MLMTransformer + SpladePooling)")
  return out


def write_pipeline(output: str, hidden_size: int, pooling: str, normalize: bool, max_seq_length: int,
                   pooler: Optional[dict] = None) -> None:
  """modules.json, sentence_bert_config.json, 1_Pooling/config.json (+ 2_Dense for pooling="cls", from
  `pooler` {"kernel" [H, H], "bias" [H]}; + 3_Normalize) beside a Hugging Face folder already in `output`."""
  mode = "first" if pooling == "cls" else pooling
  if mode not in _MODES:
    raise PipelineError(f"pooling={pooling!r} has no sentence-transformers Pooling mode; expected cls, "
                        f"{', '.join(_MODES)}")
  modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
             {"idx": 1, "name": "1", "path": POOLING_DIR, "type": "sentence_transformers.models.Pooling"}]
  pool_cfg = {"word_embedding_dimension": int(hidden_size), **{m: m == _MODES[mode] for m in _ALL_MODES},
              "include_prompt": True}
  fileio.makedirs(os.path.join(output, POOLING_DIR))
  fileio.write_json_atomic(os.path.join(output, POOLING_DIR, "config.json"), pool_cfg)
  if pooling == "cls":
    if pooler is None:
      raise PipelineError("pooling=cls needs the pooler's weights")
    d = os.path.join(output, DENSE_DIR)
    fileio.makedirs(d)
    fileio.write_json_atomic(os.path.join(d, "config.json"),
                             {"in_features": int(hidden_size), "out_features": int(hidden_size), "bias": True,
                              "activation_function": _TANH})
    with fileio.atomic_path(os.path.join(d, "model.safetensors")) as tmp:   # torch Linear: weight [out, in]
      save_file({"linear.weight": np.ascontiguousarray(np.asarray(pooler["kernel"], np.float32).T),
                 "linear.bias": np.asarray(pooler["bias"], np.float32)}, tmp)
    modules.append({"idx": 2, "name": "2", "path": DENSE_DIR, "type": "sentence_transformers.models.Dense"})
  if normalize:
    fileio.makedirs(os.path.join(output, NORMALIZE_DIR))
    modules.append({"idx": len(modules), "name": str(len(modules)), "path": NORMALIZE_DIR,
                    "type": "sentence_transformers.models.Normalize"})
  fileio.write_json_atomic(os.path.join(output, "sentence_bert_config.json"),
                           {"max_seq_length": int(max_seq_length), "do_lower_case": False})
  fileio.write_json_atomic(os.path.join(output, MODULES), modules)


ROUTER_CONFIG = "router_config.json"
QUERY_DIR, DOCUMENT_DIR = "query_0_SparseStaticEmbedding", "document_0_MLMTransformer"


def read_router(folder: str) -> Optional[Dict]:
  """An inference-free sparse folder (a SparseEncoder whose Router has a "query" route of SparseStaticEmbedding
  [+ Normalize] and a "document" route of MLMTransformer + SpladePooling max / relu [+ Normalize]), or None when
  `folder` has no router_config.json: {"document_dir", "idf" [V] float32, "pipeline": the sentence pipeline
  with query_encoder "idf"}. PipelineError for any other Router."""
  path = os.path.join(folder, ROUTER_CONFIG)
  if not os.path.isfile(path):
    return None
  config = _read(path)
  types, structure = config.get("types") or {}, config.get("structure") or {}
  kinds = {route: [str(types.get(m, "")).rsplit(".", 1)[-1] for m in structure.get(route) or []]
           for route in ("query", "document")}
  query, doc = kinds["query"], kinds["document"]
  if (set(structure) != {"query", "document"} or query not in (["SparseStaticEmbedding"],
                                                                ["SparseStaticEmbedding", "Normalize"])
          or doc not in (["MLMTransformer", "SpladePooling"], ["MLMTransformer", "SpladePooling", "Normalize"])):
    raise PipelineError(f"{path}: routes {kinds}; supported: query = SparseStaticEmbedding [+ Normalize], "
                        "document = MLMTransformer + SpladePooling [+ Normalize] (an inference-free SPLADE)")
  if (query[-1] == "Normalize") != (doc[-1] == "Normalize"):
    raise PipelineError(f"{path}: one route normalises and the other does not; supported: both or neither")
  query_dir, doc_dir, pool_dir = (os.path.join(folder, structure[r][i])
                                  for r, i in (("query", 0), ("document", 0), ("document", 1)))
  _check_splade_pooling(pool_dir)
  weights = os.path.join(query_dir, "model.safetensors")
  if not os.path.isfile(weights):
    raise PipelineError(f"{query_dir}: no model.safetensors (SparseStaticEmbedding's weight)")
  idf = load_file(weights).get("weight")
  if idf is None or idf.ndim != 1:
    raise PipelineError(f"{weights}: no 1-D 'weight' (SparseStaticEmbedding's per-token weights)")
  pipeline = {"pooling": "splade", "normalize": doc[-1] == "Normalize", "query_encoder": "idf",
              "source": ROUTER_CONFIG}
  cfg = os.path.join(doc_dir, "sentence_bert_config.json")
  if os.path.isfile(cfg) and _read(cfg).get("max_seq_length"):
    pipeline["max_seq_length"] = int(_read(cfg)["max_seq_length"])
  return {"document_dir": os.path.normpath(doc_dir), "idf": np.asarray(idf, np.float32), "pipeline": pipeline}


def write_inference_free_pipeline(output: str, vocab_size: int, normalize: bool, max_seq_length: int,
                                  idf: np.ndarray) -> None:
  """An inference-free SPLADE model (embedding.query_encoder=idf) as sentence-transformers' SparseEncoder reads
  it: one Router module whose "query" route is SparseStaticEmbedding (the IDF table, frozen; the query's tokens
  without [CLS] / [SEP], at most max_seq_length - 2 of them) + Normalize, and whose "document" route (the
  default) is MLMTransformer over the BertForMaskedLM folder already in output/document_0_MLMTransformer +
  SpladePooling + Normalize, each route's Normalize only when `normalize`."""
  doc = os.path.join(output, DOCUMENT_DIR)
  fileio.write_json_atomic(os.path.join(doc, "sentence_bert_config.json"),
                           {"max_seq_length": int(max_seq_length), "do_lower_case": False})
  query = os.path.join(output, QUERY_DIR)
  fileio.makedirs(query)
  for name in ("vocab.txt", "tokenizer.json", "special_tokens_map.json"):   # the same tokenizer
    if os.path.exists(os.path.join(doc, name)):
      with open(os.path.join(doc, name), "rb") as f:
        fileio.write_bytes_atomic(os.path.join(query, name), f.read())
  with open(os.path.join(doc, "tokenizer_config.json"), encoding="utf-8") as f:
    tok_config = json.load(f)
  tok_config["model_max_length"] = int(max_seq_length) - 2   # SparseStaticEmbedding truncates to it
  fileio.write_json_atomic(os.path.join(query, "tokenizer_config.json"), tok_config)
  fileio.write_json_atomic(os.path.join(query, "config.json"), {"frozen": True})
  with fileio.atomic_path(os.path.join(query, "model.safetensors")) as tmp:
    save_file({"weight": np.ascontiguousarray(np.asarray(idf, np.float32)[:vocab_size])}, tmp)
  _write_splade_pooling(os.path.join(output, "document_1_SpladePooling"), vocab_size)
  types = {QUERY_DIR: _SPARSE + "SparseStaticEmbedding", DOCUMENT_DIR: _SPARSE + "MLMTransformer",
           "document_1_SpladePooling": _SPARSE + "SpladePooling"}
  structure = {"query": [QUERY_DIR], "document": [DOCUMENT_DIR, "document_1_SpladePooling"]}
  if normalize:
    for route, name in (("query", "query_1_Normalize"), ("document", "document_2_Normalize")):
      fileio.makedirs(os.path.join(output, name))
      types[name] = "sentence_transformers.models.Normalize"
      structure[route].append(name)
  fileio.write_json_atomic(os.path.join(output, ROUTER_CONFIG), {
      "types": types, "structure": structure,
      "parameters": {"default_route": "document", "allow_empty_key": True}})
  fileio.write_json_atomic(os.path.join(output, ST_CONFIG), {"model_type": "SparseEncoder",
                                                             "similarity_fn_name": "cosine"})
  fileio.write_json_atomic(os.path.join(output, MODULES),
                           [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Router"}])


def write_sparse_pipeline(output: str, vocab_size: int, normalize: bool, max_seq_length: int) -> None:
  """A SPLADE model as sentence-transformers' SparseEncoder reads it: modules.json (MLMTransformer over the
  BertForMaskedLM folder already in `output`, SpladePooling max / relu, + Normalize), 1_SpladePooling/config.json,
  sentence_bert_config.json and config_sentence_transformers.json (model_type SparseEncoder, cosine: the
  similarity task=embedding trains)."""
  modules = [{"idx": 0, "name": "0", "path": "", "type": _SPARSE + "MLMTransformer"},
             {"idx": 1, "name": "1", "path": SPLADE_DIR, "type": _SPARSE + "SpladePooling"}]
  _write_splade_pooling(os.path.join(output, SPLADE_DIR), vocab_size)
  if normalize:
    fileio.makedirs(os.path.join(output, "2_Normalize"))
    modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
  fileio.write_json_atomic(os.path.join(output, "sentence_bert_config.json"),
                           {"max_seq_length": int(max_seq_length), "do_lower_case": False})
  fileio.write_json_atomic(os.path.join(output, ST_CONFIG), {"model_type": "SparseEncoder",
                                                             "similarity_fn_name": "cosine"})
  fileio.write_json_atomic(os.path.join(output, MODULES), modules)
