"""Two local processes x 2 CPU devices (jax.distributed + gloo) reproduce the single-process loss."""

import json
import os
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest

from bert_jax.models import BertForPreTraining
from bert_jax.training import optimizers, sharding
from bert_jax.training import train_step as ts
from test_training_sharding import TINY, make_batch, run_config

TESTS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TESTS)

WORKER = r'''
import json, os, sys
process_id, port = int(sys.argv[1]), int(sys.argv[2])
import jax
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=process_id)
sys.path[:0] = [sys.argv[3], sys.argv[4]]
from bert_jax.models import BertForPreTraining
from bert_jax.training import optimizers, sharding, pretrain
from bert_jax.training import train_step as ts
from test_training_sharding import TINY, make_batch, run_config
assert jax.process_count() == 2 and jax.device_count() == 4 and jax.local_device_count() == 2
cfg = run_config()
model = BertForPreTraining(TINY.replace(num_hidden_layers=1))   # one layer: half the compile time
mesh = sharding.make_mesh((2, 2, 1))                 # data axis across the two hosts, fsdp within each
tx, _ = optimizers.optimizer_from_run_config(cfg)
state, shardings = ts.create_train_state(cfg, model, mesh, tx)
batch = make_batch()                                 # the same global batch everywhere ...
rows = len(batch["input_ids"]) // 2                  # ... but each host feeds only its own rows
local = {k: v[process_id * rows:(process_id + 1) * rows] for k, v in batch.items()}
global_batch = pretrain.to_global(local, sharding.batch_sharding(mesh, None))
state, metrics = ts.make_train_step(cfg, model, tx, mesh, shardings)(state, global_batch)
summary = ts.normalize(metrics)
print("RESULT " + json.dumps({"process": process_id, "loss": summary["loss"], "mlm_loss": summary["mlm_loss"],
                              "grad_norm": summary["grad_norm"],
                              "param_norm": summary["param_norm"]}), flush=True)
jax.distributed.shutdown()
'''


def free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_reproduce_the_single_process_loss(tmp_path):
  script = tmp_path / "worker.py"
  script.write_text(WORKER)
  port = free_port()
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
  procs = [subprocess.Popen([sys.executable, str(script), str(i), str(port), TESTS, REPO], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
  outs = [p.communicate(timeout=240) for p in procs]
  results = []
  for p, (out, err) in zip(procs, outs):
    assert p.returncode == 0, err[-3000:]
    results.append(json.loads(next(l for l in out.splitlines() if l.startswith("RESULT "))[7:]))

  cfg = run_config()
  model = BertForPreTraining(TINY.replace(num_hidden_layers=1))
  mesh = sharding.make_mesh((1, 1, 1), devices=jax.devices()[:1])
  tx, _ = optimizers.optimizer_from_run_config(cfg)
  state, shardings = ts.create_train_state(cfg, model, mesh, tx)
  _, metrics = ts.make_train_step(cfg, model, tx, mesh, shardings)(state, make_batch())
  ref = ts.normalize(metrics)
  for r in results:
    np.testing.assert_allclose(r["loss"], ref["loss"], rtol=1e-6)
    np.testing.assert_allclose(r["mlm_loss"], ref["mlm_loss"], rtol=1e-6)
    np.testing.assert_allclose(r["grad_norm"], ref["grad_norm"], rtol=1e-5)
    np.testing.assert_allclose(r["param_norm"], ref["param_norm"], rtol=1e-6)
