"""Hugging Face BERT folders in and out, without PyTorch (safetensors' NumPy API).

    python -m bert_jax.convert import-hf --input=HF_DIR --output=DIR
    python -m bert_jax.convert export-hf --input=DIR --output=HF_DIR [--heads=pretraining|mlm|none]

Import reads config.json, model.safetensors (or a sharded model.safetensors.index.json; pytorch_model.bin
only where torch is importable) and vocab.txt (or the WordPiece vocab inside tokenizer.json). It accepts
BertForPreTraining / BertForMaskedLM state dicts ("bert." prefix, "cls." heads) and bare BertModel ones
(no prefix, no heads, e.g. sentence-transformers models); absent head groups are initialised fresh and
reported.

Export writes config.json, model.safetensors, vocab.txt and tokenizer_config.json:
  --heads=pretraining  BertForPreTraining layout; transformers.BertForPreTraining loads it with no missing or
                       unexpected keys, and BertModel with no missing keys (BertModel then reports the
                       cls.* heads as unexpected, exactly as for Google's bert-base-uncased on the Hub).
  --heads=mlm          BertForMaskedLM layout (no pooler, no NSP head).
  --heads=none         bare BertModel layout (no prefix, no heads): BertModel loads it with no report at all.
  --heads=auto         (the command's default) of a fine-tuned checkpoint: its task class, BertForSequence
                       Classification (pooling=cls: the pooler, dropout, classifier; problem_type and id2label from
                       the task), ...ForTokenClassification (not a CRF), ...ForQuestionAnswering or
                       ...ForMultipleChoice, with our logits (hf_heads.py); import-hf keeps such a head, with a
                       finetune_info.json that `predict classify` and `finetune load_head=true` read.
"""

from __future__ import annotations

import functools
import json
import os
import re
import tempfile
from typing import Dict, Optional, Sequence

import ml_dtypes
import numpy as np
from safetensors.numpy import load_file

from bert_jax import fileio
from bert_jax.convert import hf_heads, mapping, st_modules
from bert_jax.convert.hf_folder import write_folder
from bert_jax.pretrained import params_dir
from bert_jax.pretrained.load import load_pretrained
from bert_jax.models.config import BertConfig

_BARE_PREFIXES = ("embeddings.", "encoder.", "pooler.")
# Buffers that transformers writes next to the weights (not parameters).
_HF_BUFFERS = re.compile(r"(^|\.)(position_ids|token_type_ids)$")

HEADS = {
    # heads option: (groups, architectures, key prefix of the encoder)
    "pretraining": (("embeddings", "encoder", "pooler") + mapping.BERT_TARGETS, "BertForPreTraining", "bert."),
    "mlm": (("embeddings", "encoder", "mlm"), "BertForMaskedLM", "bert."),
    "none": (("embeddings", "encoder", "pooler"), "BertModel", ""),
}

_ACT_TO_HF = {"gelu": "gelu", "gelu_new": "gelu_new", "gelu_tanh": "gelu_new",
              "gelu_pytorch_tanh": "gelu_pytorch_tanh", "relu": "relu", "silu": "silu", "swish": "silu",
              "tanh": "tanh"}


# ---- reading ---------------------------------------------------------------------------------------------
def _read_safetensors(path: str) -> Dict[str, np.ndarray]:
  try:
    return _read_safetensors_unchecked(path)
  except (OSError, mapping.ConversionError):
    raise
  except Exception as e:   # SafetensorError (a torn or non-safetensors file), a bad header: name the file
    raise mapping.ConversionError(f"{path}: not a readable safetensors file ({type(e).__name__}: {e}); "
                                  "re-download or re-save it") from e


def _read_safetensors_unchecked(path: str) -> Dict[str, np.ndarray]:
  try:
    return load_file(path)
  except TypeError:
    # NumPy has no bfloat16: safetensors' NumPy API refuses such files. Read the (simple) format directly:
    # 8-byte little-endian header length, a JSON header {name: {dtype, shape, data_offsets}}, then the data.
    dtypes = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16,
              "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": bool}
    with open(path, "rb") as f:
      n = int.from_bytes(f.read(8), "little")
      header = json.loads(f.read(n))
      data = f.read()
    out = {}
    for name, meta in header.items():
      if name == "__metadata__":
        continue
      if meta["dtype"] not in dtypes:
        raise ValueError(f"{path}: tensor {name} has unsupported dtype {meta['dtype']}")
      start, end = meta["data_offsets"]
      out[name] = np.frombuffer(data[start:end], dtype=dtypes[meta["dtype"]]).reshape(meta["shape"])
    return out


