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

Packing (config.packing; the plan sets `max_examples_per_row` on FinetuneData and the model): load_split packs
the featurised rows best-fit into `SplitData.rows` (input_pipeline/example_packing.py), keeping the unpacked
`features` for the task's predictions. Batches are then of packed rows; a sentence-level task's labels and
`example_weight` are per slot [R, K], a tagging task's per token [R, T] with one weight per row. The outputs
of a packed split go back to one entry per feature row (`SplitData.unpack`) before task.predict reads them, so
metrics and prediction files are those of the unpacked run.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Dict, Iterator, Optional, Sequence, Tuple

import numpy as np

from bert_jax.errors import UserError
from bert_jax.finetune.tasks import get_task, task_class  # noqa: F401  (get_task: part of this module's API)
from bert_jax.finetune.tasks.common import IGNORE_INDEX, TRUNCATIONS, ExampleSet, TaskDataError
from bert_jax.finetune.tasks.registry import canonical_name
from bert_jax.input_pipeline import example_packing

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
  if pooling not in POOLINGS + tuple(task.extra_poolings):
    extra = f" ({pooling}: task=embedding)" if pooling in task_class("embedding").extra_poolings else ""
    raise UserError(f"config.pooling={pooling!r}; expected one of "
                    f"{', '.join(POOLINGS + tuple(task.extra_poolings))}{extra}")
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
  features: Dict[str, np.ndarray]                           # one feature row per (windowed) example
  packed: Optional[example_packing.PackedLayout] = None     # packing: where each feature row lies in `rows`
  packed_rows: Optional[Dict[str, np.ndarray]] = None       # packing: the device keys of the packed rows
  token_level: bool = False                                 # packing: outputs per token (tagging)

  @property
  def rows(self) -> Dict[str, np.ndarray]:
    """What batches are drawn from: the packed rows, or the features themselves."""
    return self.packed_rows if self.packed_rows is not None else self.features

  @property
  def num_rows(self) -> int:
    return int(self.rows["input_ids"].shape[0])

  def unpack(self, outputs: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """Head outputs of `rows` -> one entry per feature row, in order (unchanged when not packed)."""
    if self.packed is None:
      return outputs
    return example_packing.unpack_outputs(outputs, self.packed, self.token_level)


def pack_split(task, feats: Dict[str, np.ndarray], seq_len: int, max_examples: int, seed: int = 0):
  """(layout, packed rows of task.device_keys that `feats` holds): best-fit packing of the feature rows; a
  tagging task's token labels pad with the ignore index and weigh per row."""
  layout = example_packing.best_fit(example_packing.lengths_of(feats["input_mask"]), seq_len, max_examples, seed)
  keys = [k for k in task.device_keys if k in feats]
  token_keys = (tuple(task.model_input_keys) + tuple(task.extra_token_keys)
                + (tuple(task.label_keys) if task.token_level else ()))
  rows = example_packing.pack_features({k: feats[k] for k in keys}, layout, token_keys,
                                       pad_values={k: IGNORE_INDEX for k in task.label_keys} if task.token_level
                                       else None)
  if task.token_level:
    rows["example_weight"] = (rows["example_weight"].sum(axis=-1) > 0).astype(np.float32)
  return layout, rows


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
  cap = int(getattr(source, "max_examples_per_row", 0) or 0)
  if not cap:
    return SplitData(split, es, feats)
  layout, rows = pack_split(task, feats, int(source.max_seq_length), cap)
  _log.info("packing %s: %s", split, layout.describe())
  return SplitData(split, es, feats, layout, rows, task.token_level)


def iterate_batches(features: Dict[str, np.ndarray], keys: Sequence[str], batch_size: int,
                    rng: Optional[np.random.Generator] = None) -> Iterator[Dict[str, np.ndarray]]:
  """Full batches of `keys` (+ example_weight); shuffled when `rng` is given; the last one padded. Packed rows
  carry their own example_weight ([R, K] or [R]); a padding row's is zeroed."""
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
    if "example_weight" in features:
      own = features["example_weight"][idx]
      w = own * w.reshape((batch_size,) + (1,) * (own.ndim - 1))
    batch["example_weight"] = w
    yield batch


def examples_in(batch: Dict[str, np.ndarray]) -> int:
  """Examples (feature rows) a batch holds: each real row's highest example id (1 unpacked, k on a packed row
  of k examples)."""
  return int(batch["input_mask"][:real_rows(batch)].max(axis=-1).sum())


def real_rows(batch: Dict[str, np.ndarray]) -> int:
  """Rows of a batch from iterate_batches that are not padding (they come first)."""
  w = batch["example_weight"]
  return int((w.reshape(w.shape[0], -1).sum(axis=-1) > 0).sum())


def num_batches(n: int, batch_size: int) -> int:
  return -(-n // batch_size)
