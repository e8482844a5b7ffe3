"""Fine-tuning data: task objects from a run config, split loading and padded batches. No TensorFlow here
(TFDS is imported by the task readers only when a TFDS split is read).

    task = make_task(config)                       # a bert_jax.finetune.tasks Task, label list filled in
    data = load_split(task, config, "dev", tokenizer)   # SplitData(examples, features) or None if absent
    for batch in iterate_batches(data.features, keys, batch_size, rng=None):   # padded, with example_weight
      ...

Batches are always full (static shapes, one compile): the last partial batch is padded with copies of row 0
whose `example_weight` is 0, so a small training set loses nothing (Google's run_classifier drops the
remainder instead) and evaluation scores every example exactly once.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Dict, Iterator, Optional, Sequence

import numpy as np

from bert_jax.errors import UserError
from bert_jax.finetune.tasks import get_task
from bert_jax.finetune.tasks.common import ExampleSet

_log = logging.getLogger(__name__)

# Keys of the features that go to the device; everything else (spans, word ids) stays on the host.
LABEL_KEYS = {"classification": ("label_ids",), "regression": ("label_ids",), "ner": ("label_ids",),
              "squad": ("start_positions", "end_positions"), "multilabel": ("label_ids",)}
POOLINGS = ("cls", "first", "mean", "max", "last")   # = models.heads.POOLINGS (config.pooling)


def split_list(s) -> list:
  if isinstance(s, (list, tuple)):
    return [str(x).strip() for x in s if str(x).strip()]
  return [x.strip() for x in str(s or "").split(",") if x.strip()]


def _column(v):
  """A classification column from the config: "3" -> 3 (index), "review" -> name, "" -> None."""
  v = str(v).strip() if v is not None else ""
  if not v:
    return None
  return int(v) if v.lstrip("-").isdigit() else v


def bool_or_none(v, what: str):
  if isinstance(v, bool) or v is None:
    return v
  s = str(v).strip().lower()
  if s in ("auto", ""):
    return None
  if s in ("true", "1", "yes"):
    return True
  if s in ("false", "0", "no"):
    return False
  raise ValueError(f"{what}={v!r}; expected auto, true or false")


def use_tfds(config) -> bool:
  return bool(config.tfds_name.strip())


def make_task(config, label_list: Optional[Sequence[str]] = None):
  """The registry Task of `config.task`, with the config's options; label lists inferred from train.
  `label_list` (e.g. a fine-tuned checkpoint's) is used when config.label_list is empty."""
  name = config.task
  on_error = config.on_error
  label_list = split_list(config.label_list) or (list(label_list) if label_list else None)
  kwargs = {"on_error": on_error}
  if name.startswith("squad"):
    kwargs.update(doc_stride=int(config.doc_stride), max_query_length=int(config.max_query_length),
                  n_best_size=int(config.n_best_size), max_answer_length=int(config.max_answer_length),
                  null_score_diff_threshold=float(config.null_score_diff_threshold),
                  language=config.squad_language)
    name = "squad_v2" if config.version_2_with_negative else "squad_v1"
  elif name == "ner":
    kwargs.update(label_list=label_list, scheme=config.ner_scheme,
                  mode=config.ner_mode, crf=bool(config.get("crf", False)))
  elif name in ("classification", "multilabel"):
    c = config.classification
    fmt = c.file_format.strip() or None
    delim = c.delimiter
    if delim:
      by_delim = {"\t": "tsv", "\\t": "tsv", "tab": "tsv", ",": "csv", "comma": "csv"}
      if delim not in by_delim:
        raise ValueError(f"classification.delimiter={delim!r}: the readers handle tab (tsv) and comma (csv); "
                         "convert other files to one of them or to jsonl")
      if fmt is not None and fmt != by_delim[delim]:
        raise ValueError(f"classification.delimiter={delim!r} contradicts file_format={fmt!r}")
      fmt = by_delim[delim]
    kwargs.update(label_list=label_list, text_a=_column(c.text_a), text_b=_column(c.text_b),
                  label=_column(c.label), header=bool_or_none(c.header, "classification.header"),
                  file_format=fmt)
    if name == "multilabel":
      kwargs.update(separator=config.multilabel_separator, threshold=float(config.multilabel_threshold))
    else:
      kwargs.update(is_regression=bool(c.is_regression))
  task = get_task(name, **kwargs)
  pooling = str(config.get("pooling", "cls"))
  if pooling not in POOLINGS:
    raise UserError(f"config.pooling={pooling!r}; expected one of {', '.join(POOLINGS)}")
  if pooling != "cls" and task.head not in ("sequence_classification", "multiple_choice"):
    raise UserError(f"config.pooling={pooling!r} applies to sentence-level tasks; task {name!r} has a "
                    f"{task.head} head (leave pooling=cls)")
  task.pooling = pooling
  if config.get("crf", False) and name != "ner":
    raise UserError(f"config.crf=true applies to task=ner only (task={name!r})")
  if label_list is not None and name not in ("ner", "classification", "multilabel"):
    if task.is_regression or task.label_list is None:
      raise ValueError(f"label_list is set but task {name!r} has no labels")
    if sorted(label_list) != sorted(task.label_list):
      raise ValueError(f"label_list {label_list} differs from {name}'s labels {task.label_list}; the GLUE "
                       "label order is fixed by the leaderboard")
    task.label_list = label_list
  if task.train_split is None:
    raise ValueError(f"task {name!r} has no training data (the AX diagnostic is predicted by an mnli run)")
  data_dir = config.data_dir or None
  task.prepare(data_dir, use_tfds=use_tfds(config), **_tfds_kwargs(config))
  check_tfds_name(task, config)
  return task


def _tfds_kwargs(config) -> dict:
  if not use_tfds(config):
    return {}
  d = config.tfds_data_dir or config.data_dir or None
  return {"tfds_data_dir": d}


def expected_tfds_name(task) -> Optional[str]:
  if task.kind == "squad":
    return "squad/v2.0" if task.version_2_with_negative else "squad/v1.1"
  if task.name == "ner":
    return "conll2003"
  if task.name in ("classification", "multilabel", "c3", "multiple_choice"):
    return None
  return f"glue/{task.name}"


def check_tfds_name(task, config):
  if not use_tfds(config):
    return
  want = expected_tfds_name(task)
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


def read_split(task, config, split: str) -> Optional[ExampleSet]:
  """The ExampleSet of a split, or None when its file / TFDS split does not exist."""
  data_dir = config.data_dir or None
  try:
    if use_tfds(config):
      return task.read(split, data_dir, use_tfds=True, tfds_data_dir=_tfds_kwargs(config)["tfds_data_dir"])
    return task.read(split, data_dir)
  except FileNotFoundError as e:
    _log.info("split %s not found (%s)", split, e)
    return None
  except ValueError as e:
    if "no split" in str(e) or "not prepared" in str(e) or "Unknown split" in str(e):
      _log.info("split %s not available (%s)", split, e)
      return None
    raise


def load_split(task, config, split: str, tokenizer, is_training: bool = False,
               examples: Optional[ExampleSet] = None) -> Optional[SplitData]:
  """Reads and featurises one split; None when the split is absent."""
  es = examples if examples is not None else read_split(task, config, split)
  if es is None:
    return None
  if len(es) == 0:
    raise ValueError(f"{es.source}: split {split!r} has no examples")
  feats = task.featurize(es, tokenizer, int(config.max_seq_length), is_training=is_training)
  if is_training and task.kind == "classification" and np.any(feats["label_ids"] < 0):
    bad = int(np.flatnonzero(feats["label_ids"] < 0)[0])
    raise ValueError(f"{es.source}: training example {es[bad].guid} has no label")
  return SplitData(split, es, feats)


def device_keys(task) -> tuple:
  return tuple(task.model_input_keys) + tuple(task.extra_input_keys) + LABEL_KEYS[task.kind]


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
