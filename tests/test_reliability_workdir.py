"""What a work directory survives: a second writer (the lock), torn and duplicated metrics rows, damaged
checkpoints, a resume with another model, an init_checkpoint with another vocab, SIGINT/SIGTERM, NaN steps
under nan_policy=skip, replacing best_checkpoint/ and params/, and a URL (ram://) work dir.

The module shares one tiny pre-training work dir (2 layers, hidden 64; checkpoints at steps 5 and 10, made
with the loop's own Checkpointer and work-dir writer from a zero-filled TrainState of the right shapes rather
than by 10 real steps, to keep the suite fast); each test works on a copy, in-process. The real loop's
SIGINT, SIGKILL-mid-save and metrics-truncation path runs end to end in
tests/test_training_loop.py::test_resume_after_sigint_and_after_a_kill_mid_save_gives_identical_params; the
NaN-skip limit with the real step in test_training_loop.py::test_skip_policy_*."""

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import types

import jax
import numpy as np
import pytest

from bert_jax.errors import Interrupted, UserError
from bert_jax import fileio
from bert_jax.models import BertForPreTraining
from bert_jax.pretrained import load_pretrained, params_dir
from bert_jax.engine import checkpoints, optimizers, run_files, sharding
from bert_jax.pretrain import loop as pretrain
from bert_jax.engine import train_step as ts
from bert_jax.engine import workdir as wd
from bert_jax.engine.metric_writer import MetricWriter, read_jsonl, truncate_after
from test_training_sharding import TINY

WORDS = ["the", "a", "cat", "dog", "sat", "on", "mat", "is", "was", "hello", "world", "jax", "bert", "model",
         "data", "big", "small", "red", "blue", "ran"]


def write_corpus(d):
  rng = random.Random(0)
  with open(os.path.join(d, "corpus.txt"), "w", encoding="utf-8") as f:
    for _ in range(30):
      for _ in range(rng.randint(3, 6)):
        f.write(" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 10))) + " .\n")
      f.write("\n")
  vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "."] + WORDS
  with open(os.path.join(d, "vocab.txt"), "w", encoding="utf-8") as f:
    f.write("\n".join(vocab) + "\n")
  return os.path.join(d, "corpus.txt"), os.path.join(d, "vocab.txt")


def tiny_config(corpus, vocab, steps=10, **overrides):
  """configs/pretrain.py tiny/runlocal shrunk to 2 layers x hidden 64, batch 8, length 32, no progress bar."""
  from configs import pretrain as pretrain_config
  c = pretrain_config.get_config("size=tiny,runlocal")
  c.model.hidden_size, c.model.num_attention_heads, c.model.intermediate_size = 64, 4, 128
  c.model.max_position_embeddings = 64
  c.data.input_files, c.data.vocab_file = corpus, vocab
  c.data.max_seq_length, c.data.max_predictions_per_seq, c.data.shuffle_buffer = 32, 5, 100
  c.batch_size, c.num_train_steps, c.warmup_steps = 8, steps, 0
  c.checkpoint_every_steps, c.log_every_steps, c.eval_every_steps = 5, 5, 0
  c.progress_bar = False
  c.mesh.shape = (-1, 1, 1)
  for k, v in overrides.items():
    obj = c
    *parents, leaf = k.split(".")
    for p in parents:
      obj = obj[p]
    obj[leaf] = v
  return c


@pytest.fixture(scope="module")
def run10(tmp_path_factory):
  """(work dir of a tiny run at step 10: checkpoints 5 and 10, config files, metrics rows 5 and 10; corpus;
  vocab). The states are a fresh TrainState with its step set: what is inside does not matter here."""
  d = str(tmp_path_factory.mktemp("reliability"))
  corpus, vocab = write_corpus(d)
  workdir = os.path.join(d, "run")
  cfg = tiny_config(corpus, vocab)
  model_config = ts.model_config(cfg.model, params_dir.count_vocab_lines(vocab))
  model = BertForPreTraining(model_config, targets=tuple(cfg.targets))
  tx, _ = optimizers.optimizer_from_run_config(cfg)
  abstract, _ = ts.abstract_train_state(cfg, model, sharding.make_mesh((1, 1, 1), devices=jax.devices()[:1]), tx)
  rng = np.random.default_rng(0)     # random (incompressible) values: the data files are real-sized
  state = jax.tree.map(lambda a: rng.standard_normal(a.shape).astype(a.dtype) if np.issubdtype(a.dtype, np.floating)
                       else np.zeros(a.shape, a.dtype), abstract)   # no compile: shapes are what matter
  checkpoints.write_workdir_files(workdir, checkpoints.config_to_dict(cfg), model_config, vocab)
  ckpt = checkpoints.Checkpointer(os.path.join(workdir, "checkpoints"))
  writer = MetricWriter(workdir)
  for step in (5, 10):
    ckpt.save(step, state.replace(step=np.int32(step)), {"scan_layers": False, "data": {}})
    writer.write(step, {"mlm_loss": 3.0})
  ckpt.close()
  writer.close()
  return workdir, corpus, vocab


