"""NER from CoNLL files or TFDS conll2003: sentences of words with BIO / BIOES tags -> token features.

    es = read_conll(path, label_list=None, on_error="raise")         # one file
    es = read_conll_split(data_dir, "train")                          # train.txt / dev.txt / test.txt
    es = read_conll2003_tfds("train", data_dir=None)                  # TFDS conll2003 (train/dev/test)
    labels = infer_label_list([train_es, dev_es])                     # "O" first, then by type: B, I, E, S
    labels = read_label_file(os.path.join(data_dir, "labels.txt"))    # or a fixed order from a file
    feats = convert_examples_to_features(es, tokenizer, max_seq_length, labels)
    tags = predictions_to_tags(es, feats, pred_ids, labels)           # per-word tag strings, per sentence

CoNLL format: one word per line, whitespace-separated columns, the word first and the tag in the LAST column
(so CoNLL-2003's `word POS chunk NER` and two-column `char tag` Chinese files both work); a blank line ends a
sentence; `-DOCSTART-` lines (document boundaries) are dropped. A tag outside `label_list`, or a line without
a tag in a labelled file, raises TaskDataError naming file and line (or is a counted skip of the sentence with
on_error="skip"). Without a label list (no labels.txt: the tags are inferred from the files) every tag must
fit the BIO / IOB / BIOES scheme, "O" or B-/I-/E-/S-<type>; other tags (X-FOO, PER) are the same error,
with a labels.txt listing the tags as the way to use them.

Features, one row per window ([CLS] sub-tokens [SEP]):
  input_ids, input_mask, segment_ids  int32 [N, T]
  label_ids     int32 [N, T]  the word's tag id on its FIRST sub-token; -100 (IGNORE_INDEX) on other
                              sub-tokens, [CLS], [SEP], padding and unlabelled data
  word_ids      int32 [N, T]  index of the word in its sentence at its first sub-token, -1 elsewhere
  example_index int32 [N]
A sentence longer than max_seq_length - 2 sub-tokens is split at word boundaries into consecutive windows
(each word is predicted exactly once); a single word with more sub-tokens than fit is truncated.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Dict, Iterable, List, Optional, Sequence

import numpy as np

from bert_jax.finetune.tasks import common

DOCSTART = "-DOCSTART-"
CONLL2003_LABELS = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]


@dataclasses.dataclass
class NerExample:
  guid: str                            # "<file>:<line of the first word>"
  words: List[str]
  labels: Optional[List[str]] = None   # None for unlabelled sentences


SCHEME_PREFIXES = ("B", "I", "E", "S")   # BIO = IOB2, IOB1 and BIOES tags: O or <prefix>-<type>


def is_scheme_tag(tag: str) -> bool:
  """True for "O" and for B-/I-/E-/S-<type> with a non-empty type (e.g. B-PER, I-MISC, S-LOC)."""
  if tag == "O":
    return True
  prefix, sep, entity_type = tag.partition("-")
  return bool(sep) and prefix in SCHEME_PREFIXES and bool(entity_type.strip("-"))


def read_conll(path: str, label_list: Optional[Sequence[str]] = None, split: str = "train",
               on_error: str = "raise", labels_required: Optional[bool] = None) -> common.ExampleSet:
  """Reads a CoNLL file (see the module docstring).

  labels_required: default True for train/dev, False for test (a test file may have only words; if it has
  tags they are read).
  """
  if labels_required is None:
    labels_required = split != "test"
  report = common.SkipReport(source=path)
  bad = common.ErrorPolicy(on_error, report)
  label_set = set(label_list) if label_list is not None else None
  examples: List[NerExample] = []
  words: List[str] = []
  tags: List[Optional[str]] = []
  first_line = None
  broken = False

  def flush():
    nonlocal words, tags, first_line, broken
    if words and not broken:
      have = [t is not None for t in tags]
      if all(have):
        examples.append(NerExample(f"{path}:{first_line}", words, list(tags)))
      elif not any(have):
        examples.append(NerExample(f"{path}:{first_line}", words, None))
      else:
        bad(path, first_line, "mixed tagged and untagged lines", "a sentence has lines without a tag")
    words, tags, first_line, broken = [], [], None, False

  text = common.read_utf8(path)
  for n, line in enumerate(text.split("\n"), start=1):
    parts = line.split()
    if not parts:
      flush()
      continue
    if parts[0] == DOCSTART:
      flush()
      continue
    if first_line is None:
      first_line = n
    if broken:
      continue
    if len(parts) < 2:
      if labels_required:
        bad(path, n, "missing tag column", f"line {line.strip()!r} has no tag (expected 'word ... tag')")
        broken = True
        continue
      words.append(parts[0])
      tags.append(None)
      continue
    tag = parts[-1]
    if label_set is not None and tag not in label_set:
      bad(path, n, "label not in label set", f"tag {tag!r} not in {sorted(label_set)}")
      broken = True
      continue
    if label_set is None and not is_scheme_tag(tag):
      bad(path, n, "tag outside the BIO/BIOES scheme", f"tag {tag!r}; expected O or B-, I-, E-, S- + a type",
          f"list every tag in {os.path.join(os.path.dirname(path), 'labels.txt')} to use other tags")
      broken = True
      continue
    words.append(parts[0])
    tags.append(tag)
  flush()
  return common.finish(examples, path, split, report)


def read_conll_split(data_dir: str, split: str, label_list: Optional[Sequence[str]] = None,
                     on_error: str = "raise") -> common.ExampleSet:
  names = {"train": ["train.txt"], "dev": ["dev.txt", "valid.txt", "validation.txt"],
           "test": ["test.txt"]}.get(split, [f"{split}.txt"])
  path = common.find_file(data_dir, names, f"NER {split}")
  return read_conll(path, label_list, split, on_error)


def read_conll2003_tfds(split: str, data_dir: Optional[str] = None, download: bool = False,
                       on_error: str = "raise") -> common.ExampleSet:
  """TFDS conll2003 (splits train, dev, test); tags are the ClassLabel names (IOB2)."""
  tsplit = {"validation": "dev", "valid": "dev"}.get(split, split)
  source = f"tfds:conll2003:{tsplit}"
  ds, info = common.load_tfds("conll2003", tsplit, data_dir, download)
  names = list(info.features["ner"].feature.names)
  report = common.SkipReport(source=source)
  bad = common.ErrorPolicy(on_error, report)
  examples = []
  for n, ex in enumerate(ds):
    words = [common.as_text(w, source) for w in ex["tokens"]]
    if not words:
      continue
    tag_ids = [int(t) for t in ex["ner"]]
    if len(tag_ids) != len(words):
      bad(source, n, "tag count mismatch", f"{len(words)} tokens but {len(tag_ids)} ner tags")
      continue
    if any(not 0 <= t < len(names) for t in tag_ids):
      bad(source, n, "label not in label set", f"tag ids {tag_ids} outside ClassLabel {names}")
      continue
    examples.append(NerExample(f"{source}:{n}", words, [names[t] for t in tag_ids]))
  return common.finish(examples, source, tsplit, report)


def read_label_file(path: str) -> List[str]:
  """Tags from a labels.txt (whitespace-separated, usually one per line); must contain "O", no repeats."""
  with open(path, encoding="utf-8-sig") as f:
    labels = f.read().split()
  if "O" not in labels:
    raise common.TaskDataError(path, None, f"the label list {labels} has no 'O' tag")
  dup = sorted({l for l in labels if labels.count(l) > 1})
  if dup:
    raise common.TaskDataError(path, None, f"repeated tags {dup}")
  return labels


_PREFIX_ORDER = {"B": 0, "I": 1, "E": 2, "S": 3}


def infer_label_list(example_sets: Iterable) -> List[str]:
  """All tags seen: "O" first, then grouped by entity type (B, I, E, S within a type)."""
  seen = set()
  for es in example_sets:
    for ex in es:
      if ex.labels:
        seen.update(ex.labels)
  if not seen:
    raise ValueError("no tagged sentences to take the label list from")
  rest = sorted((t for t in seen if t != "O"),
                key=lambda t: (t.partition("-")[2], _PREFIX_ORDER.get(t.partition("-")[0], 9), t))
  return ["O"] + rest


def convert_examples_to_features(examples: Sequence[NerExample], tokenizer, max_seq_length: int,
                                 label_list: Sequence[str]) -> Dict[str, np.ndarray]:
  """Windows of first-sub-token-labelled tokens (see the module docstring)."""
  common.check_max_seq_length(max_seq_length)
  label_map = {l: i for i, l in enumerate(label_list)}
  for ex in examples:  # tags first: a bad tag fails before any tokenisation work
    for w_i, tag in enumerate(ex.labels or ()):
      if tag not in label_map:
        raise common.TaskDataError(ex.guid, None, f"word {w_i} tag {tag!r} not in the label set "
                                   f"{list(label_list)}")
    if ex.labels is not None and len(ex.labels) != len(ex.words):
      raise common.TaskDataError(ex.guid, None, f"{len(ex.words)} words but {len(ex.labels)} tags")
  cls_id, sep_id = common.special_ids(tokenizer)
  unk = tokenizer.vocab.get("[UNK]", 0)
  budget = max_seq_length - 2
  id_rows, lab_rows, word_rows, ex_rows = [], [], [], []
  for ex_i, ex in enumerate(examples):
    cur_ids, cur_labs, cur_words = [], [], []

    def flush():
      if not cur_ids:
        return
      id_rows.append([cls_id] + cur_ids + [sep_id])
      lab_rows.append([common.IGNORE_INDEX] + cur_labs + [common.IGNORE_INDEX])
      word_rows.append([-1] + cur_words + [-1])
      ex_rows.append(ex_i)
      cur_ids.clear()
      cur_labs.clear()
      cur_words.clear()

    for w_i, word in enumerate(ex.words):
      ids = tokenizer.encode(word) or [unk]  # a word of dropped characters still gets a slot
      ids = ids[:budget]
      if ex.labels is not None:
        lab = label_map[ex.labels[w_i]]
      else:
        lab = common.IGNORE_INDEX
      if len(cur_ids) + len(ids) > budget:
        flush()
      cur_ids.extend(ids)
      cur_labs.extend([lab] + [common.IGNORE_INDEX] * (len(ids) - 1))
      cur_words.extend([w_i] + [-1] * (len(ids) - 1))
    flush()
  seg_rows = [[0] * len(r) for r in id_rows]
  out = common.model_inputs(id_rows, seg_rows, max_seq_length)
  out["label_ids"] = common.to_padded_arrays(lab_rows, max_seq_length, pad=common.IGNORE_INDEX)
  out["word_ids"] = common.to_padded_arrays(word_rows, max_seq_length, pad=-1)
  out["example_index"] = np.asarray(ex_rows, dtype=np.int32).reshape(-1)
  return out


def predictions_to_tags(examples: Sequence[NerExample], features: Dict[str, np.ndarray], pred_ids,
                        label_list: Sequence[str]) -> List[List[str]]:
  """Per-word predicted tags for every sentence, from per-token ids [N, T] (argmax of the logits)."""
  pred_ids = np.asarray(pred_ids)
  word_ids = features["word_ids"]
  if pred_ids.shape != word_ids.shape:
    raise ValueError(f"predictions {pred_ids.shape} do not match features {word_ids.shape}")
  out = [["O"] * len(ex.words) for ex in examples]
  for row, ex_i in enumerate(features["example_index"].tolist()):
    pos = np.flatnonzero(word_ids[row] >= 0)
    for p in pos:
      out[ex_i][int(word_ids[row, p])] = label_list[int(pred_ids[row, p])]
  return out


def write_predictions(path: str, examples: Sequence[NerExample], pred_tags: Sequence[Sequence[str]]) -> str:
  """CoNLL output `word gold pred` (or `word pred` for unlabelled sentences)."""
  from bert_jax.evaluation import ner as ner_eval  # pylint: disable=g-import-not-at-top
  labelled = all(ex.labels is not None for ex in examples)
  golds = [ex.labels for ex in examples] if labelled else None
  return ner_eval.write_conll(path, [ex.words for ex in examples], golds, pred_tags)

