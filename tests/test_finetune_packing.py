"""Fine-tuning with config.packing: the plan's refusals (one error: line each), packed evaluation that gives
the unpacked run's loss, metrics and predictions for every kind that packs (NER with the CRF head included), and
a CRF tagger's Predictor that packs and tags as the padded one does."""

import os

import flax
import jax
import numpy as np
import pytest

import task_fixtures as testing
from bert_jax import fileio
from bert_jax.errors import UserError
from bert_jax.engine import sharding
from bert_jax.finetune import loop, multirun
from bert_jax.finetune import model as fm
from bert_jax.finetune.plan import resolve_finetune
from bert_jax.finetune.predict import Predictor
from bert_jax.finetune.tasks import get_task
from bert_jax.input_pipeline import tokenization
from bert_jax.pretrained import load_pretrained, params_dir

from test_finetune_multirun import _plans
from test_finetune_tasks import make_config
from test_finetune_units import _write_pretrained_dir
from test_tasks_multiple_choice import write_c3
from test_packing_equality import unstated_family  # noqa: F401  (a fixture: a family that does not pack)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  d = tmp_path_factory.mktemp("packing_data")
  ml = d / "multilabel"
  rows = [("a|b", "the cat sat on the mat ."), ("b", "good game"), ("a", "the dog was not bad and won the game ."),
          ("c", "john smith lives in new york"), ("a|c", "paris is the capital of france ."),
          ("b|c", "hello world"), ("a", "the river"), ("c", "bert model 1990")]
  for split in ("train", "dev"):
    testing._write(str(ml / f"{split}.tsv"), ["label\ttext_a"] + [f"{l}\t{t}" for l, t in rows])
  return {"vocab": testing.write_vocab(str(d)), "glue": testing.write_glue(str(d / "glue")),
          "ner": testing.write_conll(str(d / "ner")), "squad": testing.write_squad(str(d / "squad")),
          "multilabel": str(ml), "c3": write_c3(str(d / "c3"))}


@pytest.mark.parametrize("task, overrides, message", [
    ("sst2", {"max_examples_per_row": 0}, "config.max_examples_per_row=0; expected an integer >= 1"),
    ("squad_v1", {}, "config.packing=true is not supported here: task 'squad_v1'"),
    ("c3", {}, "config.packing=true is not supported here: task 'c3' (multiple_choice head) reads whole rows"),
    ("sst2", {"model.attention_impl": "cudnn"}, "attention_impl=cudnn: cuDNN takes one length per row"),
    ("sst2", {"model.encoder": "unstated"}, "encoder='unstated' would run across the examples of a row"),
])
def test_packing_the_plan_cannot_honour_is_one_error_line(data, tmp_path, unstated_family, task, overrides, message):
  where = {"sst2": data["glue"], "squad_v1": data["squad"], "c3": data["c3"]}[task]
  c = make_config(task, where, data["vocab"], packing=True, **overrides)
  with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")) as e:
    resolve_finetune(c, str(tmp_path / "run"))
  assert "\n" not in str(e.value)


def test_a_packing_plan_packs_the_model_and_the_data_and_says_so(data, tmp_path):
  plan = resolve_finetune(make_config("sst2", data["glue"], data["vocab"], packing=True, max_examples_per_row=3),
                          str(tmp_path / "run"))
  assert plan.model.max_examples_per_row == 3 and plan.data.max_examples_per_row == 3
  assert "at most 3 examples per row" in plan.describe()
  off = resolve_finetune(make_config("sst2", data["glue"], data["vocab"]), str(tmp_path / "off"))
  assert off.model.max_examples_per_row == 0 and "one example per row" in off.describe()


def _evaluate(plan):
  """(metrics, predictions) of the dev split with the plan's freshly initialised parameters (seeded: the same
  for a packed and an unpacked plan), and the split's data."""
  tokenizer = tokenization.load_tokenizer(plan.vocab_file, do_lower_case=plan.do_lower_case)
  _, eval_data, _ = loop.load_data(plan, tokenizer)
  model = fm.build_model(plan.task, plan.model, plan.classifier_dropout)
  mesh = sharding.make_mesh(plan.mesh_shape, plan.mesh_axes)
  params, p_shard, _ = loop.init_params(plan, model, mesh)
  step = fm.make_predict_step(model, plan.task, mesh, plan.logical_axis_rules, p_shard)
  d = eval_data[0]
  return loop.evaluate_split(plan.task, d, step, params, plan.eval_batch_size, mesh, plan.logical_axis_rules), d


@pytest.mark.slow   # 5 tasks x 2 compiled programs, ~30 s on 2 cores
@pytest.mark.parametrize("task, overrides", [("mrpc", {}), ("stsb", {}), ("multilabel", {}), ("ner", {}),
                                             ("ner", {"crf": True, "max_seq_length": 7})])
