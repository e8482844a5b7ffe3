"""Start-up (#14): the train step compiled ahead of time must match the batches the data gives, the persistent
compilation cache is configured from `config.compilation_cache_dir`, and start-up helpers report errors."""

import os

import jax
import numpy as np
import pytest
import task_fixtures as testing

from bert_jax.input_pipeline import create_pretraining_data as cpd
from bert_jax.engine import compile_cache
from bert_jax.pretrain import loop as pretrain
from bert_jax.pretrain.plan import resolve_pretrain
from configs import pretrain as pretrain_configs


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
  d = tmp_path_factory.mktemp("startup")
  words = ["the", "a", "cat", "dog", "sat", "on", "mat", "hello", "world", "jax", "bert", "model", "data"]
  testing.write_word_documents(d / "corpus.txt", words, 30, sentences=(3, 6))
  vocab = d / "vocab.txt"
  vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "."] + words) + "\n", encoding="utf-8")
  records = str(d / "train.tfrecord")
  cpd.create_pretraining_data(str(d / "corpus.txt"), [records], str(vocab),
                              cpd.Config(max_seq_length=32, max_predictions_per_seq=5, dupe_factor=2),
                              progress=False, verbose=False)
  return str(d / "corpus.txt"), str(vocab), records


@pytest.mark.parametrize("case", ["raw_text", "records_static", "records_dynamic", "packed_budget"])
def test_expected_batch_spec_equals_the_real_first_batch(corpus, case):
  text, vocab, records = corpus
  config = pretrain_configs.get_config("size=tiny,runlocal" + (",preset=budget" if case == "packed_budget" else ""))
  config.batch_size = 8
  config.data.vocab_file = vocab
  config.data.max_seq_length, config.data.max_predictions_per_seq = 32, 5
  config.data.phases = ()
  config.data.input_files = records if case.startswith("records") else text
  if case == "records_dynamic":
    config.data.masking = "dynamic"
  plan = resolve_pretrain(config, None)
  (phase,) = plan.phases
  batch = next(pretrain.open_data(plan, phase))
  want = pretrain.expected_batch_spec(plan, phase, None)
  assert {k: (tuple(v.shape), np.dtype(v.dtype)) for k, v in batch.items()} == \
      {k: (tuple(v.shape), np.dtype(v.dtype)) for k, v in want.items()}


def test_compilation_cache_dir_resolution(monkeypatch, tmp_path):
  monkeypatch.delenv(compile_cache.ENV, raising=False)
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
  assert compile_cache.resolve("auto") == str(tmp_path / "xdg" / "bert_jax" / "xla")
  monkeypatch.setenv(compile_cache.ENV, str(tmp_path / "env"))
  assert compile_cache.resolve("auto") == str(tmp_path / "env")
  monkeypatch.setenv(compile_cache.ENV, "")
  assert compile_cache.resolve("auto") is None                 # an empty variable turns it off
  assert compile_cache.resolve("") is None and compile_cache.resolve("none") is None
  assert compile_cache.resolve("gs://bucket/xla") == "gs://bucket/xla"
  assert compile_cache.resolve(str(tmp_path / "a" / ".." / "b")) == str(tmp_path / "b")


def test_enable_points_jax_at_the_directory_and_never_fails_a_run(tmp_path):
  before = (jax.config.jax_compilation_cache_dir, jax.config.jax_persistent_cache_min_compile_time_secs)
  try:
    path = compile_cache.enable(str(tmp_path / "xla"), min_compile_seconds=2.5)
    assert path == str(tmp_path / "xla") and os.path.isdir(path)
    assert jax.config.jax_compilation_cache_dir == path
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 2.5
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert compile_cache.enable(str(blocker / "sub")) is None    # cannot be created: off, with a warning
    assert compile_cache.enable("") is None
  finally:
    jax.config.update("jax_compilation_cache_dir", before[0])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", before[1])


def test_background_start_up_work_returns_its_value_or_raises_in_the_caller():
  assert pretrain._in_background(lambda x: x + 1, 41).result() == 42

  def fail():
    raise FileNotFoundError("vocab.txt")

  job = pretrain._in_background(fail)
  with pytest.raises(FileNotFoundError, match="vocab.txt"):
    job.result()
