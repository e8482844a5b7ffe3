"""Shared test setup: 8 simulated CPU devices and unoptimised XLA compiles (set before JAX is imported),
quiet TF, tiny fixtures."""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
# Tests compile many tiny programs and run each for a few steps: XLA's optimisation passes cost more than they
# save (measured: tests/test_training_sharding.py + test_models_bert.py 145 s -> 87 s, all assertions equal).
# Subprocesses (train.py, the notebook, jax.distributed workers) inherit it; the demo test drops it.
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
# No persistent XLA cache in tests (hermetic runs, nothing written to ~/.cache); test_startup turns it on.
os.environ.setdefault("BERT_JAX_COMPILATION_CACHE_DIR", "")

import pytest  # noqa: E402


@pytest.fixture
def tiny_vocab(tmp_path):
  """A small English WordPiece vocab written to a temp dir; returns its path."""
  tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", "cat", "dog", "sat", "on", "mat",
            "run", "##ning", "##s", "play", "##ed", "un", "##want", "##ed", "is", "was", ".", ",", "!", "?",
            "hello", "world", "jax", "bert", "model", "train", "##ing", "data"]
  path = tmp_path / "vocab.txt"
  seen, lines = set(), []
  for t in tokens:
    if t not in seen:
      seen.add(t)
      lines.append(t)
  path.write_text("\n".join(lines) + "\n", encoding="utf-8")
  return str(path)


_LOGGERS = ("", "bert_jax", "orbax", "absl", "jax", "jaxlib", "tensorflow")


@pytest.fixture(autouse=True)
def _fresh_process_state():
  """Input warnings and --strict are process-wide (the entry points repeat the warnings at exit): each test
  starts with none and strict off, so one test's warnings never show up in another's output. Logger levels
  too: an entry point run in-process (the experiments' quiet_logs, train.py's main) sets them for the rest of
  the worker, and a later test's caplog then saw nothing."""
  import logging
  from bert_jax import input_warnings
  from bert_jax import logs
  levels = {name: logging.getLogger(name).level for name in _LOGGERS}
  verbose = logs.verbose()     # --verbose of an entry point run in-process (bert_jax.logs.set_verbose)
  input_warnings.clear_input_warnings()
  input_warnings.set_strict(False)
  yield
  input_warnings.clear_input_warnings()
  input_warnings.set_strict(False)
  for name, level in levels.items():
    logging.getLogger(name).setLevel(level)
  logs._VERBOSE = verbose  # pylint: disable=protected-access
