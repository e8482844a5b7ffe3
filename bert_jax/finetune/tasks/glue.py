"""GLUE readers: the standard GLUE folder layout (download_glue_data.py) and TFDS `glue/<config>`.

    read_glue(task, split, data_dir, on_error="raise") -> ExampleSet of ClassificationExample
    read_glue_tfds(task, split, data_dir=None, download=False) -> ExampleSet

`task`: cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte, wnli, ax. `split`: train, dev, test; MNLI also
dev_matched, dev_mismatched, test_matched, test_mismatched ("dev"/"test" mean the matched ones); AX only test.
`data_dir` is the GLUE root (holding CoLA/, SST-2/, MNLI/, ..., diagnostic/) or the task folder itself.

Column layouts of the GLUE release (0-based; Google's run_classifier processors use the same):
  task   train/dev                            test (header row first, column 0 = index)
  CoLA   no header; label 1, sentence 3       index, sentence 1
  SST-2  header sentence, label: 0, 1         index, sentence 1
  MRPC   header Quality, #1 ID, #2 ID,        index, #1 ID, #2 ID, #1 String 3, #2 String 4
         #1 String, #2 String: label 0, a 3, b 4
         (without the script's train/dev/test.tsv: MRPC's own msr_paraphrase_train.txt split by dev_ids.tsv,
         msr_paraphrase_test.txt numbered from 0, as download_glue_data.py does)
  STS-B  header; a 7, b 8, score 9            a 7, b 8
  QQP    header id,qid1,qid2,q1,q2,is_dup:    id, question1 1, question2 2
         a 3, b 4, label 5
  MNLI   header; a 8, b 9, label last         a 8, b 9
  QNLI/RTE/WNLI  header index, a, b, label:   index, a 1, b 2
         a 1, b 2, label last
  AX     diagnostic/diagnostic.tsv (or AX/test.tsv): index, sentence1 1, sentence2 2 (no labels)
Labels are checked against the task's label set (STS-B's scores: a number in [0, 5]); a bad row raises TaskDataError("<file>:<line>: ...") or,
with on_error="skip", is counted in ExampleSet.skipped. Quotes are literal (QUOTE_NONE) as in Google's code.
QQP's train/dev files of the GLUE release hold a few broken rows (a question with a line break inside splits
its row into two short ones); like Hugging Face's QQP processor, rows with missing columns are skipped there
even with on_error="raise", counted and reported as an input warning, as long as they are under
QQP_BROKEN_ROWS_LIMIT of the rows (more means another file, and the first one is the usual error).

GlueTask is the task kind of all ten names: GLUE's metrics per task, its fixed label order and its
leaderboard files. GLUE's AX diagnostic is predicted by the MNLI model: it is MNLI's third test split "ax"
(<glue root>/diagnostic/diagnostic.tsv or TFDS glue/ax -> AX.tsv); get_task("ax") reads the same file alone.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Dict, List, Optional, Tuple

import numpy as np

from bert_jax.evaluation import glue as glue_metrics
from bert_jax.fileio import write_text_atomic
from bert_jax.finetune.tasks import common
from bert_jax.finetune.tasks.classification import ClassificationExample, SequenceTask


@dataclasses.dataclass(frozen=True)
class Layout:
  header: bool
  text_a: int
  text_b: Optional[int] = None
  label: Optional[int] = None  # -1 = last column
  index: Optional[int] = None  # test files: the submission id column

  def min_columns(self) -> int:
    cols = [c for c in (self.text_a, self.text_b, self.label, self.index) if c is not None and c >= 0]
    # A "last column" label must come after every text column.
    return max(cols) + (2 if self.label == -1 else 1)


@dataclasses.dataclass(frozen=True)
class GlueSpec:
  name: str
  folders: Tuple[str, ...]               # task folder names in the GLUE root
  labelled: Optional[Layout]             # train/dev layout
  test: Layout
  tfds_text: Tuple[str, ...]             # TFDS feature names for text_a (, text_b)
  splits: Dict[str, str]                 # our split -> file name
  tfds_splits: Dict[str, str]            # our split -> TFDS split

  @property
  def label_list(self) -> Optional[List[str]]:
    return glue_metrics.GLUE_LABELS[self.name]

  @property
  def is_regression(self) -> bool:
    return self.label_list is None


QQP_BROKEN_ROWS_LIMIT = 0.001  # fraction of a QQP train/dev file's rows that may be known-broken (short) rows
STSB_RANGE = (0.0, 5.0)    # STS-B's gold similarity scores (Cer et al. 2017); a score outside is a bad row


_STD_SPLITS = {"train": "train.tsv", "dev": "dev.tsv", "test": "test.tsv"}
_STD_TFDS = {"train": "train", "dev": "validation", "test": "test"}
_MNLI_SPLITS = {"train": "train.tsv", "dev_matched": "dev_matched.tsv", "dev_mismatched": "dev_mismatched.tsv",
                "test_matched": "test_matched.tsv", "test_mismatched": "test_mismatched.tsv"}
_MNLI_TFDS = {"train": "train", "dev_matched": "validation_matched", "dev_mismatched": "validation_mismatched",
              "test_matched": "test_matched", "test_mismatched": "test_mismatched"}
_NLI_PAIR = Layout(header=True, text_a=1, text_b=2, label=-1)
_NLI_TEST = Layout(header=True, index=0, text_a=1, text_b=2)

GLUE_TASKS: Dict[str, GlueSpec] = {s.name: s for s in [
    GlueSpec("cola", ("CoLA",), Layout(header=False, text_a=3, label=1), Layout(True, index=0, text_a=1),
             ("sentence",), _STD_SPLITS, _STD_TFDS),
    GlueSpec("sst2", ("SST-2", "SST2"), Layout(header=True, text_a=0, label=1), Layout(True, index=0, text_a=1),
             ("sentence",), _STD_SPLITS, _STD_TFDS),
    GlueSpec("mrpc", ("MRPC",), Layout(header=True, text_a=3, text_b=4, label=0),
             Layout(True, index=0, text_a=3, text_b=4), ("sentence1", "sentence2"), _STD_SPLITS, _STD_TFDS),
    GlueSpec("stsb", ("STS-B", "STSB"), Layout(header=True, text_a=7, text_b=8, label=9),
             Layout(True, index=0, text_a=7, text_b=8), ("sentence1", "sentence2"), _STD_SPLITS, _STD_TFDS),
    GlueSpec("qqp", ("QQP",), Layout(header=True, text_a=3, text_b=4, label=5),
             Layout(True, index=0, text_a=1, text_b=2), ("question1", "question2"), _STD_SPLITS, _STD_TFDS),
    GlueSpec("mnli", ("MNLI",), Layout(header=True, text_a=8, text_b=9, label=-1),
             Layout(True, index=0, text_a=8, text_b=9), ("premise", "hypothesis"), _MNLI_SPLITS, _MNLI_TFDS),
    GlueSpec("qnli", ("QNLI",), _NLI_PAIR, _NLI_TEST, ("question", "sentence"), _STD_SPLITS, _STD_TFDS),
    GlueSpec("rte", ("RTE",), _NLI_PAIR, _NLI_TEST, ("sentence1", "sentence2"), _STD_SPLITS, _STD_TFDS),
    GlueSpec("wnli", ("WNLI",), _NLI_PAIR, _NLI_TEST, ("sentence1", "sentence2"), _STD_SPLITS, _STD_TFDS),
    GlueSpec("ax", ("diagnostic", "AX"), None, _NLI_TEST, ("premise", "hypothesis"),
             {"test": "diagnostic.tsv"}, {"test": "test"}),
]}

_SPLIT_ALIASES = {"mnli": {"dev": "dev_matched", "test": "test_matched", "validation_matched": "dev_matched",
                           "validation_mismatched": "dev_mismatched"},
                  "*": {"validation": "dev", "eval": "dev"}}


def get_spec(task: str) -> GlueSpec:
  key = glue_metrics.canonical_task(task)
  if key.startswith("mnli"):
    key = "mnli"
  return GLUE_TASKS[key]


def canonical_split(spec: GlueSpec, split: str) -> str:
  split = _SPLIT_ALIASES.get(spec.name, {}).get(split, split)
  split = _SPLIT_ALIASES["*"].get(split, split)
  if split not in spec.splits:
    raise ValueError(f"GLUE {spec.name} has no split {split!r}; splits: {sorted(spec.splits)}")
  return split


def task_dir(spec: GlueSpec, data_dir: str) -> str:
  """The folder holding the task's TSVs: <data_dir>/<TaskFolder> if present, else data_dir itself."""
  for folder in spec.folders:
    p = os.path.join(data_dir, folder)
    if os.path.isdir(p):
      return p
  return data_dir


