"""K fine-tuning runs in one compiled program: `jax.vmap` over stacked parameters and optimizer states.

    results = run_plans(plans)     # plans: FinetunePlans (finetune/plan.py), e.g. one per seed of a sweep point

Runs that differ only in `seed` (head init, dropout, the order of training examples) and `learning_rate`
train as one program: parameters and Adam moments carry a leading replica axis [K, ...], every replica
reads its own batch (its own shuffle) and folds its own dropout key, and one jitted step updates all K.
A tiny or mini model leaves most of a CPU core (or an accelerator) idle per step; K replicas fill it.

Each replica is still a whole run: its own work directory with metrics.jsonl, curves.png,
best_checkpoint/ and eval_results.json, exactly what `loop.run_plan` writes, its own early stopping (a
stopped replica is frozen: its parameters and optimizer state no longer change) and its own best
evaluation. `tests/test_finetune_multirun.py` checks that the results equal K separate runs.

The learning rate is per replica because every schedule here is the peak learning rate times a shape
(warmup, linear / polynomial / constant decay to end_learning_rate=0): the optimizer is built with a peak
of 1 and each replica's update is multiplied by its own peak. Runs fall back to one at a time, with the
reason logged (`decide`), when:
  - fields other than seed / learning rate differ (batch size, epochs, max_seq_length change shapes or the
    number of steps; the sweep groups by everything else first),
  - learning rates differ and end_learning_rate != 0 (the schedule is then not proportional to the peak),
  - grad_accum_steps > 1, several processes, no training, or config.multirun.enabled=false,
  - K x (parameters + 2 Adam moments + gradients) in float32 exceeds the memory limit
    (config.multirun.memory_limit_gb; -1: the device's limit where it reports one, else 1/4 of host RAM).
The program runs on one device (the first); a model big enough to need a sharded mesh is not what this
is for.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm.auto import tqdm

from bert_jax.finetune import data as ft
from bert_jax.finetune import loop
from bert_jax.finetune import model as fm
from bert_jax.finetune.plan import FinetunePlan
from bert_jax import fileio
from bert_jax.input_pipeline import tokenization
from bert_jax.models import dummy_inputs
from bert_jax.pretrained import load_pretrained, params_dir
from bert_jax.pretrained.load import merge_params
from bert_jax.engine import compile_cache, periodic, run_files
from bert_jax.engine import train_step as ts
from bert_jax.engine import workdir as workdir_lib
from bert_jax.engine.metric_writer import MetricWriter
from bert_jax.engine.timing import TrainClock

_log = logging.getLogger(__name__)

# Plan fields that may differ between the replicas of one program.
VARYING = ("workdir", "seed", "config", "optimizer")
BYTES_PER_PARAM = 16      # float32 params + Adam mu + nu + gradients


@dataclasses.dataclass(frozen=True)
class Decision:
  vmapped: bool
  reason: str


def _bytes(n: float) -> str:
  """A byte count for a log line: GiB from 1 GiB up, MiB (3 significant digits) below, where a small model's
  copies would read 0.0 GiB."""
  return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.3g} MiB"


def _param_count(plan: FinetunePlan) -> int:
  cfg = plan.model
  h, l, f, v = cfg.hidden_size, cfg.num_hidden_layers, cfg.intermediate_size, cfg.vocab_size
  return (v + cfg.max_position_embeddings + cfg.type_vocab_size) * h + l * (4 * h * h + 2 * h * f) + h * h


def memory_limit_bytes(plan: FinetunePlan) -> float:
  """config.multirun.memory_limit_gb, else the device's bytes_limit, else a quarter of host RAM."""
  gb = float(plan.multirun.get("memory_limit_gb", -1.0))
  if gb > 0:
    return gb * 2**30
  stats = jax.devices()[0].memory_stats() or {}
  if stats.get("bytes_limit"):
    return 0.5 * float(stats["bytes_limit"])     # the other half: activations of K batches
  try:
    return 0.25 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
  except (ValueError, OSError):
    return 4 * 2**30


