"""The pre-training loop: `run_plan(plan)`; `train_and_evaluate(config, workdir)` resolves the plan first.

    plan = resolve_pretrain(config, workdir)    # pretrain/plan.py: validated, printed, saved as plan.json
    run_plan(plan)                              # set-up, the phases' steps, evaluation; nothing re-checked

Start-up order (explicit): resume from `workdir/checkpoints` (params, optimizer state, step, RNG, data
position) -> else `plan.init_checkpoint` (params only: a pre-training work dir, a converted params dir or
a zoo name) -> else from scratch.

Per step: each host reads its own shard of the data (bert_jax.input_pipeline.pretrain_dataset, per-host
batch = batch_size / process_count), jax.make_array_from_process_local_data assembles the global batch on
the mesh, the jitted train step runs asynchronously. The host synchronises only at logging, checkpoint and
evaluation steps.

Outputs in the work dir (see checkpoints.py for the checkpoint layout):
  metrics.jsonl       one JSON object per logging step: step, phase, seq_len, loss, mlm_loss, mlm_accuracy,
                      nsp_loss, nsp_accuracy (or sop_*), learning_rate, grad_norm, param_norm, seq_per_sec,
                      tokens_per_sec, mfu (when the device peak is known), nonfinite_count, time
  eval_metrics.jsonl  one object per evaluation: step and eval_loss, eval_mlm_loss, eval_mlm_accuracy,
                      eval_nsp_loss, eval_nsp_accuracy (eval_* keys also go to TensorBoard)
  tensorboard/        TensorBoard events (tensorboardX; no TensorFlow needed), train/ and eval/ scalars
  plots/loss_curve.png  MLM loss / accuracy curves, written at the end (matplotlib)
  plan.json           the plan the run follows (what the config resolved to)

NaN/Inf: nan_policy="stop" raises train_step.NonFiniteError (a UserError and a FloatingPointError) naming
the first bad step at the next host sync (logging or checkpoint step); "skip" leaves params and optimizer
state untouched for that step, counts it in `nonfinite_count`, and stops with that error once
`max_consecutive_nonfinite` steps in a row were skipped. No checkpoint ever holds non-finite parameters
(Checkpointer.save checks).

The work directory (bert_jax.engine.workdir): the run holds DIR/workdir.lock (a second run on it stops at
once naming the holder); the newest checkpoint that restores is used (a damaged newer one is moved aside,
see checkpoints.restore_latest_readable); metrics rows after the restored step and torn lines are dropped
(metric_writer.truncate_after). The plan has already refused a resume that asks for another architecture
than model_config.json and an init_checkpoint of another vocab size.

Signals: SIGINT (Ctrl-C) and SIGTERM (single process), or the JAX preemption sync point (multi-host), save a
checkpoint at the current step, wait for it and raise bert_jax.errors.Interrupted(signum, step) (the entry
point exits 128 + signum: 130 / 143). A second Ctrl-C while that checkpoint is written aborts at once. One
that arrives before the first step (the plan, restore, compile, the first batch) stops the run once start-up
ends, with no checkpoint written; its `interrupted:` line says so.

Out of device memory (XLA's RESOURCE_EXHAUSTED) is not retryable: one process raises a UserError naming the
step and phase (one `error:` line, exit 2), as the host guard does on a pod.
Multi-host, SIGTERM on any one host reaches every host through that sync point: all save the same step.

Dead, frozen or stuck hosts (engine/watchdog.py, HostGuard): every host publishes a heartbeat with its
step and phase; a host silent for config.distributed.heartbeat_timeout_s, or no finished step for the step
watchdog's limit, ends every host with one `error: host 1 of 2 stopped responding during step 41; newest
complete checkpoint: step 40; restart all hosts to resume` line and exit code 75 (errors.RETRYABLE_EXIT_CODE).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import io
import logging
import os
import signal
import threading
import time
from typing import Any, Callable, Dict, Optional

import jax
from jax._src import distributed as jax_distributed  # its preemption service: jax has no public handle
import numpy as np
from tqdm import tqdm

from bert_jax import lean_imports
from bert_jax.errors import Interrupted, UserError
from bert_jax import fileio
from bert_jax.input_pipeline import pretrain_dataset
from bert_jax.models import objectives, pretraining_model
from bert_jax.pretrained import load_pretrained, params_dir
from bert_jax.pretrained.load import CHECKPOINT_SUBDIR, merge_params
from bert_jax.engine import checkpoints, compile_cache, optimizers, periodic, sharding, timing, watchdog
from bert_jax.pretrain import batch_warmup, flops
from bert_jax.engine import train_step as ts
from bert_jax.engine import workdir as workdir_lib
from bert_jax.engine.metric_writer import MetricWriter, read_jsonl, truncate_after
from bert_jax.engine.run_files import PLAN_NAME
from bert_jax.pretrain.plan import Phase, PretrainPlan, phase_model, resolve_pretrain

log = logging.getLogger(__name__)


# ---- entry -------------------------------------------------------------------------------------------------
def maybe_initialize_distributed(config) -> None:
  """jax.distributed.initialize when asked (config.distributed.enable) or on a multi-host TPU slice."""
  d = config.distributed
  on_tpu_pod = "," in os.environ.get("TPU_WORKER_HOSTNAMES", "")
  if not (d.enable or on_tpu_pod) or jax.distributed.is_initialized():
    return
  if d.cpu_collectives:
    jax.config.update("jax_cpu_collectives_implementation", d.cpu_collectives)   # CPU multi-process (tests)
  kwargs = {}
  if d.coordinator_address:
    kwargs["coordinator_address"] = d.coordinator_address
  if int(d.num_processes) > 0:
    kwargs["num_processes"] = int(d.num_processes)
  if int(d.process_id) >= 0:
    kwargs["process_id"] = int(d.process_id)
  if "num_processes" in kwargs and kwargs.get("process_id", 0) >= kwargs["num_processes"]:
    raise UserError(f"config.distributed.process_id={kwargs['process_id']} with config.distributed.num_processes="
                    f"{kwargs['num_processes']}: expected a process id in [0, {kwargs['num_processes']})")
  try:
    watchdog.initialize_distributed(config, **kwargs)   # JAX's heartbeat and start-up limit: behind ours
  except ValueError as e:   # what JAX cannot auto-detect (no SLURM, no TPU pod) or rejects: one line, exit 2
    raise UserError(f"config.distributed.enable=true: {e} Pass --config.distributed.coordinator_address=HOST:PORT "
                    "(process 0's), --config.distributed.num_processes and --config.distributed.process_id, or "
                    "run under SLURM or on a TPU pod slice, where they are detected") from e
  log.info("jax.distributed: process %d of %d, %d local / %d global devices", jax.process_index(),
           jax.process_count(), jax.local_device_count(), jax.device_count())


def train_and_evaluate(config, workdir: str,
                       stop_requested: Callable[[], Optional[int]] = lambda: None) -> Dict[str, Any]:
  """What train.py does: jax.distributed when asked, the plan (UserError for a bad config, before any model
  or data work), then `run_plan`. `stop_requested()`: the signal number of a SIGTERM (or SIGINT) that
  arrived before this call's own handlers (train.py notes a SIGTERM while the libraries load), else None."""
  if not str(workdir or "").strip():     # "" was the current directory: checkpoints/, config.json ... there
    raise UserError(f"--workdir={workdir!r} is empty: expected the run's directory (a local path or gs://...), "
                    "e.g. --workdir=/tmp/bert_tiny")
  early, signals = stop_requested(), None
  if early is None:
    maybe_initialize_distributed(config)
    # One process: from here SIGINT / SIGTERM stop the run with an `interrupted:` line (exit 130 / 143), also
    # during the plan and start-up (restore, compile, the first batch), before any step.
    signals = workdir_lib.StopSignals()
    early = stop_requested()             # arrived during jax.distributed's start, before the handlers
    if (early == signal.SIGTERM and jax_distributed.global_state.preemption_sync_manager is not None
        and jax.process_count() > 1):
      # This host has joined the job, and JAX's SIGTERM handler (its preemption notice) is in place now: the
      # signal goes there, so every host stops at one step. Stopping alone left the other hosts waiting for
      # this one until the heartbeat timeout (exit 75) while its own exit aborted in jax.distributed's shutdown.
      log.warning("SIGTERM while joining the job: passed to every host as a preemption notice")
      os.kill(os.getpid(), signal.SIGTERM)
      early = None
  if early is not None:                  # nothing started: no lock, no plan, no checkpoint
    if signals is not None:
      signals.restore()
    watchdog.stop_watching_coordinator()
    raise Interrupted(early, 0, f"stopped by {signal.Signals(early).name} while starting, before the plan; no "
                      "checkpoint written, rerun to start (or resume)")
  try:
    return run_plan(resolve_pretrain(config, workdir), signals)
  finally:
    signals.restore()
    watchdog.stop_watching_coordinator()   # the host guard stopped it already, unless the run ended before it


