"""The task-kind contract: one Task subclass per kind of fine-tuning task carries everything the rest of the
code would otherwise switch on (the registry, registry.py, maps names to these classes):

    task = get_task("mrpc")                        # registry.TASKS["mrpc"].create("mrpc")
    task = task_class(config.task).from_config(name, config, label_list)   # data.make_task (name: canonical)
    task = task_class(info["task"]).from_info(info["task"], info)   # Predictor, from finetune_info.json
    task.prepare(data_dir)                         # label lists taken from the data where not fixed
    train = task.read("train", data_dir)           # ExampleSet (.examples, .skipped)
    feats = task.featurize(train, tokenizer, max_seq_length, is_training=True)   # dict of numpy arrays
    model = task.build_head(bert_cfg, dropout_rate)          # the Flax head module (heads.BertFor*)
    batch = {k: feats[k][rows] for k in task.device_keys}    # + example_weight [B] (0 for padding rows)
    w = task.loss_weights(batch)                   # weight of each labelled unit: [B] or, tagging, [B, T]
    sums = task.loss_sums(outputs, batch)          # {task_loss_sum, task_weight_sum[, task_correct_sum]}
    for split in task.eval_splits:                 # ("dev",) or MNLI's matched/mismatched
      es = task.read(split, data_dir); f = task.featurize(es, tokenizer, max_seq_length)
      outputs = ...                                # head outputs for every row of f (batches of task.eval_keys)
      preds = task.predict(es, f, outputs)
      metrics = task.evaluate(es, preds, split)    # {} when the split has no labels
      paths = task.write_predictions(output_dir, split, es, preds)

Attributes every task has:
  name (the registry name; finetune_info.json's "task"), kind ("classification" | "regression" | "squad" |
    "ner" | "multilabel", or a new kind's own; finetune_info.json's "kind"; multiple choice is
    "classification" over the choices), head (the heads.BertFor* the kind builds, recorded as finetune_info's
    "head"), pooling (sentence-level heads: heads.POOLINGS; uses_pooling says whether the head reads it),
  extra_input_keys (features the head reads besides the three model inputs: ner+crf ("word_mask", ...),
    multiple choice ("choice_mask",)),
  label_list (None for regression and SQuAD), is_regression, num_labels (1 for regression, 0 for SQuAD),
  main_metric (key of evaluate() used for the best checkpoint; higher is better), train_split, eval_splits,
  test_splits, tfds_name (the TFDS dataset the task reads, None for files only),
  model_input_keys = ("input_ids", "input_mask", "segment_ids"), label_keys (feature keys the loss reads):
    classification ("label_ids",) int32 [B]; regression ("label_ids",) float32 [B];
    squad ("start_positions", "end_positions") int32 [B]; ner ("label_ids",) int32 [B, T], -100 = ignore;
    multilabel ("label_ids",) int32 [B, K] multi-hot (-1 rows unlabelled); multiple choice int32 [B],
  eval_loss (whether evaluation batches carry the label keys, so an eval loss is computed; SQuAD's eval
    windows carry no answer positions).
  outputs expected by predict(): classification/regression/ner {"logits"}, squad {"start_logits",
    "end_logits"} (the heads' output names).
Metric values are fractions for GLUE/NER/classification and percentages for SQuAD (official scripts).
Test splits carry no labels (evaluate returns {}); their files are optional, so a loop should skip a test
split whose read() raises FileNotFoundError.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from bert_jax.finetune.tasks import common
from bert_jax.models import BertConfig, losses

MODEL_INPUT_KEYS = ("input_ids", "input_mask", "segment_ids")


class Task:
  """Base class of the task kinds; see the module docstring for the contract."""
  name = ""
  kind = ""
  head = ""
  label_list: Optional[List[str]] = None
  is_regression = False
  main_metric = ""
  metrics_in_percent = False        # SQuAD's scorer reports EM/F1 in percent; the others are fractions
  train_split: Optional[str] = "train"
  eval_splits = ("dev",)
  test_splits = ("test",)
  model_input_keys = MODEL_INPUT_KEYS
  extra_input_keys: tuple = ()
  extra_token_keys: tuple = ()      # those of extra_input_keys laid per token [N, T] (packed beside input_ids)
  label_keys = ("label_ids",)
  eval_loss = True
  tfds_name: Optional[str] = None
  uses_pooling = False   # the head reads `pooling` (sentence-level heads)
  takes_choices = False  # raw-input prediction takes {"context", "question", "choices"} dicts, not texts
  pooling = "cls"        # sentence vector of sentence-level heads (heads.POOLINGS); set by data.make_task
  extra_poolings: tuple = ()       # poolings beyond heads.POOLINGS the head takes (embedding: "splade")
  uses_truncation = False          # featurize keeps the tokens `truncation` says (sentence-level text tasks)
  truncation = "head"              # head (Google's) | tail | head_tail (common.keep_tokens); set by make_task
  truncation_head_fraction = 0.25  # head_tail: the share of the kept tokens taken from the start
  packs = False          # config.packing may put several of its feature rows in one row (finetune/data.py)
  token_level = False    # packed: labels and outputs per token ([R, T, ...]), not per example ([R, K, ...])

  def __init__(self, on_error: str = "raise"):
    self.on_error = on_error

  # ---- construction -----------------------------------------------------------------------------------
  @classmethod
  def create(cls, name: str, **kwargs) -> "Task":
    """A fresh task of registry name `name` (kinds serving several names, like GLUE, take it); kwargs go to
    the constructor."""
    del name
    return cls(**kwargs)

  @classmethod
  def from_config(cls, name: str, config, label_list: Optional[Sequence[str]] = None) -> "Task":
    """The task of a configs/finetune.py config (the kind's own fields); `label_list` (from config.label_list
    or a fine-tuned checkpoint) replaces the task's own labels."""
    task = cls.create(name, on_error=config.on_error)
    if label_list is not None:
      task.use_label_list(label_list)
    return task

  @classmethod
  def from_info(cls, name: str, info: dict) -> "Task":
    """The task a fine-tuned checkpoint was trained on, from its finetune_info.json."""
    return cls.create(name)

  def use_label_list(self, label_list: Sequence[str]):
    """A given label list for a task with fixed labels: the same labels, maybe in another order."""
    if self.is_regression or self.label_list is None:
      raise ValueError(f"label_list is set but task {self.name!r} has no labels")
    if sorted(label_list) != sorted(self.label_list):
      raise ValueError(f"label_list {list(label_list)} differs from {self.name}'s labels {self.label_list}; the "
                       "GLUE label order is fixed by the leaderboard")
    self.label_list = list(label_list)

  def check_max_seq_length(self, max_seq_length: int) -> None:
    """Raises UserError when `max_seq_length` cannot hold this task's inputs (the plan calls it); most kinds
    fit any length the model takes."""

  def packing_refusal(self) -> str:
    """Why config.packing cannot serve this task ("" = it can); the plan turns it into the error: line."""
    if self.packs:
      return ""
    return (f"task {self.name!r} ({self.head} head) reads whole rows (SQuAD windows and multiple choice are "
            "not packed)")

  def init_groups(self) -> tuple:
    """Top-level parameter groups besides params["bert"] that the head reads from init_checkpoint as part of
    the pre-trained model (SPLADE pooling: the masked-LM head, "mlm"), loaded whatever load_head says."""
    return ()

  def head_options(self) -> dict:
    """What finetune_info.json must record to rebuild this task's head (Predictor)."""
    return {"pooling": self.pooling}

  def input_options(self) -> dict:
    """What finetune_info.json must record to featurize new inputs as training did (Predictor)."""
    if not self.uses_truncation:
      return {}
    return {"truncation": self.truncation, "truncation_head_fraction": self.truncation_head_fraction}

  @property
  def num_labels(self) -> int:
    if self.is_regression:
      return 1
    return len(self.label_list) if self.label_list is not None else 0

  @property
  def device_keys(self) -> tuple:
    """Feature keys of a training batch: the model inputs, the head's extra inputs and the labels."""
    return tuple(self.model_input_keys) + tuple(self.extra_input_keys) + tuple(self.label_keys)

  @property
  def eval_keys(self) -> tuple:
    """Feature keys of an evaluation batch: with the labels where the loss is meaningful (eval_loss)."""
    if self.eval_loss:
      return self.device_keys
    return tuple(self.model_input_keys) + tuple(self.extra_input_keys)

  # ---- data -------------------------------------------------------------------------------------------
  def prepare(self, data_dir: Optional[str] = None, use_tfds: bool = False, **read_kwargs) -> "Task":
    """Fills in what needs the data (label lists inferred from train); a no-op for fixed-label tasks."""
    return self

  def read(self, split: str, data_dir: Optional[str] = None, *, use_tfds: bool = False,
           tfds_data_dir: Optional[str] = None, download: bool = False,
           on_error: Optional[str] = None) -> common.ExampleSet:
    raise NotImplementedError

  def featurize(self, example_set, tokenizer, max_seq_length: int, is_training: bool = False):
    raise NotImplementedError

  def check_training_features(self, example_set, features: Dict[str, np.ndarray]):
    """Raises when the training features hold a row the loss cannot use; kinds that weigh such rows 0
    (regression NaN, multilabel -1, NER -100) accept them."""

  # ---- model ------------------------------------------------------------------------------------------
  def build_head(self, bert_cfg: BertConfig, dropout_rate: Optional[float] = None) -> nn.Module:
    """The Flax module: BertModel + this kind's head (dropout_rate None = the encoder's hidden dropout)."""
    raise NotImplementedError

  def loss_weights(self, batch):
    """Loss weight of each labelled unit: examples [B] (or tokens [B, T]); padded rows weigh 0."""
    return batch["example_weight"].astype(jnp.float32)

  def loss_sums(self, outputs, batch) -> dict:
    """{task_loss_sum, task_weight_sum[, task_correct_sum]} of a batch, weighted so padded rows count for
    nothing (models.losses.normalize_metrics turns them into task_loss / task_accuracy)."""
    raise NotImplementedError

  # ---- predictions ------------------------------------------------------------------------------------
  def predict(self, example_set, features, outputs: Dict[str, np.ndarray]):
    raise NotImplementedError

  def evaluate(self, example_set, predictions, split: Optional[str] = None) -> Dict:
    raise NotImplementedError

  def write_predictions(self, output_dir: str, split: str, example_set, predictions) -> List[str]:
    raise NotImplementedError

  # ---- raw-input prediction (Predictor) ---------------------------------------------------------------
  def text_examples(self, texts: Sequence, text_pairs: Optional[Sequence[str]] = None) -> list:
    """Examples of raw texts (and their pairs) for Predictor.predict."""
    raise NotImplementedError(f"task {self.name!r} has no prediction on raw text")

  def choice_examples(self, questions: Sequence[dict]) -> list:
    """Examples of {"context", "question", "choices"} dicts for Predictor.predict_choices."""
    raise common.PredictInputError(f"predict_choices needs a c3 / multiple_choice model; this one is {self.name}")

  def readable_predictions(self, examples, features, outputs: Dict[str, np.ndarray]) -> List[dict]:
    """One JSON-ready dict per raw-input example (Predictor's answer)."""
    raise NotImplementedError(f"task {self.name!r} has no prediction on raw text")

  def _require_labels(self):
    if self.label_list is None and not self.is_regression:
      raise ValueError(f"task {self.name!r} has no label_list yet: pass label_list= to get_task or call "
                       "task.prepare(data_dir) to take it from the training data")

  def __repr__(self):
    return (f"{type(self).__name__}(name={self.name!r}, kind={self.kind!r}, num_labels={self.num_labels}, "
            f"main_metric={self.main_metric!r})")


# --------------------------------------------------------------------------------------------------------
# Loss pieces shared by several kinds.
# --------------------------------------------------------------------------------------------------------
def labelled_weights(batch):
  """[B] example weights of rows with a class label (label_ids >= 0; -1 marks unlabelled rows)."""
  return batch["example_weight"].astype(jnp.float32) * (batch["label_ids"] >= 0)


def softmax_sums(logits, labels, w) -> dict:
  """Cross-entropy and accuracy sums of class logits [..., C] against labels [...] under weights w [...]."""
  nll = losses.cross_entropy(logits, jnp.maximum(labels, 0))
  correct = (jnp.argmax(logits, -1) == labels).astype(jnp.float32)
  return {"task_loss_sum": jnp.sum(nll * w), "task_weight_sum": jnp.sum(w),
          "task_correct_sum": jnp.sum(correct * w)}


def require_training_labels(example_set, features):
  """Raises for a training row without a class label (-1): it would train towards no class."""
  if np.any(features["label_ids"] < 0):
    bad = int(np.flatnonzero(features["label_ids"] < 0)[0])
    raise ValueError(f"{example_set.source}: training example {example_set[bad].guid} has no label")
