"""Fine-tuning loop: data from the task registry, a head on a (pre-trained) encoder, AdamW with warmup and
linear decay, evaluation with the official metric, the best checkpoint, and the files users submit.

    from bert_jax.finetune import loop
    results = loop.run(config, workdir)     # config: configs/finetune.py; = run_plan(resolve_finetune(...))

Start-up order: init_checkpoint (encoder weights, config, vocab; the head is initialised) else random init
from config.model.size + vocab_file. A run holds DIR/workdir.lock (bert_jax.engine.workdir: a second
finetune.py on the same dir stops at once naming the holder). Fine-tuning does not resume: a rerun starts
over (metrics.jsonl anew). SIGINT / SIGTERM stop after the current step and raise errors.Interrupted
(exit 130 / 143; best_checkpoint/ keeps the best evaluation so far); nan_policy=skip stops after
max_consecutive_nonfinite skipped steps in a row. Training runs ceil(num_train_epochs x batches per epoch) steps; the
last batch of an epoch is padded with zero-weight rows, so every example is seen once per epoch.

Files written to `workdir`:
  plan.json              the plan (finetune/plan.py): what the run does after presets and defaults
  config.json            the run config, plus the values resolved at start-up ("resolved")
  init_report.json       which parameters came from init_checkpoint and which were initialised
  metrics.jsonl          {"kind": "train", "step", "epoch", "loss", "accuracy", "learning_rate", "grad_norm"} per
                         log step and {"kind": "eval", "step", "epoch", "split", <task metrics>} per evaluation
  tensorboard/           the same scalars (tensorboardX)
  curves.png             train loss and the main eval metric against steps
  best_checkpoint/       params dir (model_config.json, params.msgpack, vocab.txt) of the best evaluation
                         + finetune_info.json (task, labels, max_seq_length, casing): `init_checkpoint` and
                         `bert_jax.finetune.predict.Predictor.from_workdir` read it
  eval_results.json      {"task", "main_metric", "best": {step, epoch, value}, "<split>": metrics, ...} for
                         every eval split (dev; MNLI dev_matched/dev_mismatched) and labelled test split,
                         computed with the best parameters, plus timing and the training summary
  predictions            GLUE: <task>_dev_predictions.tsv (index, prediction, gold label) and leaderboard
                         files (CoLA.tsv, MNLI-m.tsv, AX.tsv..) for test; SQuAD: predictions.json,
                         nbest_predictions.json (+ null_odds.json for v2);
                         NER: dev_predictions.txt / test_predictions.txt (CoNLL: word gold pred);
                         classification: <task>_<split>_predictions.tsv (index, prediction; dev splits
                         add the gold label column)
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import math
import os
import signal
import time
from typing import Any, Dict, List, Optional

import jax
import numpy as np
from tqdm.auto import tqdm

from bert_jax.errors import Interrupted, UserError
from bert_jax.finetune import data as ft
from bert_jax.finetune import model as fm
from bert_jax.finetune.plan import FinetunePlan, resolve_finetune
from bert_jax import fileio
from bert_jax.input_pipeline import tokenization
from bert_jax.input_warnings import warn_input
from bert_jax.pretrained import load_pretrained, params_dir
from bert_jax.pretrained.load import BEST_DIR, merge_params
from bert_jax.engine import compile_cache, optimizers, periodic, run_files, sharding
from bert_jax.engine import train_step as ts
from bert_jax.engine import workdir as workdir_lib
from bert_jax.engine.metric_writer import MetricWriter
from bert_jax.engine.timing import TrainClock

_log = logging.getLogger(__name__)

INFO_NAME = params_dir.FINETUNE_INFO_NAME


# ---- entry -------------------------------------------------------------------------------------------------
def run(config, workdir: str) -> dict:
  """What finetune.py does: the plan (UserError for a bad config, before weights or data are read), then
  `run_plan`. Returns the eval_results.json content."""
  return run_plan(resolve_finetune(config, workdir))


def run_plan(plan: FinetunePlan) -> dict:
  """Fine-tunes and evaluates as `plan` says, holding the work-dir lock; returns eval_results.json's content."""
  fileio.makedirs(plan.workdir)
  lock = workdir_lib.WorkdirLock(plan.workdir, kind="finetune").acquire()
  try:
    compile_cache.enable(plan.compilation_cache_dir)
    return _finetune(plan)
  finally:
    lock.release()