def decide(plans: Sequence[FinetunePlan]) -> Decision:
  """Whether `plans` can train as one vmapped program, and why (not)."""
  k = len(plans)
  if k < 2:
    return Decision(False, "a single run")
  first = plans[0]
  if not all(p.multirun.get("enabled", False) for p in plans):
    return Decision(False, "config.multirun.enabled=false")
  if jax.process_count() > 1:
    return Decision(False, f"{jax.process_count()} processes (vmapped runs are single-process)")
  def settings(p):    # the plan as written to plan.json, without what may differ
    d = p.to_dict()
    return {name: v for name, v in d.items() if name not in VARYING}, {
        name: v for name, v in d["optimizer"].items() if name != "learning_rate"}
  base, base_opt = settings(first)
  differ, opt_differ = set(), set()
  for p in plans[1:]:
    mine, mine_opt = settings(p)
    differ |= {name for name in set(base) | set(mine) if base.get(name) != mine.get(name)}
    opt_differ |= {name for name in set(base_opt) | set(mine_opt) if base_opt.get(name) != mine_opt.get(name)}
  differ, opt_differ = sorted(differ), sorted(opt_differ)
  if differ or opt_differ:
    return Decision(False, "the runs differ in " + ", ".join(differ + ["optimizer." + n for n in opt_differ])
                    + " (only seed and learning_rate may differ)")
  if len({p.optimizer.learning_rate for p in plans}) > 1 and first.optimizer.end_learning_rate != 0.0:
    return Decision(False, f"learning rates differ and optimizer.end_learning_rate="
                           f"{first.optimizer.end_learning_rate:g} != 0 (the schedule is not peak x shape)")
  if len({os.path.abspath(p.workdir) for p in plans}) < k:
    return Decision(False, "two runs share a work directory")
  if not first.do_train:
    return Decision(False, "do_train=false (nothing to train)")
  if first.grad_accum_steps > 1:
    return Decision(False, f"grad_accum_steps={first.grad_accum_steps} (vmapped steps take whole batches)")
  need, limit = k * BYTES_PER_PARAM * _param_count(first), memory_limit_bytes(first)
  if need > limit:
    return Decision(False, f"{k} copies of the model need ~{_bytes(need)} of params and optimizer state, "
                           f"over the limit {_bytes(limit)} (config.multirun.memory_limit_gb)")
  return Decision(True, f"{k} runs differ only in seed / learning rate; ~{need / 2**20:.0f} MiB of state")


def run_plans(plans: Sequence[FinetunePlan]) -> List[dict]:
  """eval_results.json's content of every plan, in order: groups of at most multirun.max_replicas that pass
  `decide` train vmapped, the others one at a time (loop.run_plan). A run that diverges
  (NonFiniteError) gives {"error": message} instead of failing the others."""
  out: List[dict] = []
  if not plans:
    return out
  width = max(1, int(plans[0].multirun.get("max_replicas", 8)))
  size = -(-len(plans) // max(1, -(-len(plans) // width)))     # balanced: 10 runs, at most 8 -> 5 + 5
  for start in range(0, len(plans), size):
    group = list(plans[start:start + size])
    d = decide(group)
    if d.vmapped:
      _log.info("multirun: %d runs in one vmapped program (%s)", len(group), d.reason)
      out += run_vmapped(group)
    else:
      if len(group) > 1:
        _log.info("multirun: %d runs one at a time: %s", len(group), d.reason)
      for p in group:
        try:
          out.append(loop.run_plan(p))
        except ts.NonFiniteError as e:
          out.append({"error": str(e)})
  return out


# ---- the vmapped program -----------------------------------------------------------------------------------
def _stack(trees):
  return jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *trees)


def _row(tree, i: int):
  return jax.tree.map(lambda x: x[i], tree)


