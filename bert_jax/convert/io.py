"""The converted-checkpoint directory: what import-tf / import-hf write and export-hf / rank read.

    DIR/model_config.json   BertConfig.to_dict() (scan_layers=False: the params are un-scanned)
    DIR/vocab.txt           the WordPiece vocab the embeddings were trained with
    DIR/params.msgpack      flax.serialization.to_bytes of the un-scanned BertForPreTraining params
                            ({"bert", "mlm", "nsp"}), float32
    DIR/convert_info.json   {"do_lower_case", "source", "format", "report"}: provenance and tokenizer casing

`save_params_dir` / `load_params_dir` delegate to `bert_jax.training.checkpoints` when that module provides
functions of the same names (one directory format for the whole package); otherwise they use this module's
format above.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Optional, Tuple

import numpy as np

from bert_jax.models.config import BertConfig

CONFIG_NAME = "model_config.json"
PARAMS_NAME = "params.msgpack"
VOCAB_NAME = "vocab.txt"
INFO_NAME = "convert_info.json"


def _training_checkpoints():
  try:
    from bert_jax.training import checkpoints  # noqa: F401  (written by the training helper)
  except ImportError:
    return None
  if hasattr(checkpoints, "save_params_dir") and hasattr(checkpoints, "load_params_dir"):
    return checkpoints
  return None


def save_params_dir(directory: str, config: BertConfig, params, vocab_file: str,
                    info: Optional[dict] = None) -> str:
  """Writes a converted checkpoint directory (see the module docstring); returns `directory`."""
  os.makedirs(directory, exist_ok=True)
  config = config.replace(scan_layers=False)
  ckpt = _training_checkpoints()
  if ckpt is not None:
    ckpt.save_params_dir(directory, config, params, vocab_file)
  else:
    import flax
    import jax
    params = jax.tree.map(lambda x: np.asarray(x, dtype=np.float32), params)
    tmp = os.path.join(directory, PARAMS_NAME + ".tmp")
    with open(tmp, "wb") as f:
      f.write(flax.serialization.to_bytes(params))
    os.replace(tmp, os.path.join(directory, PARAMS_NAME))   # never a half-written params file
    config.to_json_file(os.path.join(directory, CONFIG_NAME))
    dst = os.path.join(directory, VOCAB_NAME)
    if os.path.abspath(vocab_file) != os.path.abspath(dst):
      shutil.copyfile(vocab_file, dst)
  if info is not None:
    with open(os.path.join(directory, INFO_NAME), "w", encoding="utf-8") as f:
      json.dump(info, f, indent=2, sort_keys=True, ensure_ascii=False)
      f.write("\n")
  return directory


def load_params_dir(directory: str) -> Tuple[BertConfig, dict, str]:
  """(config, params, vocab_file) of a checkpoint directory; params un-scanned numpy."""
  ckpt = _training_checkpoints()
  if ckpt is not None and not os.path.exists(os.path.join(directory, PARAMS_NAME)):
    return ckpt.load_params_dir(directory)
  import flax
  for name in (CONFIG_NAME, PARAMS_NAME, VOCAB_NAME):
    if not os.path.exists(os.path.join(directory, name)):
      raise FileNotFoundError(
          f"{directory}: not a converted checkpoint directory (no {name}); expected {CONFIG_NAME}, "
          f"{PARAMS_NAME} and {VOCAB_NAME} (write one with `python -m bert_jax.convert import-tf|import-hf`)")
  config = BertConfig.from_json_file(os.path.join(directory, CONFIG_NAME))
  with open(os.path.join(directory, PARAMS_NAME), "rb") as f:
    params = flax.serialization.msgpack_restore(f.read())
  return config, params, os.path.join(directory, VOCAB_NAME)


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