def _finetune(plan: FinetunePlan) -> dict:
  """Set-up, training with evaluation, the final evaluation with the best parameters."""
  t_start, is_main, task = time.time(), jax.process_index() == 0, plan.task
  _log.info("fine-tuning plan (%s):\n%s", fileio.join(plan.workdir, run_files.PLAN_NAME), plan.describe())
  tokenizer = tokenization.load_tokenizer(plan.vocab_file, do_lower_case=plan.do_lower_case)
  t_data = time.time()
  train, eval_data, test_data = load_data(plan, tokenizer)
  if is_main:   # after the input checks: a rerun that fails on its data keeps the earlier results
    clear_previous_outputs(plan.workdir)
  timing: Dict[str, Any] = {"data_seconds": round(time.time() - t_data, 2)}
  schedule = plan.schedule(train.num_rows if train else 0)
  model = fm.build_model(task, plan.model, plan.classifier_dropout)
  mesh = sharding.make_mesh(plan.mesh_shape, plan.mesh_axes)
  params, p_shard, init_report = init_params(plan, model, mesh)
  packed = {d.split: d.packed.summary() for d in [train] * bool(train) + eval_data + test_data if d.packed}
  resolved = resolved_values(plan, train, schedule, mesh=sharding.describe(mesh), packing=packed,
                             skipped={d.split: d.examples.skipped.to_dict()
                                      for d in [train] * bool(train) + eval_data + test_data
                                      if d.examples.skipped.total})
  if is_main:
    run_files.write_run_files(plan.workdir, plan.to_dict(), plan.config, resolved, init_report)
  predict_step = fm.make_predict_step(model, task, mesh, plan.logical_axis_rules, p_shard)
  log = Records(MetricWriter(plan.workdir, fresh=True))
  best = BestCheckpoint(plan, is_main and plan.save_best_checkpoint and plan.do_train)
  evaluator = Evaluator(plan, eval_data, predict_step, mesh, log, best)
  try:
    if train is not None and schedule["total_steps"] > 0:
      params = train_loop(plan, model, mesh, params, train, schedule, evaluator, log, timing)
    elif plan.do_eval and eval_data:
      evaluator(params, 0, 0.0)
    if best.params is None:   # no evaluation (no dev split, or do_eval=False): keep the last parameters
      best.keep(fm.to_host(params), schedule["total_steps"], 0.0, {})
    params = jax.device_put(best.params, p_shard)
    results = final_evaluation(plan, eval_data + test_data, predict_step, params, mesh, best)
  finally:
    log.writer.close()
  timing["total_seconds"] = round(time.time() - t_start, 2)
  results.update(timing=timing, train=train_summary(resolved))
  if is_main:
    fileio.write_json_atomic(fileio.join(plan.workdir, "eval_results.json"), results)
    plot_curves(plan.workdir, log.records, task.main_metric)
  _log.debug("eval results: %s", {k: v for k, v in results.items() if k != "prediction_files"})
  return results


def resolved_values(plan: FinetunePlan, train: Optional[ft.SplitData], schedule: Dict[str, int], **extra) -> dict:
  """config.json's "resolved": the plan, the task kind, the training data's size and the step schedule, plus
  `extra` (the mesh; skipped examples; a multi-run's replicas)."""
  return dict(plan.to_dict(), kind=plan.task.kind, learning_rate=plan.optimizer.learning_rate,
              train_examples=len(train.examples) if train else 0,
              train_features=int(train.features["input_ids"].shape[0]) if train else 0,
              train_rows=train.num_rows if train else 0, **extra, **schedule)


def train_summary(resolved: dict) -> dict:
  """eval_results.json's "train": what was trained on, for how long, at which learning rate."""
  keys = ("train_examples", "train_features", "steps_per_epoch", "total_steps", "learning_rate", "batch_size")
  out = {k: resolved[k] for k in keys}
  if resolved.get("packing"):   # rows per step, and each split's padding share before and after packing
    out.update(train_rows=resolved["train_rows"], packing=resolved["packing"])
  return out


