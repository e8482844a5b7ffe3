"""The params directory: the one on-disk format for a model's weights outside a training run.

The converters (import-tf, import-hf) write it, export-hf / rank / fine-tuning read it, fine-tuning's
`best_checkpoint/` is one, and it works as `init_checkpoint` for train.py and finetune.py:

    DIR/model_config.json    BertConfig.to_dict() (scan_layers=False: the params are un-scanned). Read in this
                             order: model_config.json, bert_config.json, config.json (the first with
                             hidden_size; Google's bert_config.json keys work too)
    DIR/vocab.txt            the WordPiece vocab the embeddings were trained with
    DIR/params.msgpack       flax.serialization.to_bytes of the un-scanned params, float32:
                             {"bert": {...}, "mlm": {...}, "nsp": {...}} (heads optional), or a task model's
                             {"bert", "classifier" | "qa_outputs"}
    or DIR/params/           the same tree as an Orbax StandardSave (fmt="orbax", for models too big for one
                             msgpack blob)
    DIR/convert_info.json    optional {"do_lower_case", "source", "format", "report"}: provenance, casing
    DIR/finetune_info.json   optional, written by fine-tuning (task, labels, max_seq_length, casing)

Every file is written to a temporary name, fsynced and renamed (bert_jax.fileio, the one
path layer; gs:// directories work too), so a reader never sees half a file, and a directory being
replaced keeps its old params until the new ones are whole. No TensorFlow for local paths; Orbax is used
only for the `params/` form.
"""

from __future__ import annotations

import json
import os
from typing import Optional, Tuple

import flax
import jax
import numpy as np
import orbax.checkpoint as ocp

from bert_jax import fileio
from bert_jax.input_pipeline import tokenization
from bert_jax.models import BertConfig, scan_params, unscan_params

CONFIG_NAME = "model_config.json"
PARAMS_NAME = "params.msgpack"
ORBAX_PARAMS_NAME = "params"
VOCAB_NAME = "vocab.txt"
INFO_NAME = "convert_info.json"
FINETUNE_INFO_NAME = "finetune_info.json"
_CONFIG_NAMES = (CONFIG_NAME, "bert_config.json", "config.json")


# ---- small file helpers (through the one path layer) ------------------------------------------------------
def read_json(path: str) -> dict:
  """The JSON object in `path`, {} when the file does not exist."""
  if not fileio.exists(path):
    return {}
  return json.loads(fileio.read_text(path))


def copy_vocab(vocab_file: str, directory: str) -> str:
  """Copies a vocab (local or gs://, through fileio) to DIR/vocab.txt atomically; returns the new path. A
  SentencePiece tokenizer.json beside it (tokenization.sentencepiece_json: the English ALBERTs) goes with it,
  since it, not WordPiece, tokenizes text for that vocab."""
  dst = fileio.join(directory, VOCAB_NAME)
  if fileio.abspath(vocab_file) == fileio.abspath(dst):
    return dst
  if tokenization.is_tokenizer_json(vocab_file):
    # A tokenizer.json named as the vocab: DIR/tokenizer.json + DIR/vocab.txt (its tokens in id order), which
    # load_tokenizer reads back as that tokenizer.
    out = fileio.join(directory, tokenization.TOKENIZER_JSON)
    data = fileio.read_bytes(vocab_file)
    if not (fileio.exists(out) and fileio.read_bytes(out) == data):
      fileio.write_bytes_atomic(out, data)
    text = tokenization.json_vocab_text(vocab_file)
    if not fileio.exists(dst) or fileio.read_text(dst) != text:
      fileio.write_text_atomic(dst, text)
    return dst
  spm = tokenization.sentencepiece_json(vocab_file) or tokenization.bpe_json(vocab_file)
  stale = fileio.join(directory, tokenization.TOKENIZER_JSON)
  if not spm and not fileio.is_remote(directory) and (tokenization.sentencepiece_json(dst) or
                                                       tokenization.bpe_json(dst)):
    # A SentencePiece tokenizer.json left by an earlier import into the same directory would tokenize this
    # WordPiece vocab (load_tokenizer prefers it): removed before the new vocab lands.
    fileio.remove(stale)
  for src, out in ((vocab_file, dst), (spm, stale)):
    if not src:
      continue
    data = fileio.read_bytes(src)
    if fileio.exists(out) and fileio.read_bytes(out) == data:
      continue                      # unchanged: not rewritten (a resumed run keeps its files as they are)
    fileio.write_bytes_atomic(out, data)
  return dst