def init_stacked(plans: Sequence[FinetunePlan], model, device) -> Tuple[Any, List[dict]]:
  """(params [K, ...] on `device`, init reports): each replica's random init from its seed, drawn as
  train_step.init_params draws it (key(seed) split, first half), with the init checkpoint merged in and
  reinit_top_layers applied as loop.init_params does."""
  first = plans[0]
  inputs = dummy_inputs(model.config)[:3]

  def init(seed):
    key = jax.random.split(jax.random.key(seed))[0]
    return nn.unbox(model.init({"params": key}, *inputs, deterministic=True)["params"])

  fresh = jax.device_get(jax.jit(jax.vmap(init))(jnp.asarray([p.seed for p in plans], jnp.uint32)))
  rows = [_row(fresh, i) for i in range(len(plans))]
  reports = [{"init_checkpoint": first.init_checkpoint, "loaded": [], "unused": []} for _ in plans]
  if first.init_checkpoint is not None:
    pre = load_pretrained(first.init_checkpoint)
    for i, row in enumerate(rows):
      merged, rep = merge_params(row, pre.params, fm.init_groups(first))
      fm.check_init_groups(first, rep, pre.fresh_groups())
      if first.reinit_top_layers > 0:
        merged, again = fm.reinit_top_layers(merged, row, first.reinit_top_layers, first.model.num_hidden_layers)
        rep = dict(rep, reinitialised=again)
      rows[i] = params_dir.match_layout(merged, first.model.scan_layers)
      reports[i] = dict(reports[i], **rep)
  return jax.device_put(_stack(rows), device), reports


def make_steps(plans: Sequence[FinetunePlan], model, tx):
  """(train_step, predict_step), both vmapped over the replica axis and jitted.

  train_step(params, opt_state, rng, step, batch, learning_rate, active) -> (params, opt_state, metric sums):
  every argument but `step` has a leading [K] axis; the update of replica k is tx's (peak 1) times
  learning_rate[k], applied only where active[k] (and, with nan_policy=skip, where it is finite).
  predict_step(params, batch) -> {"outputs", "sums"} per replica on one shared batch, as fm.make_predict_step."""
  plan = plans[0]
  task, skip = plan.task, plan.nan_policy == "skip"
  loss_fn = fm.task_loss(model, task)

  def one_step(params, opt_state, rng, step, batch, learning_rate, active):
    key = jax.random.fold_in(jax.random.wrap_key_data(rng), step)    # = train_step._dropout_key
    denoms = loss_fn.denominators(batch)
    (loss, sums), grads = jax.value_and_grad(lambda p: loss_fn.forward(p, batch, key, denoms), has_aux=True)(params)
    grad_norm = optax.global_norm(grads)
    updates, new_opt = tx.update(grads, opt_state, params)
    updates = jax.tree.map(lambda u: u * learning_rate.astype(u.dtype), updates)
    new_params = optax.apply_updates(params, updates)
    param_norm = optax.global_norm(new_params)
    finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm) & jnp.isfinite(param_norm)
    apply = active & finite if skip else active
    keep = lambda new, old: jnp.where(apply, new, old)  # noqa: E731
    metrics = dict(sums, loss_sum=loss, loss_count=jnp.ones((), jnp.float32), grad_norm_sum=grad_norm,
                   param_norm_sum=param_norm, step_count=jnp.ones((), jnp.float32))
    zero = active & (finite | ~skip)
    metrics = {k: jnp.where(zero, v, jnp.zeros_like(v)) for k, v in metrics.items()}
    metrics["nonfinite_count"] = jnp.where(active, 1.0 - finite.astype(jnp.float32), 0.0)
    metrics["min_nonfinite_step"] = jnp.where(finite | ~active, ts.NO_NONFINITE, step + 1).astype(jnp.int32)
    metrics["max_finite_step"] = jnp.where(finite & active, step + 1, 0).astype(jnp.int32)
    return jax.tree.map(keep, new_params, params), jax.tree.map(keep, new_opt, opt_state), metrics

  train = jax.jit(jax.vmap(one_step, in_axes=(0, 0, 0, None, 0, 0, 0)), donate_argnums=(0, 1))

  def one_predict(params, batch):
    full = fm.apply_model(model, params, batch)
    return {"outputs": fm.row_outputs(full), "sums": task.loss_sums(full, batch) if task.eval_loss else {}}

  predict = jax.jit(jax.vmap(one_predict, in_axes=(0, None)))
  return train, predict


