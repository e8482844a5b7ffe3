"""Multiple choice: a context, a question and 2+ answer choices, one of them right (C3, RACE, SWAG style).

JSONL files `train.jsonl` / `dev.jsonl` / `test.jsonl` in data_dir, one object per line:
    {"context": "...", "question": "...", "choices": ["...", "..."], "label": 1, "id": "optional"}
`label` is the 0-based index of the right choice (absent / null in unlabelled test files); "context" may be
"" (SWAG-style tasks). C3's own JSON is read by tasks/c3.py into the same examples.

Features (`convert_examples_to_features`), C = the most choices of any example of the split:
  input_ids, input_mask, segment_ids  int32 [N, C, T]  [CLS] context [SEP] question choice [SEP]
                                                       (pack_choice: the choice is never cut; see there)
  choice_mask    int32 [N, C]  1 for real choices, 0 for padding (those rows are all zeros; the head masks them)
  label_ids      int32 [N]     index of the right choice, -1 when unlabelled
  example_index  int32 [N]

MultipleChoiceTask is the task kind (task=multiple_choice; c3.C3Task reads C3's JSON): one shared score per
choice (heads.BertForMultipleChoice), a softmax over the choices of a question, accuracy.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Dict, List, Optional, Sequence, Union

import numpy as np

from bert_jax.evaluation import glue as glue_eval
from bert_jax.fileio import write_text_atomic
from bert_jax.finetune.tasks import common
from bert_jax.finetune.tasks.base import Task, labelled_weights, require_training_labels, softmax_sums
from bert_jax.input_pipeline import tokenization
from bert_jax.models import heads


@dataclasses.dataclass
class MultipleChoiceExample:
  guid: str                       # "<file>:<line>" (or C3's "<file>:<doc>:<question>")
  context: str
  question: str
  choices: List[str]
  label: Optional[int] = None     # index of the right choice; None when unlabelled
  id: Union[str, int, None] = None   # the dataset's id, for the prediction file (an int stays an int)


def dataset_id(value, default: str) -> Union[str, int]:
  """A question's id as the prediction file writes it: an int as an int (CLUE's C3 ids; its submission reads
  {"id": 0, "label": 1}), anything else as text, `default` when absent."""
  if value is None:
    return default
  return value if isinstance(value, int) and not isinstance(value, bool) else str(value)


def check_example(ex: MultipleChoiceExample, bad, source: str, line) -> bool:
  """True when `ex` is usable; otherwise reports it through the ErrorPolicy `bad` and returns False."""
  if len(ex.choices) < 2:
    bad(source, line, "fewer than 2 choices", f"{len(ex.choices)} choice(s)")
    return False
  if any(not c.strip() for c in ex.choices):
    bad(source, line, "empty choice", f"choices {ex.choices}")
    return False
  if ex.label is not None and not 0 <= ex.label < len(ex.choices):
    bad(source, line, "label out of range", f"label {ex.label} for {len(ex.choices)} choices")
    return False
  return True


def read_jsonl(path: str, split: str = "train", on_error: str = "raise") -> common.ExampleSet:
  """Reads a multiple-choice JSONL file (module docstring). Labels are required except in test files."""
  report = common.SkipReport(source=path)
  bad = common.ErrorPolicy(on_error, report)
  labels_required = split != "test"
  examples = []
  text = common.read_utf8(path)
  for n, line in enumerate(text.split("\n"), start=1):
    if not line.strip():
      continue
    try:
      obj = json.loads(line)
    except json.JSONDecodeError as e:
      bad(path, n, "invalid JSON", e.msg)
      continue
    if not isinstance(obj, dict):
      bad(path, n, "not a JSON object", type(obj).__name__)
      continue
    choices = obj.get("choices")
    if not isinstance(choices, list) or not all(isinstance(c, str) for c in choices):
      bad(path, n, "missing field", "'choices' must be a list of strings")
      continue
    label = obj.get("label")
    if label is None and labels_required:
      bad(path, n, "missing label", "no 'label' (0-based index of the right choice)")
      continue
    if label is not None:
      try:
        # true / 1.5 are no choice index (int() read them as 1); 1.0 and "1" are
        if isinstance(label, bool) or (isinstance(label, float) and not label.is_integer()):
          raise ValueError
        label = int(label)
      except (TypeError, ValueError):
        bad(path, n, "bad label", f"label {label!r} is not a choice index")
        continue
    # An absent key is a misnamed field ("passage", "article"), not an empty one: read as "", every question
    # would get the same rows whatever its passage (issue 25's symptom). "" is written out when meant.
    missing = [k for k in ("context", "question") if not isinstance(obj.get(k), str)]
    if missing:
      bad(path, n, "missing field", f"{missing[0]!r} must be a string (\"\" for none); the object has "
          f"{sorted(obj)}")
      continue
    ex = MultipleChoiceExample(guid=f"{path}:{n}", context=obj["context"],
                               question=obj["question"], choices=list(choices), label=label,
                               id=dataset_id(obj.get("id"), str(len(examples))))
    if check_example(ex, bad, path, n):
      examples.append(ex)
  return common.finish(examples, path, split, report)


def read_split(data_dir: str, split: str, on_error: str = "raise") -> common.ExampleSet:
  stems = {"dev": ("dev", "validation", "valid")}.get(split, (split,))
  path = common.find_file(data_dir, [s + ".jsonl" for s in stems], f"multiple-choice {split}")
  return read_jsonl(path, split, on_error)


def pack_choice(context_ids: List[int], question_ids: List[int], choice_ids: List[int], cls_id: int,
                sep_id: int, max_seq_length: int):
  """(input_ids, segment_ids) of one choice row, [CLS] context [SEP] question choice [SEP] (segment 1 from the
  question on), or [CLS] question choice [SEP] without a context; not padded.

  The choice is what the row scores, so it is cut last. Google's pair truncation (pop from the longer of
  context and question+choice) cuts the END of question+choice whenever that side is the longer one, which is
  the choice: two choices then give identical rows and identical probabilities whatever the passage. Here
  question+choice take at most half the room while the context needs it (the context keeps its beginning,
  as Google's), the question is cut before the choice, and the choice itself only when it alone overflows.
  """
  q, c = list(question_ids), list(choice_ids)
  room = max_seq_length - (3 if context_ids else 2)
  b_room = room - min(len(context_ids), room // 2)
  if len(q) + len(c) > b_room:
    c = c[:b_room]
    q = q[:b_room - len(c)]
  a = list(context_ids)[:room - len(q) - len(c)]
  if not context_ids:
    return [cls_id] + q + c + [sep_id], [0] * (len(q) + len(c) + 2)
  return ([cls_id] + a + [sep_id] + q + c + [sep_id], [0] * (len(a) + 2) + [1] * (len(q) + len(c) + 1))


def convert_examples_to_features(examples: Sequence[MultipleChoiceExample], tokenizer,
                                 max_seq_length: int) -> Dict[str, np.ndarray]:
  """See the module docstring."""
  common.check_max_seq_length(max_seq_length, minimum=4)
  examples = list(examples)
  if not examples:
    raise ValueError("no multiple-choice examples to featurize")
  num_choices = max(len(e.choices) for e in examples)
  cls_id, sep_id = common.special_ids(tokenizer)
  batch = tokenization.fast_batch_tokenizer(tokenizer)
  ctx_ids = batch.encode_batch([e.context for e in examples])
  question_ids = batch.encode_batch([e.question for e in examples])
  choice_ids = batch.encode_batch([c for e in examples for c in e.choices])
  n, t = len(examples), max_seq_length
  ids = np.zeros((n, num_choices, t), np.int32)
  mask = np.zeros_like(ids)
  seg = np.zeros_like(ids)
  choice_mask = np.zeros((n, num_choices), np.int32)
  labels = np.full(n, -1, np.int32)
  k = 0
  for i, e in enumerate(examples):
    for c in range(len(e.choices)):
      row, srow = pack_choice(ctx_ids[i], question_ids[i], choice_ids[k], cls_id, sep_id, t)
      k += 1
      ids[i, c, :len(row)] = row
      seg[i, c, :len(row)] = srow
      mask[i, c, :len(row)] = 1
      choice_mask[i, c] = 1
    if e.label is not None:
      labels[i] = e.label
  return {"input_ids": ids, "input_mask": mask, "segment_ids": seg, "choice_mask": choice_mask,
          "label_ids": labels, "example_index": np.arange(n, dtype=np.int32)}


def write_predictions(path: str, examples: Sequence[MultipleChoiceExample], predictions, probabilities) -> str:
  """JSONL: {"id", "label" (predicted index), "answer" (its text), "probabilities", "gold" (if labelled)}."""
  d = os.path.dirname(path)
  if d:
    os.makedirs(d, exist_ok=True)
  lines = []
  for e, p, pr in zip(examples, predictions, probabilities):
    row = {"id": e.id, "label": int(p), "answer": e.choices[int(p)],
           "probabilities": [round(float(x), 6) for x in pr[:len(e.choices)]]}
    if e.label is not None:
      row["gold"] = int(e.label)
    lines.append(json.dumps(row, ensure_ascii=False) + "\n")
  return write_text_atomic(path, "".join(lines))


class MultipleChoiceTask(Task):
  """Softmax over the choices of each question; accuracy. Reads the JSONL files above."""
  name = "multiple_choice"
  kind = "classification"
  head = "multiple_choice"
  main_metric = "accuracy"
  extra_input_keys = ("choice_mask",)
  uses_pooling = True
  takes_choices = True

  def __init__(self, on_error: str = "raise"):
    super().__init__(on_error)
    self.label_list = None   # choices differ per example

  @property
  def num_labels(self) -> int:
    return 1     # one shared score per choice

  def _read_split(self, data_dir, split, on_error):
    return read_split(data_dir, split, on_error)

  def read(self, split, data_dir=None, *, use_tfds=False, tfds_data_dir=None, download=False, on_error=None):
    if use_tfds:
      raise ValueError(f"task {self.name} reads local files only")
    if data_dir is None:
      raise ValueError("data_dir is required")
    return self._read_split(data_dir, split, on_error or self.on_error)

  def featurize(self, example_set, tokenizer, max_seq_length, is_training=False):
    return convert_examples_to_features(example_set, tokenizer, max_seq_length)

  def check_training_features(self, example_set, features):
    require_training_labels(example_set, features)

  def build_head(self, bert_cfg, dropout_rate=None):
    return heads.BertForMultipleChoice(bert_cfg, dropout_rate=dropout_rate, pooling=self.pooling)

  def loss_weights(self, batch):
    return labelled_weights(batch)

  def loss_sums(self, outputs, batch):
    return softmax_sums(outputs["logits"], batch["label_ids"], self.loss_weights(batch))

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
    return [write_predictions(path, example_set, np.argmax(predictions, axis=-1), predictions)]

  def text_examples(self, texts, text_pairs=None):
    raise common.PredictInputError(f"task {self.name} takes questions with choices: use predict_choices([{{"
                                   "'context', 'question', 'choices'}, ...])")

  def choice_examples(self, questions):
    """Examples of {"context", "question", "choices": [str, ...]} dicts; a question that is not such a dict
    or has fewer than 2 choices is a PredictInputError naming it (line i + 1 of an input file)."""
    examples = []
    for i, q in enumerate(questions):
      where = f"question {i} (line {i + 1} of an input file)"
      if not isinstance(q, dict):
        raise common.PredictInputError(f"{where} is a {type(q).__name__}; expected an object "
                                       '{"context", "question", "choices": [...]}')
      choices = q.get("choices")
      if not isinstance(choices, (list, tuple)):   # a string was split into its characters
        raise common.PredictInputError(f"{where}: \"choices\" must be a list of strings, got {choices!r}")
      if len(choices) < 2:
        raise common.PredictInputError(f"{where} has {len(choices)} choice(s); at least 2 are needed")
      examples.append(MultipleChoiceExample(guid=f"input:{i}", context=str(q.get("context", "")),
                                            question=str(q.get("question", "")), choices=[str(c) for c in choices]))
    return examples

  def readable_predictions(self, examples, features, outputs):
    probs = self.predict(examples, features, outputs)
    out = []
    for ex, p in zip(examples, probs):
      k = int(np.argmax(p))
      out.append({"label": k, "answer": ex.choices[k], "probabilities": [float(x) for x in p[:len(ex.choices)]]})
    return out
