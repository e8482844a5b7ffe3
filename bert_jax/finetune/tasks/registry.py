"""Task registry: one object per fine-tuning task that reads data, makes features, turns model outputs into
predictions, scores them and writes the files users submit.

    task = get_task("mrpc")                       # cola sst2 mrpc stsb qqp mnli qnli rte wnli ax
    task = get_task("squad_v2", doc_stride=128)   # squad_v1 squad_v2 (language="zh" for CMRC2018 scoring)
    task = get_task("ner", label_list=None)       # CoNLL files or TFDS conll2003 (use_tfds=True)
    task = get_task("classification", text_a="text_a", label="label")   # generic TSV/CSV/JSONL
    task = get_task("multilabel", separator="|")  # TSV/CSV labels joined by "|", or JSONL label lists
    task = get_task("c3"); get_task("multiple_choice")   # C3 JSON / generic JSONL multiple choice
    task = get_task("ner", crf=True)              # tagging with a CRF head (constraints from the scheme)
    task.prepare(data_dir)                        # label_list for ner (data_dir/labels.txt, else inferred
                                                  # from train+dev) and classification (from train)

    train = task.read("train", data_dir)                          # ExampleSet (.examples, .skipped)
    feats = task.featurize(train, tokenizer, max_seq_length, is_training=True)   # dict of numpy arrays
    ... model over feats[k] for k in task.model_input_keys; loss on feats[k] for k in task.label_keys ...
    for split in task.eval_splits:                                # ("dev",) or MNLI's matched/mismatched
      es = task.read(split, data_dir); f = task.featurize(es, tokenizer, max_seq_length)
      outputs = {"logits": ...}  # head outputs for every row of f, concatenated, eval padding removed
      preds = task.predict(es, f, outputs)
      metrics = task.evaluate(es, preds, split)                   # {} when the split has no labels
      paths = task.write_predictions(output_dir, split, es, preds)

Attributes every task has:
  name, kind ("classification" | "regression" | "squad" | "ner" | "multilabel"; multiple choice is
    "classification" over the choices),
  head ("sequence_classification" | "question_answering" | "token_classification" | "multiple_choice": the
    heads.BertFor* class), pooling (sentence-level heads: heads.POOLINGS), crf (ner),
  extra_input_keys (features the head reads besides the three model inputs: ner+crf ("word_mask",),
    multiple choice ("choice_mask",)),
  label_list (None for regression and SQuAD), is_regression, num_labels (1 for regression, 0 for SQuAD),
  metric_fn (dotted name of the scoring function), main_metric (key of evaluate() used for the best checkpoint;
  higher is better), train_split, eval_splits, test_splits,
  model_input_keys = ("input_ids", "input_mask", "segment_ids"), label_keys (feature keys the loss reads):
    classification ("label_ids",) int32 [B]; regression ("label_ids",) float32 [B];
    squad ("start_positions", "end_positions") int32 [B]; ner ("label_ids",) int32 [B, T], -100 = ignore;
    multilabel ("label_ids",) int32 [B, K] multi-hot (-1 rows unlabelled); multiple choice int32 [B].
  outputs expected by predict(): classification/regression/ner {"logits"}, squad {"start_logits",
    "end_logits"} (the heads' output names).
Metric values are fractions for GLUE/NER/classification and percentages for SQuAD (official scripts).
Test splits carry no labels (evaluate returns {}); their files are optional, so a loop should skip a test
split whose read() raises FileNotFoundError. GLUE's AX diagnostic is predicted by the MNLI model: it is MNLI's
third test split "ax" (<glue root>/diagnostic/diagnostic.tsv or TFDS glue/ax -> AX.tsv); get_task("ax")
reads the same file on its own.
"""

from __future__ import annotations

import os
from typing import Dict, List, Optional, Sequence

import numpy as np

from bert_jax.evaluation import glue as glue_eval
from bert_jax.evaluation import multilabel as multilabel_eval
from bert_jax.evaluation import ner as ner_eval
from bert_jax.evaluation import squad as squad_eval
from bert_jax.evaluation import squad_postprocess
from bert_jax.finetune.tasks import c3, classification, common, glue, multilabel, multiple_choice, ner, squad

