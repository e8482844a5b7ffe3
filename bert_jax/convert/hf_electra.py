"""ELECTRA checkpoints in and out: Hugging Face folders (no PyTorch) and google-research/electra TF checkpoints.

    python -m bert_jax.convert import-hf --input=ELECTRA_DIR --output=DIR      # config.json model_type "electra"
    python -m bert_jax.convert import-tf --checkpoint=electra_base/model.ckpt-766000 --config=config.json \
        --output=DIR                                                          # names under electra/ + generator/
    python -m bert_jax.convert export-hf --input=DIR --output=HF_DIR          # params with an ELECTRA head

What maps onto what (our params tree: models/electra.py):

  ours                                    Hugging Face key                  google-research/electra variable
  bert/embeddings/*                       electra.embeddings.*              electra/embeddings/*
  bert/embeddings/projection (E != H)     electra.embeddings_project        electra/embeddings_project
  bert/encoder/layer_i/*                  electra.encoder.layer.i.*         electra/encoder/layer_i/*
  discriminator_predictions/dense         discriminator_predictions.dense   discriminator_predictions/dense
  discriminator_predictions/dense_prediction  ...dense_prediction           discriminator_predictions/dense_1
  generator/embeddings_project (E != Hg)  [generator folder] electra.embeddings_project   generator/embeddings_project
  generator/encoder/layer_i/*             [generator folder] electra.encoder.layer.i.*    generator/encoder/layer_i/*
  generator/generator_predictions/*       generator_predictions.{dense, LayerNorm}        generator_predictions/*
  generator/output_bias                   generator_lm_head.bias                          generator_predictions/output_bias

- ElectraForPreTraining / ElectraModel folders import as the discriminator: `bert` (+ `discriminator_predictions`);
  HF ELECTRA has no pooler, so `bert/pooler` is initialised fresh (reported), as for a BertForMaskedLM import.
  Fine-tuning, `predict features` and export then use it like any BERT encoder.
- An ElectraForMaskedLM folder (a released generator) imports as a BERT MLM model: `bert` + `mlm`
  (generator_predictions -> mlm/transform + mlm/LayerNorm, generator_lm_head.bias -> mlm/output_bias; the lm
  head's weight must equal the word embeddings, as transformers ties them).
- An ElectraFor{TokenClassification, QuestionAnswering} folder imports as the discriminator's encoder with its
  task head kept (classifier / qa_outputs, a finetune_info.json: hf_heads.py), and export-hf writes it back as
  that class. The sentence and choice classes pool through a dense + GELU head that none of ours is: their
  classifier.* is dropped on purpose with --ignore (a fine-tuned ELECTRA work dir exports as BertFor*).
- A google-research/electra checkpoint holds both models (one without generator/ variables imports as the
  discriminator alone, as an ElectraForPreTraining folder does): it imports as the full ElectraForPreTraining tree
  (bert, generator, discriminator_predictions) for continued ELECTRA pre-training; the generator's width is read
  from the checkpoint's shapes and written to convert_info.json (`electra.generator_hidden_fraction`: pass it as
  --config.electra.generator_hidden_fraction with --config.init_checkpoint=DIR). Adam slots, global_step and
  ELECTRA's `temperature` bookkeeping are ignored and reported.
- Export writes the discriminator as an ElectraForPreTraining folder (--heads=pretraining) or ElectraModel
  (--heads=none); with a generator in the params, --heads=mlm writes the generator as ElectraForMaskedLM (an
  imported ElectraForMaskedLM's bert + mlm params go back the same way).

Embedding width E != H (ELECTRA-Small: E 128, H 256) maps onto factorised embeddings (model.embedding_size = E,
bert/embeddings/projection); the generator reads the E-wide embeddings before that projection, as Google's.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
from typing import Dict, List, Optional, Sequence, Tuple

import flax
import flax.linen as nn
import jax
import numpy as np
from flax import traverse_util

from bert_jax import lean_imports
from bert_jax.convert import google_tf, hf, hf_heads, mapping
from bert_jax.convert.mapping import ConversionError, Entry, _dense, _ln
from bert_jax.models import BertForPreTraining, dummy_inputs
from bert_jax.models.config import BertConfig
from bert_jax.models.objectives.electra import Electra
from bert_jax.models.electra import ElectraDiscriminator, ElectraForPreTraining, generator_heads as default_heads
from bert_jax.pretrained import params_dir
from bert_jax.pretrained.load import load_pretrained

HEADS = {
    # heads option: (architecture, what is written)
    "pretraining": "ElectraForPreTraining",     # discriminator + its head
    "none": "ElectraModel",                     # discriminator encoder only
    "mlm": "ElectraForMaskedLM",                # the generator (params with a generator only)
}
# ELECTRA's TF bookkeeping beside the weights (its Gumbel temperature is a non-trainable variable).
_TF_IGNORABLE = re.compile(r"(^|/)temperature$")
_HF_BUFFERS = re.compile(r"(^|\.)(position_ids|token_type_ids)$")
_IGNORE_HINT = ("; a fine-tuned model's task head (e.g. classifier.*) is dropped on purpose with "
                "--ignore='^classifier\\.'")


def is_electra_folder(folder: str) -> bool:
  path = os.path.join(folder, "config.json")
  if not os.path.exists(path):
    return False
  try:
    d = hf.read_config_json(path)
  except ConversionError:
    return False         # the importer it falls to names the file
  return d.get("model_type") == "electra"


def is_electra_params(params) -> bool:
  """An ELECTRA params tree: the discriminator's head is present."""
  return "discriminator_predictions" in params