def run_plan(plan: PretrainPlan, signals: Optional[workdir_lib.StopSignals] = None) -> Dict[str, Any]:
  """Runs (or resumes) pre-training as `plan` says, holding the work-dir lock; returns the last logged
  metrics (plus eval metrics if any) and the step. `signals`: SIGINT / SIGTERM handlers already installed
  (train_and_evaluate), else they are installed here."""
  own = signals is None
  signals = workdir_lib.StopSignals() if own else signals
  try:
    try:
      fileio.makedirs(plan.workdir)
    except OSError as e:     # e.g. a read-only or virtual file system: one line and exit 2, not a traceback
      raise UserError(f"--workdir={plan.workdir}: cannot create it ({e.strerror or e})") from e
    lock = workdir_lib.WorkdirLock(plan.workdir, kind="pretrain").acquire()   # before anything writes or cleans
    try:
      compile_cache.enable(plan.compilation_cache_dir)
      return _train(plan, lock, signals)
    finally:
      lock.release()
  finally:
    if own:
      signals.restore()


# ---- data -------------------------------------------------------------------------------------------------
def open_data(plan: PretrainPlan, phase: Phase, *, start_step: int = 0, evaluation: bool = False):
  """This host's batches of `phase` (plan.data, as `inspect` opens them); training batches with the batch-size
  warmup's rows weighted out (pretrain/batch_warmup.py)."""
  batches = pretrain_dataset.open_dataset(plan.data, phase.max_seq_length, phase.max_predictions_per_seq,
                                          phase_index=phase.index, evaluation=evaluation, start_step=start_step)
  if evaluation or not plan.batch_warmup.enabled:
    return batches
  return batch_warmup.WarmupBatches(batches, plan.batch_warmup, plan.batch_size, phase.start + start_step)


