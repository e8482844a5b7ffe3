"""The converted-checkpoint directory: what import-tf / import-hf write and export-hf / rank read.

    DIR/model_config.json   BertConfig.to_dict() (scan_layers=False: the params are un-scanned)
    DIR/vocab.txt           the WordPiece vocab the embeddings were trained with
    DIR/params.msgpack      flax.serialization.to_bytes of the un-scanned BertForPreTraining params
                            ({"bert", "mlm", "nsp"}), float32
    DIR/convert_info.json   {"do_lower_case", "source", "format", "report"}: provenance and tokenizer casing

`bert_jax.training.checkpoints.load_params_dir` / `load_pretrained` read this directory as it is (they look
for model_config.json first and accept params.msgpack), so it works as `init_checkpoint` for train.py and
finetune.py. In the other direction `load_params_dir` below reads the training module's params
directories (config.json + Orbax params/) by delegating to it.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import NamedTuple, Optional, Sequence, Tuple

import numpy as np

from bert_jax.models.config import BertConfig

CONFIG_NAME = "model_config.json"
PARAMS_NAME = "params.msgpack"
VOCAB_NAME = "vocab.txt"
INFO_NAME = "convert_info.json"


def _training_checkpoints():
  try:
    from bert_jax.training import checkpoints  # written by the training helper; optional here
  except ImportError:
    return None
  return checkpoints if hasattr(checkpoints, "load_params_dir") else None


def save_params_dir(directory: str, config: BertConfig, params, vocab_file: str,
                    info: Optional[dict] = None) -> str:
  """Writes a converted checkpoint directory (see the module docstring); returns `directory`."""
  import flax
  import jax

  from bert_jax.models import unscan_params

  os.makedirs(directory, exist_ok=True)
  params = jax.tree.map(lambda x: np.asarray(x, dtype=np.float32), unscan_params(dict(params)))
  tmp = os.path.join(directory, PARAMS_NAME + ".tmp")
  with open(tmp, "wb") as f:
    f.write(flax.serialization.to_bytes(params))
  os.replace(tmp, os.path.join(directory, PARAMS_NAME))   # never a half-written params file
  config.replace(scan_layers=False).to_json_file(os.path.join(directory, CONFIG_NAME))
  dst = os.path.join(directory, VOCAB_NAME)
  if os.path.abspath(vocab_file) != os.path.abspath(dst):
    shutil.copyfile(vocab_file, dst)
  if info is not None:
    with open(os.path.join(directory, INFO_NAME), "w", encoding="utf-8") as f:
      json.dump(info, f, indent=2, sort_keys=True, ensure_ascii=False)
      f.write("\n")
  return directory


def is_params_dir(directory: str) -> bool:
  """True for our converted directories and the training module's params directories: a model config AND
  parameters (params.msgpack or an Orbax params/ folder). A pre-training work directory also holds
  model_config.json but keeps its parameters under checkpoints/, so it is not a params directory."""
  has_params = (os.path.isfile(os.path.join(directory, PARAMS_NAME))
                or os.path.isdir(os.path.join(directory, "params")))
  has_config = any(os.path.isfile(os.path.join(directory, n)) for n in (CONFIG_NAME, "config.json"))
  return has_params and has_config


def load_params_dir(directory: str) -> Tuple[BertConfig, dict, str]:
  """(config, params, vocab_file) of a checkpoint directory; params un-scanned numpy."""
  import flax

  if all(os.path.exists(os.path.join(directory, n)) for n in (CONFIG_NAME, PARAMS_NAME, VOCAB_NAME)):
    config = BertConfig.from_json_file(os.path.join(directory, CONFIG_NAME))
    with open(os.path.join(directory, PARAMS_NAME), "rb") as f:
      params = flax.serialization.msgpack_restore(f.read())
    return config, params, os.path.join(directory, VOCAB_NAME)
  ckpt = _training_checkpoints()
  if ckpt is not None and is_params_dir(directory):
    config, params, vocab_file = ckpt.load_params_dir(directory)[:3]
    if not vocab_file:
      raise FileNotFoundError(f"{directory}: a params directory without vocab.txt")
    return config, params, vocab_file
  raise FileNotFoundError(
      f"{directory}: not a converted checkpoint directory; expected {CONFIG_NAME}, {PARAMS_NAME} and "
      f"{VOCAB_NAME} (write one with `python -m bert_jax.convert import-tf|import-hf`)")


def read_info(directory: str) -> dict:
  path = os.path.join(directory, INFO_NAME)
  if not os.path.exists(path):
    return {}
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def guess_do_lower_case(vocab_file: str, hint: str = "") -> bool:
  """Casing of a released vocab: from a name ("uncased"/"cased"), else True unless the vocab holds
  capitalised word pieces (Google's cased vocabs contain "The", "Paris", ...; uncased and Chinese ones do
  not)."""
  hint = hint.lower()
  if "uncased" in hint:
    return True
  if "cased" in hint:
    return False
  upper = 0
  with open(vocab_file, encoding="utf-8") as f:
    for line in f:
      tok = line.strip()
      if tok.startswith("[") and tok.endswith("]"):
        continue
      if any(c.isupper() for c in tok):
        upper += 1
        if upper >= 20:
          return False
  return True


def count_vocab_lines(vocab_file: str) -> int:
  with open(vocab_file, encoding="utf-8") as f:
    return sum(1 for _ in f)


class LoadedCheckpoint(NamedTuple):
  config: BertConfig
  params: dict            # un-scanned, numpy
  vocab_file: str
  do_lower_case: Optional[bool]
  directory: str
  info: dict


def load_checkpoint(name_or_path: str, search_dirs: Sequence[str] = ()) -> LoadedCheckpoint:
  """Any checkpoint this package writes, by directory or zoo name: a converted directory, a fine-tuning work
  directory (its best_checkpoint/), or a pre-training work directory (via
  `bert_jax.training.checkpoints.load_pretrained` when that module provides it)."""
  from bert_jax.convert import zoo
  from bert_jax.models import unscan_params

  directory = zoo.resolve(name_or_path, search_dirs)
  best = os.path.join(directory, "best_checkpoint")
  if not is_params_dir(directory) and os.path.isdir(best):
    directory = best
  if is_params_dir(directory):
    config, params, vocab_file = load_params_dir(directory)
    info = read_info(directory)
    return LoadedCheckpoint(config.replace(scan_layers=False), unscan_params(params), vocab_file,
                            info.get("do_lower_case"), directory, info)
  try:
    from bert_jax.training import checkpoints
  except ImportError:
    checkpoints = None
  if checkpoints is not None and hasattr(checkpoints, "load_pretrained"):
    import jax
    got = checkpoints.load_pretrained(directory)
    if isinstance(got, dict):
      config, params, vocab_file, lower = (got["config"], got["params"], got.get("vocab_file"),
                                           got.get("do_lower_case"))
    else:
      config, params, vocab_file = got[0], got[1], got[2]
      lower = got[3] if len(got) > 3 else None
    if isinstance(config, dict):
      config = BertConfig.from_dict(config)
    if not vocab_file:
      raise FileNotFoundError(f"{directory}: checkpoint without vocab.txt")
    params = jax.tree.map(np.asarray, unscan_params(params))
    return LoadedCheckpoint(config.replace(scan_layers=False), params, vocab_file, lower, directory, {})
  raise FileNotFoundError(
      f"{directory}: no {CONFIG_NAME}; expected a converted checkpoint directory (model_config.json, "
      "params.msgpack, vocab.txt) or a pre-training work directory")
