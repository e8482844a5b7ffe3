"""train.py as a user meets it: out of device memory on one process, SIGTERM before the first step, and the
command-line mistakes docs/pretraining.md invites. Each mistake is one `error:` line and a
non-zero exit without a traceback (only --verbose shows it).

In-process tests use tests/test_reliability_workdir.py's tiny config (2 layers, hidden 64); the subprocess
ones run train.py itself on the same corpus."""

import os
import re
import signal
import subprocess
import sys
import time

import jax
import pytest

from bert_jax.errors import Interrupted, UserError
from bert_jax.pretrain import loop as pretrain
from test_reliability_workdir import tiny_config, write_corpus

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OOM = "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 12.00GiB."


@pytest.fixture(scope="module")
def files(tmp_path_factory):
  return write_corpus(str(tmp_path_factory.mktemp("train_cli")))


def _train_argv(workdir, files, *extra):
  corpus, vocab = files
  return [sys.executable, os.path.join(REPO, "train.py"), "--config=configs/pretrain.py:size=tiny,runlocal",
          f"--workdir={workdir}", f"--config.data.input_files={corpus}", f"--config.data.vocab_file={vocab}",
          "--config.num_train_steps=4", "--config.batch_size=8", "--config.data.max_seq_length=32",
          "--config.data.max_predictions_per_seq=5", "--config.progress_bar=false", *extra]


def _env():
  return dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=1", PYTHONPATH=REPO)


# ---- out of device memory, one process ----------------------------------------------------------------
def _out_of_memory(*args, **kwargs):
  raise jax.errors.JaxRuntimeError(OOM)


def test_a_step_out_of_device_memory_is_a_user_error_naming_the_step_and_what_lowers_it(files, tmp_path,
                                                                                       monkeypatch):
  """It was JaxRuntimeError's traceback and exit 1 (which launchers retry); multi-host printed one line, exit 2."""
  # the first call (compile + run) fails; without .lower() the ahead-of-time compile is skipped
  monkeypatch.setattr(pretrain.ts, "make_train_step", lambda *a, **k: _out_of_memory)
  with pytest.raises(UserError) as e:
    pretrain.train_and_evaluate(tiny_config(*files), str(tmp_path / "run"))
  assert str(e.value).startswith(f"step 1 (compile) failed (JaxRuntimeError: {OOM}): out of device memory, "
                                 "which a restart would repeat: lower config.batch_size (raise "
                                 "config.grad_accum_steps to keep it)"), str(e.value)
  assert isinstance(e.value.__cause__, jax.errors.JaxRuntimeError)     # --verbose shows XLA's traceback


def test_out_of_device_memory_during_start_up_names_start_up(files, tmp_path, monkeypatch):
  monkeypatch.setattr(pretrain, "_initial_state", _out_of_memory)
  with pytest.raises(UserError, match=r"^start-up \(initialising or restoring the state\) failed "
                                      r"\(JaxRuntimeError: RESOURCE_EXHAUSTED: .*lower config.batch_size"):
    pretrain.train_and_evaluate(tiny_config(*files), str(tmp_path / "run"))


def test_other_runtime_errors_of_one_process_keep_their_traceback(files, tmp_path, monkeypatch):
  def fail(*args, **kwargs):
    raise jax.errors.JaxRuntimeError("INTERNAL: something XLA got wrong")
  monkeypatch.setattr(pretrain, "_initial_state", fail)
  with pytest.raises(jax.errors.JaxRuntimeError):
    pretrain.train_and_evaluate(tiny_config(*files), str(tmp_path / "run"))


_OOM_MAIN = ("import os, runpy, sys, jax\n"
             "from bert_jax.pretrain import loop as pretrain\n"
             "def oom(*a, **k): raise jax.errors.JaxRuntimeError(os.environ['OOM'])\n"
             "pretrain._initial_state = oom\n"
             "sys.argv = sys.argv[1:]\n"
             "runpy.run_path(sys.argv[0], run_name='__main__')\n")


