"""Hugging Face ModernBERT folders in and out (ModernBertModel / ...ForMaskedLM / ...ForSequenceClassification /
...ForTokenClassification / ...ForQuestionAnswering / ...ForMultipleChoice), no PyTorch needed for safetensors.

    python -m bert_jax.convert import-hf --input=ModernBERT-base --output=DIR   # config.json model_type "modernbert"
    python -m bert_jax.convert export-hf --input=DIR --output=HF_DIR            # a model with encoder="modernbert"

Transformers' layout onto ours (models/encoders/modernbert.py; torch Linear weights [out, in] are transposed):

  model.embeddings.tok_embeddings / norm        bert/embeddings/word_embeddings / norm
  model.layers.i.attn_norm (i > 0), attn.Wqkv, attn.Wo, mlp_norm, mlp.Wi, mlp.Wo
                                                bert/encoder/layer_i/...  (the same names)
  model.final_norm                              bert/encoder/final_norm
  head.{dense, norm} + decoder.bias  (MaskedLM)  mlm/{transform, LayerNorm, output_bias} (decoder tied)
  head.{dense, norm}  (the task classes)         bert/pooler/{dense, norm} (pooled_output, token_output)
  classifier.{weight, bias}  (the task classes)  classifier/{kernel, bias} (qa_outputs/ for QuestionAnswering):
                                                the fine-tuned head, kept with a finetune_info.json (task,
                                                labels from id2label) where a task kind here takes it, else
                                                reported as dropped (TASK_CLASSES; hf_heads.py)

A kept head makes the output a fine-tuned checkpoint: `predict classify --model=DIR` answers as transformers'
model does, `finetune.py --config.init_checkpoint=DIR --config.load_head=true` continues from it, and
`export-hf` of it (or of a fine-tuning work dir that fine-tuned a modernbert encoder for classification,
regression, multi-label, NER, SQuAD or multiple choice) writes the matching class back (id2label,
problem_type), as BERT's and ALBERT's export-hf write theirs (hf_heads.py).

A bare ModernBertModel's keys have no "model." prefix. The decoder weight must equal the token embeddings (tied,
as every released ModernBERT). Biases exist only where the config switches them on (norm_bias, attention_bias,
mlp_bias, classifier_bias, decoder_bias).

Tokenizer: a folder's vocab.txt (or a WordPiece tokenizer.json) is the vocab, as for BERT. The released
ModernBERTs ship a byte-level BPE tokenizer.json instead: it is copied into the output as it is, and text is
tokenized with it where the package reads tokenizer.json.
"""

from __future__ import annotations

import functools
import json
import os
import re
import tempfile
from typing import Dict, List, Optional, Sequence

import numpy as np

from bert_jax import fileio
from bert_jax.convert import hf, hf_heads, mapping
from bert_jax.convert.mapping import ConversionError, Entry
from bert_jax.input_pipeline import tokenization
from bert_jax.models.config import BertConfig
from bert_jax.models.encoders import modernbert
from bert_jax.pretrained import params_dir

ROOT = "model."
TARGETS = ("mlm",)
# export-hf's --heads: (groups, architecture, key prefix of the encoder)
HEADS = {
    "pretraining": (("embeddings", "encoder", "mlm"), "ModernBertForMaskedLM", ROOT),
    "mlm": (("embeddings", "encoder", "mlm"), "ModernBertForMaskedLM", ROOT),
    "none": (("embeddings", "encoder"), "ModernBertModel", ""),
}
_ACT_TO_HF = {"gelu": "gelu", "gelu_new": "gelu_new", "gelu_tanh": "gelu_pytorch_tanh",
              "gelu_pytorch_tanh": "gelu_pytorch_tanh", "relu": "relu", "silu": "silu", "swish": "silu",
              "tanh": "tanh"}
_UNUSED = "(not in this architecture) "   # hf name of a table row no source key can have: its group is fresh


def is_modernbert_dict(d: dict) -> bool:
  return d.get("model_type") == "modernbert"


def is_modernbert_folder(folder: str) -> bool:
  path = os.path.join(folder, "config.json")
  try:
    with open(path, encoding="utf-8") as f:
      d = json.load(f)
  except (OSError, ValueError):
    return False
  return isinstance(d, dict) and is_modernbert_dict(d)