def to_global(batch: Dict[str, np.ndarray], batch_sharding) -> Dict[str, jax.Array]:
  """This host's rows -> one global jax.Array per feature, laid out as `batch_sharding`."""
  return {k: jax.make_array_from_process_local_data(batch_sharding, np.asarray(v)) for k, v in batch.items()}


def expected_batch_spec(plan: PretrainPlan, phase: Phase, batch_sharding) -> Dict[str, jax.ShapeDtypeStruct]:
  """The global batch `open_data` yields for `phase` (raw text, records, packed rows alike), as abstract
  arrays for compiling the train step before the first batch exists. tests/test_startup.py checks it
  against real batches."""
  b, t, p = plan.batch_size, phase.max_seq_length, phase.max_predictions_per_seq
  shapes = {"input_ids": (b, t), "input_mask": (b, t), "segment_ids": (b, t), "masked_lm_positions": (b, p),
            "masked_lm_ids": (b, p), "masked_lm_weights": (b, p), "next_sentence_labels": (b,)}
  return {k: jax.ShapeDtypeStruct(v, np.float32 if k == "masked_lm_weights" else np.int32,
                                  sharding=batch_sharding) for k, v in shapes.items()}


# ---- start-up ---------------------------------------------------------------------------------------------
def _initial_state(plan: PretrainPlan, model, mesh, tx, ckpt):
  """Start-up order: resume from the work dir -> init_checkpoint (params only) -> from scratch."""
  if ckpt.latest_step() is not None:
    state, _, meta = checkpoints.restore_latest_readable(ckpt, plan, model, mesh, tx)
    log.info("resumed from %s at step %d", ckpt.directory, int(meta.get("step", ckpt.latest_step())))
    return state
  if plan.init_checkpoint:
    fresh, _ = ts.init_params(plan, model, mesh)
    params, report = merge_params(params_dir.host_params(fresh), load_pretrained(plan.init_checkpoint).params)
    del fresh
    log.info("init_checkpoint=%s: %d tensors loaded, %d freshly initialised %s", plan.init_checkpoint,
             len(report["loaded"]), len(report["initialised"]), report["initialised"][:6])
    return ts.create_train_state(plan, model, mesh, tx, params=params)[0]
  log.info("initialised from scratch (seed %d)", plan.seed)
  return ts.create_train_state(plan, model, mesh, tx)[0]


