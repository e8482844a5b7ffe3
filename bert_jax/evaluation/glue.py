"""GLUE metrics and leaderboard submission files.

Metrics (scikit-learn / SciPy, as GLUE's baselines score them; values are fractions in
[0, 1], correlations in [-1, 1]):

    accuracy(preds, labels)                 -> float   fraction equal (sklearn.metrics.accuracy_score's value)
    f1_binary(preds, labels, pos_label=1)   -> float   sklearn.metrics.f1_score of the positive class
    matthews_corrcoef(preds, labels)        -> float   sklearn.metrics.matthews_corrcoef (any #classes)
    pearson(x, y) / spearman(x, y)          -> float   scipy.stats.pearsonr / spearmanr (average ranks)

Undefined values: F1 is 0.0 with no true and no predicted positives, MCC 0.0 when either side is constant
(scikit-learn's conventions), Pearson/Spearman NaN when either side is constant or has fewer than 2 values
(SciPy's); none of them warns.

Per-task metric sets, the ones the GLUE paper and leaderboard use:

    compute_metrics("cola", preds, labels)  -> {"mcc"}
    sst2 / mnli / mnli_matched / mnli_mismatched / qnli / rte / wnli  -> {"accuracy"}
    mrpc / qqp                               -> {"accuracy", "f1", "acc_and_f1"}
    stsb                                     -> {"pearson", "spearman", "corr"}   (corr = their mean)
    ax                                       -> {"mcc"}  (GLUE's diagnostic score R3)
    MAIN_METRIC[task] names the key used to pick the best checkpoint.

`preds` / `labels` are label ids (ints, index into the task's label list) or, for stsb, floats.

Leaderboard files (one per task, the names GLUE's server expects):

    write_glue_submission(output_dir, "mnli_matched", predictions, indices=None, label_list=None) -> path

writes `MNLI-m.tsv` with header `index\tprediction` and one row per test example. Predictions may be label
ids (mapped through `label_list`, default the task's GLUE labels) or label strings; STS-B scores are written
as `%.3f`, clipped to [0, 5]. Label strings follow the GLUE release: "0"/"1" for CoLA, SST-2, MRPC, QQP,
WNLI; entailment/not_entailment for QNLI and RTE; entailment/neutral/contradiction for MNLI and AX.
"""

from __future__ import annotations

import os
import warnings
from typing import Dict, Iterable, Mapping, Optional, Sequence

import numpy as np
import scipy.stats

from bert_jax.fileio import write_text_atomic

# --------------------------------------------------------------------------------------------------------
# Task tables.
# --------------------------------------------------------------------------------------------------------
# Label strings in the order of Google's run_classifier.py processors (label id = position).
GLUE_LABELS: Dict[str, Optional[list]] = {
    "cola": ["0", "1"],
    "sst2": ["0", "1"],
    "mrpc": ["0", "1"],
    "stsb": None,  # regression
    "qqp": ["0", "1"],
    "mnli": ["contradiction", "entailment", "neutral"],
    "qnli": ["entailment", "not_entailment"],
    "rte": ["entailment", "not_entailment"],
    "wnli": ["0", "1"],
    "ax": ["contradiction", "entailment", "neutral"],
}

# Task -> metric keys returned by compute_metrics.
METRIC_KEYS: Dict[str, tuple] = {
    "cola": ("mcc",),
    "sst2": ("accuracy",),
    "mrpc": ("accuracy", "f1", "acc_and_f1"),
    "stsb": ("pearson", "spearman", "corr"),
    "qqp": ("accuracy", "f1", "acc_and_f1"),
    "mnli": ("accuracy",),
    "mnli_matched": ("accuracy",),
    "mnli_mismatched": ("accuracy",),
    "qnli": ("accuracy",),
    "rte": ("accuracy",),
    "wnli": ("accuracy",),
    "ax": ("mcc",),
}

# The key that decides the best checkpoint (the number GLUE's leaderboard averages for the task).
MAIN_METRIC: Dict[str, str] = {
    "cola": "mcc", "sst2": "accuracy", "mrpc": "acc_and_f1", "stsb": "corr", "qqp": "acc_and_f1",
    "mnli": "accuracy", "mnli_matched": "accuracy", "mnli_mismatched": "accuracy", "qnli": "accuracy",
    "rte": "accuracy", "wnli": "accuracy", "ax": "mcc",
}

