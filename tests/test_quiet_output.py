"""What a new user sees at the default verbosity: no library chatter (Orbax's manager internals, JAX's backend
probe, TensorFlow's C++ start-up lines), one `error:` line for a mistake, `--help` that succeeds and lists
--verbose and --strict, one attention line, a closing line naming the work dir, and no warning about a field
the user never set. `--verbose` brings the chatter back (which is how the counting test proves it can fail)."""

import logging
import os
import re
import subprocess
import sys

import pytest

from bert_jax import cli, logs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The lines issue 51 counted in a fine-tuning run: 25 of 51 were Orbax internals; every run opened with the
# TPU probe; CPU runs showed the CUDA and oneDNN notices.
NOISE = re.compile(r"Unable to initialize backend|libtpu|cuInit|cuda drivers|oneDNN|absl::InitializeLog|"
                   r"CheckpointManager|read_only|read only|Missing metrics for step|orbax|_CHECKPOINT_METADATA|"
                   r"checkpoint_manager\.py|composite_checkpoint_handler|event_tracking")


def _env():
  return dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=1", PYTHONPATH=REPO)


# ---- the levers, in-process ---------------------------------------------------------------------------
def test_default_verbosity_mutes_orbax_and_the_backend_probe_and_verbose_restores_them():
  logs.set_verbose(False)
  try:
    assert not logging.getLogger("absl").isEnabledFor(logging.WARNING)   # Orbax's "read only" lines
    assert not logging.getLogger("orbax.checkpoint").isEnabledFor(logging.WARNING)
    assert not logging.getLogger("jax._src.xla_bridge").isEnabledFor(logging.INFO)   # "Unable to initialize"
    assert logging.getLogger("jax").isEnabledFor(logging.WARNING)        # JAX's own warnings still show
    assert logging.getLogger("absl").isEnabledFor(logging.ERROR)
    logs.set_verbose(True)
    assert logs.verbose()
    assert logging.getLogger("absl").isEnabledFor(logging.INFO)
    assert logging.getLogger("jax._src.xla_bridge").isEnabledFor(logging.INFO)
    assert logging.getLogger("bert_jax.engine.workdir").isEnabledFor(logging.DEBUG)
  finally:
    logs.set_verbose(False)
    logging.getLogger("bert_jax").setLevel(logging.NOTSET)


TF_START_UP = (
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
    "I0000 00:00:1796432864.216918    6163 port.cc:153] oneDNN custom operations are on.\n"
    "I0000 00:00:1796432864.217225    6163 cudart_stub.cc:31] Could not find cuda drivers on your machine.\n"
    "E0000 00:00:1796432867.239328    6163 cuda_platform.cc:52] failed call to cuInit: UNKNOWN ERROR (303)\n")


def test_tensorflows_native_start_up_lines_are_held_back_and_everything_else_comes_through(capfd):
  """Written to file descriptor 2 by C++ before anything configures it: only holding fd 2 reaches them."""
  logs.set_verbose(False)
  with logs.native_stderr_quiet():
    os.write(2, TF_START_UP.encode())
    os.write(2, b"a line of our own\n")
    os.write(2, b"W1205 01:10:34.197636 140683698547584 plan.py:358] an absl line of Python's logging\n")
  err = capfd.readouterr().err
  assert err == "a line of our own\nW1205 01:10:34.197636 140683698547584 plan.py:358] an absl line of Python's logging\n"


def test_an_import_that_fails_shows_everything_it_wrote(capfd):
  logs.set_verbose(False)
  with pytest.raises(ImportError):
    with logs.native_stderr_quiet():
      os.write(2, TF_START_UP.encode())
      raise ImportError("libtensorflow_framework.so.2: cannot open shared object file")
  assert capfd.readouterr().err == TF_START_UP