def _start_state(plan, clock, ckpt, model, mesh, tx, train_step, abstract, batch_spec):
  """The state (restored or initialised) and, with `batch_spec`, the train step compiled ahead of time for it
  (jit's cache is filled, so the first real call only runs). A failed compile only costs the head start."""
  with clock.stage("state"):
    state = jax.block_until_ready(_initial_state(plan, model, mesh, tx, ckpt))
  if batch_spec is not None:
    with clock.stage("train-step compile"):
      try:
        train_step.lower(abstract, batch_spec).compile()
      except Exception as e:  # noqa: BLE001
        log.info("ahead-of-time compile of the train step skipped (%s: %s); the first step compiles it",
                 type(e).__name__, e)
  try:   # after the compile (off the GIL), which then overlaps the data thread's TensorFlow import
    lean_imports.tensorboardx()  # lazy: MetricWriter's import (~0.4 s), here off the data's critical path
  except ImportError:
    pass
  return state


def _open_first(plan, clock, phase: Phase, step: int, batch_spec, batch_sharding):
  """(iterator, first global batch) of the phase the run starts in: the data pipeline's whole start-up
  (TensorFlow import, reading and tokenizing raw text, the first batch), checked once against the batch the
  train step was compiled for."""
  with clock.stage("data"):
    data = open_data(plan, phase, start_step=step - phase.start)
    first = to_global(next(data), batch_sharding)
  got = {k: (tuple(v.shape), v.dtype) for k, v in first.items()}
  want = {k: (tuple(v.shape), v.dtype) for k, v in batch_spec.items()}
  if got != want:
    log.warning("the train step was compiled ahead of time for batches %s but the data gives %s: compiling "
                "again", want, got)
  return data, first


STARTUP_WAIT_ON_ERROR_S = 600.0   # how long a failed data start waits for the state's restore and compile


def _in_background(fn, *args) -> concurrent.futures.Future:
  """fn(*args) on a daemon thread (a user error on the main thread exits without waiting for a compile)."""
  future = concurrent.futures.Future()

  def work():
    if future.set_running_or_notify_cancel():
      try:
        future.set_result(fn(*args))
      except BaseException as e:  # noqa: BLE001 - re-raised by result() in the waiting thread
        future.set_exception(e)

  threading.Thread(target=work, name="model-start", daemon=True).start()
  return future