def is_electra_dir(directory: str) -> bool:
  """Our checkpoint directory holds an ELECTRA model: an ELECTRA pre-training work dir (plan.json's targets) or
  an imported ELECTRA checkpoint (convert_info.json's format)."""
  plan = params_dir.read_json(os.path.join(directory, "plan.json")) if os.path.isdir(directory) else {}
  info = params_dir.read_info(directory) if os.path.isdir(directory) else {}
  return Electra.name in (plan.get("targets") or ()) or str(info.get("format", "")).endswith("electra")


def is_electra_tf_checkpoint(checkpoint: str) -> bool:
  """A google-research/electra checkpoint: its variables live under electra/ (Google BERT's under bert/)."""
  prefix = google_tf._checkpoint_prefix(checkpoint)   # a wrong path fails here, before TensorFlow's import
  tf = lean_imports.tensorflow()  # lazy, as google_tf.read_tf_checkpoint: only TF checkpoints need it
  with google_tf.unreadable_as_conversion_error(prefix):
    return any(n.startswith("electra/") for n, _ in tf.train.list_variables(prefix))


# ---- name tables ------------------------------------------------------------------------------------------
def _width(config: BertConfig) -> int:
  return int(getattr(config, "embedding_size", 0) or config.hidden_size)


def _embeddings(config: BertConfig, google: str) -> List[Entry]:
  """bert/embeddings/* under Google's scope `google` and HF's electra.*: BERT's tables and LayerNorm
  (mapping.embedding_entries), then ELECTRA's E -> H projection when E != H."""
  t = mapping.embedding_entries("electra", google)
  if _width(config) != config.hidden_size:
    t += _dense(("bert", "embeddings", "projection"), f"{google}/embeddings_project", "electra.embeddings_project",
                "embeddings")
  return t


def _encoder(config: BertConfig, ours: Tuple[str, ...], google: str, group: str) -> List[Entry]:
  """config's layers under our `ours`, Google's `google`/encoder and HF's electra.encoder: its encoder family's
  per-layer names (ELECTRA's layers are BERT's), expanded as BERT's table expands them; a family without
  them is refused (mapping.check_post_ln_transformer)."""
  names = mapping.check_post_ln_transformer(config)
  t: List[Entry] = []
  for i in range(config.num_hidden_layers):
    t += mapping.layer_entries(names, ours + (f"layer_{i}",), f"{google}/encoder/layer_{i}",
                               f"electra.encoder.layer.{i}", group)
  return t


# The groups the conversion report names ELECTRA's heads by, from their top-level parameter group.
_HEAD_GROUPS = {"discriminator_predictions": "discriminator", "generator": "generator"}


def _heads(top: str) -> List[Entry]:
  """ELECTRA's head parameters under `top` with their Google and HF names (the objective's own `conversion`,
  models/objectives/electra.py)."""
  return [Entry(ours, google, hf_name, kind, _HEAD_GROUPS[top])
          for ours, google, hf_name, kind in Electra.conversion["electra"] if ours[0] == top]


def discriminator_table(config: BertConfig) -> List[Entry]:
  """The discriminator (ElectraDiscriminator's params less the pooler) under Google's and HF's names."""
  t = _embeddings(config, "electra")
  t += _encoder(config, ("bert", "encoder"), "electra", "encoder")
  return t + _heads("discriminator_predictions")


def generator_table(generator: BertConfig, width: int) -> List[Entry]:
  """ElectraForPreTraining's generator/* under Google's names and the generator folder's HF names."""
  t: List[Entry] = []
  if width != generator.hidden_size:
    t += _dense(("generator", "embeddings_project"), "generator/embeddings_project", "electra.embeddings_project",
                "generator")
  t += _encoder(generator, ("generator", "encoder"), "generator", "generator")
  return t + _heads("generator")


def generator_as_bert_table(config: BertConfig) -> List[Entry]:
  """A released generator (HF ElectraForMaskedLM) as BertForPreTraining(config, ("mlm",)) less the pooler."""
  t = _embeddings(config, "generator")
  t += _encoder(config, ("bert", "encoder"), "generator", "encoder")
  t += _dense(("mlm", "transform"), "generator_predictions/dense", "generator_predictions.dense", "mlm")
  t += _ln(("mlm", "LayerNorm"), "generator_predictions/LayerNorm", "generator_predictions.LayerNorm", "mlm")
  t.append(Entry(("mlm", "output_bias"), "generator_predictions/output_bias", "generator_lm_head.bias", "same", "mlm"))
  return t