# Submission file per (task, test split); the names on gluebenchmark.com's submission page.
SUBMISSION_FILES: Dict[str, str] = {
    "cola": "CoLA.tsv", "sst2": "SST-2.tsv", "mrpc": "MRPC.tsv", "stsb": "STS-B.tsv", "qqp": "QQP.tsv",
    "mnli_matched": "MNLI-m.tsv", "mnli_mismatched": "MNLI-mm.tsv", "qnli": "QNLI.tsv", "rte": "RTE.tsv",
    "wnli": "WNLI.tsv", "ax": "AX.tsv",
}

_ALIASES = {"sst-2": "sst2", "sts-b": "stsb", "mnli-m": "mnli_matched", "mnli-mm": "mnli_mismatched",
            "mnli_m": "mnli_matched", "mnli_mm": "mnli_mismatched", "diagnostic": "ax"}


def canonical_task(name: str) -> str:
  """Lower-cases and resolves aliases (SST-2 -> sst2, MNLI-mm -> mnli_mismatched); KeyError if unknown."""
  key = name.lower()
  key = _ALIASES.get(key, key)
  if key not in METRIC_KEYS:
    raise KeyError(f"unknown GLUE task {name!r}; known: {sorted(METRIC_KEYS)}")
  return key


# --------------------------------------------------------------------------------------------------------
# Metrics.
# --------------------------------------------------------------------------------------------------------
def _pair(preds, labels, float_ok=False):
  p = np.asarray(preds)
  y = np.asarray(labels)
  if p.shape != y.shape or p.ndim != 1:
    raise ValueError(f"predictions and labels must be 1-D of equal length, got {p.shape} and {y.shape}")
  if p.size == 0:
    raise ValueError("no predictions to score")
  if not float_ok and (p.dtype.kind == "f" or y.dtype.kind == "f"):
    if not (np.all(p == np.round(p)) and np.all(y == np.round(y))):
      raise ValueError("classification metrics need integer label ids (got non-integer floats); "
                       "pass argmax(logits), not logits")
  return p, y


def accuracy(preds, labels) -> float:
  """Fraction of exactly equal predictions."""
  p, y = _pair(preds, labels)
  return float(np.mean(p == y))     # sklearn's accuracy_score on 1-D labels


def f1_binary(preds, labels, pos_label=1) -> float:
  """F1 of the positive class; 0.0 when there are no true and no predicted positives (sklearn's default)."""
  p, y = _pair(preds, labels)
  import sklearn.metrics   # here, not at the top: the fine-tuning loop imports this module; scoring is its one use
  # labels=[pos_label] scores that one class, so a label set without pos_label, or with more than two
  # labels, is still accepted (average="binary" would raise); on binary labels it is the same number.
  return float(sklearn.metrics.f1_score(y, p, labels=[pos_label], average=None, zero_division=0)[0])


def matthews_corrcoef(preds, labels) -> float:
  """Matthews correlation coefficient (multi-class R_K form); 0.0 when undefined, as in scikit-learn."""
  p, y = _pair(preds, labels)
  import sklearn.metrics
  with warnings.catch_warnings():
    # A constant prediction equal to a constant label set makes sklearn warn about a 1x1 confusion
    # matrix; the 0.0 it returns is the documented value, so the warning is noise in eval logs.
    warnings.simplefilter("ignore", UserWarning)
    return float(sklearn.metrics.matthews_corrcoef(y, p))


def _correlation(fn, x, y) -> float:
  a, b = _pair(x, y, float_ok=True)
  a = a.astype(np.float64)
  b = b.astype(np.float64)
  # pearsonr raises below 2 values and both warn on constant input; NaN is SciPy's value for the latter
  # and the honest one for the former, returned without a warning.
  if a.size < 2 or np.all(a == a[0]) or np.all(b == b[0]):
    return float("nan")
  return float(fn(a, b)[0])


def pearson(x, y) -> float:
  """Pearson correlation (scipy.stats.pearsonr); NaN when either input is constant."""
  return _correlation(scipy.stats.pearsonr, x, y)


