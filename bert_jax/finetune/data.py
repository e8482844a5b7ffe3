"""Fine-tuning data: task objects from a run config, split loading and padded batches. No TensorFlow here
(TFDS is imported by the task readers only when a TFDS split is read).

    task = make_task(config)                       # a bert_jax.finetune.tasks Task, label list filled in
    keys = task.device_keys                        # model inputs + the head's extra inputs + labels
    data = load_split(task, plan.data, "dev", tokenizer)   # SplitData(examples, features) or None if absent
    for batch in iterate_batches(data.features, keys, batch_size, rng=None):   # padded, with example_weight
      ...

Batches are always full (static shapes, one compile): the last partial batch is padded with copies of row 0
whose `example_weight` is 0, so a small training set loses nothing (Google's run_classifier drops the
remainder instead) and evaluation scores every example exactly once.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Dict, Iterator, Optional, Sequence, Tuple

import numpy as np

from bert_jax.errors import UserError
from bert_jax.finetune.tasks import get_task, task_class  # noqa: F401  (get_task: part of this module's API)
from bert_jax.finetune.tasks.common import TRUNCATIONS, ExampleSet, TaskDataError
from bert_jax.finetune.tasks.registry import canonical_name

_log = logging.getLogger(__name__)

POOLINGS = ("cls", "first", "mean", "max", "last")   # = models.heads.POOLINGS (config.pooling)


def split_list(s) -> list:
  if isinstance(s, (list, tuple)):
    return [str(x).strip() for x in s if str(x).strip()]
  return [x.strip() for x in str(s or "").split(",") if x.strip()]


def use_tfds(config) -> bool:
  return bool(config.tfds_name.strip())


def make_task(config, label_list: Optional[Sequence[str]] = None):
  """The registry Task of `config.task`, built from the config by its kind (Task.from_config); label lists
  inferred from train. `label_list` (e.g. a fine-tuned checkpoint's) is used when config.label_list is empty."""
  name = config.task
  label_list = split_list(config.label_list) or (list(label_list) if label_list else None)
  task = task_class(name).from_config(canonical_name(name), config, label_list)
  pooling = str(config.get("pooling", "cls"))
  if pooling not in POOLINGS:
    raise UserError(f"config.pooling={pooling!r}; expected one of {', '.join(POOLINGS)}")
  if pooling != "cls" and not task.uses_pooling:
    raise UserError(f"config.pooling={pooling!r} applies to sentence-level tasks; task {name!r} has a "
                    f"{task.head} head (leave pooling=cls)")
  task.pooling = pooling
  set_truncation(task, config)
  if config.get("crf", False) and not getattr(task, "crf", False):
    raise UserError(f"config.crf=true applies to task=ner only (task={name!r})")
  if task.train_split is None:
    raise ValueError(f"task {name!r} has no training data (the AX diagnostic is predicted by an mnli run)")
  data_dir = config.data_dir or None
  task.prepare(data_dir, use_tfds=use_tfds(config), **_tfds_kwargs(config))
  check_tfds_name(task, config)
  return task


def set_truncation(task, config):
  """config.truncation / truncation_head_fraction onto a task whose featurize reads them; UserError else."""
  truncation = str(config.get("truncation", task.truncation))
  fraction = config.get("truncation_head_fraction", task.truncation_head_fraction)
  if truncation not in TRUNCATIONS:
    raise UserError(f"config.truncation={truncation!r}; expected one of {', '.join(TRUNCATIONS)}")
  if truncation != "head" and not task.uses_truncation:
    raise UserError(f"config.truncation={truncation!r} applies to sentence-level text tasks (classification, "
                    f"GLUE, multilabel); task {config.task!r} places its inputs itself (leave truncation=head)")
  if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0.0 <= float(fraction) <= 1.0:
    raise UserError(f"config.truncation_head_fraction={fraction!r}; expected a number in [0, 1] (the share of "
                    "the kept tokens taken from the start of a too-long text with truncation=head_tail)")
  task.truncation, task.truncation_head_fraction = truncation, float(fraction)


def _tfds_kwargs(config) -> dict:
  if not use_tfds(config):
    return {}
  d = config.tfds_data_dir or config.data_dir or None
  return {"tfds_data_dir": d}


def check_tfds_name(task, config):
  if not use_tfds(config):
    return
  want = task.tfds_name
  got = str(config.tfds_name).strip()
  if want is None:
    raise ValueError(f"task {task.name!r} reads local files only; clear tfds_name ({got!r})")
  if got.split(":")[0] != want.split(":")[0]:
    raise ValueError(f"tfds_name={got!r} does not fit task {task.name!r}; its TFDS dataset is {want!r}")


@dataclasses.dataclass
class SplitData:
  split: str
  examples: ExampleSet
  features: Dict[str, np.ndarray]

  @property
  def num_rows(self) -> int:
    return int(self.features["input_ids"].shape[0])


def read_split_or_reason(task, source, split: str) -> Tuple[Optional[ExampleSet], str]:
  """(the ExampleSet of a split, "") or, when its file / TFDS split does not exist, (None, the reader's reason:
  the file it looked for, or the split names). `source`: where the splits are (a FinetunePlan's `data`, or a
  config: data_dir, tfds_name, tfds_data_dir)."""
  data_dir = source.data_dir or None
  try:
    if use_tfds(source):
      return task.read(split, data_dir, use_tfds=True, tfds_data_dir=_tfds_kwargs(source)["tfds_data_dir"]), ""
    return task.read(split, data_dir), ""
  except FileNotFoundError as e:
    _log.info("split %s not found (%s)", split, e)
    return None, str(e)
  except ValueError as e:
    if "no split" in str(e) or "not prepared" in str(e) or "Unknown split" in str(e):
      _log.info("split %s not available (%s)", split, e)
      return None, str(e)
    raise


def read_split(task, source, split: str) -> Optional[ExampleSet]:
  """The ExampleSet of a split, or None when its file / TFDS split does not exist (read_split_or_reason)."""
  return read_split_or_reason(task, source, split)[0]


def why_missing(task, source, split: str) -> str:
  """Why read_split found no `split` (the reader's message: the file it looked for, or the split names), or ""."""
  return read_split_or_reason(task, source, split)[1]


def load_split(task, source, split: str, tokenizer, is_training: bool = False,
               examples: Optional[ExampleSet] = None) -> Optional[SplitData]:
  """Reads and featurises one split (`source` as read_split's, with max_seq_length); None when it is absent."""
  es = examples if examples is not None else read_split(task, source, split)
  if es is None:
    return None
  if len(es) == 0:
    skipped = es.skipped.total
    raise TaskDataError(es.source, None, f"split {split!r} has no examples" + (
        f" (all {skipped} row(s) skipped: {es.skipped.one_line()})" if skipped else
        " (the file is empty or holds only a header); expected at least one row"))
  feats = task.featurize(es, tokenizer, int(source.max_seq_length), is_training=is_training)
  if is_training:
    task.check_training_features(es, feats)
  return SplitData(split, es, feats)


def iterate_batches(features: Dict[str, np.ndarray], keys: Sequence[str], batch_size: int,
                    rng: Optional[np.random.Generator] = None) -> Iterator[Dict[str, np.ndarray]]:
  """Full batches of `keys` (+ example_weight); shuffled when `rng` is given; the last one padded."""
  n = int(features["input_ids"].shape[0])
  order = rng.permutation(n) if rng is not None else np.arange(n)
  for start in range(0, n, batch_size):
    idx = order[start:start + batch_size]
    real = len(idx)
    if real < batch_size:
      idx = np.concatenate([idx, np.full(batch_size - real, idx[0] if real else 0, dtype=idx.dtype)])
    batch = {k: features[k][idx] for k in keys}
    w = np.zeros(batch_size, np.float32)
    w[:real] = 1.0
    batch["example_weight"] = w
    yield batch


def num_batches(n: int, batch_size: int) -> int:
  return -(-n // batch_size)