def evaluate_stacked(task, data: ft.SplitData, predict, params, k: int, batch_size: int) -> List[Tuple[dict, Any]]:
  """[(metrics, predictions)] of every replica on one split (loop.evaluate_split, K at once)."""
  outs: List[Dict[str, list]] = [{} for _ in range(k)]
  sums: List[Dict[str, float]] = [{} for _ in range(k)]
  for batch in ft.iterate_batches(data.rows, task.eval_keys, batch_size):
    real = ft.real_rows(batch)
    got = jax.device_get(predict(params, batch))
    for i in range(k):
      for name, v in got["outputs"].items():
        outs[i].setdefault(name, []).append(np.asarray(v[i])[:real])
      for name, v in got["sums"].items():
        sums[i][name] = sums[i].get(name, 0.0) + float(v[i])
  results = []
  for i in range(k):
    outputs = {name: np.concatenate(v, axis=0) for name, v in outs[i].items()}
    preds = task.predict(data.examples, data.features, data.unpack(outputs))
    metrics = dict(task.evaluate(data.examples, preds, data.split))
    if metrics and sums[i].get("task_weight_sum", 0.0) > 0:
      metrics["loss"] = sums[i]["task_loss_sum"] / sums[i]["task_weight_sum"]
    results.append((metrics, preds))
  return results


class _Bar:
  """What loop.Records.train needs of a progress bar, for replicas that share one bar."""

  def set_postfix(self, **_):
    pass


def run_vmapped(plans: Sequence[FinetunePlan]) -> List[dict]:
  """Trains and evaluates `plans` (passing `decide`) as one vmapped program; writes each run's files."""
  for p in plans:
    fileio.makedirs(p.workdir)
  locks = [workdir_lib.WorkdirLock(p.workdir, kind="finetune").acquire() for p in plans]
  try:
    compile_cache.enable(plans[0].compilation_cache_dir)
    return _run(plans)
  finally:
    for lock in locks:
      lock.release()