# ---- shapes and assignment ---------------------------------------------------------------------------------
def _shapes(model: nn.Module) -> Dict[Tuple[str, ...], Tuple[int, ...]]:
  cfg = model.config
  inputs = dummy_inputs(cfg)
  if isinstance(model, ElectraDiscriminator):
    inputs = inputs[:3]
  tree = jax.eval_shape(lambda: model.init(jax.random.key(0), *inputs))["params"]
  flat = traverse_util.flatten_dict(nn.unbox(flax.core.unfreeze(tree)))
  return {k: tuple(v.shape) for k, v in flat.items()}


def _assign(source: Dict[str, np.ndarray], fmt: str, table: List[Entry], shapes, report: mapping.ConversionReport,
            ignorable) -> Dict[Tuple[str, ...], np.ndarray]:
  """{source name: array} -> {our path: float32 array} over `table`; unknown, missing and mis-shaped names are
  one ConversionError each, naming them."""
  by_source = {e.source(fmt): e for e in table}
  unknown = sorted(n for n in source if n not in by_source and not ignorable(n))
  if unknown:
    raise ConversionError(f"{report.source}: {len(unknown)} {fmt} variable(s) map to no ELECTRA parameter: "
                          f"{unknown[:20]}" + (_IGNORE_HINT if fmt == "hf" else ""))
  report.ignored = sorted(n for n in source if n not in by_source)
  missing = [e for e in table if e.source(fmt) not in source]
  if missing:
    raise ConversionError(f"{report.source}: {len(missing)} ELECTRA parameter(s) have no {fmt} variable: " +
                          ", ".join(f"{e.source(fmt)} (-> {e.path})" for e in missing[:20]))
  flat, bad = {}, []
  for e in table:
    array, target = np.asarray(source[e.source(fmt)]), shapes[e.ours]
    want = mapping.source_shape(fmt, e.kind, target)
    if tuple(array.shape) != want:
      bad.append(f"{e.source(fmt)}: checkpoint shape {tuple(array.shape)}, model expects {want} (-> {e.path})")
      continue
    report.source_dtypes[str(array.dtype)] = report.source_dtypes.get(str(array.dtype), 0) + 1
    flat[e.ours] = mapping.to_ours(fmt, e.kind, array.astype(np.float32), target)
  if bad:
    raise ConversionError(f"{report.source}: {len(bad)} shape mismatch(es) between the checkpoint and the model "
                          "config (is it this checkpoint's config?):" + mapping.capped_lines(bad))
  report.loaded = len(flat)
  return flat


def _fresh_pooler(config: BertConfig, flat: dict, report: mapping.ConversionReport, seed: int) -> None:
  """HF / Google ELECTRA has no pooler: BERT's initialisation for bert/pooler (fine-tuning's "cls" pooling)."""
  paths = [("bert", "pooler", "kernel"), ("bert", "pooler", "bias")]
  fresh = traverse_util.flatten_dict(mapping.init_params(config, seed, paths=paths))
  flat.update({p: fresh[p] for p in paths})
  report.fresh_groups = ["pooler"]


def _check_table(table: List[Entry], shapes, allowed_extra: Sequence[Tuple[str, ...]]) -> None:
  ours = {e.ours for e in table}
  extra, missing = ours - set(shapes), set(shapes) - ours - set(allowed_extra)
  if extra or missing:
    raise RuntimeError(f"bert_jax.convert.hf_electra is out of date with bert_jax.models.electra: table entries "
                       f"without a parameter {sorted(extra)[:5]}, parameters without an entry {sorted(missing)[:5]}")


_POOLER = (("bert", "pooler", "kernel"), ("bert", "pooler", "bias"))


# ---- configs ------------------------------------------------------------------------------------------------
def electra_config_to_bert(d: dict, source: str) -> BertConfig:
  """HF ElectraConfig (or Google-style JSON with an embedding_size) -> the encoder's BertConfig."""
  missing = [k for k in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                         "intermediate_size") if k not in d]
  if missing:
    raise ConversionError(f"{source}: config lacks {missing}")
  pos = d.get("position_embedding_type", "absolute")
  if pos != "absolute":
    raise ConversionError(f"{source}: position_embedding_type={pos!r}; only 'absolute' is supported")
  hf.check_encoder_config(d, source)
  fields = {k: v for k, v in hf.architecture_dict(d).items() if k != "embedding_size"}
  if "hidden_act" in fields:
    fields["hidden_act"] = mapping.check_hidden_act(fields["hidden_act"], source)
  config = hf.config_from_dict(fields, source)
  try:
    width = int(d.get("embedding_size") or config.hidden_size)
  except (TypeError, ValueError) as e:
    raise ConversionError(f"{source}: embedding_size={d.get('embedding_size')!r}; expected an integer") from e
  if width != config.hidden_size:
    if "embedding_size" not in {f.name for f in dataclasses.fields(BertConfig)}:
      raise ConversionError(f"{source}: embedding_size={width} != hidden_size={config.hidden_size} needs "
                            "factorised embeddings (model.embedding_size), which this version lacks")
    config = config.replace(embedding_size=width)
  return config