def count_vocab_lines(vocab_file: str) -> int:
  """The vocab size of a WordPiece vocab file (one token per line; local or gs://), or of a tokenizer.json
  named as the vocab (1 + its largest id)."""
  if tokenization.is_tokenizer_json(vocab_file):
    return tokenization.json_vocab_size(vocab_file)
  with fileio.open_file(vocab_file) as f:
    return sum(1 for _ in f)


# ---- params trees ---------------------------------------------------------------------------------------
def host_params(params) -> dict:
  """Params as a plain dict of host numpy arrays in the un-scanned (per-layer) interchange layout."""
  params = flax.core.unfreeze(params) if isinstance(params, flax.core.FrozenDict) else dict(params)
  params = jax.tree.map(np.asarray, jax.device_get(params))
  return unscan_params(params) if is_scanned(params) else params


def is_scanned(params) -> bool:
  return "layers" in params.get("bert", {}).get("encoder", {})


def match_layout(params, scan_layers: bool) -> dict:
  """`params` (either layer layout) in the layout a model with `scan_layers` expects."""
  if scan_layers and not is_scanned(params) and "layer_0" in params.get("bert", {}).get("encoder", {}):
    return scan_params(params)
  if not scan_layers and is_scanned(params):
    return unscan_params(params)
  return params


# ---- the directory ----------------------------------------------------------------------------------------
def save_params_dir(directory: str, config: BertConfig, params, vocab_file: Optional[str] = None, *,
                    info: Optional[dict] = None, fmt: str = "msgpack") -> str:
  """Writes a params directory (see the module docstring); returns `directory`."""
  if fmt not in ("msgpack", "orbax"):
    raise ValueError(f"fmt={fmt!r}; expected msgpack or orbax")
  directory = fileio.abspath(directory)
  fileio.makedirs(directory)
  params = jax.tree.map(lambda x: np.asarray(x, np.float32), host_params(params))
  if fmt == "msgpack":
    fileio.write_bytes_atomic(fileio.join(directory, PARAMS_NAME), flax.serialization.to_bytes(params))
    fileio.rmtree(fileio.join(directory, ORBAX_PARAMS_NAME))    # the other form, left by an earlier save
  else:
    _save_orbax_params(fileio.join(directory, ORBAX_PARAMS_NAME), params)
    fileio.remove(fileio.join(directory, PARAMS_NAME))
  fileio.write_json_atomic(fileio.join(directory, CONFIG_NAME), config.replace(scan_layers=False).to_dict())
  if vocab_file:
    copy_vocab(vocab_file, directory)
  if info is not None:
    fileio.write_json_atomic(fileio.join(directory, INFO_NAME), info)
  return directory


def _save_orbax_params(path: str, params) -> None:
  """Orbax save into a sibling temp dir, then swap it in: the old params/ stays until the new one is whole."""
  tmp, old = f"{path}.tmp{os.getpid()}", f"{path}.old{os.getpid()}"
  for p in (tmp, old):
    fileio.rmtree(p)
  with ocp.StandardCheckpointer() as ckptr:
    ckptr.save(tmp, params)
    ckptr.wait_until_finished()
  if fileio.exists(path):
    fileio.rename(path, old)
  fileio.rename(tmp, path)
  fileio.rmtree(old)


def has_params(directory: str) -> bool:
  return (fileio.isfile(fileio.join(directory, PARAMS_NAME))
          or fileio.isdir(fileio.join(directory, ORBAX_PARAMS_NAME)))


