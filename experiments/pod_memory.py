r"""Per-device memory of the BERT-large pre-training step on a simulated 64-chip pod slice.

Compiles the real train step (our model, LAMB/AdamW, sharding rules, donation) for 64 simulated CPU devices
with the pod presets' meshes, reads XLA's buffer assignment from `.lower(...).compile().memory_analysis()`,
and extrapolates the largest per-chip batch that fits a TPU v4 chip (32 GiB HBM) and a v5e chip (16 GiB).
Memory is affine in the batch (weights, optimizer state and gradients are fixed; activations grow
linearly), so two compiles per configuration give the line: bytes(b) = fixed + b * per_sequence.

  python experiments/pod_memory.py                         # both presets, meshes 64x1x1 and 16x4x1
  python experiments/pod_memory.py --presets=lamb_pod --meshes=16x4x1 --batches=4,8

Caveats: the CPU backend's buffer assignment stands in for the TPU compiler's (same HLO, same sharding,
but different fusion and layout decisions), so treat the figures as +-20% estimates; the compiled step
holds no input-pipeline buffers, and about 1 GiB per chip should be kept free for the runtime.
Results are recorded in experiments/pod_memory.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

if __name__ == "__main__":
  # Must happen before JAX is imported anywhere.
  _n = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--devices=")), "64")
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                             f" --xla_force_host_platform_device_count={_n}").strip()
  os.environ.setdefault("JAX_PLATFORMS", "cpu")
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from bert_jax import cli  # noqa: E402
from bert_jax.errors import UserError  # noqa: E402
from bert_jax.models import BertForPreTraining  # noqa: E402
from bert_jax.engine import optimizers, sharding  # noqa: E402
from bert_jax.engine import train_step as ts  # noqa: E402

GIB = 1024 ** 3
CHIPS = {"TPU v4 (32 GiB)": 32 * GIB, "TPU v5e (16 GiB)": 16 * GIB}
RUNTIME_RESERVE = 1 * GIB      # kept free for the runtime, program code and infeed


def load_preset(preset: str, size: str = "large"):
  """The run config of configs/pretrain.py for a preset (vocab 30522 as BERT's uncased vocab)."""
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  from configs import pretrain as pretrain_config
  config = pretrain_config.get_config(f"size={size},preset={preset}")
  config.model.vocab_size = 30522
  return config


def batch_shapes(config, global_batch: int, seq_len: int, preds: int, mesh):
  """ShapeDtypeStructs of a global batch, sharded like the real input."""
  s = sharding.batch_sharding(mesh, sharding.normalize_rules(config.logical_axis_rules))
  spec = lambda shape, dtype: jax.ShapeDtypeStruct(shape, dtype, sharding=s)  # noqa: E731
  return {"input_ids": spec((global_batch, seq_len), jnp.int32),
          "input_mask": spec((global_batch, seq_len), jnp.int32),
          "segment_ids": spec((global_batch, seq_len), jnp.int32),
          "masked_lm_positions": spec((global_batch, preds), jnp.int32),
          "masked_lm_ids": spec((global_batch, preds), jnp.int32),
          "masked_lm_weights": spec((global_batch, preds), jnp.float32),
          "next_sentence_labels": spec((global_batch,), jnp.int32)}


def compiled_memory(config, mesh_shape, per_chip_batch: int, seq_len: int, preds: int):
  """Per-device bytes of the compiled train step: (total, breakdown dict, compile seconds)."""
  mesh = sharding.make_mesh(mesh_shape, tuple(config.mesh.axes))
  model = BertForPreTraining(ts.model_config(config.model, config.model.vocab_size), targets=tuple(config.targets))
  tx, _ = optimizers.optimizer_from_run_config(config)
  abstract, shardings = ts.abstract_train_state(config, model, mesh, tx)
  step = ts.make_train_step(config, model, tx, mesh, shardings)
  shards = sharding.batch_shards(mesh, sharding.normalize_rules(config.logical_axis_rules))
  batch = batch_shapes(config, per_chip_batch * shards, seq_len, preds, mesh)
  t = time.time()
  compiled = step.lower(abstract, batch).compile()
  seconds = time.time() - t
  m = compiled.memory_analysis()
  parts = {k: int(getattr(m, k + "_in_bytes", 0) or 0) for k in ("argument_size", "output_size", "alias_size",
                                                               "temp_size", "generated_code_size")}
  total = parts["argument_size"] + parts["output_size"] - parts["alias_size"] + parts["temp_size"]
  return total, parts, seconds


def analyze(config, mesh_shape, seq_len: int, preds: int, batches=(8, 16), chips=None, log=print):
  """Compiles two per-chip batches, fits bytes = fixed + b * per_seq, and returns the largest per-chip
  batch that fits each chip (minus RUNTIME_RESERVE)."""
  chips = CHIPS if chips is None else chips
  points, breakdowns = [], []
  for b in batches:
    total, parts, seconds = compiled_memory(config, mesh_shape, b, seq_len, preds)
    points.append((b, total))
    breakdowns.append(parts)
    log(f"  per-chip batch {b:4d}: {total / GIB:7.2f} GiB per device "
        f"(args {parts['argument_size'] / GIB:.2f}, temp {parts['temp_size'] / GIB:.2f}, "
        f"out-alias {(parts['output_size'] - parts['alias_size']) / GIB:.2f}; compiled in {seconds:.0f} s)")
  (b0, m0), (b1, m1) = points[0], points[-1]
  per_seq = (m1 - m0) / (b1 - b0)
  fixed = m0 - b0 * per_seq
  fits = {}
  for name, cap in chips.items():
    fits[name] = max(0, int((cap - RUNTIME_RESERVE - fixed) // per_seq)) if per_seq > 0 else None
  return {"points": points, "parts": breakdowns, "fixed_bytes": fixed, "bytes_per_sequence": per_seq, "max_per_chip_batch": fits}


def check_args(args, n_devices: int):
  """(presets' configs, mesh shapes, two batches) from the flags, each checked before any compile: a mistake
  is a UserError naming the flag."""
  try:
    int(args.devices)
  except ValueError:
    raise UserError(f"--devices={args.devices!r}; expected an integer") from None
  batches = []
  for b in args.batches.split(","):
    try:
      batches.append(int(b))
    except ValueError:
      batches.append(0)
  if len(batches) != 2 or min(batches) < 1 or batches[0] == batches[1]:
    raise UserError(f"--batches={args.batches!r}; expected two different per-chip batch sizes >= 1 (the line "
                    "through two compiles)")
  configs = {}
  for preset in args.presets.split(","):
    try:
      configs[preset] = load_preset(preset, args.size)
    except ValueError as e:
      raise UserError(f"--presets={args.presets!r} / --size={args.size!r}: {e}") from e
  meshes = []
  for text in args.meshes.split(","):
    try:
      shape = tuple(int(x) for x in text.split("x"))
    except ValueError:
      shape = ()
    if len(shape) != 3 or min(shape) < 1 or shape[0] * shape[1] * shape[2] != n_devices:
      raise UserError(f"--meshes={args.meshes!r}: {text!r}; expected DATAxFSDPxTENSOR whose product is the "
                      f"{n_devices} devices (--devices)")
    meshes.append((text, shape))
  return configs, meshes, tuple(batches)


def main(argv=None):
  p = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--devices", default="64", help="simulated CPU devices (set before JAX starts)")
  p.add_argument("--presets", default="lamb_pod,bert_paper")
  p.add_argument("--meshes", default="64x1x1,16x4x1")
  p.add_argument("--batches", default="8,16", help="two per-chip batch sizes to compile")
  p.add_argument("--size", default="large")
  args = p.parse_args(argv)
  n = jax.device_count()
  configs, meshes, batches = check_args(args, n)
  print(f"{n} simulated devices ({jax.devices()[0].platform}); jax {jax.__version__}")
  for preset, config in configs.items():
    phases = [(float(f), int(t), int(pr)) for f, t, pr in config.data.phases] or [
        (1.0, config.data.max_seq_length, config.data.max_predictions_per_seq)]
    for mesh_text, mesh_shape in meshes:
      for _, seq_len, preds in phases:
        print(f"\n{preset} / {args.size}: mesh {mesh_text}, length {seq_len}, {preds} predictions, "
              f"{config.optimizer.name}, dtype {config.model.dtype}, scan_layers={config.model.scan_layers}, "
              f"remat={config.model.remat_policy}; preset global batch {config.batch_size} = "
              f"{config.batch_size // n} per chip")
        r = analyze(config, mesh_shape, seq_len, preds, batches)
        print(f"  fixed {r['fixed_bytes'] / GIB:.2f} GiB + {r['bytes_per_sequence'] / 2**20:.1f} MiB per sequence")
        for chip, b in r["max_per_chip_batch"].items():
          accum = -(-config.batch_size // (b * n)) if b else None
          print(f"  {chip}: largest per-chip batch ~{b} -> global {b * n if b else 0}"
                + (f"; the preset's {config.batch_size} needs grad_accum_steps >= {accum}" if accum else ""))


if __name__ == "__main__":
  cli.run_plain_main(main)   # a UserError: one `error:` line, exit 2 (--verbose: traceback)