def clear_previous_outputs(workdir: str) -> List[str]:
  """A run in a work directory that holds an earlier run's results starts over (fine-tuning does not resume):
  the earlier eval_results.json and the prediction files it lists are removed first, so no stale submission
  file (another task's, or a split this run does not predict) is left beside the new ones as if this run wrote
  it. Returns the removed paths (logged)."""
  path = fileio.join(workdir, "eval_results.json")
  if not fileio.exists(path):
    return []
  try:
    previous = json.loads(fileio.read_text(path))
  except (ValueError, OSError):
    previous = {}
  removed = []
  root = os.path.normpath(workdir)
  for name in (previous.get("prediction_files") or []) if isinstance(previous, dict) else []:
    f = os.path.normpath(fileio.join(workdir, str(name)))
    if f.startswith(root + os.sep) and fileio.isfile(f):   # only files inside the work directory
      fileio.remove(f)
      removed.append(f)
  fileio.remove(path)
  removed.append(path)
  _log.warning("work dir %s held an earlier run's results; removed them before starting over: %s", workdir,
               ", ".join(os.path.basename(f) for f in removed))
  return removed


# ---- set-up ------------------------------------------------------------------------------------------------
def load_data(plan: FinetunePlan, tokenizer):
  """(train SplitData or None, eval splits, test splits), read and featurised before any compilation, so bad
  input fails fast. An absent eval split is skipped with a warning, an absent test split silently."""
  task = plan.task
  train = None
  if plan.do_train:
    train = ft.load_split(task, plan.data, task.train_split, tokenizer, is_training=True)
    if train is None:
      # a UserError (one error: line): a folder of the wrong release (SQuAD v2.0 files for task=squad_v1)
      # passes the plan's train* check and ends here
      why = ft.why_missing(task, plan.data, task.train_split)
      raise UserError(f"task {task.name}: no {task.train_split} split in data_dir={plan.data.data_dir!r}"
                      + (f" / TFDS {plan.data.tfds_name}" if plan.data.tfds_name else "")
                      + (f" ({why})" if why else "") + "; see docs/finetuning.md ('Tasks') for each task's file names")
  eval_data, test_data = [], []
  where = f"TFDS {plan.data.tfds_name}" if plan.data.tfds_name else f"data_dir={plan.data.data_dir!r}"

  def named_split_missing(s, field):
    # A split the config names (not one of the task's defaults, which may be absent) must exist.
    why = ft.why_missing(task, plan.data, s)
    raise UserError(f"config.{field}: task {task.name} has no split {s!r} in {where}" + (f" ({why})" if why else "")
                    + "; name existing splits, or leave the field empty for the task's")

  if plan.do_eval or plan.do_predict:
    for s in plan.data.eval_splits or task.eval_splits:
      d = ft.load_split(task, plan.data, s, tokenizer)
      if d is None and plan.data.eval_splits:
        named_split_missing(s, "eval_splits")
      if d is None:
        # an input warning: repeated at exit (a run without a dev score must not look like a scored one);
        # --strict makes it an error
        why = ft.why_missing(task, plan.data, s)
        warn_input(f"task {task.name}: eval split {s!r} not found in {where}" + (f" ({why})" if why else "")
                   + "; no dev score, best checkpoint or early stopping from it")
      else:
        eval_data.append(d)
  if plan.do_predict:
    for s in plan.data.test_splits or task.test_splits:
      d = ft.load_split(task, plan.data, s, tokenizer)
      if d is None and plan.data.test_splits:
        named_split_missing(s, "test_splits")
      if d is not None:
        test_data.append(d)
  return train, eval_data, test_data


def init_params(plan: FinetunePlan, model, mesh):
  """(params on the mesh, their shardings, init report): random, with the init checkpoint's encoder (and, with
  load_head, its task head) merged in."""
  params, p_shard = ts.init_params(plan, model, mesh)
  report = {"init_checkpoint": plan.init_checkpoint, "loaded": [], "unused": [],
            "initialised": ["/".join(str(getattr(k, "key", k)) for k in p)
                            for p, _ in jax.tree_util.tree_flatten_with_path(params)[0]]}
  if plan.init_checkpoint is None:
    _log.info("random init: %s", plan.model)
    return params, p_shard, report
  fresh = params_dir.host_params(params)
  loaded = load_pretrained(plan.init_checkpoint)
  merged, rep = merge_params(fresh, loaded.params, fm.init_groups(plan))
  fm.check_init_groups(plan, rep, loaded.fresh_groups())
  if not any(p.startswith("bert/") for p in rep["loaded"]):
    raise ValueError(f"init_checkpoint {plan.init_checkpoint} holds none of the model's encoder parameters "
                     "(params['bert'])")
  if plan.load_head and not any(p.split("/")[0] in fm.HEAD_NAMES for p in rep["loaded"]):
    raise ValueError("load_head is set but the init_checkpoint has no task head of matching names and shapes")
  _log.info("init_checkpoint %s: loaded %d arrays, initialised %d (%s), unused %d (%s)", plan.init_checkpoint,
            len(rep["loaded"]), len(rep["initialised"]), ", ".join(rep["initialised"]), len(rep["unused"]),
            ", ".join(rep["unused"][:8]))
  if plan.reinit_top_layers > 0:
    merged, again = fm.reinit_top_layers(merged, fresh, plan.reinit_top_layers, plan.model.num_hidden_layers)
    rep = dict(rep, reinitialised=again)
    _log.info("reinit_top_layers=%d: %d arrays back to their random init", plan.reinit_top_layers, len(again))
  # p_shard has the model's tree structure, so it tells the layer layout the model expects.
  params = jax.device_put(params_dir.match_layout(merged, params_dir.is_scanned(p_shard)), p_shard)
  return params, p_shard, dict(report, **rep)