def _split_path(spec: GlueSpec, split: str, data_dir: str) -> str:
  d = task_dir(spec, data_dir)
  name = spec.splits[split]
  candidates = [name]
  if spec.name == "ax":
    candidates += ["AX.tsv", "test.tsv"]
  dirs = [d]
  if spec.name == "ax" and d == data_dir:
    # MNLI's run given the task folder (<glue root>/MNLI) predicts AX from the sibling <glue root>/diagnostic
    parent = os.path.dirname(os.path.normpath(data_dir))
    dirs += [os.path.join(parent, f) for f in spec.folders if os.path.isdir(os.path.join(parent, f))]
  for dd in dirs:
    for c in candidates:
      p = os.path.join(dd, c)
      if os.path.exists(p):
        return p
  raise FileNotFoundError(f"GLUE {spec.name} {split}: no {name} in {d} (expected the GLUE layout "
                          f"<data_dir>/{spec.folders[0]}/{name})")


MRPC_RAW = {"train": "msr_paraphrase_train.txt", "dev": "msr_paraphrase_train.txt", "test": "msr_paraphrase_test.txt"}


def _mrpc_raw(spec: GlueSpec, split: str, data_dir: str):
  """(path, dev id pairs or None) of MRPC's own release files when the GLUE script's {split}.tsv is absent:
  train/dev are msr_paraphrase_train.txt split by dev_ids.tsv ("#1 ID\t#2 ID" rows) as download_glue_data.py
  splits it; test is msr_paraphrase_test.txt (its labels ignored, index = row number, as the script writes)."""
  d = task_dir(spec, data_dir)
  if spec.name != "mrpc" or os.path.exists(os.path.join(d, spec.splits[split])):
    return None
  path = os.path.join(d, MRPC_RAW[split])
  if not os.path.exists(path):
    return None
  if split == "test":
    return path, None
  ids_path = os.path.join(d, "dev_ids.tsv")
  if not os.path.exists(ids_path):
    raise FileNotFoundError(f"GLUE mrpc {split}: {path} needs {ids_path} (the GLUE dev set's id pairs) to be split "
                            f"into train and dev, or give the GLUE script's {spec.splits[split]}")
  return path, {tuple(r[:2]) for _, r in common.read_tsv_lines(ids_path) if len(r) >= 2}