MODEL_INPUT_KEYS = ("input_ids", "input_mask", "segment_ids")


class Task:
  """Base class; see the module docstring for the contract."""
  name = ""
  kind = ""
  head = ""
  label_list: Optional[List[str]] = None
  is_regression = False
  metric_fn = ""
  main_metric = ""
  train_split: Optional[str] = "train"
  eval_splits = ("dev",)
  test_splits = ("test",)
  model_input_keys = MODEL_INPUT_KEYS
  extra_input_keys: tuple = ()
  label_keys = ("label_ids",)
  pooling = "cls"    # sentence vector of sentence-level heads (heads.POOLINGS); set by data.make_task

  def head_options(self) -> dict:
    """What finetune_info.json must record to rebuild this task's head (Predictor)."""
    return {"pooling": self.pooling}

  def __init__(self, on_error: str = "raise"):
    self.on_error = on_error

  @property
  def num_labels(self) -> int:
    if self.is_regression:
      return 1
    return len(self.label_list) if self.label_list is not None else 0

  def prepare(self, data_dir: Optional[str] = None, use_tfds: bool = False, **read_kwargs) -> "Task":
    """Fills in what needs the data (label lists inferred from train); a no-op for fixed-label tasks."""
    return self

  def read(self, split: str, data_dir: Optional[str] = None, *, use_tfds: bool = False,
           tfds_data_dir: Optional[str] = None, download: bool = False,
           on_error: Optional[str] = None) -> common.ExampleSet:
    raise NotImplementedError

  def featurize(self, example_set, tokenizer, max_seq_length: int, is_training: bool = False):
    raise NotImplementedError

  def predict(self, example_set, features, outputs: Dict[str, np.ndarray]):
    raise NotImplementedError

  def evaluate(self, example_set, predictions, split: Optional[str] = None) -> Dict:
    raise NotImplementedError

  def write_predictions(self, output_dir: str, split: str, example_set, predictions) -> List[str]:
    raise NotImplementedError

  def _require_labels(self):
    if self.label_list is None and not self.is_regression:
      raise ValueError(f"task {self.name!r} has no label_list yet: pass label_list= to get_task or call "
                       "task.prepare(data_dir) to take it from the training data")

  def __repr__(self):
    return (f"{type(self).__name__}(name={self.name!r}, kind={self.kind!r}, num_labels={self.num_labels}, "
            f"main_metric={self.main_metric!r})")


# --------------------------------------------------------------------------------------------------------
# Sentence(-pair) classification and regression.
# --------------------------------------------------------------------------------------------------------
class _SequenceTask(Task):
  head = "sequence_classification"

  def featurize(self, example_set, tokenizer, max_seq_length, is_training=False):
    self._require_labels()
    return classification.convert_examples_to_features(example_set, tokenizer, max_seq_length,
                                                       self.label_list, self.is_regression)

  def predict(self, example_set, features, outputs):
    logits = np.asarray(outputs["logits"])
    if logits.shape[0] != len(example_set):
      raise ValueError(f"{logits.shape[0]} logits rows for {len(example_set)} examples")
    if self.is_regression:
      return logits.reshape(len(example_set), -1)[:, 0].astype(np.float64)
    return np.argmax(logits, axis=-1).astype(np.int32)

  def _gold(self, example_set):
    if any(e.label is None for e in example_set):
      return None
    if self.is_regression:
      return np.array([float(e.label) for e in example_set])
    m = {l: i for i, l in enumerate(self.label_list)}
    return np.array([m[e.label] for e in example_set], dtype=np.int32)