# ---- training ----------------------------------------------------------------------------------------------
def train_loop(plan: FinetunePlan, model, mesh, params, train: ft.SplitData, schedule: Dict[str, int],
               evaluate: "Evaluator", log: "Records", timing: dict):
  """Epochs over the shuffled training features; logs every log_every_steps, evaluates every
  eval_every_steps (0: each epoch), stops early after early_stopping_patience evaluations without a better
  main metric, or on SIGINT / SIGTERM (Interrupted). Returns the last parameters."""
  total = schedule["total_steps"]
  due = timetable(plan, schedule, evaluate=plan.do_eval and bool(evaluate.splits))
  stopper = periodic.EarlyStopping(plan.early_stopping_patience)
  tx, lr_schedule = make_optimizer(plan, schedule)
  state, shardings = ts.create_train_state(plan, model, mesh, tx, params=params)
  del params
  train_step = ts.make_train_step(plan, model, tx, mesh, shardings, loss_fn=fm.task_loss(model, plan.task))
  keys, rng = plan.task.device_keys, np.random.default_rng(plan.seed)
  signals = workdir_lib.StopSignals()
  guard = ts.NonFiniteGuard(plan.nan_policy, plan.max_consecutive_nonfinite, what=plan.task.name)
  bar = tqdm(total=total, desc=f"fine-tune {plan.task.name}", disable=jax.process_index() != 0, mininterval=2.0,
             dynamic_ncols=True)
  step, sums, clock, stop, examples = 0, None, TrainClock(), False, 0
  try:
    while step < total and signals.signum is None and not stop:
      for batch in ft.iterate_batches(train.rows, keys, plan.batch_size, rng):
        state, m = train_step(state, fm.to_global_batch(batch, mesh, plan.logical_axis_rules))
        sums, step = ts.merge_metrics(sums, m), step + 1
        examples += ft.examples_in(batch)
        clock.step(m)
        bar.update(1)
        if signals.reached(step):
          break
        if due.log(step):
          log.train(step, due.epoch(step), ts.normalize(sums), float(lr_schedule(step - 1)), guard, bar)
          sums = None
        if due.evaluate(step):
          stop = stopper.update(evaluate(state.params, step, due.epoch(step)))
          if stop:
            _log.info("early stopping at step %d: %d evaluations without a better %s", step, stopper.bad,
                      plan.task.main_metric)
            break
        if step >= total:
          break
  finally:
    signals.restore()
    bar.close()
  if signals.signum is not None:
    raise Interrupted(signals.signum, step, f"stopped by {signal.Signals(signals.signum).name} at step {step} of "
                      f"{total}; fine-tuning does not resume: rerun to start over (best_checkpoint/ holds the "
                      "best evaluation so far)")
  jax.block_until_ready(state.params)
  # examples, not rows: a packed row holds several (an unpacked run counts batch_size per step, as before)
  timing.update(clock.summary(step), train_examples_seen=examples)
  if timing["steps_per_second"] and step:
    timing["examples_per_second"] = round(timing["steps_per_second"] * examples / step, 2)
  return state.params


def timetable(plan: FinetunePlan, schedule: Dict[str, int], evaluate: bool) -> periodic.Schedule:
  """When a fine-tuning run logs and evaluates (`schedule`: plan.schedule's steps); `evaluate`: there is a split
  to score and do_eval is on."""
  return periodic.Schedule.epochs(schedule["total_steps"], schedule["steps_per_epoch"], plan.log_every_steps,
                                  schedule["eval_every_steps"], evaluate=evaluate)


