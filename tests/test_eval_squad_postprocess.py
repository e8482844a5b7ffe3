"""SQuAD post-processing: window logits -> the exact original answer text (accents, Chinese, sub-words)."""

import json
import os

import numpy as np
import pytest

from bert_jax.evaluation import squad as squad_eval
from bert_jax.evaluation import squad_postprocess as pp
from bert_jax.finetune.tasks import squad as squad_tasks
import task_fixtures as testing
from bert_jax.input_pipeline.tokenization import FullTokenizer

# Small windows so that most contexts span several doc-stride windows.
MAX_SEQ, STRIDE, MAX_Q = 24, 5, 8


def _oracle_logits(train_feats, num_rows, length):
  """Logits that put the answer at the gold positions of every window that contains it."""
  start = np.full((num_rows, length), -5.0)
  end = np.full((num_rows, length), -5.0)
  start[:, 0] = end[:, 0] = 0.0  # a mediocre null score
  for row in range(num_rows):
    s, e = train_feats["start_positions"][row], train_feats["end_positions"][row]
    if s > 0:
      start[row, s] = 8.0
      end[row, e] = 8.0
  return start, end


@pytest.mark.parametrize("v2", [False, True])
def test_oracle_logits_recover_exact_original_text_across_windows(tmp_path, v2):
  tok = FullTokenizer(testing.write_vocab(str(tmp_path)), do_lower_case=True)
  path = testing.write_squad(str(tmp_path), v2) + ("/dev-v2.0.json" if v2 else "/dev-v1.1.json")
  train_es = squad_tasks.read_squad(path, v2, is_training=True)
  dev_es = squad_tasks.read_squad(path, v2, is_training=False)
  assert [e.qas_id for e in train_es] == [e.qas_id for e in dev_es]
  tf = squad_tasks.convert_examples_to_features(train_es, tok, MAX_SEQ, STRIDE, MAX_Q, is_training=True)
  ef = squad_tasks.convert_examples_to_features(dev_es, tok, MAX_SEQ, STRIDE, MAX_Q, is_training=False)
  np.testing.assert_array_equal(tf["input_ids"], ef["input_ids"])  # same windows either way
  windows = np.bincount(ef["example_index"])
  assert windows.max() >= 3  # the test really crosses windows
  start, end = _oracle_logits(tf, len(ef["input_ids"]), MAX_SEQ)
  if v2:  # make the unanswerable question's null score win
    for row in np.flatnonzero(ef["example_index"] == [e.qas_id for e in dev_es].index("q8")):
      start[row, 0] = end[row, 0] = 10.0
  res = pp.postprocess_predictions(dev_es, ef, start, end, n_best_size=5, max_answer_length=10,
                                   version_2_with_negative=v2)
  expected = {qid: ans for _, _, qas in testing.SQUAD_PARAGRAPHS for qid, _, ans, _ in qas}
  if v2:
    expected["q8"] = ""
  assert res.predictions == expected  # "Zürich" keeps its accent, "1990" is cut out of "1990s", Chinese
  assert res.predictions["q9"] == "Zürich" and res.predictions["q7"] == "中国的城市"
  scores = squad_eval.evaluate(squad_tasks.gold_answers(dev_es), res.predictions, v2, res.null_odds or None)
  assert scores["f1"] == pytest.approx(100.0)
  if v2:
    assert res.null_odds["q8"] > 0 > res.null_odds["q1"]
    assert scores["NoAns_total"] == 1 and scores["HasAns_exact"] == pytest.approx(100.0)
  for entries in res.nbest.values():
    assert sum(e["probability"] for e in entries) == pytest.approx(1.0)
    assert len({e["text"] for e in entries}) == len(entries)
  paths = pp.write_prediction_files(str(tmp_path / "out"), res)
  assert json.load(open(paths["predictions"], encoding="utf-8")) == expected
  assert ("null_odds" in paths) == v2