def _start(plan, ckpt, model, mesh, tx, train_step, abstract, batch_sharding):
  """(state, step, opened data of the resumed phase or None, start-up clock).

  Start-up runs two ways at once: this thread opens the data (TensorFlow import, tokenization, the first
  batch: Python, GIL-bound) while a second one initialises or restores the state and compiles the train step
  ahead of time (XLA: off the GIL). On 2 CPU cores a tiny run's first step comes ~19 s after launch instead
  of ~28 s, ~13 s with the compilation cache warm. Both are head starts the loop checks: the data opened
  here is used only if the restored step is the one expected.
  """
  clock = timing.StartupClock()
  expected = ckpt.latest_step() or 0
  phase = plan.phase_at(expected)
  spec = expected_batch_spec(plan, phase, batch_sharding) if phase is not None else None
  state_future = _in_background(_start_state, plan, clock, ckpt, model, mesh, tx, train_step, abstract, spec)
  try:
    opened = _open_first(plan, clock, phase, expected, spec, batch_sharding) if phase is not None else None
  except Exception:
    # The error ends the process (a user error: exit 2). An interpreter that exits while XLA still compiles
    # on the daemon thread aborts (exit 134 after the error line), which a launcher would retry: let the
    # start-up there finish first, for a bounded time.
    concurrent.futures.wait([state_future], timeout=STARTUP_WAIT_ON_ERROR_S)
    raise
  state = state_future.result()
  clock.ready()
  # plan.json, config.json, model_config.json, vocab.txt: written once the state is restored (or made), so a
  # resume whose config cannot restore the work dir's checkpoints (other targets, optimizer) leaves them as
  # they were: export-hf and fine-tuning read the work dir's targets and architecture from them
  plan.save()
  checkpoints.write_workdir_files(plan.workdir, plan.config, plan.model, plan.vocab_file)
  step = int(jax.device_get(state.step))
  if step != expected and opened is not None:
    log.info("restored step %d, not %d: the data opened ahead of time is not used", step, expected)
    opened = None
  if jax.process_index() == 0:      # rows logged after the restored step (a crash) and torn lines go
    for name in ("metrics.jsonl", "eval_metrics.jsonl"):
      truncate_after(fileio.join(plan.workdir, name), step)
  return state, step, opened, clock


# ---- the loop ---------------------------------------------------------------------------------------------
@dataclasses.dataclass
class _Run:
  """What the loop's steps share."""
  plan: PretrainPlan
  ckpt: checkpoints.Checkpointer
  writer: MetricWriter
  train_step: ts.StepFn
  eval_step: ts.StepFn
  schedule: Any
  batch_sharding: Any
  signals: workdir_lib.StopSignals
  nonfinite: ts.NonFiniteGuard
  clock: timing.StartupClock
  start_step: int
  progress: Optional[tqdm]
  peak_flops: Optional[float]
  guard: watchdog.HostGuard
  last: Dict[str, Any] = dataclasses.field(default_factory=dict)


def _train(plan: PretrainPlan, lock: workdir_lib.WorkdirLock, signals: workdir_lib.StopSignals) -> Dict[str, Any]:
  """Set-up, the phases, the end; the work-dir lock is held."""
  log.info("plan (%s):\n%s", fileio.join(plan.workdir, PLAN_NAME), plan.describe())
  ckpt = checkpoints.Checkpointer(fileio.join(plan.workdir, CHECKPOINT_SUBDIR), keep=plan.keep_checkpoints)
  signals.ckpt = ckpt                     # multi-host: the preemption sync point goes through it
  model = pretraining_model(plan.model, plan.objectives)
  mesh = sharding.make_mesh(plan.mesh_shape, plan.mesh_axes)
  batch_sharding = sharding.batch_sharding(mesh, plan.logical_axis_rules)
  tx, schedule = optimizers.make_optimizer(plan.optimizer, plan.num_train_steps, plan.warmup_steps)
  abstract, shardings = ts.abstract_train_state(plan, model, mesh, tx)
  train_step = ts.make_train_step(plan, model, tx, mesh, shardings)
  # Dead or stuck hosts end the run with one line and exit 75 (engine/watchdog.py); from here on, since
  # start-up (restore, compile, the first batch) can hang on a peer too.
  guard = watchdog.HostGuard(plan.guard, ckpt.directory, start_step=ckpt.latest_step() or 0)
  guard.at_exit(lock.release)
  guard.start()
  outcome = "failed"
  try:
    step, last = _run_phases(plan, ckpt, model, mesh, tx, train_step, abstract, shardings, batch_sharding,
                             schedule, guard, signals)
    if not last:      # a finished run started again (a relaunch, a restart after its end): its last rows, not
      last = _last_logged(plan.workdir)   # a bare "final: step=N"
    outcome = "done"
  except Interrupted:
    outcome = "stopped"
    raise
  except Exception as e:
    if not isinstance(e, UserError):     # e.g. a collective that lost its peer: name the host, exit 75
      guard.await_verdict(e)
      guard.fail(e)                      # peers alive: one line, exit 75 (JAX runtime) or 1, no 5-min wait
      if watchdog.is_out_of_memory(e):   # one process (fail returned): one line and exit 2, as multi-host
        raise UserError(_out_of_memory_message(guard, e)) from e
    raise
  finally:
    guard.stop(outcome)
  plot_loss_curve(plan.workdir)
  return dict(last, step=step)