class GlueTask(_SequenceTask):
  metric_fn = "bert_jax.evaluation.glue.compute_metrics"

  def __init__(self, name: str, on_error: str = "raise"):
    super().__init__(on_error)
    self.spec = glue.get_spec(name)
    self.name = self.spec.name
    self.label_list = self.spec.label_list
    self.is_regression = self.spec.is_regression
    self.kind = "regression" if self.is_regression else "classification"
    self.main_metric = glue_eval.MAIN_METRIC[self.name]
    if self.name == "mnli":
      self.eval_splits = ("dev_matched", "dev_mismatched")
      # GLUE's AX diagnostic is predicted by the MNLI model: split "ax" reads <glue root>/diagnostic.
      self.test_splits = ("test_matched", "test_mismatched", "ax")
    if self.name == "ax":
      self.train_split = None
      self.eval_splits = ()

  def _source(self, split):
    """(GLUE task, split) actually read: MNLI's "ax" split is the AX task's test split."""
    if self.name == "mnli" and split == "ax":
      return "ax", "test"
    return self.name, split

  def read(self, split, data_dir=None, *, use_tfds=False, tfds_data_dir=None, download=False, on_error=None):
    on_error = on_error or self.on_error
    name, split = self._source(split)
    if use_tfds:
      return glue.read_glue_tfds(name, split, tfds_data_dir or data_dir, download, on_error)
    if data_dir is None:
      raise ValueError("data_dir is required to read GLUE files")
    return glue.read_glue(name, split, data_dir, on_error)

  def _metric_task(self, split):
    if self.name == "mnli" and split == "ax":
      return "ax"
    if self.name == "mnli":
      return "mnli_mismatched" if split and "mismatched" in split else "mnli_matched"
    return self.name

  def evaluate(self, example_set, predictions, split=None):
    gold = self._gold(example_set)
    if gold is None:
      return {}
    return glue_eval.compute_metrics(self._metric_task(split or example_set.split), predictions, gold)

  def write_predictions(self, output_dir, split, example_set, predictions):
    if split != "ax":
      split = glue.canonical_split(self.spec, split)
    indices = [e.index for e in example_set]
    if split.startswith("test") or split == "ax":
      return [glue_eval.write_glue_submission(output_dir, self._metric_task(split), predictions, indices,
                                              self.label_list)]
    rows = glue_eval.format_predictions(self._metric_task(split), predictions, self.label_list)
    path = os.path.join(output_dir, f"{self.name}_{split}_predictions.tsv")
    os.makedirs(output_dir, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
      f.write("index\tprediction\tlabel\n")
      for e, p in zip(example_set, rows):
        label = "" if e.label is None else (f"{e.label:.3f}" if self.is_regression else e.label)
        f.write(f"{e.index}\t{p}\t{label}\n")
    return [path]


class ClassificationTask(_SequenceTask):
  """Generic single-sentence / pair classification (or regression) from TSV/CSV/JSONL files."""
  name = "classification"
  metric_fn = "bert_jax.evaluation.glue.compute_metrics"

  def __init__(self, label_list: Optional[Sequence[str]] = None, text_a="text_a", text_b=None, label="label",
               header: Optional[bool] = None, file_format: Optional[str] = None, is_regression: bool = False,
               on_error: str = "raise", name: str = "classification"):
    super().__init__(on_error)
    self.name = name
    self.format = classification.ClassificationFormat(text_a=text_a, text_b=text_b, label=label, header=header,
                                                      file_format=file_format, is_regression=is_regression)
    self.is_regression = is_regression
    self.label_list = list(label_list) if label_list is not None else None
    self.kind = "regression" if is_regression else "classification"
    self.main_metric = "corr" if is_regression else "accuracy"

  def prepare(self, data_dir=None, use_tfds=False, **read_kwargs):
    if self.label_list is None and not self.is_regression:
      if data_dir is None:
        raise ValueError("data_dir is required to infer the label list")
      train = classification.read_classification_split(data_dir, "train", self.format, None, self.on_error)
      self.label_list = classification.infer_label_list(train)
    return self

  def read(self, split, data_dir=None, *, use_tfds=False, tfds_data_dir=None, download=False, on_error=None):
    if use_tfds:
      raise ValueError("the generic classification task reads files only (set use_tfds=False)")
    if data_dir is None:
      raise ValueError("data_dir is required")
    return classification.read_classification_split(data_dir, split, self.format, self.label_list,
                                                    on_error or self.on_error)

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
    return [classification.write_predictions_tsv(path, example_set, list(predictions), labels)]


# --------------------------------------------------------------------------------------------------------
# SQuAD.
# --------------------------------------------------------------------------------------------------------
class SquadTask(Task):
  kind = "squad"
  head = "question_answering"
  label_keys = ("start_positions", "end_positions")
  test_splits = ()
  metric_fn = "bert_jax.evaluation.squad.evaluate"

  def __init__(self, version_2_with_negative: bool, doc_stride: int = 128, max_query_length: int = 64,
               n_best_size: int = 20, max_answer_length: int = 30, null_score_diff_threshold: float = 0.0,
               language: str = "auto", on_error: Optional[str] = None):
    super().__init__(on_error)
    self.version_2_with_negative = version_2_with_negative
    self.name = "squad_v2" if version_2_with_negative else "squad_v1"
    self.main_metric = "f1"
    self.doc_stride, self.max_query_length = doc_stride, max_query_length
    self.n_best_size, self.max_answer_length = n_best_size, max_answer_length
    self.null_score_diff_threshold = null_score_diff_threshold
    self.language = language

  def read(self, split, data_dir=None, *, use_tfds=False, tfds_data_dir=None, download=False, on_error=None):
    on_error = on_error or self.on_error
    if use_tfds:
      return squad.read_squad_tfds(split, self.version_2_with_negative, tfds_data_dir or data_dir, download,
                                   on_error)
    if data_dir is None:
      raise ValueError("data_dir is required to read SQuAD files")
    return squad.read_squad_split(data_dir, split, self.version_2_with_negative, on_error)

  def featurize(self, example_set, tokenizer, max_seq_length, is_training=False):
    return squad.convert_examples_to_features(example_set, tokenizer, max_seq_length, self.doc_stride,
                                              self.max_query_length, is_training=is_training)

  def predict(self, example_set, features, outputs):
    return squad_postprocess.postprocess_predictions(
        example_set, features, outputs["start_logits"], outputs["end_logits"], n_best_size=self.n_best_size,
        max_answer_length=self.max_answer_length, version_2_with_negative=self.version_2_with_negative,
        null_score_diff_threshold=self.null_score_diff_threshold)

  def evaluate(self, example_set, predictions, split=None):
    gold = squad.gold_answers(example_set)
    if self.version_2_with_negative:
      return squad_eval.evaluate_v2(gold, predictions.predictions, predictions.null_odds,
                                    na_prob_thresh=self.null_score_diff_threshold, language=self.language)
    return squad_eval.evaluate_v1(gold, predictions.predictions, language=self.language)

  def write_predictions(self, output_dir, split, example_set, predictions):
    prefix = "" if split in ("dev", "validation") else f"{split}_"
    return list(squad_postprocess.write_prediction_files(output_dir, predictions, prefix).values())


# --------------------------------------------------------------------------------------------------------
# NER.
# --------------------------------------------------------------------------------------------------------
class NerTask(Task):
  name = "ner"
  kind = "ner"
  head = "token_classification"
  main_metric = "f1"
  metric_fn = "bert_jax.evaluation.ner.evaluate"

  def __init__(self, label_list: Optional[Sequence[str]] = None, mode: str = "conlleval", scheme: str = "BIO",
               on_error: str = "raise", crf: bool = False):
    super().__init__(on_error)
    self.label_list = list(label_list) if label_list is not None else None
    self.mode, self.scheme = mode, scheme
    self.crf = bool(crf)
    # The CRF runs over the words' first sub-tokens, which the features mark in word_mask.
    self.extra_input_keys = ("word_mask", "window_continues", "window_continued") if self.crf else ()

  def head_options(self):
    return {"crf": self.crf}

  def prepare(self, data_dir=None, use_tfds=False, tfds_data_dir=None, download=False, **_):
    if self.label_list is not None:
      return self
    if use_tfds:
      # TFDS conll2003 carries its tag names.
      self.label_list = list(ner.CONLL2003_LABELS)
      return self
    if data_dir is None:
      raise ValueError("data_dir is required to infer the NER label list")
    labels_file = os.path.join(data_dir, "labels.txt")
    if os.path.exists(labels_file):  # an explicit label file fixes the order (and ids) of the tags
      self.label_list = ner.read_label_file(labels_file)
      return self
    sets = [ner.read_conll_split(data_dir, "train", None, self.on_error)]
    try:
      sets.append(ner.read_conll_split(data_dir, "dev", None, self.on_error))
    except FileNotFoundError:
      pass
    self.label_list = ner.infer_label_list(sets)
    return self

  def read(self, split, data_dir=None, *, use_tfds=False, tfds_data_dir=None, download=False, on_error=None):
    if use_tfds:
      return ner.read_conll2003_tfds(split, tfds_data_dir or data_dir, download, on_error or self.on_error)
    if data_dir is None:
      raise ValueError("data_dir is required to read CoNLL files")
    return ner.read_conll_split(data_dir, split, self.label_list, on_error or self.on_error)

  def featurize(self, example_set, tokenizer, max_seq_length, is_training=False):
    self._require_labels()
    feats = ner.convert_examples_to_features(example_set, tokenizer, max_seq_length, self.label_list)
    feats["word_mask"] = (feats["word_ids"] >= 0).astype(np.int32)   # [N, T]: first sub-token of each word
    # [N]: the row is a window after (continues) / before (is continued by) another of the same sentence; the
    # CRF lifts its start / end constraints there (a window may begin or end inside an entity).
    ex = feats["example_index"]
    same_next = np.zeros(len(ex), bool)
    same_next[:-1] = ex[:-1] == ex[1:]
    feats["window_continued"] = same_next.astype(np.int32)
    feats["window_continues"] = np.concatenate([[False], same_next[:-1]]).astype(np.int32)
    return feats

  def predict(self, example_set, features, outputs):
    if "crf_tags" in outputs:   # the CRF head's Viterbi path
      return ner.predictions_to_tags(example_set, features, np.asarray(outputs["crf_tags"]), self.label_list)
    logits = np.asarray(outputs["logits"])
    return ner.predictions_to_tags(example_set, features, np.argmax(logits, axis=-1), self.label_list)

  def evaluate(self, example_set, predictions, split=None):
    if any(ex.labels is None for ex in example_set):
      return {}
    return ner_eval.evaluate([ex.labels for ex in example_set], predictions, self.mode, self.scheme)

  def write_predictions(self, output_dir, split, example_set, predictions):
    return [ner.write_predictions(os.path.join(output_dir, f"{split}_predictions.txt"), example_set,
                                  predictions)]


# --------------------------------------------------------------------------------------------------------
# Multiple choice (C3, generic JSONL) and multi-label classification.
# --------------------------------------------------------------------------------------------------------
class MultipleChoiceTask(Task):
  """Softmax over the choices of each question; accuracy. `name` "c3" reads C3's JSON (tasks/c3.py),
  "multiple_choice" JSONL (tasks/multiple_choice.py)."""
  kind = "classification"
  head = "multiple_choice"
  main_metric = "accuracy"
  metric_fn = "bert_jax.evaluation.glue.accuracy"
  extra_input_keys = ("choice_mask",)

  def __init__(self, name: str = "multiple_choice", on_error: str = "raise"):
    super().__init__(on_error)
    if name not in ("c3", "multiple_choice"):
      raise ValueError(f"multiple-choice task {name!r}; expected c3 or multiple_choice")
    self.name = name
    self.label_list = None   # choices differ per example; set in prepare() to the choice indices seen

  @property
  def num_labels(self) -> int:
    return 1     # one shared score per choice

  def read(self, split, data_dir=None, *, use_tfds=False, tfds_data_dir=None, download=False, on_error=None):
    if use_tfds:
      raise ValueError(f"task {self.name} reads local files only")
    if data_dir is None:
      raise ValueError("data_dir is required")
    reader = c3.read_split if self.name == "c3" else multiple_choice.read_split
    return reader(data_dir, split, on_error or self.on_error)

  def featurize(self, example_set, tokenizer, max_seq_length, is_training=False):
    return multiple_choice.convert_examples_to_features(example_set, tokenizer, max_seq_length)

  def predict(self, example_set, features, outputs):
    """Choice probabilities [N, C] float64 (padded choices 0); the answer is their argmax."""
    logits = np.asarray(outputs["logits"], np.float64)
    if logits.shape[0] != len(example_set):
      raise ValueError(f"{logits.shape[0]} logits rows for {len(example_set)} examples")
    z = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)

  def evaluate(self, example_set, predictions, split=None):
    if any(e.label is None for e in example_set):
      return {}
    gold = np.array([e.label for e in example_set], np.int32)
    return {"accuracy": glue_eval.accuracy(np.argmax(predictions, axis=-1), gold)}

  def write_predictions(self, output_dir, split, example_set, predictions):
    path = os.path.join(output_dir, f"{self.name}_{split}_predictions.jsonl")
    return [multiple_choice.write_predictions(path, example_set, np.argmax(predictions, axis=-1), predictions)]