def is_modernbert(config: BertConfig) -> bool:
  return config.encoder == modernbert.ModernBertFamily.name


# ---- the name table ------------------------------------------------------------------------------------------
def _linear(ours, hf_name: str, group: str, bias: bool) -> List[Entry]:
  t = [Entry(ours + ("kernel",), "", hf_name + ".weight", "dense_kernel", group)]
  return t + ([Entry(ours + ("bias",), "", hf_name + ".bias", "same", group)] if bias else [])


def _norm(ours, hf_name: str, group: str, bias: bool) -> List[Entry]:
  t = [Entry(ours + ("scale",), "", hf_name + ".weight", "same", group)]
  return t + ([Entry(ours + ("bias",), "", hf_name + ".bias", "same", group)] if bias else [])


def name_table(config: BertConfig, head: str = "mlm") -> List[Entry]:
  """Every parameter of BertForPreTraining(config, ("mlm",)) with its transformers key; HF's `head.*` is the
  MLM head (head="mlm", ...ForMaskedLM) or the task features head, our pooler (head="pooler"); the other group
  gets names no checkpoint has, so it is initialised fresh and reported."""
  if not is_modernbert(config):
    raise ConversionError(f"encoder={config.encoder!r}: the ModernBERT layout needs encoder='modernbert'")
  nb = config.norm_bias
  emb, enc = ("bert", "embeddings"), ("bert", "encoder")
  t = [Entry(emb + ("word_embeddings", "embedding"), "", ROOT + "embeddings.tok_embeddings.weight", "same",
             "embeddings")]
  t += _norm(emb + ("norm",), ROOT + "embeddings.norm", "embeddings", nb)
  for i in range(config.num_hidden_layers):
    o, h = enc + (f"layer_{i}",), f"{ROOT}layers.{i}."
    if i:
      t += _norm(o + ("attn_norm",), h + "attn_norm", "encoder", nb)
    t += _linear(o + ("attn", "Wqkv"), h + "attn.Wqkv", "encoder", config.attention_bias)
    t += _linear(o + ("attn", "Wo"), h + "attn.Wo", "encoder", config.attention_bias)
    t += _norm(o + ("mlp_norm",), h + "mlp_norm", "encoder", nb)
    t += _linear(o + ("mlp", "Wi"), h + "mlp.Wi", "encoder", config.mlp_bias)
    t += _linear(o + ("mlp", "Wo"), h + "mlp.Wo", "encoder", config.mlp_bias)
  t += _norm(enc + ("final_norm",), ROOT + "final_norm", "encoder", nb)
  pre = {"mlm": "", "pooler": ""}
  pre["pooler" if head == "mlm" else "mlm"] = _UNUSED
  t += _linear(("bert", "pooler", "dense"), pre["pooler"] + "head.dense", "pooler", config.classifier_bias)
  t += _norm(("bert", "pooler", "norm"), pre["pooler"] + "head.norm", "pooler", nb)
  t += _linear(("mlm", "transform"), pre["mlm"] + "head.dense", "mlm", config.classifier_bias)
  t += _norm(("mlm", "LayerNorm"), pre["mlm"] + "head.norm", "mlm", nb)
  if config.decoder_bias:
    t.append(Entry(("mlm", "output_bias"), "", pre["mlm"] + "decoder.bias", "same", "mlm"))
  return t


def layout(head: str = "mlm") -> mapping.Layout:
  return mapping.Layout("modernbert", functools.partial(name_table, head=head), TARGETS, ("pooler", "mlm"))


# ---- config --------------------------------------------------------------------------------------------------
_COPIED = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
           "max_position_embeddings", "initializer_range", "norm_eps", "norm_bias", "attention_bias", "mlp_bias",
           "decoder_bias", "classifier_bias", "classifier_pooling", "local_attention", "global_attn_every_n_layers",
           "layer_types", "global_rope_theta", "local_rope_theta", "rope_parameters")