def _out_of_memory_message(guard: watchdog.HostGuard, error: BaseException) -> str:
  """The one line of a single-process run out of device memory: where (the step and phase the guard last
  saw, or start-up), XLA's first line, what lowers the memory."""
  first = str(error).strip().splitlines()[0][:300] if str(error).strip() else ""
  where = ("start-up (initialising or restoring the state)" if guard.phase == "start" else
           f"step {guard.step + 1} ({guard.phase})")
  return f"{where} failed ({type(error).__name__}: {first}): {watchdog.OUT_OF_MEMORY_ADVICE}"


def _last_logged(workdir: str) -> Dict[str, Any]:
  """The last metrics.jsonl row merged with the last eval_metrics.jsonl row (without "step"), or {}."""
  out = {}
  for name in ("metrics.jsonl", "eval_metrics.jsonl"):
    rows = read_jsonl(fileio.join(workdir, name))
    if rows:
      out.update({k: v for k, v in rows[-1].items() if k != "step"})
  return out


def _run_phases(plan, ckpt, model, mesh, tx, train_step, abstract, shardings, batch_sharding, schedule,
                guard, signals) -> tuple:
  """Start-up, then the phases' steps from the resumed one: (final step, last logged metrics)."""
  if signals.reached_before_start():     # one process: a signal during the plan; nothing compiles yet
    raise _stopped_during_start_up(signals, ckpt.latest_step())
  state, step, opened, clock = _start(plan, ckpt, model, mesh, tx, train_step, abstract, batch_sharding)
  progress = (tqdm(total=plan.num_train_steps, initial=step, desc="pretrain", dynamic_ncols=True)
              if jax.process_index() == 0 and plan.progress_bar else None)
  run = _Run(plan, ckpt, MetricWriter(plan.workdir, purge_step=step + 1), train_step, ts.make_eval_step(plan, model, mesh, shardings),
             schedule, batch_sharding, signals,
             ts.NonFiniteGuard(plan.nan_policy, plan.max_consecutive_nonfinite, checkpoint=ckpt.latest_step),
             clock, step, progress,
             flops.peak_flops_per_device(dtype=plan.model.dtype, override=plan.peak_flops_per_device), guard)
  try:
    if run.signals.start(step, barrier=guard.barrier):   # every host agrees on a notice during start-up
      log.warning("stopped at step %d before training: a preemption notice arrived during start-up", step)
      raise _stopped_during_start_up(run.signals, ckpt.latest_step(), step)
    steps = {(): (run.train_step, run.eval_step)}     # per phase model changes (data.phases' 4th entry)
    for phase in plan.phases:
      if phase.end <= step:
        continue
      if phase.model not in steps:
        changed = pretraining_model(phase_model(plan.model, phase), plan.objectives)
        steps[phase.model] = (ts.make_train_step(plan, changed, tx, mesh, shardings),
                              ts.make_eval_step(plan, changed, mesh, shardings))
      run.train_step, run.eval_step = steps[phase.model]
      data, first = opened if opened is not None else (open_data(plan, phase, start_step=step - phase.start), None)
      opened = None
      log.info("%s: starting at step %d (batch %d of this phase)", phase, step, step - phase.start)
      guard.barrier(f"phase{phase.index}_step{step}")     # hosts start the phase's first collective together
      state, step = _train_phase(run, phase, state, step, data, first)
    guard.enter("finish")
    ckpt.wait()
  finally:
    run.signals.restore()
    if progress is not None:
      progress.close()
    run.writer.close()
    ckpt.close()
  return step, run.last


