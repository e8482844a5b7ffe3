"""The pre-training loop: `train_and_evaluate(config, workdir)`.

Start-up order (explicit): resume from `workdir/checkpoints` (params, optimizer state, step, RNG, data
position) -> else `config.init_checkpoint` (params only: a pre-training work dir, a converted params dir or
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

NaN/Inf: nan_policy="stop" raises train_step.NonFiniteError (a UserError and a FloatingPointError) naming
the first bad step at the next host sync (logging or checkpoint step); "skip" leaves params and optimizer
state untouched for that step, counts it in `nonfinite_count`, and stops with that error once
`max_consecutive_nonfinite` steps in a row were skipped. No checkpoint ever holds non-finite parameters
(Checkpointer.save checks).

The work directory (bert_jax.training.workdir): the run holds DIR/workdir.lock (a second run on it stops at
once naming the holder); the newest checkpoint that restores is used (a damaged newer one is moved aside,
see checkpoints.restore_latest_readable); metrics rows after the restored step and torn lines are dropped
(metric_writer.truncate_after); a resumed run must ask for the work dir's architecture (model_config.json);
an init_checkpoint must match data.vocab_file's size.

Signals: SIGINT (Ctrl-C) and SIGTERM (single process), or the JAX preemption sync point (multi-host), save a
checkpoint at the current step, wait for it and raise bert_jax.errors.Interrupted(signum, step) (the entry
point exits 128 + signum: 130 / 143). A second Ctrl-C while that checkpoint is written aborts at once.
"""

from __future__ import annotations

import io
import logging
import os
import signal
import threading
import time
from typing import Any, Dict, List, Optional

import jax
import numpy as np

from bert_jax.errors import Interrupted
from bert_jax.input_pipeline import fileio
from bert_jax.models import BertConfig, BertForPreTraining
from bert_jax.pretrained import load_pretrained, params_dir
from bert_jax.pretrained.load import check_vocab_matches, merge_params, read_config
from bert_jax.training import checkpoints, compile_cache, flops, optimizers, sharding, validation
from bert_jax.training import train_step as ts
from bert_jax.training import workdir as workdir_lib
from bert_jax.training.metric_writer import MetricWriter, read_jsonl, truncate_after

log = logging.getLogger(__name__)


# ---- config helpers ------------------------------------------------------------------------------------
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
  jax.distributed.initialize(**kwargs)
  log.info("jax.distributed: process %d of %d, %d local / %d global devices", jax.process_index(),
           jax.process_count(), jax.local_device_count(), jax.device_count())


class Phase:
  """A run segment with one sequence length: steps [start, end)."""

  def __init__(self, index, start, end, max_seq_length, max_predictions_per_seq):
    self.index, self.start, self.end = index, start, end
    self.max_seq_length, self.max_predictions_per_seq = max_seq_length, max_predictions_per_seq

  def __repr__(self):
    return (f"Phase({self.index}: steps [{self.start}, {self.end}), length {self.max_seq_length}, "
            f"{self.max_predictions_per_seq} predictions)")


def resolve_phases(config) -> List[Phase]:
  """config.data.phases ((fraction, max_seq_length, max_predictions), ...) -> Phases over num_train_steps."""
  total = int(config.num_train_steps)
  spec = tuple(config.data.phases or ())
  if not spec:
    return [Phase(0, 0, total, int(config.data.max_seq_length), int(config.data.max_predictions_per_seq))]
  fractions = [float(p[0]) for p in spec]
  if any(f <= 0 for f in fractions) or abs(sum(fractions) - 1.0) > 1e-6:
    raise ValueError(f"data.phases={spec}: fractions must be positive and sum to 1")
  phases, start, acc = [], 0, 0.0
  for i, (frac, length, preds) in enumerate(spec):
    acc += float(frac)
    end = total if i == len(spec) - 1 else int(round(acc * total))
    phases.append(Phase(i, start, end, int(length), int(preds)))
    start = end
  return [p for p in phases if p.end > p.start]


