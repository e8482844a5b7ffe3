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
import logging
import os
from typing import Any, Dict, Optional, Sequence

import flax
import flax.linen as nn
import jax
import numpy as np
import orbax.checkpoint as ocp
from flax import traverse_util

from bert_jax import fileio
from bert_jax.errors import UserError
from bert_jax.input_pipeline import tokenization
from bert_jax.models import BertConfig, BertModel, dummy_inputs
from bert_jax.pretrained import params_dir, zoo

CHECKPOINT_SUBDIR = "checkpoints"
_log = logging.getLogger(__name__)
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

  def fresh_groups(self) -> list:
    """The param groups a converter initialised at random (the conversion report's fresh_groups), unless the
    checkpoint was fine-tuned since (its finetune_info: training set them; an imported fine-tuned head's
    finetune_info names its source, "imported_from", and trained nothing)."""
    if self.finetune_info and not self.finetune_info.get("imported_from"):
      return []
    return list((self.info or {}).get("report", {}).get("fresh_groups", []))

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
  """Params (host numpy, un-scanned) of a pre-training work dir's checkpoint `step` (default: the newest that
  reads; an unreadable newer one is logged and skipped, never moved: this reader does not own the work dir)."""
  ckpt_dir = os.path.join(os.path.abspath(workdir), CHECKPOINT_SUBDIR)
  if step is not None:
    return params_dir.host_params(params_dir.restore_orbax_params(
        os.path.join(ckpt_dir, str(int(step)), "state"), subtree="params"))
  with ocp.CheckpointManager(ckpt_dir, options=ocp.CheckpointManagerOptions(read_only=True, create=False),
                             item_names=("state", "meta")) as manager:
    steps = sorted(manager.all_steps(), reverse=True)
  if not steps:
    raise FileNotFoundError(f"{ckpt_dir}: no complete checkpoint")
  failed = []
  for i, s in enumerate(steps):
    try:
      return params_dir.host_params(params_dir.restore_orbax_params(os.path.join(ckpt_dir, str(s), "state"),
                                                                    subtree="params"))
    except Exception as e:  # noqa: BLE001 - a damaged checkpoint: Orbax/tensorstore/JSON errors
      reason = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}"
      failed.append(f"step {s}: {reason}")
      _log.warning("checkpoint %d of %s unreadable (%s); %s", s, workdir, reason,
                   f"reading {steps[i + 1]}" if i + 1 < len(steps) else "no older checkpoint")
  raise UserError(f"no checkpoint in {ckpt_dir} can be read: " + "; ".join(failed))


def _resolve(name_or_dir: str, search_dirs: Sequence[str] = ()) -> str:
  """The directory `load_pretrained` reads for `name_or_dir` (zoo name, params dir, fine-tuning work dir's
  best_checkpoint/, pre-training work dir)."""
  directory = zoo.resolve(os.path.expanduser(name_or_dir), search_dirs)
  directory = os.path.abspath(directory)
  best = os.path.join(directory, BEST_DIR)
  if not params_dir.is_params_dir(directory) and not is_workdir(directory) and os.path.isdir(best):
    directory = best
  return directory


def _conversion_hint(directory: str) -> str:
  """How to make a params directory of a Hugging Face folder or a TF checkpoint passed where one is expected."""
  try:
    names = set(os.listdir(directory)) if os.path.isdir(directory) else set()
  except OSError:
    return ""
  weights = {"model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
             "pytorch_model.bin.index.json"}
  # modules.json: a sentence-transformers folder; snapshots/ + refs/: the Hugging Face hub cache's models--ORG--NAME
  if ("config.json" in names and names & weights) or "modules.json" in names or {"snapshots", "refs"} <= names:
    return (f"; it is a Hugging Face model folder: convert it first with `python -m bert_jax.convert import-hf "
            f"--input={directory} --output=DIR` and pass DIR")
  if any(n.endswith(".index") for n in names):
    return (f"; it holds a TF checkpoint: convert it first with `python -m bert_jax.convert import-tf "
            f"--checkpoint={directory} --output=DIR` and pass DIR")
  return ""


def read_config(name_or_dir: str, search_dirs: Sequence[str] = ()) -> BertConfig:
  """Only the architecture of a checkpoint `load_pretrained` accepts (no params are read)."""
  return params_dir.read_model_config(_resolve(name_or_dir, search_dirs)).replace(scan_layers=False)


def describe_pretrained(name_or_dir: str, search_dirs: Sequence[str] = ()) -> Pretrained:
  """What `load_pretrained` returns without reading the params (`params` is None): the architecture, the vocab,
  the casing and the info files. The run plans resolve a checkpoint with this; the loops load it."""
  directory = _resolve(name_or_dir, search_dirs)
  if params_dir.is_params_dir(directory):
    config = params_dir.read_model_config(directory)
    vocab = params_dir.vocab_path(directory)
    info = params_dir.read_info(directory)
    ft_info = params_dir.read_json(os.path.join(directory, params_dir.FINETUNE_INFO_NAME))
    lower = info.get("do_lower_case", ft_info.get("do_lower_case"))
  elif is_workdir(directory):
    config = params_dir.read_model_config(directory)
    vocab, info, ft_info = params_dir.vocab_path(directory), {}, {}
    lower = params_dir.read_json(os.path.join(directory, "config.json")).get("data", {}).get("do_lower_case")
  else:
    raise FileNotFoundError(
        f"{name_or_dir!r} is neither a params directory (model_config.json + params.msgpack or params/), a "
        "fine-tuning work dir (best_checkpoint/) nor a pre-training work dir (checkpoints/)"
        + _conversion_hint(directory))
  return Pretrained(config.replace(scan_layers=False), None, vocab, None if lower is None else bool(lower),
                    directory, info, ft_info)


