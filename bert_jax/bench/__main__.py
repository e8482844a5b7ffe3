r"""Times the real pre-training step on synthetic batches, for each attention path; optionally Hugging Face.

  python -m bert_jax.bench --size=base --seq_len=128 --batch_size=256 --dtype=bfloat16 --compare_hf --compile_hf
  python -m bert_jax.bench --size=large --seq_len=512 --batch_size=64 --attention_impl=einsum,cudnn_dropout
  python -m bert_jax.bench --size=mini,small --seq_len=128 --batch_size=32 --dtype=float32 --compare_hf
  python -m bert_jax.bench --size=base,large --seq_len=128,512 --memory_table

For every size x length x batch, one row per attention path (`--attention_impl=all`: every path this
platform has, see bert_jax/models/attention.py; or a comma-separated list). Paths that apply attention
dropout in their kernel (einsum, cudnn_dropout, auto) run with BERT's attention dropout 0.1; the others
(xla, cudnn, pallas_flash) cannot, so they run with attention dropout 0 (the `fast` deviation) and the row
says so. A path that falls back on this platform/shape is reported as skipped with the reason. Each row:
step time, sequences/s, tokens/s, MFU (model FLOPs from bert_jax.pretrain.flops over a matmul peak measured
in the same run), peak memory (the compiled step's buffers, from XLA's memory analysis), and
Hugging Face `BertForPreTraining` eager / `torch.compile` (timed once per configuration, with BERT's
dropout) with the ratio, when torch and transformers are importable. Every row is also one JSON line
(prefix `BENCH_JSON `).

`--memory_table`: the largest global batch per size and length, by doubling then bisection (to a multiple
of `--batch_multiple`): `--probe=run` compiles and runs one step and counts an out-of-memory error as "does
not fit"; `--probe=analysis` (default on CPU) compiles only and compares the compiled step's memory with
`--memory_gib`.

Runs without TensorFlow and without ml_collections (the GPU machines have neither).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from typing import Callable, List, Tuple

import jax
import numpy as np

from bert_jax import cli
from bert_jax.bench import hf_baseline
from bert_jax.bench.flops import measure_matmul_peak
from bert_jax.errors import UserError
from bert_jax.models import BertConfig, BertForPreTraining, attention
from bert_jax.models.config import REMAT_POLICIES, SIZES
from bert_jax.engine import optimizers, sharding
from bert_jax.pretrain import flops
from bert_jax.engine.optimizers import OptimizerSettings
from bert_jax.engine.train_step import StepSettings
from bert_jax.engine.train_step import abstract_train_state, create_train_state, make_train_step

BERT_ATTENTION_DROPOUT = 0.1
# Paths per platform for --attention_impl=all, in printing order (BERT's dropout first).
PLATFORM_PATHS = {
    "gpu": ("einsum", "cudnn_dropout", "xla", "cudnn"),
    "tpu": ("einsum", "xla", "pallas_flash"),
    "cpu": ("einsum", "xla"),
}


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


def bench_run_config(optimizer: str) -> StepSettings:
  """The step part of a run plan, all explicit (this machine may lack ml_collections): BERT's AdamW or LAMB
  at lr 1e-4, 100 warmup steps, clipping 1.0, weight decay 0.01 (the model: BertForPreTraining's default
  objectives, BERT's MLM + NSP)."""
  opt = OptimizerSettings(name=optimizer, learning_rate=1e-4, schedule="linear", power=1.0, end_learning_rate=0.0,
                          weight_decay=0.01, b1=0.9, b2=0.999, eps=1e-6, clip_norm=1.0, bias_correction=True)
  return StepSettings(seed=0, grad_accum_steps=1, nan_policy="stop",
                      logical_axis_rules=sharding.normalize_rules(None), num_train_steps=10_000, warmup_steps=100,
                      optimizer=opt)


def attention_paths(spec: str, platform: str) -> List[str]:
  """--attention_impl: "all" = every path of `platform`, else a comma-separated list of attention_impl values."""
  if spec == "all":
    return list(PLATFORM_PATHS.get(platform, ("einsum", "xla")))
  paths = [p.strip() for p in spec.split(",") if p.strip()]
  for p in paths:
    if p not in attention.IMPLS:
      raise UserError(f"--attention_impl={p!r}; expected all or a comma-separated list of {attention.IMPLS}")
  if not paths:
    raise UserError(f"--attention_impl={spec!r}; expected all or a comma-separated list of {attention.IMPLS}")
  return paths


def path_attention_dropout(impl: str) -> float:
  """BERT's attention dropout where the path applies it in its kernel, else 0 (the `fast` deviation)."""
  return BERT_ATTENTION_DROPOUT if impl in ("auto", "einsum", "cudnn_dropout") else 0.0


def model_config(args, size: str, impl: str = "auto") -> BertConfig:
  return BertConfig.from_size(size, vocab_size=args.vocab_size, dtype=args.dtype, attention_impl=impl,
                              attention_probs_dropout_prob=path_attention_dropout(impl),
                              scan_layers=args.scan_layers, remat_policy=args.remat_policy)


def resolved_path(cfg: BertConfig, seq_len: int) -> attention.Choice:
  """What the training step's attention will run (dropout active, as in training)."""
  return attention.resolve_attention(jax.default_backend(), cfg.attention_probs_dropout_prob, False,
                                     cfg.dtype, cfg.head_dim, seq_len, cfg.attention_impl,
                                     remat=cfg.remat_policy != "none", scan=cfg.scan_layers)


def _memory_gib(mem) -> float:
  return (mem.temp_size_in_bytes + mem.argument_size_in_bytes + mem.output_size_in_bytes
          - mem.alias_size_in_bytes) / 2**30


def _build_step(args, cfg: BertConfig, batch_size: int, seq_len: int, abstract: bool):
  run_cfg = bench_run_config(args.optimizer)
  model = BertForPreTraining(cfg)
  mesh = sharding.make_mesh(tuple(int(x) for x in args.mesh.split(",")))
  tx, _ = optimizers.optimizer_from_run_config(run_cfg)
  make_state = abstract_train_state if abstract else create_train_state
  state, shardings = make_state(run_cfg, model, mesh, tx)
  step = make_train_step(run_cfg, model, tx, mesh, shardings)
  preds = args.num_predictions or max(1, round(0.15 * seq_len))
  batch = synthetic_batch(cfg, batch_size, seq_len, preds)
  if abstract:
    batch = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), batch)
  else:
    batch = jax.device_put(batch, sharding.batch_sharding(mesh, sharding.normalize_rules(None)))
  return step, state, batch, mesh, preds