# ---- data -------------------------------------------------------------------------------------------
def make_dataset(config, input_files: str, phase: Phase, vocab_file: str, *, is_training: bool,
                 start_step: int = 0, seed_offset: int = 0):
  from bert_jax.input_pipeline import pretrain_dataset  # TensorFlow lives here only
  _hide_accelerators_from_tf()
  per_host = int(config.batch_size) // jax.process_count()
  d = config.data
  pair_mode = d.pair_mode
  if "sop" in tuple(config.targets):
    pair_mode = "sop"
  pack = bool(d.get("pack_sequences", False))    # budget preset: full-length MLM-only rows (packing.py)
  if pack and set(config.targets) & {"nsp", "sop"}:
    from bert_jax.errors import UserError  # pylint: disable=g-import-not-at-top
    raise UserError(f"data.pack_sequences=true makes rows without sentence pairs: set --config.targets="
                    f"'(\"mlm\",)' (got targets={tuple(config.targets)})")
  return pretrain_dataset.make_pretraining_dataset(
      input_files, batch_size=per_host, max_seq_length=phase.max_seq_length,
      max_predictions_per_seq=phase.max_predictions_per_seq, vocab_file=vocab_file, is_training=is_training,
      seed=int(config.seed) + 1000 * phase.index + seed_offset,
      masking=str(d.get("masking", "auto")), google_exact=bool(d.get("google_exact", False)),
      do_lower_case=bool(d.do_lower_case), whole_word_mask=bool(d.do_whole_word_mask),
      chinese_whole_word_mask=bool(d.chinese_whole_word_mask), masked_lm_prob=float(d.masked_lm_prob),
      short_seq_prob=float(d.short_seq_prob), pair_mode=pair_mode, pack_sequences=pack,
      process_index=jax.process_index(), process_count=jax.process_count(),
      num_epochs=None if is_training else 1 << 20,   # eval: repeat, take exactly eval_steps batches
      shuffle_buffer=int(d.shuffle_buffer), start_step=start_step)


def _hide_accelerators_from_tf():
  """tf.data runs on the host; keep TensorFlow off the GPUs that JAX uses."""
  try:
    import tensorflow as tf
    tf.config.set_visible_devices([], "GPU")
  except Exception:  # noqa: BLE001 - already initialised, or no GPU build
    pass


def to_global(batch: Dict[str, np.ndarray], batch_sharding) -> Dict[str, jax.Array]:
  """This host's rows -> one global jax.Array per feature, laid out as `batch_sharding`."""
  return {k: jax.make_array_from_process_local_data(batch_sharding, np.asarray(v)) for k, v in batch.items()}


# ---- plots ------------------------------------------------------------------------------------------
def plot_loss_curve(workdir: str) -> Optional[str]:
  """plots/loss_curve.png: MLM loss and accuracy (train and eval) against the step."""
  if jax.process_index() != 0:
    return None
  rows = read_jsonl(fileio.join(workdir, "metrics.jsonl"))
  evals = read_jsonl(fileio.join(workdir, "eval_metrics.jsonl"))
  if not rows:
    return None
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, axes = plt.subplots(1, 2, figsize=(11, 4))
  for ax, key, title in ((axes[0], "mlm_loss", "MLM loss"), (axes[1], "mlm_accuracy", "MLM accuracy")):
    pts = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]
    if pts:
      ax.plot(*zip(*pts), label="train")
    epts = [(r["step"], r["eval_" + key]) for r in evals if isinstance(r.get("eval_" + key), (int, float))]
    if epts:
      ax.plot(*zip(*epts), "o-", label="eval")
    ax.set_xlabel("step")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
  fig.tight_layout()
  path = fileio.join(workdir, "plots", "loss_curve.png")
  fileio.makedirs(fileio.join(workdir, "plots"))
  buf = io.BytesIO()
  fig.savefig(buf, format="png", dpi=100)
  plt.close(fig)
  fileio.write_bytes_atomic(path, buf.getvalue())
  return path


# ---- start-up ---------------------------------------------------------------------------------------
def _model_config_from_checkpoint(config, loaded: BertConfig, vocab_size: int) -> BertConfig:
  """The checkpoint's architecture with this run's compute settings (dtype, scan, remat, dropout)."""
  run = ts.build_model_config(config, vocab_size)
  keep = {k: getattr(run, k) for k in ("dtype", "param_dtype", "attention_impl", "scan_layers", "remat_policy",
                                       "hidden_dropout_prob", "attention_probs_dropout_prob")}
  return loaded.replace(**keep)


