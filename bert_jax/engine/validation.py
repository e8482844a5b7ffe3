"""The model- and device-side checks of the run plans (`training.plan`, `finetune.plan`); the field and file
checks they share with the data plan are `bert_jax.input_pipeline.checks`. Each raises
`bert_jax.errors.UserError` naming the field:

  check_optimizer_fields            config.optimizer's ranges
  check_batch_divisible             batch_size vs data shards x grad_accum_steps and the process count;
                                    the resolved mesh shape
  checkpoint_dir                    an init_checkpoint (path or converted zoo name) load_pretrained reads
  has_checkpoint                    a work dir that a run resumes
  check_workdir                     a work dir that can be (or is) a directory, with a checkpoints/ folder
  packed_model                      the model config of packed rows (max_examples_per_row), or why it cannot be
"""

from __future__ import annotations

import math
import os
from typing import Optional, Tuple

from bert_jax.errors import UserError
from bert_jax import fileio
from bert_jax.input_pipeline.checks import check_range
from bert_jax.pretrained import load, params_dir, zoo
from bert_jax.pretrained.load import CHECKPOINT_SUBDIR
from bert_jax.engine import sharding


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


def check_workdir(workdir: Optional[str], field: str = "--workdir") -> None:
  """UserError when `workdir` (or its checkpoints/) exists but is not a directory, or, locally, cannot be
  created because an existing parent is a file: without it the run ended in a FileExistsError or
  NotADirectoryError traceback (exit 1, which launchers retry) instead of one line and exit 2."""
  if not workdir:
    return
  for path in (workdir, fileio.join(workdir, CHECKPOINT_SUBDIR)):
    if fileio.exists(path) and not fileio.isdir(path):
      raise UserError(f"{field}={workdir}: {path} is a file, not a directory; pass another --workdir or move "
                      "the file away")
  if fileio.is_remote(workdir):
    return
  parent = os.path.abspath(workdir)
  while not os.path.exists(parent) and os.path.dirname(parent) != parent:
    parent = os.path.dirname(parent)
  if not os.path.isdir(parent):
    raise UserError(f"{field}={workdir}: cannot be created, {parent} is a file, not a directory")


def latest_checkpoint_step(workdir: Optional[str]) -> Optional[int]:
  """The highest step under workdir/checkpoints (local or gs://), or None."""
  if not workdir:
    return None
  d = fileio.join(workdir, CHECKPOINT_SUBDIR)
  if not fileio.isdir(d):
    return None
  steps = [int(n.rstrip("/")) for n in fileio.listdir(d) if n.rstrip("/").isdigit()]
  return max(steps) if steps else None


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


# attention_impl values that know a row only as one length (models/attention.py, PACKED_PATHS)
_UNPACKABLE_ATTENTION = ("cudnn", "cudnn_dropout")


def packed_model(model, cap: int, field: str):
  """`model` (a BertConfig) taking packed rows of at most `cap` examples; UserError naming `field` (the packing
  switch) when its attention path or encoder family would let the examples of a row attend to each other."""
  if model.attention_impl in _UNPACKABLE_ATTENTION:
    raise UserError(f"{field} with config.model.attention_impl={model.attention_impl}: cuDNN takes one length "
                    "per row and would let packed examples attend to each other; use auto, xla, einsum or "
                    "pallas_flash, or turn packing off")
  try:
    return model.replace(max_examples_per_row=int(cap))
  except ValueError as e:   # the encoder family cannot keep examples apart (EncoderFamily.packs)
    raise UserError(f"{field}: {e}") from e