def spearman(x, y) -> float:
  """Spearman rank correlation with average ranks for ties (scipy.stats.spearmanr); NaN when constant."""
  return _correlation(scipy.stats.spearmanr, x, y)


def compute_metrics(task: str, preds, labels) -> Dict[str, float]:
  """The GLUE metric set of `task` (see module docstring) for label ids / STS-B scores."""
  key = canonical_task(task)
  if key == "stsb":
    pr, sp = pearson(preds, labels), spearman(preds, labels)
    return {"pearson": pr, "spearman": sp, "corr": (pr + sp) / 2}
  if key in ("cola", "ax"):
    return {"mcc": matthews_corrcoef(preds, labels)}
  if key in ("mrpc", "qqp"):
    acc, f1 = accuracy(preds, labels), f1_binary(preds, labels)
    return {"accuracy": acc, "f1": f1, "acc_and_f1": (acc + f1) / 2}
  return {"accuracy": accuracy(preds, labels)}


# --------------------------------------------------------------------------------------------------------
# Submission files.
# --------------------------------------------------------------------------------------------------------
def submission_file_name(task: str) -> str:
  """GLUE server file name for a task's test predictions; MNLI needs mnli_matched or mnli_mismatched."""
  key = canonical_task(task)
  if key == "mnli":
    raise ValueError("MNLI has two test files: pass 'mnli_matched' (MNLI-m.tsv) or "
                     "'mnli_mismatched' (MNLI-mm.tsv)")
  return SUBMISSION_FILES[key]


def format_predictions(task: str, predictions: Iterable, label_list: Optional[Sequence[str]] = None) -> list:
  """Prediction strings as GLUE expects them: label strings, or "%.3f" STS-B scores in [0, 5]."""
  key = canonical_task(task)
  base = "mnli" if key.startswith("mnli") else key
  if base == "stsb":
    return ["%.3f" % float(np.clip(float(v), 0.0, 5.0)) for v in predictions]
  labels = list(label_list) if label_list is not None else GLUE_LABELS[base]
  out = []
  for i, v in enumerate(predictions):
    if isinstance(v, str):
      if v not in labels:
        raise ValueError(f"{task}: prediction {i} is {v!r}, not one of the labels {labels}")
      out.append(v)
    else:
      iv = int(v)
      if not 0 <= iv < len(labels) or iv != v:
        raise ValueError(f"{task}: prediction {i} is {v!r}, not a label id in [0, {len(labels)})")
      out.append(labels[iv])
  return out


def write_glue_submission(output_dir: str, task: str, predictions: Sequence,
                          indices: Optional[Sequence] = None,
                          label_list: Optional[Sequence[str]] = None) -> str:
  """Writes `<output_dir>/<GLUE name>.tsv` (`index\\tprediction`); returns its path.

  Args:
    task: cola, sst2, mrpc, stsb, qqp, mnli_matched, mnli_mismatched, qnli, rte, wnli or ax.
    predictions: label ids / label strings (classification) or scores (stsb), in test-file order.
    indices: the test file's `index` column (default 0..n-1).
    label_list: the label strings ids refer to (default GLUE_LABELS of the task).
  """
  name = submission_file_name(task)
  rows = format_predictions(task, predictions, label_list)
  if indices is None:
    indices = range(len(rows))
  indices = list(indices)
  if len(indices) != len(rows):
    raise ValueError(f"{task}: {len(rows)} predictions but {len(indices)} indices")
  os.makedirs(output_dir, exist_ok=True)
  path = os.path.join(output_dir, name)
  return write_text_atomic(path, "index\tprediction\n" + "".join(f"{idx}\t{pred}\n"
                                                                for idx, pred in zip(indices, rows)))


def read_glue_submission(path: str) -> Mapping[str, str]:
  """Reads a submission TSV back into {index: prediction} (for checks)."""
  with open(path, encoding="utf-8") as f:
    lines = f.read().splitlines()
  if not lines or lines[0] != "index\tprediction":
    raise ValueError(f"{path}: first line must be 'index\\tprediction'")
  out = {}
  for n, line in enumerate(lines[1:], start=2):
    parts = line.split("\t")
    if len(parts) != 2:
      raise ValueError(f"{path}:{n}: expected 2 tab-separated fields, got {len(parts)}")
    out[parts[0]] = parts[1]
  return out