def load_pretrained(name_or_dir: str, search_dirs: Sequence[str] = ()) -> Pretrained:
  """See the module docstring."""
  described = describe_pretrained(name_or_dir, search_dirs)
  if is_workdir(described.directory) and not params_dir.is_params_dir(described.directory):
    params = load_workdir_params(described.directory)
  else:
    _, params, _ = params_dir.load_params_dir(described.directory)
  check_encoder_shapes(described.config, params, described.directory)
  return dataclasses.replace(described, params=params)


class ParamsMismatchError(UserError, ValueError):
  """A checkpoint's params do not fit its own model config (a UserError; a ValueError for older callers)."""


def check_encoder_shapes(config: BertConfig, params, directory: str) -> None:
  """params["bert"] has exactly the shapes BertModel(config) builds; else ParamsMismatchError naming the first
  differences (a model_config.json edited by hand, or params copied from another model, was a flax
  ScopeParamNotFoundError traceback at the first forward pass)."""
  if not isinstance(params, dict) or "bert" not in params:
    return
  cfg = config.replace(scan_layers=False, dtype="float32", remat_policy="none")
  model = BertModel(cfg)
  shapes = jax.eval_shape(lambda: model.init(jax.random.key(0), *dummy_inputs(cfg)[:3]))["params"]
  want = {k: tuple(v.shape) for k, v in traverse_util.flatten_dict(_unbox(shapes)).items()}
  got = {k: tuple(np.shape(v)) for k, v in traverse_util.flatten_dict(params["bert"]).items()}
  problems = [f"bert/{'/'.join(k)}: missing from the params" for k in want if k not in got]
  problems += [f"bert/{'/'.join(k)}: shape {got[k]}, the config gives {want[k]}" for k in want
               if k in got and got[k] != want[k]]
  problems += [f"bert/{'/'.join(k)}: not in a model of this config" for k in got if k not in want]
  if problems:
    more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
    raise ParamsMismatchError(
        f"{directory}: its params do not fit its model config (L{config.num_hidden_layers}/H{config.hidden_size}/"
        f"A{config.num_attention_heads}, FFN {config.intermediate_size}): " + "; ".join(problems[:3]) + more
        + "; was model_config.json edited, or the params written for another model?")


def _unbox(tree):
  return nn.unbox(flax.core.unfreeze(tree))


class VocabMismatchError(UserError, ValueError):
  """init_checkpoint's vocab size differs from the vocab file's (a UserError; a ValueError for older callers)."""


def check_vocab_matches(checkpoint_vocab_size: int, checkpoint: str, vocab_file: str) -> int:
  """The one vocab check of pre-training's and fine-tuning's `init_checkpoint`: `vocab_file`'s line count
  must equal the checkpoint's embedding rows, else UserError naming both sizes and both files (a larger
  vocab ends in NaN at step 1 or an index error, a smaller one trains silently on mismatched ids).
  A BPE model (a tokenizer.json in the checkpoint) given a WordPiece vocab, or the other way round, is refused
  first: the same number of ids would not make them the same tokens. Returns the vocab size."""
  check_tokenizer_kind(checkpoint, vocab_file)
  vocab_size = params_dir.count_vocab_lines(vocab_file)
  if tokenization.is_tokenizer_json(vocab_file) and vocab_size <= int(checkpoint_vocab_size):
    # A tokenizer.json with fewer ids than embedding rows: ModernBERT's 50,280 ids in 50,368 rows (padded to a
    # multiple of 64); the extra rows are never looked up.
    return int(checkpoint_vocab_size)
  if int(vocab_size) != int(checkpoint_vocab_size):
    raise VocabMismatchError(
        f"vocab size mismatch: vocab_file {vocab_file} has {vocab_size} tokens but init_checkpoint {checkpoint} "
        f"was trained with vocab_size={checkpoint_vocab_size}; use the checkpoint's own vocab.txt (or a vocab "
        f"of {checkpoint_vocab_size} lines)")
  return vocab_size


_KIND_WORDS = {"bpe": "a BPE tokenizer.json", "wordpiece": "a WordPiece vocab.txt",
               "sentencepiece": "a SentencePiece tokenizer.json", "json": "a tokenizer.json"}


def check_tokenizer_kind(checkpoint: str, vocab_file: str) -> None:
  """UserError when `vocab_file` tokenizes with another kind of tokenizer than `checkpoint`'s own vocab (a
  BPE tokenizer.json against a WordPiece vocab.txt, either way round)."""
  own = params_dir.vocab_path(checkpoint) if fileio.isdir(checkpoint) else None
  if not own or fileio.abspath(own) == fileio.abspath(vocab_file):
    return
  want, have = tokenization.tokenizer_kind(own), tokenization.tokenizer_kind(vocab_file)
  if "bpe" in (want, have) and want != have:
    raise VocabMismatchError(
        f"tokenizer mismatch: vocab_file {vocab_file} is {_KIND_WORDS[have]} but init_checkpoint {checkpoint} was "
        f"trained with {_KIND_WORDS[want]} ({own}); leave vocab_file empty to use the checkpoint's own, or pass "
        f"{'its tokenizer.json' if want == 'bpe' else 'its vocab.txt'}")


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
