"""Sentence / sentence-pair classification (and regression): examples, features, and a generic file reader.

Features (`convert_examples_to_features`), one row per example:
  input_ids, input_mask, segment_ids  int32 [N, max_seq_length]   [CLS] a [SEP] (b [SEP]), Google truncation
                                                                   (config.truncation: which tokens stay)
  label_ids      int32 [N] label id (index into label_list), -1 for unlabelled (test) rows;
                 float32 [N] for regression, NaN when unlabelled
  example_index  int32 [N] row in the ExampleSet

Generic files (`read_classification_file` / `ClassificationFormat`): TSV, CSV or JSONL; columns by header name
or 0-based index; header present or not. Defaults fit ChnSentiCorp-style files (`label\\ttext_a` with a header
row). A row's own id (a `qid`, `id`, `idx`, `index` or `guid` column or JSON key) is the index of the
prediction files; without one, the row number. Examples:

    fmt = ClassificationFormat()                                   # header "label\\ttext_a[\\ttext_b]"
    fmt = ClassificationFormat(text_a=1, label=0, header=False)    # "1\\t这本书很好" rows, no header
    fmt = ClassificationFormat(text_a="review", label="rating", file_format="csv")   # quoted CSV
    fmt = ClassificationFormat(text_a="sentence1", text_b="sentence2", label="label", file_format="jsonl")
    es = read_classification_split(data_dir, "train", fmt, label_list=None)   # train.tsv/.csv/.jsonl
    labels = infer_label_list(es)                                  # sorted labels seen in train

Chinese needs nothing special: the BERT tokenizer splits CJK ideographs into single characters.

Task kinds: SequenceTask (a pooled sentence vector -> dense: softmax cross-entropy, or MSE for regression),
the base of GLUE (glue.GlueTask) and of ClassificationTask, the generic files above (task=classification).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Dict, List, Optional, Sequence, Union

import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.evaluation import glue as glue_eval
from bert_jax.finetune.tasks import common
from bert_jax.finetune.tasks.base import Task, labelled_weights, require_training_labels, softmax_sums
from bert_jax import fileio
from bert_jax.input_pipeline import tokenization
from bert_jax.input_warnings import warn_input
from bert_jax.models import heads

Column = Union[int, str]


@dataclasses.dataclass
class ClassificationExample:
  guid: str                                  # "<file>:<line>" or "<tfds name>:<split>:<n>"
  text_a: str
  text_b: Optional[str] = None
  label: Optional[Union[str, float]] = None  # label string; float for regression; None when unlabelled
  index: Optional[str] = None                # id for submission files (GLUE test "index" column)


# --------------------------------------------------------------------------------------------------------
# Features.
# --------------------------------------------------------------------------------------------------------
def convert_examples_to_features(examples: Sequence[ClassificationExample], tokenizer, max_seq_length: int,
                                 label_list: Optional[Sequence[str]] = None,
                                 is_regression: bool = False, truncation: str = "head",
                                 head_fraction: float = 0.25) -> Dict[str, np.ndarray]:
  """Tokenises, packs, pads; see the module docstring for the arrays. Texts too long for max_seq_length keep
  the tokens `truncation` says (common.keep_tokens: head, tail or head_tail with `head_fraction`)."""
  common.check_max_seq_length(max_seq_length)
  examples = list(examples)
  # Labels first: a bad label fails before any tokenisation work.
  if is_regression:
    labels = np.array([np.nan if e.label is None else float(e.label) for e in examples], dtype=np.float32)
  else:
    if label_list is None:
      raise ValueError("label_list is required for classification features")
    label_map = {l: i for i, l in enumerate(label_list)}
    labels = np.full(len(examples), -1, dtype=np.int32)
    for i, e in enumerate(examples):
      if e.label is None:
        continue
      if e.label not in label_map:
        raise common.TaskDataError(e.guid, None, f"label {e.label!r} is not in the label set {list(label_list)}")
      labels[i] = label_map[e.label]
  cls_id, sep_id = common.special_ids(tokenizer)
  # The cached batch tokenizer gives ids identical to tokenizer.encode (tests/test_pipeline_tokenization.py)
  # and costs nothing to set up, so every split takes it, small ones included.
  batch = tokenization.fast_batch_tokenizer(tokenizer)
  ids_a = batch.encode_batch([e.text_a for e in examples])
  pair_idx = [i for i, e in enumerate(examples) if e.text_b is not None]
  ids_b_list = batch.encode_batch([examples[i].text_b for i in pair_idx])
  ids_b: List[Optional[List[int]]] = [None] * len(examples)
  for i, ids in zip(pair_idx, ids_b_list):
    ids_b[i] = ids
  id_rows, seg_rows = [], []
  for a, b in zip(ids_a, ids_b):
    ids, seg = common.pack_pair(a, b, cls_id, sep_id, max_seq_length, truncation, head_fraction)
    id_rows.append(ids)
    seg_rows.append(seg)
  out = common.model_inputs(id_rows, seg_rows, max_seq_length)
  out["label_ids"] = labels
  out["example_index"] = np.arange(len(examples), dtype=np.int32)
  return out


# --------------------------------------------------------------------------------------------------------
# Generic files.
# --------------------------------------------------------------------------------------------------------
@dataclasses.dataclass
class ClassificationFormat:
  """Where the text and label are in a TSV / CSV / JSONL file."""
  text_a: Column = "text_a"          # column name (needs a header / JSON key) or 0-based index
  text_b: Optional[Column] = None    # second sentence for pair tasks
  label: Optional[Column] = "label"  # None: the files carry no labels
  header: Optional[bool] = None      # None: True when any column is given by name
  file_format: Optional[str] = None  # "tsv" | "csv" | "jsonl"; None: from the file extension
  is_regression: bool = False        # labels are floats (e.g. a similarity score)

  def has_header(self) -> bool:
    if self.header is not None:
      return self.header
    return any(isinstance(c, str) for c in (self.text_a, self.text_b, self.label) if c is not None)


_EXTENSIONS = {".tsv": "tsv", ".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl", ".txt": "tsv"}
SPLIT_FILE_STEMS = {"train": ("train",), "dev": ("dev", "validation", "valid", "val"), "test": ("test",)}


def split_file(data_dir: str, split: str, file_format: Optional[str] = None) -> str:
  """`<data_dir>/<split>.{tsv,csv,jsonl,json,txt}` (dev also matches validation/valid/val)."""
  stems = SPLIT_FILE_STEMS.get(split, (split,))
  exts = [e for e, f in _EXTENSIONS.items() if file_format is None or f == file_format]
  return common.find_file(data_dir, [s + e for s in stems for e in exts], f"{split} split")


def _rows(path: str, fmt: ClassificationFormat):
  """(line, row) where row is a list (tsv/csv) or a dict (jsonl)."""
  kind = fmt.file_format or _EXTENSIONS.get(os.path.splitext(path)[1].lower())
  if kind is None:
    raise ValueError(f"{path}: cannot tell the format from the extension; set file_format")
  if kind == "tsv":
    yield from common.read_tsv_lines(path)
  elif kind == "csv":
    yield from common.read_csv_lines(path)
  elif kind == "jsonl":
    with open(path, encoding="utf-8-sig") as f:
      for n, line in enumerate(f, start=1):
        if not line.strip():
          continue
        try:
          obj = json.loads(line)
        except json.JSONDecodeError as e:
          raise common.TaskDataError(path, n, f"invalid JSON: {e.msg}") from None
        if not isinstance(obj, dict):
          raise common.TaskDataError(path, n, f"expected a JSON object per line, got {type(obj).__name__}")
        yield n, obj
  else:
    raise ValueError(f"unknown file_format {kind!r} (tsv, csv or jsonl)")


def read_classification_file(path: str, fmt: ClassificationFormat, split: str = "train",
                             label_list: Optional[Sequence[str]] = None, on_error: str = "raise",
                             labels_required: Optional[bool] = None) -> common.ExampleSet:
  """Reads one file into ClassificationExamples.

  Errors (file:line): a missing column, more columns than the header (or the first row) has, an empty
  text, a label outside `label_list`, a non-numeric regression label. `labels_required` (default:
  split != "test"): rows without a label column are an error; otherwise they become unlabelled examples.
  """
  report = common.SkipReport(source=path)
  bad = common.ErrorPolicy(on_error, report)
  if labels_required is None:
    labels_required = split != "test" and fmt.label is not None
  label_set = set(label_list) if label_list is not None else None
  header_map: Optional[Dict[str, int]] = None
  num_columns: Optional[int] = None    # the header's column count, else the first row's
  examples: List[ClassificationExample] = []
  for line, row in _rows(path, fmt):
    if isinstance(row, list) and fmt.has_header() and header_map is None:
      header_map = {name.strip(): i for i, name in enumerate(row)}
      num_columns = len(row)
      for col in (fmt.text_a, fmt.text_b):
        if isinstance(col, str) and col not in header_map:
          raise common.TaskDataError(path, line, f"header has no column {col!r}; columns: {list(header_map)}")
      if labels_required and isinstance(fmt.label, str) and fmt.label not in header_map:
        raise common.TaskDataError(path, line, f"header has no label column {fmt.label!r}; "
                                   f"columns: {list(header_map)}")
      continue

    def get(col: Column, required: bool):
      if isinstance(row, dict):
        key = col if isinstance(col, str) else str(col)
        if key in row and row[key] is not None:
          return row[key]
        if required:
          bad(path, line, "missing field", f"no key {key!r} in {sorted(row)}")
        return None
      idx = col
      if isinstance(col, str):
        if header_map is None:
          raise ValueError(f"{path}: column {col!r} is a name but the format has header=False")
        idx = header_map.get(col)
        if idx is None:
          return None
      if idx >= len(row):
        if required:
          bad(path, line, "missing column", f"row has {len(row)} column(s), column {col!r} is index {idx}")
        return None
      return row[idx]

    if isinstance(row, list):
      num_columns = num_columns or len(row)
      if len(row) > num_columns:
        # A tab (TSV) or an unquoted comma (CSV) inside a text: the text would be cut at it.
        bad(path, line, "extra columns", f"row has {len(row)} columns, "
            f"{'the header' if header_map is not None else 'the first row'} has {num_columns}",
            "a tab or delimiter inside a text? quote it in a CSV, or set on_error=skip to drop such rows")
        continue
    n_before = report.total
    text_a = get(fmt.text_a, True)
    text_b = get(fmt.text_b, True) if fmt.text_b is not None else None
    label = get(fmt.label, labels_required) if fmt.label is not None else None
    if report.total != n_before:
      continue
    text_a = str(text_a)
    if text_b is not None:
      text_b = str(text_b)
    if not text_a.strip():
      bad(path, line, "empty text", f"column {fmt.text_a!r} is empty")
      continue
    if label is not None and not str(label).strip():
      if labels_required:
        bad(path, line, "missing label", f"column {fmt.label!r} is empty")
        continue
      label = None          # a test file's empty label column: an unlabelled row
    if label is not None:
      label = str(label).strip()
      if fmt.is_regression:
        try:
          label = float(label)
        except ValueError:
          bad(path, line, "bad regression label", f"{label!r} is not a number")
          continue
        if not math.isfinite(label):
          bad(path, line, "bad regression label", f"{label!r} is not finite")
          continue
      elif label_set is not None and label not in label_set:
        bad(path, line, "label not in label set", f"{label!r} not in {sorted(label_set)}")
        continue
    examples.append(ClassificationExample(guid=f"{path}:{line}", text_a=text_a, text_b=text_b, label=label,
                                          index=_row_id(row, header_map, fmt) or str(len(examples))))
  return common.finish(examples, path, split, report)


ID_COLUMNS = ("qid", "id", "idx", "index", "guid")   # ChnSentiCorp's test qid, CLUE's id, GLUE-style index


def _row_id(row, header_map: Optional[Dict[str, int]], fmt) -> Optional[str]:
  """The row's own id (the first of ID_COLUMNS the header or the JSON object has, not a text or label
  column) for the submission file's index column; None: the row number is used."""
  for name in ID_COLUMNS:
    if name in (fmt.text_a, fmt.text_b, fmt.label):
      continue
    if isinstance(row, dict):
      value = row.get(name)
    elif header_map is not None and header_map.get(name, len(row)) < len(row):
      value = row[header_map[name]]
    else:
      continue
    if value is not None and str(value).strip():
      return str(value).strip()
  return None