def _read_torch_bin(path: str) -> Dict[str, np.ndarray]:
  try:
    import torch  # lazy: optional and heavy, only for pytorch_model.bin folders
  except ImportError as e:
    raise ImportError(f"{path} is a PyTorch pickle and torch is not installed; install torch, or convert the "
                      "folder to model.safetensors first") from e
  try:
    state = torch.load(path, map_location="cpu", weights_only=True)
  except OSError:
    raise
  except Exception as e:   # a torn or foreign file, or a pickle of more than tensors (UnpicklingError, ...)
    raise mapping.ConversionError(
        f"{path}: not a readable PyTorch state dict ({type(e).__name__}: {str(e).splitlines()[0][:200]}); "
        "re-download it, or re-save the model with save_pretrained (model.safetensors)") from e
  if not isinstance(state, dict) or not all(hasattr(v, "is_floating_point") for v in state.values()):
    raise mapping.ConversionError(f"{path}: expected a state dict {{name: tensor}}, got {type(state).__name__}")
  return {k: (v.float() if v.is_floating_point() else v).numpy() for k, v in state.items()}


def read_hf_state_dict(folder: str) -> Dict[str, np.ndarray]:
  """{key: array} of a Hugging Face model folder (safetensors preferred, sharded or not)."""
  def p(name):
    return os.path.join(folder, name)

  for single, index, reader in (("model.safetensors", "model.safetensors.index.json", _read_safetensors),
                                ("pytorch_model.bin", "pytorch_model.bin.index.json", _read_torch_bin)):
    if os.path.exists(p(single)):
      return reader(p(single))
    if os.path.exists(p(index)):
      try:
        with open(p(index), encoding="utf-8") as f:
          shards = sorted(set(json.load(f)["weight_map"].values()))
      except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, AttributeError) as e:
        raise mapping.ConversionError(f"{p(index)}: not a shard index (a JSON object whose weight_map names "
                                      f"each tensor's file): {type(e).__name__}: {e}") from e
      out: Dict[str, np.ndarray] = {}
      for shard in shards:
        out.update(reader(p(shard)))
      return out
  raise FileNotFoundError(f"{folder}: no model.safetensors, model.safetensors.index.json or pytorch_model.bin "
                          f"(files: {sorted(os.listdir(folder)) if os.path.isdir(folder) else 'not a folder'})")


def resolve_model_folder(folder: str) -> str:
  """The folder holding a model's config.json: `folder` itself, or for a sentence-transformers model saved
  without one at its top (older releases keep the BERT in 0_Transformer/), the path modules.json gives its
  sentence_transformers.models.Transformer module; else a single 0_Transformer/ or model/ subfolder with a
  config.json (a packaged copy of such a folder); else, in the Hugging Face hub cache's models--ORG--NAME/,
  the snapshot refs/main names (or the only one). Anything else is returned as given (the caller names it)."""
  if os.path.exists(os.path.join(folder, "config.json")) or not os.path.isdir(folder):
    return folder
  if os.path.isfile(os.path.join(folder, st_modules.ROUTER_CONFIG)):   # an inference-free SparseEncoder
    try:
      with open(os.path.join(folder, st_modules.ROUTER_CONFIG), encoding="utf-8") as f:
        router = json.load(f)
      doc = os.path.join(folder, str(((router.get("structure") or {}).get("document") or [""])[0]))
      if os.path.isfile(os.path.join(doc, "config.json")):
        return os.path.normpath(doc)
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError, TypeError):
      pass   # the caller's "no config.json" error names the folder
  modules = os.path.join(folder, "modules.json")
  if os.path.isfile(modules):
    try:
      with open(modules, encoding="utf-8") as f:
        entries = json.load(f)
      for e in entries if isinstance(entries, list) else []:
        if isinstance(e, dict) and str(e.get("type", "")).endswith("models.Transformer"):
          sub = os.path.join(folder, str(e.get("path", "")))
          if os.path.isfile(os.path.join(sub, "config.json")):
            return os.path.normpath(sub)
    except (json.JSONDecodeError, UnicodeDecodeError):
      pass   # the caller's "no config.json" error names the folder
  subs = [os.path.join(folder, n) for n in ("0_Transformer", "model")
          if os.path.isfile(os.path.join(folder, n, "config.json"))]
  if len(subs) == 1:
    return subs[0]
  # The Hugging Face hub cache (models--ORG--NAME/): the snapshot refs/main names, or the only one.
  snapshots = os.path.join(folder, "snapshots")
  if os.path.isdir(snapshots):
    main = os.path.join(folder, "refs", "main")
    if os.path.isfile(main):
      with open(main, encoding="utf-8") as f:
        sub = os.path.join(snapshots, f.read().strip())
      if os.path.isfile(os.path.join(sub, "config.json")):
        return resolve_model_folder(sub)
    subs = [os.path.join(snapshots, n) for n in sorted(os.listdir(snapshots))
            if os.path.isfile(os.path.join(snapshots, n, "config.json"))]
    if len(subs) == 1:
      return subs[0]
  return folder