# ---- the loop ---------------------------------------------------------------------------------------
def _start(config, workdir: str, ckpt: checkpoints.Checkpointer):
  """(model_config, vocab_file, init_checkpoint params or None) in the start-up order: the work dir's own
  model config and vocab win on resume; else init_checkpoint's architecture; else the size table."""
  resume = ckpt.latest_step() is not None
  vocab_file = config.data.vocab_file
  if resume and fileio.exists(fileio.join(workdir, params_dir.VOCAB_NAME)):
    vocab_file = fileio.join(workdir, params_dir.VOCAB_NAME)
  loaded = None
  if not resume and config.init_checkpoint:
    loaded = load_pretrained(config.init_checkpoint)
    if vocab_file and fileio.exists(vocab_file):   # before any model or data work: ids must mean the same
      check_vocab_matches(loaded.config.vocab_size, loaded.directory, vocab_file)
    vocab_file = vocab_file or loaded.vocab_file
  if not vocab_file or not fileio.exists(vocab_file):
    raise FileNotFoundError(f"data.vocab_file={vocab_file!r} does not exist (needed for masking and the "
                            "vocab size)")
  vocab_size = int(config.model.vocab_size)
  if vocab_size <= 0:
    vocab_size = params_dir.count_vocab_lines(vocab_file)
  if resume and fileio.exists(fileio.join(workdir, params_dir.CONFIG_NAME)):
    saved = params_dir.read_model_config(workdir)
    _check_resume_architecture(config, workdir, saved, vocab_size)
    model_config = _model_config_from_checkpoint(config, saved, vocab_size)
  elif loaded is not None:
    model_config = _model_config_from_checkpoint(config, loaded.config, vocab_size)
  else:
    model_config = ts.build_model_config(config, vocab_size)
  return model_config, vocab_file, loaded


def _check_resume_architecture(config, workdir: str, saved: BertConfig, vocab_size: int) -> None:
  """A resumed run must ask for the model the work dir holds (UserError naming the differing fields):
  resuming a tiny work dir with size=mini would otherwise continue the tiny model under a mini config."""
  if config.init_checkpoint:
    try:
      wanted, source = read_config(config.init_checkpoint), f"init_checkpoint={config.init_checkpoint}"
    except FileNotFoundError as e:
      log.warning("resuming: cannot read init_checkpoint's model config to compare (%s)", e)
      return
  else:
    wanted, source = ts.build_model_config(config, vocab_size), f"model.size={config.model.size}"
  workdir_lib.check_resume_model_config(workdir, saved.to_dict(), wanted.to_dict(), source)


def _initial_state(config, model, mesh, tx, ckpt, loaded):
  """Start-up order: resume from the work dir -> init_checkpoint (params only) -> from scratch.
  Returns (state, shardings, checkpoint meta)."""
  if ckpt.latest_step() is not None:
    state, shardings, meta = checkpoints.restore_latest_readable(ckpt, config, model, mesh, tx)
    log.info("resumed from %s at step %d", ckpt.directory, int(meta.get("step", ckpt.latest_step())))
    return state, shardings, meta
  if loaded is not None:
    fresh, _ = ts.init_params(config, model, mesh)
    params, report = merge_params(params_dir.host_params(fresh), loaded.params)
    del fresh
    log.info("init_checkpoint=%s: %d tensors loaded, %d freshly initialised %s", config.init_checkpoint,
             len(report["loaded"]), len(report["initialised"]), report["initialised"][:6])
    state, shardings = ts.create_train_state(config, model, mesh, tx, params=params)
    return state, shardings, {}
  state, shardings = ts.create_train_state(config, model, mesh, tx)
  log.info("initialised from scratch (seed %d)", int(config.seed))
  return state, shardings, {}


def train_and_evaluate(config, workdir: str) -> Dict[str, Any]:
  """Runs (or resumes) pre-training; returns the last logged metrics (plus eval metrics if any)."""
  maybe_initialize_distributed(config)
  validation.validate_pretrain_config(config, workdir)   # UserError before any model or data work
  if not config.data.input_files.strip():
    raise ValueError("data.input_files is empty: pass --config.data.input_files=GLOB (raw .txt text or "
                     "TFRecords in Google's format)")
  workdir = fileio.abspath(workdir)
  fileio.makedirs(workdir)
  lock = workdir_lib.WorkdirLock(workdir, kind="pretrain").acquire()   # before anything writes or cleans
  try:
    compile_cache.enable(str(config.get("compilation_cache_dir", "auto")))
    return _train_and_evaluate(config, workdir)
  finally:
    lock.release()


