"""Multi-label classification: each text carries a set of labels (possibly empty), scored by independent
sigmoids.

Files `train` / `dev` / `test` `.tsv|.csv|.jsonl` in data_dir; the columns are the generic classification
task's (`config.classification.text_a / text_b / label / header / file_format`):
  TSV/CSV  the label column holds the labels joined by `separator` (default "|", config
           `multilabel_separator`), e.g. `体育|财经\t今天的比赛...`; an empty cell = no label.
  JSONL    the label key holds a list of strings, e.g. {"text_a": "...", "label": ["体育", "财经"]} (a string is
           split by the separator as in TSV).

Features (`convert_examples_to_features`), one row per example:
  input_ids, input_mask, segment_ids  int32 [N, T]   as classification
  label_ids      int32 [N, K]  multi-hot over label_list; all -1 for an unlabelled (test) row
  example_index  int32 [N]

MultilabelTask is the task kind: independent sigmoids over label_list (heads.BertForSequenceClassification with
K outputs), the mean binary cross-entropy as the loss, a label predicted when its probability >= threshold;
micro / macro F1 and exact match.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Dict, List, Optional, Sequence

import jax.numpy as jnp
import numpy as np

from bert_jax.evaluation import multilabel as multilabel_eval
from bert_jax.finetune.tasks import classification, common
from bert_jax.finetune.tasks.base import Task
from bert_jax import fileio
from bert_jax.models import heads


@dataclasses.dataclass
class MultilabelExample:
  guid: str
  text_a: str
  text_b: Optional[str] = None
  labels: Optional[List[str]] = None   # None when unlabelled
  index: Optional[str] = None


def _split_labels(value, separator: str) -> List[str]:
  if isinstance(value, list):
    return [str(v).strip() for v in value if str(v).strip()]
  return [x.strip() for x in str(value).split(separator) if x.strip()]


def read_file(path: str, fmt: classification.ClassificationFormat, separator: str = "|", split: str = "train",
              label_list: Optional[Sequence[str]] = None, on_error: str = "raise") -> common.ExampleSet:
  """MultilabelExamples of one file (module docstring); a label outside `label_list` is an error (file:line)
  or a counted skip."""
  report = common.SkipReport(source=path)
  bad = common.ErrorPolicy(on_error, report)
  labels_required = split != "test" and fmt.label is not None
  label_set = set(label_list) if label_list is not None else None
  header = None
  examples: List[MultilabelExample] = []
  for line, row in classification._rows(path, fmt):  # pylint: disable=protected-access
    if isinstance(row, list) and fmt.has_header() and header is None:
      header = {name.strip(): i for i, name in enumerate(row)}
      for col in (fmt.text_a, fmt.text_b) + ((fmt.label,) if labels_required else ()):
        if isinstance(col, str) and col not in header:
          raise common.TaskDataError(path, line, f"header has no column {col!r}; columns: {list(header)}")
      continue

    def get(col):
      if col is None:
        return None
      if isinstance(row, dict):
        return row.get(col if isinstance(col, str) else str(col))
      idx = header.get(col) if isinstance(col, str) else col
      if isinstance(col, str) and header is None:
        raise ValueError(f"{path}: column {col!r} is a name but the format has header=False")
      return row[idx] if idx is not None and idx < len(row) else None

    text_a, text_b, label = get(fmt.text_a), get(fmt.text_b), get(fmt.label)
    if text_a is None or not str(text_a).strip():
      bad(path, line, "missing text", f"column {fmt.text_a!r} is missing or empty")
      continue
    if fmt.text_b is not None and text_b is None:
      bad(path, line, "missing text", f"column {fmt.text_b!r} is missing")
      continue
    if label is None and labels_required:
      bad(path, line, "missing label", f"no label column {fmt.label!r}")
      continue
    labels = None if label is None else _split_labels(label, separator)
    if labels is not None and label_set is not None and not set(labels) <= label_set:
      bad(path, line, "label not in label set", f"{sorted(set(labels) - label_set)} not in {sorted(label_set)}")
      continue
    examples.append(MultilabelExample(f"{path}:{line}", str(text_a), None if text_b is None else str(text_b),
                                      labels, str(len(examples))))
  return common.finish(examples, path, split, report)


def read_split(data_dir: str, split: str, fmt, separator="|", label_list=None, on_error="raise"):
  return read_file(classification.split_file(data_dir, split, fmt.file_format), fmt, separator, split,
                   label_list, on_error)


def infer_label_list(example_set) -> List[str]:
  seen = sorted({l for e in example_set if e.labels for l in e.labels})
  if not seen:
    raise ValueError(f"{getattr(example_set, 'source', 'examples')}: no labels to take the label list from")
  return seen


def convert_examples_to_features(examples: Sequence[MultilabelExample], tokenizer, max_seq_length: int,
                                 label_list: Sequence[str], truncation: str = "head",
                                 head_fraction: float = 0.25) -> Dict[str, np.ndarray]:
  examples = list(examples)
  label_map = {l: i for i, l in enumerate(label_list)}
  labels = np.zeros((len(examples), len(label_list)), np.int32)
  for i, e in enumerate(examples):
    if e.labels is None:
      labels[i] = -1
      continue
    for l in e.labels:
      if l not in label_map:
        raise common.TaskDataError(e.guid, None, f"label {l!r} is not in the label set {list(label_list)}")
      labels[i, label_map[l]] = 1
  as_cls = [classification.ClassificationExample(e.guid, e.text_a, e.text_b, None) for e in examples]
  out = classification.convert_examples_to_features(as_cls, tokenizer, max_seq_length, label_list,
                                                    truncation=truncation, head_fraction=head_fraction)
  out["label_ids"] = labels
  return out


def write_predictions(path: str, examples, predicted: np.ndarray, probabilities: np.ndarray, label_list,
                      separator: str = "|", gold: bool = False) -> str:
  """`index\tprediction\tprobabilities` TSV: the predicted labels joined by `separator`, then
  label:probability pairs; `gold`: a fourth column `label`, the gold labels joined the same way (empty when
  unlabelled). Written atomically."""
  d = os.path.dirname(path)
  if d:
    os.makedirs(d, exist_ok=True)
  lines = ["index\tprediction\tprobabilities" + ("\tlabel" if gold else "")]
  for e, row, pr in zip(examples, predicted, probabilities):
    labs = separator.join(l for l, on in zip(label_list, row) if on)
    probs = " ".join(f"{l}:{p:.4f}" for l, p in zip(label_list, pr))
    line = f"{e.index}\t{labs}\t{probs}"
    if gold:
      line += "\t" + ("" if e.labels is None else separator.join(e.labels))
    lines.append(line)
  fileio.write_text_atomic(path, "\n".join(lines) + "\n")
  return path


class MultilabelTask(Task):
  """Independent sigmoids over label_list, BCE loss; a label is predicted when its probability >= threshold.
  Metrics: micro / macro F1 and exact match (main: micro_f1)."""
  name = "multilabel"
  kind = "multilabel"
  head = "sequence_classification"
  main_metric = "micro_f1"
  uses_pooling = True
  packs = True     # packed: label_ids [R, K, labels], logits [R, K, labels]
  uses_truncation = True

  def __init__(self, label_list: Optional[Sequence[str]] = None, text_a="text_a", text_b=None, label="label",
               header: Optional[bool] = None, file_format: Optional[str] = None, separator: str = "|",
               threshold: float = 0.5, on_error: str = "raise"):
    super().__init__(on_error)
    if not 0.0 < float(threshold) < 1.0:
      raise ValueError(f"multilabel_threshold={threshold}; expected a probability in (0, 1)")
    if not separator:
      raise ValueError("multilabel_separator is empty")
    self.format = classification.ClassificationFormat(text_a=text_a, text_b=text_b, label=label, header=header,
                                                      file_format=file_format)
    self.separator, self.threshold = separator, float(threshold)
    self.label_list = list(label_list) if label_list is not None else None

  @classmethod
  def from_config(cls, name, config, label_list=None):
    return cls.create(name, on_error=config.on_error, label_list=label_list,
                      separator=config.multilabel_separator, threshold=float(config.multilabel_threshold),
                      **classification.format_from_config(config))

  @classmethod
  def from_info(cls, name, info):
    return cls.create(name, label_list=info["label_list"], threshold=float(info.get("multilabel_threshold", 0.5)),
                      separator=info.get("multilabel_separator", "|"))

  def head_options(self):
    return {"pooling": self.pooling, "multilabel_threshold": self.threshold,
            "multilabel_separator": self.separator}

  def prepare(self, data_dir=None, use_tfds=False, **read_kwargs):
    if self.label_list is None:
      if data_dir is None:
        raise ValueError("data_dir is required to infer the label list")
      self.label_list = infer_label_list(self.read("train", data_dir))
    return self

  def read(self, split, data_dir=None, *, use_tfds=False, tfds_data_dir=None, download=False, on_error=None):
    if use_tfds:
      raise ValueError("the multilabel task reads files only")
    if data_dir is None:
      raise ValueError("data_dir is required")
    return read_split(data_dir, split, self.format, self.separator, self.label_list, on_error or self.on_error)

  def featurize(self, example_set, tokenizer, max_seq_length, is_training=False):
    self._require_labels()
    return convert_examples_to_features(example_set, tokenizer, max_seq_length, self.label_list,
                                        self.truncation, self.truncation_head_fraction)

  def build_head(self, bert_cfg, dropout_rate=None):
    return heads.BertForSequenceClassification(bert_cfg, self.num_labels, dropout_rate=dropout_rate,
                                               pooling=self.pooling)

  def loss_weights(self, batch):
    # label_ids [B, K] multi-hot (packed rows: [B, slots, K]); an unlabelled row is all -1, so its first column
    # tells.
    return batch["example_weight"].astype(jnp.float32) * (batch["label_ids"][..., 0] >= 0)

  def loss_sums(self, outputs, batch):
    # Mean binary cross-entropy over the labels of an example; "correct" = exact match at probability 0.5.
    w = self.loss_weights(batch)
    y = jnp.maximum(batch["label_ids"], 0).astype(jnp.float32)
    z = outputs["logits"]
    bce = jnp.maximum(z, 0) - z * y + jnp.log1p(jnp.exp(-jnp.abs(z)))
    exact = jnp.all((z > 0) == (y > 0.5), axis=-1).astype(jnp.float32)
    return {"task_loss_sum": jnp.sum(jnp.mean(bce, axis=-1) * w), "task_weight_sum": jnp.sum(w),
            "task_correct_sum": jnp.sum(exact * w)}

  def predict(self, example_set, features, outputs):
    """Label probabilities [N, K] float64 (sigmoids); a label is predicted where >= threshold."""
    return 1.0 / (1.0 + np.exp(-np.asarray(outputs["logits"], np.float64)))

  def decide(self, probabilities) -> np.ndarray:
    """[N, K] int32 multi-hot of the labels at or above the threshold."""
    return (np.asarray(probabilities) >= self.threshold).astype(np.int32)

  def evaluate(self, example_set, predictions, split=None):
    if any(e.labels is None for e in example_set):
      return {}
    m = {l: i for i, l in enumerate(self.label_list)}
    gold = np.zeros((len(example_set), len(self.label_list)), np.int32)
    for i, e in enumerate(example_set):
      for l in e.labels:
        gold[i, m[l]] = 1
    return multilabel_eval.multilabel_metrics(self.decide(predictions), gold)

  def write_predictions(self, output_dir, split, example_set, predictions):
    path = os.path.join(output_dir, f"{self.name}_{split}_predictions.tsv")
    return [write_predictions(path, example_set, self.decide(predictions), predictions, self.label_list,
                              self.separator, gold=not split.startswith("test"))]

  def text_examples(self, texts, text_pairs=None):
    return [MultilabelExample(guid=f"input:{i}", text_a=t, text_b=None if text_pairs is None else text_pairs[i])
            for i, t in enumerate(texts)]

  def readable_predictions(self, examples, features, outputs):
    probs = self.predict(examples, features, outputs)
    labels = self.label_list
    return [{"labels": [l for l, on in zip(labels, row) if on], "probabilities": dict(zip(labels, map(float, p)))}
            for row, p in zip(self.decide(probs), probs)]