class MultilabelTask(Task):
  """Independent sigmoids over label_list, BCE loss; a label is predicted when its probability >= threshold.
  Metrics: micro / macro F1 and exact match (main: micro_f1)."""
  name = "multilabel"
  kind = "multilabel"
  head = "sequence_classification"
  main_metric = "micro_f1"
  metric_fn = "bert_jax.evaluation.multilabel.multilabel_metrics"

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

  def head_options(self):
    return {"pooling": self.pooling, "multilabel_threshold": self.threshold,
            "multilabel_separator": self.separator}

  def prepare(self, data_dir=None, use_tfds=False, **read_kwargs):
    if self.label_list is None:
      if data_dir is None:
        raise ValueError("data_dir is required to infer the label list")
      self.label_list = multilabel.infer_label_list(self.read("train", data_dir))
    return self

  def read(self, split, data_dir=None, *, use_tfds=False, tfds_data_dir=None, download=False, on_error=None):
    if use_tfds:
      raise ValueError("the multilabel task reads files only")
    if data_dir is None:
      raise ValueError("data_dir is required")
    return multilabel.read_split(data_dir, split, self.format, self.separator, self.label_list,
                                 on_error or self.on_error)

  def featurize(self, example_set, tokenizer, max_seq_length, is_training=False):
    self._require_labels()
    return multilabel.convert_examples_to_features(example_set, tokenizer, max_seq_length, self.label_list)

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
    return [multilabel.write_predictions(path, example_set, self.decide(predictions), predictions,
                                         self.label_list, self.separator)]