def electra_config_dict(config: BertConfig, architecture: str, pad_token_id: int = 0) -> dict:
  d = hf.hf_config_dict(config, architecture, pad_token_id)
  d.update(model_type="electra", embedding_size=_width(config), summary_type="first", summary_use_proj=True,
           summary_activation="gelu", summary_last_dropout=0.1)
  d.pop("tie_word_embeddings", None)
  return d


# ---- import ------------------------------------------------------------------------------------------------
def _normalize(state: Dict[str, np.ndarray], report) -> Dict[str, np.ndarray]:
  out = {}
  for k, v in state.items():
    k = re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", k))
    out[k if not k.startswith(("embeddings.", "encoder.", "embeddings_project.")) else "electra." + k] = v
  return out


def _check_generator_head_act(config: BertConfig, source: str) -> None:
  """transformers' ElectraGeneratorPredictions applies the erf GELU whatever hidden_act says (its discriminator
  head and layers follow hidden_act), and our MLM / generator heads apply hidden_act, as google-research/electra
  does: a generator of another hidden_act computes other logits in the two, so it is refused, not converted."""
  if config.hidden_act != "gelu":
    raise ConversionError(
        f"{source}: hidden_act={config.hidden_act!r}: transformers' ElectraForMaskedLM applies 'gelu' in its "
        "generator_predictions head whatever hidden_act says, and this package's MLM head applies hidden_act, "
        "so this generator's logits cannot be reproduced; only hidden_act='gelu' generators convert")


def import_hf_electra(folder: str, output: Optional[str] = None, vocab_file: Optional[str] = None,
                      do_lower_case: Optional[bool] = None, ignore: Sequence[str] = (), seed: int = 0):
  """A Hugging Face ELECTRA folder -> (config, params, report); writes `output` (a params dir) when given.
  ElectraForPreTraining / ElectraModel: the discriminator; ElectraForMaskedLM: a BERT MLM model (module doc);
  ElectraFor{TokenClassification, QuestionAnswering}: the discriminator's encoder with its task head kept
  (TASK_CLASSES)."""
  config_path = os.path.join(folder, "config.json")
  if not os.path.exists(config_path):
    raise FileNotFoundError(f"{folder}: no config.json (not a Hugging Face model folder)")
  d = hf.read_config_json(config_path)
  config = electra_config_to_bert(d, config_path)
  report = mapping.ConversionReport(source=folder, fmt="hf")
  state = _normalize(hf.read_hf_state_dict(folder), report)
  patterns = [re.compile(p) for p in ignore]
  kept = hf_heads.keep_task_head(d, state, config, config_path, TASK_CLASSES, patterns, report)
  ignorable = lambda n: bool(_HF_BUFFERS.search(n)) or any(p.search(n) for p in patterns)  # noqa: E731
  is_generator = any(k.startswith("generator_predictions.") for k in state)
  if is_generator:
    _check_generator_head_act(config, config_path)
    lm_w = state.pop("generator_lm_head.weight", None)
    word = state.get("electra.embeddings.word_embeddings.weight")
    if lm_w is not None and (word is None or lm_w.shape != word.shape or not np.array_equal(lm_w, word)):
      raise ConversionError(f"{folder}: generator_lm_head.weight differs from the word embeddings; ELECTRA ties "
                            "them and so does our model")
    model = BertForPreTraining(config, targets=("mlm",))
    table = generator_as_bert_table(config)
  else:
    model = ElectraDiscriminator(config)
    table = discriminator_table(config)
    if not any(k.startswith("discriminator_predictions.") for k in state):   # ElectraModel: encoder only
      table = [e for e in table if e.group != "discriminator"]
      report.notes.append("ElectraModel folder (no discriminator head): params hold the encoder only")
  shapes = _shapes(model)
  _check_table(table, shapes, _POOLER + tuple(p for p in shapes if p[0] == "discriminator_predictions"))
  flat = _assign(state, "hf", table, shapes, report, ignorable)
  _fresh_pooler(config, flat, report, seed)
  params = traverse_util.unflatten_dict(flat)
  hf_heads.add_kept_head(params, kept, report)
  if vocab_file and not os.path.exists(vocab_file):
    raise FileNotFoundError(f"vocab not found: {vocab_file}")
  vocab_file = vocab_file or os.path.join(folder, "vocab.txt")
  if not os.path.exists(vocab_file):
    raise FileNotFoundError(f"{folder}: no vocab.txt; pass --vocab=PATH")
  mapping.check_vocab_size(vocab_file, params_dir.count_vocab_lines(vocab_file), config, "config.json", report)
  do_lower_case = mapping.resolve_casing(do_lower_case, report,
                                         functools.partial(hf.hf_do_lower_case, folder, vocab_file))
  if output:
    mapping.save_imported(output, config, params, vocab_file, folder, "hf_electra", do_lower_case, report)
    hf_heads.write_finetune_info(output, kept)
  return config, params, report