def test_verbose_holds_nothing_back(capfd):
  logs.set_verbose(True)
  try:
    with logs.native_stderr_quiet():
      os.write(2, TF_START_UP.encode())
  finally:
    logs.set_verbose(False)
    logging.getLogger("bert_jax").setLevel(logging.NOTSET)
  assert capfd.readouterr().err == TF_START_UP


def test_the_attention_choice_is_one_line_naming_the_training_and_the_evaluation_path(caplog):
  """Pre-training logged `auto -> xla (... dropout off)` at init, then `auto -> einsum (... dropout on)`."""
  from bert_jax.models import attention
  logs.forget(attention.log.name)
  train = attention.resolve_attention("cpu", 0.1, False, "float32", 64, 128)
  evaluation = attention.resolve_attention("cpu", 0.1, True, "float32", 64, 128)
  with caplog.at_level(logging.INFO, logger=attention.log.name):
    attention._log_choice(evaluation, "auto", train, True)     # init / eval is traced first
    attention._log_choice(train, "auto", evaluation, False)    # then the training step
  lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("attention:")]
  assert lines == ["attention: auto -> einsum in training (auto on cpu, attention dropout on), xla in evaluation "
                   "(auto on cpu, attention dropout off)"]
  logs.forget(attention.log.name)


# ---- the command line ---------------------------------------------------------------------------------
def test_help_exits_0_and_lists_verbose_and_strict():
  """--help exited 1, and --strict / --verbose (which the README uses) were only under --helpfull."""
  got = subprocess.run([sys.executable, os.path.join(REPO, "finetune.py"), "--help"], cwd=REPO, env=_env(),
                       capture_output=True, text=True, timeout=120)
  assert got.returncode == 0, got.stderr[-2000:]
  assert "--[no]verbose" in got.stdout and "--[no]strict" in got.stdout and "--workdir" in got.stdout


def test_a_config_path_relative_to_the_checkout_names_the_file_that_works_from_elsewhere(tmp_path):
  """Run from outside the checkout, `--config=configs/finetune.py:...` printed ml_collections' raw
  `Failed loading config file ... Attempted [Relative path]`."""
  flag = {"config": object()}
  message = cli.missing_config_file(["train.py", "--config=configs/pretrain.py:size=tiny"], flag,
                                    cwd=str(tmp_path), script=os.path.join(REPO, "train.py"))
  assert message == (f"--config=configs/pretrain.py:size=tiny: no config file configs/pretrain.py in {tmp_path}; "
                     f"run from the checkout, or pass the configs' path: "
                     f"--config={os.path.join(REPO, 'configs', 'pretrain.py')}:size=tiny")
  assert cli.missing_config_file(["--config=configs/pretrain.py:size=tiny"], flag, cwd=REPO) is None


def test_runlocal_sets_no_field_the_task_does_not_read():
  """runlocal set doc_stride and max_query_length for every task, so a classification run warned about two
  fields the user never set."""
  from bert_jax.finetune import plan as finetune_plan
  from configs import finetune as finetune_config
  for task in ("classification", "mrpc", "ner", "squad_v1", "squad_v2"):
    c = finetune_config.get_config(f"task={task},size=tiny,runlocal")
    assert finetune_plan.ignored_fields(c) == [], task
  assert finetune_config.get_config("task=squad_v1,runlocal").doc_stride == 32     # SQuAD still shrinks


def test_a_user_error_is_exactly_one_line(tmp_path):
  got = subprocess.run([sys.executable, "finetune.py", "--config=configs/finetune.py:task=classification,runlocal",
                        f"--workdir={tmp_path / 'ft'}", f"--config.data_dir={tmp_path / 'missing'}"],
                       cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300)
  assert got.returncode == 2, got.stderr[-3000:]
  assert got.stdout == ""
  assert got.stderr.splitlines() == [f"error: config.data_dir='{tmp_path / 'missing'}': no such directory"]