# --------------------------------------------------------------------------------------------------------
# Registry.
# --------------------------------------------------------------------------------------------------------
TASK_NAMES = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli", "ax", "squad_v1",
              "squad_v2", "ner", "classification", "multilabel", "c3", "multiple_choice")


def get_task(name: str, **kwargs) -> Task:
  """A fresh task object by name (see TASK_NAMES); kwargs go to the task's constructor:
  GLUE: on_error. squad_v1/v2: doc_stride, max_query_length, n_best_size, max_answer_length,
  null_score_diff_threshold, language, on_error. ner: label_list, mode, scheme, on_error.
  classification: label_list, text_a, text_b, label, header, file_format, is_regression, on_error.
  multilabel: label_list, text_a, text_b, label, header, file_format, separator, threshold, on_error.
  c3 / multiple_choice: on_error."""
  key = name.lower().replace("-", "_")
  key = {"sst_2": "sst2", "sts_b": "stsb", "squad": "squad_v1", "squad1": "squad_v1", "squad2": "squad_v2",
         "squad_v1.1": "squad_v1", "squad_v2.0": "squad_v2", "conll2003": "ner", "diagnostic": "ax"}.get(key, key)
  if key in glue.GLUE_TASKS:
    return GlueTask(key, **kwargs)
  if key in ("squad_v1", "squad_v2"):
    return SquadTask(version_2_with_negative=(key == "squad_v2"), **kwargs)
  if key == "ner":
    return NerTask(**kwargs)
  if key == "classification":
    return ClassificationTask(**kwargs)
  if key == "multilabel":
    return MultilabelTask(**kwargs)
  if key in ("c3", "multiple_choice"):
    return MultipleChoiceTask(key, **kwargs)
  raise KeyError(f"unknown task {name!r}; known: {', '.join(TASK_NAMES)}")
