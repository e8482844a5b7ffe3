"""End-to-end fine-tuning runs on tiny fixtures in the standard file formats (and TFDS mock data).

Each run builds a 2-layer, hidden-64 model, trains for an epoch or so and checks the files users submit.
"""

import csv
import json
import os
import random

import numpy as np
import pytest

import task_fixtures as testing
from bert_jax.evaluation import ner as ner_eval
from bert_jax.finetune import loop as finetune_loop
from bert_jax.finetune.predict import Predictor, entity_text
from bert_jax.pretrained import load_params_dir

from test_finetune_units import _write_pretrained_dir, load_config_module

MOD = load_config_module()


def make_config(task, data_dir, vocab_file, **overrides):
  c = MOD.get_config(f"task={task},runlocal")
  c.data_dir, c.vocab_file = data_dir, vocab_file
  c.model.size = "tiny"
  c.model.hidden_size, c.model.num_attention_heads, c.model.intermediate_size = 64, 2, 128
  c.batch_size, c.eval_batch_size = 8, 8          # conftest simulates 8 devices: one row per device
  c.max_seq_length = 32
  c.log_every_steps = 1
  for k, v in overrides.items():
    target = c
    *parents, leaf = k.split(".")
    for p in parents:
      target = getattr(target, p)
    setattr(target, leaf, v)
  return c


def read_json(path):
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def read_tsv(path):
  with open(path, encoding="utf-8") as f:
    return list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))


def check_run_files(workdir, main_metric):
  for name in ("config.json", "init_report.json", "metrics.jsonl", "curves.png", "eval_results.json",
               "best_checkpoint/params.msgpack", "best_checkpoint/finetune_info.json"):
    assert os.path.exists(os.path.join(workdir, name)), name
  assert os.listdir(os.path.join(workdir, "tensorboard"))
  records = [json.loads(l) for l in open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8")]
  train = [r for r in records if r["kind"] == "train"]
  evals = [r for r in records if r["kind"] == "eval"]
  assert train and all(np.isfinite(r["loss"]) for r in train)
  assert evals and all(main_metric in r for r in evals)


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory):
  d = tmp_path_factory.mktemp("ft_data")
  vocab = testing.write_vocab(str(d))
  return {"dir": d, "vocab": vocab, "glue": testing.write_glue(str(d / "glue"))}


@pytest.mark.slow   # a whole fine-tuning run from a saved checkpoint (~14 s); the merge itself is unit-tested in
#                     test_finetune_units (test_merge_loads_the_encoder_and_initialises_the_head)
def test_sst2_from_a_pretrained_checkpoint_loads_the_encoder(fixtures, tmp_path):
  ckpt, pre = _write_pretrained_dir(tmp_path, fixtures["vocab"], sum(1 for _ in open(fixtures["vocab"])))
  # vocab_file empty: the checkpoint's vocab.txt is used. A ~zero learning rate keeps the weights at their
  # loaded values, so the best checkpoint must hold the pre-trained encoder.
  c = make_config("sst2", fixtures["glue"], "", init_checkpoint=ckpt, learning_rate=1e-12, weight_decay=0.0)
  out = str(tmp_path / "run")
  results = finetune_loop.run(c, out)
  assert set(results["dev"]) >= {"accuracy"} and results["best"]["step"] == 1
  report = read_json(os.path.join(out, "init_report.json"))
  assert sorted(report["initialised"]) == ["classifier/bias", "classifier/kernel"]
  assert "bert/embeddings/word_embeddings/embedding" in report["loaded"]
  _, saved, _ = load_params_dir(os.path.join(out, "best_checkpoint"))
  np.testing.assert_allclose(saved["bert"]["encoder"]["layer_0"]["attention"]["query"]["kernel"],
                             pre["bert"]["encoder"]["layer_0"]["attention"]["query"]["kernel"], atol=1e-6)
  assert saved["classifier"]["kernel"].shape == (64, 2)
  rows = read_tsv(os.path.join(out, "SST-2.tsv"))
  assert rows[0] == ["index", "prediction"] and len(rows) == 9 and {r[1] for r in rows[1:]} <= {"0", "1"}
  check_run_files(out, "accuracy")


