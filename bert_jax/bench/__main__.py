r"""Times the real pre-training step on synthetic batches; optionally Hugging Face on the same config.

  python -m bert_jax.bench --size=base --seq_len=128 --batch_size=256 --dtype=bfloat16 --compare_hf
  python -m bert_jax.bench --size=mini,small --seq_len=128 --batch_size=32 --dtype=float32 --compare_hf
  python -m bert_jax.bench --size=large --seq_len=512 --memory_table --batch_sizes=8,16,32,64,128

Prints step time, sequences/s, tokens/s and MFU (model FLOPs from bert_jax.training.flops over a matmul
peak measured in the same run), the Hugging Face `BertForPreTraining` figures and the ratio when torch and
transformers are importable, and each configuration as one JSON line (prefix `BENCH_JSON `).
Runs without TensorFlow and without ml_collections (the GPU machines have neither).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import types

import jax
import numpy as np

from bert_jax.bench import hf_baseline
from bert_jax.bench.flops import measure_matmul_peak
from bert_jax.models import BertConfig, BertForPreTraining
from bert_jax.training import flops, optimizers, sharding
from bert_jax.training.train_step import abstract_train_state, create_train_state, make_train_step


def synthetic_batch(cfg: BertConfig, batch_size: int, seq_len: int, num_predictions: int, seed: int = 0):
  """A BERT batch with Google's feature names: full-length sequences, 15%-style masked positions."""
  rng = np.random.default_rng(seed)
  ids = rng.integers(5, cfg.vocab_size, (batch_size, seq_len)).astype(np.int32)
  positions = np.sort(np.stack([rng.choice(np.arange(1, seq_len - 1), num_predictions, replace=False)
                                for _ in range(batch_size)]), axis=1).astype(np.int32)
  return {
      "input_ids": ids, "input_mask": np.ones_like(ids),
      "segment_ids": (np.arange(seq_len)[None] >= seq_len // 2).astype(np.int32).repeat(batch_size, 0),
      "masked_lm_positions": positions,
      "masked_lm_ids": rng.integers(5, cfg.vocab_size, (batch_size, num_predictions)).astype(np.int32),
      "masked_lm_weights": np.ones((batch_size, num_predictions), np.float32),
      "next_sentence_labels": rng.integers(0, 2, batch_size).astype(np.int32),
  }


def bench_run_config(optimizer: str) -> types.SimpleNamespace:
  """The benchmarked training settings, all explicit (this machine may lack ml_collections): BERT's AdamW
  or LAMB at lr 1e-4, 100 warmup steps, clipping 1.0, weight decay 0.01, MLM + NSP."""
  opt = types.SimpleNamespace(name=optimizer, learning_rate=1e-4, schedule="linear", power=1.0,
                              end_learning_rate=0.0, weight_decay=0.01, b1=0.9, b2=0.999, eps=1e-6,
                              clip_norm=1.0, bias_correction=True)
  return types.SimpleNamespace(seed=0, targets=("mlm", "nsp"), grad_accum_steps=1, nan_policy="stop",
                               logical_axis_rules=None, num_train_steps=10_000, warmup_steps=100, optimizer=opt)


def run_config(args, size: str, batch_size: int, peak: float) -> dict:
  seq_len, preds = args.seq_len, args.num_predictions or max(1, round(0.15 * args.seq_len))
  cfg = BertConfig.from_size(size, vocab_size=args.vocab_size, dtype=args.dtype,
                             attention_impl=args.attention_impl, scan_layers=args.scan_layers,
                             remat_policy=args.remat_policy)
  run_cfg = bench_run_config(args.optimizer)
  model = BertForPreTraining(cfg, targets=run_cfg.targets)
  mesh = sharding.make_mesh(tuple(int(x) for x in args.mesh.split(",")))
  tx, _ = optimizers.optimizer_from_run_config(run_cfg)
  state, shardings = create_train_state(run_cfg, model, mesh, tx)
  step = make_train_step(run_cfg, model, tx, mesh, shardings)
  batch = synthetic_batch(cfg, batch_size, seq_len, preds)
  batch = jax.device_put(batch, sharding.batch_sharding(mesh, sharding.normalize_rules(None)))

  t0 = time.perf_counter()
  compiled = step.lower(state, batch).compile()
  compile_s = time.perf_counter() - t0
  mem = compiled.memory_analysis()
  for _ in range(args.warmup):
    state, metrics = step(state, batch)
  jax.block_until_ready(metrics)
  t0 = time.perf_counter()
  for _ in range(args.steps):
    state, metrics = step(state, batch)
  jax.block_until_ready(metrics)
  dt = (time.perf_counter() - t0) / args.steps
  seq_s = batch_size / dt
  n_dev = mesh.devices.size
  result = {
      "impl": "bert_jax", "size": size, "seq_len": seq_len, "batch_size": batch_size, "dtype": args.dtype,
      "backend": jax.default_backend(), "devices": n_dev, "step_time_s": dt, "seq_per_sec": seq_s,
      "tokens_per_sec": seq_s * seq_len, "compile_s": compile_s,
      "mfu": seq_s * flops.flops_per_sequence(cfg, seq_len, preds) / (peak * n_dev),
      "peak_flops": peak, "loss": float(metrics["loss_sum"]) / max(float(metrics["loss_count"]), 1.0),
  }
  if mem is not None:
    result["peak_memory_gib"] = (mem.temp_size_in_bytes + mem.argument_size_in_bytes
                                 + mem.output_size_in_bytes - mem.alias_size_in_bytes) / 2**30
  if args.compare_hf:
    if not hf_baseline.available():
      print("  (torch/transformers not importable: no Hugging Face comparison)")
    else:
      host_batch = synthetic_batch(cfg, batch_size, seq_len, preds)
      for compile_hf in ([False, True] if args.compile_hf else [False]):
        hf = hf_baseline.run(cfg, host_batch, args.dtype, args.steps, args.warmup, compile=compile_hf)
        tag = "hf_compile" if compile_hf else "hf_eager"
        result[f"{tag}_seq_per_sec"] = hf["seq_per_sec"]
        result[f"{tag}_mfu"] = hf["seq_per_sec"] * flops.flops_per_sequence(cfg, seq_len, preds) / peak
        result[f"ratio_vs_{tag}"] = seq_s / hf["seq_per_sec"]
  return result


def _print(r: dict) -> None:
  line = (f"{r['size']:>6} L={r['seq_len']:<4} B={r['batch_size']:<4} {r['dtype']:<8} "
          f"step {r['step_time_s'] * 1e3:8.1f} ms  {r['seq_per_sec']:9.1f} seq/s  "
          f"{r['tokens_per_sec']:11.0f} tok/s  MFU {r['mfu']:.3f}")
  for tag in ("hf_eager", "hf_compile"):
    if f"{tag}_seq_per_sec" in r:
      line += f" | {tag} {r[f'{tag}_seq_per_sec']:.1f} seq/s (x{r[f'ratio_vs_{tag}']:.2f})"
  if "peak_memory_gib" in r:
    line += f" | mem {r['peak_memory_gib']:.2f} GiB"
  print(line, flush=True)
  print("BENCH_JSON " + json.dumps(r), flush=True)


def memory_table(args) -> None:
  """Largest batch whose compiled step fits `--memory_gib` per device, from memory_analysis()."""
  for size in args.size.split(","):
    fits = None
    for b in sorted(int(x) for x in args.batch_sizes.split(",")):
      cfg = BertConfig.from_size(size, vocab_size=args.vocab_size, dtype=args.dtype,
                                 scan_layers=args.scan_layers, remat_policy=args.remat_policy)
      run_cfg = bench_run_config(args.optimizer)
      model = BertForPreTraining(cfg)
      mesh = sharding.make_mesh(tuple(int(x) for x in args.mesh.split(",")))
      tx, _ = optimizers.optimizer_from_run_config(run_cfg)
      state, shardings = abstract_train_state(run_cfg, model, mesh, tx)
      step = make_train_step(run_cfg, model, tx, mesh, shardings)
      preds = max(1, round(0.15 * args.seq_len))
      batch = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype),
                           synthetic_batch(cfg, b, args.seq_len, preds))
      mem = step.lower(state, batch).compile().memory_analysis()
      gib = (mem.temp_size_in_bytes + mem.argument_size_in_bytes + mem.output_size_in_bytes
             - mem.alias_size_in_bytes) / 2**30
      ok = gib <= args.memory_gib
      fits = b if ok else fits
      print(f"{size:>6} L={args.seq_len} B={b:<5} peak {gib:8.2f} GiB/device  {'fits' if ok else 'too big'}",
            flush=True)
      print("BENCH_JSON " + json.dumps({"size": size, "seq_len": args.seq_len, "batch_size": b,
                                         "peak_memory_gib": gib, "fits": ok}), flush=True)
    print(f"{size:>6} L={args.seq_len}: largest batch within {args.memory_gib} GiB = {fits}", flush=True)


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--size", default="base", help="comma-separated sizes (tiny..large)")
  p.add_argument("--seq_len", type=int, default=128)
  p.add_argument("--batch_size", default="256", help="comma-separated global batch sizes")
  p.add_argument("--num_predictions", type=int, default=0, help="masked positions per sequence (0 = 15%%)")
  p.add_argument("--vocab_size", type=int, default=30522)
  p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
  p.add_argument("--attention_impl", default="auto", choices=("auto", "xla", "cudnn"))
  p.add_argument("--scan_layers", action="store_true")
  p.add_argument("--remat_policy", default="none")
  p.add_argument("--optimizer", default="adamw", choices=("adamw", "lamb"))
  p.add_argument("--mesh", default="-1,1,1", help="data,fsdp,tensor mesh shape")
  p.add_argument("--steps", type=int, default=10)
  p.add_argument("--warmup", type=int, default=2)
  p.add_argument("--compare_hf", action="store_true", help="also time HF BertForPreTraining (PyTorch)")
  p.add_argument("--compile_hf", action="store_true", help="also time HF with torch.compile")
  p.add_argument("--prng_impl", default="unsafe_rbg",
                 help="dropout PRNG: threefry2x32 (JAX default) | rbg | unsafe_rbg (much cheaper dropout masks)")
  p.add_argument("--memory_table", action="store_true", help="largest batch that fits --memory_gib")
  p.add_argument("--batch_sizes", default="8,16,32,64,128,256")
  p.add_argument("--memory_gib", type=float, default=139.0)
  args = p.parse_args(argv)
  previous_impl = jax.config.jax_default_prng_impl
  jax.config.update("jax_default_prng_impl", args.prng_impl)
  try:   # restore the process-wide PRNG setting: main() may be called from a notebook or a test
    if args.memory_table:
      memory_table(args)
      return 0
    peak = measure_matmul_peak(args.dtype)
    print(f"backend={jax.default_backend()} devices={jax.device_count()} "
          f"measured matmul peak {peak / 1e12:.3f} TFLOP/s ({args.dtype}) per device", flush=True)
    for size in args.size.split(","):
      for b in args.batch_size.split(","):
        _print(run_config(args, size, int(b), peak))
    return 0
  finally:
    jax.config.update("jax_default_prng_impl", previous_impl)


if __name__ == "__main__":
  sys.exit(main())