def hf_config_to_modernbert(d: dict, source: str) -> BertConfig:
  """A ModernBertConfig dict (either spelling: layer_types / rope_parameters or global_attn_every_n_layers /
  global_rope_theta / local_rope_theta) -> BertConfig(encoder="modernbert"); what cannot run exactly is a
  ConversionError naming `source`."""
  if not is_modernbert_dict(d):
    raise ConversionError(f"{source}: model_type={d.get('model_type')!r}; expected 'modernbert'")
  missing = [k for k in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                         "intermediate_size") if k not in d]
  if missing:
    raise ConversionError(f"{source}: config lacks {missing}")
  if d.get("tie_word_embeddings", True) is False:
    raise ConversionError(f"{source}: tie_word_embeddings=false; this package's MLM decoder is tied to the "
                          "token embeddings, so an untied decoder cannot be converted exactly")
  rope = d.get("rope_parameters") or {}
  for layer_type, params in (rope.items() if isinstance(rope, dict) else ()):
    kind = params.get("rope_type", "default") if isinstance(params, dict) else None
    if kind != "default":
      raise ConversionError(f"{source}: rope_parameters[{layer_type!r}].rope_type={kind!r}; only 'default' "
                            "rotary positions are supported")
  fields = {k: d[k] for k in _COPIED if k in d and d[k] is not None}
  fields.update(
      encoder="modernbert", position_embedding_type="rotary",
      hidden_act=mapping.check_hidden_act(d.get("hidden_activation", d.get("hidden_act", "gelu")), source),
      classifier_activation=mapping.check_hidden_act(d.get("classifier_activation", "gelu"), source),
      hidden_dropout_prob=float(d.get("mlp_dropout", 0.0) or 0.0),
      attention_probs_dropout_prob=float(d.get("attention_dropout", 0.0) or 0.0))
  drops = {k: d.get(k) for k in ("embedding_dropout", "mlp_dropout") if d.get(k)}
  if len(set(drops.values())) > 1:   # one rate here for both (hidden_dropout_prob)
    fields["hidden_dropout_prob"] = float(max(drops.values()))
  return hf.config_from_dict(fields, source)


def modernbert_config_dict(config: BertConfig, architecture: str, pad_token_id: int = 0,
                           num_labels: Optional[int] = None, special_ids: Optional[Dict[str, int]] = None) -> dict:
  """config.json of a ModernBERT folder, in transformers 5's spelling (layer_types, rope_parameters) with the
  older keys beside them (global_attn_every_n_layers, global/local_rope_theta), so older releases read it too."""
  for field in ("hidden_act", "classifier_activation"):
    if getattr(config, field) not in _ACT_TO_HF:
      raise ConversionError(f"{field}={getattr(config, field)!r} has no transformers equivalent")
  out = {
      "architectures": [architecture], "model_type": "modernbert",
      "vocab_size": config.vocab_size, "hidden_size": config.hidden_size,
      "num_hidden_layers": config.num_hidden_layers, "num_attention_heads": config.num_attention_heads,
      "intermediate_size": config.intermediate_size, "hidden_activation": _ACT_TO_HF[config.hidden_act],
      "max_position_embeddings": config.max_position_embeddings, "initializer_range": config.initializer_range,
      "norm_eps": config.norm_eps, "norm_bias": config.norm_bias, "attention_bias": config.attention_bias,
      "mlp_bias": config.mlp_bias, "decoder_bias": config.decoder_bias, "classifier_bias": config.classifier_bias,
      "classifier_activation": _ACT_TO_HF[config.classifier_activation],
      "classifier_pooling": config.classifier_pooling, "local_attention": config.local_attention,
      "global_attn_every_n_layers": config.global_attn_every_n_layers,
      "layer_types": list(modernbert.layer_types(config)),
      "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": config.global_rope_theta},
                          "sliding_attention": {"rope_type": "default", "rope_theta": config.local_rope_theta}},
      "global_rope_theta": config.global_rope_theta, "local_rope_theta": config.local_rope_theta,
      "embedding_dropout": config.hidden_dropout_prob, "mlp_dropout": config.hidden_dropout_prob,
      "attention_dropout": config.attention_probs_dropout_prob, "classifier_dropout": config.hidden_dropout_prob,
      "pad_token_id": pad_token_id, "tie_word_embeddings": True, "torch_dtype": "float32",
  }
  if num_labels is not None:
    out["num_labels"] = num_labels
  # the vocab's own [CLS] / [SEP] ids (transformers' defaults, 50281 / 50282, are ModernBERT's BPE vocab's)
  for key, token in (("cls_token_id", "[CLS]"), ("bos_token_id", "[CLS]"), ("sep_token_id", "[SEP]"),
                     ("eos_token_id", "[SEP]")):
    if special_ids and token in special_ids:
      out[key] = special_ids[token]
  return out


