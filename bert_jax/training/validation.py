"""The field and file checks the run plans are made of (`training.plan.resolve_pretrain`,
`finetune.plan.resolve_finetune`). Each raises `bert_jax.errors.UserError` naming the field (as
`config.a.b=value`) and what was expected, so the entry points print one `error: ...` line:

  check_range / check_choice        a config field's range or choice (skipped when the config lacks the field)
  check_optimizer_fields            config.optimizer's ranges
  check_vocab                       an existing, UTF-8 vocab holding the special tokens; its size
  check_input_files                 comma-separated globs that match non-empty files
  count_documents_upto              documents of raw text (blank-line separated), counted up to a limit
  check_batch_divisible             batch_size vs data shards x grad_accum_steps and the process count;
                                    the resolved mesh shape
  checkpoint_dir                    an init_checkpoint (path or converted zoo name) load_pretrained reads
  has_checkpoint                    a work dir that a run resumes

`warn(message)` logs a config warning (the run goes on).
"""

from __future__ import annotations

import logging
import math
import os
from typing import Iterable, List, Optional, Sequence, Tuple

from bert_jax.errors import UserError
from bert_jax.input_pipeline import fileio, text_io, tokenization
from bert_jax.pretrained import load, params_dir, zoo
from bert_jax.pretrained.load import CHECKPOINT_SUBDIR
from bert_jax.training import sharding

_log = logging.getLogger(__name__)

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
_TEXT_SUFFIXES = (".txt", ".text")    # raw text, as pretrain_dataset's input_format="auto"


# ---- generic field checks -------------------------------------------------------------------------------
def get_field(config, path: str):
  """config.a.b by dotted path; raises KeyError when a part is missing."""
  value = config
  for part in path.split("."):
    if part not in value:
      raise KeyError(path)
    value = value[part]
  return value


def has(config, path: str) -> bool:
  try:
    get_field(config, path)
    return True
  except (KeyError, TypeError, AttributeError):
    return False


def check_range(config, path: str, *, lo=None, hi=None, lo_open: bool = False, hi_open: bool = False,
                allow: Sequence = (), integer: bool = False) -> None:
  """config.<path> within [lo, hi] (open ends with lo_open / hi_open) or one of `allow`; skipped when the
  config has no such field."""
  if not has(config, path):
    return
  value = get_field(config, path)
  if value in allow and not isinstance(value, bool):
    return
  ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
  if isinstance(value, bool) or not ok_type:
    raise UserError(f"config.{path}={value!r}; expected {'an integer' if integer else 'a number'}")
  bad = (lo is not None and (value <= lo if lo_open else value < lo)) or \
        (hi is not None and (value >= hi if hi_open else value > hi)) or \
        (isinstance(value, float) and not math.isfinite(value))
  if bad:
    lo_s = "" if lo is None else f"{'>' if lo_open else '>='} {lo}"
    hi_s = "" if hi is None else f"{'<' if hi_open else '<='} {hi}"
    want = " and ".join(s for s in (lo_s, hi_s) if s)
    extra = f" (or {', '.join(repr(a) for a in allow)})" if allow else ""
    raise UserError(f"config.{path}={value!r}; expected {want}{extra}")


def check_choice(config, path: str, choices: Iterable) -> None:
  if not has(config, path):
    return
  value = get_field(config, path)
  choices = tuple(choices)
  if value not in choices:
    raise UserError(f"config.{path}={value!r}; expected one of {', '.join(repr(c) for c in choices)}")


# ---- files ----------------------------------------------------------------------------------------------
def check_vocab(vocab_file: str, field: str, required: Sequence[str] = SPECIAL_TOKENS) -> int:
  """Number of lines of an existing, UTF-8, non-empty vocab holding `required`; UserError naming `field`."""
  if not vocab_file:
    raise UserError(f"{field} is empty: pass the WordPiece vocab (one token per line)")
  if not fileio.exists(vocab_file) or fileio.isdir(vocab_file):
    raise UserError(f"{field}={vocab_file!r}: no such file")
  try:
    tokenization.load_vocab(vocab_file, required=tuple(required))
  except (ValueError, FileNotFoundError) as e:
    raise UserError(f"{field}={vocab_file!r}: {e}") from e
  with fileio.open_file(vocab_file, "rb") as f:
    return sum(1 for _ in f)


def check_input_files(patterns: str, field: str) -> List[str]:
  """The files of comma-separated globs; each glob matches, each file has bytes. UserError naming `field`."""
  if not str(patterns).strip():
    raise UserError(f"{field} is empty: pass --{field}=GLOB (comma-separated globs of raw .txt text or "
                    "TFRecords in Google's format)")
  try:
    files = text_io.expand_globs(patterns)
  except FileNotFoundError as e:
    raise UserError(f"{field}={patterns!r}: {e}") from e
  for path in files:
    if _size(path) == 0:
      raise UserError(f"{field}={patterns!r}: {path} is empty")
  return files


def _size(path: str) -> int:
  if fileio.is_remote(path):
    import tensorflow as tf  # lazy: TensorFlow only for gs:// and other remote paths
    return int(tf.io.gfile.stat(path).length)
  return os.path.getsize(path)


