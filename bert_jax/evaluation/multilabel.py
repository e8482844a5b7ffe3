"""Multi-label classification metrics (as scikit-learn's f1_score(average="micro"/"macro") on multi-hot
matrices, and subset accuracy). Imports nothing from bert_jax.

    m = multilabel_metrics(pred [N, K] 0/1, gold [N, K] 0/1)
    # {"micro_f1", "macro_f1", "exact_match", "micro_precision", "micro_recall"}

Macro F1 averages the per-label F1 over the K labels; a label never predicted nor present scores 0, as
scikit-learn's default (zero_division=0).
"""

from __future__ import annotations

import numpy as np


def _f1(tp, fp, fn):
  denom = 2 * tp + fp + fn
  return np.where(denom > 0, 2 * tp / np.maximum(denom, 1), 0.0)


def multilabel_metrics(pred, gold) -> dict:
  pred = np.asarray(pred).astype(bool)
  gold = np.asarray(gold).astype(bool)
  if pred.shape != gold.shape or pred.ndim != 2:
    raise ValueError(f"predictions {pred.shape} and gold {gold.shape} must be equal [examples, labels] shapes")
  tp = np.sum(pred & gold, axis=0).astype(np.float64)
  fp = np.sum(pred & ~gold, axis=0).astype(np.float64)
  fn = np.sum(~pred & gold, axis=0).astype(np.float64)
  t, p_, n_ = tp.sum(), fp.sum(), fn.sum()
  return {"micro_f1": float(_f1(t, p_, n_)),
          "macro_f1": float(np.mean(_f1(tp, fp, fn))) if tp.size else 0.0,
          "exact_match": float(np.mean(np.all(pred == gold, axis=1))) if len(pred) else 0.0,
          "micro_precision": float(t / (t + p_)) if t + p_ else 0.0,
          "micro_recall": float(t / (t + n_)) if t + n_ else 0.0}