def read_classification_split(data_dir: str, split: str, fmt: ClassificationFormat,
                              label_list: Optional[Sequence[str]] = None,
                              on_error: str = "raise") -> common.ExampleSet:
  return read_classification_file(split_file(data_dir, split, fmt.file_format), fmt, split, label_list, on_error)


def _label_sort_key(label: str):
  try:
    return (0, float(label), label)
  except ValueError:
    return (1, 0.0, label)


def infer_label_list(example_set) -> List[str]:
  """Sorted distinct labels (numerically when they are numbers): the label list of a training set."""
  labels = {e.label for e in example_set if e.label is not None}
  if not labels:
    raise ValueError(f"{getattr(example_set, 'source', 'examples')}: no labelled examples to take labels from")
  return sorted(labels, key=_label_sort_key)


def write_predictions_tsv(path: str, example_set, predictions: Sequence, label_list=None, gold: bool = False) -> str:
  """`index\tprediction` rows (label strings, or scores for regression) for a generic test set; `gold`: a
  third column `label`, the example's gold label (empty when unlabelled), so a dev file can be compared with
  the gold labels without joining files. Written atomically."""
  d = os.path.dirname(path)
  if d:
    os.makedirs(d, exist_ok=True)
  lines = ["index\tprediction" + ("\tlabel" if gold else "")]
  for e, p in zip(example_set, predictions):
    if label_list is not None and not isinstance(p, str) and float(p) == int(p):
      p = label_list[int(p)]
    if gold:
      lines.append(f"{e.index}\t{p}\t{'' if e.label is None else e.label}")
    else:
      lines.append(f"{e.index}\t{p}")
  fileio.write_text_atomic(path, "\n".join(lines) + "\n")
  return path