def _write_vocab_from_tokenizer_json(tokenizer_json: str, out_path: str) -> None:
  with open(tokenizer_json, encoding="utf-8") as f:
    model = json.load(f).get("model", {})
  if model.get("type") != "WordPiece" or not isinstance(model.get("vocab"), dict):
    raise ValueError(f"{tokenizer_json}: not a WordPiece tokenizer (model.type={model.get('type')!r}); "
                     "BERT needs a vocab.txt (pass --vocab)")
  by_id = sorted(model["vocab"].items(), key=lambda kv: kv[1])
  if [i for _, i in by_id] != list(range(len(by_id))):
    raise ValueError(f"{tokenizer_json}: WordPiece ids are not contiguous 0..{len(by_id) - 1}")
  with open(out_path, "w", encoding="utf-8") as f:
    f.writelines(tok + "\n" for tok, _ in by_id)


def read_config_json(path: str) -> dict:
  """A Hugging Face config.json as a dict; a file that is not a JSON object is a ConversionError naming it."""
  try:
    with open(path, encoding="utf-8") as f:
      d = json.load(f)
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise mapping.ConversionError(f"{path}: not a valid JSON model config ({e})") from e
  if not isinstance(d, dict):
    raise mapping.ConversionError(f"{path}: expected a JSON object of model settings, got a "
                                  f"{type(d).__name__}")
  return d


def check_encoder_config(d: dict, source: str) -> None:
  """A bidirectional encoder: is_decoder=True (BertLMHeadModel, ElectraForCausalLM) applies a causal mask that
  this package's encoder does not, so its hidden states would differ from every position's first token on."""
  if d.get("is_decoder") or d.get("add_cross_attention"):
    raise mapping.ConversionError(
        f"{source}: is_decoder={d.get('is_decoder')!r}, add_cross_attention={d.get('add_cross_attention')!r}: a "
        "causal (decoder) model; only bidirectional encoders convert exactly (is_decoder=false)")


def architecture_dict(config_dict: dict) -> dict:
  """A Hugging Face config.json less the keys whose meaning differs from BertConfig's field of that name:
  "dtype" (transformers >= 4.56's name for the stored weights' torch dtype, null in a fresh config's
  to_dict()) is not our compute dtype, a runtime choice."""
  return {k: v for k, v in config_dict.items() if k != "dtype"}


def hf_config_to_bert(config_dict: dict, source: str) -> BertConfig:
  model_type = config_dict.get("model_type", "bert")
  if model_type != "bert":
    raise mapping.ConversionError(
        f"{source}: model_type={model_type!r}; only BERT checkpoints convert exactly (RoBERTa/ELECTRA/... use "
        "different position ids or heads)")
  pos = config_dict.get("position_embedding_type", "absolute")
  if pos != "absolute":
    raise mapping.ConversionError(f"{source}: position_embedding_type={pos!r}; only 'absolute' is supported")
  check_encoder_config(config_dict, source)
  missing = [k for k in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                         "intermediate_size") if k not in config_dict]
  if missing:
    raise mapping.ConversionError(f"{source}: config lacks {missing}")
  d = dict(architecture_dict(config_dict))
  if "hidden_act" in d:
    d["hidden_act"] = mapping.check_hidden_act(d["hidden_act"], source)
  return config_from_dict(d, source)


