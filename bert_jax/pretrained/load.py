"""`load_pretrained(name_or_dir)`: the one loader for every checkpoint this package reads.

Accepted, in this order:
  1. a zoo name (`bert_jax.pretrained.zoo`: looked up in $BERT_JAX_ZOO_DIR and ~/.cache/bert_jax/zoo);
  2. a params directory (see params_dir.py: converted checkpoints, fine-tuning's best_checkpoint/);
  3. a fine-tuning work directory (its best_checkpoint/);
  4. a pre-training work directory (model_config.json + checkpoints/<step>/: the params of the newest
     complete checkpoint; no optimizer state is read).

Returns a `Pretrained` with the architecture, un-scanned host params, the vocab file and the tokenizer
casing when the checkpoint records it (convert_info.json, finetune_info.json, or the pre-training run's
config.json), so callers never guess what the checkpoint already says.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Dict, Optional, Sequence

import numpy as np
from flax import traverse_util

from bert_jax.models import BertConfig
from bert_jax.pretrained import params_dir, zoo

CHECKPOINT_SUBDIR = "checkpoints"
BEST_DIR = "best_checkpoint"


@dataclasses.dataclass
class Pretrained:
  config: BertConfig                 # scan_layers=False
  params: Dict[str, Any]             # un-scanned layout, host numpy
  vocab_file: Optional[str]
  do_lower_case: Optional[bool]      # None when the checkpoint does not say
  directory: str                     # the directory the params came from
  info: Dict[str, Any] = dataclasses.field(default_factory=dict)            # convert_info.json
  finetune_info: Dict[str, Any] = dataclasses.field(default_factory=dict)   # finetune_info.json

  def require_vocab(self) -> str:
    """The vocab file, or a clear error for a checkpoint saved without one."""
    if not self.vocab_file:
      raise FileNotFoundError(f"{self.directory}: no vocab.txt beside the params; copy the vocab the model "
                              "was trained with into it")
    return self.vocab_file


def is_workdir(directory: str) -> bool:
  """A pre-training work directory (Orbax checkpoints under checkpoints/)."""
  return os.path.isdir(os.path.join(directory, CHECKPOINT_SUBDIR))


def load_workdir_params(workdir: str, step: Optional[int] = None):
  """Params (host numpy, un-scanned) of a pre-training work dir's checkpoint `step` (default: newest)."""
  import orbax.checkpoint as ocp
  ckpt_dir = os.path.join(os.path.abspath(workdir), CHECKPOINT_SUBDIR)
  if step is None:
    with ocp.CheckpointManager(ckpt_dir, options=ocp.CheckpointManagerOptions(read_only=True, create=False),
                               item_names=("state", "meta")) as manager:
      step = manager.latest_step()
    if step is None:
      raise FileNotFoundError(f"{ckpt_dir}: no complete checkpoint")
  path = os.path.join(ckpt_dir, str(int(step)), "state")
  return params_dir.host_params(params_dir.restore_orbax_params(path, subtree="params"))


def load_pretrained(name_or_dir: str, search_dirs: Sequence[str] = ()) -> Pretrained:
  """See the module docstring."""
  directory = zoo.resolve(os.path.expanduser(name_or_dir), search_dirs)
  directory = os.path.abspath(directory)
  best = os.path.join(directory, BEST_DIR)
  if not params_dir.is_params_dir(directory) and not is_workdir(directory) and os.path.isdir(best):
    directory = best
  if params_dir.is_params_dir(directory):
    config, params, vocab = params_dir.load_params_dir(directory)
    info = params_dir.read_info(directory)
    ft_info = params_dir.read_json(os.path.join(directory, params_dir.FINETUNE_INFO_NAME))
    lower = info.get("do_lower_case", ft_info.get("do_lower_case"))
  elif is_workdir(directory):
    config = params_dir.read_model_config(directory).replace(scan_layers=False)
    params = load_workdir_params(directory)
    vocab, info, ft_info = params_dir.vocab_path(directory), {}, {}
    lower = params_dir.read_json(os.path.join(directory, "config.json")).get("data", {}).get("do_lower_case")
  else:
    raise FileNotFoundError(
        f"{name_or_dir!r} is neither a params directory (model_config.json + params.msgpack or params/), a "
        "fine-tuning work dir (best_checkpoint/) nor a pre-training work dir (checkpoints/)")
  return Pretrained(config, params, vocab, None if lower is None else bool(lower), directory, info, ft_info)


def merge_params(fresh, loaded, groups: Optional[Sequence[str]] = None):
  """`fresh` (a model's freshly initialised params, host, un-scanned) with every array of `loaded` whose
  path exists in `fresh` (restricted to the top-level `groups`, e.g. ("bert",), when given).

  Returns (merged params, report {"loaded": [...], "initialised": [...], "unused": [...]}) with '/'-joined
  paths. A loaded array whose shape differs from the model's is an error naming the parameter: a silent
  re-initialisation would hide a wrong checkpoint.
  """
  want = traverse_util.flatten_dict(fresh)
  have = traverse_util.flatten_dict(loaded)
  report = {"loaded": [], "initialised": [], "unused": []}
  for path, x in want.items():
    if path in have and (groups is None or path[0] in groups):
      if tuple(have[path].shape) != tuple(x.shape):
        raise ValueError(f"init_checkpoint parameter {'/'.join(path)} has shape {tuple(have[path].shape)}, "
                         f"the model expects {tuple(x.shape)}")
      want[path] = np.asarray(have[path], dtype=x.dtype)
      report["loaded"].append("/".join(path))
    else:
      want[path] = np.asarray(x)
      report["initialised"].append("/".join(path))
  report["unused"] = ["/".join(p) for p in have if p not in want]
  return traverse_util.unflatten_dict(want), report