def run_config(args, size: str, batch_size: int, peak: float, impl: str = "auto", seq_len: int = 0) -> dict:
  """Times one attention path on one size x length x batch; returns the row (see _print)."""
  seq_len = seq_len or int(str(args.seq_len).split(",")[0])
  cfg = model_config(args, size, impl)
  step, state, batch, mesh, preds = _build_step(args, cfg, batch_size, seq_len, abstract=False)
  t0 = time.perf_counter()
  compiled = step.lower(state, batch).compile()
  compile_s = time.perf_counter() - t0
  mem = compiled.memory_analysis()
  for _ in range(args.warmup):   # `compiled`, not `step`: calling the jitted function would compile again
    state, metrics = compiled(state, batch)
  jax.block_until_ready(metrics)
  t0 = time.perf_counter()
  for _ in range(args.steps):
    state, metrics = compiled(state, batch)
  jax.block_until_ready(metrics)
  dt = (time.perf_counter() - t0) / args.steps
  seq_s = batch_size / dt
  n_dev = mesh.devices.size
  result = {
      "impl": "bert_jax", "attention_impl": impl, "attention_path": resolved_path(cfg, seq_len).path,
      "attention_dropout": cfg.attention_probs_dropout_prob, "size": size, "seq_len": seq_len,
      "batch_size": batch_size, "dtype": args.dtype, "backend": jax.default_backend(), "devices": n_dev,
      "step_time_s": dt, "seq_per_sec": seq_s, "tokens_per_sec": seq_s * seq_len, "compile_s": compile_s,
      "mfu": seq_s * flops.flops_per_sequence(cfg, seq_len, preds) / (peak * n_dev),
      "peak_flops": peak, "loss": float(metrics["loss_sum"]) / max(float(metrics["loss_count"]), 1.0),
  }
  if mem is not None:   # the compiled step's own buffers (the allocator's peak is per process, not per path)
    result["peak_memory_gib"] = _memory_gib(mem)
  del state, batch, compiled
  gc.collect()
  return result


