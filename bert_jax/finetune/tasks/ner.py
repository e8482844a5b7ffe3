"""NER from CoNLL files or TFDS conll2003: sentences of words with BIO / BIOES tags -> token features.

    es = read_conll(path, label_list=None, on_error="raise")         # one file
    es = read_conll_split(data_dir, "train")                          # train.txt / dev.txt / test.txt
                                                                      # (or eng.train / eng.testa / eng.testb)
    es = read_conll2003_tfds("train", data_dir=None)                  # TFDS conll2003 (train/dev/test)
    labels = infer_label_list([train_es, dev_es])                     # "O" first, then by type: B, I, E, S
    labels = read_label_file(os.path.join(data_dir, "labels.txt"))    # or a fixed order from a file
    feats = convert_examples_to_features(es, tokenizer, max_seq_length, labels)
    tags = predictions_to_tags(es, feats, pred_ids, labels)           # per-word tag strings, per sentence

CoNLL format: one word per line, whitespace-separated columns, the word first and the tag in the LAST column
(so CoNLL-2003's `word POS chunk NER` and two-column `char tag` Chinese files both work; a tab-separated line
whose character is a whitespace one, "\u3000\tO", is that character and its tag); a blank line ends a
sentence; `-DOCSTART-` lines (document boundaries) are dropped. A tag outside `label_list`, or a line without
a tag in a labelled file, raises TaskDataError naming file and line (or is a counted skip of the sentence with
on_error="skip"). Without a label list (no labels.txt: the tags are inferred from the files) every tag must
fit the BIO / IOB / BIOES scheme, "O" or B-/I-/E-/S-<type>; other tags (X-FOO, PER) are the same error,
with a labels.txt listing the tags as the way to use them. With the CRF or the strict scorer and the BIO
scheme, IOB1 files (CoNLL-2003's original release: entities start with I-X) are read as IOB2, whose paths the
CRF allows and whose entities the strict scorer counts.

Features, one row per window ([CLS] sub-tokens [SEP]):
  input_ids, input_mask, segment_ids  int32 [N, T]
  label_ids     int32 [N, T]  the word's tag id on its FIRST sub-token; -100 (IGNORE_INDEX) on other
                              sub-tokens, [CLS], [SEP], padding and unlabelled data
  word_ids      int32 [N, T]  index of the word in its sentence at its first sub-token, -1 elsewhere
  example_index int32 [N]
A sentence longer than max_seq_length - 2 sub-tokens is split at word boundaries into consecutive windows
(each word is predicted exactly once); a single word with more sub-tokens than fit is truncated.

NerTask is the task kind: a tag per word's first sub-token (heads.BertForTokenClassification, softmax
cross-entropy per labelled token) or, with crf=True, a linear-chain CRF over the words with the scheme's
transition constraints (heads.BertForTokenClassificationCRF, sentence NLL); entity-level F1. Both heads pack
(config.packing): the CRF runs one chain per example of a packed row (models/crf.py's packed_* functions).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Dict, Iterable, List, Optional, Sequence

import jax.numpy as jnp
import numpy as np

from bert_jax.evaluation import ner as ner_eval
from bert_jax.finetune.tasks import common
from bert_jax.finetune.tasks.base import Task, softmax_sums
from bert_jax.input_pipeline import tokenization
from bert_jax.models import crf as crf_lib
from bert_jax.models import heads

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


def iob1_to_iob2(tags: Sequence[str]) -> List[str]:
  """IOB1 (CoNLL-2003's original files: an entity starts with I-X, B-X only right after another X entity) as
  IOB2 / BIO (every entity starts with B-X). IOB2 tags, BIOES tags and tags outside the scheme are unchanged;
  conlleval reads the same entities from both."""
  out, prev = [], "O"
  for t in tags:
    if t.startswith("I-") and not (prev[:2] in ("B-", "I-") and prev[2:] == t[2:]):
      t = "B-" + t[2:]
    out.append(t)
    prev = t
  return out


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
    if len(parts) == 1 and "\t" in line:
      # a character-per-line Chinese file's whitespace character ("\u3000\tO"): split() loses the word
      fields = line.rstrip("\r").split("\t")
      if len(fields) >= 2 and fields[0] and not fields[0].strip() and fields[-1].strip():
        parts = [fields[0], fields[-1].strip()]
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
  # train.txt / dev.txt (valid.txt) / test.txt, or the English CoNLL-2003 release's own names (eng.testa is
  # its development set, eng.testb its test set)
  names = {"train": ["train.txt", "eng.train"], "dev": ["dev.txt", "valid.txt", "validation.txt", "eng.testa"],
           "test": ["test.txt", "eng.testb"]}.get(split, [f"{split}.txt"])
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
      ids = _encode_word(tokenizer, ex.words, w_i) or [unk]  # a word of dropped characters still gets a slot
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


def _encode_word(tokenizer, words: Sequence[str], w_i: int) -> List[int]:
  """Ids of word `w_i`. WordPiece tokenizes each word alone; a tokenizer.json's BPE sees the space that the
  sentence's text has before it (none between CJK characters, as `entity_text` joins them), so "York" in "New
  York" is "ĠYork", as in running text."""
  if not hasattr(tokenizer, "encode_word"):
    return tokenizer.encode(words[w_i])
  after_space = w_i > 0 and not (_is_cjk_char(words[w_i]) or _is_cjk_char(words[w_i - 1]))
  return tokenizer.encode_word(words[w_i], after_space)


def _is_cjk_char(word: str) -> bool:
  return len(word) == 1 and tokenization.is_chinese_char(ord(word))


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
  labelled = all(ex.labels is not None for ex in examples)
  golds = [ex.labels for ex in examples] if labelled else None
  return ner_eval.write_conll(path, [ex.words for ex in examples], golds, pred_tags)



# --------------------------------------------------------------------------------------------------------
# Raw text.
# --------------------------------------------------------------------------------------------------------
def split_words(text: str) -> List[str]:
  """NER input words: whitespace-separated, with every CJK character a word of its own (as the Chinese
  CoNLL files are character-level)."""
  return tokenization.split_isolating(text, lambda ch: tokenization.is_chinese_char(ord(ch)))


def entity_text(words: Sequence[str]) -> str:
  """An entity's surface text from its words: CJK characters joined directly ("北", "京" -> "北京"), any other
  words with spaces ("New", "York" -> "New York")."""
  cjk = all(len(w) == 1 and tokenization.is_chinese_char(ord(w)) for w in words)
  return ("" if cjk else " ").join(words)


# --------------------------------------------------------------------------------------------------------
# Task kind.
# --------------------------------------------------------------------------------------------------------
class NerTask(Task):
  """Tagging (CoNLL files or TFDS conll2003); see the module docstring."""
  name = "ner"
  kind = "ner"
  head = "token_classification"
  main_metric = "f1"
  tfds_name = "conll2003"
  packs = True          # per-token labels and logits lie in the packed row beside the tokens
  token_level = True

  def __init__(self, label_list: Optional[Sequence[str]] = None, mode: str = "conlleval", scheme: str = "BIO",
               on_error: str = "raise", crf: bool = False):
    super().__init__(on_error)
    self.label_list = list(label_list) if label_list is not None else None
    self.mode, self.scheme = mode, scheme
    self.crf = bool(crf)
    # The CRF runs over the words' first sub-tokens, which the features mark in word_mask (per token: packing
    # lays it out beside input_ids; the window flags are per example and go to the example's slot).
    self.extra_input_keys = ("word_mask", "window_continues", "window_continued") if self.crf else ()
    self.extra_token_keys = ("word_mask",) if self.crf else ()

  @classmethod
  def from_config(cls, name, config, label_list=None):
    return cls.create(name, on_error=config.on_error, label_list=label_list, scheme=config.ner_scheme,
                      mode=config.ner_mode, crf=bool(config.get("crf", False)))

  @classmethod
  def from_info(cls, name, info):
    return cls.create(name, label_list=info["label_list"], scheme=info.get("ner_scheme", "BIO"),
                      mode=info.get("ner_mode", "conlleval"), crf=bool(info.get("crf", False)))

  def head_options(self):
    return {"crf": self.crf}

  def prepare(self, data_dir=None, use_tfds=False, tfds_data_dir=None, download=False, **_):
    if self.label_list is not None:
      return self
    if use_tfds:
      # TFDS conll2003 carries its tag names.
      self.label_list = list(CONLL2003_LABELS)
      return self
    if data_dir is None:
      raise ValueError("data_dir is required to infer the NER label list")
    labels_file = os.path.join(data_dir, "labels.txt")
    if os.path.exists(labels_file):  # an explicit label file fixes the order (and ids) of the tags
      self.label_list = self._with_crf_tags(read_label_file(labels_file))
      return self
    sets = [self._as_crf_tags(read_conll_split(data_dir, "train", None, self.on_error))]
    try:
      sets.append(self._as_crf_tags(read_conll_split(data_dir, "dev", None, self.on_error)))
    except FileNotFoundError:
      pass
    self.label_list = self._with_crf_tags(infer_label_list(sets))
    return self

  def _with_crf_tags(self, label_list):
    """With the CRF and the BIO scheme, B-X and I-X for every type X of `label_list` (missing ones appended, so
    the ids of the listed tags stay): IOB1 files become IOB2 (_as_crf_tags), which may write B-X where the files
    never do, and a test file's I-X must still be readable."""
    if not self._reads_iob2():
      return label_list
    out = list(label_list)
    for t in label_list:
      if t[:2] in ("B-", "I-"):
        out += [x for x in (f"B-{t[2:]}", f"I-{t[2:]}") if x not in out]
    return out

  def _reads_iob2(self) -> bool:
    """IOB1 files are read as IOB2: with the BIO scheme, under the CRF or the strict scorer."""
    return (self.crf or self.mode == "strict") and self.scheme.upper() == "BIO"

  def _as_crf_tags(self, example_set):
    """With the CRF and the BIO scheme, IOB1 tags (CoNLL-2003's original files) as IOB2: the CRF's BIO
    constraints forbid I-X after O, so an IOB1 gold path would be impossible (a loss of ~1e4 per entity and
    entities never predicted). So too with mode="strict": its IOB2 scorer drops every entity that starts with
    I-X, gold and predicted (an IOB1 file scored near 0). The softmax head under conlleval reads the tags as
    they are (conlleval reads IOB1)."""
    if self._reads_iob2():
      for ex in example_set:
        if ex.labels is not None:
          ex.labels = iob1_to_iob2(ex.labels)
    return example_set

  def read(self, split, data_dir=None, *, use_tfds=False, tfds_data_dir=None, download=False, on_error=None):
    if use_tfds:
      return read_conll2003_tfds(split, tfds_data_dir or data_dir, download, on_error or self.on_error)
    if data_dir is None:
      raise ValueError("data_dir is required to read CoNLL files")
    return self._as_crf_tags(read_conll_split(data_dir, split, self.label_list, on_error or self.on_error))

  def featurize(self, example_set, tokenizer, max_seq_length, is_training=False):
    self._require_labels()
    feats = convert_examples_to_features(example_set, tokenizer, max_seq_length, self.label_list)
    feats["word_mask"] = (feats["word_ids"] >= 0).astype(np.int32)   # [N, T]: first sub-token of each word
    # [N]: the row is a window after (continues) / before (is continued by) another of the same sentence; the
    # CRF lifts its start / end constraints there (a window may begin or end inside an entity).
    ex = feats["example_index"]
    same_next = np.zeros(len(ex), bool)
    same_next[:-1] = ex[:-1] == ex[1:]
    feats["window_continued"] = same_next.astype(np.int32)
    feats["window_continues"] = np.concatenate([[False], same_next[:-1]]).astype(np.int32)
    return feats

  def build_head(self, bert_cfg, dropout_rate=None):
    if self.crf:
      return heads.BertForTokenClassificationCRF(bert_cfg, tuple(self.label_list), self.scheme,
                                                 dropout_rate=dropout_rate)
    return heads.BertForTokenClassification(bert_cfg, self.num_labels, dropout_rate=dropout_rate)

  def loss_weights(self, batch):
    """[B, T]: the labelled tokens (a word's first sub-token) of the real rows."""
    w = batch["example_weight"].astype(jnp.float32)
    return (batch["label_ids"] != common.IGNORE_INDEX).astype(jnp.float32) * w[:, None]

  def loss_sums(self, outputs, batch):
    w = self.loss_weights(batch)
    if "crf_transitions" in outputs:
      # CRF: the sentence NLL summed, over the same denominator as the softmax head (labelled words), so the
      # loss reads per word. Accuracy from the Viterbi path when decoded (eval), else from the emissions.
      # Packed rows (crf_start [B, E, K]): each example its own chain, ll [B, E]; the rows' weights [B] cover
      # their examples (an empty slot's ll is 0).
      labels = batch["label_ids"]
      label_mask = labels != common.IGNORE_INDEX
      args = (outputs["crf_transitions"], outputs["crf_start"], outputs["crf_end"])
      if outputs["crf_start"].ndim == 3:
        ll = crf_lib.packed_log_likelihood(outputs["logits"], labels, label_mask, batch["input_mask"], *args)
      else:
        ll = crf_lib.crf_log_likelihood(outputs["logits"], labels, label_mask, *args)
      row_weight = batch["example_weight"].astype(jnp.float32)
      row_weight = row_weight.reshape(row_weight.shape + (1,) * (ll.ndim - row_weight.ndim))
      pred = outputs["crf_tags"] if "crf_tags" in outputs else jnp.argmax(outputs["logits"], -1)
      correct = (pred == labels).astype(jnp.float32)
      return {"task_loss_sum": -jnp.sum(ll * row_weight),
              "task_weight_sum": jnp.sum(w), "task_correct_sum": jnp.sum(correct * w)}
    return softmax_sums(outputs["logits"], batch["label_ids"], w)

  def predict(self, example_set, features, outputs):
    if "crf_tags" in outputs:   # the CRF head's Viterbi path
      return predictions_to_tags(example_set, features, np.asarray(outputs["crf_tags"]), self.label_list)
    logits = np.asarray(outputs["logits"])
    return predictions_to_tags(example_set, features, np.argmax(logits, axis=-1), self.label_list)

  def evaluate(self, example_set, predictions, split=None):
    if any(ex.labels is None for ex in example_set):
      return {}
    return ner_eval.evaluate([ex.labels for ex in example_set], predictions, self.mode, self.scheme)

  def write_predictions(self, output_dir, split, example_set, predictions):
    return [write_predictions(os.path.join(output_dir, f"{split}_predictions.txt"), example_set, predictions)]

  def text_examples(self, texts, text_pairs=None):
    """A text is split into words by split_words; a list of strings is taken as the words."""
    examples = []
    for i, t in enumerate(texts):
      words = split_words(t) if isinstance(t, str) else list(t)
      if not words:
        raise common.PredictInputError(f"text {i} (line {i + 1} of an input file) has no words: NER tags the "
                                       "words of each text; drop the empty line or give it text")
      examples.append(NerExample(guid=f"input:{i}", words=words, labels=None))
    return examples

  def readable_predictions(self, examples, features, outputs):
    tags = self.predict(examples, features, outputs)
    out = []
    for ex, tg in zip(examples, tags):
      ents = []
      for type_, b, e in ner_eval.get_entities(tg, self.mode, self.scheme):
        ents.append({"type": type_, "start": b, "end": e, "text": entity_text(ex.words[b:e + 1])})
      out.append({"words": ex.words, "tags": tg, "entities": ents})
    return out