def read_model_config(directory: str) -> BertConfig:
  """The BertConfig of a params dir or work dir (see the module docstring for the file order)."""
  for name in _CONFIG_NAMES:
    path = fileio.join(directory, name)
    if fileio.exists(path) and "hidden_size" in read_json(path):   # a run config.json has no hidden_size
      return BertConfig.from_json_file(path) if not fileio.is_remote(path) else BertConfig.from_dict(
          read_json(path))
  raise FileNotFoundError(f"{directory}: no model config (model_config.json, bert_config.json or config.json "
                          "with hidden_size)")


def is_params_dir(directory: str) -> bool:
  """A model config AND parameters. A pre-training work dir also holds model_config.json but keeps its
  parameters under checkpoints/, so it is not a params directory."""
  return has_params(directory) and any(fileio.isfile(fileio.join(directory, n)) for n in _CONFIG_NAMES)


def vocab_path(directory: str) -> Optional[str]:
  """DIR/vocab.txt, else DIR/tokenizer.json (an imported ModernBERT's byte-level BPE, which no vocab.txt stands
  for: named as the vocab, it tokenizes through tokenization.JsonTokenizer), else None."""
  for name in (VOCAB_NAME, tokenization.TOKENIZER_JSON):
    path = fileio.join(directory, name)
    if fileio.exists(path):
      return path
  return None


def load_params_dir(directory: str) -> Tuple[BertConfig, dict, Optional[str]]:
  """(BertConfig [scan_layers=False], params [host numpy, un-scanned], vocab path or None)."""
  directory = fileio.abspath(directory)
  if not has_params(directory):
    raise FileNotFoundError(f"{directory}: no {PARAMS_NAME} or Orbax {ORBAX_PARAMS_NAME}/; write one with "
                            "`python -m bert_jax.convert import-tf|import-hf`")
  config = read_model_config(directory)
  msgpack_path = fileio.join(directory, PARAMS_NAME)
  if fileio.isfile(msgpack_path):
    params = flax.serialization.msgpack_restore(fileio.read_bytes(msgpack_path))
  else:
    params = restore_orbax_params(fileio.join(directory, ORBAX_PARAMS_NAME))
  return config.replace(scan_layers=False), host_params(params), vocab_path(directory)


def restore_orbax_params(path: str, subtree: Optional[str] = None):
  """An Orbax pytree checkpoint (or its `subtree`, e.g. "params" of a TrainState) as host numpy arrays,
  whatever mesh it was written from; nothing else of the checkpoint is read."""
  with ocp.PyTreeCheckpointer() as ckptr:
    meta = ckptr.metadata(path)
  tree = getattr(meta, "item_metadata", meta)
  tree = getattr(tree, "tree", tree)
  if subtree is not None:
    tree = {subtree: tree[subtree]}
  target = jax.tree.map(lambda m: np.zeros(m.shape, m.dtype), tree)
  restore_args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), target)
  with ocp.PyTreeCheckpointer() as ckptr:
    out = ckptr.restore(path, args=ocp.args.PyTreeRestore(item=target, restore_args=restore_args,
                                                          partial_restore=subtree is not None))
  return out[subtree] if subtree is not None else out


def read_info(directory: str) -> dict:
  """convert_info.json of a params dir ({} when absent)."""
  return read_json(fileio.join(directory, INFO_NAME))


def guess_do_lower_case(vocab_file: str, hint: str = "") -> bool:
  """Casing of a released vocab: from a name ("uncased"/"cased"), else True unless the vocab holds
  capitalised word pieces (Google's cased vocabs contain "The", "Paris", ...; uncased and Chinese ones do
  not)."""
  return guess_do_lower_case_why(vocab_file, hint)[0]


def guess_do_lower_case_why(vocab_file: str, hint: str = ""):
  """(guess_do_lower_case's answer, the reason in words), for telling the user which casing was chosen."""
  low = hint.lower()
  if "uncased" in low:
    return True, f"the name {hint!r} says uncased"
  if "cased" in low:
    return False, f"the name {hint!r} says cased"
  upper = 0
  with fileio.open_file(vocab_file) as f:
    for line in f:
      tok = line.strip()
      if tok.startswith("[") and tok.endswith("]"):
        continue
      if any(c.isupper() for c in tok):
        upper += 1
        if upper >= 20:
          return False, "the vocab holds capitalised word pieces"
  return True, "the vocab holds no capitalised word pieces"
