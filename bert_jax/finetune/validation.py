"""Checks a fine-tuning config before any model or data work: `validate_finetune_config(config)`.

The fine-tuning counterpart of `bert_jax.training.validation` (whose field and file helpers it uses). Each
mistake raises `bert_jax.errors.UserError` naming the field and what was expected, before the checkpoint's
weights are read or a task file is tokenised:

  - the task is known (with "did you mean"); choice fields (on_error, ner_scheme, ner_mode, squad_language,
    do_lower_case, classification.header / file_format, pooling) and ranges of every field that exists;
  - a data source: `data_dir` is an existing directory with a training file (train.*, in it or a task
    subfolder as GLUE's) when training, or `tfds_name` is set;
  - `init_checkpoint` names an existing checkpoint directory or a converted zoo model; do_train=False or
    load_head=True need one;
  - the vocab (`vocab_file`, else the checkpoint's) exists and holds [PAD] [UNK] [CLS] [SEP] [MASK];
  - `max_seq_length` <= the model's max_position_embeddings (the checkpoint's, else config.model's), and
    leaves room for SQuAD's question;
  - `batch_size` a multiple of the data shards x `grad_accum_steps` (and of the process count).
"""

from __future__ import annotations

import difflib
import os
from typing import Optional

from bert_jax.errors import UserError
from bert_jax.training import validation as v

def _train_file_exists(data_dir: str) -> bool:
  """A file named train* in data_dir or one level below (GLUE's <data_dir>/<Task>/train.tsv); C3's own
  d-train.json / m-train.json count too."""
  def is_train(name: str) -> bool:
    name = name.lower()
    return name.startswith(("train", "d-train", "m-train"))

  for d in [data_dir] + [os.path.join(data_dir, n) for n in sorted(os.listdir(data_dir))]:
    if os.path.isdir(d) and any(is_train(n) and os.path.isfile(os.path.join(d, n)) for n in os.listdir(d)):
      return True
  return False