def _toy_features(context, spans, max_ctx=None):
  t = len(spans)
  arr = np.array([s if s is not None else (-1, -1) for s in spans], dtype=np.int32)[None]
  mc = np.array([s is not None for s in spans])[None] if max_ctx is None else np.array(max_ctx)[None]
  return ({"example_index": np.zeros(1, np.int32), "token_char_spans": arr, "token_is_max_context": mc},
          [{"qas_id": "q", "context_text": context}], t)


def test_nbest_ranking_dedup_max_answer_length_and_context_only():
  context = "alpha beta gamma"
  spans = [None, None, None, (0, 5), (6, 10), (11, 16), None]  # [CLS] q [SEP] alpha beta gamma [SEP]
  feats, examples, t = _toy_features(context, spans)
  start = np.array([[9.0, 7.0, 0, 3.0, 2.0, 1.0, 0]])
  end = np.array([[9.0, 0, 0, 1.0, 2.5, 3.0, 0]])
  # Best pair would be (0, 0) = [CLS] or (1, x) = question: not context, skipped.
  res = pp.postprocess_predictions(examples, feats, start, end, n_best_size=10, max_answer_length=2)
  texts = [e["text"] for e in res.nbest["q"]]
  assert res.predictions["q"] == "alpha beta"        # 3.0 + 2.5 beats "alpha beta gamma" (too long)
  assert "alpha beta gamma" not in texts and texts[:3] == ["alpha beta", "beta gamma", "beta"]
  scores = [e["start_logit"] + e["end_logit"] for e in res.nbest["q"]]
  assert scores == sorted(scores, reverse=True)
  # A start token that is not max-context in this window is ignored.
  feats["token_is_max_context"][0, 3] = False
  res = pp.postprocess_predictions(examples, feats, start, end, n_best_size=10, max_answer_length=2)
  assert res.predictions["q"] == "beta gamma"


def test_v2_threshold_and_mismatched_rows_error():
  feats, examples, t = _toy_features("alpha beta", [None, (0, 5), (6, 10), None])
  start = np.array([[2.0, 1.0, 0.0, 0.0]])
  end = np.array([[2.0, 0.0, 1.5, 0.0]])
  res = pp.postprocess_predictions(examples, feats, start, end, version_2_with_negative=True)
  assert res.null_odds["q"] == pytest.approx(4.0 - 2.5) and res.predictions["q"] == ""
  res = pp.postprocess_predictions(examples, feats, start, end, version_2_with_negative=True,
                                   null_score_diff_threshold=2.0)
  assert res.predictions["q"] == "alpha beta"
  with pytest.raises(ValueError, match="padding rows"):
    pp.postprocess_predictions(examples, feats, np.zeros((2, 4)), np.zeros((2, 4)))


def test_prediction_files_are_replaced_whole_or_left_as_they_were(tmp_path, monkeypatch):
  """The writers opened the file with "w" (truncating it) and then wrote: a run killed or failing mid-write
  left half a predictions.json / submission TSV / CoNLL file. Now temp file + fsync + rename."""
  from bert_jax import fileio
  from bert_jax.evaluation import glue, ner
  path = glue.write_glue_submission(str(tmp_path), "rte", [0, 1], ["7", "8"])
  before = open(path, encoding="utf-8").read()
  assert before.startswith("index\tprediction\n7\t")
  with pytest.raises(ValueError, match="tag sequences of other lengths"):
    ner.write_conll(str(tmp_path / "dev.txt"), [["a"], ["b", "c"]], None, [["O"], ["O"]])
  assert not (tmp_path / "dev.txt").exists()                # the first sentence was written before the error
  monkeypatch.setattr(fileio.os, "fsync", lambda fd: (_ for _ in ()).throw(OSError("disk full")))
  with pytest.raises(OSError, match="disk full"):
    glue.write_glue_submission(str(tmp_path), "rte", [1, 1], ["7", "8"])
  assert open(path, encoding="utf-8").read() == before and sorted(os.listdir(tmp_path)) == ["RTE.tsv"]