def _stopped_during_start_up(signals: workdir_lib.StopSignals, saved: Optional[int],
                             step: Optional[int] = None) -> Interrupted:
  """The Interrupted of a run stopped before its first step: it wrote no checkpoint; `saved` is the newest one
  on disk (a resume), if any."""
  signum = signals.signum or signal.SIGTERM
  name = signal.Signals(signum).name
  step = (saved or 0) if step is None else step
  if saved is None:
    message = (f"stopped by {name} during start-up, before step {step + 1}; no checkpoint written, a rerun "
               "starts from the beginning")
  else:
    message = (f"stopped by {name} during start-up at step {step}; no new checkpoint written, rerun to resume "
               f"from step {saved}")
  return Interrupted(signum, step, message)


def _train_phase(run: _Run, phase: Phase, state, step: int, data, first) -> tuple:
  """Steps [step, phase.end): train, and at the sync points log, checkpoint, evaluate or stop."""
  plan, acc, window = run.plan, None, timing.StepWindow()
  guard = run.guard
  due = periodic.Schedule(plan.num_train_steps, plan.log_every_steps,
                          plan.eval_every_steps if plan.data.eval_input_files else 0, plan.checkpoint_every_steps)
  while step < phase.end:
    guard.enter("data", step)
    batch = first if first is not None else to_global(next(data), run.batch_sharding)
    first = None
    guard.enter("compile" if window.start is None else "step")
    state, metrics = run.train_step(state, batch)
    step += 1
    acc = ts.merge_metrics(acc, metrics)
    synced = window.start is None
    if window.start is None:            # one sync after the phase's first step: compilation is not throughput
      jax.block_until_ready(metrics)
      window.synced()
      run.clock.first_step()
    else:
      window.step()
    if run.progress is not None:
      run.progress.update(1)
    at_end, preempted = step == phase.end, run.signals.reached(step)
    do_log = due.log(step, end=phase.end) or preempted
    do_ckpt = due.checkpoint(step, end=phase.end) or preempted
    if do_log or do_ckpt:
      summary = ts.normalize(acc)
      if summary.get("nonfinite_count"):
        run.ckpt.wait()
      run.nonfinite.check(summary, step, run.start_step)
      synced = True
    guard.step_done(step, synced=synced)
    if do_log:
      _log_window(run, phase, step, summary, window)
      acc = None
    if do_ckpt:
      guard.enter("checkpoint")
      run.ckpt.save(step, state, {"scan_layers": plan.model.scan_layers, "data": data.state(),
                                  "mesh": list(plan.mesh_shape), "process_count": jax.process_count(),
                                  "model_config": plan.model.to_dict()}, force=at_end or preempted)
      guard.progress()
    if due.evaluate(step):
      guard.enter("eval")
      ev = evaluate(plan, run.eval_step, state.params, phase, run.batch_sharding)
      run.writer.write(step, ev, filename="eval_metrics.jsonl", tb_prefix="eval/")
      run.last.update(ev)
      window.reset()                    # seq/s measures training steps only
      guard.progress()
    if preempted:
      guard.enter("checkpoint")
      run.ckpt.wait()
      log.warning("stopped at step %d: checkpoint saved, exiting", step)
      raise Interrupted(run.signals.signum or signal.SIGTERM, step)
  return state, step


