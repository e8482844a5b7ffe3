r"""The one script to run on the GPU machine (one H200): attention numerics, then the issue-17 benchmark.

  python -m experiments.device_check                    # from the repository root; about 6-8 minutes
  python -m experiments.device_check --skip_bench       # numerics only (about 1 minute)
  python -m experiments.device_check --memory_table     # also the largest-batch table (a few more minutes)

Needs only what the GPU machine has (jax[cuda], flax, optax, orbax-checkpoint, torch, transformers): no
TensorFlow, no ml_collections, nothing to install. Sets XLA_PYTHON_CLIENT_MEM_FRACTION=0.6 (unless set) so
Hugging Face's PyTorch steps, timed in the same process, have memory left.

1. Numerics of the fused paths against the einsum reference (bert_jax/models/attention.py), bf16,
   B=4 x T=512 x 16 heads x 64, right padding of different lengths:
   - `cudnn_dropout` at rate 0 and `cudnn`: forward and gradients (dq, dk, dv) equal to einsum on the real
     query rows (relative error < 2e-2);
   - keep rate at rate 0.1: with q = k = 0 the probabilities are uniform over the real keys, v = 1, so the
     mean output x (1 - rate) is the keep rate: within 0.005 of 0.9; padded keys (v = 1000 there) get no
     weight;
   - the forward and backward kernels use the same mask: the loss L = sum(out * G) is linear in v, so
     L == sum(dL/dv * v) when both kernels dropped the same entries (gap < 0.05 of the terms' norm; a
     different mask gave 0.23 in a CPU rehearsal); checked on three consecutive calls (XLA advances the
     Philox offset per execution), which must also give three different masks;
   - two layers (different static seeds) in one jit draw different masks;
   - informational: the same agreement inside lax.scan over two layers (why scan_layers is refused).
2. Benchmark (python -m bert_jax.bench, in this process): BERT-base/128/256 and BERT-large/512/64, bf16,
   AdamW, MLM + NSP, each attention path of the GPU (einsum and cudnn_dropout with BERT's attention dropout
   0.1; xla and cudnn with attention dropout 0), Hugging Face eager and torch.compile on the same batch.
3. Verdicts: per fused path PASS/FAIL of the numerics (a PASS allows removing it from
   attention.UNVERIFIED_ON_DEVICE), and the issue's targets (base/128/256: >= 1.3x HF torch.compile and
   MFU >= 0.45; large/512/64: >= 1.25x and MFU >= 0.50) for the best path with BERT's dropout.

Everything printed is also written to $OUT/device_check.json when $OUT is set (the device tool's folder).
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.6")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from bert_jax import cli  # noqa: E402
from bert_jax.errors import UserError  # noqa: E402
from bert_jax.models import attention  # noqa: E402

TARGETS = {("base", 128, 256): (1.3, 0.45), ("large", 512, 64): (1.25, 0.50)}
REPORT = {"numerics": {}, "bench": [], "verdicts": {}, "errors": []}


def environment() -> dict:
  env = {"python": sys.version.split()[0], "jax": jax.__version__, "backend": jax.default_backend(),
         "devices": [d.device_kind for d in jax.devices()]}
  try:
    from jax._src.lib import cuda_versions
    env["cudnn"] = cuda_versions.cudnn_get_version() if cuda_versions else None
  except Exception as e:  # report, do not stop
    env["cudnn"] = f"unknown ({type(e).__name__})"
  for name in ("flax", "torch", "transformers"):
    try:
      env[name] = __import__(name).__version__
    except ImportError:
      env[name] = None
  return env


def _inputs(b=4, t=512, n=16, h=64, lengths=(512, 400, 257, 130), seed=0):
  keys = jax.random.split(jax.random.key(seed), 4)
  q, k, v, g = (jax.random.normal(kk, (b, t, n, h), jnp.float32).astype(jnp.bfloat16) for kk in keys)
  input_mask = jnp.asarray((np.arange(t)[None] < np.asarray(lengths)[:, None]).astype(np.int32))
  return q, k, v, g, input_mask


def _rel(a, b, rows):
  a = np.asarray(a, np.float32) * rows
  b = np.asarray(b, np.float32) * rows
  return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def check_equal_to_einsum(path: str) -> dict:
  """Forward and gradients of `path` with dropout off vs einsum, on real query rows."""
  q, k, v, g, input_mask = _inputs()
  mask = (input_mask > 0)[:, None, None, :]
  rows = np.asarray(input_mask, np.float32)[:, :, None, None]
  if path == "cudnn_dropout":
    fn = lambda q, k, v: attention.cudnn_dropout_attention(q, k, v, input_mask, 0.0, seed=1)
  else:
    fn = lambda q, k, v: attention.cudnn_attention(q, k, v, input_mask)
  ref = lambda q, k, v: attention.einsum_attention(q, k, v, mask)
  rows_j = jnp.asarray(rows, jnp.bfloat16)
  loss = lambda f: (lambda q, k, v: jnp.sum((f(q, k, v) * g * rows_j).astype(jnp.float32)))
  out, grads = jax.jit(lambda q, k, v: (fn(q, k, v), jax.grad(loss(fn), (0, 1, 2))(q, k, v)))(q, k, v)
  rout, rgrads = jax.jit(lambda q, k, v: (ref(q, k, v), jax.grad(loss(ref), (0, 1, 2))(q, k, v)))(q, k, v)
  kv_rows = rows  # padded keys get no gradient from real queries in both
  errs = {"out": _rel(out, rout, rows), "dq": _rel(grads[0], rgrads[0], rows),
          "dk": _rel(grads[1], rgrads[1], kv_rows), "dv": _rel(grads[2], rgrads[2], kv_rows)}
  return {"relative_errors": errs, "pass": all(e < 2e-2 for e in errs.values())}


def check_dropout(rate: float = 0.1) -> dict:
  """Keep rate, padding, forward/backward mask agreement over consecutive calls, per-layer seeds."""
  q, k, v, g, input_mask = _inputs()
  real = np.asarray(input_mask, bool)
  # keep rate: uniform probabilities over the real keys; padded keys carry v = 1000
  zeros = jnp.zeros_like(q)
  v_pad = jnp.where(jnp.asarray(real)[:, :, None, None], 1.0, 1000.0).astype(jnp.bfloat16) * jnp.ones_like(v)
  out = jax.jit(lambda z, vp, m: attention.cudnn_dropout_attention(z, z, vp, m, rate, seed=3))(
      zeros, v_pad, input_mask)   # arguments, not closed-over constants: XLA would constant-fold those
  out = np.asarray(out, np.float32)[real]                     # [real rows, N, H]
  keep = float(out.mean() * (1 - rate))
  max_out = float(out.max())

  # forward/backward agreement: L is linear in v, so L == <dL/dv, v> iff both kernels used one mask. The
  # gap is scaled by the norm of the terms of <dL/dv, v> (not by |L|, which cancels): bf16 rounding gives
  # 2e-4 to 5e-3, two different masks 0.23 (rehearsed on CPU with einsum stand-ins, B=2 T=128 N=2 H=64).
  def value_and_linear(q, k, v):
    f = lambda v: jnp.sum(attention.cudnn_dropout_attention(q, k, v, input_mask, rate, seed=5)
                          .astype(jnp.float32) * g.astype(jnp.float32))
    value, dv = jax.value_and_grad(f)(v)
    terms = dv.astype(jnp.float32) * v.astype(jnp.float32)
    return value, jnp.sum(terms), jnp.sqrt(jnp.sum(terms * terms))

  step = jax.jit(value_and_linear)
  calls = [tuple(float(x) for x in step(q, k, v)) for _ in range(3)]
  agree = [abs(a - b) / max(scale, 1e-30) for a, b, scale in calls]
  distinct_steps = len({round(a, 3) for a, _, _ in calls}) == 3

  two = jax.jit(lambda q, k, v: (attention.cudnn_dropout_attention(q, k, v, input_mask, rate, seed=11),
                                 attention.cudnn_dropout_attention(q, k, v, input_mask, rate, seed=12)))
  a, b = (np.asarray(x, np.float32) for x in two(q, k, v))
  layers_differ = float(np.abs(a - b)[real].max()) > 0
  ok = (abs(keep - (1 - rate)) < 0.005 and max_out <= 1 / (1 - rate) + 0.02 and all(x < 0.05 for x in agree)
        and distinct_steps and layers_differ)
  return {"keep_rate": keep, "expected_keep_rate": 1 - rate, "max_output_uniform_probs": max_out,
          "fwd_bwd_scaled_gap_per_call": agree, "losses_per_call": [c[0] for c in calls],
          "masks_change_per_call": distinct_steps, "layers_with_different_seeds_differ": layers_differ,
          "pass": ok}


def probe_scan(rate: float = 0.1) -> dict:
  """Informational (not a verdict): the same forward/backward agreement with the kernel inside lax.scan
  over two layers. attention.py refuses cudnn_dropout under scan_layers because the backward scan runs
  the layers in reverse, so each backward kernel run would take the Philox offset of another layer's
  forward run; a gap near 0 here would show the refusal is unnecessary."""
  q, k, v, g, input_mask = _inputs(b=2, t=256, n=8)
  vs = jnp.stack([v, v[::-1]])

  def loss(vs, q, k, g, input_mask):
    def body(total, v_layer):
      out = attention.cudnn_dropout_attention(q, k, v_layer, input_mask, rate, seed=7)
      return total + jnp.sum(out.astype(jnp.float32) * g.astype(jnp.float32)), None
    return jax.lax.scan(body, jnp.float32(0), vs)[0]

  value, dvs = jax.jit(jax.value_and_grad(loss))(vs, q, k, g, input_mask)
  terms = dvs.astype(jnp.float32) * vs.astype(jnp.float32)
  gap = float(jnp.abs(value - jnp.sum(terms)) / jnp.sqrt(jnp.sum(terms * terms)))
  return {"fwd_bwd_scaled_gap_under_scan": gap, "consistent": gap < 0.05, "pass": True}


def run_stage(name: str, fn):
  t0 = time.perf_counter()
  try:
    result = fn()
  except Exception as e:
    result = {"pass": False, "error": f"{type(e).__name__}: {e}"[:2000]}
    REPORT["errors"].append({"stage": name, "traceback": traceback.format_exc()[-4000:]})
  result["seconds"] = round(time.perf_counter() - t0, 1)
  REPORT["numerics"][name] = result
  print(f"[numerics] {name}: {json.dumps(result)}", flush=True)
  return result


def run_bench(size: str, seq_len: int, batch: int, steps: int) -> None:
  from bert_jax.bench.__main__ import main as bench_main
  argv = [f"--size={size}", f"--seq_len={seq_len}", f"--batch_size={batch}", "--dtype=bfloat16",
          "--attention_impl=all", "--compare_hf", "--compile_hf", f"--steps={steps}", "--warmup=3"]
  print(f"[bench] python -m bert_jax.bench {' '.join(argv)}", flush=True)
  buf = io.StringIO()
  t0 = time.perf_counter()
  try:
    with contextlib.redirect_stdout(Tee(buf, sys.stdout)):
      bench_main(argv)
  except Exception as e:
    REPORT["errors"].append({"stage": f"bench {size}/{seq_len}/{batch}",
                             "traceback": traceback.format_exc()[-4000:]})
    print(f"[bench] failed: {type(e).__name__}: {e}", flush=True)
  for line in buf.getvalue().splitlines():
    if line.startswith("BENCH_JSON "):
      REPORT["bench"].append(json.loads(line[len("BENCH_JSON "):]))
  print(f"[bench] {size}/{seq_len}/{batch} took {time.perf_counter() - t0:.0f} s", flush=True)


class Tee(io.TextIOBase):
  def __init__(self, *streams):
    self.streams = streams

  def write(self, s):
    for st in self.streams:
      st.write(s)
    return len(s)

  def flush(self):
    for st in self.streams:
      st.flush()


def verdicts() -> dict:
  v = {}
  for path in ("cudnn_dropout", "cudnn"):
    checks = [REPORT["numerics"].get(f"{path}_vs_einsum", {}).get("pass")]
    if path == "cudnn_dropout":
      checks.append(REPORT["numerics"].get("cudnn_dropout_mask", {}).get("pass"))
    v[f"numerics_{path}"] = "PASS" if all(c is True for c in checks) else "FAIL"
  for (size, seq_len, batch), (ratio_min, mfu_min) in TARGETS.items():
    rows = [r for r in REPORT["bench"] if (r.get("size"), r.get("seq_len"), r.get("batch_size")) ==
            (size, seq_len, batch) and r.get("attention_dropout", 0) > 0 and "seq_per_sec" in r]
    if not rows:
      v[f"target_{size}_{seq_len}_{batch}"] = "NOT RUN"
      continue
    best = max(rows, key=lambda r: r["seq_per_sec"])
    ratio = best.get("ratio_vs_hf_compile")
    ok = ratio is not None and ratio >= ratio_min and best["mfu"] >= mfu_min
    v[f"target_{size}_{seq_len}_{batch}"] = (
        f"{'PASS' if ok else 'FAIL'}: best BERT-dropout path {best['attention_path']} {best['seq_per_sec']:.1f} "
        f"seq/s, MFU {best['mfu']:.3f} (target {mfu_min}), x{ratio if ratio is None else round(ratio, 3)} "
        f"HF torch.compile (target {ratio_min})")
  return v


def main(argv=None) -> int:
  p = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--skip_bench", action="store_true")
  p.add_argument("--memory_table", action="store_true", help="also the largest batch per path (slow)")
  p.add_argument("--steps", type=int, default=10, help="timed steps per benchmark row")
  args = p.parse_args(argv)
  if args.steps < 1:
    raise UserError(f"--steps={args.steps}; expected an integer >= 1")
  t_start = time.perf_counter()
  REPORT["environment"] = environment()
  print(f"[env] {json.dumps(REPORT['environment'])}", flush=True)
  if jax.default_backend() != "gpu":
    print("[env] not a GPU backend: the cuDNN paths cannot run here", flush=True)
  run_stage("cudnn_dropout_vs_einsum", lambda: check_equal_to_einsum("cudnn_dropout"))
  run_stage("cudnn_vs_einsum", lambda: check_equal_to_einsum("cudnn"))
  run_stage("cudnn_dropout_mask", check_dropout)
  run_stage("cudnn_dropout_under_scan_info", probe_scan)
  if not args.skip_bench:
    run_bench("base", 128, 256, args.steps)
    run_bench("large", 512, 64, args.steps)
  if args.memory_table:
    from bert_jax.bench.__main__ import main as bench_main
    bench_main(["--memory_table", "--size=base,large", "--seq_len=128,512", "--dtype=bfloat16",
                "--attention_impl=einsum,cudnn_dropout", "--probe=analysis", "--batch_start=32",
                "--batch_limit=2048", "--batch_multiple=16", "--memory_gib=139"])
  REPORT["verdicts"] = verdicts()
  REPORT["seconds"] = round(time.perf_counter() - t_start, 1)
  for k, val in REPORT["verdicts"].items():
    print(f"[verdict] {k}: {val}", flush=True)
  print(f"[done] {REPORT['seconds']} s, {len(REPORT['errors'])} errors", flush=True)
  out_dir = os.environ.get("OUT")
  if out_dir:
    with open(os.path.join(out_dir, "device_check.json"), "w", encoding="utf-8") as f:
      json.dump(REPORT, f, indent=1)
  return 0 if not REPORT["errors"] else 1


if __name__ == "__main__":
  cli.run_plain_main(main)   # a UserError: one `error:` line, exit 2 (--verbose: traceback)
