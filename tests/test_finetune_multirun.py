"""Many fine-tuning runs in one vmapped program (bert_jax/finetune/multirun.py): the same results as the runs
one at a time, and the reasons it falls back."""

import dataclasses
import json
import os

import numpy as np
import pytest

import task_fixtures as testing
from bert_jax.finetune import loop, multirun
from bert_jax.finetune.plan import resolve_finetune

from test_finetune_tasks import make_config


def _plans(tmp_path, tag, seeds_lrs, **overrides):
  data = testing.write_classification(str(tmp_path / "data"))
  vocab = testing.write_vocab(str(tmp_path / "vocab"))
  plans = []
  for seed, lr in seeds_lrs:
    c = make_config("classification", data, vocab, num_train_epochs=2.0, learning_rate=lr, seed=seed,
                    batch_size=8, eval_batch_size=8, do_predict=False, **overrides)
    c.model.num_hidden_layers = 1
    c.mesh.shape = (8, 1, 1)
    plans.append(resolve_finetune(c, str(tmp_path / tag / f"seed{seed}_lr{lr:g}")))
  return plans


def _losses(workdir):
  rows = [json.loads(l) for l in open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8")]
  return [r["loss"] for r in rows if r["kind"] == "train"], [r for r in rows if r["kind"] == "eval"]


@pytest.mark.slow   # 2 compiled programs (the vmapped one and a separate run): ~20 s on 2 quiet cores
def test_vmapped_runs_equal_separate_runs_with_the_same_seeds_and_learning_rates(tmp_path, monkeypatch):
  """2 replicas (two seeds and two learning rates, dropout on, layer-wise decay, an evaluation per epoch)
  against the same run made by loop.run_plan: every logged train loss, eval metric and the final results of
  the second replica agree to float tolerance. The vmapped train step compiles once for the whole run."""
  runs = [(1, 1e-3), (2, 3e-4)]
  extra = dict(layerwise_lr_decay=0.8, evals_per_epoch=1, early_stopping_patience=0)
  vm = _plans(tmp_path, "vmapped", runs, **extra)
  assert multirun.decide(vm).vmapped
  steps, make_steps = [], multirun.make_steps
  monkeypatch.setattr(multirun, "make_steps", lambda *a, **k: steps.append(make_steps(*a, **k)) or steps[-1])
  got = multirun.run_vmapped(vm)[1]
  # one entry in the jit cache: the first step's arguments are placed like every later step's (an
  # uncommitted optimizer state made the second step compile the program again)
  assert steps[0][0]._cache_size() == 1
  # the second replica (not the first: its seed, learning rate, shuffle and dropout keys are all its own)
  want = loop.run_plan(_plans(tmp_path, "separate", runs[1:], **extra)[0])
  assert got["best"]["step"] == want["best"]["step"]
  np.testing.assert_allclose(got["dev"]["accuracy"], want["dev"]["accuracy"])
  np.testing.assert_allclose(got["dev"]["loss"], want["dev"]["loss"], rtol=2e-4)
  g_loss, g_eval = _losses(vm[1].workdir)
  w_loss, w_eval = _losses(os.path.join(str(tmp_path), "separate", os.path.basename(vm[1].workdir)))
  assert len(g_loss) == len(w_loss) >= 2
  np.testing.assert_allclose(g_loss, w_loss, rtol=2e-4)
  np.testing.assert_allclose([r["loss"] for r in g_eval], [r["loss"] for r in w_eval], rtol=2e-4)
  # different seeds really give different runs (so equality above is not vacuous)
  assert not np.allclose(_losses(vm[0].workdir)[0], _losses(vm[1].workdir)[0])
  assert os.path.exists(os.path.join(vm[0].workdir, "best_checkpoint", "params.msgpack"))


def test_runs_that_differ_in_shape_or_schedule_fall_back_with_the_reason(tmp_path):
  plans = _plans(tmp_path, "a", [(1, 1e-3), (2, 1e-3)])
  assert "a single run" in multirun.decide(plans[:1]).reason
  other = dataclasses.replace(plans[1], batch_size=16)
  d = multirun.decide([plans[0], other])
  assert not d.vmapped and "batch_size" in d.reason
  end = [dataclasses.replace(p, optimizer=dataclasses.replace(p.optimizer, end_learning_rate=1e-5,
                                                              learning_rate=lr))
         for p, lr in zip(plans, (1e-3, 2e-3))]
  assert "end_learning_rate" in multirun.decide(end).reason
  small = [dataclasses.replace(p, multirun=dict(p.multirun, memory_limit_gb=1e-6)) for p in plans]
  reason = multirun.decide(small).reason
  assert "over the limit 0.00102 MiB" in reason and " 0.0 " not in reason      # tiny sizes read in MiB
  off = [dataclasses.replace(p, multirun=dict(p.multirun, enabled=False)) for p in plans]
  assert "enabled=false" in multirun.decide(off).reason
  # the task's input and head options build each run's features and head: one program cannot hold two
  for options in ({"truncation": "head_tail"}, {"pooling": "mean"}):
    other = _plans(tmp_path, "b", [(2, 1e-3)], **options)[0]
    d = multirun.decide([plans[0], other])
    assert not d.vmapped and "task_options" in d.reason