def _process_start_time() -> float:
  """Wall-clock time this process started (Linux /proc), else when this module was imported."""
  try:
    with open("/proc/self/stat") as f:
      ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
      uptime = float(f.read().split()[0])
    return time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK")
  except (OSError, ValueError, IndexError):
    return _MODULE_IMPORTED


_MODULE_IMPORTED = time.time()


class _Background:
  """Runs fn() on a daemon thread from construction; `result()` waits and returns its value or re-raises its
  exception in the caller."""

  def __init__(self, fn, name: str):
    self._fn, self._value, self._error = fn, None, None
    self._thread = threading.Thread(target=self._run, name=name, daemon=True)
    self._thread.start()

  def _run(self):
    try:
      self._value = self._fn()
    except BaseException as e:  # noqa: BLE001 - re-raised by result() in the waiting thread
      self._error = e

  def result(self):
    self._thread.join()
    if self._error is not None:
      raise self._error
    return self._value


def _phase_at(phases: List[Phase], step: int) -> Optional[Phase]:
  return next((p for p in phases if p.start <= step < p.end), None)


def expected_batch_spec(config, phase: Phase, batch_sharding) -> Dict[str, jax.ShapeDtypeStruct]:
  """The global batch `make_dataset` yields for `phase` (raw text, records, packed rows alike), as abstract
  arrays for compiling the train step before the first batch exists. tests/test_startup.py checks it
  against real batches."""
  b, t, p = int(config.batch_size), phase.max_seq_length, phase.max_predictions_per_seq
  shapes = {"input_ids": (b, t), "input_mask": (b, t), "segment_ids": (b, t), "masked_lm_positions": (b, p),
            "masked_lm_ids": (b, p), "masked_lm_weights": (b, p), "next_sentence_labels": (b,)}
  return {k: jax.ShapeDtypeStruct(v, np.float32 if k == "masked_lm_weights" else np.int32,
                                  sharding=batch_sharding) for k, v in shapes.items()}


def _precompile(train_step, abstract_state, state_shardings, batch_spec) -> None:
  """Compiles the train step for the abstract state and batch (fills jit's cache, so the first real call
  only runs). A failure only costs the head start: it is logged and the first call compiles as usual."""
  try:
    state = jax.tree.map(lambda a, sh: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sh), abstract_state,
                         state_shardings)
    train_step.lower(state, batch_spec).compile()
  except Exception as e:  # noqa: BLE001
    log.info("ahead-of-time compile of the train step skipped (%s: %s); the first step compiles it",
             type(e).__name__, e)


def _open_data(config, phase: Phase, start_in_phase: int, vocab_file: str):
  """(iterator, first batch) of a phase: the data pipeline's whole start-up (TensorFlow import, reading and
  tokenizing raw text, the first batch)."""
  data = make_dataset(config, config.data.input_files, phase, vocab_file, is_training=True,
                      start_step=start_in_phase)
  return data, next(data)


