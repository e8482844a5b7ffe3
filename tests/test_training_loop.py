"""The training loop end to end: overfitting, NaN policies (and the skip limit), exact resume after Ctrl-C
and after SIGKILL mid-save, with metrics.jsonl truncated back to the restored step."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest
import task_fixtures as testing

from bert_jax.errors import UserError
from bert_jax.models import BertForPreTraining
from bert_jax.pretrained import load_pretrained
from bert_jax.engine import checkpoints, optimizers, sharding
from bert_jax.engine import train_step as ts
from test_training_sharding import TINY, make_batch, run_config

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_tiny_model_overfits_a_fixed_batch():
  cfg = run_config(lr=3e-3)
  cfg.optimizer.schedule = "constant"
  model = BertForPreTraining(TINY.replace(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
  mesh = sharding.make_mesh((1, 1, 1), devices=jax.devices()[:1])
  tx, _ = optimizers.optimizer_from_run_config(cfg)
  state, shardings = ts.create_train_state(cfg, model, mesh, tx)
  step = ts.make_train_step(cfg, model, tx, mesh, shardings)
  batch = make_batch(batch=8)
  losses = []
  for _ in range(120):
    state, m = step(state, batch)
    losses.append(ts.normalize(m)["mlm_loss"])
  assert losses[-1] < 0.1 * losses[0], (losses[0], losses[-1])


ONE_LAYER = TINY.replace(num_hidden_layers=1)


def single_device_mesh():
  return sharding.make_mesh((1, 1, 1), devices=jax.devices()[:1])


@pytest.mark.slow      # a run of several seconds; CI runs it, the fast tier keeps the unit tests
def test_skip_policy_leaves_state_untouched_on_a_nan_step_and_stops_after_max_consecutive(tmp_path):
  cfg = run_config(nan_policy="skip")
  model = BertForPreTraining(ONE_LAYER)
  mesh = single_device_mesh()
  tx, _ = optimizers.optimizer_from_run_config(cfg)
  state, shardings = ts.create_train_state(cfg, model, mesh, tx)
  step = ts.make_train_step(cfg, model, tx, mesh, shardings, donate=False)
  bad = make_batch()
  bad["masked_lm_weights"][0, 0] = np.nan
  after, m = step(state, bad)
  summary = ts.normalize(m)
  assert summary["nonfinite_count"] == 1 and summary["first_nonfinite_step"] == 1
  assert int(after.step) == 1                         # the batch is consumed, the update is not applied
  for x, y in zip(jax.tree.leaves((after.params, after.opt_state)), jax.tree.leaves((state.params, state.opt_state))):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  after2, m2 = step(after, make_batch(seed=1))
  assert ts.normalize(m2)["nonfinite_count"] == 0 and np.isfinite(ts.normalize(m2)["mlm_loss"])
  assert not np.array_equal(after2.params["nsp"]["kernel"], after.params["nsp"]["kernel"])
  # Steps 1 (bad), 2 (good), then 3 bad steps in a row: the guard (max_consecutive_nonfinite=3) lets the
  # isolated one pass and stops at step 5, the third in a row, with a one-line error.
  guard = ts.NonFiniteGuard("skip", 3)
  guard.check(summary, 1)
  guard.check(ts.normalize(m2), 2)
  state3, stopped = after2, None
  for i in (3, 4, 5):
    state3, m3 = step(state3, bad)
    try:
      guard.check(ts.normalize(m3), i)
    except ts.NonFiniteError as e:
      stopped = (i, str(e))
      break
  assert stopped is not None and stopped[0] == 5, stopped
  assert "the last 3 steps (up to step 5) were all non-finite" in stopped[1]
  print("measured:", stopped[1])
  assert isinstance(ts.NonFiniteError("x"), UserError) and isinstance(ts.NonFiniteError("x"), FloatingPointError)
  # No checkpoint ever holds non-finite params: save() refuses them (and the skipped state is finite).
  assert ts.all_finite(state3.params)
  ckpt = checkpoints.Checkpointer(str(tmp_path / "checkpoints"), async_save=False)
  with pytest.raises(ts.NonFiniteError, match="hold NaN/Inf values; not checkpointed"):
    ckpt.save(5, state3.replace(params=jax.tree.map(lambda x: x * np.nan, state3.params)))
  ckpt.close()
  assert not [n for n in os.listdir(tmp_path / "checkpoints") if n[0].isdigit()]


@pytest.mark.slow      # a run of several seconds; CI runs it, the fast tier keeps the unit tests
def test_stop_policy_reports_the_first_bad_step_and_the_loop_raises():
  cfg = run_config(nan_policy="stop")
  model = BertForPreTraining(ONE_LAYER)
  mesh = single_device_mesh()
  tx, _ = optimizers.optimizer_from_run_config(cfg)
  state, shardings = ts.create_train_state(cfg, model, mesh, tx)
  step = ts.make_train_step(cfg, model, tx, mesh, shardings)
  bad = make_batch()
  bad["masked_lm_weights"][3, 1] = np.inf
  acc = None
  for batch in (make_batch(seed=1), bad, make_batch(seed=2)):   # steps 1, 2 (bad), 3
    state, m = step(state, batch)
    acc = ts.merge_metrics(acc, m)
  summary = ts.normalize(acc)
  assert summary["nonfinite_count"] >= 1 and summary["first_nonfinite_step"] == 2
  with pytest.raises(FloatingPointError, match="non-finite loss or gradient at step 2"):
    ts.NonFiniteGuard("stop", 10).check(summary, 3)
  ts.NonFiniteGuard("skip", 10).check(summary, 3)    # logs a warning, keeps going


# ---- end-to-end runs of train.py -----------------------------------------------------------------
@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
  """A tiny raw-text corpus (one sentence per line, blank line between documents) and its vocab."""
  d = tmp_path_factory.mktemp("corpus")
  words = ["the", "a", "cat", "dog", "sat", "on", "mat", "running", "plays", "played", "is", "was",
           "hello", "world", "jax", "bert", "model", "training", "data"]
  testing.write_word_documents(d / "corpus.txt", words, 40)
  vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", "run", "##ning", "play", "##s", "##ed",
           "train", "##ing"] + [w for w in words if w not in ("running", "plays", "played", "training")]
  (d / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
  return str(d / "corpus.txt"), str(d / "vocab.txt"), str(d / "jax_cache")


def start_train(workdir, corpus, extra=()):
  text, vocab, cache = corpus
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_COMPILATION_CACHE_DIR=cache,
             JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0", JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
  cmd = [sys.executable, os.path.join(REPO, "train.py"), "--config=configs/pretrain.py:size=tiny,runlocal",
         f"--workdir={workdir}", f"--config.data.input_files={text}", f"--config.data.vocab_file={vocab}",
         f"--config.num_train_steps={TOTAL_STEPS}", "--config.checkpoint_every_steps=5",
         "--config.log_every_steps=5", "--config.progress_bar=false", *extra]
  return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc):
  out, err = proc.communicate(timeout=300)
  return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def run_train(workdir, corpus, extra=()):
  return finish(start_train(workdir, corpus, extra))


def complete_steps(workdir):
  d = os.path.join(workdir, "checkpoints")
  return sorted(int(n) for n in os.listdir(d) if n.isdigit()) if os.path.isdir(d) else []


def saving(workdir):
  """True while an asynchronous save is in flight (Orbax writes <step>.orbax-checkpoint-tmp-* first)."""
  d = os.path.join(workdir, "checkpoints")
  return os.path.isdir(d) and any("tmp" in n for n in os.listdir(d))


def kill_when(workdir, corpus, condition, signum=signal.SIGKILL):
  """Runs train.py and sends it `signum` from outside as soon as condition(workdir) holds (polled every 2 ms):
  SIGKILL as a preempted machine would, SIGINT as Ctrl-C would; returns the finished process."""
  proc = start_train(workdir, corpus)
  deadline = time.time() + 300
  while proc.poll() is None and time.time() < deadline:
    if condition(workdir):
      proc.send_signal(signum)
      break
    time.sleep(0.002)
  return finish(proc)


TOTAL_STEPS = 25


@pytest.mark.slow
def test_resume_after_sigint_and_after_a_kill_mid_save_gives_identical_params(corpus, tmp_path):
  ref_dir, run_dir = str(tmp_path / "uninterrupted"), str(tmp_path / "interrupted")
  # The uninterrupted reference runs alongside the first interrupted run (2 cores).
  ref_proc = start_train(ref_dir, corpus)
  # Ctrl-C once the first checkpoint is on disk: a checkpoint at the current step, exit 130.
  first = kill_when(run_dir, corpus, lambda d: bool(complete_steps(d)), signum=signal.SIGINT)
  ref = finish(ref_proc)
  assert ref.returncode == 0, ref.stderr[-3000:]
  # Start-up is timed once; the train step compiled ahead of time matched the data's batches.
  assert len(re.findall(r"start-up: imports and config [\d.]+ s; then at once: data [\d.]+ s \| state [\d.]+ s "
                        r"\+ train-step compile [\d.]+ s; first step [\d.]+ s later; first step [\d.]+ s after "
                        r"launch", ref.stderr)) == 1, ref.stderr[-3000:]
  assert "compiling again" not in ref.stderr
  assert first.returncode == 130, (first.returncode, first.stderr[-3000:])
  killed_at = complete_steps(run_dir)[-1]
  assert killed_at < TOTAL_STEPS
  assert f"stopped at step {killed_at}: checkpoint saved" in first.stderr, first.stderr[-2000:]
  assert not os.path.exists(os.path.join(run_dir, "workdir.lock"))       # released on the way out
  # Restart: SIGKILLed while a later asynchronous save is in flight (or, at the latest, once it landed).
  second = kill_when(run_dir, corpus, lambda d: saving(d) or complete_steps(d)[-1] > killed_at)
  assert second.returncode == -9, second.stderr[-3000:]
  assert re.search(rf"resumed from \S+ at step {killed_at}\b", second.stderr), second.stderr[-2000:]
  assert "stale lock" not in second.stderr
  last_complete = complete_steps(run_dir)[-1]
  assert last_complete >= killed_at
  # Restart again: takes over the killed run's lock, resumes from the last complete checkpoint, drops the
  # metrics rows logged after it, and finishes the run.
  third = run_train(run_dir, corpus)
  assert third.returncode == 0, third.stderr[-3000:]
  assert re.search(rf"resumed from \S+ at step {last_complete}\b", third.stderr), third.stderr[-2000:]
  assert re.search(r"took over a stale lock \(process \d+ is gone\)", third.stderr), third.stderr[-2000:]
  steps = [json.loads(line)["step"] for line in open(os.path.join(run_dir, "metrics.jsonl"))]
  assert steps == sorted(set(steps)), steps                          # unique and increasing after the crashes
  ref_steps = [json.loads(line)["step"] for line in open(os.path.join(ref_dir, "metrics.jsonl"))]
  assert set(ref_steps) <= set(steps) and killed_at in steps, (steps, ref_steps)

  for name, directory in (("uninterrupted", ref_dir), ("interrupted", run_dir)):
    assert complete_steps(directory)[-1] == TOTAL_STEPS, name
  ref_params = load_pretrained(ref_dir).params
  run_params = load_pretrained(run_dir).params
  for (path, x), y in zip(jax.tree_util.tree_flatten_with_path(ref_params)[0], jax.tree.leaves(run_params)):
    np.testing.assert_array_equal(x, y, err_msg=jax.tree_util.keystr(path))
  # The work dir describes itself, and the logged metrics match the uninterrupted run's at step 20.
  assert {"config.json", "model_config.json", "vocab.txt", "metrics.jsonl"} <= set(os.listdir(run_dir))
  last = lambda d: json.loads(open(os.path.join(d, "metrics.jsonl")).read().splitlines()[-1])  # noqa: E731
  assert last(run_dir)["step"] == TOTAL_STEPS and last(run_dir)["mlm_loss"] == last(ref_dir)["mlm_loss"]
  for key in ("step", "mlm_loss", "mlm_accuracy", "nsp_accuracy", "seq_per_sec"):
    assert key in last(ref_dir)
  assert os.path.exists(os.path.join(ref_dir, "plots", "loss_curve.png"))