def config_from_dict(d: dict, source: str) -> BertConfig:
  """BertConfig.from_dict, its refusal of a field (a string vocab_size, zero heads) naming `source`."""
  try:
    return BertConfig.from_dict(d)
  except (ValueError, TypeError) as e:
    raise mapping.ConversionError(f"{source}: {e}") from e


def normalize_hf_state_dict(state: Dict[str, np.ndarray], report: mapping.ConversionReport) -> Dict[str, np.ndarray]:
  """Old names (LayerNorm.gamma/beta), bare BertModel keys (no "bert." prefix), and the tied decoder."""
  out = {}
  renamed = 0
  for k, v in state.items():
    nk = re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", k))
    renamed += nk != k
    out[nk] = v
  if renamed:
    report.notes.append(f"renamed {renamed} old-style LayerNorm.gamma/beta keys")
  return prefix_bare_keys_and_untie(out, report, root="bert.", head="cls.predictions", family="BERT",
                                    model_class="BertModel")


def prefix_bare_keys_and_untie(state: Dict[str, np.ndarray], report: mapping.ConversionReport, *, root: str,
                               head: str, family: str, model_class: str) -> Dict[str, np.ndarray]:
  """Keys of a bare `model_class` checkpoint get the `root` prefix ("bert.", "albert."); the MLM decoder
  `head`.decoder.{weight,bias}, tied to the word embeddings and to `head`.bias, is checked and dropped."""
  out = dict(state)
  if not any(k.startswith(root) for k in out) and any(k.startswith(_BARE_PREFIXES) for k in out):
    out = {(root + k if k.startswith(_BARE_PREFIXES) else k): v for k, v in out.items()}
    report.notes.append(f"bare {model_class} checkpoint (keys without the '{root}' prefix)")
  word = out.get(f"{root}embeddings.word_embeddings.weight")
  dec_w = out.pop(f"{head}.decoder.weight", None)
  if dec_w is not None:
    if word is None or dec_w.shape != word.shape or not np.array_equal(dec_w, word):
      raise mapping.ConversionError(
          f"{report.source}: {head}.decoder.weight differs from {root}embeddings.word_embeddings.weight; "
          f"{family} ties them and so does our model: an untied decoder cannot be converted exactly")
    report.notes.append(f"{head}.decoder.weight equals the word embeddings (tied); dropped")
  dec_b = out.pop(f"{head}.decoder.bias", None)
  if dec_b is not None:
    if f"{head}.bias" not in out:
      out[f"{head}.bias"] = dec_b
    elif not np.array_equal(out[f"{head}.bias"], dec_b):
      raise mapping.ConversionError(f"{report.source}: {head}.decoder.bias differs from "
                                    f"{head}.bias (they are one tied tensor in {family})")
  return out