@pytest.mark.slow
def test_train_py_out_of_device_memory_is_one_error_line_and_exit_2(files, tmp_path):
  argv = _train_argv(tmp_path / "run", files)
  got = subprocess.run([sys.executable, "-c", _OOM_MAIN] + argv[1:], cwd=REPO, env=dict(_env(), OOM=OOM),
                       capture_output=True, text=True, timeout=300)
  assert got.returncode == 2, got.stderr[-3000:]
  assert "Traceback" not in got.stderr, got.stderr[-3000:]
  last = got.stderr.strip().splitlines()[-1]
  assert last.startswith("error: start-up (initialising or restoring the state) failed (JaxRuntimeError: "
                         "RESOURCE_EXHAUSTED: Out of memory"), last


# ---- SIGTERM before the first step ------------------------------------------------------------------
def test_sigterm_during_start_up_prints_an_interrupted_line_saying_no_checkpoint_was_written(files, tmp_path):
  """It died of the signal (exit 143, no line): a scheduler's log did not say the run stopped on request."""
  workdir = tmp_path / "run"
  proc = subprocess.Popen(_train_argv(workdir, files), cwd=REPO, env=_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
  try:
    deadline = time.time() + 120
    while not (workdir / "workdir.lock").exists():     # the plan is resolved, start-up begins
      assert proc.poll() is None and time.time() < deadline, proc.communicate()[1][-3000:]
      time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
  finally:
    if proc.poll() is None:
      proc.kill()
  assert proc.returncode == 143, err[-3000:]
  assert "interrupted: stopped by SIGTERM during start-up, before step 1; no checkpoint written" in err, err[-3000:]
  assert "Traceback" not in err
  ckpts = workdir / "checkpoints"
  assert not ckpts.exists() or not [n for n in os.listdir(ckpts) if n.isdigit()]
  assert not (workdir / "workdir.lock").exists()


def test_a_signal_during_start_up_of_a_resumed_run_names_the_checkpoint_it_resumes_from():
  class Signals:
    signum = signal.SIGTERM
  e = pretrain._stopped_during_start_up(Signals(), 40)
  assert isinstance(e, Interrupted) and e.exit_code == 143 and e.step == 40
  assert str(e) == "stopped by SIGTERM during start-up at step 40; no new checkpoint written, rerun to resume " \
                   "from step 40"


# ---- the command line, as a new user meets it ---------------------------------------------------------
def test_an_empty_workdir_is_one_error_not_a_run_in_the_current_directory(files, tmp_path, monkeypatch):
  """--workdir= trained into the current directory (checkpoints/, config.json, vocab.txt ... in a checkout)."""
  monkeypatch.chdir(tmp_path)
  for workdir in ("", "  "):
    with pytest.raises(UserError, match=r"^--workdir='\s*' is empty: expected the run's directory"):
      pretrain.train_and_evaluate(tiny_config(*files), workdir)
  assert os.listdir(tmp_path) == []


def test_resuming_with_fewer_steps_than_the_newest_checkpoint_is_refused_before_anything_changes(files,
                                                                                                 tmp_path):
  """It exited 0 having trained nothing and rewrote config.json with the smaller num_train_steps."""
  from bert_jax.pretrain.plan import resolve_pretrain
  workdir = tmp_path / "run"
  (workdir / "checkpoints" / "6").mkdir(parents=True)
  (workdir / "config.json").write_text("{}")
  with pytest.raises(UserError, match=r"^config.num_train_steps=4 is below step 6, the newest checkpoint of the "
                                      r"work dir .*: pass --config.num_train_steps=6 or more"):
    resolve_pretrain(tiny_config(*files, steps=4), str(workdir))
  assert (workdir / "config.json").read_text() == "{}"


@pytest.mark.parametrize("arg, size", [("tiny,preset=lamb_pod", "tiny"), ("size=mini,preset=lamb_pod", "mini"),
                                       ("preset=lamb_pod", "large"), ("tiny", "tiny"), ("", "base")])
def test_the_config_string_size_is_kept_also_as_a_bare_name_under_lamb_pod(arg, size):
  """`tiny,preset=lamb_pod` trained BERT-large: lamb_pod looked for "size=" in the string only."""
  from configs import pretrain as pretrain_config
  assert pretrain_config.get_config(arg).model.size == size


@pytest.mark.parametrize("arg", ["size=tiny,size=base", "tiny,base", "preset=albert,preset=budget"])
def test_a_size_or_preset_given_twice_is_an_error_not_the_last_one(arg):
  from configs import pretrain as pretrain_config
  with pytest.raises(ValueError, match="given twice"):
    pretrain_config.get_config(arg)


def test_a_work_dir_that_exists_but_cannot_be_written_is_one_error_line(files, tmp_path, monkeypatch):
  """An existing read-only work dir (another user's, a read-only mount) was a PermissionError traceback,
  exit 1; /sys/kernel, as root, shows it for real."""
  from bert_jax.engine import workdir as wd
  workdir = tmp_path / "ro"
  workdir.mkdir()
  real_open = os.open

  def read_only(path, flags, *args):
    if str(path).startswith(str(workdir)) and flags & os.O_CREAT:
      raise PermissionError(13, "Permission denied", str(path))
    return real_open(path, flags, *args)
  monkeypatch.setattr(wd.os, "open", read_only)
  with pytest.raises(UserError, match=rf"^work dir {workdir}: cannot write in it \(Permission denied creating "
                                      r"workdir.lock\); pass a writable --workdir"):
    pretrain.train_and_evaluate(tiny_config(*files), str(workdir))


def test_an_init_checkpoint_a_resumed_run_does_not_load_is_a_warning_naming_it(files, tmp_path, caplog):
  """The work dir's checkpoint wins (docs/pretraining.md's start-up order), but the flag was dropped silently."""
  from bert_jax.pretrain.plan import resolve_pretrain
  workdir = tmp_path / "run"
  (workdir / "checkpoints" / "6").mkdir(parents=True)
  with pytest.raises(UserError):              # the steps check comes first; the warning is already out
    resolve_pretrain(tiny_config(*files, steps=4, init_checkpoint="/elsewhere/run"), str(workdir))
  assert f"config.init_checkpoint=/elsewhere/run is not loaded: the work dir {workdir} resumes from its own " \
         "checkpoint" in caplog.text


def test_a_fine_tuning_config_given_to_train_py_is_one_error_line(tmp_path):
  """It was AttributeError: "'distributed'" with a traceback, exit 1."""
  got = subprocess.run([sys.executable, os.path.join(REPO, "train.py"), "--config=configs/finetune.py:task=mrpc",
                        f"--workdir={tmp_path / 'run'}"], cwd=REPO, env=_env(), capture_output=True, text=True,
                       timeout=120)
  assert got.returncode == 2, got.stderr[-3000:]
  assert got.stderr.strip().splitlines()[-1] == (
      "error: --config=configs/finetune.py:task=mrpc: not a pre-training config, it lacks num_train_steps, "
      "targets, data, distributed; train.py takes configs/pretrain.py (a fine-tuning config goes to finetune.py)")
  assert "Traceback" not in got.stderr and not (tmp_path / "run").exists()


@pytest.mark.parametrize("which", ["other", "missing", "same"])
def test_a_resumed_runs_vocab_file_that_is_not_the_work_dirs_is_a_warning(files, tmp_path, caplog, which):
  """A resumed run tokenizes with the work dir's vocab.txt; another --config.data.vocab_file was ignored
  without a word."""
  from bert_jax.pretrain.plan import _resolve_vocab
  corpus, vocab = files
  workdir = tmp_path / "run"
  workdir.mkdir()
  (workdir / "vocab.txt").write_bytes(open(vocab, "rb").read())
  given = {"other": tmp_path / "other.txt", "missing": tmp_path / "missing.txt", "same": vocab}[which]
  if which == "other":
    given.write_text(open(vocab).read() + "extra\n")
  got, _ = _resolve_vocab(tiny_config(corpus, str(given)), str(workdir), True, None)
  assert got == str(workdir / "vocab.txt")
  want = {"other": "has other tokens: this resumed run uses the work dir's",
          "missing": "cannot be read (No such file or directory): this resumed run uses the work dir's"}
  if which == "same":
    assert "vocab_file" not in caplog.text
  else:
    assert f"config.data.vocab_file={given} {want[which]} {workdir / 'vocab.txt'}" in caplog.text, caplog.text


def test_a_signal_while_the_libraries_load_stops_before_the_plan_with_an_interrupted_line(files, tmp_path):
  """train.py notes a SIGTERM from its first lines; train_and_evaluate stops before anything starts.
  Before, a SIGTERM in the seconds of imports killed the process: exit 143, no line."""
  with pytest.raises(Interrupted) as e:
    pretrain.train_and_evaluate(tiny_config(*files), str(tmp_path / "run"), stop_requested=lambda: signal.SIGTERM)
  assert e.value.exit_code == 143 and str(e.value) == (
      "stopped by SIGTERM while starting, before the plan; no checkpoint written, rerun to start (or resume)")
  assert not (tmp_path / "run").exists()


def _wait_for_early_handlers(proc, timeout=120.0):
  """Waits until train.py has installed its first-lines SIGTERM handler (Linux: the SigCgt mask in
  /proc/PID/status), then a little longer for the SIGINT one set next: a fixed sleep raced Python's start-up on
  a loaded machine (a signal before the handler kills the process with no line)."""
  deadline = time.monotonic() + timeout
  status = f"/proc/{proc.pid}/status"
  while time.monotonic() < deadline and proc.poll() is None:
    try:
      with open(status) as f:
        caught = next(int(line.split()[1], 16) for line in f if line.startswith("SigCgt:"))
    except (OSError, StopIteration):
      caught = 0
    if caught & (1 << (signal.SIGTERM - 1)):
      time.sleep(0.1)
      return
    time.sleep(0.01)
  raise AssertionError(f"train.py installed no SIGTERM handler within {timeout} s (exit {proc.poll()})")


def test_sigterm_right_after_launch_is_an_interrupted_line_too(files, tmp_path):
  proc = subprocess.Popen(_train_argv(tmp_path / "run", files), cwd=REPO, env=_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
  _wait_for_early_handlers(proc)    # the imports after them take seconds more
  proc.send_signal(signal.SIGTERM)
  _, err = proc.communicate(timeout=300)
  assert proc.returncode == 143, err[-3000:]
  assert re.search(r"^interrupted: stopped by SIGTERM (while starting, before the plan|during start-up, before "
                   r"step 1); no checkpoint written", err, re.M), err[-3000:]
  assert "Traceback" not in err


def test_ctrl_c_while_the_libraries_load_is_an_interrupted_line_and_exit_130(files, tmp_path):
  """It was a KeyboardInterrupt traceback from inside whichever import it hit."""
  # As from a terminal: SIGINT at its default (a pytest-xdist worker ignores it, and an ignored SIGINT is
  # inherited and, by design, stays ignored in train.py).
  proc = subprocess.Popen(_train_argv(tmp_path / "run", files), cwd=REPO, env=_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
  _wait_for_early_handlers(proc)    # the imports (JAX, TensorFlow) after them take seconds
  proc.send_signal(signal.SIGINT)
  _, err = proc.communicate(timeout=300)
  assert proc.returncode == 130, err[-3000:]
  assert err.strip().splitlines()[-1] == "interrupted: stopped by SIGINT while starting (nothing written)", err
  assert "Traceback" not in err and "KeyboardInterrupt" not in err
  assert not (tmp_path / "run").exists()


def test_eval_files_with_evaluation_off_is_a_warning_naming_both(files, tmp_path, caplog):
  """--config.data.eval_input_files with eval_every_steps=0 was never read, without a word."""
  from bert_jax.pretrain.plan import resolve_pretrain
  corpus, vocab = files
  resolve_pretrain(tiny_config(corpus, vocab, **{"data.eval_input_files": corpus, "eval_every_steps": 0}),
                   str(tmp_path / "run"))
  assert f"config.data.eval_input_files={corpus!r} is never read: config.eval_every_steps=0 turns evaluation " \
         "off" in caplog.text
  caplog.clear()
  resolve_pretrain(tiny_config(corpus, vocab, **{"data.eval_input_files": corpus, "eval_every_steps": 5}),
                   str(tmp_path / "run"))
  assert "never read" not in caplog.text