def _run(plans: Sequence[FinetunePlan]) -> List[dict]:
  t_start, first, k = time.time(), plans[0], len(plans)
  task = first.task
  tokenizer = tokenization.load_tokenizer(first.vocab_file, do_lower_case=first.do_lower_case)
  t_data = time.time()
  train, eval_data, test_data = loop.load_data(first, tokenizer)
  for p in plans:   # after the input checks: a rerun that fails on its data keeps the earlier results
    loop.clear_previous_outputs(p.workdir)
  data_seconds = round(time.time() - t_data, 2)
  schedule = first.schedule(train.num_rows)
  total = schedule["total_steps"]
  model = fm.build_model(task, first.model, first.classifier_dropout)
  device = jax.devices()[0]
  params, reports = init_stacked(plans, model, device)
  unit = dataclasses.replace(first, optimizer=dataclasses.replace(first.optimizer, learning_rate=1.0))
  tx, unit_schedule = loop.make_optimizer(unit, schedule)
  # committed to `device` like params: an uncommitted opt_state made the second step compile again (~6 s
  # for BERT-tiny on CPU), since the first step's outputs are committed
  opt_state = jax.device_put(jax.jit(jax.vmap(tx.init))(params), device)
  rngs = jnp.stack([jax.random.key_data(jax.random.split(jax.random.key(p.seed))[1]) for p in plans])
  lrs = jnp.asarray([p.optimizer.learning_rate for p in plans], jnp.float32)
  train_step, predict = make_steps(plans, model, tx)
  resolved = [loop.resolved_values(p, train, schedule, mesh="vmapped",
                                   multirun={"replicas": k, "seeds": [q.seed for q in plans]}) for p in plans]
  for p, res, rep in zip(plans, resolved, reports):
    run_files.write_run_files(p.workdir, p.to_dict(), p.config, res, rep)
  logs = [loop.Records(MetricWriter(p.workdir, fresh=True)) for p in plans]
  bests = [loop.BestCheckpoint(p, p.save_best_checkpoint) for p in plans]
  guards = [ts.NonFiniteGuard(p.nan_policy, p.max_consecutive_nonfinite, what=f"{task.name} seed {p.seed}")
            for p in plans]
  due = loop.timetable(first, schedule, evaluate=first.do_eval and bool(eval_data))
  stoppers = [periodic.EarlyStopping(first.early_stopping_patience) for _ in plans]
  errors: List[Optional[str]] = [None] * k
  active = np.ones(k, bool)
  np_rngs = [np.random.default_rng(p.seed) for p in plans]
  keys = task.device_keys
  bar = tqdm(total=total, desc=f"fine-tune {task.name} x{k} (vmapped)", mininterval=2.0, dynamic_ncols=True)
  step, sums, clock = 0, None, TrainClock()
  try:
    while step < total and active.any():
      for batches in zip(*[ft.iterate_batches(train.rows, keys, first.batch_size, r) for r in np_rngs]):
        batch = {name: np.stack([b[name] for b in batches]) for name in batches[0]}
        params, opt_state, m = train_step(params, opt_state, rngs, jnp.int32(step), batch, lrs, jnp.asarray(active))
        sums, step = ts.merge_metrics(sums, m), step + 1
        clock.step(m)
        bar.update(1)
        ep = due.epoch(step)
        if due.log(step):
          host = jax.device_get(sums)
          for i in np.flatnonzero(active):
            summary = ts.normalize({name: v[i] for name, v in host.items()})
            try:
              logs[i].train(step, ep, summary, float(lrs[i]) * float(unit_schedule(step - 1)), guards[i], _Bar())
            except ts.NonFiniteError as e:
              errors[i], active[i] = str(e), False
          sums = None
        if due.evaluate(step):
          scored = [evaluate_stacked(task, d, predict, params, k, first.eval_batch_size) for d in eval_data]
          for i in np.flatnonzero(active):
            results = {}
            for d, per in zip(eval_data, scored):
              results[d.split] = per[i][0]
              logs[i].write(dict(per[i][0], kind="eval", step=step, epoch=round(ep, 3), split=d.split))
            main = results[eval_data[0].split].get(task.main_metric)
            if stoppers[i].update(bests[i].offer(main, _row(params, i), step, ep, results)):
              _log.info("replica %d (seed %d): early stopping at step %d", i, plans[i].seed, step)
              active[i] = False
        if step >= total or not active.any():
          break
  finally:
    bar.close()
  jax.block_until_ready(params)
  trained = clock.summary(step)
  for i, b in enumerate(bests):
    if b.params is None:
      b.keep(jax.device_get(_row(params, i)), total, 0.0, {})
  best = jax.device_put(_stack([b.params for b in bests]), device)
  finals = [{"task": task.name, "main_metric": task.main_metric, "init_checkpoint": p.init_checkpoint,
             "best": b.summary()} for p, b in zip(plans, bests)]
  files: List[List[str]] = [[] for _ in plans]
  for d in eval_data + test_data:
    for i, (metrics, preds) in enumerate(evaluate_stacked(task, d, predict, best, k, first.eval_batch_size)):
      if metrics:
        finals[i][d.split] = metrics
      if first.do_predict:
        files[i] += task.write_predictions(plans[i].workdir, d.split, d.examples, preds)
  timing = dict(trained, data_seconds=data_seconds, total_seconds=round(time.time() - t_start, 2), vmapped_replicas=k)
  out = []
  for i, p in enumerate(plans):
    logs[i].writer.close()
    if errors[i] is not None:
      out.append({"error": errors[i]})
      continue
    r = dict(finals[i], prediction_files=[os.path.relpath(f, p.workdir) for f in files[i]], timing=timing,
             train=loop.train_summary(resolved[i]))
    fileio.write_json_atomic(fileio.join(p.workdir, "eval_results.json"), r)
    loop.plot_curves(p.workdir, logs[i].records, task.main_metric)
    out.append(r)
  return out