def _train_and_evaluate(config, workdir: str) -> Dict[str, Any]:
  """train_and_evaluate's body, run while the work-dir lock is held."""
  startup = {"launch": _process_start_time(), "loop entered": time.time()}   # start-up stages, logged once
  targets = tuple(config.targets)
  ckpt = checkpoints.Checkpointer(fileio.join(workdir, checkpoints.CHECKPOINT_SUBDIR),
                                  keep=int(config.keep_checkpoints))
  model_config, vocab_file, loaded = _start(config, workdir, ckpt)
  model = BertForPreTraining(model_config, targets=targets)
  checkpoints.write_workdir_files(workdir, checkpoints.config_to_dict(config), model_config, vocab_file)

  mesh = sharding.make_mesh(tuple(config.mesh.shape), tuple(config.mesh.axes))
  rules = sharding.normalize_rules(config.logical_axis_rules)
  log.info("mesh %s; model %s", sharding.describe(mesh), {k: getattr(model_config, k) for k in (
      "num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size", "dtype", "scan_layers")})
  if int(config.batch_size) % jax.process_count():
    raise ValueError(f"batch_size={config.batch_size} is not a multiple of process_count={jax.process_count()}")
  tx, schedule = optimizers.optimizer_from_run_config(config)
  batch_sharding = sharding.batch_sharding(mesh, rules)
  # Start-up runs two ways at once: this thread opens the data (TensorFlow import, tokenization, the first
  # batch: Python, GIL-bound) while a second one initialises or restores the state and compiles the train
  # step ahead of time (XLA: off the GIL). On 2 CPU cores a tiny run's first step comes ~19 s after launch
  # instead of ~28 s, ~13 s with the compilation cache warm. Both are head starts the loop checks (the
  # restored step, the batch shapes).
  phases = resolve_phases(config)
  expected_step = ckpt.latest_step() or 0
  first_phase = _phase_at(phases, expected_step)
  # The batch the step is compiled for ahead of time; the first real batch is checked against it.
  spec = expected_batch_spec(config, first_phase, batch_sharding) if first_phase is not None else None
  abstract, shardings = ts.abstract_train_state(config, model, mesh, tx)
  train_step = ts.make_train_step(config, model, tx, mesh, shardings)

  def build_state():
    t0 = time.time()
    st, _, _ = _initial_state(config, model, mesh, tx, ckpt, loaded)
    jax.block_until_ready(st)
    secs = {"state": time.time() - t0}
    if spec is not None:
      t0 = time.time()
      _precompile(train_step, abstract, shardings, spec)
      secs["train-step compile"] = time.time() - t0
    try:
      import tensorboardX  # noqa: F401  (MetricWriter's import, ~2 s: off the data's critical path)
    except ImportError:
      pass
    return st, secs

  model_start = _Background(build_state, "model-start")
  parallel: Dict[str, float] = {}
  opened = None
  if first_phase is not None:
    t_data = time.time()
    opened = _open_data(config, first_phase, expected_step - first_phase.start, vocab_file)
    parallel["data"] = time.time() - t_data
  state, secs = model_start.result()
  parallel.update(secs)
  startup["ready"] = time.time()
  del loaded, abstract
  step = int(jax.device_get(state.step))
  start_step = step
  if jax.process_index() == 0:      # rows logged after the restored step (a crash) and torn lines go
    for name in ("metrics.jsonl", "eval_metrics.jsonl"):
      truncate_after(fileio.join(workdir, name), step)

  eval_step = ts.make_eval_step(config, model, mesh, shardings)
  total = int(config.num_train_steps)
  log_every = max(1, int(config.log_every_steps))
  ckpt_every = int(config.checkpoint_every_steps)
  eval_files = config.data.eval_input_files
  peak = flops.peak_flops_per_device(dtype=model_config.dtype, override=float(config.peak_flops_per_device))
  writer = MetricWriter(workdir)
  preemption = workdir_lib.StopSignals(ckpt)
  nonfinite = ts.NonFiniteGuard(config.nan_policy, int(config.max_consecutive_nonfinite),
                                checkpoint=ckpt.latest_step)
  last: Dict[str, Any] = {}
  progress = None
  if jax.process_index() == 0 and config.progress_bar:
    from tqdm import tqdm
    progress = tqdm(total=total, initial=step, desc="pretrain", dynamic_ncols=True)

  def save(at_step: int, data_state: dict, force: bool = False):
    ckpt.save(at_step, state, {"scan_layers": model_config.scan_layers, "data": data_state,
                               "mesh": list(mesh.devices.shape), "process_count": jax.process_count(),
                               "model_config": model_config.to_dict()}, force=force)

  try:
    for phase in phases:
      if phase.end <= step:
        continue
      start_in_phase = step - phase.start
      pending = None
      if opened is not None and phase is first_phase and step == expected_step:
        data, pending = opened
      else:
        if opened is not None:
          log.info("restored step %d, not %d: the data opened ahead of time is not used", step, expected_step)
        data = make_dataset(config, config.data.input_files, phase, vocab_file, is_training=True,
                            start_step=start_in_phase)
      opened = None
      log.info("%s: starting at step %d (batch %d of this phase)", phase, step, start_in_phase)
      acc = None
      window_start, window_steps, compiled = time.time(), 0, False
      while step < phase.end:
        host_batch = pending if pending is not None else next(data)
        pending = None
        batch = to_global(host_batch, batch_sharding)
        if spec is not None:
          got = {k: (tuple(v.shape), v.dtype) for k, v in batch.items()}
          want = {k: (tuple(v.shape), v.dtype) for k, v in spec.items()}
          if got != want:
            log.warning("the train step was compiled ahead of time for batches %s but the data gives %s: "
                        "compiling again", want, got)
          spec = None
        state, metrics = train_step(state, batch)
        step += 1
        acc = ts.merge_metrics(acc, metrics)
        if not compiled:            # one sync after the first step: exclude compilation from seq/s
          jax.block_until_ready(metrics)
          compiled, window_start, window_steps = True, time.time(), 0
          if "first step" not in startup:
            startup["first step"] = window_start
            model_part = " + ".join(f"{k} {v:.1f} s" for k, v in parallel.items() if k != "data")
            log.info("start-up: imports and config %.1f s; then at once: data %.1f s | %s; first step %.1f s "
                     "later; first step %.1f s after launch", startup["loop entered"] - startup["launch"],
                     parallel.get("data", 0.0), model_part,
                     startup["first step"] - startup["ready"], startup["first step"] - startup["launch"])
        else:
          window_steps += 1
        if progress is not None:
          progress.update(1)
        at_end = step == phase.end
        preempted = preemption.reached(step)
        do_log = step % log_every == 0 or at_end or preempted
        do_ckpt = (ckpt_every > 0 and step % ckpt_every == 0) or at_end or preempted
        if do_log or do_ckpt:
          summary = ts.normalize(acc)
          if summary.get("nonfinite_count"):
            ckpt.wait()
          nonfinite.check(summary, step, start_step)
        if do_log:
          elapsed = max(time.time() - window_start, 1e-9)
          seq_per_sec = window_steps * int(config.batch_size) / elapsed if window_steps else None
          row = dict(summary, phase=phase.index, seq_len=phase.max_seq_length,
                     learning_rate=float(schedule(step - 1)), time=time.time())
          row.pop("last_finite_step", None)          # bookkeeping of the NaN guard, not a metric
          if seq_per_sec is not None:
            row.update(seq_per_sec=seq_per_sec, tokens_per_sec=seq_per_sec * phase.max_seq_length)
            m = flops.mfu(seq_per_sec, model_config, phase.max_seq_length, phase.max_predictions_per_seq,
                          jax.device_count(), peak, targets)
            if m is not None:
              row["mfu"] = m
          writer.write(step, row)
          last = row
          if progress is not None:
            progress.set_postfix({k: f"{row[k]:.3g}" for k in ("mlm_loss", "mlm_accuracy", "seq_per_sec")
                                  if isinstance(row.get(k), float)})
          acc = None
          window_start, window_steps = time.time(), 0
        if do_ckpt:
          save(step, data.state(), force=at_end or preempted)
        if eval_files and config.eval_every_steps > 0 and (step % config.eval_every_steps == 0 or step == total):
          ev = evaluate(config, eval_step, state.params, eval_files, phase, vocab_file, batch_sharding)
          writer.write(step, ev, filename="eval_metrics.jsonl", tb_prefix="eval/")
          last.update(ev)
          window_start, window_steps = time.time(), 0    # seq/s measures training steps only
        if preempted:
          ckpt.wait()
          log.warning("stopped at step %d: checkpoint saved, exiting", step)
          raise Interrupted(preemption.signum or signal.SIGTERM, step)
    ckpt.wait()
  finally:
    preemption.restore()
    if progress is not None:
      progress.close()
    writer.close()
    ckpt.close()
  plot_loss_curve(workdir)
  return dict(last, step=step)


def evaluate(config, eval_step, params, eval_files: str, phase: Phase, vocab_file: str,
             batch_sharding) -> Dict[str, float]:
  """eval_steps batches of held-out data (the same batches every time: fixed seed, fresh iterator)."""
  data = make_dataset(config, eval_files, phase, vocab_file, is_training=False, seed_offset=7919)
  acc = None
  for _ in range(int(config.eval_steps)):
    try:
      batch = next(data)
    except StopIteration:
      break
    acc = ts.merge_metrics(acc, eval_step(params, to_global(batch, batch_sharding)))
  if acc is None:
    return {}
  return {f"eval_{k}": v for k, v in ts.normalize(acc).items()}