def _special_ids(vocab_file: str) -> Dict[str, int]:
  """[CLS] / [SEP] / [MASK] ids of a vocab.txt, or a tokenizer.json's own tokens for those roles."""
  vocab = tokenization.load_vocab(vocab_file, required=())
  return {t: int(vocab[t]) for t in ("[CLS]", "[SEP]", "[MASK]") if t in vocab}


# ---- import --------------------------------------------------------------------------------------------------
def normalize_state_dict(state: Dict[str, np.ndarray], report: mapping.ConversionReport) -> Dict[str, np.ndarray]:
  """Bare ModernBertModel keys get "model."; the tied decoder.weight is checked against the embeddings and
  dropped."""
  out = dict(state)
  if not any(k.startswith(ROOT) for k in out):
    bare = ("embeddings.", "layers.", "final_norm.")
    out = {(ROOT + k if k.startswith(bare) else k): v for k, v in out.items()}
    report.notes.append("bare ModernBertModel checkpoint (keys without the 'model.' prefix)")
  dec = out.pop("decoder.weight", None)
  if dec is not None:
    word = out.get(ROOT + "embeddings.tok_embeddings.weight")
    if word is None or dec.shape != word.shape or not np.array_equal(dec, word):
      raise ConversionError(f"{report.source}: decoder.weight differs from model.embeddings.tok_embeddings."
                            "weight; ModernBERT ties them and so does our model: an untied decoder cannot be "
                            "converted exactly")
    report.notes.append("decoder.weight equals the token embeddings (tied); dropped")
  return out


def import_hf_modernbert(folder: str, output: Optional[str] = None, vocab_file: Optional[str] = None,
                         do_lower_case: Optional[bool] = None, ignore: Sequence[str] = (), seed: int = 0):
  """Converts a Hugging Face ModernBERT folder. Returns (config, params, report); writes `output` when given.
  The group a checkpoint lacks (the MLM head of a classifier, the pooler of a ForMaskedLM) is initialised
  from `seed` and reported; a fine-tuned task head is kept (params["classifier"] or ["qa_outputs"], with
  finetune_info.json in `output`) where a task kind takes it (hf_heads.keep_task_head), else reported as not
  imported."""
  config_path = os.path.join(folder, "config.json")
  if not os.path.exists(config_path):
    raise FileNotFoundError(f"{folder}: no config.json (not a Hugging Face model folder)")
  d = hf.read_config_json(config_path)
  config = hf_config_to_modernbert(d, config_path)
  report = mapping.ConversionReport(source=folder, fmt="hf")
  state = normalize_state_dict(hf.read_hf_state_dict(folder), report)
  patterns = [re.compile(p) for p in ignore]
  kept = hf_heads.keep_task_head(d, state, config, config_path, TASK_CLASSES, patterns, report)
  ignorable = lambda n: bool(hf._HF_BUFFERS.search(n)) or any(p.search(n) for p in patterns)  # noqa: E731
  params = mapping.assign_params(state, "hf", config, report, ignorable=ignorable, seed=seed,
                                 layout=layout("pooler" if hf_heads.task_architecture_of(d, TASK_CLASSES)
                                               else "mlm"))
  hf_heads.add_kept_head(params, kept, report)
  if output:
    _save(folder, output, config, params, vocab_file, do_lower_case, report)
    hf_heads.write_finetune_info(output, kept)
  return config, params, report