# slow: the fast tier keeps one end-to-end run per head kind (SST-2 classification, SQuAD v2 spans, CoNLL
# tags; multiple choice in test_tasks_multiple_choice); the other GLUE layouts' runs and the Chinese classifier
# that must learn are CI's (-m slow), ~10 s each.
@pytest.mark.slow
def test_mrpc_sentence_pairs(fixtures, tmp_path):
  out = str(tmp_path / "run")
  results = finetune_loop.run(make_config("mrpc", fixtures["glue"], fixtures["vocab"]), out)
  assert {"accuracy", "f1", "acc_and_f1"} <= set(results["dev"])
  assert results["main_metric"] == "acc_and_f1"
  rows = read_tsv(os.path.join(out, "MRPC.tsv"))
  assert len(rows) == 9 and rows[1][0] == "0"
  dev = read_tsv(os.path.join(out, "mrpc_dev_predictions.tsv"))
  assert dev[0] == ["index", "prediction", "label"] and len(dev) == 9
  check_run_files(out, "acc_and_f1")


@pytest.mark.slow
def test_stsb_regression_with_mse(fixtures, tmp_path):
  out = str(tmp_path / "run")
  results = finetune_loop.run(make_config("stsb", fixtures["glue"], fixtures["vocab"], num_train_epochs=2.0), out)
  assert {"pearson", "spearman", "corr"} <= set(results["dev"])
  info = read_json(os.path.join(out, "best_checkpoint", "finetune_info.json"))
  assert info["kind"] == "regression" and info["num_labels"] == 1
  rows = read_tsv(os.path.join(out, "STS-B.tsv"))
  assert len(rows) == 9 and all(isinstance(float(r[1]), float) for r in rows[1:])
  # The train loss is a squared error on 0..5 scores (a cross-entropy over 1 class would be 0).
  train = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl")) if '"train"' in l]
  assert train[0]["loss"] > 0.1


@pytest.mark.slow
def test_mnli_evaluates_matched_and_mismatched_and_writes_the_submission(fixtures, tmp_path):
  out = str(tmp_path / "run")
  results = finetune_loop.run(make_config("mnli", fixtures["glue"], fixtures["vocab"]), out)
  assert "accuracy" in results["dev_matched"] and "accuracy" in results["dev_mismatched"]
  evals = {r["split"] for r in map(json.loads, open(os.path.join(out, "metrics.jsonl"))) if r["kind"] == "eval"}
  assert evals == {"dev_matched", "dev_mismatched"}
  for name in ("MNLI-m.tsv", "MNLI-mm.tsv", "AX.tsv"):
    rows = read_tsv(os.path.join(out, name))
    assert len(rows) == 9 and {r[1] for r in rows[1:]} <= {"entailment", "neutral", "contradiction"}, name


@pytest.mark.parametrize("version_2", [pytest.param(False, marks=pytest.mark.slow), True],
                         ids=["squad_v1", "squad_v2"])   # v1: CI only; v2 (spans and null odds) in the fast tier
@pytest.mark.slow
def test_squad_predictions_are_exact_context_substrings(fixtures, tmp_path, version_2):
  data = testing.write_squad(str(tmp_path / "squad"), version_2_with_negative=version_2)
  task = "squad_v2" if version_2 else "squad_v1"
  # 24 tokens with an 8-token stride: every context spans several windows.
  c = make_config(task, data, fixtures["vocab"], max_seq_length=24, doc_stride=8, max_query_length=10)
  out = str(tmp_path / "run")
  results = finetune_loop.run(c, out)
  gold = testing.squad_json(version_2)
  contexts = {qa["id"]: p["context"] for a in gold["data"] for p in a["paragraphs"] for qa in p["qas"]}
  preds = read_json(os.path.join(out, "predictions.json"))
  nbest = read_json(os.path.join(out, "nbest_predictions.json"))
  assert set(preds) == set(contexts) == set(nbest)
  for qid, text in preds.items():
    assert text in contexts[qid], (qid, text)
    assert all(c["text"] in contexts[qid] for c in nbest[qid])
  if version_2:
    assert set(read_json(os.path.join(out, "null_odds.json"))) == set(contexts)
    assert {"exact", "f1", "HasAns_f1", "NoAns_f1"} <= set(results["dev"])
  else:
    assert {"exact_match", "f1"} <= set(results["dev"])
  assert results["train"]["train_features"] > len(contexts)   # doc stride made extra windows