def make_optimizer(plan: FinetunePlan, schedule: Dict[str, int]):
  """(tx, lr schedule): the plan's optimizer over the run's steps, with layer-wise learning-rate decay."""
  tx, lr_schedule = optimizers.make_optimizer(plan.optimizer, schedule["total_steps"], schedule["warmup_steps"])
  return optimizers.with_layerwise_lr_decay(tx, plan.layerwise_lr_decay, plan.model.num_hidden_layers), lr_schedule


@dataclasses.dataclass
class Records:
  """metrics.jsonl rows (+ TensorBoard scalars), kept for the curves plot."""
  writer: MetricWriter
  records: List[dict] = dataclasses.field(default_factory=list)

  def write(self, record: dict) -> None:
    self.records.append(record)
    prefix = record["kind"] + (f"_{record['split']}" if "split" in record else "") + "/"
    self.writer.write(record["step"], {k: v for k, v in record.items() if k != "step"}, tb_prefix=prefix)

  def train(self, step: int, epoch: float, summary: dict, learning_rate: float, guard, bar) -> None:
    guard.check(summary, step)
    rec = {"kind": "train", "step": step, "epoch": round(epoch, 3), "loss": summary.get("task_loss", math.nan),
           "learning_rate": learning_rate, "grad_norm": summary.get("grad_norm", math.nan)}
    if "task_accuracy" in summary:
      rec["accuracy"] = summary["task_accuracy"]
    if summary.get("nonfinite_count"):
      rec["nonfinite_count"] = summary["nonfinite_count"]
    self.write(rec)
    bar.set_postfix(loss=f"{rec['loss']:.4f}")


# ---- evaluation and the best checkpoint --------------------------------------------------------------------
def run_model(predict_step, params, features, keys, batch_size: int, mesh, rules):
  """(head outputs for every row of `features`, eval padding removed, as host numpy arrays; summed loss
  sums of the rows, {} when the step computes no loss)."""
  n = int(features["input_ids"].shape[0])
  outs: Dict[str, list] = {}
  sums: Dict[str, float] = {}
  for batch in ft.iterate_batches(features, keys, batch_size):
    real = ft.real_rows(batch)
    got = fm.to_host(predict_step(params, fm.to_global_batch(batch, mesh, rules)))
    for k, v in got["outputs"].items():
      outs.setdefault(k, []).append(np.asarray(v)[:real])
    for k, v in got["sums"].items():
      sums[k] = sums.get(k, 0.0) + float(v)
  out = {k: np.concatenate(v, axis=0) for k, v in outs.items()}
  assert all(v.shape[0] == n for v in out.values())
  return out, sums


def evaluate_split(task, data: ft.SplitData, predict_step, params, batch_size, mesh, rules):
  """(metrics, predictions) of one split with the official scorer (+ "loss" when labelled); metrics {}
  when the split has no labels."""
  outputs, sums = run_model(predict_step, params, data.rows, task.eval_keys, batch_size, mesh, rules)
  preds = task.predict(data.examples, data.features, data.unpack(outputs))
  metrics = dict(task.evaluate(data.examples, preds, data.split))
  if metrics and sums.get("task_weight_sum", 0.0) > 0:
    metrics["loss"] = sums["task_loss_sum"] / sums["task_weight_sum"]
  return metrics, preds


class BestCheckpoint:
  """The best evaluation so far: its parameters (host) and, when `save`, best_checkpoint/ on disk."""

  def __init__(self, plan: FinetunePlan, save: bool):
    self.plan, self.save = plan, save
    self.value, self.step, self.epoch, self.metrics, self.params = -math.inf, 0, 0.0, {}, None

  def offer(self, value: Optional[float], params, step: int, epoch: float, metrics: dict) -> bool:
    """Keeps `params` when `value` (the main metric) beats the best; True when it did. A NaN (STS-B's
    correlation of a constant prediction) never does: it compared False, became the best, and then every
    later evaluation, however bad, replaced it."""
    if value is None or not math.isfinite(value) or value <= self.value:
      return False
    self.value = float(value)
    self.keep(fm.to_host(params), step, epoch, metrics)
    return True

  def keep(self, host_params, step: int, epoch: float, metrics: dict) -> None:
    self.step, self.epoch, self.metrics, self.params = int(step), round(epoch, 3), metrics, host_params
    if self.save:
      save_best(fileio.join(self.plan.workdir, BEST_DIR), self.plan.model, host_params, self.plan.vocab_file,
                dict(self.plan.finetune_info, step=int(step), metrics=metrics))

  def summary(self) -> Optional[dict]:
    return {"value": self.value, "step": self.step, "epoch": self.epoch} if self.value > -math.inf else None