def validate_finetune_config(config, *, num_devices: Optional[int] = None,
                             process_count: Optional[int] = None) -> None:
  """Raises UserError for the first mistake in a configs/finetune.py config (see the module docstring)."""
  from bert_jax.finetune.tasks import TASK_NAMES  # pylint: disable=g-import-not-at-top
  task = str(config.task)
  if task not in TASK_NAMES:
    close = difflib.get_close_matches(task, TASK_NAMES, n=2)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    raise UserError(f"config.task={task!r} is not a task; expected one of {', '.join(TASK_NAMES)}{hint}")

  # Choices and ranges (fields another change removed are skipped).
  v.check_choice(config, "on_error", ("raise", "skip"))
  v.check_choice(config, "ner_scheme", ("BIO", "BIOES"))
  v.check_choice(config, "ner_mode", ("conlleval", "strict"))
  v.check_choice(config, "squad_language", ("auto", "en", "zh"))
  from bert_jax.finetune.data import bool_or_none  # pylint: disable=g-import-not-at-top
  for path in ("do_lower_case", "classification.header"):
    if v.has(config, path):
      try:
        bool_or_none(v.get_field(config, path), "config." + path)
      except ValueError as e:
        raise UserError(str(e)) from e
  v.check_choice(config, "classification.file_format", ("", "tsv", "csv", "jsonl"))
  v.check_choice(config, "nan_policy", ("stop", "skip"))
  v.check_choice(config, "model.size", ("tiny", "mini", "small", "medium", "base", "large"))
  for path in ("batch_size", "eval_batch_size", "grad_accum_steps", "log_every_steps", "doc_stride",
               "max_query_length", "n_best_size", "max_answer_length", "max_consecutive_nonfinite",
               "model.max_position_embeddings"):
    v.check_range(config, path, lo=1, integer=True)
  for path in ("eval_every_steps", "early_stopping_patience"):
    v.check_range(config, path, lo=0, integer=True)
  v.check_range(config, "max_seq_length", lo=3, integer=True)    # [CLS] a [SEP]
  v.check_range(config, "max_train_steps", lo=1, allow=(-1,), integer=True)
  v.check_range(config, "warmup_proportion", lo=0, hi=1)
  v.check_range(config, "multilabel_threshold", lo=0, hi=1)
  v.check_range(config, "model.hidden_dropout_prob", lo=0, hi=1, hi_open=True)
  v.check_range(config, "model.attention_probs_dropout_prob", lo=0, hi=1, hi_open=True)
  v.check_range(config, "model.classifier_dropout", lo=0, hi=1, hi_open=True, allow=(-1.0, -1))
  for path in ("model.hidden_size", "model.num_hidden_layers", "model.num_attention_heads",
               "model.intermediate_size"):
    v.check_range(config, path, lo=1, allow=(-1,), integer=True)
  v.check_range(config, "optimizer.learning_rate", lo=0, lo_open=True, allow=(-1.0, -1))
  v.check_range(config, "optimizer.end_learning_rate", lo=0)
  v.check_range(config, "optimizer.weight_decay", lo=0)
  v.check_range(config, "optimizer.b1", lo=0, hi=1, hi_open=True)
  v.check_range(config, "optimizer.b2", lo=0, hi=1, hi_open=True)
  v.check_range(config, "optimizer.eps", lo=0, lo_open=True)
  v.check_range(config, "optimizer.clip_norm", lo=0)
  v.check_choice(config, "optimizer.name", ("adamw", "lamb"))
  if config.do_train:
    v.check_range(config, "num_train_epochs", lo=0, lo_open=True)

  # Data source.
  tfds = str(config.get("tfds_name", "") or "").strip()
  data_dir = str(config.data_dir or "")
  if not tfds:
    if not data_dir:
      raise UserError("config.data_dir is empty: pass --config.data_dir=DIR (the task's train/dev/test files) "
                      "or --config.tfds_name=NAME")
    if not os.path.isdir(data_dir):
      raise UserError(f"config.data_dir={data_dir!r}: no such directory")
    if config.do_train and not _train_file_exists(data_dir):
      raise UserError(f"config.data_dir={data_dir!r} has no training file (train.tsv, train.txt, "
                      f"train-v1.1.json, ... in it or in a task subfolder) for task {task!r}; see README "
                      "'Fine-tuning' for each task's layout, or pass --config.do_train=false")

  # Checkpoint, vocab, lengths.
  init_dir = None
  if config.init_checkpoint:
    init_dir = v.checkpoint_dir(config.init_checkpoint)
  elif not config.do_train or config.get("load_head", False):
    raise UserError("config.do_train=false (or config.load_head=true) evaluates a fine-tuned model: pass "
                    "--config.init_checkpoint=DIR")
  vocab_file, field = config.vocab_file, "config.vocab_file"
  if not vocab_file and init_dir is not None:
    vocab_file = v.checkpoint_vocab(init_dir) or ""
    field = f"config.init_checkpoint={config.init_checkpoint!r}'s vocab.txt"
    if not vocab_file:
      raise UserError(f"config.init_checkpoint={config.init_checkpoint!r} ({init_dir}) has no vocab.txt: "
                      "pass --config.vocab_file=VOCAB (the vocab it was trained with)")
  if not vocab_file:
    raise UserError("no vocab: pass --config.vocab_file=vocab.txt (random init) or --config.init_checkpoint "
                    "(which carries vocab.txt)")
  v.check_vocab(vocab_file, field)
  max_positions = int(config.model.max_position_embeddings)
  source = "config.model.max_position_embeddings"
  if init_dir is not None:
    from_ckpt = v.checkpoint_max_positions(init_dir)
    if from_ckpt:
      max_positions, source = from_ckpt, f"the checkpoint's max_position_embeddings ({init_dir})"
  length = int(config.max_seq_length)
  if length > max_positions:
    raise UserError(f"config.max_seq_length={length} exceeds {source}={max_positions}: the position "
                    "embeddings have no row for the later tokens")
  if task.startswith("squad") and int(config.max_query_length) + 3 >= length:
    raise UserError(f"config.max_seq_length={length} leaves no room for the context after "
                    f"config.max_query_length={int(config.max_query_length)} question tokens + 3 specials")

  # Devices.
  if num_devices is None or process_count is None:
    import jax  # pylint: disable=g-import-not-at-top
    num_devices = jax.device_count() if num_devices is None else num_devices
    process_count = jax.process_count() if process_count is None else process_count
  from bert_jax.training import sharding  # pylint: disable=g-import-not-at-top
  v.check_batch_divisible(int(config.batch_size), int(config.grad_accum_steps), config.mesh.shape,
                          config.mesh.axes, sharding.normalize_rules(config.logical_axis_rules), num_devices,
                          process_count)
