"""Checkpoints: restore onto other meshes / device counts / layer layouts, interrupted saves, params dirs."""

import os
import shutil

import jax
import numpy as np
import pytest

from bert_jax.models import BertForPreTraining
from bert_jax.pretrained import load_pretrained, params_dir
from bert_jax.engine import checkpoints, optimizers, sharding
from bert_jax.engine import train_step as ts
from test_training_sharding import TINY, run_config


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
  """A TrainState laid out on a 2x2x2 mesh (8 devices), checkpointed at step 2.

  Every leaf holds distinct random values (floats normal, integers 0..999; the step is 2), so a restore that
  mixed up shards, layers or optimizer slots shows. No train step is compiled: 8-way sharded, the 2 steps this
  fixture used to take cost 48 s per xdist worker; tests/test_training_sharding.py checks the step itself."""
  directory = str(tmp_path_factory.mktemp("ckpt") / "checkpoints")
  cfg = run_config()
  model = BertForPreTraining(TINY)
  tx, _ = optimizers.optimizer_from_run_config(cfg)
  mesh = sharding.make_mesh((2, 2, 2))
  abstract, _ = ts.abstract_train_state(cfg, model, mesh, tx)
  rng = np.random.default_rng(0)

  def fill(a):
    if np.issubdtype(a.dtype, np.floating):
      return jax.device_put(rng.standard_normal(a.shape).astype(a.dtype), a.sharding)
    return jax.device_put(rng.integers(0, 1000, a.shape).astype(a.dtype), a.sharding)

  state = jax.tree.map(fill, abstract)
  state = state.replace(step=jax.device_put(np.int32(2), abstract.step.sharding))
  kernel = state.params["bert"]["encoder"]["layer_0"]["ffn"]["intermediate"]["kernel"]
  assert len(kernel.sharding.device_set) == 8 and not kernel.sharding.is_fully_replicated
  ckpt = checkpoints.Checkpointer(directory)
  ckpt.save(2, state, {"scan_layers": False, "data": {"step": 2}})
  ckpt.close()
  return directory, jax.device_get(state), cfg, tx


def assert_state_equal(a, b):
  for (path, x), y in zip(jax.tree_util.tree_flatten_with_path(a)[0], jax.tree.leaves(b)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=jax.tree_util.keystr(path))


@pytest.mark.parametrize("shape,num_devices", [((1, 1, 1), 1), ((2, 4, 1), 8)])
def test_checkpoint_from_8_devices_restores_on_other_meshes(saved, shape, num_devices):
  directory, ref, cfg, tx = saved
  mesh = sharding.make_mesh(shape, devices=jax.devices()[:num_devices])
  ckpt = checkpoints.Checkpointer(directory)
  state, shardings, meta = checkpoints.restore_train_state(ckpt, cfg, BertForPreTraining(TINY), mesh, tx)
  ckpt.close()
  assert meta["step"] == 2 and meta["data"] == {"step": 2}
  assert int(state.step) == 2
  kernel = state.params["bert"]["encoder"]["layer_0"]["ffn"]["intermediate"]["kernel"]
  assert kernel.sharding.mesh.devices.shape == shape and len(kernel.sharding.device_set) == num_devices
  assert_state_equal(jax.device_get(state), ref)     # params, optimizer state, step and RNG


def test_checkpoint_restores_into_scanned_layout_and_back(saved):
  directory, ref, cfg, tx = saved
  ckpt = checkpoints.Checkpointer(directory)
  scanned = BertForPreTraining(TINY.replace(scan_layers=True))
  state, _, _ = checkpoints.restore_train_state(ckpt, cfg, scanned, sharding.make_mesh((8, 1, 1)), tx)
  ckpt.close()
  q = state.params["bert"]["encoder"]["layers"]["layer"]["attention"]["query"]["kernel"]
  assert q.shape == (2, 64, 4, 16)
  np.testing.assert_array_equal(q[1], ref.params["bert"]["encoder"]["layer_1"]["attention"]["query"]["kernel"])
  mu = state.opt_state[1].mu["bert"]["encoder"]["layers"]["layer"]["ffn"]["output"]["kernel"]
  np.testing.assert_array_equal(mu[0], ref.opt_state[1].mu["bert"]["encoder"]["layer_0"]["ffn"]["output"]["kernel"])


