"""GLUE metrics against scikit-learn / SciPy, per-task metric sets, and leaderboard TSV files."""

import math
import os
import warnings

import numpy as np
import pytest
import scipy.stats
import sklearn.metrics

from bert_jax.evaluation import glue


@pytest.mark.parametrize("num_classes,seed", [(2, 0), (2, 1), (3, 2), (5, 3)])
def test_accuracy_f1_mcc_match_sklearn_on_random_labels(num_classes, seed):
  rng = np.random.default_rng(seed)
  y = rng.integers(0, num_classes, size=500)
  p = np.where(rng.random(500) < 0.6, y, rng.integers(0, num_classes, size=500))
  assert glue.accuracy(p, y) == pytest.approx(sklearn.metrics.accuracy_score(y, p), abs=1e-12)
  assert glue.matthews_corrcoef(p, y) == pytest.approx(sklearn.metrics.matthews_corrcoef(y, p), abs=1e-12)
  if num_classes == 2:
    assert glue.f1_binary(p, y) == pytest.approx(sklearn.metrics.f1_score(y, p), abs=1e-12)


def test_mcc_and_f1_degenerate_cases_match_sklearn():
  y = np.array([1, 1, 0, 0])
  for p in (np.array([1, 1, 1, 1]), np.array([0, 0, 0, 0]), y, 1 - y):
    assert glue.matthews_corrcoef(p, y) == pytest.approx(sklearn.metrics.matthews_corrcoef(y, p), abs=1e-12)
    assert glue.f1_binary(p, y) == pytest.approx(sklearn.metrics.f1_score(y, p, zero_division=0), abs=1e-12)
  assert glue.matthews_corrcoef(y, y) == 1.0 and glue.matthews_corrcoef(1 - y, y) == -1.0


def test_pearson_spearman_match_scipy_including_ties():
  rng = np.random.default_rng(0)
  x = rng.normal(size=300)
  y = 0.5 * x + rng.normal(size=300)
  xt = np.round(x * 2) / 2  # many ties
  yt = np.round(y)
  for a, b in ((x, y), (xt, yt), (xt, y)):
    assert glue.pearson(a, b) == pytest.approx(scipy.stats.pearsonr(a, b)[0], abs=1e-10)
    assert glue.spearman(a, b) == pytest.approx(scipy.stats.spearmanr(a, b)[0], abs=1e-10)


def test_undefined_metrics_have_fixed_values_and_do_not_warn():
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    # Constant predictions (or labels): MCC 0.0 as scikit-learn; correlations NaN as SciPy.
    assert glue.matthews_corrcoef([1, 1, 1], [1, 1, 1]) == 0.0
    assert glue.matthews_corrcoef([1, 1, 1], [0, 1, 0]) == 0.0
    assert glue.f1_binary([0, 0], [0, 0]) == 0.0
    assert math.isnan(glue.pearson([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]))
    assert math.isnan(glue.spearman([1.0, 2.0, 3.0], [2.0, 2.0, 2.0]))
    assert math.isnan(glue.pearson([1.0], [2.0])) and math.isnan(glue.spearman([1.0], [2.0]))
    assert math.isnan(glue.compute_metrics("stsb", [3.0, 3.0], [1.0, 4.0])["corr"])
  # F1 of one class also when the labels are not exactly {0, 1}: tp=1, fp=1, fn=1.
  assert glue.f1_binary([1, 1, 2, 0], [0, 1, 2, 1]) == pytest.approx(0.5)
  assert glue.f1_binary([0, 2], [2, 0]) == 0.0


def test_compute_metrics_task_sets_and_values():
  y = np.array([0, 1, 1, 0, 1, 1])
  p = np.array([0, 1, 0, 0, 1, 1])
  m = glue.compute_metrics("mrpc", p, y)
  assert set(m) == {"accuracy", "f1", "acc_and_f1"}
  assert m["accuracy"] == pytest.approx(5 / 6) and m["f1"] == pytest.approx(6 / 7)
  assert m["acc_and_f1"] == pytest.approx((5 / 6 + 6 / 7) / 2)
  assert set(glue.compute_metrics("CoLA", p, y)) == {"mcc"}
  assert set(glue.compute_metrics("MNLI-mm", p, y)) == {"accuracy"}
  s = glue.compute_metrics("sts-b", [1.0, 2.0, 3.5], [1.5, 2.0, 4.0])
  assert set(s) == {"pearson", "spearman", "corr"} and s["spearman"] == pytest.approx(1.0)
  for task in glue.METRIC_KEYS:
    assert glue.MAIN_METRIC[task] in glue.METRIC_KEYS[task]


def test_classification_metrics_reject_logits():
  with pytest.raises(ValueError, match="argmax"):
    glue.accuracy([0.3, 0.7], [0, 1])
  with pytest.raises(ValueError, match="equal length"):
    glue.accuracy([0, 1, 1], [0, 1])


def test_submission_files_have_glue_names_and_label_strings(tmp_path):
  out = str(tmp_path)
  names = {}
  for task in ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli_matched", "mnli_mismatched", "qnli", "rte", "wnli",
               "ax"):
    preds = [0.2, 4.1234, 7.0] if task == "stsb" else [0, 1, 1]
    path = glue.write_glue_submission(out, task, preds, indices=[0, 1, 2])
    names[task] = os.path.basename(path)
  assert sorted(names.values()) == sorted(["CoLA.tsv", "SST-2.tsv", "MRPC.tsv", "STS-B.tsv", "QQP.tsv",
                                           "MNLI-m.tsv", "MNLI-mm.tsv", "QNLI.tsv", "RTE.tsv", "WNLI.tsv",
                                           "AX.tsv"])
  with open(tmp_path / "MNLI-m.tsv") as f:
    assert f.read() == "index\tprediction\n0\tcontradiction\n1\tentailment\n2\tentailment\n"
  assert glue.read_glue_submission(str(tmp_path / "QNLI.tsv")) == {"0": "entailment", "1": "not_entailment",
                                                                   "2": "not_entailment"}
  assert glue.read_glue_submission(str(tmp_path / "STS-B.tsv")) == {"0": "0.200", "1": "4.123", "2": "5.000"}
  assert glue.read_glue_submission(str(tmp_path / "CoLA.tsv"))["1"] == "1"
  with pytest.raises(ValueError, match="MNLI-m.tsv"):
    glue.write_glue_submission(out, "mnli", [0])
  with pytest.raises(ValueError, match="not a label id"):
    glue.write_glue_submission(out, "rte", [2])
  with pytest.raises(ValueError, match="not one of the labels"):
    glue.write_glue_submission(out, "rte", ["neutral"])
