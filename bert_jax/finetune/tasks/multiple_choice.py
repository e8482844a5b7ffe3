"""Multiple choice: a context, a question and 2+ answer choices, one of them right (C3, RACE, SWAG style).

JSONL files `train.jsonl` / `dev.jsonl` / `test.jsonl` in data_dir, one object per line:
    {"context": "...", "question": "...", "choices": ["...", "..."], "label": 1, "id": "optional"}
`label` is the 0-based index of the right choice (absent / null in unlabelled test files); "context" may be
"" (SWAG-style tasks). C3's own JSON is read by tasks/c3.py into the same examples.

Features (`convert_examples_to_features`), C = the most choices of any example of the split:
  input_ids, input_mask, segment_ids  int32 [N, C, T]  [CLS] context [SEP] question + " " + choice [SEP]
                                                       (Google's pair truncation: the longer side loses tokens)
  choice_mask    int32 [N, C]  1 for real choices, 0 for padding (those rows are all zeros; the head masks them)
  label_ids      int32 [N]     index of the right choice, -1 when unlabelled
  example_index  int32 [N]
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Dict, List, Optional, Sequence

import numpy as np

from bert_jax.finetune.tasks import common
from bert_jax.input_pipeline import tokenization


@dataclasses.dataclass
class MultipleChoiceExample:
  guid: str                       # "<file>:<line>" (or C3's "<file>:<doc>:<question>")
  context: str
  question: str
  choices: List[str]
  label: Optional[int] = None     # index of the right choice; None when unlabelled
  id: Optional[str] = None        # the dataset's id, for the prediction file


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
        label = int(label)
      except (TypeError, ValueError):
        bad(path, n, "bad label", f"label {label!r} is not a choice index")
        continue
    ex = MultipleChoiceExample(guid=f"{path}:{n}", context=str(obj.get("context") or ""),
                               question=str(obj.get("question") or ""), choices=list(choices), label=label,
                               id=str(obj["id"]) if obj.get("id") is not None else str(len(examples)))
    if check_example(ex, bad, path, n):
      examples.append(ex)
  return common.finish(examples, path, split, report)


def read_split(data_dir: str, split: str, on_error: str = "raise") -> common.ExampleSet:
  stems = {"dev": ("dev", "validation", "valid")}.get(split, (split,))
  path = common.find_file(data_dir, [s + ".jsonl" for s in stems], f"multiple-choice {split}")
  return read_jsonl(path, split, on_error)


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
  pairs = [(e.question + " " + c).strip() for e in examples for c in e.choices]
  pair_ids = batch.encode_batch(pairs)
  n, t = len(examples), max_seq_length
  ids = np.zeros((n, num_choices, t), np.int32)
  mask = np.zeros_like(ids)
  seg = np.zeros_like(ids)
  choice_mask = np.zeros((n, num_choices), np.int32)
  labels = np.full(n, -1, np.int32)
  k = 0
  for i, e in enumerate(examples):
    for c in range(len(e.choices)):
      a = ctx_ids[i]
      b = pair_ids[k]
      k += 1
      if a:
        row, srow = common.pack_pair(a, b, cls_id, sep_id, t)
      else:   # no context: [CLS] question choice [SEP]
        row, srow = common.pack_pair(b, None, cls_id, sep_id, t)
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
  with open(path, "w", encoding="utf-8") as f:
    for e, p, pr in zip(examples, predictions, probabilities):
      row = {"id": e.id, "label": int(p), "answer": e.choices[int(p)],
             "probabilities": [round(float(x), 6) for x in pr[:len(e.choices)]]}
      if e.label is not None:
        row["gold"] = int(e.label)
      f.write(json.dumps(row, ensure_ascii=False) + "\n")
  return path
