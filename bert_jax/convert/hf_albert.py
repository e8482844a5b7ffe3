"""Hugging Face ALBERT folders in and out (AlbertModel / AlbertForMaskedLM / AlbertForPreTraining), no PyTorch.

    python -m bert_jax.convert import-hf --input=ALBERT_DIR --output=DIR    # config.json model_type "albert"
    python -m bert_jax.convert export-hf --input=DIR --output=HF_DIR        # a model with embedding_size > 0

ALBERT in this package's terms (Lan et al. 2020): `BertConfig(embedding_size=E, share_layers=True)` with the
`sop` target. Hugging Face's layout maps onto ours as:

  albert.embeddings.* [V|P|2, E] + LayerNorm(E)   bert/embeddings/* (tables of width E)
  albert.encoder.embedding_hidden_mapping_in      bert/embeddings/projection (E -> H)
  albert.encoder.albert_layer_groups.G.albert_layers.0.*
      num_hidden_groups = 1                       bert/encoder/shared/layer/* (share_layers=True)
      num_hidden_groups = num_hidden_layers       bert/encoder/layer_G/* (share_layers=False)
  albert.pooler                                   bert/pooler
  predictions.{dense, LayerNorm, bias}            mlm/{transform, LayerNorm, output_bias} (H -> E, tied decoder)
  sop_classifier.classifier                       sop (kernel [H, 2])

google-research/albert's TF checkpoints (import-tf) map by the same table (its TF names:
albert_name_table). Other groupings (num_hidden_groups G of L layers, inner_group_num I; not in any
released checkpoint) import unrolled: L x I layers, each holding a copy of the weights of the group it runs
(the same outputs; export-hf then writes one group per layer). The decoder (predictions.decoder.weight/bias) must
equal the word embeddings and predictions.bias, as transformers ties them.

Tokenizers: the Chinese ALBERTs (voidful/albert_chinese_*, clue/albert_chinese_*) ship a WordPiece vocab.txt
and are used with BertTokenizer. The English ALBERTs (albert-*-v2) use a SentencePiece unigram model: its
pieces are written to vocab.txt in id order (from tokenizer.json's Unigram vocab; an spiece.model alone is not
read) and tokenizer.json is copied beside it, so fine-tuning, predict and rank tokenize text with that model
(tokenization.SentencePieceTokenizer: the ids of transformers' AlbertTokenizerFast), and export-hf writes it
back with tokenizer_class AlbertTokenizer.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import tempfile
from typing import Dict, List, Optional, Sequence

import numpy as np

from bert_jax.convert import hf, hf_heads, mapping, spm_model
from bert_jax.convert.mapping import ConversionError, Entry, _dense
from bert_jax.models.config import BertConfig
from bert_jax.models.encoders import albert
from bert_jax.pretrained import params_dir


ALBERT_TARGETS = ("mlm", "sop")   # the pre-training heads of ALBERT checkpoints (AlbertForPreTraining)
HEADS = {
    # heads option: (groups, architecture, key prefix of the encoder)
    "pretraining": (("embeddings", "encoder", "pooler") + ALBERT_TARGETS, "AlbertForPreTraining", "albert."),
    "mlm": (("embeddings", "encoder", "mlm"), "AlbertForMaskedLM", "albert."),
    "none": (("embeddings", "encoder", "pooler"), "AlbertModel", ""),
}


def is_albert(config: BertConfig) -> bool:
  """A model whose checkpoint layout is ALBERT's: factorised embeddings (ALBERT always projects E -> H)."""
  return config.factorised_embeddings


def _is_albert_dict(d: dict) -> bool:
  """model_type "albert", or no model_type and an embedding_size: early uploads of brightmart's configs carry
  no model_type, and ELECTRA's (the other config with an embedding_size) always name their type."""
  return d.get("model_type") == "albert" or ("model_type" not in d and "embedding_size" in d)


def is_albert_folder(folder: str) -> bool:
  """A Hugging Face folder whose config.json is ALBERT's (_is_albert_dict)."""
  path = os.path.join(folder, "config.json")
  if not os.path.exists(path):
    return False
  with open(path, encoding="utf-8") as f:
    try:
      d = json.load(f)
    except json.JSONDecodeError:
      return False
  return isinstance(d, dict) and _is_albert_dict(d)