def test_packed_evaluation_gives_the_unpacked_loss_metrics_and_predictions(data, tmp_path, task, overrides):
  # (the CRF at 7 tokens: sentences cut into windows, whose lifted start / end constraints go per example, and
  # their short tails packed together)
  where = {"mrpc": data["glue"], "stsb": data["glue"], "ner": data["ner"], "multilabel": data["multilabel"]}[task]
  runs = {}
  for packing in (False, True):
    c = make_config(task, where, data["vocab"], packing=packing, max_examples_per_row=4, **overrides)
    runs[packing] = _evaluate(resolve_finetune(c, str(tmp_path / f"run{packing}")))
  (m0, p0), d0 = runs[False]
  (m1, p1), d1 = runs[True]
  assert d1.packed is not None and d1.num_rows < d0.num_rows       # really packed
  if overrides.get("crf"):     # windows continued in one packed row's slot, continuing in another's
    assert d1.rows["window_continued"].any() and d1.rows["window_continues"].any()
  assert set(m0) == set(m1) and "loss" in m1
  # (a fresh head's STS-B outputs barely vary: their Pearson moves by ~1e-5 with fp32 rounding)
  for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(m0), jax.tree_util.tree_leaves(m1)):
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-4, err_msg=jax.tree_util.keystr(path))
  for a, b in zip(jax.tree_util.tree_leaves(p0), jax.tree_util.tree_leaves(p1)):
    if isinstance(a, (float, np.floating, np.ndarray)) and np.asarray(a).dtype.kind == "f":
      np.testing.assert_allclose(b, a, atol=1e-5)
    else:
      assert np.array_equal(np.asarray(a), np.asarray(b)) if isinstance(a, np.ndarray) else a == b


@pytest.mark.slow   # the vmapped program and a separate packed run, ~20 s on 2 cores
def test_vmapped_packed_runs_equal_a_separate_packed_run_which_reports_its_packing(tmp_path):
  runs = [(1, 1e-3), (2, 3e-4)]
  vm = _plans(tmp_path, "vmapped", runs, packing=True, max_examples_per_row=4)
  assert multirun.decide(vm).vmapped
  got = multirun.run_vmapped(vm)[1]
  want = loop.run_plan(_plans(tmp_path, "separate", runs[1:], packing=True, max_examples_per_row=4)[0])
  np.testing.assert_allclose(got["dev"]["accuracy"], want["dev"]["accuracy"])
  np.testing.assert_allclose(got["dev"]["loss"], want["dev"]["loss"], rtol=2e-4)
  packing = want["train"]["packing"]
  assert packing["train"]["padding_after"] < packing["train"]["padding_before"]
  assert want["train"]["train_rows"] < want["train"]["train_features"]
  assert want["timing"]["train_examples_seen"] >= want["train"]["train_examples"]


@pytest.mark.slow   # a fine-tuning run; the packed CRF equality stays fast
def test_a_crf_taggers_predictor_packs_and_tags_every_word_as_the_padded_one_does(tmp_path):
  """A CRF NER checkpoint (random emissions and transitions, so the Viterbi path depends on both): the packed
  Predictor (several texts per row, sentences cut into windows at 12 tokens) gives the padded one's tags."""
  vocab = testing.write_vocab(str(tmp_path))
  d, _ = _write_pretrained_dir(tmp_path, vocab, params_dir.count_vocab_lines(vocab))
  cfg = params_dir.read_model_config(d)
  labels = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
  task = get_task("ner", label_list=labels, crf=True)
  model = fm.build_model(task, cfg)
  params = jax.jit(lambda r: model.init(r, np.zeros((1, 8), np.int32), np.ones((1, 8), np.int32))["params"])(
      jax.random.key(4))
  params = jax.tree.map(np.asarray, flax.linen.unbox(params))
  params["crf"] = {k: 2.0 * np.random.default_rng(0).normal(size=v.shape).astype(np.float32)
                   for k, v in params["crf"].items()}
  best = str(tmp_path / "ft" / "best_checkpoint")
  params_dir.save_params_dir(best, cfg, params, vocab)
  fileio.write_json_atomic(os.path.join(best, params_dir.FINETUNE_INFO_NAME),
                           {"task": "ner", "kind": "ner", "label_list": labels, "max_seq_length": 12,
                            "do_lower_case": True, "ner_scheme": "BIO", "crf": True})
  texts = [" ".join(w) for w, _ in testing.CONLL_SENTENCES] + ["我住在北京。这本书很好，我很喜欢看这本书", "北京", "上海很好"]
  got = {packing: Predictor(load_pretrained(str(tmp_path / "ft")), batch_size=2, packing=packing)
         for packing in (True, False)}
  assert got[True].cap > 0 and got[False].cap == 0
  packed, padded = (got[p].predict(texts) for p in (True, False))
  assert [r["tags"] for r in packed] == [r["tags"] for r in padded]
  assert [r["entities"] for r in packed] == [r["entities"] for r in padded]
  assert len({t for r in padded for t in r["tags"]}) > 1      # a real path, not one tag everywhere


@pytest.mark.slow   # a whole packed fine-tuning run with the CRF head, ~15 s on 2 cores
def test_ner_with_the_crf_head_fine_tunes_packed_and_writes_per_sentence_predictions(data, tmp_path):
  out = str(tmp_path / "run")
  c = make_config("ner", data["ner"], data["vocab"], packing=True, max_examples_per_row=4, crf=True,
                  num_train_epochs=2.0, max_seq_length=7)   # windows, and short tails packed together
  res = loop.run_plan(resolve_finetune(c, out))
  assert {"precision", "recall", "f1"} <= set(res["dev"]) and np.isfinite(res["dev"]["loss"])
  assert res["train"]["train_rows"] < res["train"]["train_features"]       # packed for real
  rows = [l.split() for l in open(os.path.join(out, "dev_predictions.txt"), encoding="utf-8") if l.strip()]
  assert [r[0] for r in rows] == [w for s, _ in testing.CONLL_SENTENCES for w in s]
  for sentence in Predictor.from_workdir(out).predict(["John Smith lives in New York .", "我住在北京。"]):
    tags = sentence["tags"]     # the constrained Viterbi path never starts an entity with I-X
    assert all(not cur.startswith("I-") or prev[2:] == cur[2:] for prev, cur in zip(["O"] + tags[:-1], tags))