def _generator_heads_from_config(path: str, hidden: int, layers: int, ffn: int) -> int:
  """num_attention_heads of a generator config JSON (HFL's generator.json, or a Hugging Face ElectraConfig of
  the generator), after checking that its sizes are the checkpoint's."""
  d = hf.read_config_json(path)
  heads = d.get("num_attention_heads")
  if isinstance(heads, bool) or not isinstance(heads, int) or heads < 1:
    raise ConversionError(f"{path}: num_attention_heads={heads!r}; expected a positive integer (the generator's "
                          "attention heads)")
  for key, want in (("hidden_size", hidden), ("num_hidden_layers", layers), ("intermediate_size", ffn)):
    if key in d and d[key] != want:
      raise ConversionError(f"{path}: {key}={d[key]!r}, but the checkpoint's generator has {key}={want}: not this "
                            "checkpoint's generator config")
  return heads


def infer_generator(config: BertConfig, variables: Dict[str, np.ndarray], generator_config: Optional[str] = None,
                    generator_heads: Optional[int] = None, report: Optional[mapping.ConversionReport] = None
                    ) -> BertConfig:
  """The generator's architecture from a google-research/electra checkpoint's shapes (hidden from the first
  query kernel, FFN from the first intermediate kernel, depth from the layer count).

  The head count is not in the shapes (TF kernels are [Hg, Hg]); in order: `generator_heads` (--generator_heads),
  `generator_config` (a generator config JSON: HFL's generator.json), else google-research/electra's rule
  (run_pretraining.get_generator_config: max(1, Hg // 64), a fixed head size of 64), which must divide Hg; when it
  does not (a checkpoint of other code), the discriminator's head size if that divides Hg, else an error asking
  for --generator_heads. Where the rule and the discriminator's head size disagree, the report says so."""
  q = variables.get("generator/encoder/layer_0/attention/self/query/kernel")
  ffn = variables.get("generator/encoder/layer_0/intermediate/dense/kernel")
  if q is None or ffn is None:
    raise ConversionError("the checkpoint has no generator/encoder/layer_0 variables (query and intermediate "
                          "kernels): its generator/ variables are incomplete")
  hidden = int(np.shape(q)[1])
  ffn_size = int(np.shape(ffn)[1])
  layers = len({m.group(1) for n in variables for m in [re.match(r"generator/encoder/layer_(\d+)/", n)] if m})
  notes = []
  disc_head = config.head_dim
  if generator_heads is not None:
    heads, source = int(generator_heads), "--generator_heads"
    if heads < 1 or hidden % heads:
      raise ConversionError(f"--generator_heads={generator_heads}: the generator's hidden size {hidden} (from "
                            "generator/encoder/layer_0/attention/self/query/kernel) is not a multiple of it; "
                            f"expected a positive divisor of {hidden}")
  elif generator_config:
    heads, source = _generator_heads_from_config(generator_config, hidden, layers, ffn_size), generator_config
    if hidden % heads:
      raise ConversionError(f"{generator_config}: num_attention_heads={heads} does not divide the generator's "
                            f"hidden size {hidden}")
  else:
    heads = max(1, hidden // 64)
    source = "google-research/electra's rule max(1, hidden // 64)"
    if hidden % heads:
      if hidden % disc_head == 0:
        heads, source = hidden // disc_head, f"the discriminator's head size {disc_head}"
      else:
        raise ConversionError(f"the generator's hidden size {hidden} is a multiple of neither 64 nor the "
                              f"discriminator's head size {disc_head}: pass --generator_heads=N (N dividing "
                              f"{hidden}) or --generator_config=generator.json")
    elif disc_head != 64 and hidden % disc_head == 0 and hidden // disc_head != heads:
      notes.append(f"the discriminator's head size is {disc_head}, which would make {hidden // disc_head} "
                   f"generator heads; if the checkpoint was trained so, pass --generator_heads="
                   f"{hidden // disc_head}")
  if report is not None:
    report.notes.append(f"generator attention heads: {heads} of size {hidden // heads} (from {source})"
                        + ("; " + "; ".join(notes) if notes else ""))
  return config.replace(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=ffn_size)


def check_config_sizes(config: BertConfig, variables: Dict[str, np.ndarray], config_file: str,
                       scope: str = "electra") -> None:
  """The config's sizes against the checkpoint's `scope`/ shapes, before the name-by-name assignment: a config of
  another size (e.g. hidden_size 48 for a 64-wide checkpoint) was reported as missing embeddings_project
  variables, or as dozens of shape mismatches, not as the one field that differs. ConversionError naming each."""
  q = variables.get(f"{scope}/encoder/layer_0/attention/self/query/kernel")
  ffn = variables.get(f"{scope}/encoder/layer_0/intermediate/dense/kernel")
  words = variables.get(f"{scope}/embeddings/word_embeddings")
  layers = len({m.group(1) for n in variables for m in [re.match(rf"{scope}/encoder/layer_(\d+)/", n)] if m})
  found = []
  if q is not None and np.ndim(q) == 2:
    found.append(("hidden_size", config.hidden_size, int(np.shape(q)[1]), f"{scope}/encoder/layer_0/attention/self/"
                  f"query/kernel {tuple(np.shape(q))}"))
  if ffn is not None and np.ndim(ffn) == 2:
    found.append(("intermediate_size", config.intermediate_size, int(np.shape(ffn)[1]),
                  f"{scope}/encoder/layer_0/intermediate/dense/kernel {tuple(np.shape(ffn))}"))
  if layers:
    found.append(("num_hidden_layers", config.num_hidden_layers, layers, f"{scope}/encoder/layer_0 .. layer_{layers - 1}"))
  if words is not None and np.ndim(words) == 2:
    found.append(("vocab_size", config.vocab_size, int(np.shape(words)[0]),
                  f"{scope}/embeddings/word_embeddings {tuple(np.shape(words))}"))
    found.append(("embedding_size", _width(config), int(np.shape(words)[1]),
                  f"{scope}/embeddings/word_embeddings {tuple(np.shape(words))}"))
  bad = [f"{field}={ours} but the checkpoint has {theirs} ({where})" for field, ours, theirs, where in found
         if ours != theirs]
  if bad:
    raise ConversionError(f"{config_file} does not describe this checkpoint: " + "; ".join(bad)
                          + " (pass --config=PATH of this model's size)")


def import_tf_electra(checkpoint: str, config_file: str, output: Optional[str] = None,
                      vocab_file: Optional[str] = None, do_lower_case: Optional[bool] = None,
                      variables: Optional[Dict[str, np.ndarray]] = None, generator_config: Optional[str] = None,
                      generator_heads: Optional[int] = None):
  """A google-research/electra pre-training checkpoint -> ElectraForPreTraining params (module docstring); one
  without generator/ variables -> the discriminator's (generator_config None). The generator's head count:
  `generator_heads`, else `generator_config` (a generator config JSON), else as infer_generator says.
  Returns (config, generator_config, params, report)."""
  if variables is None:
    variables = google_tf.read_tf_checkpoint(checkpoint)
  folder = os.path.dirname(os.path.abspath(checkpoint)) if not os.path.isdir(checkpoint) else checkpoint
  vocab_file = vocab_file or os.path.join(folder, "vocab.txt")
  if not os.path.exists(config_file):
    raise FileNotFoundError(f"model config not found: {config_file} (google-research/electra builds it from "
                            "model_size; write the HF ElectraConfig JSON of that size, e.g. google/electra-small-"
                            "discriminator's config.json, and pass --config=PATH; HFL's zips hold "
                            "discriminator.json)")
  if not os.path.exists(vocab_file):
    raise FileNotFoundError(f"vocab not found: {vocab_file}; pass --vocab=PATH")
  config = electra_config_to_bert(hf.read_config_json(config_file), config_file)
  report = mapping.ConversionReport(source=checkpoint, fmt="google")
  check_config_sizes(config, variables, config_file)
  ignorable = lambda n: google_tf.is_ignorable(n) or bool(_TF_IGNORABLE.search(n))  # noqa: E731
  if not any(n.startswith("generator/") for n in variables):
    # A discriminator alone (a release without its generator, or a checkpoint of a discriminator run): it
    # imports as an ElectraForPreTraining folder does (it said to go through Hugging Face, whose TF converter
    # transformers 5 no longer has).
    shapes = _shapes(ElectraDiscriminator(config))
    table = discriminator_table(config)
    _check_table(table, shapes, _POOLER)
    flat = _assign(variables, "google", table, shapes, report, ignorable)
    _fresh_pooler(config, flat, report, 0)
    report.notes.append("no generator/ variables: the discriminator alone (bert + discriminator_predictions), "
                        "for fine-tuning, features and export-hf; continued ELECTRA pre-training needs its "
                        "generator")
    return _finish_tf_electra(checkpoint, folder, config, None, traverse_util.unflatten_dict(flat), report,
                              config_file, vocab_file, output, do_lower_case, info={})
  generator = infer_generator(config, variables, generator_config, generator_heads, report)
  model = ElectraForPreTraining(config, generator)
  shapes = _shapes(model)
  table = discriminator_table(config) + generator_table(generator, _width(config))
  _check_table(table, shapes, _POOLER)
  flat = _assign(variables, "google", table, shapes, report, ignorable)
  _fresh_pooler(config, flat, report, 0)
  params = traverse_util.unflatten_dict(flat)
  fraction = generator.hidden_size / config.hidden_size
  same_heads = default_heads(generator.hidden_size) == generator.num_attention_heads
  report.notes.append(f"generator: L{generator.num_hidden_layers}/H{generator.hidden_size}/"
                      f"A{generator.num_attention_heads}; continue ELECTRA "
                      f"pre-training with --config.targets=\"('electra',)\" "
                      f"--config.electra.generator_hidden_fraction={fraction:.6g}"
                      + ("" if generator.num_hidden_layers == config.num_hidden_layers else
                         f" --config.electra.generator_num_layers={generator.num_hidden_layers}")
                      + ("" if same_heads else
                         f" --config.electra.generator_num_attention_heads={generator.num_attention_heads}"))
  info = {"generator_hidden_fraction": fraction, "generator_num_layers": generator.num_hidden_layers,
          "generator_num_attention_heads": generator.num_attention_heads}
  return _finish_tf_electra(checkpoint, folder, config, generator, params, report, config_file, vocab_file, output,
                            do_lower_case, info={"electra": info})


def _finish_tf_electra(checkpoint, folder, config, generator, params, report, config_file, vocab_file, output,
                       do_lower_case, info):
  mapping.check_vocab_size(vocab_file, params_dir.count_vocab_lines(vocab_file), config, config_file, report)
  do_lower_case = mapping.resolve_casing(do_lower_case, report, functools.partial(
      params_dir.guess_do_lower_case_why, vocab_file, hint=os.path.basename(folder)))
  if output:
    params_dir.save_params_dir(output, config, params, vocab_file, info={
        "source": os.path.abspath(checkpoint), "format": "google_tf_electra", "do_lower_case": bool(do_lower_case),
        "report": report.to_dict(), **info})
  return config, generator, params, report


# ---- export ------------------------------------------------------------------------------------------------
def _generator_of(config: BertConfig, params) -> BertConfig:
  """The generator's architecture from its params' shapes (as infer_generator, on our tree)."""
  g = params["generator"]["encoder"]
  layers = sorted(k for k in g if k.startswith("layer_"))
  hidden = int(np.shape(g["layer_0"]["attention"]["query"]["kernel"])[1] * np.shape(
      g["layer_0"]["attention"]["query"]["kernel"])[2])
  heads = int(np.shape(g["layer_0"]["attention"]["query"]["kernel"])[1])
  return config.replace(hidden_size=hidden, num_attention_heads=heads, num_hidden_layers=len(layers),
                        intermediate_size=int(np.shape(g["layer_0"]["ffn"]["intermediate"]["kernel"])[1]),
                        share_layers=False)   # the generator never shares (models.electra.generator_config)


def _unshare(config: BertConfig, flat):
  """share_layers: transformers' ELECTRA has no cross-layer sharing, so the one shared layer
  (bert/encoder/shared/layer) is written as each of the num_hidden_layers layers: the same function."""
  if not config.share_layers:
    return config, flat
  out = {}
  for p, v in flat.items():
    if p[:4] == ("bert", "encoder", "shared", "layer"):
      out.update({("bert", "encoder", f"layer_{i}") + p[4:]: v for i in range(config.num_hidden_layers)})
    else:
      out[p] = v
  return config.replace(share_layers=False), out


def _export(table: List[Entry], flat, shapes) -> Dict[str, np.ndarray]:
  out, problems = {}, []
  for e in table:
    if e.ours not in flat:
      problems.append(f"{e.path}: missing from the params")
      continue
    array = np.asarray(flat[e.ours])
    if tuple(array.shape) != shapes[e.ours]:
      problems.append(f"{e.path}: shape {tuple(array.shape)}, config expects {shapes[e.ours]}")
      continue
    out[e.hf] = mapping.from_ours("hf", e.kind, array.astype(np.float32))
  if problems:
    raise ConversionError("params do not match the model config:\n  " + "\n  ".join(problems))
  return out


def _check_nothing_dropped(table: List[Entry], flat, source: str, heads: Tuple[str, ...]) -> None:
  """Every encoder (and written head) parameter has a Hugging Face key: a parameter left out would give the
  folder other outputs than ours. The one such parameter: an E -> H projection with E = H
  (model.embedding_size = hidden_size, ALBERT's convention), which transformers' ELECTRA omits."""
  covered = {e.ours for e in table}
  left = sorted("/".join(p) for p in flat if p not in covered and p[:2] != ("bert", "pooler")
                and (p[0] == "bert" or p[0] in heads))
  if left:
    raise ConversionError(
        f"{source}: {left[:4]} have no Hugging Face ELECTRA key (transformers' ELECTRA projects the embeddings "
        "only when embedding_size != hidden_size; this model projects with model.embedding_size = "
        "hidden_size): the folder would compute other outputs. Train with model.embedding_size=0 (or < H) to "
        "export as ELECTRA")


def write_electra(ckpt, output: str, heads: str = "pretraining", source: str = "") -> mapping.ConversionReport:
  """A loaded checkpoint with an ELECTRA head (`load_pretrained`) -> a Hugging Face ELECTRA folder; --heads=auto
  on an imported ElectraFor{TokenClassification, QuestionAnswering} writes that class back (TASK_CLASSES)."""
  source = source or ckpt.directory
  if heads == "auto" and hf_heads.task_architecture(ckpt, TASK_CLASSES):
    return hf_heads.write_task_model(ckpt, output, source, TASK_CLASSES)
  config, params, vocab_file = ckpt.config, ckpt.params, ckpt.require_vocab()
  report = mapping.ConversionReport(source=source, fmt="hf")
  if heads == "auto":   # the discriminator with its head when there is one, else what the params hold
    heads = ("pretraining" if "discriminator_predictions" in params
             else "mlm" if ("mlm" in params or "generator" in params) else "none")
    report.notes.append(f"--heads=auto: {heads} ({HEADS[heads]})")
  if heads not in HEADS:
    raise ValueError(f"heads={heads!r}; expected one of {tuple(HEADS)} or auto")
  flat = traverse_util.flatten_dict(dict(params))
  if config.share_layers:
    config, flat = _unshare(config, flat)
    report.notes.append(f"the shared layer is written as each of the {config.num_hidden_layers} layers "
                        "(transformers' ELECTRA has no sharing; the outputs are the same)")
  if heads == "mlm" and "generator" not in params and "mlm" in params:
    # An imported ElectraForMaskedLM (a released generator: bert + mlm, generator_as_bert_table) goes back
    # the way it came.
    _check_generator_head_act(config, source)
    arrays = _export(generator_as_bert_table(config), flat,
                     _shapes(BertForPreTraining(config, targets=("mlm",))))
    arrays["generator_lm_head.weight"] = arrays["electra.embeddings.word_embeddings.weight"]
    d = electra_config_dict(config, HEADS[heads], hf._pad_id(vocab_file))
    report.notes.append("not exported: bert/pooler (HF ELECTRA has none)")
  elif heads == "mlm":
    if "generator" not in params:
      raise ConversionError(f"{source}: --heads=mlm writes the ELECTRA generator, and these params have none "
                            f"(top-level keys {sorted(params)})")
    generator = _generator_of(config, params)
    _check_generator_head_act(generator, source)
    table = generator_table(generator, _width(config))
    shapes = _shapes(ElectraForPreTraining(config, generator))
    arrays = _export(table, flat, shapes)
    emb = [e for e in discriminator_table(config) if e.group == "embeddings" and e.ours[-2] != "projection"]
    arrays.update(_export(emb, flat, shapes))         # the generator folder carries the shared embeddings
    arrays["generator_lm_head.weight"] = arrays["electra.embeddings.word_embeddings.weight"]
    d = electra_config_dict(generator, HEADS[heads], hf._pad_id(vocab_file))
    d["embedding_size"] = _width(config)
  else:
    table = discriminator_table(config)
    if heads == "none":
      table = [e for e in table if e.group != "discriminator"]
    elif "discriminator_predictions" not in params:
      raise ConversionError(f"{source}: params lack discriminator_predictions needed by --heads=pretraining "
                            f"(ElectraForPreTraining); use --heads=none (ElectraModel)" +
                            (" or --heads=mlm (ElectraForMaskedLM: these params are a generator's)"
                             if "mlm" in params else ""))
    _check_nothing_dropped(table, flat, source, ("discriminator_predictions",) if heads == "pretraining" else ())
    arrays = _export(table, flat, _shapes(ElectraDiscriminator(config)))
    d = electra_config_dict(config, HEADS[heads], hf._pad_id(vocab_file))
    skipped = sorted(k for k in params if k not in ("bert", "discriminator_predictions"))
    report.notes.append("not exported: bert/pooler (HF ELECTRA has none)" +
                        (f", params{skipped} (--heads=mlm writes the generator)" if skipped else ""))
  hf.write_folder(output, arrays, d, vocab_file, ckpt.do_lower_case, config.max_position_embeddings,
                  tokenizer_class="ElectraTokenizer")
  report.loaded = len(arrays)
  return report


def export_electra(input_dir: str, output: str, heads: str = "pretraining") -> mapping.ConversionReport:
  """Our ELECTRA checkpoint (is_electra_dir) -> a Hugging Face ELECTRA folder (write_electra)."""
  return write_electra(load_pretrained(input_dir), output, heads, source=input_dir)


def _task_encoder_arrays(params, config: BertConfig, groups: Tuple[str, ...], source: str) -> Dict[str, np.ndarray]:
  """The discriminator's encoder (no pooler: `groups` never names one here) under ElectraModel's keys."""
  config, flat = _unshare(config, traverse_util.flatten_dict(dict(params)))
  table = [e for e in discriminator_table(config) if e.group != "discriminator"]
  _check_nothing_dropped(table, flat, source, ())
  return _export(table, flat, _shapes(ElectraDiscriminator(config)))


def _task_config_dict(config: BertConfig, architecture: str, vocab_file: str) -> dict:
  return electra_config_dict(config, architecture, hf._pad_id(vocab_file))


# The fine-tuned heads kept on import and written by export (hf_heads) where they are ours: transformers'
# ElectraFor{TokenClassification, QuestionAnswering} read every token of the encoder through classifier.* /
# qa_outputs.*, as our heads do. Its sentence and choice classes pool through a dense + GELU head of their own
# (ElectraClassificationHead, SequenceSummary), which none of ours is: their folders still need
# --ignore='^classifier\.', and a fine-tuned ELECTRA work dir exports as BertFor* (hf.TASK_CLASSES).
TASK_CLASSES = hf_heads.TaskClasses(
    classes={a: v for a, v in hf_heads.class_names("Electra").items() if v[0] not in hf_heads.SENTENCE_HEADS},
    encoder_arrays=_task_encoder_arrays, pooler_heads=(), pooling="", config_dict=_task_config_dict,
    body="the encoder was, and fine-tuning puts its own head on it",
    folder_options={"tokenizer_class": "ElectraTokenizer"})