def albert_name_table(config: BertConfig, groups: int = 0, inner: int = 1) -> List[Entry]:
  """Every parameter of BertForPreTraining(config, ("mlm", "sop")) with its Hugging Face ALBERT key and its
  google-research/albert TF variable (the names transformers' TF converter renamed; group G, inner group 0).

  groups > 0: a source of `groups` layer groups of `inner` layers each, unrolled into this per-layer config
  (config.num_hidden_layers = source layers x inner): layer k = (i, j) = divmod(k, inner) reads inner layer j of
  the group source layer i runs, int(i / (source layers / groups)) as in transformers' AlbertTransformer (one
  source tensor feeds several of ours; the outputs are the same). The layers' names are ALBERT's sharing's
  (models/encoders/albert.py)."""
  mapping.check_post_ln_transformer(config)
  if not config.factorised_embeddings:
    raise ConversionError("ALBERT always maps its embeddings to H (embedding_hidden_mapping_in): the model "
                          "needs embedding_size > 0 (e.g. 128)")
  t = mapping.embedding_entries("albert")
  t += _dense(("bert", "embeddings", "projection"), "bert/encoder/embedding_hidden_mapping_in",
              "albert.encoder.embedding_hidden_mapping_in", "embeddings")
  for o, i, j in albert.checkpoint_layers(config, groups, inner):
    t += mapping.layer_entries(albert.LAYER_NAMES, ("bert", "encoder") + o,
                               albert.GOOGLE_LAYER.format(group=i, inner=j), albert.HF_LAYER.format(group=i, inner=j),
                               "encoder")
  t += _dense(("bert", "pooler"), "bert/pooler/dense", "albert.pooler", "pooler")
  t += mapping.objective_entries("albert", ALBERT_TARGETS)
  return t


ALBERT = mapping.Layout("albert", albert_name_table, ALBERT_TARGETS, ("pooler",) + ALBERT_TARGETS)


# ---- import ----------------------------------------------------------------------------------------------
def hf_config_to_albert(d: dict, source: str) -> BertConfig:
  if not _is_albert_dict(d):
    raise ConversionError(f"{source}: model_type={d.get('model_type')!r}; expected 'albert'")
  pos = d.get("position_embedding_type", "absolute")
  if pos != "absolute":
    raise ConversionError(f"{source}: position_embedding_type={pos!r}; only 'absolute' is supported")
  hf.check_encoder_config(d, source)
  missing = [k for k in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                         "intermediate_size") if k not in d]
  if missing:
    raise ConversionError(f"{source}: config lacks {missing}")
  try:
    layers, groups, inner, width = (int(d["num_hidden_layers"]), int(d.get("num_hidden_groups", 1)),
                                    int(d.get("inner_group_num", 1)), int(d.get("embedding_size", 128)))
  except (TypeError, ValueError) as e:
    raise ConversionError(f"{source}: num_hidden_layers, num_hidden_groups, inner_group_num and embedding_size "
                          f"must be integers ({e})") from e
  if not (1 <= groups <= layers and inner >= 1):
    raise ConversionError(f"{source}: num_hidden_groups={groups}, inner_group_num={inner}; expected 1 <= "
                          f"num_hidden_groups <= num_hidden_layers={layers} and inner_group_num >= 1")
  act = mapping.check_hidden_act(d.get("hidden_act", "gelu_new"), source)
  fields = dict(hf.architecture_dict(d), hidden_act=act,
                embedding_size=width, share_layers=groups == 1 and layers > 1)
  if layers == 1 or _unrolled(groups, inner, layers):
    # one layer: the same either way; the per-layer layout is the simpler one. Other groupings run as their
    # layers unrolled (albert_layout).
    fields.update(share_layers=False, num_hidden_layers=layers * inner)
  return hf.config_from_dict(fields, source)


def _unrolled(groups: int, inner: int, layers: int) -> bool:
  """A grouping other than one layer shared by all (1, 1) or one per layer (L, 1), which this package's
  model (share_layers or not) holds only unrolled."""
  return inner != 1 or groups not in (1, layers)


