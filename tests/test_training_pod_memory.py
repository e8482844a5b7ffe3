"""experiments/pod_memory.py on a small scale: the same code path (preset config, abstract sharded state,
.lower().compile().memory_analysis(), affine fit) on 8 simulated devices with a 1-layer tiny model."""

import importlib.util
import os

import jax
import numpy as np
import pytest

from bert_jax.models import BertForPreTraining
from bert_jax.engine import optimizers, sharding
from bert_jax.engine import train_step as ts

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_pod_memory():
  spec = importlib.util.spec_from_file_location("pod_memory", os.path.join(REPO, "experiments", "pod_memory.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


@pytest.mark.slow
def test_pod_memory_compiles_the_lamb_preset_step_and_fits_a_batch():
  pod_memory = load_pod_memory()
  config = pod_memory.load_preset("lamb_pod", "tiny")
  config.model.num_hidden_layers = 1
  config.model.vocab_size = 512
  mesh_shape = (2, 4, 1)                                   # data x fsdp: parameters ZeRO-sharded 4 ways
  r = pod_memory.analyze(config, mesh_shape, seq_len=32, preds=5, batches=(2, 6),
                         chips={"toy chip (64 MiB)": 64 * 2**20 + pod_memory.RUNTIME_RESERVE}, log=lambda s: None)
  (b0, m0), (b1, m1) = r["points"]
  assert 0 < m0 < m1 and r["bytes_per_sequence"] > 0
  # The compiled step's resident state is the sharded TrainState: about 1/4 of it per device (fsdp = 4).
  model = BertForPreTraining(ts.model_config(config.model, config.model.vocab_size), targets=tuple(config.targets))
  tx, _ = optimizers.optimizer_from_run_config(config)
  abstract, _ = ts.abstract_train_state(config, model, sharding.make_mesh(mesh_shape), tx)
  state_bytes = sum(np.prod(x.shape) * x.dtype.itemsize for x in jax.tree.leaves(abstract))
  assert state_bytes / 4 <= r["parts"][0]["argument_size"] < state_bytes / 2
  fit = r["max_per_chip_batch"]["toy chip (64 MiB)"]
  assert fit == int((64 * 2**20 - r["fixed_bytes"]) // r["bytes_per_sequence"]) and fit > b1