# --------------------------------------------------------------------------------------------------------
# Config columns (shared with task=multilabel, which reads the same files).
# --------------------------------------------------------------------------------------------------------
def _column(v) -> Optional[Column]:
  """A column from the config: "3" -> 3 (index), "review" -> name, "" -> None."""
  v = str(v).strip() if v is not None else ""
  if not v:
    return None
  return int(v) if v.lstrip("-").isdigit() else v


def format_from_config(config) -> dict:
  """ClassificationFormat fields (text_a, text_b, label, header, file_format) of config.classification."""
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
  return dict(text_a=_column(c.text_a), text_b=_column(c.text_b), label=_column(c.label),
              header=common.bool_or_none(c.header, "classification.header"), file_format=fmt)


# --------------------------------------------------------------------------------------------------------
# Task kinds.
# --------------------------------------------------------------------------------------------------------
class SequenceTask(Task):
  """One label (or score) per sentence or pair, from the pooled sentence vector."""
  head = "sequence_classification"
  uses_pooling = True
  packs = True     # one label per example: packed logits [R, K, labels]
  uses_truncation = True

  def featurize(self, example_set, tokenizer, max_seq_length, is_training=False):
    self._require_labels()
    return convert_examples_to_features(example_set, tokenizer, max_seq_length, self.label_list,
                                        self.is_regression, self.truncation, self.truncation_head_fraction)

  def check_training_features(self, example_set, features):
    if not self.is_regression:   # regression rows without a score (NaN) weigh 0 instead
      require_training_labels(example_set, features)

  def build_head(self, bert_cfg, dropout_rate=None):
    return heads.BertForSequenceClassification(bert_cfg, self.num_labels, dropout_rate=dropout_rate,
                                               pooling=self.pooling)

  def loss_weights(self, batch):
    if self.is_regression:
      return batch["example_weight"].astype(jnp.float32) * jnp.isfinite(batch["label_ids"].astype(jnp.float32))
    return labelled_weights(batch)

  def loss_sums(self, outputs, batch):
    w = self.loss_weights(batch)
    if self.is_regression:   # MSE; unlabelled (NaN) rows weigh 0, and 0 stands in so NaN cannot leak
      labels = batch["label_ids"].astype(jnp.float32)
      err = outputs["logits"][:, 0] - jnp.where(jnp.isfinite(labels), labels, 0.0)
      return {"task_loss_sum": jnp.sum(jnp.square(err) * w), "task_weight_sum": jnp.sum(w)}
    return softmax_sums(outputs["logits"], batch["label_ids"], w)

  def predict(self, example_set, features, outputs):
    logits = np.asarray(outputs["logits"])
    if logits.shape[0] != len(example_set):
      raise ValueError(f"{logits.shape[0]} logits rows for {len(example_set)} examples")
    if self.is_regression:
      return logits.reshape(len(example_set), -1)[:, 0].astype(np.float64)
    return np.argmax(logits, axis=-1).astype(np.int32)

  def _gold(self, example_set):
    missing = sum(e.label is None for e in example_set)
    if missing:
      if missing < len(example_set):   # partly labelled: not scored, and said so (it looked like a test set)
        warn_input(f"{getattr(example_set, 'source', 'examples')}: {missing} of {len(example_set)} rows have no "
                   "label, so the split is not scored; label every row to score it")
      return None
    if self.is_regression:
      return np.array([float(e.label) for e in example_set])
    m = {l: i for i, l in enumerate(self.label_list)}
    return np.array([m[e.label] for e in example_set], dtype=np.int32)

  def text_examples(self, texts, text_pairs=None):
    return [ClassificationExample(guid=f"input:{i}", text_a=t, text_b=None if text_pairs is None else text_pairs[i])
            for i, t in enumerate(texts)]

  def readable_predictions(self, examples, features, outputs):
    logits = outputs["logits"]
    if self.is_regression:
      return [{"score": float(x)} for x in logits[:, 0]]
    probs = np.asarray(jax.nn.softmax(jnp.asarray(logits), axis=-1))
    labels = self.label_list
    return [{"label": labels[int(np.argmax(p))], "probabilities": {l: float(q) for l, q in zip(labels, p)}}
            for p in probs]