def albert_layout(d: dict, report: Optional[mapping.ConversionReport] = None) -> mapping.Layout:
  """The layout that reads a checkpoint of ALBERT config `d` (hf_config_to_albert's): ALBERT, or for other
  num_hidden_groups / inner_group_num its table unrolled, noted in `report`."""
  layers = int(d["num_hidden_layers"])
  groups, inner = int(d.get("num_hidden_groups", 1)), int(d.get("inner_group_num", 1))
  if layers == 1 or not _unrolled(groups, inner, layers):
    return ALBERT
  if report is not None:
    report.notes.append(f"num_hidden_groups={groups}, inner_group_num={inner}: unrolled into {layers * inner} "
                        "layers, each holding the weights of the group it runs (the same outputs; export-hf "
                        "writes one group per layer)")
  return mapping.Layout("albert", functools.partial(albert_name_table, groups=groups, inner=inner),
                        ALBERT.targets, ALBERT.optional_groups)


def normalize_albert_state_dict(state: Dict[str, np.ndarray], report: mapping.ConversionReport
                                ) -> Dict[str, np.ndarray]:
  """Bare AlbertModel keys (no "albert." prefix) and the tied decoder."""
  return hf.prefix_bare_keys_and_untie(state, report, root="albert.", head="predictions", family="ALBERT",
                                       model_class="AlbertModel")


def _write_vocab_from_unigram(tokenizer_json: str, out_path: str) -> bool:
  """SentencePiece pieces of tokenizer.json's Unigram model -> vocab.txt in id order; False if not Unigram.
  SentencePiece's <pad> and <unk> (ids 0 and 1 in ALBERT's) are written as BERT's [PAD] and [UNK], the names
  this package's tokenizer requires, so that the vocab loads; every id stays in place."""
  with open(tokenizer_json, encoding="utf-8") as f:
    model = json.load(f).get("model", {})
  if model.get("type") != "Unigram" or not isinstance(model.get("vocab"), list):
    return False
  pieces = [str(piece[0]).replace("\n", " ") for piece in model["vocab"]]
  for sp, bert in (("<pad>", "[PAD]"), ("<unk>", "[UNK]")):
    if sp in pieces and bert not in pieces:
      pieces[pieces.index(sp)] = bert
  with open(out_path, "w", encoding="utf-8") as f:
    f.writelines(p + "\n" for p in pieces)
  return True


def _tokenizer_config_lower(folder: str) -> bool:
  """tokenizer_config.json's do_lower_case (AlbertTokenizer's default, True, when absent or unreadable)."""
  try:
    with open(os.path.join(folder, "tokenizer_config.json"), encoding="utf-8") as f:
      value = json.load(f).get("do_lower_case", True)
  except (OSError, ValueError, AttributeError):
    return True
  return value if isinstance(value, bool) else True


def import_hf_albert(folder: str, output: Optional[str] = None, vocab_file: Optional[str] = None,
                     do_lower_case: Optional[bool] = None, ignore: Sequence[str] = (), seed: int = 0):
  """Converts a Hugging Face ALBERT folder. Returns (config, params, report); writes `output` when given.
  Absent head groups (a bare AlbertModel has no MLM / SOP heads) are initialised from `seed` and reported; a
  fine-tuned task head (AlbertFor{Sequence,Token}Classification, ...) is kept as hf.import_hf keeps BERT's."""
  config_path = os.path.join(folder, "config.json")
  if not os.path.exists(config_path):
    raise FileNotFoundError(f"{folder}: no config.json (not a Hugging Face model folder)")
  d = hf.read_config_json(config_path)
  config = hf_config_to_albert(d, config_path)
  report = mapping.ConversionReport(source=folder, fmt="hf")
  layout = albert_layout(d, report)
  state = normalize_albert_state_dict(hf.read_hf_state_dict(folder), report)
  patterns = [re.compile(p) for p in ignore]
  kept = hf_heads.keep_task_head(d, state, config, config_path, TASK_CLASSES, patterns, report)
  ignorable = lambda n: bool(hf._HF_BUFFERS.search(n)) or any(p.search(n) for p in patterns)  # noqa: E731
  params = mapping.assign_params(state, "hf", config, report, ignorable=ignorable, seed=seed, layout=layout)
  hf_heads.add_kept_head(params, kept, report)

  tmp_dir = None
  if vocab_file is None:
    vocab_file = os.path.join(folder, "vocab.txt")
    if not os.path.exists(vocab_file):
      tok_json = os.path.join(folder, "tokenizer.json")
      spiece = os.path.join(folder, "spiece.model")
      if not os.path.exists(tok_json) and not os.path.exists(spiece):
        raise FileNotFoundError(f"{folder}: no vocab.txt, tokenizer.json or spiece.model; pass --vocab=PATH")
      tmp_dir = tempfile.mkdtemp(prefix="albert_vocab_")
      vocab_file = os.path.join(tmp_dir, "vocab.txt")
      if not os.path.exists(tok_json):
        # AlbertTokenizer's (slow) folders hold spiece.model alone: read as AlbertConverter reads it (spm_model)
        lower = _tokenizer_config_lower(folder) if do_lower_case is None else bool(do_lower_case)
        vocab_file, n = spm_model.write_vocab_and_tokenizer(spiece, tmp_dir, lower)
        do_lower_case = lower
        report.notes.append(f"tokenizer: SentencePiece model {spiece} ({n} pieces) written as vocab.txt + "
                            f"tokenizer.json (do_lower_case={lower})")
      elif _write_vocab_from_unigram(tok_json, vocab_file):
        # beside the pieces, the model that segments text into them: copy_vocab carries both to `output`
        shutil.copyfile(tok_json, os.path.join(tmp_dir, "tokenizer.json"))
        report.notes.append("vocab.txt written from tokenizer.json's SentencePiece (Unigram) pieces, in id "
                            "order, and tokenizer.json copied beside it: text is tokenized by that model")
      else:
        hf._write_vocab_from_tokenizer_json(tok_json, vocab_file)
        report.notes.append("vocab.txt written from tokenizer.json's WordPiece vocab")
  try:
    mapping.check_vocab_size(vocab_file, params_dir.count_vocab_lines(vocab_file), config, "config.json",
                             report)
    do_lower_case = mapping.resolve_casing(do_lower_case, report,
                                           functools.partial(hf.hf_do_lower_case, folder, vocab_file))
    if output:
      mapping.save_imported(output, config, params, vocab_file, folder, "hf", do_lower_case, report)
      hf_heads.write_finetune_info(output, kept)
  finally:
    if tmp_dir:
      shutil.rmtree(tmp_dir, ignore_errors=True)
  return config, params, report