def test_interrupted_save_is_ignored_and_the_last_complete_checkpoint_restores(saved, tmp_path):
  directory, ref, cfg, tx = saved
  copy = str(tmp_path / "checkpoints")
  shutil.copytree(directory, copy)
  # What a kill in the middle of an Orbax save leaves behind: a tmp directory that was never renamed.
  partial = os.path.join(copy, "4.orbax-checkpoint-tmp")
  shutil.copytree(os.path.join(copy, "2"), partial)
  for name in ("commit_success.txt", os.path.join("state", "commit_success.txt")):
    if os.path.exists(os.path.join(partial, name)):
      os.remove(os.path.join(partial, name))
  ckpt = checkpoints.Checkpointer(copy)
  assert ckpt.latest_step() == 2 and ckpt.all_steps() == [2]
  state, _, meta = checkpoints.restore_train_state(ckpt, cfg, BertForPreTraining(TINY),
                                                   sharding.make_mesh((1, 1, 1), devices=jax.devices()[:1]), tx)
  ckpt.close()
  assert meta["step"] == 2
  assert_state_equal(jax.device_get(state.params), ref.params)
  assert not os.path.exists(partial)     # cleaned up on start-up, never mistaken for a checkpoint


@pytest.mark.parametrize("fmt", ["msgpack", "orbax"])
def test_params_dir_round_trip_and_load_pretrained(saved, tmp_path, tiny_vocab, fmt):
  _, ref, _, _ = saved
  out = params_dir.save_params_dir(str(tmp_path / "converted"), TINY, ref.params, tiny_vocab, fmt=fmt)
  assert os.path.exists(os.path.join(out, "model_config.json"))
  config, params, vocab = params_dir.load_params_dir(out)
  got = load_pretrained(out)
  for c, p, v in ((config, params, vocab), (got.config, got.params, got.vocab_file)):
    assert c == TINY and v == os.path.join(out, "vocab.txt")
    assert_state_equal(p, ref.params)
  # Saving again over it swaps the new params in whole (no .tmp left behind).
  params_dir.save_params_dir(out, TINY, ref.params, tiny_vocab, fmt=fmt)
  assert not [n for n in os.listdir(out) if "tmp" in n or "old" in n]
  assert_state_equal(load_pretrained(out).params, ref.params)


def test_load_pretrained_reads_a_pretraining_workdir(saved, tmp_path, tiny_vocab):
  directory, ref, _, _ = saved
  workdir = str(tmp_path / "run")
  shutil.copytree(directory, os.path.join(workdir, "checkpoints"))
  checkpoints.write_workdir_files(workdir, {"batch_size": 16, "data": {"do_lower_case": False}}, TINY, tiny_vocab)
  got = load_pretrained(workdir)
  assert got.config == TINY and open(got.vocab_file).read() == open(tiny_vocab).read()
  assert got.do_lower_case is False            # the run config's casing travels with the weights
  assert_state_equal(got.params, ref.params)
  assert all(isinstance(x, np.ndarray) for x in jax.tree.leaves(got.params))   # host arrays, any device count


def test_missing_checkpoint_is_a_clear_error(tmp_path):
  with pytest.raises(FileNotFoundError, match="neither an existing directory nor a zoo model name"):
    load_pretrained(str(tmp_path / "nope"))
  os.makedirs(tmp_path / "empty")
  with pytest.raises(FileNotFoundError, match="neither a params directory"):
    load_pretrained(str(tmp_path / "empty"))