@dataclasses.dataclass
class Evaluator:
  """evaluator(params, step, epoch): every eval split scored and logged; True when the main metric of the first
  split improved (the best parameters are then kept)."""
  plan: FinetunePlan
  splits: List[ft.SplitData]
  predict_step: Any
  mesh: Any
  log: Records
  best: BestCheckpoint

  def __call__(self, params, step: int, epoch: float) -> bool:
    results = {}
    for d in self.splits:
      rec, _ = evaluate_split(self.plan.task, d, self.predict_step, params, self.plan.eval_batch_size, self.mesh,
                              self.plan.logical_axis_rules)
      results[d.split] = rec
      self.log.write(dict(rec, kind="eval", step=int(step), epoch=round(epoch, 3), split=d.split))
    if not results:
      return False
    _log.info("step %d (epoch %.2f) eval: %s", step, epoch, results)
    main = results[self.splits[0].split].get(self.plan.task.main_metric)
    return self.best.offer(main, params, step, epoch, results)


def final_evaluation(plan: FinetunePlan, splits, predict_step, params, mesh, best: BestCheckpoint) -> dict:
  """eval_results.json's metrics with the best parameters, and the prediction files (do_predict)."""
  results = {"task": plan.task.name, "main_metric": plan.task.main_metric, "init_checkpoint": plan.init_checkpoint,
             "best": best.summary()}
  files: List[str] = []
  for d in splits:
    metrics, preds = evaluate_split(plan.task, d, predict_step, params, plan.eval_batch_size, mesh,
                                    plan.logical_axis_rules)
    if metrics:
      results[d.split] = metrics
    if plan.do_predict and jax.process_index() == 0:
      files += plan.task.write_predictions(plan.workdir, d.split, d.examples, preds)
  results["prediction_files"] = [os.path.relpath(f, plan.workdir) for f in files]
  return results


def save_best(directory: str, bert_cfg, params, vocab_file: str, info: dict):
  """The best parameters as a params dir (un-scanned, float32) + finetune_info.json. Written next to the old
  one and swapped in by renames, so a crash leaves the previous best or the new one, never neither."""
  tmp, old = directory + ".tmp", directory + ".old"
  for d in (tmp, old):
    fileio.rmtree(d)
  # packing is how this run batched, not the model: a saved model takes one example per row unless told
  params_dir.save_params_dir(tmp, bert_cfg.replace(scan_layers=False, dtype="float32", remat_policy="none",
                                                   max_examples_per_row=0),
                             params, vocab_file, info={"do_lower_case": info["do_lower_case"],
                                                       "source": "finetune", "format": "bert_jax"})
  fileio.write_json_atomic(fileio.join(tmp, INFO_NAME), info)
  if fileio.exists(directory):
    fileio.rename(directory, old)      # the old best stays whole until the new one is complete (in tmp)
  fileio.rename(tmp, directory)
  fileio.rmtree(old)


def plot_curves(workdir: str, records: List[dict], main_metric: str) -> str:
  """curves.png: train loss (and eval loss) and the main eval metric against the step."""
  import matplotlib  # lazy: ~1 s of import, needed only once the run is over
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # lazy: as above
  train = [r for r in records if r["kind"] == "train"]
  evals = [r for r in records if r["kind"] == "eval" and main_metric in r]
  fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
  a1.plot([r["step"] for r in train], [r["loss"] for r in train], label="train loss")
  for split in sorted({r["split"] for r in evals}):
    pts = [r for r in evals if r["split"] == split]
    if "loss" in pts[0]:
      a1.plot([r["step"] for r in pts], [r["loss"] for r in pts], "o-", label=f"{split} loss")
    a2.plot([r["step"] for r in pts], [r[main_metric] for r in pts], "o-", label=split)
  a1.set_xlabel("step")
  a1.set_title("loss")
  a1.legend()
  a2.set_xlabel("step")
  a2.set_title(main_metric)
  if evals:
    a2.legend()
  fig.tight_layout()
  path = fileio.join(workdir, "curves.png")
  buf = io.BytesIO()
  fig.savefig(buf, format="png", dpi=80)
  plt.close(fig)
  fileio.write_bytes_atomic(path, buf.getvalue())
  return path