def copy_run(run10, tmp_path, name="run"):
  src, corpus, vocab = run10
  dst = str(tmp_path / name)
  shutil.copytree(src, dst)
  return dst, corpus, vocab


def steps_in(path):
  return [r["step"] for r in read_jsonl(path)]


# ---- the lock ----------------------------------------------------------------------------------------
def test_second_run_on_a_locked_workdir_stops_at_once_naming_the_holder(run10, tmp_path, monkeypatch):
  workdir, corpus, vocab = copy_run(run10, tmp_path)
  assert not os.path.exists(os.path.join(workdir, wd.LOCK_NAME))        # the finished run released it
  holder = wd.WorkdirLock(workdir, kind="pretrain").acquire()
  try:
    before = {n: os.path.getmtime(os.path.join(workdir, n)) for n in os.listdir(workdir)}
    t0 = time.time()
    with pytest.raises(UserError, match=rf"in use by another run: host {socket.gethostname()}, pid {os.getpid()}, "
                                        r"started \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(pretrain\)") as e:
      pretrain.train_and_evaluate(tiny_config(corpus, vocab, steps=20), workdir)
    assert time.time() - t0 < 5                                          # before any model or data work
    print("measured:", e.value)
    after = {n: os.path.getmtime(os.path.join(workdir, n)) for n in os.listdir(workdir)}
    assert after == before                                               # nothing written, nothing cleaned
    from bert_jax.finetune import loop
    with pytest.raises(UserError, match=r"in use by another run: .*\(pretrain\)"):   # fine-tuning too
      loop.run_plan(types.SimpleNamespace(workdir=workdir))     # the lock comes before anything the plan says
  finally:
    holder.release()
  assert not os.path.exists(os.path.join(workdir, wd.LOCK_NAME))


def test_a_lock_left_by_a_dead_process_is_taken_over_and_logged(tmp_path, caplog):
  dead = subprocess.Popen([sys.executable, "-c", "pass"])
  dead.wait()
  lock = wd.WorkdirLock(str(tmp_path))
  info = dict(lock._new_info(), pid=dead.pid)   # pylint: disable=protected-access
  (tmp_path / wd.LOCK_NAME).write_text(json.dumps(info))
  with caplog.at_level("WARNING"):
    lock.acquire()
  try:
    assert json.loads((tmp_path / wd.LOCK_NAME).read_text())["pid"] == os.getpid()
    assert f"took over a stale lock (process {dead.pid} is gone)" in caplog.text
  finally:
    lock.release()


def test_another_hosts_lock_is_stale_only_after_the_heartbeat_threshold(tmp_path):
  lock = wd.WorkdirLock(str(tmp_path))
  info = dict(lock._new_info(), host="other-host", pid=1)   # pylint: disable=protected-access
  path = tmp_path / wd.LOCK_NAME
  path.write_text(json.dumps(info))
  with pytest.raises(UserError, match="host other-host, pid 1"):
    wd.WorkdirLock(str(tmp_path)).acquire()
  old = time.time() - wd.STALE_SECONDS - 10
  path.write_text(json.dumps(dict(info, heartbeat=old)))
  os.utime(path, (old, old))
  assert "no heartbeat" in lock.stale_reason(lock.read())
  lock.acquire()
  lock.release()


# ---- metrics after a crash ----------------------------------------------------------------------------
def test_readers_skip_a_torn_line_and_resume_truncates_to_the_restored_step(tmp_path, caplog):
  path = tmp_path / "metrics.jsonl"
  # What SIGKILL during a write, then a restart without truncation, used to leave: a torn row glued to the
  # next one, and rows after the checkpoint the restart resumed from.
  path.write_text('{"step": 5, "mlm_loss": 3.0}\n{"step": 10, "mlm_loss": 2.9}\n{"step": 15, "mlm_lo'
                  '{"step": 15, "mlm_loss": 2.8}\n{"step": 20, "mlm_loss": 2.7}\n{"step": 25, "mlm')
  with caplog.at_level("WARNING"):
    assert steps_in(path) == [5, 10, 20]
  assert "skipped 2 unreadable line(s)" in caplog.text
  assert truncate_after(str(path), 10) == 3          # 2 torn lines + the row of step 20
  assert steps_in(path) == [5, 10] and path.read_text().endswith("\n")
  backups = [n for n in os.listdir(tmp_path) if n.startswith("metrics.jsonl.bak-")]
  assert len(backups) == 1 and "mlm_lo{" in (tmp_path / backups[0]).read_text()
  assert truncate_after(str(path), 10) == 0                     # clean: untouched, no second backup