def read_glue(task: str, split: str, data_dir: str, on_error: str = "raise") -> common.ExampleSet:
  """Reads a GLUE split from the standard folder layout (see the module docstring)."""
  spec = get_spec(task)
  split = canonical_split(spec, split)
  raw = _mrpc_raw(spec, split, data_dir)
  path = raw[0] if raw else _split_path(spec, split, data_dir)
  is_test = split.startswith("test")
  layout = spec.test if is_test else spec.labelled
  if raw:   # MRPC's own files: train/dev rows filtered by dev_ids.tsv, test rows numbered
    layout = spec.labelled if raw[1] is not None else Layout(header=True, text_a=3, text_b=4)
  report = common.SkipReport(source=path)
  bad = common.ErrorPolicy(on_error, report)
  label_set = set(spec.label_list or [])
  examples: List[ClassificationExample] = []
  need = layout.min_columns()
  first = True
  broken = []   # QQP train/dev: (line, columns) of short rows, its known broken rows (see the module docstring)
  rows = 0
  for line, row in common.read_tsv_lines(path):
    if first:
      first = False
      if layout.header:
        continue
    rows += 1
    if len(row) < need:
      if spec.name == "qqp" and not is_test:
        broken.append((line, len(row)))
        continue
      bad(path, line, "missing columns", f"row has {len(row)} column(s), {spec.name} {split} needs at least "
          f"{need}", hint="--config.on_error=skip counts and skips such rows")
      continue
    if raw and raw[1] is not None and ((row[1].strip(), row[2].strip()) in raw[1]) != (split == "dev"):
      continue
    text_a = row[layout.text_a]
    text_b = row[layout.text_b] if layout.text_b is not None else None
    label = None
    if layout.label is not None:
      label = row[layout.label].strip()
      if spec.is_regression:
        try:
          label = float(label)
          if not math.isfinite(label):
            raise ValueError
        except ValueError:
          bad(path, line, "bad score", f"{row[layout.label]!r} is not a number (column {layout.label})")
          continue
        if not STSB_RANGE[0] <= label <= STSB_RANGE[1]:
          bad(path, line, "bad score", f"{row[layout.label].strip()!r} is outside STS-B's "
              f"[{STSB_RANGE[0]:g}, {STSB_RANGE[1]:g}] (column {layout.label})")
          continue
      elif label not in label_set:
        bad(path, line, "label not in label set",
            f"{label!r} is not one of {spec.label_list} (column {layout.label})")
        continue
    index = row[layout.index].strip() if layout.index is not None else str(len(examples))
    examples.append(ClassificationExample(guid=f"{path}:{line}", text_a=text_a, text_b=text_b, label=label,
                                          index=index))
  if broken:
    known = len(broken) <= max(10, QQP_BROKEN_ROWS_LIMIT * rows)
    if not known:   # too many to be QQP's broken rows: the usual error (or, skipping, the usual count)
      line, n = broken.pop(0)
      bad(path, line, "missing columns", f"row has {n} column(s), {spec.name} {split} needs at least {need}; "
          f"{len(broken) + 1} of {rows} rows are short, more than QQP's known broken rows",
          hint="--config.on_error=skip counts and skips such rows")
    for line, _ in broken:
      report.add("missing columns (QQP's known broken rows)" if known else "missing columns", f"{path}:{line}")
  return common.finish(examples, path, split, report)