def _log_window(run: _Run, phase: Phase, step: int, summary: dict, window: timing.StepWindow) -> None:
  """One metrics.jsonl row (and TensorBoard scalars) for the steps since the last logging step."""
  plan = run.plan
  row = dict(summary, phase=phase.index, seq_len=phase.max_seq_length,
             learning_rate=float(run.schedule(step - 1)), time=time.time())
  row.pop("last_finite_step", None)          # bookkeeping of the NaN guard, not a metric
  seq_per_sec = window.rate(plan.batch_size)
  if seq_per_sec is not None:
    row.update(seq_per_sec=seq_per_sec, tokens_per_sec=seq_per_sec * phase.max_seq_length)
    m = flops.mfu(seq_per_sec, plan.model, phase.max_seq_length, phase.max_predictions_per_seq,
                  jax.device_count(), run.peak_flops, plan.objectives)
    if m is not None:
      row["mfu"] = m
  run.writer.write(step, row)
  run.last = row
  if run.progress is not None:
    keys = [k for pair in curve_pairs(row) for k in pair[:2]] + ["seq_per_sec"]
    run.progress.set_postfix({k: f"{row[k]:.3g}" for k in keys if isinstance(row.get(k), float)})
  window.reset()


def evaluate(plan: PretrainPlan, eval_step, params, phase: Phase, batch_sharding) -> Dict[str, float]:
  """eval_steps batches of held-out data (the same batches every time: fixed seed, fresh iterator)."""
  data = open_data(plan, phase, evaluation=True)
  acc = None
  for _ in range(plan.eval_steps):
    try:
      batch = next(data)
    except StopIteration:
      break
    acc = ts.merge_metrics(acc, eval_step(params, to_global(batch, batch_sharding)))
  if acc is None:
    return {}
  return {f"eval_{k}": v for k, v in ts.normalize(acc).items()}


# ---- plots ------------------------------------------------------------------------------------------
def curve_pairs(*rows: dict) -> list:
  """The registered objectives' (loss, accuracy, title) curves whose loss one of `rows` has (MLM for BERT,
  generator + discriminator for ELECTRA): what the progress bar shows and the curves plot."""
  return [c for c in objectives.all_curves() if any(isinstance(r.get(c[0]), (int, float)) for r in rows)]


def plot_loss_curve(workdir: str) -> Optional[str]:
  """plots/loss_curve.png: each objective's loss and accuracy (train and eval) against the step, one row per
  curve the objectives name (MLM; LM; ELECTRA's generator and discriminator)."""
  if jax.process_index() != 0:
    return None
  rows = read_jsonl(fileio.join(workdir, "metrics.jsonl"))
  evals = read_jsonl(fileio.join(workdir, "eval_metrics.jsonl"))
  if not rows:
    return None
  import matplotlib  # lazy: ~1 s of import, needed only once the run is over
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # lazy: as above
  pairs = curve_pairs(*rows) or objectives.all_curves()[:1]
  fig, axes = plt.subplots(len(pairs), 2, figsize=(11, 4 * len(pairs)), squeeze=False)
  panels = [(axes[i][j], key, f"{title} {('loss', 'accuracy')[j]}")
            for i, (loss, acc, title) in enumerate(pairs) for j, key in enumerate((loss, acc))]
  for ax, key, title in panels:
    pts = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]
    if pts:
      ax.plot(*zip(*pts), label="train")
    epts = [(r["step"], r["eval_" + key]) for r in evals if isinstance(r.get("eval_" + key), (int, float))]
    if epts:
      ax.plot(*zip(*epts), "o-", label="eval")
    ax.set_xlabel("step")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if ax.lines:
      ax.legend()
  fig.tight_layout()
  path = fileio.join(workdir, "plots", "loss_curve.png")
  fileio.makedirs(fileio.join(workdir, "plots"))
  buf = io.BytesIO()
  fig.savefig(buf, format="png", dpi=100)
  plt.close(fig)
  fileio.write_bytes_atomic(path, buf.getvalue())
  return path
