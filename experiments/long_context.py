r"""Long context on a CPU: a modernbert encoder's training step at T = 512 .. 8,192 tokens, the sliding-window
layers computed by the block-local kernel (`local_attention_impl=blocked`) against a full masked T x T attention
(`dense`), which gives the same numbers (tests/test_modernbert.py).

    nice -n 10 python -m experiments.long_context --out=experiments/long_context.json   # ~10 min, 2 cores

Each (size, T, path) runs in its own process, so its peak resident memory (ru_maxrss) is its own:
* step: one MLM training step (forward, backward, AdamW) on a batch of 1 row of T tokens, 15% of them predicted,
  vocab 21,128; the fastest of `--steps` timed steps after the compiling one, wall and CPU time; XLA's
  temp-buffer size of the compiled step (memory_analysis) beside the process's peak RSS.
* sliding layer: one sliding-window layer alone (layer 1: window 128), forward + backward, timed the same way:
  the cost the kernel is responsible for, per token.
The global layers (every third, from layer 0) stay T x T in both arms: that is ModernBERT's design.

At batch 1 a short row fits the CPU caches and a long one does not, so per-token times grow with T for that
reason too. `--tokens_per_step=N` measures every T at the same tokens a step instead, N / T rows of T tokens
(N = 8,192: 16 x 512, 8 x 1,024, 4 x 2,048, 2 x 4,096, 1 x 8,192), for the step and the sliding layer alone;
its rows carry "rows" and "tokens_per_step", and the JSON and the markdown are their own table:

    nice -n 10 python -m experiments.long_context --tokens_per_step=8192 \
        --out=experiments/long_context_equal_tokens.json        # a quiet machine; the per-token columns compare
    python -m experiments.long_context --table=experiments/long_context_equal_tokens.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

from bert_jax import cli
from bert_jax.errors import UserError

LENGTHS = (512, 1024, 2048, 4096, 8192)
SIZES = ("tiny", "mini")
PATHS = ("blocked", "dense")
VOCAB = 21128


def _config(size: str, impl: str):
  from bert_jax.models import BertConfig
  return BertConfig.from_size(size, encoder="modernbert", vocab_size=VOCAB, max_position_embeddings=8192,
                              hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, local_attention_impl=impl)


def _time(fn, args, steps: int):
  """(wall, CPU) seconds of one call: the fastest of `steps` after the compiling call. The fastest, not the
  median: on a CPU shared with other jobs the slower runs measure the neighbours. CPU time sums XLA's threads."""
  import jax
  jax.block_until_ready(fn(*args))   # compile + first run
  wall, cpu = [], []
  for _ in range(steps):
    t0, c0 = time.perf_counter(), time.process_time()
    jax.block_until_ready(fn(*args))
    wall.append(time.perf_counter() - t0)
    cpu.append(time.process_time() - c0)
  return min(wall), min(cpu)