def import_hf(folder: str, output: Optional[str] = None, vocab_file: Optional[str] = None,
              do_lower_case: Optional[bool] = None, ignore: Sequence[str] = (), seed: int = 0):
  """Converts a Hugging Face BERT folder. Returns (config, params, report); writes `output` when given.

  `ignore`: regular expressions of source keys to drop deliberately (e.g. "^classifier\\." of a fine-tuned
  BertForSequenceClassification); they are listed in the report. A fine-tuned task head (BertFor{Sequence,
  Token}Classification, ...ForQuestionAnswering, ...ForMultipleChoice) is kept, with finetune_info.json in
  `output`, where a task kind takes it (hf_heads.keep_task_head), else reported as not imported.
  """
  given, folder = folder, resolve_model_folder(folder)
  config_path = os.path.join(folder, "config.json")
  if not os.path.exists(config_path):
    raise FileNotFoundError(f"{folder}: no config.json (not a Hugging Face model folder)")
  config_dict = read_config_json(config_path)
  config = hf_config_to_bert(config_dict, config_path)
  report = mapping.ConversionReport(source=folder, fmt="hf")
  state = normalize_hf_state_dict(read_hf_state_dict(folder), report)
  patterns = [re.compile(p) for p in ignore]
  kept = hf_heads.keep_task_head(config_dict, state, config, config_path, TASK_CLASSES, patterns, report)
  ignorable = lambda n: bool(_HF_BUFFERS.search(n)) or any(p.search(n) for p in patterns)  # noqa: E731
  params = mapping.assign_params(state, "hf", config, report, ignorable=ignorable, seed=seed)
  hf_heads.add_kept_head(params, kept, report)
  router = add_query_idf(given, params, config, report)

  tmp_vocab = None
  if vocab_file is None:
    vocab_file = os.path.join(folder, "vocab.txt")
    if not os.path.exists(vocab_file):
      tok_json = os.path.join(folder, "tokenizer.json")
      if not os.path.exists(tok_json):
        raise FileNotFoundError(f"{folder}: no vocab.txt or tokenizer.json; pass --vocab=PATH")
      tmp_vocab = tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False).name
      _write_vocab_from_tokenizer_json(tok_json, tmp_vocab)
      vocab_file = tmp_vocab
      report.notes.append("vocab.txt written from tokenizer.json's WordPiece vocab")
  try:
    mapping.check_vocab_size(vocab_file, params_dir.count_vocab_lines(vocab_file), config, "config.json",
                             report)
    do_lower_case = mapping.resolve_casing(do_lower_case, report,
                                           functools.partial(hf_do_lower_case, folder, vocab_file))
    if output:
      mapping.save_imported(output, config, params, vocab_file, folder, "hf", do_lower_case, report)
      hf_heads.write_finetune_info(output, kept)
      record_sentence_pipeline(given, folder, output, report, router)
  finally:
    if tmp_vocab:
      os.unlink(tmp_vocab)
  return config, params, report


def add_query_idf(given: str, params: dict, config, report: mapping.ConversionReport) -> Optional[dict]:
  """An inference-free SparseEncoder's query table (its Router's SparseStaticEmbedding weight) into
  params["query_encoder"]["idf"], which predict features --queries and the exports read; returns the Router
  st_modules.read_router read (None for any other folder)."""
  try:
    router = st_modules.read_router(given) if os.path.isdir(given) else None
  except (st_modules.PipelineError, OSError, ValueError) as e:
    raise mapping.ConversionError(str(e)) from None
  if router is None:
    return None
  if router["idf"].shape[0] != config.vocab_size:
    raise mapping.ConversionError(f"{given}: SparseStaticEmbedding has {router['idf'].shape[0]} weights; the "
                                  f"model's vocabulary has {config.vocab_size}")
  params["query_encoder"] = {"idf": router["idf"]}
  report.notes.append("query side: SparseStaticEmbedding's weights as params['query_encoder']['idf']")
  return router


def record_sentence_pipeline(given: str, folder: str, output: str, report: mapping.ConversionReport,
                             router: Optional[dict] = None) -> None:
  """A sentence-transformers folder's Pooling / Normalize (modules.json) into convert_info.json's
  "sentence_embedding", so `predict features` and the exports pool as the model was trained to; an
  inference-free SparseEncoder's Router (add_query_idf's) records query_encoder=idf too."""
  try:
    pipeline = router["pipeline"] if router else (st_modules.read_pipeline(given) or
                                                  st_modules.read_pipeline(folder))
  except (st_modules.PipelineError, OSError, ValueError) as e:
    report.notes.append(f"sentence-transformers pipeline not recorded: {e}")
    pipeline = None
  if not pipeline:
    return
  info = params_dir.read_info(output)
  info["sentence_embedding"] = pipeline
  info["report"] = report.to_dict()
  fileio.write_json_atomic(os.path.join(output, params_dir.INFO_NAME), info)
  report.notes.append(f"sentence-transformers pipeline recorded: pooling={pipeline['pooling']}, "
                      f"normalize={pipeline['normalize']} (predict features uses it by default)")


def _uncased_vocab_note(vocab_file: str) -> str:
  """For do_lower_case=false over a vocab without capitalised pieces (bert-base-chinese on the Hub says false):
  capitalised words then tokenize to [UNK], as they do in transformers; say so."""
  if params_dir.guess_do_lower_case(vocab_file):
    return ("; but the vocab holds no capitalised word pieces, so capitalised words become [UNK], as in "
            "transformers; --do_lower_case=true lowercases them as Google's tokenizer does")
  return ""