@pytest.mark.slow      # a run of several seconds; CI runs it, the fast tier keeps the unit tests
def test_ner_conll_output_and_entity_f1(fixtures, tmp_path):
  data = testing.write_conll(str(tmp_path / "ner"))
  out = str(tmp_path / "run")
  results = finetune_loop.run(make_config("ner", data, fixtures["vocab"], num_train_epochs=2.0), out)
  assert {"precision", "recall", "f1"} <= set(results["dev"])
  lines = open(os.path.join(out, "dev_predictions.txt"), encoding="utf-8").read().split("\n")
  rows = [l.split() for l in lines if l.strip()]
  words = [w for s, _ in testing.CONLL_SENTENCES for w in s]
  assert [r[0] for r in rows] == words and all(len(r) == 3 for r in rows)
  tags = {"O", "B-PER", "I-PER", "B-LOC", "I-LOC"}
  assert {r[1] for r in rows} <= tags and {r[2] for r in rows} <= tags
  assert os.path.exists(os.path.join(out, "test_predictions.txt"))
  # Predicting from the work dir: words split like the CoNLL files, entities read off the predicted tags.
  got = Predictor.from_workdir(out).predict(["John Smith lives in New York .", "我住在北京。"])
  assert got[1]["words"] == ["我", "住", "在", "北", "京", "。"]
  for g in got:
    assert len(g["tags"]) == len(g["words"]) and set(g["tags"]) <= tags
    want = [(t, b, e, entity_text(g["words"][b:e + 1])) for t, b, e in ner_eval.get_entities(g["tags"])]
    assert [(x["type"], x["start"], x["end"], x["text"]) for x in g["entities"]] == want


def test_entity_text_joins_cjk_characters_directly_and_other_words_with_spaces():
  assert entity_text(["北", "京"]) == "北京"
  assert entity_text(["New", "York"]) == "New York"
  assert entity_text(["北", "Jing"]) == "北 Jing"
  assert entity_text(["Berlin"]) == "Berlin"


def _learnable_chinese_tsv(directory, n_train=64, n_dev=16, seed=0):
  """Label 1 iff the review says 很好 (very good), 0 iff 不好 (not good), around random filler characters."""
  rng = random.Random(seed)
  filler = list("这本书电影我在住城市上海北京中国的首都")
  os.makedirs(directory, exist_ok=True)
  for split, n in (("train", n_train), ("dev", n_dev), ("test", n_dev)):
    rows = ["label\ttext_a"]
    for i in range(n):
      label = i % 2
      words = [rng.choice(filler) for _ in range(rng.randint(2, 6))]
      words.insert(rng.randint(0, len(words)), "很好" if label else "不好")
      rows.append(f"{label}\t{''.join(words)}")
    with open(os.path.join(directory, f"{split}.tsv"), "w", encoding="utf-8") as f:
      f.write("\n".join(rows) + "\n")
  return directory


@pytest.fixture(scope="module")
def chinese_run(fixtures, tmp_path_factory):
  """A generic-classification run on a trivially learnable Chinese TSV: (data_dir, workdir, results)."""
  d = tmp_path_factory.mktemp("cls")
  data = _learnable_chinese_tsv(str(d / "data"))
  out = str(d / "run")
  # 64 examples / batch 8 = 8 steps per epoch; evaluate every 4 steps, stop after 10 evaluations without gain.
  # (The 2-layer model can sit at chance for 30-40 steps before it finds the cue, then learns it in a few.)
  c = make_config("classification", data, fixtures["vocab"], num_train_epochs=14.0, learning_rate=1e-3,
                  early_stopping_patience=10, eval_every_steps=4, log_every_steps=4)
  return data, out, finetune_loop.run(c, out)