def batch_rows(lengths, tokens_per_step: int) -> dict:
  """{T: rows a step} for --tokens_per_step (0: one row each); UserError for a T that does not divide it."""
  if not tokens_per_step:
    return {t: 1 for t in lengths}
  bad = [t for t in lengths if tokens_per_step % t]
  if tokens_per_step < 1 or bad:
    raise UserError(f"--tokens_per_step={tokens_per_step}: expected a multiple of every --lengths value "
                    f"(not of {bad}), so that each T runs N / T whole rows")
  return {t: tokens_per_step // t for t in lengths}


def run_one(size: str, length: int, impl: str, steps: int, rows: int = 1) -> dict:
  import jax
  import jax.numpy as jnp
  import flax.linen as nn
  import numpy as np
  import optax
  from bert_jax.models import BertForPreTraining
  from bert_jax.models.encoders.modernbert import ModernBertLayer

  cfg = _config(size, impl)
  model = BertForPreTraining(cfg, targets=("mlm",))
  rng = np.random.default_rng(0)
  p = max(1, round(0.15 * length))
  ids = jnp.asarray(rng.integers(5, VOCAB, (rows, length)), jnp.int32)
  mask = jnp.ones((rows, length), jnp.int32)
  positions = jnp.asarray(np.stack([np.sort(rng.choice(length, p, replace=False)) for _ in range(rows)]),
                          jnp.int32)
  labels = jnp.asarray(rng.integers(5, VOCAB, (rows, p)), jnp.int32)
  params = nn.unbox(jax.jit(lambda r: model.init(r, ids, mask, None, positions))(jax.random.key(0))["params"])
  tx = optax.adamw(1e-4)
  opt = tx.init(params)

  def loss(params):
    logits = model.apply({"params": params}, ids, mask, None, positions)["mlm_logits"]
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

  @jax.jit
  def step(params, opt):
    value, grads = jax.value_and_grad(loss)(params)
    updates, opt = tx.update(grads, opt, params)
    return optax.apply_updates(params, updates), opt, value

  compiled = step.lower(params, opt).compile()
  temp = compiled.memory_analysis()
  temp_bytes = int(getattr(temp, "temp_size_in_bytes", 0)) if temp is not None else 0
  t_step, c_step = _time(lambda a, b: step(a, b)[2], (params, opt), steps)

  layer = ModernBertLayer(cfg, 1)                # a sliding-window layer (index 1 of 3)
  x = jax.random.normal(jax.random.key(1), (rows, length, cfg.hidden_size))
  pos = jnp.broadcast_to(jnp.arange(length)[None], (rows, length))
  lparams = nn.unbox(layer.init(jax.random.key(2), x, mask, pos)["params"])
  layer_grad = jax.jit(jax.grad(lambda lp, x: jnp.sum(layer.apply({"params": lp}, x, mask, pos) ** 2),
                                argnums=(0, 1)))
  t_layer, c_layer = _time(layer_grad, (lparams, x), steps)
  tokens = rows * length                         # per-token figures: over every token of the step
  return {"size": size, "T": length, "path": impl, "rows": rows, "step_s": t_step,
          "step_us_per_token": 1e6 * t_step / tokens, "step_cpu_us_per_token": 1e6 * c_step / tokens,
          "layer_s": t_layer, "layer_us_per_token": 1e6 * t_layer / tokens,
          "layer_cpu_us_per_token": 1e6 * c_layer / tokens, "xla_temp_mb": temp_bytes / 2 ** 20,
          "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
          "peak_rss_kb_per_token": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / tokens}


def plateau(size: str, lengths, steps: int) -> list:
  """The sliding layer alone (blocked) at lengths past 8,192, in this process: per-token CPU time flat from the
  length where the layer's arrays stop fitting the caches on is the linear cost; growth only up to there is the
  memory hierarchy, not the algorithm."""
  import jax
  import jax.numpy as jnp
  import flax.linen as nn
  from bert_jax.models.encoders.modernbert import ModernBertLayer
  cfg = _config(size, "blocked").replace(max_position_embeddings=max(lengths))
  layer = ModernBertLayer(cfg, 1)
  rows = []
  for length in lengths:
    x = jax.random.normal(jax.random.key(1), (1, length, cfg.hidden_size))
    mask, pos = jnp.ones((1, length), jnp.int32), jnp.arange(length)[None]
    lparams = nn.unbox(layer.init(jax.random.key(2), x, mask, pos)["params"])
    grad = jax.jit(jax.grad(lambda lp, x: jnp.sum(layer.apply({"params": lp}, x, mask, pos) ** 2), argnums=(0, 1)))
    wall, cpu = _time(grad, (lparams, x), steps)
    rows.append({"size": size, "T": length, "layer_us_per_token": 1e6 * wall / length,
                 "layer_cpu_us_per_token": 1e6 * cpu / length})
    print(json.dumps(rows[-1]), flush=True)
  return rows


def table(rows) -> str:
  """Markdown: per (size, T) the blocked and dense rows side by side, and the sliding layer's per-token time
  relative to T = 1,024 of the same path (the linearity goal: <= 1.5 at 8,192). A --tokens_per_step file
  ({"tokens_per_step": N, "rows": [...]}) is its own table, headed by N and with the rows of T a step."""
  if isinstance(rows, dict):
    n = int(rows["tokens_per_step"])
    return (f"At {n:,} tokens a step (N / T rows of T tokens); per-token figures over all {n:,}.\n\n"
            + _table(rows["rows"], rows_column=True))
  return _table(rows)


def _table(rows, rows_column: bool = False) -> str:
  by = {(r["size"], r["T"], r["path"]): r for r in rows if "error" not in r}
  out = ["| size | T |" + (" rows |" if rows_column else "") + " step ms/token blocked / dense | step CPU "
         "ms/token blocked / dense | sliding layer us/token blocked / dense | sliding layer CPU us/token blocked / "
         "dense (x T=1,024) | XLA temp MB blocked / dense | peak RSS MB blocked / dense |",
         "|---|---|" + ("---|" if rows_column else "") + "---|---|---|---|---|---|"]
  for size in dict.fromkeys(r["size"] for r in rows):
    for length in sorted({r["T"] for r in rows if r["size"] == size}):
      b, d = by.get((size, length, "blocked")), by.get((size, length, "dense"))
      cell = lambda key, f="{:.3g}": " / ".join(f.format(x[key]) if x else "-" for x in (b, d))  # noqa: E731
      rel = []
      for x in (b, d):
        base = by.get((size, 1024, x["path"])) if x else None
        rel.append(f"{x['layer_cpu_us_per_token']:.3g} ({x['layer_cpu_us_per_token'] / base['layer_cpu_us_per_token']:.2f}x)"
                   if x and base else (f"{x['layer_cpu_us_per_token']:.3g}" if x else "-"))
      n_rows = next((x.get("rows", 1) for x in (b, d) if x), 1)
      out.append(f"| {size} | {length:,} | " + (f"{n_rows} | " if rows_column else "") + " / ".join(f"{x['step_us_per_token'] / 1e3:.3g}" if x else "-"
                                                          for x in (b, d))
                 + " | " + " / ".join(f"{x['step_cpu_us_per_token'] / 1e3:.3g}" if x else "-" for x in (b, d))
                 + f" | {cell('layer_us_per_token')} | {' / '.join(rel)} | {cell('xla_temp_mb', '{:,.0f}')} | "
                 + f"{cell('peak_rss_mb', '{:,.0f}')} |")
  return "\n".join(out)


def main(argv=None) -> int:
  ap = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--sizes", default=",".join(SIZES))
  ap.add_argument("--lengths", default=",".join(map(str, LENGTHS)))
  ap.add_argument("--paths", default=",".join(PATHS))
  ap.add_argument("--steps", type=int, default=3, help="timed steps after the compiling one (the fastest is kept)")
  ap.add_argument("--tokens_per_step", type=int, default=0,
                  help="measure each T at N / T rows of T tokens (e.g. 8192); 0 (default): one row of T tokens")
  ap.add_argument("--out", default="", help="JSON file of the rows")
  ap.add_argument("--plateau", default="", help="sliding layer alone at these lengths (e.g. 1024,8192,32768)")
  ap.add_argument("--table", default="", help="print the markdown table of a JSON file of rows, and stop")
  ap.add_argument("--one", default="", help=argparse.SUPPRESS)   # size,T,path[,rows]: one measurement, here
  args = ap.parse_args(argv)
  if args.table:
    with open(args.table, encoding="utf-8") as f:
      print(table(json.load(f)))
    return 0
  if args.plateau:
    rows = plateau(args.sizes.split(",")[0], [int(x) for x in args.plateau.split(",")], args.steps)
    if args.out:
      from bert_jax import fileio
      fileio.write_json_atomic(args.out, rows)
    return 0
  if args.one:
    size, length, impl, *n = args.one.split(",")
    print(json.dumps(run_one(size, int(length), impl, args.steps, int(n[0]) if n else 1)))
    return 0
  per_step = batch_rows([int(x) for x in args.lengths.split(",")], args.tokens_per_step)
  rows = []
  for size in args.sizes.split(","):
    for length, n in per_step.items():
      for impl in args.paths.split(","):
        cmd = [sys.executable, "-m", "experiments.long_context", f"--one={size},{length},{impl},{n}",
               f"--steps={args.steps}"]
        done = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, JAX_PLATFORMS="cpu"))
        if done.returncode:
          row = {"size": size, "T": length, "path": impl, "rows": n,
                 "error": done.stderr.strip().splitlines()[-1:]}
        else:
          row = json.loads(done.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(json.dumps(row), flush=True)
        if args.out:   # after every row: a long sweep that is stopped keeps what it measured
          from bert_jax import fileio
          fileio.write_json_atomic(args.out, {"tokens_per_step": args.tokens_per_step, "rows": rows}
                                   if args.tokens_per_step else rows)
  return 0


if __name__ == "__main__":
  cli.run_plain_main(main)