def _save(folder: str, output: str, config: BertConfig, params, vocab_file: Optional[str],
          do_lower_case: Optional[bool], report: mapping.ConversionReport) -> None:
  """The params dir with the folder's vocab.txt (or WordPiece tokenizer.json's vocab); a BPE tokenizer.json is
  copied as it is (no vocab.txt can stand for it)."""
  tok_json = os.path.join(folder, "tokenizer.json")
  tmp = None
  if vocab_file is None and not os.path.exists(os.path.join(folder, "vocab.txt")) and os.path.exists(tok_json):
    with open(tok_json, encoding="utf-8") as f:
      kind = (json.load(f).get("model") or {}).get("type")
    if kind != "WordPiece":
      report.notes.append(f"tokenizer: {kind} tokenizer.json copied as it is (no vocab.txt)")
      mapping.save_imported(output, config, params, None, folder, "hf", bool(do_lower_case), report)
      with open(tok_json, "rb") as f:
        fileio.write_bytes_atomic(os.path.join(output, "tokenizer.json"), f.read())
      return
    tmp = tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False).name
    hf._write_vocab_from_tokenizer_json(tok_json, tmp)
    vocab_file = tmp
    report.notes.append("vocab.txt written from tokenizer.json's WordPiece vocab")
  vocab_file = vocab_file or os.path.join(folder, "vocab.txt")
  if not os.path.exists(vocab_file):
    raise FileNotFoundError(f"{folder}: no vocab.txt or tokenizer.json; pass --vocab=PATH")
  try:
    mapping.check_vocab_size(vocab_file, params_dir.count_vocab_lines(vocab_file), config, "config.json", report)
    do_lower_case = mapping.resolve_casing(do_lower_case, report,
                                           functools.partial(hf.hf_do_lower_case, folder, vocab_file))
    mapping.save_imported(output, config, params, vocab_file, folder, "hf", do_lower_case, report)
  finally:
    if tmp:
      os.unlink(tmp)


# ---- export --------------------------------------------------------------------------------------------------
def write_modernbert(ckpt, output: str, heads: str = "auto", source: str = "") -> mapping.ConversionReport:
  """A loaded checkpoint with encoder="modernbert" -> a transformers ModernBERT folder (config.json,
  model.safetensors, vocab.txt, tokenizer_config.json): ModernBertForMaskedLM, or ModernBertModel
  (--heads=none, or auto when the MLM head was initialised at conversion); --heads=auto on a fine-tuned
  checkpoint with a task head (finetune_info.json) writes ModernBertFor{Sequence,Token}
  Classification, QuestionAnswering, MultipleChoice (hf_heads.write_task_model)."""
  if heads == "auto" and hf_heads.task_architecture(ckpt, TASK_CLASSES):
    return hf_heads.write_task_model(ckpt, output, source, TASK_CLASSES)
  config_dict = functools.partial(modernbert_config_dict, special_ids=_special_ids(ckpt.require_vocab()))
  return hf.write_model(ckpt, output, heads, source, heads_table=HEADS, root=ROOT,
                        config_dict=config_dict, layout=layout("mlm"),
                        hint="pre-train with the mlm target, or use --heads=none (encoder only)")


def _task_config_dict(config: BertConfig, architecture: str, vocab_file: str) -> dict:
  return modernbert_config_dict(config, architecture, pad_token_id=hf._pad_id(vocab_file),
                                special_ids=_special_ids(vocab_file))


# The fine-tuned heads kept on import and written by export (hf_heads). HF's head.* is our pooler in each class
# (pooled_output for a sentence or a choice, token_output on every token) and classifier.* our task dense
# (qa_outputs for question answering: transformers 5's ModernBertForQuestionAnswering names it classifier).
TASK_CLASSES = hf_heads.TaskClasses(
    classes=hf_heads.class_names("ModernBert", qa_key="classifier"),
    encoder_arrays=hf_heads.layout_arrays(layout("pooler")),
    pooler_heads=("sequence_classification", "token_classification", "question_answering", "multiple_choice"),
    pooling=("through its head (head.dense, head.norm) on the [CLS] vector or the token mean "
             "(classifier_pooling): fine-tune with pooling=cls (and --config.model.classifier_pooling=mean for "
             "the mean)"),
    body=("the encoder and its prediction head (head.*, as the pooler: pooled_output / token_output) were, and "
          "fine-tuning puts its own classifier on them"),
    config_dict=_task_config_dict)