def hf_do_lower_case(folder: str, vocab_file: str):
  """(do_lower_case, where it came from): tokenizer_config.json's do_lower_case, else tokenizer.json's
  BertNormalizer lowercase (folders saved by a fast tokenizer only), else a guess from the folder name / vocab."""
  tc = os.path.join(folder, "tokenizer_config.json")
  if os.path.exists(tc):
    try:
      with open(tc, encoding="utf-8") as f:
        value = json.load(f).get("do_lower_case")
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
      value = None
    if isinstance(value, bool):
      return value, "tokenizer_config.json" + ("" if value else _uncased_vocab_note(vocab_file))
  tj = os.path.join(folder, "tokenizer.json")
  if os.path.exists(tj):
    try:
      with open(tj, encoding="utf-8") as f:
        norm = json.load(f).get("normalizer") or {}
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
      norm = {}
    if isinstance(norm, dict) and norm.get("type") == "BertNormalizer" and isinstance(norm.get("lowercase"), bool):
      return norm["lowercase"], "tokenizer.json's BertNormalizer" + ("" if norm["lowercase"]
                                                                      else _uncased_vocab_note(vocab_file))
  return params_dir.guess_do_lower_case_why(vocab_file, hint=os.path.basename(os.path.normpath(folder)))


# ---- writing ---------------------------------------------------------------------------------------------
def hf_config_dict(config: BertConfig, architecture: str, pad_token_id: int = 0) -> dict:
  if config.hidden_act not in _ACT_TO_HF:
    raise mapping.ConversionError(f"hidden_act={config.hidden_act!r} has no transformers equivalent")
  return {
      "architectures": [architecture],
      "model_type": "bert",
      "vocab_size": config.vocab_size,
      "hidden_size": config.hidden_size,
      "num_hidden_layers": config.num_hidden_layers,
      "num_attention_heads": config.num_attention_heads,
      "intermediate_size": config.intermediate_size,
      "hidden_act": _ACT_TO_HF[config.hidden_act],
      "hidden_dropout_prob": config.hidden_dropout_prob,
      "attention_probs_dropout_prob": config.attention_probs_dropout_prob,
      "max_position_embeddings": config.max_position_embeddings,
      "type_vocab_size": config.type_vocab_size,
      "initializer_range": config.initializer_range,
      "layer_norm_eps": config.layer_norm_eps,
      "position_embedding_type": "absolute",
      "pad_token_id": pad_token_id,
      "tie_word_embeddings": True,
      "torch_dtype": "float32",
  }


def export_hf(input_dir: str, output: str, heads: str = "pretraining") -> mapping.ConversionReport:
  """Our checkpoint (converted / fine-tuning / pre-training directory, or zoo name) -> a Hugging Face folder
  (config.json, model.safetensors, vocab.txt, tokenizer_config.json)."""
  return write_hf(load_pretrained(input_dir), output, heads, source=input_dir)


def write_hf(ckpt, output: str, heads: str = "pretraining", source: str = "") -> mapping.ConversionReport:
  """A loaded checkpoint (`load_pretrained`) -> a Hugging Face BERT folder (export_hf); --heads=auto on a
  fine-tuned checkpoint (finetune_info.json names its head) writes its BertFor* task class
  (hf_heads.write_task_model)."""
  if heads == "auto" and hf_heads.task_architecture(ckpt, TASK_CLASSES):
    return hf_heads.write_task_model(ckpt, output, source, TASK_CLASSES)
  return write_model(ckpt, output, heads, source, heads_table=HEADS, root="bert.",
                     config_dict=hf_config_dict, layout=mapping.BERT,
                     hint="use --heads=mlm (no NSP head) or --heads=none (encoder only)")