# slow (full tier): up to 14 epochs until the model finds the cue; the fast tier's proof of learning is
# test_training_loop's overfitting run.
@pytest.mark.slow
def test_chinese_classification_learns_and_predicts(chinese_run):
  _, out, results = chinese_run
  assert results["dev"]["accuracy"] >= 0.9, results["dev"]   # chance is 0.5
  evals = [r for r in map(json.loads, open(os.path.join(out, "metrics.jsonl"))) if r["kind"] == "eval"]
  assert all(r["step"] % 4 == 0 for r in evals)
  after_best = [r for r in evals if r["step"] > results["best"]["step"]]
  assert len(after_best) <= 10 and (len(after_best) == 10 or evals[-1]["step"] == 112)
  assert results["test"]["accuracy"] >= 0.9, results["test"]  # a labelled test split is scored too
  rows = read_tsv(os.path.join(out, "classification_test_predictions.tsv"))
  assert rows[0] == ["index", "prediction"] and len(rows) == 17
  p = Predictor.from_workdir(out)
  got = p.predict(["上海很好", "这本书不好", "我在北京很好"])
  assert [g["label"] for g in got] == ["1", "0", "1"]
  assert abs(sum(got[0]["probabilities"].values()) - 1.0) < 1e-5


@pytest.mark.slow
def test_eval_only_from_a_fine_tuned_workdir_reproduces_dev_accuracy(chinese_run, tmp_path):
  data, first, trained = chinese_run
  c = make_config("classification", data, "", init_checkpoint=first, do_train=False)
  again = finetune_loop.run(c, str(tmp_path / "second"))
  assert again["dev"]["accuracy"] == pytest.approx(trained["dev"]["accuracy"])
  assert again["test"]["accuracy"] == pytest.approx(trained["test"]["accuracy"])


@pytest.mark.slow
def test_glue_from_tfds_mock_data(fixtures, tmp_path):
  tfds = pytest.importorskip("tensorflow_datasets")
  out = str(tmp_path / "run")
  c = make_config("mrpc", "", fixtures["vocab"], tfds_name="glue/mrpc")
  with tfds.testing.mock_data(num_examples=16, policy=tfds.testing.MockPolicy.USE_CODE):
    results = finetune_loop.run(c, out)
  assert {"accuracy", "f1"} <= set(results["dev"]) and results["train"]["train_examples"] == 16
  rows = read_tsv(os.path.join(out, "MRPC.tsv"))
  assert rows[0] == ["index", "prediction"] and len(rows) == 17


@pytest.mark.slow
def test_cli_runs_the_documented_command(fixtures, tmp_path):
  import subprocess
  import sys
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  out = str(tmp_path / "cli")
  cmd = [sys.executable, os.path.join(root, "finetune.py"), "--config=configs/finetune.py:task=cola,runlocal",
         f"--workdir={out}", f"--config.data_dir={fixtures['glue']}", f"--config.vocab_file={fixtures['vocab']}",
         "--config.model.hidden_size=64", "--config.model.num_attention_heads=2",
         "--config.model.intermediate_size=128", "--config.max_seq_length=32"]
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=1")
  proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "cola dev: " in proc.stdout and "mcc=" in proc.stdout
  results = read_json(os.path.join(out, "eval_results.json"))
  assert "mcc" in results["dev"] and os.path.exists(os.path.join(out, "CoLA.tsv"))


def test_an_eval_or_test_split_the_config_names_must_exist(tmp_path):
  """A split named in config.eval_splits / test_splits that is not there (a typo, a missing file) is one error
  before any training, naming the split and the file looked for; it used to be a logged warning and a run
  with no dev score. The task's own default splits may still be absent (MNLI's AX diagnostic)."""
  from bert_jax.errors import UserError
  data = testing.write_glue(str(tmp_path / "glue"), tasks=["rte"])
  vocab = testing.write_vocab(str(tmp_path / "v"))
  c = make_config("rte", data, vocab, eval_splits="dev,validaton")
  with pytest.raises(UserError, match=r"config.eval_splits: task rte has no split 'validaton' .*no split"):
    finetune_loop.run(c, str(tmp_path / "run"))
  os.remove(os.path.join(data, "RTE", "test.tsv"))
  c = make_config("rte", data, vocab, test_splits="test")
  with pytest.raises(UserError, match=r"config.test_splits: task rte has no split 'test' .*no test.tsv in"):
    finetune_loop.run(c, str(tmp_path / "run2"))