def hf_rows(args, size: str, batch_size: int, seq_len: int, peak: float) -> dict:
  """HF eager (and torch.compile with --compile_hf) on the same configuration, with BERT's dropout."""
  if not args.compare_hf:
    return {}
  if not hf_baseline.available():
    print("  (torch/transformers not importable: no Hugging Face comparison)", flush=True)
    return {}
  cfg = model_config(args, size, "auto")
  preds = args.num_predictions or max(1, round(0.15 * seq_len))
  host_batch = synthetic_batch(cfg, batch_size, seq_len, preds)
  out = {}
  for compile_hf in ([False, True] if args.compile_hf else [False]):
    tag = "hf_compile" if compile_hf else "hf_eager"
    try:
      hf = hf_baseline.run(cfg, host_batch, args.dtype, args.steps, args.warmup, compile=compile_hf)
    except Exception as e:   # e.g. torch.compile without a C compiler: report, keep the JAX rows
      print(f"  ({tag} failed: {type(e).__name__}: {str(e).splitlines()[0][:200]})", flush=True)
      continue
    out[f"{tag}_seq_per_sec"] = hf["seq_per_sec"]
    out[f"{tag}_mfu"] = hf["seq_per_sec"] * flops.flops_per_sequence(cfg, seq_len, preds) / peak
    if hf.get("peak_memory_gib") is not None:
      out[f"{tag}_peak_memory_gib"] = hf["peak_memory_gib"]
  return out


def _with_hf(row: dict, hf: dict) -> dict:
  row = dict(row, **hf)
  for tag in ("hf_eager", "hf_compile"):
    if f"{tag}_seq_per_sec" in hf:
      row[f"ratio_vs_{tag}"] = row["seq_per_sec"] / hf[f"{tag}_seq_per_sec"]
  return row


def _print(r: dict) -> None:
  line = (f"{r['size']:>6} L={r['seq_len']:<4} B={r['batch_size']:<4} {r['dtype']:<8} "
          f"{r.get('attention_path', ''):<13} attn-drop {r.get('attention_dropout', 0):.1f}  "
          f"step {r['step_time_s'] * 1e3:8.1f} ms  {r['seq_per_sec']:9.1f} seq/s  "
          f"{r['tokens_per_sec']:11.0f} tok/s  MFU {r['mfu']:.3f}")
  if "peak_memory_gib" in r:
    line += f"  mem {r['peak_memory_gib']:.2f} GiB"
  for tag in ("hf_eager", "hf_compile"):
    if f"{tag}_seq_per_sec" in r:
      line += f" | {tag} {r[f'{tag}_seq_per_sec']:.1f} seq/s (x{r[f'ratio_vs_{tag}']:.2f})"
  print(line, flush=True)
  print("BENCH_JSON " + json.dumps(r), flush=True)