def test_train_py_ends_with_a_line_naming_the_work_dir_and_what_to_open(tmp_path):
  sys.path.insert(0, REPO)
  import train   # noqa: E402  (the entry point's module; its flags are defined once per process)
  (tmp_path / "checkpoints" / "10").mkdir(parents=True)
  (tmp_path / "metrics.jsonl").write_text("{}\n")
  (tmp_path / "plan.json").write_text("{}")
  assert train.closing_line(str(tmp_path), 10) == (
      f"work dir: {tmp_path}: checkpoints/ (step 10; fine-tune it: finetune.py "
      f"--config.init_checkpoint={tmp_path}), metrics.jsonl, plan.json")


# ---- a resumed run whose schedule changes ---------------------------------------------------------------
def test_a_resume_with_fewer_steps_says_how_the_learning_rate_changes():
  from bert_jax.engine import optimizers
  from bert_jax.pretrain.plan import schedule_change
  from configs import pretrain as pretrain_config
  c = pretrain_config.get_config("size=tiny")
  c.optimizer.learning_rate = 1e-3
  opt = optimizers.optimizer_settings(c.optimizer, 100, 10)
  previous = {"num_train_steps": 200, "warmup_steps": 10,
              "optimizer": {"learning_rate": 1e-3, "schedule": opt.schedule, "power": opt.power,
                            "end_learning_rate": 0.0}}
  line = schedule_change(previous, opt, 100, 10, step=50)
  # linear decay from 1e-3 after 10 warmup steps: at step 50, (1 - 40/190) = 0.789e-3 before, (1 - 40/90) after
  assert line == ("resuming at step 50 with a changed learning-rate schedule: num_train_steps 200 -> 100; the rate "
                  "at step 50 is 0.000556 (the run had 0.000789) and decays to 0 at step 100 (was 200)")
  previous["num_train_steps"] = 100
  assert schedule_change(previous, opt, 100, 10, step=50) is None


# ---- a whole run ---------------------------------------------------------------------------------------
@pytest.mark.slow
def test_finetuning_from_a_pretrained_work_dir_prints_no_library_lines_unless_verbose(tmp_path):
  """Issue 51's count: 51 lines, 25 of them Orbax internals, plus the TPU probe. Now 0 such lines; --verbose
  shows them again (so the pattern does match what the libraries print)."""
  from bert_jax.pretrain import loop as pretrain
  from task_fixtures import write_classification
  from test_reliability_workdir import tiny_config, write_corpus
  pre = tmp_path / "pre"
  pretrain.train_and_evaluate(tiny_config(*write_corpus(str(tmp_path)), steps=5), str(pre))
  data = tmp_path / "cls"
  data.mkdir()
  write_classification(str(data))
  argv = [sys.executable, "finetune.py", "--config=configs/finetune.py:task=classification,size=tiny,runlocal",
          f"--config.data_dir={data}", f"--config.init_checkpoint={pre}"]
  quiet = subprocess.run(argv + [f"--workdir={tmp_path / 'ft'}"], cwd=REPO, env=_env(), capture_output=True,
                         text=True, timeout=300)
  assert quiet.returncode == 0, quiet.stderr[-3000:]
  lines = (quiet.stdout + quiet.stderr).splitlines()
  assert [l for l in lines if NOISE.search(l)] == [], lines
  assert not [l for l in lines if l.startswith("W") and "does not read" in l]      # runlocal's SQuAD fields
  assert len([l for l in lines if "attention:" in l]) == 1
  assert quiet.stdout.splitlines()[-1] == (f"results: {tmp_path / 'ft' / 'eval_results.json'} (also there: "
                                            "curves.png, classification_dev_predictions.tsv, "
                                            "classification_test_predictions.tsv, best_checkpoint/)")
  loud = subprocess.run(argv + [f"--workdir={tmp_path / 'ft_verbose'}", "--verbose"], cwd=REPO, env=_env(),
                        capture_output=True, text=True, timeout=300)
  assert loud.returncode == 0, loud.stderr[-3000:]
  assert len([l for l in (loud.stdout + loud.stderr).splitlines() if NOISE.search(l)]) >= 10