def tfds_name(task: str) -> str:
  return f"glue/{get_spec(task).name}"


def read_glue_tfds(task: str, split: str, data_dir: Optional[str] = None, download: bool = False,
                   on_error: str = "raise") -> common.ExampleSet:
  """Reads `glue/<task>` from TFDS (`tfds.load(..., data_dir=data_dir)`). Label ids become GLUE label
  strings through the ClassLabel names; TFDS's -1 test labels become unlabelled examples."""
  spec = get_spec(task)
  split = canonical_split(spec, split)
  name = tfds_name(task)
  tsplit = spec.tfds_splits[split]
  source = f"tfds:{name}:{tsplit}"
  ds, info = common.load_tfds(name, tsplit, data_dir, download)
  label_feature = info.features["label"]
  names = getattr(label_feature, "names", None)
  report = common.SkipReport(source=source)
  bad = common.ErrorPolicy(on_error, report)
  examples: List[ClassificationExample] = []
  for n, ex in enumerate(ds):
    text_a = common.as_text(ex[spec.tfds_text[0]], source)
    text_b = common.as_text(ex[spec.tfds_text[1]], source) if len(spec.tfds_text) > 1 else None
    raw = ex["label"]
    label = None
    if spec.is_regression:
      v = float(raw)
      if not split.startswith("test") or v != -1.0:
        if not (math.isfinite(v) and STSB_RANGE[0] <= v <= STSB_RANGE[1]):
          bad(source, n, "bad score", f"{v!r} is outside STS-B's [{STSB_RANGE[0]:g}, {STSB_RANGE[1]:g}]")
          continue
        label = v
    else:
      v = int(raw)
      if v >= 0:
        if names is None or v >= len(names):
          bad(source, n, "label not in label set", f"label id {v} outside ClassLabel {names}")
          continue
        label = str(v) if spec.label_list == ["0", "1"] else names[v]
        if label not in spec.label_list:
          bad(source, n, "label not in label set", f"{label!r} not in {spec.label_list}")
          continue
    idx = str(int(ex["idx"])) if "idx" in ex else str(n)
    examples.append(ClassificationExample(guid=f"{source}:{n}", text_a=text_a, text_b=text_b, label=label,
                                          index=idx))
  return common.finish(examples, source, split, report)


