"""Checks a pre-training config before any model or data work: `validate_pretrain_config(config, workdir)`.

One place per config kind (this module for configs/pretrain.py, `bert_jax.finetune.validation` for
configs/finetune.py). Each mistake raises `bert_jax.errors.UserError` naming the field (as
`config.a.b=value`) and what was expected, so the entry points print one `error: ...` line (exit 2) a few
seconds after launch instead of a traceback from inside jit, Orbax or a tf.data PyFunc:

  - ranges and choices of every field that exists (a field another change removed is skipped);
  - the model fields, through the same `BertConfig` / targets / optimizer constructors the run uses;
  - `batch_size` a multiple of the data shards (from `mesh.shape`, the axis rules and the device count)
    x `grad_accum_steps`, and of the process count;
  - `max_seq_length` (and every phase's) <= `model.max_position_embeddings`; >= 1 prediction per sequence
    when `mlm` is a target;
  - the vocab file (the work dir's on resume, else `data.vocab_file`, else the init checkpoint's) exists,
    is UTF-8 and holds [PAD] [UNK] [CLS] [SEP] [MASK];
  - every input glob matches a non-empty file; raw text for NSP pairs has at least 2 documents per host
    (read only until that many are found);
  - `init_checkpoint` names an existing checkpoint directory or a converted zoo model.

Warnings (logged, the run goes on): `warmup_steps >= num_train_steps` (the peak learning rate is never
reached). The shared helpers (`check_range`, `check_choice`, `check_vocab`, `check_input_files`,
`check_batch_divisible`, `check_init_checkpoint`) serve the fine-tuning validator too.
"""

from __future__ import annotations

import logging
import math
import os
from typing import Iterable, List, Optional, Sequence

from bert_jax.errors import UserError
from bert_jax.input_pipeline import fileio, text_io, tokenization

_log = logging.getLogger(__name__)

PRETRAIN_SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
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
def check_vocab(vocab_file: str, field: str, required: Sequence[str] = PRETRAIN_SPECIAL_TOKENS) -> int:
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
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    return int(tf.io.gfile.stat(path).length)
  return os.path.getsize(path)


def is_raw_text(files: Sequence[str]) -> bool:
  return all(f.endswith(_TEXT_SUFFIXES) for f in files)


def check_batch_divisible(batch_size: int, grad_accum_steps: int, mesh_shape, mesh_axes, rules,
                          num_devices: int, process_count: int, field: str = "config.batch_size") -> int:
  """The number of data shards; UserError unless batch_size is a multiple of shards x grad_accum_steps
  and of the process count, or when mesh_shape does not fit the devices."""
  from bert_jax.training import sharding  # pylint: disable=g-import-not-at-top
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
  return shards


def checkpoint_dir(name_or_dir: str, field: str = "config.init_checkpoint") -> str:
  """The directory of an init checkpoint (a path or a converted zoo name) that load_pretrained can read."""
  from bert_jax.pretrained import load, params_dir, zoo  # pylint: disable=g-import-not-at-top
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


def checkpoint_vocab(directory: str) -> Optional[str]:
  from bert_jax.pretrained import params_dir  # pylint: disable=g-import-not-at-top
  return params_dir.vocab_path(directory)


def checkpoint_max_positions(directory: str) -> Optional[int]:
  from bert_jax.pretrained import params_dir  # pylint: disable=g-import-not-at-top
  try:
    return int(params_dir.read_model_config(directory).max_position_embeddings)
  except (FileNotFoundError, ValueError):
    return None


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


# ---- pre-training ---------------------------------------------------------------------------------------
def _resuming(workdir: Optional[str]) -> bool:
  """A work dir with a checkpoint (local or gs://): the run resumes with the work dir's vocab."""
  if not workdir:
    return False
  d = fileio.join(workdir, "checkpoints")
  return fileio.isdir(d) and any(n.rstrip("/").isdigit() for n in fileio.listdir(d))


def _check_model(config, vocab_size: int):
  """The BertConfig, targets and optimizer the run will build, built here so their own checks run now."""
  from bert_jax.models import validate_targets  # pylint: disable=g-import-not-at-top
  from bert_jax.training import optimizers  # pylint: disable=g-import-not-at-top
  from bert_jax.training import train_step as ts  # pylint: disable=g-import-not-at-top
  try:
    validate_targets(tuple(config.targets))
  except ValueError as e:
    raise UserError(f"config.targets={tuple(config.targets)!r}: {e}") from e
  try:
    model_config = ts.build_model_config(config, vocab_size)
  except ValueError as e:
    raise UserError(f"config.model: {e}") from e
  try:
    optimizers.optimizer_from_run_config(config)
  except ValueError as e:
    raise UserError(f"config.optimizer: {e}") from e
  return model_config