def write_model(ckpt, output: str, heads: str, source: str, *, heads_table: dict, root: str,
                config_dict, layout: mapping.Layout, hint: str,
                sentencepiece_class: str = "AlbertTokenizer") -> mapping.ConversionReport:
  """A loaded checkpoint -> a Hugging Face folder of one model family: `heads_table[heads]` gives the groups
  exported, the architecture and the weights' prefix; `layout.targets` are the family's pre-training heads
  (MLM + NSP for BERT, MLM + SOP for ALBERT: models/objectives/), `root` its encoder prefix ("bert.", "albert."), `config_dict(config, architecture,
  pad_token_id=)` its config.json, `hint` what to do when a head is missing, `sentencepiece_class` the
  tokenizer class written for a SentencePiece vocab (write_folder)."""
  input_dir = source or ckpt.directory
  config, params, vocab_file = ckpt.config, ckpt.params, ckpt.require_vocab()
  report = mapping.ConversionReport(source=input_dir, fmt="hf")
  head_groups = tuple(layout.targets)
  need = {"pooler": "bert", **{g: g for g in head_groups}}
  fresh = ckpt.fresh_groups()
  if heads == "auto":
    # the first layout whose heads the params hold trained: a converted BertForMaskedLM goes back as one, a
    # bare BertModel (sentence-transformers) as BertModel, not with the heads conversion initialised at random
    heads = next(h for h, (g, _, _) in heads_table.items()
                 if h == "none" or not [x for x in g if x in head_groups and (x not in params or x in fresh)])
    report.notes.append(f"--heads=auto: {heads} ({heads_table[heads][1]})")
  if heads not in heads_table:
    raise ValueError(f"heads={heads!r}; expected one of {tuple(heads_table)} or auto")
  groups, architecture, prefix = heads_table[heads]
  untrained = [g for g in groups if g in head_groups and g in fresh]
  if untrained:
    raise mapping.ConversionError(
        f"{input_dir}: its {untrained} head(s) were randomly initialised at conversion (the source checkpoint had "
        f"none), so --heads={heads} would write untrained heads as {architecture}'s; {hint} (or omit --heads)")
  if "pooler" in groups and "pooler" in fresh:
    report.notes.append("note: the pooler was randomly initialised at conversion (the source checkpoint had "
                        "none): the folder's pooler_output is untrained")
  absent = [g for g in groups if g in need and need[g] not in params]
  if absent:
    raise mapping.ConversionError(
        f"{input_dir}: params lack {absent} needed by --heads={heads} ({architecture}); top-level keys are "
        f"{sorted(params)}; {hint}")
  extra = sorted(k for k in params if k not in ("bert",) + tuple(g for g in groups if g in head_groups))
  if extra:
    report.notes.append(f"not exported (no {architecture} equivalent): params{extra}")
  arrays = mapping.export_arrays(params, "hf", config, groups=groups, layout=layout)
  if prefix != root:
    arrays = {(k[len(root):] if k.startswith(root) else k): v for k, v in arrays.items()}
  write_folder(output, arrays, config_dict(config, architecture, pad_token_id=_pad_id(vocab_file)),
               vocab_file, ckpt.do_lower_case, config.max_position_embeddings,
               sentencepiece_class=sentencepiece_class)
  report.loaded = len(arrays)
  return report


def _task_config_dict(config: BertConfig, architecture: str, vocab_file: str) -> dict:
  return hf_config_dict(config, architecture, pad_token_id=_pad_id(vocab_file))


# The fine-tuned heads kept on import and written by export (hf_heads): BertForSequenceClassification and
# ...ForMultipleChoice read bert.pooler (dense + tanh on [CLS]) through dropout into classifier.*, as our heads with
# pooling=cls; ...ForTokenClassification and ...ForQuestionAnswering have no pooler and read every token.
TASK_CLASSES = hf_heads.TaskClasses(
    classes=hf_heads.class_names("Bert"), encoder_arrays=hf_heads.layout_arrays(mapping.BERT),
    pooler_heads=hf_heads.SENTENCE_HEADS,
    pooling="through its pooler (dense + tanh on the [CLS] vector): fine-tune with pooling=cls",
    body="the encoder (and pooler) were, and fine-tuning puts its own head on them",
    config_dict=_task_config_dict)


def _pad_id(vocab_file: str) -> int:
  vocab = {}
  with open(vocab_file, encoding="utf-8") as f:
    for i, line in enumerate(f):
      vocab.setdefault(line.strip(), i)
  return vocab.get("[PAD]", 0)


