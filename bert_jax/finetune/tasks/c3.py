"""C3 (Chinese multiple-choice reading comprehension, CLUE) in its own JSON format.

A C3 file is a JSON list of documents, each `[[context sentences], [questions], document id]`, a question being
`{"question": str, "choice": [str, ...], "answer": str (the text of the right choice), "id": int or str}`. The
context sentences (dialogue turns, paragraphs) are joined into one passage by TURN_SEPARATOR, a newline: the
C3 authors' and CLUE's baselines join them so, which keeps scores comparable. The tokenizer reads it as
whitespace: a Latin word or number ending one turn no longer glues to the next turn's first word (one wrong
WordPiece sequence); between ideographs it adds no token, and the boundary the model sees is the turn's own
end punctuation or the next turn's speaker tag ("男：", "女："), as in those baselines. (They were joined with
nothing.) Test files have no "answer".

data_dir holds either `train.json` / `dev.json` / `test.json` (CLUE's release), or C3's own pairs
`d-train.json` + `m-train.json` (dialogue + mixed-genre), `d-dev.json` + `m-dev.json`, `d-test.json` +
`m-test.json`, merged per split in that order; CLUE's c3_public.zip has d-/m- train and dev files and its
test questions in test1.1.json (read for split "test" when there is no test.json; else test1.0.json). Examples are tasks/multiple_choice.py's; C3Task is the
multiple-choice task reading these files.
"""

from __future__ import annotations

import json
import os

from bert_jax.finetune.tasks import common
from bert_jax.finetune.tasks.multiple_choice import (MultipleChoiceExample, MultipleChoiceTask, check_example,
                                                       dataset_id)


TURN_SEPARATOR = "\n"


def split_files(data_dir: str, split: str):
  """The C3 files of a split: [<split>.json] or [d-<split>.json, m-<split>.json] (those present)."""
  # CLUE's c3_public.zip holds d-/m-train.json, d-/m-dev.json and test1.0.json + test1.1.json (one file, the
  # current leaderboard's 1.1 first)
  names = {"dev": ("dev", "validation"), "test": ("test", "test1.1", "test1.0")}.get(split, (split,))
  for name in names:
    p = os.path.join(data_dir, f"{name}.json")
    if os.path.exists(p):
      return [p]
  pairs = [os.path.join(data_dir, f"{prefix}-{name}.json") for name in names for prefix in ("d", "m")]
  found = [p for p in pairs if os.path.exists(p)]
  if not found:
    raise FileNotFoundError(f"C3 {split}: none of {[n + '.json' for n in names]} or d-/m-{names[0]}.json "
                            f"in {data_dir}")
  return found


def read_c3_file(path: str, split: str = "train", on_error: str = "raise", examples=None, report=None):
  """Appends the questions of one C3 file to `examples` (a list); returns (examples, report)."""
  report = report if report is not None else common.SkipReport(source=path)
  bad = common.ErrorPolicy(on_error, report)
  examples = examples if examples is not None else []
  labels_required = split != "test"
  text = common.read_utf8(path)
  if not text.strip():
    raise common.TaskDataError(path, None, "the file is empty; expected a JSON list of [[sentences], [questions], "
                               "id] documents")
  try:
    docs = json.loads(text)
  except json.JSONDecodeError as e:
    raise common.TaskDataError(path, e.lineno, f"invalid JSON: {e.msg}") from None
  if not isinstance(docs, list):
    raise common.TaskDataError(path, None, "expected a JSON list of [[sentences], [questions], id] documents")
  for d_i, doc in enumerate(docs):
    where = f"document {d_i}"
    if not (isinstance(doc, list) and len(doc) >= 2 and isinstance(doc[0], list) and isinstance(doc[1], list)):
      bad(path, None, "bad document", f"{where}: expected [[sentences], [questions], id]")
      continue
    context = TURN_SEPARATOR.join(str(s) for s in doc[0])
    doc_id = str(doc[2]) if len(doc) > 2 else str(d_i)
    for q_i, q in enumerate(doc[1]):
      qwhere = f"{where} ({doc_id}) question {q_i}"
      if not isinstance(q, dict) or not isinstance(q.get("choice"), list) or "question" not in q:
        bad(path, None, "bad question", f"{qwhere}: expected {{question, choice, answer, id}}")
        continue
      choices = [str(c) for c in q["choice"]]
      label = None
      if q.get("answer") not in (None, ""):   # an empty answer is none (an unlabelled test question)
        if q["answer"] not in choices:
          bad(path, None, "answer not among the choices", f"{qwhere}: {q['answer']!r} not in {choices}")
          continue
        label = choices.index(q["answer"])
      elif labels_required:
        bad(path, None, "missing answer", qwhere)
        continue
      ex = MultipleChoiceExample(guid=f"{path}:{doc_id}:{q_i}", context=context, question=str(q["question"]),
                                 choices=choices, label=label, id=dataset_id(q.get("id"), f"{doc_id}-{q_i}"))
      if check_example(ex, lambda s, l, r, d="": bad(s, l, r, f"{qwhere}: {d}"), path, None):
        examples.append(ex)
  return examples, report


def read_split(data_dir: str, split: str, on_error: str = "raise") -> common.ExampleSet:
  files = split_files(data_dir, split)
  source = "+".join(files)
  report = common.SkipReport(source=source)
  examples = []
  for p in files:
    read_c3_file(p, split, on_error, examples, report)
  return common.finish(examples, source, split, report)


class C3Task(MultipleChoiceTask):
  """task=c3: multiple choice over C3's JSON files."""
  name = "c3"

  def _read_split(self, data_dir, split, on_error):
    return read_split(data_dir, split, on_error)