# ---- memory table -------------------------------------------------------------------------------------
def largest_batch(fits: Callable[[int], bool], start: int, limit: int, multiple: int = 8
                  ) -> Tuple[int, List[Tuple[int, bool]]]:
  """Largest batch b <= limit (a multiple of `multiple`, >= start) with fits(b), assuming fits is monotone:
  doubling from `start` until the first failure, then bisection. Returns (b or 0 if even `start` fails,
  [(batch, fits), ...] in probe order)."""
  probes = []
  limit = max(start, limit // multiple * multiple)

  def probe(b):
    ok = bool(fits(b))
    probes.append((b, ok))
    return ok

  if not probe(start):
    return 0, probes
  good, bad = start, None
  while bad is None and good < limit:
    b = min(good * 2, limit)
    if probe(b):
      good = b
    else:
      bad = b
  if bad is None:
    return good, probes
  while bad - good > multiple:
    mid = (good + bad) // 2 // multiple * multiple
    if mid <= good:
      break
    if probe(mid):
      good = mid
    else:
      bad = mid
  return good, probes


def is_out_of_memory(e: BaseException) -> bool:
  text = f"{type(e).__name__}: {e}"
  return any(s in text for s in ("RESOURCE_EXHAUSTED", "Out of memory", "out of memory", "OOM"))


def make_probe(args, size: str, seq_len: int, impl: str) -> Callable[[int], bool]:
  """fits(batch) for the memory table: compile (+ run one step with --probe=run) and judge."""
  cfg = model_config(args, size, impl)
  probe_mode = args.probe or ("analysis" if jax.default_backend() == "cpu" else "run")

  def fits(batch_size: int) -> bool:
    try:
      if probe_mode == "analysis":
        step, state, batch, _, _ = _build_step(args, cfg, batch_size, seq_len, abstract=True)
        gib = _memory_gib(step.lower(state, batch).compile().memory_analysis())
        ok = gib <= args.memory_gib
      else:
        step, state, batch, _, _ = _build_step(args, cfg, batch_size, seq_len, abstract=False)
        compiled = step.lower(state, batch).compile()
        gib = _memory_gib(compiled.memory_analysis())
        state, metrics = compiled(state, batch)
        jax.block_until_ready(metrics)
        ok = True
    except Exception as e:
      if not is_out_of_memory(e):
        raise
      gib, ok = None, False
    finally:
      gc.collect()
    print(f"  probe {size} L={seq_len} {impl} B={batch_size}: {'fits' if ok else 'does not fit'}"
          + (f" ({gib:.2f} GiB)" if gib is not None else ""), flush=True)
    return ok

  return fits


def memory_table(args, fits_factory=None) -> List[dict]:
  """Largest batch per size x length x attention path; fits_factory(size, seq_len, impl) -> fits(b)
  replaces the compiling probe (tests)."""
  fits_factory = fits_factory or (lambda size, seq_len, impl: make_probe(args, size, seq_len, impl))
  rows = []
  for size in args.size.split(","):
    for seq_len in (int(x) for x in str(args.seq_len).split(",")):
      for impl in attention_paths(args.attention_impl, jax.default_backend()):
        choice = resolved_path(model_config(args, size, impl), seq_len)
        if impl != "auto" and choice.path != impl:
          print(f"  skipped {impl}: falls back to {choice.path} here ({choice.reason})", flush=True)
          continue
        best, probes = largest_batch(fits_factory(size, seq_len, impl), args.batch_start, args.batch_limit,
                                     args.batch_multiple)
        row = {"table": "memory", "size": size, "seq_len": seq_len, "attention_impl": impl,
               "attention_dropout": path_attention_dropout(impl), "largest_batch": best,
               "probes": probes, "probe": args.probe or ("analysis" if jax.default_backend() == "cpu" else "run")}
        print(f"{size:>6} L={seq_len:<4} {impl:<13} largest batch {best} "
              f"({len(probes)} probes, limit {args.batch_limit})", flush=True)
        print("BENCH_JSON " + json.dumps(row), flush=True)
        rows.append(row)
  return rows


def _int_list(p: cli.ArgumentParser, flag: str, text: str, lo: int) -> List[int]:
  try:
    values = [int(x) for x in str(text).split(",") if x.strip()]
  except ValueError:
    values = []
  if not values or min(values) < lo:
    p.fail(f"--{flag}={text!r}; expected a comma-separated list of integers >= {lo}")
  return values


def check_args(p: cli.ArgumentParser, args) -> None:
  """Every flag value checked before any compilation: a mistake is one `error: --flag=...` line (exit 2)."""
  sizes = [s.strip() for s in args.size.split(",")]
  bad = [s for s in sizes if s not in SIZES]
  if bad:
    p.fail(f"--size={args.size!r}: unknown size {bad[0]!r}; expected a comma-separated list of {tuple(SIZES)}")
  args.size = ",".join(sizes)
  max_len = min(BertConfig.from_size(s).max_position_embeddings for s in sizes)
  for seq_len in _int_list(p, "seq_len", args.seq_len, 3):   # [CLS] x [SEP]: one maskable token at least
    if seq_len > max_len:
      p.fail(f"--seq_len={args.seq_len!r}: {seq_len} is longer than the model's {max_len} positions")
    if args.num_predictions > seq_len - 2:
      p.fail(f"--num_predictions={args.num_predictions}: more than the {seq_len - 2} maskable positions of "
             f"--seq_len={seq_len}")
  if not args.memory_table:
    _int_list(p, "batch_size", args.batch_size, 1)
  for flag, lo in (("steps", 1), ("warmup", 0), ("num_predictions", 0), ("vocab_size", 6), ("batch_start", 1),
                   ("batch_limit", 1), ("batch_multiple", 1)):
    if getattr(args, flag) < lo:
      p.fail(f"--{flag}={getattr(args, flag)}; expected an integer >= {lo}")
  if args.memory_gib <= 0:
    p.fail(f"--memory_gib={args.memory_gib}; expected a number > 0")
  if args.remat_policy not in REMAT_POLICIES:
    p.fail(f"--remat_policy={args.remat_policy!r}; expected one of {REMAT_POLICIES}")
  try:
    mesh = tuple(int(x) for x in args.mesh.split(","))
  except ValueError:
    mesh = ()
  if len(mesh) != 3 or any(d == 0 or d < -1 for d in mesh) or mesh.count(-1) > 1:
    p.fail(f"--mesh={args.mesh!r}; expected data,fsdp,tensor: three positive integers, one of them may be -1")
  try:
    shards = sharding.make_mesh(mesh).shape
  except ValueError as e:
    p.fail(f"--mesh={args.mesh!r}: {e}")
  shards = shards["data"] * shards["fsdp"]        # the batch is split over both
  if not args.memory_table:
    for b in _int_list(p, "batch_size", args.batch_size, 1):
      if b % shards:
        p.fail(f"--batch_size={args.batch_size!r}: {b} is not a multiple of the {shards} data shards of "
               f"--mesh={args.mesh} on {jax.device_count()} devices")
  attention_paths(args.attention_impl, jax.default_backend())


PRNG_IMPLS = ("threefry2x32", "rbg", "unsafe_rbg")
REMAT_POLICIES = ("none", "full", "dots", "dots_no_batch", "minimal")


def main(argv=None) -> int:
  p = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--size", default="base", help="comma-separated sizes (tiny..large)")
  p.add_argument("--seq_len", default="128", help="comma-separated sequence lengths")
  p.add_argument("--batch_size", default="256", help="comma-separated global batch sizes")
  p.add_argument("--num_predictions", type=int, default=0, help="masked positions per sequence (0 = 15%%)")
  p.add_argument("--vocab_size", type=int, default=30522)
  p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
  p.add_argument("--attention_impl", default="all",
                 help="all (every path of this platform) or a comma-separated list of " + "|".join(attention.IMPLS))
  p.add_argument("--scan_layers", action="store_true")
  p.add_argument("--remat_policy", default="none")
  p.add_argument("--optimizer", default="adamw", choices=("adamw", "lamb"))
  p.add_argument("--mesh", default="-1,1,1", help="data,fsdp,tensor mesh shape")
  p.add_argument("--steps", type=int, default=10)
  p.add_argument("--warmup", type=int, default=2)
  p.add_argument("--compare_hf", action="store_true", help="also time HF BertForPreTraining (PyTorch)")
  p.add_argument("--compile_hf", action="store_true", help="also time HF with torch.compile")
  p.add_argument("--prng_impl", default="unsafe_rbg", choices=PRNG_IMPLS,
                 help="dropout PRNG: threefry2x32 (JAX default) | rbg | unsafe_rbg (much cheaper dropout masks)")
  p.add_argument("--memory_table", action="store_true", help="largest batch per size, length and path")
  p.add_argument("--probe", default="", choices=("", "run", "analysis"),
                 help="memory table probe: run (OOM = too big) | analysis (compiled size vs --memory_gib); "
                      "default run on accelerators, analysis on CPU")
  p.add_argument("--batch_start", type=int, default=8, help="memory table: first batch probed")
  p.add_argument("--batch_limit", type=int, default=4096, help="memory table: largest batch probed")
  p.add_argument("--batch_multiple", type=int, default=8, help="memory table: batch granularity")
  p.add_argument("--memory_gib", type=float, default=139.0, help="memory per device for --probe=analysis")
  args = p.parse_args(argv)
  check_args(p, args)
  previous_impl = jax.config.jax_default_prng_impl
  jax.config.update("jax_default_prng_impl", args.prng_impl)
  try:   # restore the process-wide PRNG setting: main() may be called from a notebook or a test
    if args.memory_table:
      memory_table(args)
      return 0
    peak = measure_matmul_peak(args.dtype)
    platform = jax.default_backend()
    print(f"backend={platform} devices={jax.device_count()} "
          f"measured matmul peak {peak / 1e12:.3f} TFLOP/s ({args.dtype}) per device", flush=True)
    paths = attention_paths(args.attention_impl, platform)
    failed = 0
    for size in args.size.split(","):
      for seq_len in (int(x) for x in str(args.seq_len).split(",")):
        for b in (int(x) for x in args.batch_size.split(",")):
          hf = hf_rows(args, size, b, seq_len, peak)
          for impl in paths:
            choice = resolved_path(model_config(args, size, impl), seq_len)
            if impl != "auto" and choice.path != impl:
              print(f"  skipped {impl}: falls back to {choice.path} here ({choice.reason})", flush=True)
              continue
            try:
              row = run_config(args, size, b, peak, impl, seq_len)
            except Exception as e:   # one failing path (e.g. a kernel XLA rejects when compiling) must not
              failed += 1            # hide the others: reported as a row with the error
              error = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
              print(f"  failed {impl}: {error}", flush=True)
              print("BENCH_JSON " + json.dumps({"size": size, "seq_len": seq_len, "batch_size": b,
                                                 "attention_impl": impl, "error": error}), flush=True)
              continue
            _print(_with_hf(row, hf))
    return 1 if failed else 0
  finally:
    jax.config.update("jax_default_prng_impl", previous_impl)


if __name__ == "__main__":
  cli.run_plain_main(main)   # a UserError: one `error:` line, exit 2 (--verbose: traceback)
