"""get_task: every task name, and read -> featurize -> predict -> evaluate -> write with oracle outputs."""

import json
import os

import numpy as np
import pytest

from bert_jax.finetune.tasks import get_task, task_names
import task_fixtures as testing
from bert_jax.finetune.tasks import squad as squad_tasks
from bert_jax.input_pipeline.tokenization import FullTokenizer

GLUE = ["cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli"]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
  root = tmp_path_factory.mktemp("data")
  return {"tok": FullTokenizer(testing.write_vocab(str(root / "v")), do_lower_case=True),
          "glue": testing.write_glue(str(root / "glue")), "root": root}


@pytest.mark.parametrize("name", task_names())
def test_every_name_has_the_contract_attributes(name):
  task = get_task(name)
  assert task.head in ("sequence_classification", "question_answering", "token_classification", "multiple_choice",
                       "bi_encoder")
  assert task.model_input_keys == ("input_ids", "input_mask", "segment_ids")
  assert task.main_metric
  if name in GLUE + ["ax"]:
    assert task.num_labels == (1 if name == "stsb" else len(task.label_list))
  if name.startswith("squad"):
    assert task.label_keys == ("start_positions", "end_positions") and task.label_list is None


def test_unknown_task_and_missing_label_list():
  with pytest.raises(KeyError, match="unknown task 'glue'"):
    get_task("glue")
  assert get_task("SST-2").name == "sst2" and get_task("squad").name == "squad_v1"
  with pytest.raises(ValueError, match="prepare"):
    get_task("ner").featurize([], None, 8)


def _one_hot(ids, n):
  out = np.full(ids.shape + (n,), -3.0, np.float32)
  np.put_along_axis(out, np.maximum(ids, 0)[..., None], 3.0, axis=-1)
  return out


@pytest.mark.parametrize("name", GLUE)
def test_glue_oracle_outputs_score_perfectly_and_write_submission(env, tmp_path, name):
  task = get_task(name)
  for split in task.eval_splits:
    es = task.read(split, env["glue"])
    f = task.featurize(es, env["tok"], 32)
    outputs = {"logits": f["label_ids"][:, None] if task.is_regression
               else _one_hot(f["label_ids"], task.num_labels)}
    preds = task.predict(es, f, outputs)
    m = task.evaluate(es, preds, split)
    assert m[task.main_metric] == pytest.approx(1.0)
  for split in task.test_splits:
    es = task.read(split, env["glue"])
    f = task.featurize(es, env["tok"], 32)
    n = len(es)
    outputs = {"logits": np.linspace(0, 5, n)[:, None] if task.is_regression
               else _one_hot(np.arange(n) % task.num_labels, task.num_labels)}
    paths = task.write_predictions(str(tmp_path), split, es, task.predict(es, f, outputs))
    with open(paths[0]) as fh:
      lines = fh.read().splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == n + 1
  expected = {"mnli": ["AX.tsv", "MNLI-m.tsv", "MNLI-mm.tsv"], "sst2": ["SST-2.tsv"], "stsb": ["STS-B.tsv"],
              "cola": ["CoLA.tsv"]}.get(name, [name.upper() + ".tsv"])
  assert sorted(os.listdir(tmp_path)) == expected


def test_ax_is_predicted_with_mnli_labels(env, tmp_path):
  ax = get_task("ax")
  es = ax.read("test", env["glue"])
  f = ax.featurize(es, env["tok"], 32)
  preds = ax.predict(es, f, {"logits": _one_hot(np.arange(len(es)) % 3, 3)})
  (path,) = ax.write_predictions(str(tmp_path), "test", es, preds)
  assert os.path.basename(path) == "AX.tsv"
  assert open(path).read().splitlines()[1:4] == ["0\tcontradiction", "1\tentailment", "2\tneutral"]


@pytest.mark.parametrize("name", ["squad_v1", "squad_v2"])
def test_squad_oracle_outputs_score_100_and_write_json(env, tmp_path, name):
  task = get_task(name, doc_stride=6, max_query_length=8)
  v2 = name == "squad_v2"
  d = testing.write_squad(str(tmp_path / "d"), v2)
  train = task.read("train", d)
  dev = task.read("dev", d)
  tf = task.featurize(train, env["tok"], 28, is_training=True)
  ef = task.featurize(dev, env["tok"], 28)
  start = np.full(ef["input_ids"].shape, -4.0)
  end = np.full(ef["input_ids"].shape, -4.0)
  rows = np.arange(len(start))
  start[rows, tf["start_positions"]] = 4.0  # unanswerable / out-of-window rows point at [CLS]
  end[rows, tf["end_positions"]] = 4.0
  res = task.predict(dev, ef, {"start_logits": start, "end_logits": end})
  m = task.evaluate(dev, res)
  assert m["f1"] == pytest.approx(100.0)
  assert m[("exact" if v2 else "exact_match")] == pytest.approx(100.0)
  paths = task.write_predictions(str(tmp_path / "out"), "dev", dev, res)
  assert sorted(os.path.basename(p) for p in paths) == sorted(
      ["predictions.json", "nbest_predictions.json"] + (["null_odds.json"] if v2 else []))
  preds = json.load(open(os.path.join(tmp_path, "out", "predictions.json"), encoding="utf-8"))
  assert preds == {e.qas_id: (e.answers[0] if e.answers else "") for e in dev}
  assert squad_tasks.gold_answers(dev)["q9"] == ["Zürich"]


def test_ner_oracle_outputs_score_perfectly_and_write_conll(env, tmp_path):
  d = testing.write_conll(str(tmp_path / "d"))
  task = get_task("ner").prepare(d)
  assert task.label_list == ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
  es = task.read("dev", d)
  f = task.featurize(es, env["tok"], 16)
  preds = task.predict(es, f, {"logits": _one_hot(f["label_ids"], task.num_labels)})
  m = task.evaluate(es, preds)
  assert m["f1"] == 1.0 and m["per_type"]["LOC"]["support"] == 4
  (path,) = task.write_predictions(str(tmp_path / "out"), "dev", es, preds)
  assert open(path, encoding="utf-8").read().startswith("John B-PER B-PER\nSmith I-PER I-PER\n")
  # A labels.txt in the data folder fixes the tag order.
  (tmp_path / "d" / "labels.txt").write_text("O\nB-PER\nI-PER\nB-LOC\nI-LOC\n", encoding="utf-8")
  assert get_task("ner").prepare(str(tmp_path / "d")).label_list == ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
  (tmp_path / "d" / "labels.txt").write_text("B-PER\nI-PER\n", encoding="utf-8")
  with pytest.raises(ValueError, match="labels.txt: the label list .* has no 'O' tag"):
    get_task("ner").prepare(str(tmp_path / "d"))
