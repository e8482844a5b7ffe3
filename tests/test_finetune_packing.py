"""Fine-tuning with config.packing: the plan's refusals (one error: line each), and packed evaluation that gives
the unpacked run's loss, metrics and predictions for every kind that packs."""

import jax
import numpy as np
import pytest

import task_fixtures as testing
from bert_jax.errors import UserError
from bert_jax.engine import sharding
from bert_jax.finetune import loop, multirun
from bert_jax.finetune import model as fm
from bert_jax.finetune.plan import resolve_finetune
from bert_jax.input_pipeline import tokenization

from test_finetune_multirun import _plans
from test_finetune_tasks import make_config


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
          "multilabel": str(ml)}


@pytest.mark.parametrize("task, overrides, message", [
    ("sst2", {"max_examples_per_row": 0}, "config.max_examples_per_row=0; expected an integer >= 1"),
    ("squad_v1", {}, "config.packing=true is not supported here: task 'squad_v1'"),
    ("ner", {"crf": True}, "crf=true: the CRF's Viterbi path would run across the examples"),
    ("sst2", {"model.attention_impl": "cudnn"}, "attention_impl=cudnn: cuDNN takes one length per row"),
    ("sst2", {"model.encoder": "lstm"}, "encoder='lstm' would run across the examples of a row"),
])
def test_packing_the_plan_cannot_honour_is_one_error_line(data, tmp_path, task, overrides, message):
  where = {"sst2": data["glue"], "ner": data["ner"], "squad_v1": data["squad"]}[task]
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


@pytest.mark.slow   # 4 tasks x 2 compiled programs, ~25 s on 2 cores
@pytest.mark.parametrize("task", ["mrpc", "stsb", "multilabel", "ner"])
def test_packed_evaluation_gives_the_unpacked_loss_metrics_and_predictions(data, tmp_path, task):
  where = {"mrpc": data["glue"], "stsb": data["glue"], "ner": data["ner"], "multilabel": data["multilabel"]}[task]
  runs = {}
  for packing in (False, True):
    c = make_config(task, where, data["vocab"], packing=packing, max_examples_per_row=4)
    runs[packing] = _evaluate(resolve_finetune(c, str(tmp_path / f"run{packing}")))
  (m0, p0), d0 = runs[False]
  (m1, p1), d1 = runs[True]
  assert d1.packed is not None and d1.num_rows < d0.num_rows       # really packed
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