def is_raw_text(files: Sequence[str]) -> bool:
  return all(f.endswith(_TEXT_SUFFIXES) for f in files)


def check_batch_divisible(batch_size: int, grad_accum_steps: int, mesh_shape, mesh_axes, rules,
                          num_devices: int, process_count: int,
                          field: str = "config.batch_size") -> Tuple[Tuple[int, ...], int]:
  """(the mesh shape with -1 resolved, the number of data shards); UserError unless batch_size is a multiple
  of shards x grad_accum_steps and of the process count, or when mesh_shape does not fit the devices."""
  try:
    shape = sharding.resolve_mesh_shape(tuple(mesh_shape), num_devices)
  except ValueError as e:
    raise UserError(f"config.mesh.shape={tuple(mesh_shape)}: {e}") from e
  if len(tuple(mesh_axes)) != len(shape):
    raise UserError(f"config.mesh.shape={tuple(mesh_shape)} and config.mesh.axes={tuple(mesh_axes)} differ "
                    "in length")
  spec = sharding.batch_spec(rules)[0]
  names = () if spec is None else (spec if isinstance(spec, tuple) else (spec,))
  sizes = dict(zip(tuple(mesh_axes), shape))
  unknown = [n for n in names if n not in sizes]
  if unknown:
    raise UserError(f"config.logical_axis_rules map the batch to mesh axes {unknown} that config.mesh.axes="
                    f"{tuple(mesh_axes)} lacks")
  shards = math.prod(sizes[n] for n in names)
  divisor = shards * int(grad_accum_steps)
  if batch_size % divisor:
    lower, upper = (batch_size // divisor) * divisor, (batch_size // divisor + 1) * divisor
    near = " or ".join(str(v) for v in (lower, upper) if v > 0)
    mesh = "x".join(map(str, shape))
    raise UserError(f"{field}={batch_size} is not divisible by {shards} data shard(s) (mesh {mesh} "
                    f"over {num_devices} devices) x config.grad_accum_steps={grad_accum_steps} = {divisor}; "
                    f"use a multiple of {divisor}, e.g. {near}")
  if batch_size % process_count:
    raise UserError(f"{field}={batch_size} is not a multiple of the {process_count} processes (each host "
                    "reads batch_size / process_count rows)")
  return shape, shards


def checkpoint_dir(name_or_dir: str, field: str = "config.init_checkpoint") -> str:
  """The directory of an init checkpoint (a path or a converted zoo name) that load_pretrained can read."""
  try:
    directory = os.path.abspath(zoo.resolve(os.path.expanduser(name_or_dir)))
  except FileNotFoundError as e:   # zoo.ZooError: names the name, where it looked and how to convert
    raise UserError(f"{field}={name_or_dir!r}: {e}") from e
  best = os.path.join(directory, load.BEST_DIR)
  if params_dir.is_params_dir(directory) or load.is_workdir(directory):
    return directory
  if os.path.isdir(best) and params_dir.is_params_dir(best):
    return best
  raise UserError(f"{field}={name_or_dir!r} is neither a params directory (model_config.json + "
                  "params.msgpack or params/), a fine-tuning work dir (best_checkpoint/) nor a pre-training "
                  "work dir (checkpoints/)")


def count_documents_upto(files: Sequence[str], limit: int) -> int:
  """Documents of raw text in Google's format (blank line between them; each file ends one), counted
  until `limit` are found, so a normal corpus is read only up to its second blank line."""
  found = 0
  for path in files:
    in_doc = False
    with fileio.open_file(path, "rb") as f:
      for line in f:
        if line.strip():
          in_doc = True
          continue
        if in_doc:
          found += 1
          in_doc = False
          if found >= limit:
            return found
    if in_doc:
      found += 1
      if found >= limit:
        return found
  return found


def warn(message: str) -> None:
  """A config warning: logged (the run goes on)."""
  _log.warning("%s", message)


def has_checkpoint(workdir: Optional[str]) -> bool:
  """A work dir with a checkpoint (local or gs://): a run on it resumes, with the work dir's vocab."""
  if not workdir:
    return False
  d = fileio.join(workdir, CHECKPOINT_SUBDIR)
  return fileio.isdir(d) and any(n.rstrip("/").isdigit() for n in fileio.listdir(d))


def check_optimizer_fields(config, auto_learning_rate: bool = False) -> None:
  """Ranges of config.optimizer (pre-training and fine-tuning share its shape; its choices are checked by
  building it, training.plan.optimizer_settings);
  `auto_learning_rate`: -1 means "by model size" (fine-tuning)."""
  check_range(config, "optimizer.learning_rate", lo=0, lo_open=True, allow=(-1.0, -1) if auto_learning_rate else ())
  check_range(config, "optimizer.end_learning_rate", lo=0)
  check_range(config, "optimizer.weight_decay", lo=0)
  check_range(config, "optimizer.b1", lo=0, hi=1, hi_open=True)
  check_range(config, "optimizer.b2", lo=0, hi=1, hi_open=True)
  check_range(config, "optimizer.eps", lo=0, lo_open=True)
  check_range(config, "optimizer.clip_norm", lo=0)
  check_range(config, "optimizer.power", lo=0, lo_open=True)