# ---- damaged checkpoints ----------------------------------------------------------------------------------
def _damage(step_dir, how):
  if how == "missing state/":
    shutil.rmtree(os.path.join(step_dir, "state"))
  elif how == "garbage meta":
    for root, _, files in os.walk(os.path.join(step_dir, "meta")):
      for f in files:
        with open(os.path.join(root, f), "wb") as fh:
          fh.write(b"\x00garbage{")
  else:   # the array data files of the state (OCDBT's d/ folders): truncated, or bytes overwritten
    files = [os.path.join(r, f) for r, _, fs in os.walk(os.path.join(step_dir, "state")) for f in fs
             if os.path.basename(r) == "d" and os.path.getsize(os.path.join(r, f)) > 10000]
    assert files
    for f in files:
      size = os.path.getsize(f)
      if how == "truncated data file":
        with open(f, "r+b") as fh:
          fh.truncate(size // 3)
      else:
        with open(f, "r+b") as fh:
          fh.seek(size // 4)
          fh.write(os.urandom(size // 2))


def _restore(workdir, corpus, vocab):
  cfg = tiny_config(corpus, vocab)
  model = BertForPreTraining(params_dir.read_model_config(workdir).replace(dtype="float32"))
  tx, _ = optimizers.optimizer_from_run_config(cfg)
  mesh = sharding.make_mesh((1, 1, 1), devices=jax.devices()[:1])
  ckpt = checkpoints.Checkpointer(os.path.join(workdir, "checkpoints"))
  try:
    return checkpoints.restore_latest_readable(ckpt, cfg, model, mesh, tx)
  finally:
    ckpt.close()


@pytest.mark.parametrize("how", ["truncated data file", "corrupted bytes", "garbage meta", "missing state/"])
def test_an_unreadable_newest_checkpoint_is_moved_aside_and_the_previous_restores(run10, tmp_path, caplog, how):
  workdir, corpus, vocab = copy_run(run10, tmp_path)
  _damage(os.path.join(workdir, "checkpoints", "10"), how)
  if how == "truncated data file":    # a reader (init_checkpoint=DIR, fine-tuning) falls back too, moving nothing
    with caplog.at_level("WARNING"):
      got = load_pretrained(workdir).params
    assert "checkpoint 10 of" in caplog.text and "reading 5" in caplog.text
    assert "10" in os.listdir(os.path.join(workdir, "checkpoints"))
    assert "bert" in got
    caplog.clear()
  with caplog.at_level("WARNING"):
    state, _, meta = _restore(workdir, corpus, vocab)
  assert meta["step"] == 5 and int(state.step) == 5
  # Only this package's own line: orbax may also log a stray "Task exception was never retrieved" for the
  # damaged file, and the tmp path (test_an_unreadable_...) would match a bare substring search.
  line = next(r.getMessage() for r in caplog.records
              if r.name == checkpoints.log.name and r.getMessage().startswith("checkpoint 10 unreadable"))
  print(f"measured ({how}):", line)
  assert line.startswith("checkpoint 10 unreadable (") and line.endswith("); restoring 5")
  names = os.listdir(os.path.join(workdir, "checkpoints"))
  assert "10" not in names and any(n.startswith("10.corrupt-") for n in names)
  reader = checkpoints.Checkpointer(os.path.join(workdir, "checkpoints"), read_only=True)
  assert reader.all_steps() == [5]
  reader.close()


def test_a_failed_restore_drops_the_orphaned_reads_event_loop_tracebacks_and_nothing_else(monkeypatch):
  # a truncated checkpoint's restore printed ~130 "RuntimeError: Event loop is closed" tracebacks (tensorstore
  # reads completing into Orbax's closed loop) after the one-line warning
  import sys
  import types
  seen = []
  monkeypatch.setattr(sys, "unraisablehook", seen.append)
  monkeypatch.setitem(checkpoints._QUIET, "installed", False)
  checkpoints.quiet_orphaned_reads()
  checkpoints.quiet_orphaned_reads()                 # once: the previous hook is not wrapped twice

  def unraisable(error, obj=None):
    return types.SimpleNamespace(exc_type=type(error), exc_value=error, exc_traceback=None, err_msg=None, object=obj)
  sys.unraisablehook(unraisable(RuntimeError("Event loop is closed")))
  other = [unraisable(RuntimeError("something else")), unraisable(ValueError("Event loop is closed")),
           unraisable(RuntimeError("Event loop is closed"), obj=object())]
  for u in other:
    sys.unraisablehook(u)
  assert seen == other


def test_when_no_checkpoint_restores_the_run_stops_with_an_error_and_moves_nothing(run10, tmp_path):
  workdir, corpus, vocab = copy_run(run10, tmp_path)
  _damage(os.path.join(workdir, "checkpoints", "10"), "missing state/")
  _damage(os.path.join(workdir, "checkpoints", "5"), "garbage meta")
  with pytest.raises(UserError, match=r"no checkpoint in \S+ can be restored: step 10: .*; step 5: ") as e:
    _restore(workdir, corpus, vocab)
  print("measured:", e.value)
  assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["10", "5"]


# ---- resume and init checks ---------------------------------------------------------------------------
def test_resuming_with_another_model_size_is_refused_naming_the_fields(run10, tmp_path):
  workdir, corpus, vocab = copy_run(run10, tmp_path)
  config_json = open(os.path.join(workdir, "config.json")).read()
  with pytest.raises(UserError, match=r"hidden_size: 64 in workdir vs 256 in config.*num_hidden_layers: 2 in "
                                      r"workdir vs 4 in config") as e:
    pretrain.train_and_evaluate(tiny_config(corpus, vocab, steps=20, **{
        "model.size": "mini", "model.hidden_size": 256, "model.intermediate_size": 1024}), workdir)
  print("measured:", e.value)
  assert open(os.path.join(workdir, "config.json")).read() == config_json     # not rewritten
  assert not os.path.exists(os.path.join(workdir, wd.LOCK_NAME))             # released on the error


def test_resuming_with_another_optimizer_names_the_field_and_leaves_the_work_dir_files(run10, tmp_path):
  # config.json and plan.json were rewritten with the refused run's config before its restore failed (export-hf
  # reads plan.json's targets), and the error did not say which field made the checkpoints unreadable
  workdir, corpus, vocab = copy_run(run10, tmp_path)
  before = {n: open(os.path.join(workdir, n)).read() for n in ("config.json", "model_config.json")}
  with pytest.raises(UserError, match=r"no checkpoint in \S+ can be restored: .*This run changes "
                                      r"config.optimizer.name: 'adamw' in the work dir vs 'lamb' now") as e:
    pretrain.train_and_evaluate(tiny_config(corpus, vocab, steps=20, **{"optimizer.name": "lamb"}), workdir)
  print("measured:", e.value)
  assert {n: open(os.path.join(workdir, n)).read() for n in before} == before
  assert not os.path.exists(os.path.join(workdir, "plan.json"))
  assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["10", "5"]


def test_a_finished_run_started_again_reports_its_last_logged_metrics(run10, tmp_path):
  # train.py printed a bare "final: step=10" (no step ran, so no window was logged)
  workdir, corpus, vocab = copy_run(run10, tmp_path)
  result = pretrain.train_and_evaluate(tiny_config(corpus, vocab, steps=10), workdir)
  assert result == {"mlm_loss": 3.0, "step": 10}, result
  assert steps_in(os.path.join(workdir, "metrics.jsonl")) == [5, 10]


def test_init_checkpoint_with_another_vocab_size_is_refused_before_training(run10, tmp_path):
  src, corpus, vocab = run10
  bigger = str(tmp_path / "vocab_big.txt")
  with open(bigger, "w") as f:
    f.write(open(vocab).read() + "".join(f"extra{i}\n" for i in range(200)))
  with pytest.raises(UserError, match=rf"vocab_file {bigger} has 226 tokens but init_checkpoint {src} was "
                                      r"trained with vocab_size=26") as e:
    pretrain.train_and_evaluate(tiny_config(corpus, bigger, **{"init_checkpoint": src}), str(tmp_path / "new"))
  print("measured:", e.value)
  assert not os.path.exists(tmp_path / "new")     # refused by the plan: nothing created, nothing trained


# ---- signals and resume ---------------------------------------------------------------------------------
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_stop_signals_turn_sigint_and_sigterm_into_a_flag_and_restore_the_handlers(signum):
  before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
  stop = wd.StopSignals()
  try:
    assert not stop.reached(1)
    os.kill(os.getpid(), signum)
    time.sleep(0.01)
    assert stop.reached(2) and stop.signum == signum
    if signum == signal.SIGINT:            # a second Ctrl-C aborts at once
      assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
  finally:
    stop.restore()
  assert {s: signal.getsignal(s) for s in before} == before
  assert Interrupted(signum, 7).exit_code == {signal.SIGINT: 130, signal.SIGTERM: 143}[signum]


# A preemption notice during a multi-host restart's start-up: tests/test_reliability_preemption.py.


# ---- atomic replacement of params dirs --------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["msgpack", "orbax"])
def test_a_failed_save_leaves_the_previous_params_dir_and_best_checkpoint_whole(tmp_path, tiny_vocab,
                                                                               monkeypatch, fmt):
  from bert_jax.finetune import loop
  rng = np.random.default_rng(0)
  params = {"bert": {"embeddings": {"w": rng.normal(size=(26, 8)).astype(np.float32)}},
            "classifier": {"kernel": rng.normal(size=(8, 2)).astype(np.float32)}}
  out = params_dir.save_params_dir(str(tmp_path / "p"), TINY, params, tiny_vocab, fmt=fmt)
  best = str(tmp_path / "best_checkpoint")
  loop.save_best(best, TINY, params, tiny_vocab, {"do_lower_case": True, "step": 1})

  def boom(*a, **k):
    raise OSError("disk full")
  import orbax.checkpoint as ocp
  monkeypatch.setattr(ocp.StandardCheckpointer, "save", boom)     # params/ (fmt="orbax")
  monkeypatch.setattr(fileio, "write_bytes_atomic", boom)         # params.msgpack, JSON files
  with pytest.raises(OSError, match="disk full"):
    params_dir.save_params_dir(out, TINY, params, tiny_vocab, fmt=fmt)
  with pytest.raises(OSError, match="disk full"):
    loop.save_best(best, TINY, params, tiny_vocab, {"do_lower_case": True, "step": 2})
  monkeypatch.undo()
  for d in (out, best):
    _, got, _ = params_dir.load_params_dir(d)      # fake params: load_pretrained would check BertModel shapes
    for x, y in zip(jax.tree.leaves(got), jax.tree.leaves(params)):
      np.testing.assert_array_equal(x, y)
  assert json.load(open(os.path.join(best, "finetune_info.json")))["step"] == 1


# ---- a URL work dir -------------------------------------------------------------------------------------------
def test_workdir_files_metrics_lock_and_params_on_a_url_path():
  """The path layer on a URL scheme (ram://, tf.io.gfile's in-memory file system, standing in for gs://).
  Orbax checkpoints go through etils.epath/tensorstore, which know gs:// and local paths only, so they are
  not part of this test."""
  pytest.importorskip("tensorflow")
  root = f"ram://reliability-{os.getpid()}-{time.time_ns()}/run"
  lock = wd.WorkdirLock(root, kind="pretrain").acquire()
  try:
    with pytest.raises(UserError, match="in use by another run"):
      wd.WorkdirLock(root).acquire()
    checkpoints.write_workdir_files(root, {"batch_size": 8}, TINY, None)
    assert json.loads(fileio.read_text(fileio.join(root, "model_config.json")))["hidden_size"] == 64
    assert not run_files.write_json_if_changed(fileio.join(root, "config.json"), {"batch_size": 8})   # unchanged
    writer = MetricWriter(root, enabled=True)
    for s in (5, 10, 15):
      writer.write(s, {"mlm_loss": 1.0 / s})
    writer.close()
    # TensorBoard events land in the URL work dir too (tensorboardX would open ram:// as a local path).
    assert any(n.startswith("events.out.tfevents") for n in fileio.listdir(fileio.join(root, "tensorboard")))
    assert not os.path.exists(root.split("/", 1)[0])
    with fileio.open_file(fileio.join(root, "metrics.jsonl"), "a") as f:
      f.write('{"step": 2')
    assert [r["step"] for r in read_jsonl(fileio.join(root, "metrics.jsonl"))] == [5, 10, 15]
    assert truncate_after(fileio.join(root, "metrics.jsonl"), 10) == 2
    assert [r["step"] for r in read_jsonl(fileio.join(root, "metrics.jsonl"))] == [5, 10]
    assert any(n.startswith("metrics.jsonl.bak-") for n in fileio.listdir(root))
    params = {"bert": {"w": np.arange(6, dtype=np.float32).reshape(2, 3)}}
    out = params_dir.save_params_dir(fileio.join(root, "best_checkpoint"), TINY, params)
    cfg, got, _ = params_dir.load_params_dir(out)
    assert cfg.hidden_size == 64
    np.testing.assert_array_equal(got["bert"]["w"], params["bert"]["w"])
  finally:
    lock.release()
  assert not fileio.exists(fileio.join(root, wd.LOCK_NAME))