class ClassificationTask(SequenceTask):
  """Generic single-sentence / pair classification (or regression) from TSV/CSV/JSONL files."""
  name = "classification"

  def __init__(self, label_list: Optional[Sequence[str]] = None, text_a="text_a", text_b=None, label="label",
               header: Optional[bool] = None, file_format: Optional[str] = None, is_regression: bool = False,
               on_error: str = "raise", name: str = "classification"):
    super().__init__(on_error)
    self.name = name
    self.format = ClassificationFormat(text_a=text_a, text_b=text_b, label=label, header=header,
                                       file_format=file_format, is_regression=is_regression)
    self.is_regression = is_regression
    self.label_list = list(label_list) if label_list is not None else None
    self.kind = "regression" if is_regression else "classification"
    self.main_metric = "corr" if is_regression else "accuracy"

  @classmethod
  def from_config(cls, name, config, label_list=None):
    return cls.create(name, on_error=config.on_error, label_list=label_list,
                      is_regression=bool(config.classification.is_regression), **format_from_config(config))

  @classmethod
  def from_info(cls, name, info):
    return cls.create(name, label_list=info["label_list"], is_regression=info["kind"] == "regression")

  def prepare(self, data_dir=None, use_tfds=False, **read_kwargs):
    if self.label_list is None and not self.is_regression:
      if data_dir is None:
        raise ValueError("data_dir is required to infer the label list")
      train = read_classification_split(data_dir, "train", self.format, None, self.on_error)
      self.label_list = infer_label_list(train)
    return self

  def read(self, split, data_dir=None, *, use_tfds=False, tfds_data_dir=None, download=False, on_error=None):
    if use_tfds:
      raise ValueError("the generic classification task reads files only (set use_tfds=False)")
    if data_dir is None:
      raise ValueError("data_dir is required")
    return read_classification_split(data_dir, split, self.format, self.label_list, on_error or self.on_error)

  def evaluate(self, example_set, predictions, split=None):
    gold = self._gold(example_set)
    if gold is None:
      return {}
    if self.is_regression:
      return glue_eval.compute_metrics("stsb", predictions, gold)
    out = {"accuracy": glue_eval.accuracy(predictions, gold)}
    if len(self.label_list) == 2:
      out["f1"] = glue_eval.f1_binary(predictions, gold, pos_label=1)
    out["mcc"] = glue_eval.matthews_corrcoef(predictions, gold)
    return out

  def write_predictions(self, output_dir, split, example_set, predictions):
    path = os.path.join(output_dir, f"{self.name}_{split}_predictions.tsv")
    labels = None if self.is_regression else self.label_list
    # dev files carry the gold label; test files keep the two-column submission format
    return [write_predictions_tsv(path, example_set, list(predictions), labels, gold=not split.startswith("test"))]