# ---- export ----------------------------------------------------------------------------------------------
def albert_config_dict(config: BertConfig, architecture: str, pad_token_id: int = 0) -> dict:
  out = hf.hf_config_dict(config, architecture, pad_token_id)
  out.update(model_type="albert", embedding_size=config.embedding_width, inner_group_num=1,
             num_hidden_groups=1 if config.share_layers else config.num_hidden_layers,
             classifier_dropout_prob=config.hidden_dropout_prob)
  return out


def write_albert(ckpt, output: str, heads: str = "pretraining", source: str = "") -> mapping.ConversionReport:
  """A loaded checkpoint (`load_pretrained`) with factorised embeddings -> a Hugging Face ALBERT folder
  (config.json, model.safetensors, vocab.txt, tokenizer_config.json with BertTokenizer, as the Chinese
  ALBERTs are used; with the SentencePiece tokenizer.json of an English ALBERT beside the vocab, that file
  and tokenizer_class AlbertTokenizer instead); --heads=auto on a fine-tuned checkpoint writes its AlbertFor*
  task class (hf_heads.write_task_model)."""
  if heads == "auto" and hf_heads.task_architecture(ckpt, TASK_CLASSES):
    return hf_heads.write_task_model(ckpt, output, source, TASK_CLASSES)
  return hf.write_model(ckpt, output, heads, source, heads_table=HEADS, root="albert.",
                        config_dict=albert_config_dict, layout=ALBERT, sentencepiece_class="AlbertTokenizer",
                        hint="pre-train with targets=('mlm', 'sop') (preset=albert), or use --heads=mlm / none")


def _task_config_dict(config: BertConfig, architecture: str, vocab_file: str) -> dict:
  return albert_config_dict(config, architecture, pad_token_id=hf._pad_id(vocab_file))


# The fine-tuned heads kept on import and written by export (hf_heads), laid out as BERT's (hf.TASK_CLASSES):
# the sentence classes read albert.pooler (dense + tanh on [CLS]), the token and QA classes have no pooler.
TASK_CLASSES = hf_heads.TaskClasses(
    classes=hf_heads.class_names("Albert"), encoder_arrays=hf_heads.layout_arrays(ALBERT),
    pooler_heads=hf_heads.SENTENCE_HEADS,
    pooling=hf.TASK_CLASSES.pooling, body=hf.TASK_CLASSES.body, config_dict=_task_config_dict,
    folder_options={"sentencepiece_class": "AlbertTokenizer"})