class GlueTask(SequenceTask):
  """A GLUE task (classification, or regression for STS-B)."""

  def __init__(self, name: str, on_error: str = "raise"):
    super().__init__(on_error)
    self.spec = get_spec(name)
    self.name = self.spec.name
    self.label_list = self.spec.label_list
    self.is_regression = self.spec.is_regression
    self.kind = "regression" if self.is_regression else "classification"
    self.main_metric = glue_metrics.MAIN_METRIC[self.name]
    self.tfds_name = tfds_name(self.name)
    if self.name == "mnli":
      self.eval_splits = ("dev_matched", "dev_mismatched")
      # GLUE's AX diagnostic is predicted by the MNLI model: split "ax" reads <glue root>/diagnostic.
      self.test_splits = ("test_matched", "test_mismatched", "ax")
    if self.name == "ax":
      self.train_split = None
      self.eval_splits = ()

  @classmethod
  def create(cls, name, **kwargs):
    return cls(name, **kwargs)

  def _source(self, split):
    """(GLUE task, split) actually read: MNLI's "ax" split is the AX task's test split."""
    if self.name == "mnli" and split == "ax":
      return "ax", "test"
    return self.name, split

  def read(self, split, data_dir=None, *, use_tfds=False, tfds_data_dir=None, download=False, on_error=None):
    on_error = on_error or self.on_error
    name, split = self._source(split)
    if use_tfds:
      return read_glue_tfds(name, split, tfds_data_dir or data_dir, download, on_error)
    if data_dir is None:
      raise ValueError("data_dir is required to read GLUE files")
    return read_glue(name, split, data_dir, on_error)

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
    if not self.is_regression and list(self.label_list) != list(self.spec.label_list):
      # a reordered config.label_list: GLUE's metrics read ids in GLUE's order (MRPC/QQP's F1 is that of id
      # 1, "1"); scored on our ids it was the F1 of the other class
      remap = np.array([self.spec.label_list.index(l) for l in self.label_list])
      predictions, gold = remap[np.asarray(predictions, dtype=np.int64)], remap[gold]
    return glue_metrics.compute_metrics(self._metric_task(split or example_set.split), predictions, gold)

  def write_predictions(self, output_dir, split, example_set, predictions):
    if split != "ax":
      split = canonical_split(self.spec, split)
    indices = [e.index for e in example_set]
    if split.startswith("test") or split == "ax":
      return [glue_metrics.write_glue_submission(output_dir, self._metric_task(split), predictions, indices,
                                                 self.label_list)]
    rows = glue_metrics.format_predictions(self._metric_task(split), predictions, self.label_list)
    path = os.path.join(output_dir, f"{self.name}_{split}_predictions.tsv")
    os.makedirs(output_dir, exist_ok=True)
    lines = ["index\tprediction\tlabel\n"]
    for e, p in zip(example_set, rows):
      label = "" if e.label is None else (f"{e.label:.3f}" if self.is_regression else e.label)
      lines.append(f"{e.index}\t{p}\t{label}\n")
    return [write_text_atomic(path, "".join(lines))]