def validate_pretrain_config(config, workdir: Optional[str] = None, *, num_devices: Optional[int] = None,
                             process_count: Optional[int] = None) -> None:
  """Raises UserError for the first mistake in a configs/pretrain.py config (see the module docstring).

  num_devices / process_count default to jax.device_count() / jax.process_count(); call this after
  jax.distributed.initialize on multi-host runs.
  """
  targets = tuple(config.targets)
  d = config.data
  # Ranges and choices.
  check_range(config, "batch_size", lo=1, integer=True)
  check_range(config, "grad_accum_steps", lo=1, integer=True)
  check_range(config, "num_train_steps", lo=1, integer=True)
  check_range(config, "warmup_steps", lo=0, integer=True)
  check_range(config, "checkpoint_every_steps", lo=0, integer=True)
  check_range(config, "keep_checkpoints", lo=1, integer=True)
  check_range(config, "log_every_steps", lo=1, integer=True)
  check_range(config, "eval_every_steps", lo=0, integer=True)
  check_range(config, "eval_steps", lo=1, integer=True)
  check_range(config, "max_consecutive_nonfinite", lo=1, integer=True)
  check_range(config, "peak_flops_per_device", lo=0)
  check_choice(config, "nan_policy", ("stop", "skip"))
  check_range(config, "model.vocab_size", lo=1, allow=(-1,), integer=True)
  check_range(config, "model.max_position_embeddings", lo=1, integer=True)
  check_range(config, "model.hidden_dropout_prob", lo=0, hi=1, hi_open=True)
  check_range(config, "model.attention_probs_dropout_prob", lo=0, hi=1, hi_open=True)
  check_range(config, "data.max_seq_length", lo=5, integer=True)   # [CLS] A [SEP] B [SEP]
  check_range(config, "data.masked_lm_prob", lo=0, hi=1, lo_open=True)
  check_range(config, "data.short_seq_prob", lo=0, hi=1)
  check_range(config, "data.shuffle_buffer", lo=0, integer=True)
  check_choice(config, "data.pair_mode", ("nsp", "sop"))
  check_range(config, "optimizer.learning_rate", lo=0, lo_open=True)
  check_range(config, "optimizer.end_learning_rate", lo=0)
  check_range(config, "optimizer.weight_decay", lo=0)
  check_range(config, "optimizer.b1", lo=0, hi=1, hi_open=True)
  check_range(config, "optimizer.b2", lo=0, hi=1, hi_open=True)
  check_range(config, "optimizer.eps", lo=0, lo_open=True)
  check_range(config, "optimizer.clip_norm", lo=0)
  check_range(config, "optimizer.power", lo=0, lo_open=True)

  # Sequence lengths and predictions, per phase.
  max_positions = int(config.model.max_position_embeddings)
  phases = tuple(d.phases or ())
  lengths = [("config.data.max_seq_length", int(d.max_seq_length), int(d.max_predictions_per_seq))]
  if phases:
    fractions = []
    for i, phase in enumerate(phases):
      if not isinstance(phase, (tuple, list)) or len(phase) != 3:
        raise UserError(f"config.data.phases[{i}]={phase!r}; expected (fraction of steps, max_seq_length, "
                        "max_predictions_per_seq)")
      fractions.append(float(phase[0]))
      lengths.append((f"config.data.phases[{i}] length", int(phase[1]), int(phase[2])))
    if any(f <= 0 for f in fractions) or abs(sum(fractions) - 1.0) > 1e-6:
      raise UserError(f"config.data.phases={phases}: the fractions {fractions} must be positive and sum to 1")
    lengths = lengths[1:]   # the phases replace data.max_seq_length
  init_dir = None
  resume = _resuming(workdir)
  if config.init_checkpoint and not resume:
    init_dir = checkpoint_dir(config.init_checkpoint)
    max_positions = checkpoint_max_positions(init_dir) or max_positions
  for name, length, predictions in lengths:
    if length > max_positions:
      raise UserError(f"{name}={length} exceeds model.max_position_embeddings={max_positions}: the "
                      "position embeddings have no row for the later tokens; shorten the sequences or raise "
                      "--config.model.max_position_embeddings (random init only)")
    if length < 5:
      raise UserError(f"{name}={length}; expected >= 5 ([CLS] A [SEP] B [SEP])")
    if "mlm" in targets:
      what = "config.data.max_predictions_per_seq" if name == "config.data.max_seq_length" else \
             name.replace(" length", " max_predictions_per_seq")
      if predictions < 1:
        raise UserError(f"{what}={predictions} with the 'mlm' target: no token would be predicted "
                        "(mlm_loss stays 0); expected >= 1, e.g. 20 for length 128 (15%)")
      if predictions > length:
        raise UserError(f"{what}={predictions} exceeds the sequence length {length}")

  pack = bool(d.get("pack_sequences", False))
  if pack and set(targets) & {"nsp", "sop"}:
    raise UserError(f"config.data.pack_sequences=true makes rows without sentence pairs: set "
                    f"--config.targets='(\"mlm\",)' (got targets={targets})")

  if int(config.warmup_steps) >= int(config.num_train_steps):
    peak, steps, warmup = float(config.optimizer.learning_rate), int(config.num_train_steps), int(config.warmup_steps)
    if str(config.optimizer.get("schedule", "linear")) == "google":   # Google's warmup is not clamped
      effect = (f"the learning rate never reaches its peak {peak:g} (Google's linear warmup stops at "
                f"{peak * steps / max(1, warmup):.3g})")
    else:   # make_schedule clamps the warmup to the run
      effect = (f"the whole run is warmup: the learning rate reaches its peak {peak:g} only at the last step "
                "and never decays")
    warn(f"config.warmup_steps={warmup} >= config.num_train_steps={steps}: {effect}; lower "
         "--config.warmup_steps (BERT: 1% of the steps)")

  # Vocab: the work dir's on resume, else data.vocab_file, else the init checkpoint's.
  vocab_file, field = d.vocab_file, "config.data.vocab_file"
  if resume and fileio.exists(fileio.join(workdir, "vocab.txt")):
    vocab_file, field = fileio.join(workdir, "vocab.txt"), f"the work dir's vocab ({workdir})"
  elif not vocab_file and init_dir is not None:
    vocab_file = checkpoint_vocab(init_dir) or ""
    field = f"config.init_checkpoint={config.init_checkpoint!r}'s vocab.txt"
  if not vocab_file:
    raise UserError("config.data.vocab_file is empty: pass --config.data.vocab_file=vocab.txt (the WordPiece "
                    "vocab; python -m bert_jax.input_pipeline.build_vocab makes one)")
  vocab_lines = check_vocab(vocab_file, field)
  vocab_size = int(config.model.vocab_size) if int(config.model.vocab_size) > 0 else vocab_lines
  _check_model(config, vocab_size)

  # Devices: data shards x grad_accum_steps must divide the batch.
  if num_devices is None or process_count is None:
    import jax  # pylint: disable=g-import-not-at-top
    num_devices = jax.device_count() if num_devices is None else num_devices
    process_count = jax.process_count() if process_count is None else process_count
  from bert_jax.training import sharding  # pylint: disable=g-import-not-at-top
  check_batch_divisible(int(config.batch_size), int(config.grad_accum_steps), config.mesh.shape,
                        config.mesh.axes, sharding.normalize_rules(config.logical_axis_rules), num_devices,
                        process_count)

  # Input files; raw text for NSP needs two documents per host.
  for key in ("input_files", "eval_input_files"):
    if key == "eval_input_files" and not str(d.eval_input_files).strip():
      continue
    files = check_input_files(d[key], f"config.data.{key}")
    if is_raw_text(files) and not pack:
      pair_mode = "sop" if "sop" in targets else d.pair_mode
      need = (2 if pair_mode == "nsp" else 1) * process_count
      found = count_documents_upto(files, need)
      if found < need:
        why = ("next-sentence pairs take the random next sentence from another document" if pair_mode == "nsp"
               else "each process reads its own documents")
        raise UserError(f"config.data.{key}={d[key]!r}: {found} document(s), need at least {need} "
                        f"({why}{f', x {process_count} processes' if process_count > 1 else ''}); separate "
                        "documents with a blank line, or use --config.data.pair_mode=sop")
